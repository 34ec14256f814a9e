package raftnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
)

// DESIGN.md "Group commit": "Errors are mapped so callers know what is safe:
// `ErrNotLeader` (never appended ...), `ErrUnknownOutcome` (leadership lost
// after appending: the command may still commit ...), `ErrShutdown` (the
// proposer is closed; also a command whose send raced the close and that
// the proposer never took)"; docs/deployments.md: "Removing the leader ...
// removes the leader ... stop the process afterwards"; proposer.go: "Close
// stops accepting commands; commands already handed to Raft finish".
//
// A leader that removes itself while commands flow must answer every one
// of them promptly with a mapped error, and stop cleanly afterwards. Raft's
// ShutdownOnRemove (its default) shut Raft down from inside its leader loop
// at the commit of the removal; a Raft that has shut down answers no future
// still queued (committed batches waiting for the state machine goroutine,
// which returns at shutdown, or an entry in the buffered apply channel), so
// the removal's own future, an in-flight entry's or a barrier's waited
// forever: RemoveServer never returned, the proposer's slot stayed taken,
// and Node.Shutdown (which waits for the proposer) never returned either.
//
// Staging: the leader's state machine is busy (held in an apply, as on a
// loaded node) while barriers and then the removal commit, so their batches
// wait for it when Raft steps down.
func TestProposerLeaderRemovingItselfAnswersEveryCommandAndStops(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := waitLeader(t, nodes...)
	if _, _, err := leader.node.Propose(context.Background(), push("q", "warm-up")); err != nil {
		t.Fatal(err)
	}
	// Hold the state machine in its next apply until released.
	var armed atomic.Bool
	held, gate := make(chan struct{}, 1), make(chan struct{})
	leader.fsm.Subscribe(func(*fsm.Events) {
		if armed.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-gate
		}
	})
	armed.Store(true)

	const writers = 8
	type outcome struct {
		tx   string
		err  error
		took time.Duration
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		wg       sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tx := fmt.Sprintf("w%d-%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				start := time.Now()
				_, _, err := leader.node.Propose(ctx, push("q", tx))
				cancel()
				if err != nil {
					mu.Lock()
					outcomes = append(outcomes, outcome{tx, err, time.Since(start)})
					mu.Unlock()
					if errors.Is(err, ErrNotLeader) {
						return
					}
					time.Sleep(time.Millisecond)
				}
			}
		}(w)
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("staging: the state machine applied nothing")
	}
	// Barriers committed one by one queue one batch each for the state
	// machine.
	r := leader.node.raft
	barriers := make(chan error, 4)
	for range cap(barriers) {
		last := r.LastIndex()
		go func() { barriers <- r.Barrier(5 * time.Second).Error() }()
		waitFor(t, "barrier committed", func() bool { return r.CommitIndex() > last })
	}
	removed := make(chan error, 1)
	go func() { removed <- leader.node.RemoveServer(leader.id, 5*time.Second) }()
	waitFor(t, "the removed leader stepping down", func() bool { return !leader.node.IsLeader() })
	close(gate)

	select {
	case err := <-removed:
		t.Logf("leader removed itself: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("RemoveServer of the leader itself did not return within 15 s: Raft never answered its future")
	}
	for range cap(barriers) {
		select {
		case err := <-barriers:
			if err != nil {
				t.Logf("barrier: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("a barrier committed before the removal was never answered")
		}
	}
	close(stop)
	wg.Wait()

	node := leader.node
	leader.node = nil
	stopped := make(chan error, 1)
	go func() { stopped <- node.Shutdown() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Logf("shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Node.Shutdown of the removed leader did not return within 10 s: " +
			"the proposer waits for a Raft future nobody answers")
	}

	var rest []*testNode
	for _, n := range nodes {
		if n != leader {
			rest = append(rest, n)
		}
	}
	next := waitLeader(t, rest...)
	var wrong []string
	kinds := map[string]int{}
	for _, o := range outcomes {
		switch {
		case errors.Is(o.err, ErrNotLeader):
			kinds["not leader"]++
		case errors.Is(o.err, ErrUnknownOutcome):
			kinds["unknown outcome"]++
		case errors.Is(o.err, ErrShutdown):
			kinds["shutdown"]++
		default:
			kinds[o.err.Error()]++
		}
		if o.took > 3*time.Second {
			wrong = append(wrong, fmt.Sprintf("%s answered only after %v (%v)", o.tx, o.took.Round(time.Millisecond), o.err))
			continue
		}
		if errors.Is(o.err, ErrUnknownOutcome) {
			continue
		}
		// Any other answer says the command was not applied: pushed again
		// on the new leader, it must not be a duplicate.
		res, _, err := next.node.Propose(context.Background(), push("q", o.tx))
		if err != nil {
			t.Fatal(err)
		}
		if pr := res.(*fsm.PushResult); pr.Items[0].Status == fsm.PushDuplicate {
			wrong = append(wrong, fmt.Sprintf("%s answered %v was applied", o.tx, o.err))
		}
	}
	t.Logf("answers to the writers: %v", kinds)
	if len(wrong) > 0 {
		t.Fatalf("%d commands of a leader removing itself were answered wrongly:\n%s",
			len(wrong), strings.Join(wrong, "\n"))
	}
}
