package raftnode

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// README "Any node serves any request": "Add ?consistency=linearizable to a
// read to have the node confirm the leader's commit index with a quorum and
// wait until it has applied it before answering"; DESIGN.md "Read barriers":
// ReadIndex "returns the index a linearizable read waits for".
//
// A new leader learns which entries are committed only once an entry of its
// own term commits (its no-op; Raft paper section 8, "Read-only
// operations"). Until then its commit index is the one it heard as a
// follower, which can be below an entry the old leader committed and
// acknowledged: followers hear of a commit only with the next append. A read
// index taken in that window is below that acknowledged write, and a
// linearizable read waiting for it may be served without the write.
//
// Staging: followers learn commits only through appends (a CommitTimeout of
// an hour stops the periodic ones), so after an acknowledged write they hold
// it but believe it uncommitted. The old leader then stops, and a blocking
// observer holds the Raft of whichever follower wins the election just after
// it became leader and before its no-op, while ReadIndex starts.
func TestReadIndexOfNewLeaderCoversWritesTheOldLeaderAcknowledged(t *testing.T) {
	var peers []Peer
	addrs := freeAddrs(t, 3)
	for i, id := range []string{"n1", "n2", "n3"} {
		peers = append(peers, Peer{ID: id, Addr: addrs[i]})
	}
	var nodes []*testNode
	for _, p := range peers {
		cfg := fastConfig(p.ID, p.Addr, t.TempDir(), peers)
		cfg.CommitTimeout = time.Hour
		nodes = append(nodes, startNode(t, cfg))
	}
	old := waitLeader(t, nodes...)
	var followers []*testNode
	for _, n := range nodes {
		if n != old {
			followers = append(followers, n)
		}
	}
	// Two writes: after the first, the no-op and everything before it are
	// known committed everywhere; the second is the one the followers hold
	// without knowing it committed.
	if _, _, err := old.node.Propose(context.Background(), push("q", "w1")); err != nil {
		t.Fatal(err)
	}
	_, acked, err := old.node.Propose(context.Background(), push("q", "w2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range followers {
		deadline := time.Now().Add(5 * time.Second)
		for f.node.Status().LastIndex < acked {
			if time.Now().After(deadline) {
				t.Fatalf("follower %s never received entry %d", f.id, acked)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// Each follower's Raft blocks announcing its own leadership.
	obs := make(chan raft.Observation)
	var observers []*raft.Observer
	for _, f := range followers {
		id := raft.ServerID(f.id)
		o := raft.NewObserver(obs, true, func(o *raft.Observation) bool {
			switch d := o.Data.(type) {
			case raft.RaftState:
				return d == raft.Leader
			case raft.LeaderObservation:
				return d.LeaderID == id
			}
			return false
		})
		f.node.raft.RegisterObserver(o)
		observers = append(observers, o)
	}
	released := false
	release := func() {
		if released {
			return
		}
		released = true
		// Drain while deregistering: Raft holds the observers' lock while
		// it blocks on the channel.
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-obs:
				case <-stop:
					return
				}
			}
		}()
		for i, f := range followers {
			f.node.raft.DeregisterObserver(observers[i])
		}
		close(stop)
	}
	defer release()

	old.stop()
	var next *testNode
	select {
	case o := <-obs: // o.Raft leads; it now blocks announcing itself
		for _, f := range followers {
			if f.node.raft == o.Raft {
				next = f
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no follower became leader")
	}
	if ci := next.node.raft.CommitIndex(); ci >= acked {
		t.Fatalf("staging: the new leader already knows entry %d committed (commit index %d)", acked, ci)
	}
	type answer struct {
		idx uint64
		err error
	}
	got := make(chan answer, 1)
	go func() {
		idx, err := next.node.ReadIndex()
		got <- answer{idx, err}
	}()
	time.Sleep(100 * time.Millisecond) // ReadIndex reads the commit index, then waits for Raft
	release()
	var a answer
	select {
	case a = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("ReadIndex never returned")
	}
	if a.err != nil {
		t.Fatalf("ReadIndex on the new leader: %v", a.err)
	}
	if a.idx < acked {
		t.Fatalf("new leader's read index %d is below entry %d, which the old leader committed and "+
			"acknowledged: a linearizable read waiting for it may miss that write", a.idx, acked)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := next.node.WaitApplied(ctx, a.idx); err != nil {
		t.Fatal(err)
	}
	if applied := next.fsm.AppliedIndex(); applied < acked {
		t.Fatalf("after waiting for the read index the new leader applied %d < %d", applied, acked)
	}
}
