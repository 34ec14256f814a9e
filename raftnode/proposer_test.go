package raftnode

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"weak"

	"github.com/crownmq/crown/fsm"
)

// Raft's log cache holds the futures of recent entries, responses
// included; a result must not outlive its caller through them. (Before the
// proposer cleared what it had handed out, a leader kept the messages of
// its last 256 entries' pops in memory: 18 MB after a consume run.)
func TestProposerDoesNotRetainResults(t *testing.T) {
	n := startNode(t, fastConfig("n1", freeAddr(t), t.TempDir(), nil))
	waitLeader(t, n)
	res, _, err := n.node.Propose(context.Background(), push("q", "t1"))
	if err != nil {
		t.Fatal(err)
	}
	pr, ok := res.(*fsm.PushResult)
	if !ok || len(pr.Items) != 1 {
		t.Fatalf("result %T %+v", res, res)
	}
	w := weak.Make(pr)
	res, pr = nil, nil
	for range 3 {
		runtime.GC()
	}
	if w.Value() != nil {
		t.Fatal("the result is still reachable after the caller dropped it")
	}
}

// WithEnqueued: "a caller that lets another goroutine propose only after fn
// ran has ordered the two commands in the log". Each of several goroutines
// proposes the same push (one transaction id) as soon as the previous one's
// command is queued, long before it commits: the log must hold them in that
// order, so only the first stores the message and the others are its
// duplicates, whichever entries they land in. Each callback returns only
// once the next proposal has committed, so a callback run before the
// command is queued would let the next one into the log first.
func TestProposerWithEnqueuedOrdersChainedProposals(t *testing.T) {
	n := startNode(t, fastConfig("n1", freeAddr(t), t.TempDir(), nil))
	waitLeader(t, n)
	const rounds, chain = 20, 4
	for round := range rounds {
		tx := fmt.Sprintf("chained-%d", round)
		results := make([]any, chain)
		errs := make([]error, chain)
		start, done := make([]chan struct{}, chain+1), make([]chan struct{}, chain+1)
		for i := range start {
			start[i], done[i] = make(chan struct{}), make(chan struct{})
		}
		close(done[chain])
		var wg sync.WaitGroup
		for i := range chain {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer close(done[i])
				<-start[i]
				ctx := WithEnqueued(context.Background(), func() {
					close(start[i+1])
					<-done[i+1]
				})
				results[i], _, errs[i] = n.node.Propose(ctx, push("q", tx))
			}()
		}
		close(start[0])
		wg.Wait()
		for i := range chain {
			if errs[i] != nil {
				t.Fatalf("round %d: proposal %d: %v", round, i, errs[i])
			}
			want := fsm.PushDuplicate
			if i == 0 {
				want = fsm.PushQueued
			}
			if got := results[i].(*fsm.PushResult).Items[0].Status; got != want {
				t.Fatalf("round %d: proposal %d of the chain has push status %d, want %d: "+
					"the log does not hold the commands in the order they were queued", round, i, got, want)
			}
		}
	}
}
