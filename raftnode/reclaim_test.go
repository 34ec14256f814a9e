package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
)

// bigPush is a command of 100 messages of 10 KiB: a megabyte of segments.
func bigPush(queue string, round int) *fsm.Push {
	p := &fsm.Push{}
	for i := range 100 {
		p.Items = append(p.Items, fsm.PushItem{Queue: queue, Partition: "p", TxID: fmt.Sprintf("r%d-%d", round, i),
			Payload: bytes.Repeat([]byte{'x'}, 10<<10)})
	}
	return p
}

// linkBigQueue waits for n to lead and writes queue "big" over six
// commands, taking a snapshot after the third and the sixth: both link
// sealed segment files of it.
func linkBigQueue(t *testing.T, n *testNode) {
	t.Helper()
	waitLeader(t, n)
	for round := range 6 {
		if _, _, err := n.node.Propose(context.Background(), bigPush("big", round)); err != nil {
			t.Fatal(err)
		}
		if round == 2 || round == 5 {
			if err := n.node.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// heldBySnapshots sets a single-node cluster up so that its two snapshots
// link sealed segment files of queue "big", then deletes the queue: the
// files' space is then held only by the snapshots.
func heldBySnapshots(t *testing.T, n *testNode) {
	t.Helper()
	linkBigQueue(t, n)
	ctx := context.Background()
	if _, _, err := n.node.Propose(ctx, &fsm.DeleteQueue{Queue: "big"}); err != nil {
		t.Fatal(err)
	}
	// The store unlinks the files it freed at its next commit with no
	// reader open; another command makes sure one happened.
	if _, _, err := n.node.Propose(ctx, push("small", "s1")); err != nil {
		t.Fatal(err)
	}
}

// deadSnapshotFiles lists, without the store's help, the segment files in
// the snapshot directories that the live blob directory no longer has.
func deadSnapshotFiles(t *testing.T, dir string) (dead []string, snapshots int) {
	t.Helper()
	snaps, err := filepath.Glob(filepath.Join(dir, "raft", "snapshots", "*"))
	if err != nil {
		t.Fatal(err)
	}
	live, err := filepath.Glob(filepath.Join(dir, "state", "fsm.db.blobs-*", "*.seg"))
	if err != nil || len(live) == 0 {
		t.Fatalf("live segment files %v, %v", live, err)
	}
	names := map[string]bool{}
	for _, l := range live {
		names[filepath.Base(l)] = true
	}
	for _, s := range snaps {
		files, _ := filepath.Glob(filepath.Join(s, "*.seg"))
		for _, f := range files {
			if !names[filepath.Base(f)] {
				dead = append(dead, f)
			}
		}
	}
	return dead, len(snaps)
}

// A quiet node whose snapshots hold the segment files of a deleted queue
// takes their space back: a snapshot, then only the newest kept. Before,
// the space stayed until two more snapshots, which an idle cluster never
// takes. The node restarts from the one snapshot it keeps.
func TestQuietNodeTakesBackWhatSnapshotsHold(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig("n1", freeAddr(t), dir, nil)
	cfg.ReclaimBytes = 1 << 20
	cfg.ReclaimCheck = 200 * time.Millisecond
	n := startNode(t, cfg)
	heldBySnapshots(t, n)
	deadline := time.Now().Add(20 * time.Second)
	for {
		dead, snapshots := deadSnapshotFiles(t, dir)
		if len(dead) == 0 {
			if snapshots != 1 {
				t.Fatalf("%d snapshots kept after the reclaim, want the newest alone", snapshots)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s the snapshots still hold %d dead segment files: %v", len(dead), dead)
		}
		time.Sleep(100 * time.Millisecond)
	}
	held, err := n.node.snapshotHeld()
	if err != nil || held.Total() != 0 {
		t.Fatalf("held %+v, %v after the reclaim", held, err)
	}
	_, want, err := n.fsm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	n.stop()
	if err := os.Remove(filepath.Join(dir, "state", "fsm.db")); err != nil {
		t.Fatal(err)
	}
	n2 := startNode(t, cfg)
	waitLeader(t, n2)
	if _, got, err := n2.fsm.Digest(); err != nil || got != want {
		t.Fatalf("restored from the kept snapshot: digest differs (%v)", err)
	}
}

// The measurement and the reclaim itself: what the snapshots hold after a
// deletion is counted (in the newest, since the deletion came after it),
// and reclaiming leaves none of it and one snapshot. A node that applies
// log meanwhile (not quiet) and one with ReclaimBytes 0 do not reclaim.
func TestReclaimMeasuresAndFrees(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, fastConfig("n1", freeAddr(t), dir, nil))
	heldBySnapshots(t, n)
	held, err := n.node.snapshotHeld()
	if err != nil {
		t.Fatal(err)
	}
	dead, snapshots := deadSnapshotFiles(t, dir)
	if held.Newest <= 0 || len(dead) == 0 || snapshots != 2 {
		t.Fatalf("held %+v, dead files %v, %d snapshots: want the deleted queue's files in the newest of two", held, dead, snapshots)
	}
	var size int64
	var counted []os.FileInfo
	for _, f := range dead {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(counted, func(c os.FileInfo) bool { return os.SameFile(c, st) }) {
			counted = append(counted, st)
			size += st.Size()
		}
	}
	if held.Total() != size {
		t.Fatalf("held %d bytes, the distinct dead files hold %d", held.Total(), size)
	}
	if ls := n.node.LogStorage(); ls.SnapshotHeldBytes != uint64(size) {
		t.Fatalf("LogStorage (crown_snapshot_held_bytes) says %d bytes held, want %d", ls.SnapshotHeldBytes, size)
	}
	// Disabled: nothing happens however long it waits.
	rec := reclaimer{}
	n.node.maybeReclaim(&rec, time.Now())
	if d, _ := deadSnapshotFiles(t, dir); len(d) != len(dead) {
		t.Fatal("a node with ReclaimBytes 0 reclaimed")
	}
	if err := n.node.reclaim(); err != nil {
		t.Fatal(err)
	}
	if d, s := deadSnapshotFiles(t, dir); len(d) != 0 || s != 1 {
		t.Fatalf("after reclaim: dead files %v, %d snapshots", d, s)
	}
	if ls := n.node.LogStorage(); ls.SnapshotHeldBytes != 0 {
		t.Fatalf("LogStorage says %d bytes held after the reclaim", ls.SnapshotHeldBytes)
	}
}

// A snapshot whose metadata does not read, older than the newest readable
// one, is removed when the store opens; the file store never reaped it and
// its links kept dead segment files. A newer one stays for an operator.
func TestSnapshotStoreRemovesOlderUnreadableSnapshots(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, fastConfig("n1", freeAddr(t), dir, nil))
	heldBySnapshots(t, n)
	n.stop()
	base := filepath.Join(dir, "raft")
	snaps, err := newLinkingStore(base, 2, newHCLog(slog.New(slog.DiscardHandler), "test"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil || len(list) != 2 {
		t.Fatalf("snapshots %v, %v", list, err)
	}
	older := filepath.Join(snaps.dir, list[1].ID)
	if err := os.WriteFile(filepath.Join(older, "meta.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(snaps.dir, fmt.Sprintf("%d-%d-1", list[0].Term, list[0].Index+10))
	if err := os.Mkdir(newer, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := newLinkingStore(base, 2, newHCLog(slog.New(slog.DiscardHandler), "test")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(older); !os.IsNotExist(err) {
		t.Fatalf("the older unreadable snapshot is still there: %v", err)
	}
	if _, err := os.Stat(newer); err != nil {
		t.Fatalf("the newer unreadable snapshot was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(snaps.dir, list[0].ID)); err != nil {
		t.Fatalf("the newest readable snapshot was removed: %v", err)
	}
}

// distinctFiles lists the distinct files (by identity, not name) of the
// segment files under the glob patterns.
func distinctFiles(t *testing.T, patterns ...string) []os.FileInfo {
	t.Helper()
	var out []os.FileInfo
	for _, p := range patterns {
		names, err := filepath.Glob(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			st, err := os.Stat(name)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(out, func(c os.FileInfo) bool { return os.SameFile(c, st) }) {
				out = append(out, st)
			}
		}
	}
	return out
}

// A node that rebuilt its state from its newest snapshot holds copies of
// the files that snapshot links, under the same numbers, and the older
// snapshot links the very files the newest does. Removing the older one
// frees none of them; counting them as Older made a quiet node drop to
// one snapshot for nothing, said it took back the whole backlog and showed
// it in crown_snapshot_held_bytes. Older is checked against what removing
// the older snapshots frees, found from the files' identities on disk.
func TestHeldAfterARebuildCountsOnlyWhatRemovingOlderFrees(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig("n1", freeAddr(t), dir, nil)
	cfg.ReclaimBytes = 1 << 20
	cfg.ReclaimCheck = time.Hour // reclaim is called below, not by the node
	n := startNode(t, cfg)
	linkBigQueue(t, n)
	n.stop()
	if err := os.Remove(filepath.Join(dir, "state", "fsm.db")); err != nil {
		t.Fatal(err)
	}
	n = startNode(t, cfg) // restores the newest snapshot: the live files are copies now
	waitLeader(t, n)
	list, err := n.node.snaps.List()
	if err != nil || len(list) != 2 {
		t.Fatalf("snapshots %v, %v: want two", list, err)
	}
	keep := distinctFiles(t, filepath.Join(dir, "state", "fsm.db.blobs-*", "*.seg"),
		filepath.Join(n.node.snaps.dir, list[0].ID, "*.seg"))
	var freed int64
	for _, st := range distinctFiles(t, filepath.Join(n.node.snaps.dir, list[1].ID, "*.seg")) {
		if !slices.ContainsFunc(keep, func(c os.FileInfo) bool { return os.SameFile(c, st) }) {
			freed += st.Size()
		}
	}
	held, err := n.node.snapshotHeld()
	if err != nil {
		t.Fatal(err)
	}
	if held.Older != freed {
		t.Fatalf("held %+v: Older says removing the older snapshot frees %d bytes, it frees %d", held, held.Older, freed)
	}
	if err := n.node.reclaim(); err != nil {
		t.Fatal(err)
	}
	if list, err := n.node.snaps.List(); err != nil || len(list) != 2 {
		t.Fatalf("after a reclaim that could free %d bytes, %d snapshots kept (%v), want both", freed, len(list), err)
	}
}
