package main_test

// What a client sees across nodes: reads, pops and long-polls on a node
// other than the one that took the write, and across changes of leader.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// README, "Any node serves any request": reads are served from the local
// state, "never behind a write the same node acknowledged (a node that is
// still catching up, for example just after a restart, waits for it within
// --leader-wait or answers 503; after a restart that includes every command
// its Raft log held ...)"; /health "answers 200 only when the node can
// serve".
//
// A leader that appended pushes to its log while its followers were down
// (nothing committed, nothing acknowledged) is SIGKILLed; the followers,
// restarted,
// elect a new leader, whose log holds a no-op where the old leader held
// those pushes. Restarted, the old leader truncates them and is healthy: its
// reads must be served, not held until the cluster happens to commit
// commands past the index of entries that no longer exist.
func TestClusterRestartAfterUncommittedTailServesReads(t *testing.T) {
	c := tc.Start(t, 3, tc.WithArgs("--leader-wait", "2s", "--commit-inflight", "4"))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const queue = "uncommitted-tail"
	leader := c.Leader()
	fs := clusterFollowers(c, leader)
	if _, err := leader.Client().Push(ctx, []tc.PushItem{{Queue: queue, Payload: 0, TransactionID: "acked"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitConverged(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		f.Kill()
	}
	// Pushes the stopped followers never store: the leader appends them to
	// its own log and waits for a quorum that does not come.
	var wg sync.WaitGroup
	pctx, pcancel := context.WithCancel(ctx)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = leader.Client().Push(pctx, []tc.PushItem{{Queue: queue, Payload: i, TransactionID: fmt.Sprintf("lost-%d", i)}})
		}()
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	before, err := leader.Client().Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader.Kill()
	pcancel()
	wg.Wait()
	for _, f := range fs {
		f.Restart()
	}
	next, err := c.WaitLeader(tc.LeaderTimeout)
	if err != nil {
		t.Fatal(err)
	}
	after, err := next.Client().Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// What makes the case: the old leader's log runs past the new one's.
	if before.Raft.LastIndex <= after.Raft.LastIndex+1 {
		t.Fatalf("the old leader's log ends at %d, the new leader's at %d: no uncommitted tail to test with",
			before.Raft.LastIndex, after.Raft.LastIndex)
	}
	t.Logf("old leader: last index %d, commit %d; new leader %s: last index %d",
		before.Raft.LastIndex, before.Raft.CommitIndex, next.ID(), after.Raft.LastIndex)
	leader.Restart()
	if err := leader.WaitHealthy(tc.LeaderTimeout); err != nil {
		t.Fatal(err)
	}
	// Healthy, with the conflicting tail replaced once the new leader's
	// entries reach it: give that a moment, as a client would not notice.
	deadline := time.Now().Add(10 * time.Second)
	for {
		start := time.Now()
		q, err := leader.Client().Queue(ctx, queue, false)
		if err == nil {
			if q.Totals.Total != 1 {
				t.Errorf("%s after its restart: total %d, want 1 (the acknowledged push only)", leader.ID(), q.Totals.Total)
			}
			return
		}
		var he *tc.HTTPError
		if !errors.As(err, &he) || he.Status != 503 {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			h, _ := leader.Client().Health(ctx)
			t.Fatalf("%s, healthy (applied %d, commit %d, last %d), still refuses local reads 10 s after its restart: %v (the read took %v)",
				leader.ID(), h.Raft.AppliedIndex, h.Raft.CommitIndex, h.Raft.LastIndex, err, time.Since(start).Round(time.Millisecond))
		}
	}
}

// README, "What happens during a failover": "a request that needs the
// leader waits up to --leader-wait (5 s) for one; then it fails with 503
// {"code":"no_leader"}". A linearizable read needs the leader's read index,
// and every OJS read takes one (ojs-queues.md 0.3).
//
// Right after the leader is SIGKILLed, before the followers notice, such a
// read through a follower must wait for the new leader, not fail at once
// because the dead leader's port refuses the connection.
func TestClusterLinearizableReadWaitsOutLeaderFailover(t *testing.T) {
	c := tc.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const queue = "lin-failover"
	leader := c.Leader()
	f := clusterFollowers(c, leader)[0]
	res, err := f.Client().Push(ctx, []tc.PushItem{{Queue: queue, Payload: 1, TransactionID: "lin-1"}})
	if err != nil || res[0].Status != "queued" {
		t.Fatalf("push: %v %+v", err, res)
	}
	leader.Kill()
	start := time.Now()
	for _, path := range []string{"/api/v1/resources/queues/" + queue + "?consistency=linearizable", "/ojs/v1/queues/" + queue} {
		r := rcDo(t, "GET", f.URL()+path, nil)
		t.Logf("GET %s on %s %v after the leader's kill: %d", path, f.ID(), time.Since(start).Round(time.Millisecond), r.status)
		if r.status != 200 {
			t.Errorf("GET %s through %s right after the leader's SIGKILL: %d %s, want 200 once a new leader is elected "+
				"(within --leader-wait)", path, f.ID(), r.status, r.body)
		}
	}
}

// queen-api.md 3.5: "a queued status means the message is committed ...;
// it MUST be visible to any pop that starts after the push response was
// sent (read-your-writes across nodes — the Go test suite pushes and
// immediately pops with wait=false)". deployments.md: transfer-leadership
// is what an operator does before stopping the leader.
//
// While leadership is being transferred, the leader refuses proposals; a
// pop (wait=false) for a consumer group that has never seen the queue's
// one message must still deliver it, or answer a retryable 503, on every
// node: never 204, which tells the client the queue is empty.
func TestClusterPopDuringLeadershipTransferIsNotEmpty(t *testing.T) {
	c := tc.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const queue = "transfer-pop"
	if _, err := c.Leader().Client().Push(ctx, []tc.PushItem{{Queue: queue, Payload: 1, TransactionID: "tp-1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitConverged(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		empty []string
		n     int
	)
	for round := range 3 {
		leader := c.Leader()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w, node := range c.Nodes() {
			for k := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						group := fmt.Sprintf("tp-r%d-w%d-%d-%d", round, w, k, i)
						r := rcDo(t, "GET", node.URL()+"/api/v1/pop/queue/"+queue+"?wait=false&consumerGroup="+group, nil)
						mu.Lock()
						n++
						if r.status == 204 {
							empty = append(empty, fmt.Sprintf("round %d: pop via %s (leader %s) answered 204", round, node.ID(), leader.ID()))
						}
						mu.Unlock()
					}
				}()
			}
		}
		time.Sleep(200 * time.Millisecond)
		if _, err := leader.Client().Do(ctx, "POST", "/api/v1/cluster/transfer-leadership", map[string]any{}, nil); err != nil {
			t.Fatalf("transfer: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
		close(stop)
		wg.Wait()
	}
	t.Logf("%d pops, %d answered 204", n, len(empty))
	if len(empty) > 0 {
		t.Errorf("%d of %d pops for new consumer groups of a queue holding a message answered 204 around a leadership transfer, e.g. %s",
			len(empty), n, empty[0])
	}
}
