package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi"
)

// Pops of a scope in line (pop_lines.go, waiters): what serving them in arrival
// order must not lose of queen-api.md 4.9 (wake-ups, timeouts, a fill wait's
// place), and that no way of leaving a line wedges it.

// queen-api.md 4.9: a waiting pop "waits ... until either something may have
// become deliverable for it (... a lease released or expired ...), in which
// case it tries again; or the deadline arrival + timeout passes".
//
// Two long-polls wait on an empty queue; one message wakes both. The first
// in line leases it (leaseSeconds=1) and never acks. The second looks before
// that lease is applied (the turn passes once the lease is queued), so its
// own lease comes back empty: it must look again after that claim and park
// with the winner's lease expiry as its timer, so the message is delivered
// to it when that lease expires, well before its deadline. Both pops have
// the same lease and timeout, so the test does not depend on which wins.
func TestLongPollThatLostTheWakeUpGetsTheMessageWhenTheWinnersLeaseExpires(t *testing.T) {
	s := newParkingStack(t)
	answers := make(chan popAnswer, 2)
	const pop = "/api/v1/pop/queue/expiry?batch=1&wait=true&timeout=3500&leaseSeconds=1"
	s.startPop(context.Background(), 0, pop, answers)
	s.waitParked("expiry", 1)
	s.startPop(context.Background(), 1, pop, answers)
	s.waitParked("expiry", 2)
	s.push(obj{"queue": "expiry", "payload": 1, "transactionId": "m"})
	a := nextAnswer(t, answers, "the woken pops")
	if a.status != http.StatusOK || len(a.txIDs) != 1 {
		t.Fatalf("pop %d answered %d %v (%v), want one of them to get the message", a.who, a.status, a.txIDs, a.err)
	}
	start := time.Now()
	b := nextAnswer(t, answers, "the other pop")
	if b.status != http.StatusOK || len(b.txIDs) != 1 || b.txIDs[0] != "m" {
		t.Fatalf("pop %d answered %d %v (%v) after %v: pop %d's 1 s lease on the message expired "+
			"while it waited, want the message redelivered to it", b.who, b.status, b.txIDs, b.err,
			time.Since(start).Round(time.Millisecond), a.who)
	}
}

// The same on a follower: a woken long-poll is relayed to the leader, which
// meanwhile leased the message to another consumer (1 s) and answers 204.
// The pop must catch up with the leader, look again and park with that
// lease's expiry as its timer: queen-api.md 4.9 wants it to try again when
// the lease expires.
func TestFollowerLongPollAnsweredEmptyByTheLeaderWakesWhenTheLeaseExpires(t *testing.T) {
	var (
		st       *stack
		relays   atomic.Int32
		leasedAt atomic.Int64
	)
	handler := func(w http.ResponseWriter, r *http.Request) {
		switch relays.Add(1) {
		case 1: // the pop's first round, on an empty queue
		case 2: // woken by the push: another consumer leased it just before
			lease := &fsm.Lease{Scope: fsm.ScopeWildcard, Queue: "fexpiry", Group: fsm.QueueMode, Batch: 1,
				MaxPartitions: 1, LeaseSeconds: 1, WindowBatch: 100}
			leasedAt.Store(time.Now().UnixNano()) // the lease's time is no earlier
			res, _, err := st.Node.Propose(r.Context(), lease)
			if err != nil || res.(*fsm.LeaseResult).Count() != 1 {
				t.Errorf("the other consumer's lease: %v %+v", err, res)
			}
		default: // as the leader would: the message once the lease has expired
			if time.Since(time.Unix(0, leasedAt.Load())) >= time.Second {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"messages":[{"transactionId":"m"}]}`)
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}
	reg := prometheus.NewRegistry()
	st, _ = newFollowerStack(t, handler, func(c *httpapi.Config) { c.Registry = reg })
	s := parkingStack{st, reg}
	answers := make(chan popAnswer, 1)
	s.startPop(context.Background(), 0, "/api/v1/pop/queue/fexpiry?batch=1&wait=true&timeout=3500", answers)
	s.waitParked("fexpiry", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := s.Node.Propose(ctx, &fsm.Push{Items: []fsm.PushItem{{Queue: "fexpiry", Partition: "p",
		TxID: "m", Payload: []byte(`1`)}}}); err != nil {
		t.Fatal(err)
	}
	a := nextAnswer(t, answers, "the follower's long-poll")
	if a.status != http.StatusOK || len(a.txIDs) != 1 || a.txIDs[0] != "m" {
		t.Fatalf("the long-poll answered %d %v (%v) after %d relays: the other consumer's 1 s lease expired "+
			"2.4 s before its deadline, want it woken and the message relayed", a.status, a.txIDs, a.err, relays.Load())
	}
}

// forwardPop: a follower's relayed pop that finds this node became the
// leader while it waited for one returns "became leader; the next round
// proposes". That next round must come at once, not with the next wake-up:
// a message that was in the queue before the pop arrived is delivered by
// the long-poll on the node that now leads.
func TestLongPollOfANodeElectedWhileRelayingGetsTheWaitingMessage(t *testing.T) {
	var staged *electedMidRequest
	s := newStackWrapped(t, func(c httpapi.Cluster) httpapi.Cluster {
		staged = &electedMidRequest{Cluster: c}
		return staged
	})
	s.push(obj{"queue": "elected", "payload": 1, "transactionId": "m"})
	staged.following.Store(true) // no leader known until the pop waits for one
	p := s.pop("/api/v1/pop/queue/elected?batch=1&wait=true&timeout=2500")
	if staged.following.Load() {
		t.Fatal("the pop never waited for a leader: the staging did not happen")
	}
	if p == nil {
		t.Fatal("the long-poll answered 204 at its deadline on the node that leads, " +
			"with a message waiting in the queue since before it arrived")
	}
}

// queen-api.md 4.9: "`wait=false` answers at once (`200` or `204`)"; and a
// long-poll answers 204 when arrival + timeout passes.
//
// Long-polls of the specific form park on a partition that stays empty while
// another partition of the same queue takes a steady stream of pushes. Every
// commit to the queue wakes every line of the queue, so the parked pops look
// one after another, each time. A new pop of that partition, behind them in
// the line, must still get its look within a round of theirs (grant's
// rounds: no pop looks twice while another waits for its first), and a
// long-poll must answer by its own timeout whether or not its turn came.
func TestNewPopIsAnsweredWhileCommitsKeepWakingTheParkedPopsAheadOfIt(t *testing.T) {
	s := newParkingStack(t)
	const parked = 512
	answers := make(chan popAnswer, parked+2)
	for i := range parked {
		s.startPop(context.Background(), i, "/api/v1/pop/queue/busy/partition/idle?batch=1&wait=true&timeout=30000", answers)
	}
	s.waitParked("busy", parked)
	stop := make(chan struct{})
	var pushed atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, _, err := s.Node.Propose(ctx, &fsm.Push{Items: []fsm.PushItem{{Queue: "busy", Partition: "hot",
					TxID: fmt.Sprintf("hot-%d-%d", g, i), Payload: []byte(`1`)}}})
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				pushed.Add(1)
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	time.Sleep(200 * time.Millisecond) // the stream is flowing
	start := time.Now()
	const late = 6 * time.Second
	s.startPop(context.Background(), parked, "/api/v1/pop/queue/busy/partition/idle?batch=1", answers)
	s.startPop(context.Background(), parked+1, "/api/v1/pop/queue/busy/partition/idle?batch=1&wait=true&timeout=500", answers)
	for range 2 {
		select {
		case a := <-answers:
			if a.status != http.StatusNoContent || a.err != nil {
				t.Fatalf("pop %d answered %d (%v), want 204", a.who, a.status, a.err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("pop %d (wait=false, or a long-poll with timeout 500 ms) answered only after %v, "+
					"while pushes to another partition of the queue kept waking the %d pops parked ahead of it",
					a.who, took.Round(time.Millisecond), parked)
			}
		case <-time.After(late):
			t.Fatalf("the new pops of the partition (wait=false, and a long-poll with timeout 500 ms) had not answered "+
				"%v after they arrived, while %d pushes to another partition of the queue kept waking the %d pops "+
				"parked ahead of them", late, pushed.Load(), parked)
		}
	}
}

// queen-api.md 4.9: "When several pops wait on the same scope, they SHOULD
// be served in arrival order"; README: "Long-polls are served in arrival
// order on the node they wait on". A pop that holds back an under-full batch
// (minPopWaitTime) keeps its claim on them: the pops behind it stand aside
// while it waits (pop_lines.go, behindFill).
//
// Pop A (batch 10) arrives at a queue holding one message and starts its
// fill wait; pop B (batch 1) arrives later. B must not take the message A
// is waiting to fill its batch with: A arrived first and claims it when its
// fill wait ends.
func TestLaterPopDoesNotTakeTheMessageAnEarlierPopIsFillingItsBatchWith(t *testing.T) {
	s := newParkingStack(t)
	answers := s.startFillWait("fillorder", 1000, 3000)
	s.startPop(context.Background(), 1, "/api/v1/pop/queue/fillorder?batch=1&wait=true&timeout=3000", answers)
	a := nextAnswer(t, answers, "the two pops")
	if a.who != 0 || a.status != http.StatusOK || len(a.txIDs) != 1 {
		t.Fatalf("pop %d answered first (%d %v, %v); want pop 0, which arrived first and was filling its batch, "+
			"to get the message", a.who, a.status, a.txIDs, a.err)
	}
}

// The order tests cancel one parked pop; here clients give up at random points of their pops (waiting for the
// turn, holding it, in Propose, parked) among long-polls with short
// timeouts, wait=false pops, autoAck and leased pops, and pushes. A pop
// that leaves at any point must leave its line: afterwards nothing is
// parked (queen_queue_parked_consumers back to 0) and nothing holds the
// turn (a new long-poll of the scope is served).
func TestPopLineIsNotWedgedByPopsLeavingAtAnyPoint(t *testing.T) {
	s := newParkingStack(t)
	const pops = 200
	answers := make(chan popAnswer, pops)
	s.popStorm(t, "storm", pops, func(i int) string {
		switch i % 4 {
		case 0:
			return fmt.Sprintf("/api/v1/pop/queue/storm?batch=%d&wait=true&timeout=%d", 1+i%3, 50+i%7*40)
		case 1:
			return "/api/v1/pop/queue/storm?batch=2&autoAck=true"
		case 2:
			return fmt.Sprintf("/api/v1/pop/queue/storm?batch=1&wait=true&timeout=%d&autoAck=true", 100+i%5*100)
		default:
			return "/api/v1/pop/queue/storm?batch=1&wait=true&timeout=2000&leaseSeconds=1"
		}
	}, func(i int) {
		s.push(obj{"queue": "storm", "partition": fmt.Sprintf("p%d", i%3), "payload": i})
	}, 5, 6, 7*time.Millisecond, answers)
	// Drain what is left, then a long-poll must be woken by a push. The
	// storm's 1 s leases run out first, so that the drain takes their
	// messages too: on a loaded host one ran out after the drain, and the
	// long-poll took it at once instead of parking.
	time.Sleep(1200 * time.Millisecond)
	for s.pop("/api/v1/pop/queue/storm?batch=100&partitions=10&autoAck=true") != nil {
	}
	s.startPop(context.Background(), -1, "/api/v1/pop/queue/storm?batch=1&wait=true&timeout=10000&autoAck=true", answers)
	s.waitParked("storm", 1)
	s.push(obj{"queue": "storm", "payload": 1, "transactionId": "after"})
	a := nextAnswer(t, answers, "the long-poll after the storm")
	if a.status != http.StatusOK || len(a.txIDs) != 1 {
		t.Fatalf("after the storm a long-poll answered %d %v (%v)", a.status, a.txIDs, a.err)
	}
}

// The same on a follower, whose turn passes
// from the HTTP client's write loop (WroteRequest) while the pop may be
// gone already: relayed pops to a scripted leader that answers 204 at once
// or late, clients that give up at random points, and commits on this node
// that wake its parked pops. Afterwards nothing is parked and a woken
// long-poll is relayed again (run with -race).
func TestFollowerPopLineIsNotWedgedByRelayedPopsLeavingAtAnyPoint(t *testing.T) {
	var relayed atomic.Int64
	leaderHandler := func(w http.ResponseWriter, r *http.Request) {
		n := relayed.Add(1)
		switch n % 5 {
		case 0:
			select {
			case <-time.After(300 * time.Millisecond):
			case <-r.Context().Done():
			}
		default:
			time.Sleep(time.Duration(n%7) * time.Millisecond)
		}
		w.WriteHeader(http.StatusNoContent)
	}
	reg := prometheus.NewRegistry()
	st, _ := newFollowerStack(t, leaderHandler, func(c *httpapi.Config) { c.Registry = reg })
	s := parkingStack{st, reg}
	localPush := func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, _, err := s.Node.Propose(ctx, &fsm.Push{Items: []fsm.PushItem{{Queue: "fstorm",
			Partition: fmt.Sprintf("p%d", i%3), TxID: fmt.Sprintf("f%d", i), Payload: []byte(`1`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	const pops = 120
	answers := make(chan popAnswer, pops)
	s.popStorm(t, "fstorm", pops, func(i int) string {
		switch i % 3 {
		case 0:
			return fmt.Sprintf("/api/v1/pop/queue/fstorm?batch=1&wait=true&timeout=%d", 100+i%7*60)
		case 1:
			return "/api/v1/pop/queue/fstorm?batch=2"
		default:
			return fmt.Sprintf("/api/v1/pop/queue/fstorm?batch=1&wait=true&timeout=%d", 300+i%5*100)
		}
	}, localPush, 4, 7, 5*time.Millisecond, answers)
	before := relayed.Load()
	s.startPop(context.Background(), -1, "/api/v1/pop/queue/fstorm?batch=1&wait=true&timeout=3000", answers)
	s.waitParked("fstorm", 1)
	localPush(-1)
	deadline := time.Now().Add(2 * time.Second)
	for relayed.Load() < before+2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if relayed.Load() < before+2 {
		t.Fatalf("after the storm a woken long-poll was not relayed (relayed %d, before %d)", relayed.Load(), before)
	}
	nextAnswer(t, answers, "the last long-poll")
}

// startFillWait configures queue with minPopWaitTime fillMs, stores one
// message and starts pop 0 (batch 10, a long-poll of timeoutMs) on it; it
// returns once that pop is in its fill wait (nothing observes it there: the
// fill-wait counters move when it ends, so it waits 300 ms), with the
// channel its answer, and one more pop's, arrive on.
func (s parkingStack) startFillWait(queue string, fillMs, timeoutMs int) chan popAnswer {
	s.configure(obj{"queue": queue, "options": obj{"minPopWaitTime": fillMs}})
	s.push(obj{"queue": queue, "payload": 1, "transactionId": "m"})
	answers := make(chan popAnswer, 2)
	s.startPop(context.Background(), 0, fmt.Sprintf("/api/v1/pop/queue/%s?batch=10&wait=true&timeout=%d", queue, timeoutMs), answers)
	time.Sleep(300 * time.Millisecond)
	return answers
}

// popStorm starts n pops, the i-th on path(i); after starting the i-th it
// calls push(i) when i%pushEvery is 0, and when i%cancelEvery is 0 it
// cancels that pop's request after (i%9)*cancelStep. It waits for every
// answer, cancels what is left and waits until nothing of queue is parked.
func (s parkingStack) popStorm(t *testing.T, queue string, n int, path func(i int) string, push func(i int),
	pushEvery, cancelEvery int, cancelStep time.Duration, answers chan popAnswer) {
	t.Helper()
	var cancels []context.CancelFunc
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		s.startPop(ctx, i, path(i), answers)
		if i%pushEvery == 0 {
			push(i)
		}
		if i%cancelEvery == 0 {
			go func() {
				time.Sleep(time.Duration(i%9) * cancelStep)
				cancel()
			}()
		}
	}
	for range n {
		nextAnswer(t, answers, "the "+queue+" storm")
	}
	for _, c := range cancels {
		c()
	}
	s.waitParked(queue, 0)
}
