package main_test

// The leader-only timers (maintenance/DESIGN.md) against real
// crownd processes: lease expiry, completed retention, maxWait, the dedup
// window, OJS DLQ pruning and queue drain/deletion completion, on one node,
// in a three-node cluster and across a leader failover.

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// timersFailoverDLQTotal reads total of GET /api/v1/dlq?queue=q on a node.
func timersFailoverDLQTotal(t *testing.T, n *tc.Node, queue string) (float64, ojsAnswer) {
	t.Helper()
	a := ojsDo(t, n.URL(), "GET", "/api/v1/dlq?queue="+url.QueryEscape(queue)+"&limit=1000", "").expect(t, 200)
	v, _ := a.Body["total"].(float64)
	return v, a
}

// timersFailoverNewLeader kills the leader and waits for a new one.
func timersFailoverNewLeader(t *testing.T, c *tc.Cluster) *tc.Node {
	t.Helper()
	old := c.Leader()
	old.Kill()
	nl, err := c.WaitLeader(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if nl == old {
		t.Fatal("the killed node is still the leader")
	}
	return nl
}

// queen-api.md 4.5: "`expiresAt` passes | Expired: P is eligible again for
// G. The retry counter is not charged." and 5: "Long-poll waiters live on
// the node that received the request; they are woken when that node applies
// a command that can make something deliverable for them [...] Timers only
// serve to wake parked long-polls." (README: a parked pop is woken "when a
// lease expiry, delay or window passes".) A long-poll sent to a follower
// right after another consumer leased the batch on the leader must return
// the batch again soon after the lease expires, with retryCount 0, not
// sleep until its own timeout.
func TestTimersLeaseExpiryWakesFollowerLongPoll(t *testing.T) {
	c := tc.Start(t, 3)
	leader := c.Leader()
	follower := timersFollowers(c, leader)[0]
	ctx := timersCtx(t, 2*time.Minute)
	for round := range 3 {
		q := fmt.Sprintf("review.timers.lease.%d", round)
		if _, err := leader.Client().Push(ctx, []tc.PushItem{{Queue: q, Payload: 1, TransactionID: "m1"}}); err != nil {
			t.Fatal(err)
		}
		first, err := leader.Client().Pop(ctx, q, tc.PopParams{Batch: 1, LeaseSeconds: 2})
		if err != nil || len(first) != 1 {
			t.Fatalf("round %d: first pop: %d messages, %v", round, len(first), err)
		}
		leasedAt := time.Now()
		// At once, as a competing consumer would: the follower may not
		// have applied the lease yet.
		msgs, err := follower.Client().Pop(ctx, q, tc.PopParams{Wait: true, Timeout: 8 * time.Second, Batch: 1})
		back := time.Since(leasedAt)
		if err != nil {
			t.Fatalf("round %d: long-poll on the follower: %v", round, err)
		}
		if back > 3*time.Second {
			t.Fatalf("round %d: the long-poll on the follower returned %d messages %v after a 2 s lease was granted; want the batch again about 2 s after (woken at the lease expiry)", round, len(msgs), back)
		}
		if len(msgs) != 1 || msgs[0].TransactionID != "m1" || msgs[0].RetryCount != 0 || msgs[0].LeaseID == first[0].LeaseID {
			t.Fatalf("round %d: redelivered %+v, want m1 with retryCount 0 under a new lease", round, msgs)
		}
		if back < 1800*time.Millisecond {
			t.Fatalf("round %d: redelivered %v after a 2 s lease was granted", round, back)
		}
	}
}

// queen-api.md 4.13: "Window: `dedupWindowSeconds` [...] after the original
// push. Inside the window a repeated id is a duplicate; after it, the same id
// is stored as a new message." README: deduplication outlives a retention
// deletion until the window closes. Across a leader failover the new leader
// keeps both halves: a duplicate inside the window, a new message after it.
func TestTimersDedupWindowAcrossFailover(t *testing.T) {
	c := tc.Start(t, 3, timersEnv(1000))
	leader := c.Leader()
	ctx := timersCtx(t, 2*time.Minute)
	q := "review.timers.dedup"
	if err := leader.Client().Configure(ctx, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 1, "dedupWindowSeconds": 6}); err != nil {
		t.Fatal(err)
	}
	r, err := leader.Client().Push(ctx, []tc.PushItem{{Queue: q, Partition: "p", Payload: 1, TransactionID: "once"}})
	if err != nil || r[0].Status != "queued" {
		t.Fatalf("push: %+v %v", r, err)
	}
	pushedAt := time.Now()
	orig := r[0].MessageID
	timersWaitTotal(t, c.Nodes(), q, 0, 15*time.Second) // deleted by retention
	nl := timersFailoverNewLeader(t, c)
	if time.Since(pushedAt) > 5*time.Second {
		t.Skip("too slow to check inside the window")
	}
	r, err = nl.Client().Retrying(30*time.Second).Push(ctx, []tc.PushItem{{Queue: q, Partition: "p", Payload: 2, TransactionID: "once"}})
	if err != nil || r[0].Status != "duplicate" || r[0].MessageID != orig {
		t.Fatalf("push inside the window after failover: %+v %v, want duplicate of %s", r, err, orig)
	}
	time.Sleep(time.Until(pushedAt.Add(6500 * time.Millisecond)))
	r, err = nl.Client().Push(ctx, []tc.PushItem{{Queue: q, Partition: "p", Payload: 3, TransactionID: "once"}})
	if err != nil || r[0].Status != "queued" || r[0].MessageID == orig {
		t.Fatalf("push after the window: %+v %v, want queued as a new message", r, err)
	}
}

// ojs-queues.md 7.4: "Sweeps prune the DLQ by `max_age` first, then by
// `max_count`, oldest first. Pruned entries are deleted outright." A
// three-node cluster prunes to max_count at once and empties the DLQ once
// max_age passed, the second part done by a new leader.
func TestTimersDLQPruneAcrossFailover(t *testing.T) {
	c := tc.Start(t, 3, timersEnv(1000))
	leader := c.Leader()
	ctx := timersCtx(t, 2*time.Minute)
	q := "review-timers-dlq"
	ojsDo(t, leader.URL(), "POST", "/ojs/v1/queues", `{"name":"`+q+`","dead_letter":{"enabled":true,"max_age":"PT4S","max_count":2}}`).expect(t, 201)
	for i := 1; i <= 5; i++ {
		if _, err := leader.Client().Push(ctx, []tc.PushItem{{Queue: q, Partition: "p", Payload: i, TransactionID: fmt.Sprintf("d%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 5; i++ {
		m, err := leader.Client().Pop(ctx, q, tc.PopParams{Batch: 1})
		if err != nil || len(m) != 1 {
			t.Fatalf("pop %d: %d, %v", i, len(m), err)
		}
		res, err := leader.Client().AckBatch(ctx, "", []tc.Ack{tc.AckFor(m[0], "dlq")})
		if err != nil || len(res) != 1 || !res[0].DLQ {
			t.Fatalf("dlq ack %d: %+v, %v", i, res, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, a := timersFailoverDLQTotal(t, leader, q)
		if n == 2 {
			msgs, _ := a.Body["messages"].([]any)
			var ids []string
			for _, m := range msgs {
				ids = append(ids, m.(map[string]any)["transactionId"].(string))
			}
			if fmt.Sprint(ids) != "[d5 d4]" {
				t.Fatalf("after max_count pruning the DLQ holds %v, want the newest [d5 d4]", ids)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DLQ total %v, want 2 (max_count)", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	nl := timersFailoverNewLeader(t, c)
	deadline = time.Now().Add(15 * time.Second)
	for {
		n, _ := timersFailoverDLQTotal(t, nl, q)
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DLQ total %v on the new leader, want 0 after max_age", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ojs-queues.md 3: "draining(graceful) --depth reaches 0--> deleted" and
// "active|paused|draining(graceful) --DELETE purge|move|discard with active
// jobs--> draining(deleting) --last active job settles--> deleted"; docs/
// queues.md: "or the leader's OJS sweep once the leases expired, runs the
// strategy on what is left [...] and removes the queue". After a leader
// failover the new leader's sweep finishes a deletion whose lease expired.
func TestTimersDeletionFinishedAfterFailover(t *testing.T) {
	c := tc.Start(t, 3, timersEnv(1000))
	leader := c.Leader()
	ctx := timersCtx(t, 2*time.Minute)
	q := "review-timers-del"
	ojsDo(t, leader.URL(), "POST", "/ojs/v1/queues", `{"name":"`+q+`"}`).expect(t, 201)
	for i := 1; i <= 2; i++ {
		if _, err := leader.Client().Push(ctx, []tc.PushItem{{Queue: q, Partition: fmt.Sprintf("p%d", i), Payload: i, TransactionID: fmt.Sprintf("x%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := leader.Client().Pop(ctx, q, tc.PopParams{Batch: 1, LeaseSeconds: 3})
	if err != nil || len(m) != 1 {
		t.Fatalf("pop: %d, %v", len(m), err)
	}
	a := ojsDo(t, leader.URL(), "DELETE", "/ojs/v1/queues/"+q+"?strategy=purge", "").expect(t, 202)
	if a.path("queue.state") != "draining" {
		t.Fatalf("DELETE with a live lease: %s", a.Raw)
	}
	nl := timersFailoverNewLeader(t, c)
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := ojsDo(t, nl.URL(), "GET", "/ojs/v1/queues/"+q, "").Status
		if st == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue still answers %d 20 s after its only lease expired", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// queen-api.md 4.6: "push 3 messages to a queue with W = 2, pop at once →
// `204`; pop 2.5 s later with `batch=4` → the 3 messages." The held burst is
// released on time by a new leader after the old one is killed.
func TestTimersWindowAcrossFailover(t *testing.T) {
	c := tc.Start(t, 3)
	leader := c.Leader()
	ctx := timersCtx(t, 2*time.Minute)
	q := "review.timers.window"
	if err := leader.Client().Configure(ctx, q, map[string]any{"windowBuffer": 3}); err != nil {
		t.Fatal(err)
	}
	var items []tc.PushItem
	for i := 1; i <= 3; i++ {
		items = append(items, tc.PushItem{Queue: q, Partition: "p", Payload: i, TransactionID: fmt.Sprintf("w%d", i)})
	}
	if _, err := leader.Client().Push(ctx, items); err != nil {
		t.Fatal(err)
	}
	pushedAt := time.Now()
	if m, err := leader.Client().Pop(ctx, q, tc.PopParams{Batch: 4}); err != nil || len(m) != 0 {
		t.Fatalf("pop inside the window: %d messages, %v", len(m), err)
	}
	nl := timersFailoverNewLeader(t, c)
	if time.Since(pushedAt) < 3*time.Second {
		if m, err := nl.Client().Retrying(10*time.Second).Pop(ctx, q, tc.PopParams{Batch: 4}); err != nil || len(m) != 0 && time.Since(pushedAt) < 2900*time.Millisecond {
			t.Fatalf("pop inside the window on the new leader: %d messages, %v", len(m), err)
		}
	}
	msgs, err := nl.Client().Retrying(10*time.Second).Pop(ctx, q, tc.PopParams{Batch: 4, Wait: true, Timeout: 10 * time.Second})
	back := time.Since(pushedAt)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("pop after the window: %d messages, %v", len(msgs), err)
	}
	if back > 4500*time.Millisecond {
		t.Fatalf("released %v after the push, want about 3 s", back)
	}
}

// docs/queues.md, Deletion: "With live leases [...] The ack that ends the
// last lease, or the leader's OJS sweep once the leases expired, runs the
// strategy on what is left (an acked batch is consumed and goes nowhere; an
// expired one is removed, or moved to the end of the target's partition)".
func TestTimersMoveDeletionAfterLeaseExpiry(t *testing.T) {
	c := tc.Start(t, 1, timersEnv(1000))
	n := c.Leader()
	ctx := timersCtx(t, time.Minute)
	src, dst := "review-timers-src", "review-timers-dst"
	ojsDo(t, n.URL(), "POST", "/ojs/v1/queues", `{"name":"`+src+`"}`).expect(t, 201)
	if _, err := n.Client().Push(ctx, []tc.PushItem{
		{Queue: src, Partition: "p", Payload: 1, TransactionID: "k1"},
		{Queue: src, Partition: "p", Payload: 2, TransactionID: "k2"},
		{Queue: src, Partition: "p", Payload: 3, TransactionID: "k3"},
	}); err != nil {
		t.Fatal(err)
	}
	m, err := n.Client().Pop(ctx, src, tc.PopParams{Batch: 2, LeaseSeconds: 2})
	if err != nil || len(m) != 2 {
		t.Fatalf("pop: %d, %v", len(m), err)
	}
	a := ojsDo(t, n.URL(), "DELETE", "/ojs/v1/queues/"+src+"?strategy=move&target_queue="+dst, "").expect(t, 202)
	if a.path("jobs_affected") != 1.0 {
		t.Fatalf("DELETE move with a live lease of 2 of 3 messages: %s", a.Raw)
	}
	deadline := time.Now().Add(15 * time.Second)
	for ojsDo(t, n.URL(), "GET", "/ojs/v1/queues/"+src, "").Status != 404 {
		if time.Now().After(deadline) {
			t.Fatal("the deletion did not finish after the lease expired")
		}
		time.Sleep(100 * time.Millisecond)
	}
	got, err := n.Client().Pop(ctx, dst, tc.PopParams{Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, g := range got {
		ids = append(ids, g.TransactionID)
	}
	if fmt.Sprint(ids) != "[k3 k1 k2]" {
		t.Fatalf("target holds %v, want [k3 k1 k2] (the idle one moved first, the expired batch appended after)", ids)
	}
}

// queen-api.md 4.6: "A pop right after a push to a queue with D > 0 answers
// `204`; a long-poll parked on it is woken when the head becomes visible."
// The leader is killed while the long-poll is parked on a follower: the
// follower's wake timer still fires and the pop is served through the new
// leader.
func TestTimersDelayWakeAcrossFailover(t *testing.T) {
	c := tc.Start(t, 3)
	leader := c.Leader()
	follower := timersFollowers(c, leader)[0]
	ctx := timersCtx(t, 2*time.Minute)
	q := "review.timers.delay"
	if err := leader.Client().Configure(ctx, q, map[string]any{"delayedProcessing": 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Client().Push(ctx, []tc.PushItem{{Queue: q, Payload: 1, TransactionID: "late"}}); err != nil {
		t.Fatal(err)
	}
	pushedAt := time.Now()
	if _, err := c.WaitConverged(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	type popped struct {
		msgs []tc.Message
		err  error
		at   time.Time
	}
	done := make(chan popped, 1)
	go func() {
		m, err := follower.Client().Pop(ctx, q, tc.PopParams{Wait: true, Timeout: 15 * time.Second, Batch: 1})
		done <- popped{m, err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond)
	leader.Kill()
	r := <-done
	if r.err != nil || len(r.msgs) != 1 || r.msgs[0].TransactionID != "late" {
		t.Fatalf("long-poll: %+v, %v", r.msgs, r.err)
	}
	visible := timersCreatedAt(t, r.msgs[0]).Add(4 * time.Second)
	if lag := r.at.Sub(visible); lag < 0 || lag > 1500*time.Millisecond {
		t.Fatalf("delivered %v after the message became visible (%v after the push)", lag, r.at.Sub(pushedAt))
	}
}
