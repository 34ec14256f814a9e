package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
)

// twoLinkedSnapshots pushes rounds megabytes to a single node and takes a
// snapshot after every third round: two snapshots that link several sealed
// segment files.
func twoLinkedSnapshots(t *testing.T, n *testNode, rounds int) {
	t.Helper()
	waitLeader(t, n)
	for round := range rounds {
		if _, _, err := n.node.Propose(context.Background(), bigPush("big", round)); err != nil {
			t.Fatal(err)
		}
		if round%3 == 2 {
			if err := n.node.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// The leader opens the newest snapshot to send it, and a reclaim (or the
// file store's reaping) may remove it before the follower has it all: the
// stream, once open, must still be whole. A file of it removed before it
// opens makes the open fail, never a stream short of a file.
func TestSnapshotStreamOutlivesItsRemoval(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, fastConfig("n1", freeAddr(t), dir, nil))
	twoLinkedSnapshots(t, n, 6)
	list, err := n.node.snaps.List()
	if err != nil || len(list) != 2 {
		t.Fatalf("snapshots %v, %v", list, err)
	}
	older := list[1].ID
	segs, _ := filepath.Glob(filepath.Join(n.node.snaps.dir, older, "*.seg"))
	if len(segs) < 2 {
		t.Fatalf("the older snapshot links %d segment files, want several", len(segs))
	}
	meta, rc, err := n.node.snaps.Open(older)
	if err != nil {
		t.Fatal(err)
	}
	want, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || int64(len(want)) != meta.Size {
		t.Fatalf("read %d of %d bytes: %v", len(want), meta.Size, err)
	}
	_, rc, err = n.node.snaps.Open(older)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 4096)
	if _, err := io.ReadFull(rc, head); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(n.node.snaps.dir, older)); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatalf("the stream of a snapshot removed while it was read broke: %v", err)
	}
	if got := append(head, rest...); !bytes.Equal(got, want) {
		t.Fatalf("the stream of a snapshot removed while it was read differs: %d bytes, want %d", len(got), len(want))
	}
	// The newest, with one of its files gone: the open fails.
	segs, _ = filepath.Glob(filepath.Join(n.node.snaps.dir, list[0].ID, "*.seg"))
	if err := os.Remove(segs[len(segs)/2]); err != nil {
		t.Fatal(err)
	}
	if _, rc, err := n.node.snaps.Open(list[0].ID); err == nil {
		rc.Close()
		t.Fatal("a snapshot missing a segment file opened")
	}
}

// A follower catching up by InstallSnapshot while the leader reclaims: the
// leader takes a snapshot and removes the one it may be streaming, again
// and again while the follower receives. The follower must end with the
// leader's state, retrying with the newer snapshot if a send broke.
func TestReclaimWhileAFollowerInstallsASnapshot(t *testing.T) {
	var logged lockedBuffer
	cfgs := clusterConfigs(t, 3, func(c *Config) {
		c.TrailingLogs = 1 // the follower behind needs a snapshot
		c.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	})
	nodes := make([]*testNode, 3)
	for i := range cfgs {
		nodes[i] = startNode(t, cfgs[i])
	}
	leader := waitLeader(t, nodes...)
	var lagging *testNode
	var li int
	for i, n := range nodes {
		if n != leader {
			lagging, li = n, i
		}
	}
	lagging.stop()
	ctx := context.Background()
	for round := range 24 {
		if _, _, err := leader.node.Propose(ctx, bigPush("big", round)); err != nil {
			t.Fatal(err)
		}
		if round%8 == 7 {
			if err := leader.node.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
	}
	lagging = startNode(t, cfgs[li])
	nodes[li] = lagging
	followerSnaps := filepath.Join(cfgs[li].DataDir, "raft", "snapshots")
	// The leader snapshots and removes the older one 40 times while the
	// follower catches up; with one trailing entry, each time it is
	// behind it needs a snapshot again.
	removedMidStream := 0
	for round := range 40 {
		if tmps, _ := filepath.Glob(filepath.Join(followerSnaps, "*.tmp")); len(tmps) > 0 {
			removedMidStream++
		}
		if _, _, err := leader.node.Propose(ctx, push("small", fmt.Sprintf("s%d", round))); err != nil {
			t.Fatal(err)
		}
		if err := leader.node.Snapshot(); err != nil {
			t.Fatal(err)
		}
		if err := leader.node.snaps.removeOlder(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(round%5) * 5 * time.Millisecond)
	}
	text := logged.String()
	t.Logf("snapshots removed on the leader while the follower received one: %d; sends that failed: %d, installs: %d",
		removedMidStream, strings.Count(text, "failed to send snapshot"), strings.Count(text, "Installed remote snapshot"))
	if _, _, err := leader.node.Propose(ctx, push("small", "last")); err != nil {
		t.Fatal(err)
	}
	waitSameDigest(t, 20*time.Second, nodes...)
}

// waitSameDigest waits until every node has applied as far as the first
// and their digests agree.
func waitSameDigest(t *testing.T, within time.Duration, nodes ...*testNode) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var digests []string
		var applied []uint64
		for _, n := range nodes {
			a, d, err := n.fsm.Digest()
			if err != nil {
				t.Fatal(err)
			}
			digests, applied = append(digests, d), append(applied, a)
		}
		same := true
		for i := range digests {
			same = same && digests[i] == digests[0] && applied[i] == applied[0]
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("digests differ after %v: applied %v, digests %s", within, applied, strings.Join(digests, " "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startHeldCluster starts three nodes, each configured by adjust, whose
// two snapshots link the sealed segment files of a queue "big" written over
// rounds commands, then deletes the queue: its files are then held only by
// every node's snapshots.
func startHeldCluster(t *testing.T, rounds int, adjust func(*Config)) ([]Config, []*testNode, *testNode) {
	t.Helper()
	cfgs := clusterConfigs(t, 3, func(c *Config) {
		c.ReclaimBytes = 1 << 20
		adjust(c)
	})
	nodes := make([]*testNode, 3)
	for i := range cfgs {
		nodes[i] = startNode(t, cfgs[i])
	}
	leader := waitLeader(t, nodes...)
	ctx := context.Background()
	for round := range rounds {
		if _, _, err := leader.node.Propose(ctx, bigPush("big", round)); err != nil {
			t.Fatal(err)
		}
		if round == rounds/2-1 || round == rounds-1 {
			waitSameDigest(t, 10*time.Second, nodes...)
			for _, n := range nodes {
				if err := n.node.Snapshot(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if _, _, err := leader.node.Propose(ctx, &fsm.DeleteQueue{Queue: "big"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := leader.node.Propose(ctx, push("small", "s1")); err != nil {
		t.Fatal(err)
	}
	return cfgs, nodes, leader
}

// A follower cut off from the others applies nothing, so it counts as
// quiet and reclaims: a snapshot of what it applied, the older ones gone.
// That snapshot holds only committed entries, and the log after it stays,
// so the cluster, back together, converges; and the follower rebuilds the
// same state from its one snapshot and the log.
func TestCutOffFollowerReclaimsSafely(t *testing.T) {
	cfgs, nodes, leader := startHeldCluster(t, 6, func(c *Config) { c.ReclaimCheck = 200 * time.Millisecond })
	waitSameDigest(t, 10*time.Second, nodes...)
	var cut int
	for i, n := range nodes {
		if n != leader {
			cut = i
		}
	}
	for i, n := range nodes {
		if i != cut {
			n.stop()
		}
	}
	f := nodes[cut]
	deadline := time.Now().Add(20 * time.Second)
	for {
		dead, snapshots := deadSnapshotFiles(t, cfgs[cut].DataDir)
		if len(dead) == 0 && snapshots == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cut-off follower did not reclaim: %d dead files, %d snapshots", len(dead), snapshots)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := range nodes {
		if i != cut {
			nodes[i] = startNode(t, cfgs[i])
		}
	}
	leader = waitLeader(t, nodes...)
	if _, _, err := leader.node.Propose(context.Background(), push("small", "s2")); err != nil {
		t.Fatal(err)
	}
	waitSameDigest(t, 20*time.Second, nodes...)
	_, want, err := f.fsm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	f.stop()
	if err := os.Remove(filepath.Join(cfgs[cut].DataDir, "state", "fsm.db")); err != nil {
		t.Fatal(err)
	}
	nodes[cut] = startNode(t, cfgs[cut])
	waitSameDigest(t, 20*time.Second, nodes...)
	if _, got, _ := nodes[cut].fsm.Digest(); got != want {
		t.Fatalf("rebuilt from its one snapshot and the log, the follower's state differs")
	}
}

// A crash while a snapshot directory is being removed (a reclaim, or the
// file store reaping) leaves it half gone. The older one half gone: the
// node restarts on the newest, with the same state, rebuilt or not. The
// newest half gone (no code path removes it, but a disk may): a node that
// must rebuild from it refuses to start and names it, rather than start on
// a state missing the files.
func TestRestartWithAHalfRemovedSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name      string
		newest    bool // the newest is damaged, else the older
		keepMeta  bool // meta.json survives the half removal
		rebuild   bool // the state file is gone too
		wantStart bool
	}{
		{"older, meta kept", false, true, false, true},
		{"older, meta kept, rebuilt", false, true, true, true},
		{"older, meta gone, rebuilt", false, false, true, true},
		{"newest, meta kept", true, true, false, true},
		{"newest, meta kept, rebuilt", true, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := fastConfig("n1", freeAddr(t), dir, nil)
			n := startNode(t, cfg)
			twoLinkedSnapshots(t, n, 6)
			list, err := n.node.snaps.List()
			if err != nil || len(list) != 2 {
				t.Fatalf("snapshots %v, %v", list, err)
			}
			victim := filepath.Join(n.node.snaps.dir, list[1].ID)
			if tc.newest {
				victim = filepath.Join(n.node.snaps.dir, list[0].ID)
			}
			last, want := proposeThenStop(t, n, 3, func(i int) *fsm.Push { return push("q", fmt.Sprintf("after%d", i)) })
			segs, _ := filepath.Glob(filepath.Join(victim, "*.seg"))
			for _, s := range segs[:len(segs)/2+1] {
				if err := os.Remove(s); err != nil {
					t.Fatal(err)
				}
			}
			if !tc.keepMeta {
				if err := os.Remove(filepath.Join(victim, "meta.json")); err != nil {
					t.Fatal(err)
				}
			}
			if tc.rebuild {
				if err := os.Remove(filepath.Join(dir, "state", "fsm.db")); err != nil {
					t.Fatal(err)
				}
			}
			if !tc.wantStart {
				err := refusedStart(t, cfg, "the node started on a snapshot missing segment files")
				if !strings.Contains(err.Error(), filepath.Base(victim)) {
					t.Fatalf("the error does not name the snapshot %s: %v", filepath.Base(victim), err)
				}
				return
			}
			restartReplaying(t, cfg, last, want)
		})
	}
}

// refusedStart opens cfg's state and starts a node on it, which must
// fail: it returns the error, and fails the test saying what if it starts.
func refusedStart(t *testing.T, cfg Config, what string) error {
	t.Helper()
	f, err := fsm.Open(fsm.Config{Dir: filepath.Join(cfg.DataDir, "state"), NodeID: cfg.NodeID})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := New(cfg, f)
	if err == nil {
		m.Shutdown()
		t.Fatal(what)
	}
	return err
}

// lockedBuffer is a log destination several nodes write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Every node applies the same log, so a deletion leaves every node's
// snapshots holding its files at once, and nodes started together checked
// at the same moments: all of them copied their state file for the
// reclaim's snapshot within milliseconds (a three-crownd run: snapshots
// 2-42-…429, …431, …433), what the log-bytes trigger staggers nodes to
// avoid (firstSnapshotAt). The reclaims must be a share of the check
// interval apart.
func TestReclaimsOfNodesStartedTogetherAreStaggered(t *testing.T) {
	const check = 3 * time.Second
	cfgs, nodes, _ := startHeldCluster(t, 4, func(c *Config) {
		c.ReclaimCheck = check
		c.SnapshotLogCheck = 20 * time.Millisecond
	})
	var at []time.Time
	deadline := time.Now().Add(4 * check)
	for i := range nodes {
		for {
			dead, snapshots := deadSnapshotFiles(t, cfgs[i].DataDir)
			if len(dead) == 0 && snapshots == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d did not reclaim: %d dead files, %d snapshots", i+1, len(dead), snapshots)
			}
			time.Sleep(20 * time.Millisecond)
		}
		list, err := nodes[i].node.snaps.List()
		if err != nil || len(list) != 1 {
			t.Fatalf("snapshots %v, %v", list, err)
		}
		var term, index, ms int64
		if _, err := fmt.Sscanf(list[0].ID, "%d-%d-%d", &term, &index, &ms); err != nil {
			t.Fatal(err)
		}
		at = append(at, time.UnixMilli(ms))
	}
	for i := range at {
		for j := range i {
			if gap := at[i].Sub(at[j]).Abs(); gap < check/6 {
				t.Errorf("nodes %d and %d took their reclaim's snapshot %v apart, want at least %v", j+1, i+1, gap, check/6)
			}
		}
	}
}

// What a reclaim gives up until the next snapshot (raftnode/DESIGN.md,
// Taking back what snapshots hold): with two snapshots kept, a newest
// whose meta.json no longer reads leaves the older, which the trailing
// log reaches back to, and the node restarts on it with the same state;
// with the newest alone, the node stops at checkLogStart.
func TestDamagedNewestMetaWithOneSnapshotKeptOrTwo(t *testing.T) {
	for _, one := range []bool{false, true} {
		t.Run(fmt.Sprintf("one=%v", one), func(t *testing.T) {
			dir := t.TempDir()
			cfg := fastConfig("n1", freeAddr(t), dir, nil)
			cfg.TrailingLogs = 10
			n := startNode(t, cfg)
			snapshotAfterPushes(t, n, 30)
			for i := range 3 {
				if _, _, err := n.node.Propose(context.Background(), push("q", fmt.Sprintf("b%d", i))); err != nil {
					t.Fatal(err)
				}
			}
			if err := n.node.Snapshot(); err != nil {
				t.Fatal(err)
			}
			if one {
				if err := n.node.snaps.removeOlder(); err != nil {
					t.Fatal(err)
				}
			}
			list, err := n.node.snaps.List()
			if err != nil {
				t.Fatal(err)
			}
			last, want := proposeThenStop(t, n, 2, func(i int) *fsm.Push { return push("q", fmt.Sprintf("c%d", i)) })
			if err := os.WriteFile(filepath.Join(dir, "raft", "snapshots", list[0].ID, "meta.json"), []byte("{"), 0o600); err != nil {
				t.Fatal(err)
			}
			if !one {
				restartReplaying(t, cfg, last, want)
				return
			}
			err = refusedStart(t, cfg, "started with its one snapshot unreadable and the log compacted behind it")
			if !strings.Contains(err.Error(), "missing or unreadable") {
				t.Fatalf("start failed otherwise than at checkLogStart: %v", err)
			}
		})
	}
}
