package fsm

import (
	"maps"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/segments"
)

// events records what observers are told after each commit.
func (m *machine) events() *[]*Events {
	var out []*Events
	m.f.Subscribe(func(e *Events) { out = append(out, e) })
	return &out
}

func touched(e *Events) []string {
	return slices.Sorted(maps.Keys(e.Queues))
}

func TestEventsNameQueuesThatMayWakePops(t *testing.T) {
	m := newMachine(t)
	evs := m.events()
	last := func() *Events { return (*evs)[len(*evs)-1] }

	m.push(items("a", "p", "m1")...)
	m.push(items("b", "p", "m1")...)
	if e := last(); e.Index != m.index || !slices.Equal(touched(e), []string{"b"}) {
		t.Fatalf("push event %+v", e)
	}
	r := m.mustPop(Lease{Queue: "a", Batch: 1})
	if q := touched(last()); len(q) != 0 {
		t.Fatalf("a pop woke %v", q)
	}
	m.ack("", ackAll(r, AckCompleted)...)
	if q := touched(last()); !slices.Equal(q, []string{"a"}) {
		t.Fatalf("released lease woke %v", q)
	}
	m.push(items("a", "p", "m2")...)
	r = m.mustPop(Lease{Queue: "a", Batch: 1})
	m.ack("", ackAll(r, AckRetry)...)
	if q := touched(last()); !slices.Equal(q, []string{"a"}) {
		t.Fatalf("retry woke %v", q)
	}
	m.configure(Configure{Queue: "c", Options: DefaultOptions(segments.OriginConfigure)})
	if q := touched(last()); !slices.Equal(q, []string{"c"}) {
		t.Fatalf("configure woke %v", q)
	}
	m.deleteQueue("b")
	if q := touched(last()); !slices.Equal(q, []string{"b"}) {
		t.Fatalf("delete woke %v", q)
	}
	// One batch of several entries: one event with every queue.
	l1, l2 := m.entry(&Push{Items: items("x", "p", "1")}), m.entry(&Push{Items: items("y", "p", "1")})
	n := len(*evs)
	m.f.ApplyBatch([]*raft.Log{l1, l2})
	if len(*evs) != n+1 || !slices.Equal(touched(last()), []string{"x", "y"}) || last().Index != l2.Index {
		t.Fatalf("batch events %+v", (*evs)[n:])
	}
	m.apply(&RegisterNode{ID: "n1"})
	if !last().Nodes {
		t.Fatal("node registry change not flagged")
	}
	// A batch that only replays applied entries notifies nothing.
	n = len(*evs)
	m.f.ApplyBatch([]*raft.Log{l1})
	if len(*evs) != n {
		t.Fatal("replay notified observers")
	}
}
