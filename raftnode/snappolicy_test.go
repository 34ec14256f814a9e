package raftnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/fsm"
)

func snapshotsOnDisk(t *testing.T, dir string) int {
	t.Helper()
	metas, err := filepath.Glob(filepath.Join(dir, "raft", "snapshots", "*", "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	return len(metas)
}

// A node snapshots when the bytes of log applied since its last snapshot
// reach SnapshotLogBytes, however few entries carried them, and not before.
func TestSnapshotWhenLogBytesReachThreshold(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig("n1", freeAddr(t), dir, nil)
	cfg.SnapshotLogBytes = 64 << 10
	cfg.SnapshotLogCheck = 10 * time.Millisecond
	cfg.SnapshotThreshold = 1 << 40 // Raft's entry count never fires here
	n := startNode(t, cfg)
	waitLeader(t, n)
	payload := bytes.Repeat([]byte("x"), 8<<10)
	pushBig := func(i int) {
		t.Helper()
		cmd := &fsm.Push{Items: []fsm.PushItem{{Queue: "q", Partition: "p", TxID: fmt.Sprintf("b%d", i), Payload: payload}}}
		if _, _, err := n.node.Propose(context.Background(), cmd); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 { // about 32 KiB of log: under the threshold
		pushBig(i)
	}
	if got := n.node.Status().LogBytesSinceSnapshot; got < 32<<10 || got >= 64<<10 {
		t.Fatalf("log bytes since snapshot %d after four 8 KiB pushes", got)
	}
	time.Sleep(200 * time.Millisecond) // twenty checks
	if k := snapshotsOnDisk(t, dir); k != 0 {
		t.Fatalf("%d snapshots under the threshold", k)
	}
	for i := 4; i < 9; i++ {
		pushBig(i)
	}
	waitFor(t, "a snapshot after 72 KiB of log", func() bool { return snapshotsOnDisk(t, dir) == 1 })
	waitFor(t, "the count to restart", func() bool { return n.node.Status().LogBytesSinceSnapshot < 64<<10 })
	for i := 9; i < 18; i++ {
		pushBig(i)
	}
	waitFor(t, "a second snapshot", func() bool { return snapshotsOnDisk(t, dir) == 2 })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type fakeSnapshot struct{ err error }

func (s fakeSnapshot) Persist(raft.SnapshotSink) error { return s.err }
func (fakeSnapshot) Release()                          {}

// Bytes count as held by a snapshot only once it is persisted, and a
// snapshot finishing late never moves the count back.
func TestLogBytesCoveredOnlyByPersistedSnapshots(t *testing.T) {
	c := &logBytesFSM{}
	c.applied.Add(1000)
	failed := &countedSnapshot{FSMSnapshot: fakeSnapshot{err: errors.New("disk full")}, owner: c, upTo: 1000}
	if err := failed.Persist(nil); err == nil {
		t.Fatal("failure swallowed")
	}
	if got := c.sinceSnapshot(); got != 1000 {
		t.Fatalf("after a failed snapshot %d pending, want 1000", got)
	}
	c.applied.Add(500)
	newer := &countedSnapshot{FSMSnapshot: fakeSnapshot{}, owner: c, upTo: 1500}
	older := &countedSnapshot{FSMSnapshot: fakeSnapshot{}, owner: c, upTo: 1000}
	for _, s := range []*countedSnapshot{newer, older} {
		if err := s.Persist(nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.sinceSnapshot(); got != 0 {
		t.Fatalf("after the newer snapshot %d pending, want 0", got)
	}
	c.applied.Add(70)
	if got := c.sinceSnapshot(); got != 70 {
		t.Fatalf("%d pending, want 70", got)
	}
}

func TestFirstSnapshotAt(t *testing.T) {
	for _, c := range []struct {
		rank, voters int
		want         uint64
	}{
		{0, 1, 300}, {0, 3, 100}, {1, 3, 200}, {2, 3, 300},
		{0, 5, 60}, {4, 5, 300},
		{-1, 3, 300}, {3, 3, 300}, {0, 0, 300}, // not a voter, or no configuration
	} {
		if got := firstSnapshotAt(300, c.rank, c.voters); got != c.want {
			t.Errorf("rank %d of %d: %d, want %d", c.rank, c.voters, got, c.want)
		}
	}
}

// Three nodes started together take their first snapshots at a third, two
// thirds and all of the threshold, in the order of their ids, rather than
// all at the same entry.
func TestSnapshotsAreStaggeredAcrossNodes(t *testing.T) {
	const threshold = 96 << 10
	var peers []Peer
	for i, addr := range freeAddrs(t, 3) {
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), Addr: addr})
	}
	var nodes []*testNode
	for _, p := range peers {
		cfg := fastConfig(p.ID, p.Addr, t.TempDir(), peers)
		cfg.SnapshotLogBytes = threshold
		cfg.SnapshotLogCheck = 5 * time.Millisecond
		cfg.SnapshotThreshold = 1 << 40
		nodes = append(nodes, startNode(t, cfg))
	}
	leader := waitLeader(t, nodes...)
	payload := bytes.Repeat([]byte("x"), 4<<10)
	first := make([]int, 3) // pushes after which each node had its first snapshot
	for i := 1; i <= 40 && slices.Contains(first, 0); i++ {
		cmd := &fsm.Push{Items: []fsm.PushItem{{Queue: "q", Partition: "p", TxID: fmt.Sprintf("s%d", i), Payload: payload}}}
		if _, _, err := leader.node.Propose(context.Background(), cmd); err != nil {
			t.Fatal(err)
		}
		// Every node has applied the entry and looked at its count.
		for _, n := range nodes {
			if err := n.fsm.WaitApplied(context.Background(), leader.fsm.AppliedIndex()); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(60 * time.Millisecond)
		for k, n := range nodes {
			if first[k] == 0 && snapshotsOnDisk(t, n.dir) > 0 {
				first[k] = i
			}
		}
	}
	// 4 KiB a push: a third of the threshold is 8 pushes.
	t.Logf("first snapshot after push %v", first)
	if !(first[0] < first[1] && first[1] < first[2]) || first[1]-first[0] < 4 || first[2]-first[1] < 4 {
		t.Fatalf("first snapshots after pushes %v: not a third of the threshold apart in id order", first)
	}
	if first[2] > 26 {
		t.Fatalf("the last node's first snapshot came after %d pushes, past the threshold", first[2])
	}
}
