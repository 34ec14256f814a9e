package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi"
)

// popAnswer is what a pop started by startPop got.
type popAnswer struct {
	who    int // the index the test gave the pop
	status int
	txIDs  []string
	err    error
}

// startPop sends a pop in the background and delivers its answer, tagged
// with who, on out. Cancelling ctx makes the client give up.
func (s *stack) startPop(ctx context.Context, who int, path string, out chan<- popAnswer) {
	go func() {
		a := popAnswer{who: who}
		defer func() { out <- a }()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
		if err != nil {
			a.err = err
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			a.err = err
			return
		}
		defer resp.Body.Close()
		a.status = resp.StatusCode
		raw, err := io.ReadAll(resp.Body)
		if err != nil || a.status != http.StatusOK {
			a.err = err
			return
		}
		var body struct {
			Messages []struct {
				TransactionID string `json:"transactionId"`
			} `json:"messages"`
		}
		if a.err = json.Unmarshal(raw, &body); a.err != nil {
			return
		}
		for _, m := range body.Messages {
			a.txIDs = append(a.txIDs, m.TransactionID)
		}
	}()
}

// parkingStack is a stack whose metrics registry the test reads directly
// (a Gather is much cheaper than a scrape of /metrics/prometheus).
type parkingStack struct {
	*stack
	reg *prometheus.Registry
}

func newParkingStack(t *testing.T) parkingStack {
	return newParkingStackWrapped(t, nil)
}

// newParkingStackWrapped is newParkingStack with the HTTP layer's view of
// the cluster wrapped (newStackWrapped).
func newParkingStackWrapped(t *testing.T, wrap func(httpapi.Cluster) httpapi.Cluster) parkingStack {
	reg := prometheus.NewRegistry()
	return parkingStack{newStackWrapped(t, wrap, func(c *httpapi.Config) { c.Registry = reg }), reg}
}

// parkedOn reads queen_queue_parked_consumers for queue ("" for discovery
// pops): 0 when the series is absent.
func (s parkingStack) parkedOn(queue string) int {
	s.t.Helper()
	families, err := s.reg.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "queen_queue_parked_consumers" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() == queue {
					return int(m.GetGauge().GetValue())
				}
			}
		}
	}
	return 0
}

// waitParked waits until exactly n pops are parked on queue.
func (s parkingStack) waitParked(queue string, n int) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := s.parkedOn(queue)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%d pops parked on queue %q after 10 s, want %d", got, queue, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// nextAnswer waits for one answer on ch.
func nextAnswer(t *testing.T, ch <-chan popAnswer, what string) popAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no pop answered within 10 s", what)
		return popAnswer{}
	}
}

// queen-api.md 4.9: "When several pops wait on the same scope, they SHOULD
// be served in arrival order." Three long-polls park one after the other on
// an empty scope; then messages are pushed one at a time, each only once
// the previous one was delivered: the first pop to have parked must get
// the first message, the second the second, the third the third. Every
// push wakes all the parked pops at once, so a broker that lets them race
// fails some of the twenty rounds of each pop form. Each push waits until
// the pops not served have parked again.
func TestLongPollsOfAScopeAreServedInArrivalOrder(t *testing.T) {
	s := newParkingStack(t)
	s.configure(obj{"queue": "order.d", "namespace": "orderns", "task": "d"})
	forms := []struct {
		name, pop, gauge string
		item             func(tx string) obj
	}{
		{"wildcard", "/api/v1/pop/queue/order.w?", "order.w",
			func(tx string) obj { return obj{"queue": "order.w", "payload": tx, "transactionId": tx} }},
		{"specific", "/api/v1/pop/queue/order.s/partition/p1?", "order.s",
			func(tx string) obj {
				return obj{"queue": "order.s", "partition": "p1", "payload": tx, "transactionId": tx}
			}},
		{"discovery", "/api/v1/pop?namespace=orderns&", "",
			func(tx string) obj { return obj{"queue": "order.d", "payload": tx, "transactionId": tx} }},
	}
	const rounds, pops = 20, 3
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			for round := range rounds {
				answers := make(chan popAnswer, pops)
				for i := range pops {
					s.startPop(context.Background(), i, f.pop+"batch=1&autoAck=true&wait=true&timeout=20000", answers)
					s.waitParked(f.gauge, i+1)
				}
				for i := range pops {
					tx := fmt.Sprintf("%s-r%d-m%d", f.name, round, i)
					s.push(f.item(tx))
					a := nextAnswer(t, answers, tx)
					if a.err != nil || a.status != http.StatusOK {
						t.Fatalf("round %d: pop %d answered %d (%v) for push %s", round, a.who, a.status, a.err, tx)
					}
					if a.who != i || len(a.txIDs) != 1 || a.txIDs[0] != tx {
						t.Fatalf("round %d: push %d (%s) was delivered to pop %d (in parking order, from 0), "+
							"which got %v; want pop %d to get it", round, i, tx, a.who, a.txIDs, i)
					}
					// The others looked too, and may have queued leases that
					// came back empty: the next message is pushed once they
					// wait again (an empty lease queued before a push cannot
					// claim what it brings; see waiters in pop.go).
					s.waitParked(f.gauge, pops-1-i)
				}
			}
		})
	}
}

// Pops of different consumer groups do not compete (each group gets every
// message), so they are not in line with each other: one message pushed
// wakes the first parked pop of each group, and both deliver it.
func TestLongPollsOfOtherConsumerGroupsAreNotInLine(t *testing.T) {
	s := newParkingStack(t)
	answers := make(chan popAnswer, 3)
	for i, group := range []string{"g1", "g1", "g2"} {
		s.startPop(context.Background(), i,
			"/api/v1/pop/queue/groups?consumerGroup="+group+"&batch=1&autoAck=true&wait=true&timeout=20000", answers)
		s.waitParked("groups", i+1)
	}
	s.push(obj{"queue": "groups", "payload": 1, "transactionId": "only"})
	got := map[int]bool{}
	for range 2 {
		a := nextAnswer(t, answers, "the pops of g1 and g2")
		if a.err != nil || a.status != http.StatusOK || len(a.txIDs) != 1 || a.txIDs[0] != "only" {
			t.Fatalf("pop %d answered %d %v (%v), want the message", a.who, a.status, a.txIDs, a.err)
		}
		got[a.who] = true
	}
	if !got[0] || !got[2] {
		t.Fatalf("delivered to pops %v, want the first pop of g1 (0) and the pop of g2 (2)", got)
	}
	s.waitParked("groups", 1) // g1's second pop waits for the next message
}

// A parked pop whose client gives up leaves its line: the pops behind it
// are served as if it had never come.
func TestLongPollThatGivesUpDoesNotBlockLaterOnes(t *testing.T) {
	s := newParkingStack(t)
	answers := make(chan popAnswer, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 3 {
		c := context.Background()
		if i == 0 {
			c = ctx
		}
		s.startPop(c, i, "/api/v1/pop/queue/quit?batch=1&autoAck=true&wait=true&timeout=20000", answers)
		s.waitParked("quit", i+1)
	}
	cancel()
	if a := nextAnswer(t, answers, "the cancelled pop"); a.who != 0 || a.err == nil {
		t.Fatalf("pop %d ended (%d, %v) when the first pop's client gave up", a.who, a.status, a.err)
	}
	s.waitParked("quit", 2)
	for i, tx := range []string{"m1", "m2"} {
		s.push(obj{"queue": "quit", "payload": i, "transactionId": tx})
		a := nextAnswer(t, answers, tx)
		if a.err != nil || a.status != http.StatusOK || a.who != i+1 || len(a.txIDs) != 1 || a.txIDs[0] != tx {
			t.Fatalf("push %s: pop %d answered %d %v (%v), want pop %d to get it", tx, a.who, a.status, a.txIDs, a.err, i+1)
		}
		s.waitParked("quit", 1-i)
	}
}

// leaseGate holds the answer to the first lease proposed once armed until a
// second lease is proposed (or 5 s pass), and records which came first.
type leaseGate struct {
	httpapi.Cluster
	armed      atomic.Bool
	leases     atomic.Int32
	second     chan struct{}
	overlapped atomic.Bool
}

func (g *leaseGate) Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error) {
	if _, lease := cmd.(*fsm.LeaseCapped); !lease || !g.armed.Load() {
		return g.Cluster.Propose(ctx, cmd)
	}
	n := g.leases.Add(1)
	if n == 2 {
		close(g.second)
	}
	res, idx, err := g.Cluster.Propose(ctx, cmd)
	if n == 1 {
		select {
		case <-g.second:
			g.overlapped.Store(true)
		case <-time.After(5 * time.Second):
		}
	}
	return res, idx, err
}

// The turn of a line passes as soon as the holder's lease is queued for
// the log, not when it commits or its pop is answered: the line must not
// put a commit between two pops of a scope. Two pops parked on a queue are
// woken by one push of two messages (two partitions); the first one's
// answer is held back until a second lease is proposed, which the second
// pop can do only if the first one passed the turn before its Propose
// returned.
func TestLongPollTurnPassesWhenTheLeaseIsQueued(t *testing.T) {
	gate := &leaseGate{second: make(chan struct{})}
	s := newParkingStackWrapped(t, func(c httpapi.Cluster) httpapi.Cluster {
		gate.Cluster = c
		return gate
	})
	answers := make(chan popAnswer, 2)
	for i := range 2 {
		s.startPop(context.Background(), i, "/api/v1/pop/queue/handoff?batch=1&wait=true&timeout=20000", answers)
		s.waitParked("handoff", i+1)
	}
	gate.armed.Store(true)
	s.push(obj{"queue": "handoff", "partition": "p1", "payload": 1, "transactionId": "a"},
		obj{"queue": "handoff", "partition": "p2", "payload": 2, "transactionId": "b"})
	got := map[string]int{}
	for range 2 {
		a := nextAnswer(t, answers, "the two woken pops")
		if a.err != nil || a.status != http.StatusOK || len(a.txIDs) != 1 {
			t.Fatalf("pop %d answered %d %v (%v), want one message", a.who, a.status, a.txIDs, a.err)
		}
		got[a.txIDs[0]]++
	}
	if got["a"] != 1 || got["b"] != 1 {
		t.Errorf("delivered %v, want each message once", got)
	}
	if !gate.overlapped.Load() {
		t.Error("the second pop proposed its lease only after the first one's Propose returned: " +
			"the turn was held until the commit")
	}
}

// A follower relays a woken (or new) pop to the leader and passes its
// line's turn once the relayed request is written, not when the leader
// answers: the leader's answer to the first relayed pop is held until the
// second one reaches it, which happens only if the first pop passed the
// turn before its answer came back.
func TestFollowerPassesTheTurnOnceTheRelayedPopIsWritten(t *testing.T) {
	testPassesTheTurnOnceThePopIsWritten(t, newFollowerStack)
}

func testPassesTheTurnOnceThePopIsWritten(t *testing.T, follow followerStack) {
	arrived := make(chan struct{}, 2)
	second := make(chan struct{})
	var requests atomic.Int32
	var overlapped atomic.Bool
	s, _ := follow(t, func(w http.ResponseWriter, r *http.Request) {
		n := requests.Add(1)
		arrived <- struct{}{}
		switch n {
		case 1:
			select {
			case <-second:
				overlapped.Store(true)
			case <-time.After(5 * time.Second):
			}
		case 2:
			close(second)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	answers := make(chan popAnswer, 2)
	s.startPop(context.Background(), 0, "/api/v1/pop/queue/relay?batch=1", answers)
	<-arrived // the first pop holds the turn until its request is written
	s.startPop(context.Background(), 1, "/api/v1/pop/queue/relay?batch=1", answers)
	for range 2 {
		if a := nextAnswer(t, answers, "the relayed pops"); a.err != nil || a.status != http.StatusNoContent {
			t.Fatalf("pop %d answered %d (%v), want the leader's 204", a.who, a.status, a.err)
		}
	}
	if !overlapped.Load() {
		t.Error("the second pop was relayed only after the leader answered the first: " +
			"the follower held the turn for the whole round trip")
	}
}
