package raftnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
)

// These tests run real nodes in one process: real Raft over real TCP on
// loopback, real raft-boltdb and state files on disk.

func freeAddr(t *testing.T) string {
	t.Helper()
	return freeAddrs(t, 1)[0]
}

// freeAddrs is n distinct free addresses: each listener stays open until
// all are chosen, as the kernel may hand a port just closed out again (a
// cluster test once got the same port for two nodes, and Raft refused
// the configuration).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs
}

type testNode struct {
	id, addr, dir string
	fsm           *fsm.FSM
	node          *Node
}

func fastConfig(id, addr, dir string, peers []Peer) Config {
	return Config{NodeID: id, RaftAddr: addr, DataDir: dir, Peers: peers,
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		LeaderLeaseTimeout: 200 * time.Millisecond}
}

func startNode(t *testing.T, cfg Config) *testNode {
	t.Helper()
	f, err := fsm.Open(fsm.Config{Dir: filepath.Join(cfg.DataDir, "state"), NodeID: cfg.NodeID})
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(cfg, f)
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	tn := &testNode{id: cfg.NodeID, addr: cfg.RaftAddr, dir: cfg.DataDir, fsm: f, node: n}
	t.Cleanup(tn.stop)
	return tn
}

func (tn *testNode) stop() {
	if tn.node != nil {
		tn.node.Shutdown()
		tn.node = nil
	}
	if tn.fsm != nil {
		tn.fsm.Close()
		tn.fsm = nil
	}
}

func waitLeader(t *testing.T, nodes ...*testNode) *testNode {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if n.node != nil && n.node.IsLeader() {
				return n
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no leader within 10 s")
	return nil
}

func push(queue, tx string) *fsm.Push {
	return &fsm.Push{Items: []fsm.PushItem{{Queue: queue, Partition: "p", TxID: tx, Payload: []byte(`1`)}}}
}

func TestSingleNodeBootstrapAndPropose(t *testing.T) {
	n := startNode(t, fastConfig("n1", freeAddr(t), t.TempDir(), nil))
	waitLeader(t, n)
	res, idx, err := n.node.Propose(context.Background(), push("q", "t1"))
	if err != nil {
		t.Fatal(err)
	}
	pr, ok := res.(*fsm.PushResult)
	if !ok || pr.Items[0].Status != fsm.PushQueued || idx == 0 {
		t.Fatalf("result %T %+v at %d", res, res, idx)
	}
	if n.fsm.AppliedIndex() < idx {
		t.Fatalf("answered before applied: applied %d < %d", n.fsm.AppliedIndex(), idx)
	}
	st := n.node.Status()
	if st.State != "Leader" || st.LeaderID != "n1" || st.AppliedIndex < idx {
		t.Fatalf("status %+v", st)
	}
}

// Concurrent proposals share log entries: many commands, few entries.
func TestGroupCommitCoalesces(t *testing.T) {
	cfg := fastConfig("n1", freeAddr(t), t.TempDir(), nil)
	cfg.Proposer.MaxInflight = 1
	n := startNode(t, cfg)
	waitLeader(t, n)
	// A first proposal is applied after the new leader's no-op entry, which
	// Raft may append after IsLeader turns true: counting from here sees
	// only the proposer's entries.
	if _, _, err := n.node.Propose(context.Background(), push("q", "warm-up")); err != nil {
		t.Fatal(err)
	}
	st0 := n.node.Status()
	before := st0.LastIndex
	const clients, each = 32, 20
	proposeFromClients(t, n, clients, each, 0)
	st := n.node.Status()
	entries := st.LastIndex - before
	if entries >= clients*each/2 {
		t.Fatalf("%d commands took %d log entries: group commit did not coalesce", clients*each, entries)
	}
	// The proposer's own counters tell the same story.
	commands, proposed := st.ProposedCommands-st0.ProposedCommands, st.ProposedEntries-st0.ProposedEntries
	if commands != clients*each || proposed != entries {
		t.Fatalf("proposer counted %d commands in %d entries, want %d in %d", commands, proposed, clients*each, entries)
	}
	if st0.Lingered != 0 {
		t.Fatalf("a lone first command lingered (%d entries)", st0.Lingered)
	}
	t.Logf("%d commands in %d entries, %d lingered", clients*each, entries, st.Lingered)
}

// A negative linger means never, however often the defaults are applied
// (Config.defaults applies the proposer's, and newProposer again).
func TestNegativeLingerSurvivesDefaults(t *testing.T) {
	cfg := Config{Proposer: ProposerConfig{Linger: -1}}
	cfg.defaults()
	cfg.Proposer.defaults()
	if cfg.Proposer.Linger >= 0 {
		t.Fatalf("linger %v after defaults, want negative (never)", cfg.Proposer.Linger)
	}
	var zero ProposerConfig
	zero.defaults()
	zero.defaults()
	if zero.Linger != DefaultLinger {
		t.Fatalf("default linger %v, want %v", zero.Linger, DefaultLinger)
	}
}

func startCluster(t *testing.T, n int) []*testNode {
	t.Helper()
	var nodes []*testNode
	for _, c := range clusterConfigs(t, n, nil) {
		nodes = append(nodes, startNode(t, c))
	}
	return nodes
}

// clusterConfigs are the configurations of an n-node cluster n1..nN on
// free loopback ports, each in its own directory, adjusted by adjust
// (nil: none).
func clusterConfigs(t *testing.T, n int, adjust func(*Config)) []Config {
	t.Helper()
	var peers []Peer
	for i, addr := range freeAddrs(t, n) {
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), Addr: addr})
	}
	cfgs := make([]Config, n)
	for i, p := range peers {
		cfgs[i] = fastConfig(p.ID, p.Addr, t.TempDir(), peers)
		if adjust != nil {
			adjust(&cfgs[i])
		}
	}
	return cfgs
}

func TestClusterFollowerRefusesAndMembershipChanges(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := waitLeader(t, nodes...)
	for _, n := range nodes {
		if n == leader {
			continue
		}
		if _, _, err := n.node.Propose(context.Background(), push("q", "x")); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("follower %s proposed: %v", n.id, err)
		}
		// A follower learns the leader from its first heartbeat.
		deadline := time.Now().Add(5 * time.Second)
		for {
			id, _ := n.node.Leader()
			if id == leader.id {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("follower %s sees leader %q, want %s", n.id, id, leader.id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, idx, err := leader.node.Propose(context.Background(), push("q", "t1")); err != nil {
		t.Fatal(err)
	} else {
		for _, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := n.node.WaitApplied(ctx, idx); err != nil {
				t.Fatalf("%s: %v", n.id, err)
			}
			cancel()
		}
	}

	// A fourth node joins (no bootstrap), catches up, and is removed again.
	addr := freeAddr(t)
	cfg := fastConfig("n4", addr, t.TempDir(), nil)
	cfg.Join = true
	n4 := startNode(t, cfg)
	if err := leader.node.AddVoter("n4", addr, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	members, err := leader.node.Members()
	if err != nil || len(members) != 4 {
		t.Fatalf("members %+v %v", members, err)
	}
	_, idx, err := leader.node.Propose(context.Background(), push("q", "t2"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n4.node.WaitApplied(ctx, idx); err != nil {
		t.Fatalf("joined node did not catch up: %v", err)
	}
	if err := leader.node.RemoveServer("n4", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if members, _ := leader.node.Members(); len(members) != 3 {
		t.Fatalf("after removal %+v", members)
	}
	n4.stop()

	// Leadership moves to the named node; an unknown name is refused.
	var target *testNode
	for _, n := range nodes {
		if n != leader {
			target = n
			break
		}
	}
	if err := leader.node.TransferLeadership("nobody"); !errors.Is(err, ErrNoMember) {
		t.Fatalf("transfer to unknown member: %v", err)
	}
	if err := leader.node.TransferLeadership(target.id); err != nil {
		t.Fatal(err)
	}
	if got := waitLeader(t, nodes...); got != target {
		t.Fatalf("leader %s after transfer to %s", got.id, target.id)
	}
}

// snapshotAfterPushes waits for n to lead, pushes k messages to queue q
// and takes a snapshot.
func snapshotAfterPushes(t *testing.T, n *testNode, k int) {
	t.Helper()
	waitLeader(t, n)
	for i := 0; i < k; i++ {
		if _, _, err := n.node.Propose(context.Background(), push("q", fmt.Sprintf("a%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.node.Snapshot(); err != nil {
		t.Fatal(err)
	}
}

// A node whose state file is gone restores the newest snapshot on start
// and replays the log after it: same state, same applied index.
func TestRestoresSnapshotWhenStateFileIsBehind(t *testing.T) {
	addr := freeAddr(t)
	dir := t.TempDir()
	cfg := fastConfig("n1", addr, dir, nil)
	n := startNode(t, cfg)
	snapshotAfterPushes(t, n, 20)
	last, want := proposeThenStop(t, n, 5, func(i int) *fsm.Push { return push("q", fmt.Sprintf("b%d", i)) })
	if err := os.Remove(filepath.Join(dir, "state", "fsm.db")); err != nil {
		t.Fatal(err)
	}
	n2 := restartReplaying(t, cfg, last, want)
	q, err := n2.fsm.QueueView("q", time.Now().UnixMicro(), false)
	if err != nil || q == nil || q.Stats.Total != 25 {
		t.Fatalf("restored queue %+v %v", q, err)
	}
}

// proposeThenStop proposes count commands, then stops the node and
// returns the index of the last one and the state digest it left.
func proposeThenStop(t *testing.T, n *testNode, count int, cmd func(i int) *fsm.Push) (uint64, string) {
	t.Helper()
	var last uint64
	for i := 0; i < count; i++ {
		_, idx, err := n.node.Propose(context.Background(), cmd(i))
		if err != nil {
			t.Fatal(err)
		}
		last = idx
	}
	_, digest, err := n.fsm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	n.stop()
	return last, digest
}

// restartReplaying starts a stopped single node again, waits until it has
// applied index last and requires the state digest want.
func restartReplaying(t *testing.T, cfg Config, last uint64, want string) *testNode {
	t.Helper()
	n := startNode(t, cfg)
	waitLeader(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.node.WaitApplied(ctx, last); err != nil {
		t.Fatal(err)
	}
	_, got, err := n.fsm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("state rebuilt on restart differs: %s vs %s", got, want)
	}
	return n
}

func TestProposeAfterShutdown(t *testing.T) {
	n := startNode(t, fastConfig("n1", freeAddr(t), t.TempDir(), nil))
	waitLeader(t, n)
	node := n.node
	n.node = nil
	if err := node.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := node.Propose(context.Background(), push("q", "late")); err == nil {
		t.Fatal("a stopped node accepted a proposal")
	}
}

// A snapshot the node takes is linked: its directory holds the manifest
// and the segment files, and Open hands Raft the plain stream with its
// exact size, which a restore accepts.
func TestSnapshotIsLinkedAndOpensAsAPlainStream(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, fastConfig("n1", freeAddr(t), dir, nil))
	snapshotAfterPushes(t, n, 20)
	snaps, err := newLinkingStore(filepath.Join(dir, "raft"), 2, newHCLog(slog.New(slog.DiscardHandler), "test"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("snapshots %v, %v", list, err)
	}
	placed, err := filepath.Glob(filepath.Join(dir, "raft", "snapshots", list[0].ID, "*.seg"))
	if err != nil || len(placed) == 0 {
		t.Fatalf("no segment file beside the snapshot: %v %v", placed, err)
	}
	state, err := os.ReadFile(filepath.Join(dir, "raft", "snapshots", list[0].ID, "state.bin"))
	if err != nil || string(state[:8]) != "CROWNSL1" {
		t.Fatalf("stored stream starts %q: %v", state[:min(8, len(state))], err)
	}
	meta, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:8]) != "CROWNSS2" || int64(len(b)) != meta.Size {
		t.Fatalf("opened stream starts %q, %d bytes, meta says %d", b[:8], len(b), meta.Size)
	}
	g, err := fsm.Open(fsm.Config{Dir: filepath.Join(t.TempDir(), "state"), NodeID: "n2"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	_, want, _ := n.fsm.Digest()
	if _, got, _ := g.Digest(); got != want {
		t.Fatal("state restored from the opened snapshot differs")
	}
}

// A snapshot a crash interrupted is removed when the store opens: its
// links would otherwise keep dead segment files on disk.
func TestSnapshotStoreRemovesInterruptedSnapshots(t *testing.T) {
	base := t.TempDir()
	tmp := filepath.Join(base, "snapshots", "2-100-1.tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "0000000000000001.seg"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newLinkingStore(base, 2, newHCLog(slog.New(slog.DiscardHandler), "test")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("interrupted snapshot still there: %v", err)
	}
}

// A read barrier right after an election: the new leader's commit index is
// its no-op entry, which Raft never hands to the state machine, so waiting
// for the state machine to reach that index waited until some later command
// (a linearizable read after recovery failed with "waiting for index 8
// (applied 7)"). Entries that carry no command need no applying.
func TestReadIndexAfterElectionNeedsNoCommand(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	n := startNode(t, fastConfig("n1", addr, dir, nil))
	waitLeader(t, n)
	if _, _, err := n.node.Propose(context.Background(), push("q", "t1")); err != nil {
		t.Fatal(err)
	}
	n.stop()
	n = startNode(t, fastConfig("n1", addr, dir, nil))
	waitLeader(t, n)
	deadline := time.Now().Add(5 * time.Second)
	for n.node.Status().CommitIndex <= n.fsm.AppliedIndex() { // until the no-op is committed
		if time.Now().After(deadline) {
			t.Fatalf("commit index never passed the applied %d: %+v", n.fsm.AppliedIndex(), n.node.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	idx, err := n.node.ReadIndex()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := n.node.WaitApplied(ctx, idx); err != nil {
		t.Fatalf("read barrier at %d with nothing to apply: %v", idx, err)
	}
}

// proposeFromClients has clients goroutines propose each pushes apiece, one
// at a time, pausing between an answer and the next request (a client's
// own work), and fails t if any push is not queued.
func proposeFromClients(t *testing.T, n *testNode, clients, each int, pause time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				res, _, err := n.node.Propose(context.Background(), push("q", fmt.Sprintf("c%d-%d", c, i)))
				if err != nil {
					errs <- err
					return
				}
				if res.(*fsm.PushResult).Items[0].Status != fsm.PushQueued {
					errs <- fmt.Errorf("client %d item %d not queued", c, i)
					return
				}
				time.Sleep(pause)
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
