package main_test

// Leader-only timers and time-driven pop behaviour against real crownd
// processes (see cmd/internal/testcluster): retention sweeps proposed by the
// leader and applied identically everywhere, a sweep finished by a new
// leader after the old one is killed, timers running only on the leader,
// long-polls woken when a delayed or windowed message becomes visible, and
// minPopWaitTime. They live here rather than in maintenance/ because
// cmd/internal/testcluster is importable only from under cmd/.

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// timersEnv makes the retention timer fast enough for tests.
func timersEnv(batch int) tc.Option {
	return tc.WithEnv("RETENTION_INTERVAL=200", "RETENTION_BATCH_SIZE="+strconv.Itoa(batch))
}

func timersCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// nodeMetrics scrapes /metrics/prometheus into "name{labels}" -> value.
func nodeMetrics(n *tc.Node) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", n.URL()+"/metrics/prometheus", nil)
	if err != nil {
		return nil, err
	}
	resp, err := n.Client().HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s /metrics/prometheus: %d", n.ID(), resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

func nodeMetric(t *testing.T, n *tc.Node, key string) float64 {
	t.Helper()
	m, err := nodeMetrics(n)
	if err != nil {
		t.Fatalf("scrape %s: %v", n.ID(), err)
	}
	return m[key] // absent series (never incremented) read as 0
}

const (
	mActive       = `crown_maintenance_active`
	mSweeps       = `crown_sweep_commands_total{kind="retention"}`
	mSegsDeleted  = `crown_sweep_segments_deleted_total{rule="retention"}`
	mFillWaits    = `queen_pop_fill_wait_total`
	mFillWaitUsec = `queen_pop_fill_wait_microseconds_total`
)

// timersQueueTotal reads totals.total of a queue on one node with a
// linearizable read.
func timersQueueTotal(ctx context.Context, n *tc.Node, queue string) (uint64, error) {
	var out struct {
		Totals struct {
			Total uint64 `json:"total"`
		} `json:"totals"`
	}
	_, err := n.Client().Do(ctx, "GET", "/api/v1/resources/queues/"+url.PathEscape(queue)+"?consistency=linearizable", nil, &out)
	return out.Totals.Total, err
}

// timersWaitTotal waits until every given node reports the queue's total as want.
func timersWaitTotal(t *testing.T, nodes []*tc.Node, queue string, want uint64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		var last string
		for _, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			got, err := timersQueueTotal(ctx, n, queue)
			cancel()
			if err != nil || got != want {
				ok, last = false, fmt.Sprintf("%s: total %d, err %v", n.ID(), got, err)
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: total not %d on every node within %v (last: %s)", queue, want, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func timersFollowers(c *tc.Cluster, leader *tc.Node) []*tc.Node {
	var out []*tc.Node
	for _, n := range c.Nodes() {
		if n != leader && n.Running() {
			out = append(out, n)
		}
	}
	return out
}

// timersPushSegments pushes segs segments (one message each) to queue,
// spread over parts partitions, perRequest items per push request.
func timersPushSegments(t *testing.T, cl *tc.Client, queue string, segs, parts int) {
	t.Helper()
	ctx := timersCtx(t, 2*time.Minute)
	for base := 0; base < segs; base += parts {
		var items []tc.PushItem
		for i := base; i < min(base+parts, segs); i++ {
			items = append(items, tc.PushItem{Queue: queue, Partition: fmt.Sprintf("p%03d", i%parts),
				Payload: map[string]int{"i": i}, TransactionID: fmt.Sprintf("s%05d", i)})
		}
		// One request touches each partition once: one segment per item.
		if _, err := cl.Push(ctx, items); err != nil {
			t.Fatalf("push: %v", err)
		}
	}
}

// (1) A sweep proposed by the leader deletes the same segments on every
// node: the queue is empty everywhere and the replicas' digests agree; only
// the leader counted the deletion.
func TestTimersSweepDeletesSameSegmentsOnEveryNode(t *testing.T) {
	c := tc.Start(t, 3, timersEnv(20))
	leader := c.Leader()
	cl := leader.Client()
	ctx := timersCtx(t, 2*time.Minute)
	const q, keep = "timers.sweep", "timers.keep"
	if err := cl.Configure(ctx, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 1}); err != nil {
		t.Fatal(err)
	}
	const segs = 150
	timersPushSegments(t, cl, q, segs, 10)
	if _, err := cl.Push(ctx, []tc.PushItem{{Queue: keep, Payload: 1, TransactionID: "k"}}); err != nil {
		t.Fatal(err)
	}
	timersWaitTotal(t, c.Nodes(), q, 0, 30*time.Second)
	d, err := c.WaitConverged(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("converged at %d/%.12s", d.AppliedIndex, d.Digest)
	timersWaitTotal(t, c.Nodes(), keep, 1, 10*time.Second) // no rule: untouched
	// The pop scan finds nothing on any node.
	for _, n := range c.Nodes() {
		msgs, err := n.Client().Pop(ctx, q, tc.PopParams{Batch: 100, Partitions: 100})
		if err != nil || len(msgs) != 0 {
			t.Fatalf("%s: pop after the sweep %d messages, %v", n.ID(), len(msgs), err)
		}
	}
	if cur := c.Leader(); cur != leader {
		t.Logf("leadership moved from %s to %s during the test", leader.ID(), cur.ID())
		return
	}
	if v := nodeMetric(t, leader, mSegsDeleted); v != segs {
		t.Fatalf("leader %s counted %v deleted segments, want %d", leader.ID(), v, segs)
	}
	for _, n := range timersFollowers(c, leader) {
		if v := nodeMetric(t, n, mSegsDeleted); v != 0 {
			t.Fatalf("follower %s counted %v deleted segments", n.ID(), v)
		}
	}
}

// (2) The leader is SIGKILLed in the middle of deleting a large backlog in
// bounded steps; the new leader's timers finish the job, and the old
// leader, restarted, converges to the same state.
func TestTimersNewLeaderFinishesSweepAfterLeaderKill(t *testing.T) {
	const batch = 20
	c := tc.Start(t, 3, timersEnv(batch))
	leader := c.Leader()
	cl := leader.Client()
	ctx := timersCtx(t, 5*time.Minute)
	const q = "timers.backlog"
	const segs, parts = 3000, 100
	timersPushSegments(t, cl, q, segs, parts)
	timersWaitTotal(t, []*tc.Node{leader}, q, segs, 30*time.Second)
	time.Sleep(1100 * time.Millisecond) // every segment is now over a second old
	if _, err := c.WaitConverged(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := cl.Configure(ctx, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 1}); err != nil {
		t.Fatal(err)
	}
	// Kill the leader as soon as it has committed its first sweep step.
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := nodeMetrics(leader)
		if err != nil {
			t.Fatal(err)
		}
		if m[mSegsDeleted] > 0 {
			t.Logf("killing %s after %v segments deleted", leader.ID(), m[mSegsDeleted])
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader never started sweeping")
		}
		time.Sleep(2 * time.Millisecond)
	}
	leader.Kill()
	survivors := timersFollowers(c, leader)
	var left uint64
	for _, n := range survivors { // local reads: what each had applied at the kill
		var out struct {
			Totals struct {
				Total uint64 `json:"total"`
			} `json:"totals"`
		}
		if _, err := n.Client().Do(ctx, "GET", "/api/v1/resources/queues/"+q, nil, &out); err != nil {
			t.Fatal(err)
		}
		left = max(left, out.Totals.Total)
	}
	// (A survivor may not have applied the leader's last steps yet: up to
	// segs may show; the new leader's own deletion count below is the proof
	// that it finished the job.)
	if left == 0 {
		t.Fatalf("not killed mid-sweep: nothing left of %d segments on the survivors", segs)
	}
	t.Logf("%d segments left at the kill", left)
	newLeader, err := c.WaitLeader(tc.LeaderTimeout)
	if err != nil {
		t.Fatal(err)
	}
	timersWaitTotal(t, survivors, q, 0, 60*time.Second)
	if cur, _ := c.WaitLeader(5 * time.Second); cur == newLeader {
		m, err := nodeMetrics(newLeader)
		if err != nil {
			t.Fatal(err)
		}
		deleted, steps := m[mSegsDeleted], m[mSweeps]
		if deleted == 0 {
			t.Fatalf("new leader %s deleted nothing: who finished the sweep?", newLeader.ID())
		}
		// Bounded steps: no sweep deleted more than RETENTION_BATCH_SIZE.
		if steps*batch < deleted {
			t.Fatalf("new leader deleted %v segments in %v sweeps of at most %d", deleted, steps, batch)
		}
		t.Logf("new leader %s deleted %v segments in %v sweep commands", newLeader.ID(), deleted, steps)
	}
	// Every survivor other than the leader proposed nothing.
	for _, n := range survivors {
		if n != newLeader {
			if v := nodeMetric(t, n, mSegsDeleted); v != 0 {
				t.Fatalf("follower %s counted %v deleted segments", n.ID(), v)
			}
		}
	}
	leader.Restart()
	if err := leader.WaitHealthy(tc.StartTimeout); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitConverged(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	timersWaitTotal(t, c.Nodes(), q, 0, 30*time.Second)
	// A fresh push after the sweep is stored and delivered normally.
	if _, err := newLeader.Client().Retrying(10*time.Second).Push(ctx, []tc.PushItem{{Queue: q, Partition: "p000", Payload: 1, TransactionID: "after"}}); err != nil {
		t.Fatal(err)
	}
	// Popped at once with a long-poll on the restarted node (retention is
	// 1 s: the message is soon deleted again).
	msgs, err := leader.Client().Retrying(10*time.Second).Pop(ctx, q, tc.PopParams{Partition: "p000", Batch: 10, AutoAck: true,
		Wait: true, Timeout: 5 * time.Second})
	if err != nil || len(msgs) != 1 || msgs[0].TransactionID != "after" {
		t.Fatalf("pop after the sweep: %+v %v", msgs, err)
	}
}

// (3) Followers never run timers: crown_maintenance_active is 1 only on the
// leader, and only the leader's sweep counter grows; after a leadership
// transfer both move to the new leader and the old one's counter freezes.
// A sweep is proposed only when it has something to delete (maintenance/
// DESIGN.md, "An idle cluster's log stays still"), so the test gives the
// timers work: a message every 100 ms into a queue whose maxWait of 1 s
// condemns each a second later, about one sweep per 200 ms tick.
func TestTimersOnlyLeaderRunsTimers(t *testing.T) {
	c := tc.Start(t, 3, timersEnv(20))
	leader := c.Leader()
	ctx := timersCtx(t, 2*time.Minute)
	const q = "timers.rule"
	if err := leader.Client().Configure(ctx, q, map[string]any{"maxWaitTimeSeconds": 1}); err != nil {
		t.Fatal(err)
	}
	// Pushed through the follower that is not the transfer's target below:
	// it forwards to whichever node leads.
	via := timersFollowers(c, leader)[1].Client().Retrying(5 * time.Second)
	pushCtx, stopPushing := context.WithCancel(ctx)
	pushed := make(chan struct{})
	go func() {
		defer close(pushed)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-pushCtx.Done():
				return
			case <-tick.C:
			}
			if _, err := via.Push(pushCtx, []tc.PushItem{{Queue: q, Partition: "p", Payload: i, TransactionID: fmt.Sprintf("m%d", i)}}); err != nil && pushCtx.Err() == nil {
				t.Logf("push %d: %v", i, err)
			}
		}
	}()
	t.Cleanup(func() { stopPushing(); <-pushed })
	time.Sleep(1200 * time.Millisecond) // the first messages are past their maxWait
	check := func(leader *tc.Node) map[string]float64 {
		t.Helper()
		// Leadership notifications are asynchronous: give the gauge a moment.
		deadline := time.Now().Add(10 * time.Second)
		for {
			bad := ""
			for _, n := range c.Nodes() {
				want := 0.0
				if n == leader {
					want = 1
				}
				if v := nodeMetric(t, n, mActive); v != want {
					bad = fmt.Sprintf("%s: crown_maintenance_active %v, want %v", n.ID(), v, want)
				}
			}
			if bad == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal(bad)
			}
			time.Sleep(50 * time.Millisecond)
		}
		before := map[string]float64{}
		for _, n := range c.Nodes() {
			before[n.ID()] = nodeMetric(t, n, mSweeps)
		}
		time.Sleep(1500 * time.Millisecond) // several RETENTION_INTERVALs
		for _, n := range c.Nodes() {
			after := nodeMetric(t, n, mSweeps)
			if n == leader {
				if after < before[n.ID()]+3 { // about 7 ticks with a condemned message each
					t.Fatalf("leader %s: sweeps %v -> %v in 1.5 s at a 200 ms interval", n.ID(), before[n.ID()], after)
				}
			} else if after != before[n.ID()] {
				t.Fatalf("follower %s: sweeps %v -> %v", n.ID(), before[n.ID()], after)
			}
			if v := nodeMetric(t, n, mActive); (v == 1) != (n == leader) {
				t.Fatalf("%s: crown_maintenance_active %v", n.ID(), v)
			}
		}
		return before
	}
	first := check(leader)
	for _, n := range timersFollowers(c, leader) {
		if first[n.ID()] != 0 {
			t.Fatalf("follower %s has %v sweeps", n.ID(), first[n.ID()])
		}
	}
	// Transfer leadership to a follower: the old leader stays up.
	target := timersFollowers(c, leader)[0]
	if _, err := leader.Client().Do(ctx, "POST", "/api/v1/cluster/transfer-leadership", map[string]any{"id": target.ID()}, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(tc.LeaderTimeout)
	var next *tc.Node
	for {
		n, err := c.WaitLeader(tc.LeaderTimeout)
		if err == nil && n != leader {
			next = n
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leadership did not move from %s", leader.ID())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("leadership moved %s -> %s", leader.ID(), next.ID())
	check(next)
}

// timersCreatedAt parses a pop message's createdAt.
func timersCreatedAt(t *testing.T, m tc.Message) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, m.CreatedAt)
	if err != nil {
		t.Fatalf("createdAt %q: %v", m.CreatedAt, err)
	}
	return at
}

// (4) A long-poll parked on a delayed (delayedProcessing 1 s) or windowed
// (windowBuffer 1 s) partition returns within 200 ms of the message
// becoming visible, on the leader and on a follower (where the parked
// request lives on the follower and its wake timer fires there).
func TestTimersLongPollWakesWhenVisible(t *testing.T) {
	c := tc.Start(t, 3)
	leader := c.Leader()
	follower := timersFollowers(c, leader)[0]
	ctx := timersCtx(t, 3*time.Minute)
	for _, kind := range []string{"delayedProcessing", "windowBuffer"} {
		for _, on := range []*tc.Node{leader, follower} {
			role := "leader"
			if on != leader {
				role = "follower"
			}
			for _, parkFirst := range []bool{true, false} {
				name := fmt.Sprintf("%s/%s/parked-before-push=%v", kind, role, parkFirst)
				t.Run(name, func(t *testing.T) {
					q := fmt.Sprintf("timers.wake.%s.%s.%v", kind, role, parkFirst)
					if err := leader.Client().Configure(ctx, q, map[string]any{kind: 1}); err != nil {
						t.Fatal(err)
					}
					if _, err := c.WaitConverged(30 * time.Second); err != nil {
						t.Fatal(err)
					}
					type popped struct {
						msgs []tc.Message
						at   time.Time
						err  error
					}
					done := make(chan popped, 1)
					pop := func() {
						msgs, err := on.Client().Pop(ctx, q, tc.PopParams{Wait: true, Timeout: 10 * time.Second, Batch: 10})
						done <- popped{msgs, time.Now(), err}
					}
					if parkFirst {
						go pop()
						time.Sleep(200 * time.Millisecond) // parked on an empty queue
					}
					if _, err := leader.Client().Push(ctx, []tc.PushItem{{Queue: q, Payload: 1, TransactionID: "m"}}); err != nil {
						t.Fatal(err)
					}
					if !parkFirst {
						go pop()
					}
					var r popped
					select {
					case r = <-done:
					case <-time.After(20 * time.Second):
						t.Fatal("the long-poll never returned")
					}
					if r.err != nil || len(r.msgs) != 1 {
						t.Fatalf("pop: %d messages, %v", len(r.msgs), r.err)
					}
					visible := timersCreatedAt(t, r.msgs[0]).Add(time.Second)
					lag := r.at.Sub(visible)
					t.Logf("returned %v after the message became visible", lag)
					if lag < 0 {
						t.Fatalf("delivered %v before createdAt + 1 s", -lag)
					}
					if lag >= 200*time.Millisecond {
						t.Fatalf("returned %v after the message became visible, want < 200ms", lag)
					}
				})
			}
		}
	}
}

// (5) minPopWaitTime: a pop with wait=true and batch 10 that finds 2
// messages holds the batch back ~300 ms, returns what was pushed meanwhile,
// and counts the wait; batch=1 or wait=false pops do not wait. The wait and
// the counters belong to the node holding the pop (leader or follower).
func TestTimersMinPopWaitTime(t *testing.T) {
	c := tc.Start(t, 3)
	leader := c.Leader()
	follower := timersFollowers(c, leader)[0]
	ctx := timersCtx(t, 3*time.Minute)
	for _, on := range []*tc.Node{leader, follower} {
		role := "leader"
		if on != leader {
			role = "follower"
		}
		t.Run(role, func(t *testing.T) {
			q := "timers.fill." + role
			if err := leader.Client().Configure(ctx, q, map[string]any{"minPopWaitTime": 300}); err != nil {
				t.Fatal(err)
			}
			push := func(txs ...string) {
				t.Helper()
				var items []tc.PushItem
				for _, tx := range txs {
					items = append(items, tc.PushItem{Queue: q, Partition: "p", Payload: tx, TransactionID: tx})
				}
				if _, err := leader.Client().Push(ctx, items); err != nil {
					t.Fatal(err)
				}
				if _, err := c.WaitConverged(30 * time.Second); err != nil {
					t.Fatal(err)
				}
			}
			counters := func() (float64, float64) {
				m, err := nodeMetrics(on)
				if err != nil {
					t.Fatal(err)
				}
				return m[mFillWaits], m[mFillWaitUsec]
			}
			pop := func(p tc.PopParams) ([]tc.Message, time.Duration) {
				t.Helper()
				p.AutoAck = true
				start := time.Now()
				msgs, err := on.Client().Pop(ctx, q, p)
				if err != nil {
					t.Fatal(err)
				}
				return msgs, time.Since(start)
			}

			// 2 available, nothing more arrives: the pop waits ~300 ms and
			// returns the 2.
			push("a1", "a2")
			n0, us0 := counters()
			msgs, took := pop(tc.PopParams{Wait: true, Timeout: 5 * time.Second, Batch: 10})
			if len(msgs) != 2 || took < 295*time.Millisecond || took > 2*time.Second {
				t.Fatalf("under-full pop returned %d messages after %v, want 2 after ~300ms", len(msgs), took)
			}
			n1, us1 := counters()
			if n1 != n0+1 || us1-us0 < 250000 {
				t.Fatalf("fill-wait counters %v/%v -> %v/%v", n0, us0, n1, us1)
			}

			// The wait is capped by the caller's remaining timeout.
			push("t1", "t2")
			msgs, took = pop(tc.PopParams{Wait: true, Timeout: 100 * time.Millisecond, Batch: 10})
			if len(msgs) != 2 || took < 95*time.Millisecond || took >= 280*time.Millisecond {
				t.Fatalf("pop with a 100 ms timeout returned %d messages after %v, want 2 after ~100ms", len(msgs), took)
			}
			n1, us1 = counters()

			// 2 available, 3 more pushed during the wait: one pop carries 5.
			push("b1", "b2")
			type res struct {
				msgs []tc.Message
				took time.Duration
			}
			done := make(chan res, 1)
			go func() {
				start := time.Now()
				msgs, err := on.Client().Pop(ctx, q, tc.PopParams{Wait: true, Timeout: 5 * time.Second, Batch: 10, AutoAck: true})
				if err != nil {
					t.Error(err)
				}
				done <- res{msgs, time.Since(start)}
			}()
			time.Sleep(100 * time.Millisecond)
			if _, err := leader.Client().Push(ctx, []tc.PushItem{
				{Queue: q, Partition: "p", Payload: 1, TransactionID: "b3"},
				{Queue: q, Partition: "p", Payload: 1, TransactionID: "b4"},
				{Queue: q, Partition: "p", Payload: 1, TransactionID: "b5"},
			}); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if len(r.msgs) != 5 || r.took < 295*time.Millisecond {
				t.Fatalf("pop with pushes during the wait returned %d messages after %v, want 5 after ~300ms", len(r.msgs), r.took)
			}
			n2, _ := counters()
			if n2 != n1+1 {
				t.Fatalf("fill waits %v -> %v", n1, n2)
			}

			// batch=1 and wait=false do not wait and do not count.
			push("c1", "c2", "c3")
			if msgs, took := pop(tc.PopParams{Wait: true, Timeout: 5 * time.Second, Batch: 1}); len(msgs) != 1 || took >= 250*time.Millisecond {
				t.Fatalf("batch=1 pop returned %d after %v", len(msgs), took)
			}
			if msgs, took := pop(tc.PopParams{Batch: 10}); len(msgs) != 2 || took >= 250*time.Millisecond {
				t.Fatalf("wait=false pop returned %d after %v", len(msgs), took)
			}
			// A full batch is served at once too.
			push("d1", "d2", "d3")
			if msgs, took := pop(tc.PopParams{Wait: true, Timeout: 5 * time.Second, Batch: 3}); len(msgs) != 3 || took >= 250*time.Millisecond {
				t.Fatalf("full-batch pop returned %d after %v", len(msgs), took)
			}
			if n3, _ := counters(); n3 != n2 {
				t.Fatalf("fill waits counted for pops that must not wait: %v -> %v", n2, n3)
			}
		})
	}
}

// queue-options.md, minPopWaitTime: the fill wait "engages only when all of
// these hold: [...] the queue is **not** empty [...] An empty queue is not
// this option's case: that belongs to the long-poll park and wake path,
// which is unaffected." A long-poll that parked on an empty queue and is
// woken by a push of fewer than batch messages is served at once, without a
// fill wait. (It used to re-evaluate the fill-wait condition on every pass
// of its park loop.)
func TestTimersMinPopWaitSkippedAfterPark(t *testing.T) {
	c := tc.Start(t, 1)
	n := c.Leader()
	ctx := timersCtx(t, time.Minute)
	const q = "timers.fill.parked"
	if err := n.Client().Configure(ctx, q, map[string]any{"minPopWaitTime": 300}); err != nil {
		t.Fatal(err)
	}
	type popped struct {
		msgs []tc.Message
		at   time.Time
		err  error
	}
	done := make(chan popped, 1)
	go func() {
		msgs, err := n.Client().Pop(ctx, q, tc.PopParams{Wait: true, Timeout: 5 * time.Second, Batch: 10, AutoAck: true})
		done <- popped{msgs, time.Now(), err}
	}()
	time.Sleep(300 * time.Millisecond) // parked on the empty queue
	before := nodeMetric(t, n, mFillWaits)
	pushed := time.Now()
	if _, err := n.Client().Push(ctx, []tc.PushItem{{Queue: q, Payload: 1, TransactionID: "a"}, {Queue: q, Payload: 2, TransactionID: "b"}}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.msgs) != 2 {
		t.Fatalf("woken pop: %d messages, %v", len(r.msgs), r.err)
	}
	lag := r.at.Sub(pushed)
	after := nodeMetric(t, n, mFillWaits)
	if lag >= 200*time.Millisecond || after != before {
		t.Fatalf("a long-poll parked on an empty queue returned %v after the push that woke it, fill waits %v -> %v; "+
			"want it served at once (the park/wake path is unaffected by minPopWaitTime)", lag, before, after)
	}
}
