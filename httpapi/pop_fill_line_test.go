package httpapi_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi"
)

// fillWaitsDone reads queen_pop_fill_wait_total.
func (s parkingStack) fillWaitsDone() int {
	s.t.Helper()
	families, err := s.reg.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "queen_pop_fill_wait_total" {
			for _, m := range f.GetMetric() {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

// stealThenRefill stages, around the first lease of batch 10 proposed once
// armed, what another consumer and a producer do meanwhile: another
// consumer (a pop of another form or node) takes every message just before
// that lease, so it comes back empty, and a message is pushed just after it.
type stealThenRefill struct {
	httpapi.Cluster
	armed atomic.Bool
	queue string
}

func (c *stealThenRefill) Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error) {
	l, ok := cmd.(*fsm.LeaseCapped)
	if !ok || l.Lease.Batch != 10 || !c.armed.CompareAndSwap(true, false) {
		return c.Cluster.Propose(ctx, cmd)
	}
	bg, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	steal := &fsm.Lease{Scope: fsm.ScopeWildcard, Queue: c.queue, Group: fsm.QueueMode, Batch: 100,
		MaxPartitions: 100, AutoAck: true, WindowBatch: 100}
	if _, _, err := c.Cluster.Propose(bg, steal); err != nil {
		return nil, 0, err
	}
	res, idx, err := c.Cluster.Propose(ctx, cmd)
	if _, _, perr := c.Cluster.Propose(bg, &fsm.Push{Items: []fsm.PushItem{{Queue: c.queue, Partition: "p",
		TxID: "m2", Payload: []byte(`2`)}}}); perr != nil {
		return nil, 0, perr
	}
	return res, idx, err
}

// queue-options.md, minPopWaitTime: "The wait is also capped by the
// caller's own remaining timeout" and by the option; queen-api.md 4.9: "The
// wait is capped by the option ...; then the pop claims whatever is there."
//
// A long-poll (batch 10) fill-waits on a queue holding one message; another
// consumer takes it just before the pop's claim, and a new message arrives
// just after. The pop looks again and claims at once (pop.go, the retry
// after an empty claim): it must not hold its batch back for a second
// minPopWaitTime.
func TestLongPollWhoseClaimCameBackEmptyDoesNotFillWaitTwice(t *testing.T) {
	var staged *stealThenRefill
	s := newParkingStackWrapped(t, func(c httpapi.Cluster) httpapi.Cluster {
		staged = &stealThenRefill{Cluster: c, queue: "twicefill"}
		return staged
	})
	s.configure(obj{"queue": "twicefill", "options": obj{"minPopWaitTime": 1000}})
	s.push(obj{"queue": "twicefill", "partition": "p", "payload": 1, "transactionId": "m1"})
	staged.armed.Store(true)
	answers := make(chan popAnswer, 1)
	start := time.Now()
	s.startPop(context.Background(), 0, "/api/v1/pop/queue/twicefill?batch=10&wait=true&timeout=8000&autoAck=true", answers)
	a := nextAnswer(t, answers, "the fill-waiting pop")
	took := time.Since(start)
	if a.status != http.StatusOK || len(a.txIDs) != 1 || a.txIDs[0] != "m2" {
		t.Fatalf("the pop answered %d %v (%v), want m2", a.status, a.txIDs, a.err)
	}
	if n := s.fillWaitsDone(); n != 1 || took > 1800*time.Millisecond {
		t.Errorf("the pop held its batch back %d times (queen_pop_fill_wait_total) and answered after %v; "+
			"minPopWaitTime is 1000 ms: want one fill wait", n, took.Round(time.Millisecond))
	}
}

// queen-api.md 4.9: "`wait=false` answers at once (`200` or `204`)".
//
// A long-poll (batch 10) holds back an under-full batch for minPopWaitTime
// (3 s); the pops behind it stand aside meanwhile (pop_lines.go, behindFill). A
// wait=false pop of the same scope that arrives during that fill wait must
// still answer at once, not when the pop ahead's fill wait ends.
func TestNoWaitPopIsAnsweredAtOnceWhileAPopAheadFillWaits(t *testing.T) {
	s := newParkingStack(t)
	answers := s.startFillWait("nowaitfill", 3000, 10000) // pop 0 is in its fill wait
	start := time.Now()
	s.startPop(context.Background(), 1, "/api/v1/pop/queue/nowaitfill?batch=1", answers)
	a := nextAnswer(t, answers, "the two pops")
	took := time.Since(start)
	if a.who != 1 || took > time.Second {
		t.Errorf("pop %d answered first (%d %v, %v), %v after the wait=false pop arrived; want the wait=false pop "+
			"answered at once, not at the end of the fill wait (3 s) of the long-poll ahead of it",
			a.who, a.status, a.txIDs, a.err, took.Round(time.Millisecond))
	}
	nextAnswer(t, answers, "the other pop")
}

// Drain (server.go): "answers every parked long-poll pop with 204 now and
// every later one at once: called when the node shuts down, so in-flight
// requests finish" (crownd gives them 30 s; minPopWaitTime goes to 60 s).
//
// A long-poll holds back an under-full batch for 5 s when the node drains:
// it must answer promptly (claiming what is there, or 204), and a wait=false
// pop of its scope during the drain must not wait for that fill wait.
func TestFillWaitingLongPollAndNoWaitPopBehindItAnswerPromptlyWhenTheNodeDrains(t *testing.T) {
	s := newParkingStack(t)
	answers := s.startFillWait("drainfill", 5000, 10000) // pop 0 is in its fill wait
	start := time.Now()
	s.API.Drain()
	s.startPop(context.Background(), 1, "/api/v1/pop/queue/drainfill?batch=1", answers)
	for range 2 {
		a := nextAnswer(t, answers, "the pops while draining")
		if took := time.Since(start); took > 1500*time.Millisecond {
			t.Errorf("pop %d (0: the fill-waiting long-poll, 1: wait=false) answered %d %v (%v) %v after the node "+
				"started draining; want both answered promptly, not at the end of the 5 s fill wait",
				a.who, a.status, a.txIDs, a.err, took.Round(time.Millisecond))
		}
	}
}
