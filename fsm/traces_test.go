package fsm

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

func (m *machine) trace(c AddTrace) *AddTraceResult {
	m.t.Helper()
	if c.MaxPerMessage == 0 {
		c.MaxPerMessage, c.MaxTotal, c.MaxBytes = TraceMaxPerMessage, TraceMaxTotal, TraceMaxTotalBytes
	}
	if c.Data == nil {
		c.Data = []byte(`{}`)
	}
	return m.apply(&c)[0].(*AddTraceResult)
}

func traceTypes(vs []TraceView) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.EventType
	}
	return out
}

func (m *machine) traceTotals() (count, size uint64) {
	m.view(func(tx *segments.Tx) error { count, size = tx.TraceTotals(); return nil })
	return count, size
}

func TestTracesAddListAndNames(t *testing.T) {
	m := newMachine(t)
	m.push(items("orders", "p1", "t1", "t2")...)
	m.push(items("audit", "Default", "a1")...)
	p1, pa := m.partition("orders", "p1").UUID, m.partition("audit", "Default").UUID

	if r := m.trace(AddTrace{PartitionID: p1, TxID: "nope"}); r.Found {
		t.Fatal("trace on an unknown message stored")
	}
	if r := m.trace(AddTrace{PartitionID: [16]byte{1}, TxID: "t1"}); r.Found {
		t.Fatal("trace on an unknown partition stored")
	}
	if c, _ := m.traceTotals(); c != 0 {
		t.Fatalf("%d events stored by refused traces", c)
	}
	r1 := m.trace(AddTrace{PartitionID: p1, TxID: "t1", Group: "billing", Worker: "w1", EventType: "received",
		Names: []string{"tenant-acme", "checkout"}, Data: []byte(`{"step":1}`)})
	if !r1.Found || r1.ID == ([16]byte{}) {
		t.Fatalf("%+v", r1)
	}
	m.advance(time.Second)
	m.trace(AddTrace{PartitionID: p1, TxID: "t1", EventType: "charged", Names: []string{"checkout"}})
	m.advance(time.Second)
	m.trace(AddTrace{PartitionID: p1, TxID: "t2", EventType: "t2-info", Names: []string{"tenant-acme"}})
	m.advance(time.Second)
	m.trace(AddTrace{PartitionID: pa, TxID: "a1", EventType: "audit", Names: []string{"audit-only"}})
	m.trace(AddTrace{PartitionID: pa, TxID: "a1", EventType: "unnamed"})

	got := must1(m.f.MessageTraces(p1, "t1"))
	if !reflect.DeepEqual(traceTypes(got), []string{"received", "charged"}) {
		t.Fatalf("t1 traces %v", traceTypes(got))
	}
	if g := got[0]; g.ID != r1.ID || g.Group != "billing" || g.Worker != "w1" || string(g.Data) != `{"step":1}` ||
		!reflect.DeepEqual(g.Names, []string{"tenant-acme", "checkout"}) || g.CreatedAt >= got[1].CreatedAt {
		t.Fatalf("first event %+v", g)
	}
	if got := must1(m.f.MessageTraces(p1, "missing")); len(got) != 0 {
		t.Fatalf("traces of a missing message %v", got)
	}

	byName, total, err := m.f.TracesByName("tenant-acme", 10, 0)
	if err != nil || total != 2 || !reflect.DeepEqual(traceTypes(byName), []string{"received", "t2-info"}) {
		t.Fatalf("by name %v %d %v", traceTypes(byName), total, err)
	}
	if v := byName[1]; v.TxID != "t2" || v.Queue != "orders" || v.Partition != "p1" || v.PartitionID != p1 || string(v.Payload) != `"t2"` {
		t.Fatalf("by-name message fields %+v", v)
	}
	// Pagination: the total counts everything, the page what was asked.
	page, total, _ := m.f.TracesByName("tenant-acme", 1, 1)
	if total != 2 || !reflect.DeepEqual(traceTypes(page), []string{"t2-info"}) {
		t.Fatalf("page %v %d", traceTypes(page), total)
	}
	if page, total, _ := m.f.TracesByName("tenant-acme", 5, 7); total != 2 || len(page) != 0 {
		t.Fatalf("page past the end %v %d", page, total)
	}

	names, total, err := m.f.TraceNames(10, 0)
	want := []TraceNameView{
		{Name: "audit-only", Traces: 1, Messages: 1},
		{Name: "tenant-acme", Traces: 2, Messages: 2},
		{Name: "checkout", Traces: 2, Messages: 1},
	}
	for i := range names {
		names[i].LastSeen = 0
	}
	if err != nil || total != 3 || !reflect.DeepEqual(names, want) {
		t.Fatalf("names %+v %d %v", names, total, err)
	}
	if page, total, _ := m.f.TraceNames(1, 2); total != 3 || len(page) != 1 || page[0].Name != "checkout" {
		t.Fatalf("names page %+v", page)
	}
}

func TestTracesPerMessageAndTotalBounds(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3")...)
	pid := m.partition("q", "p").UUID
	add := func(tx string, i int, maxPer, maxTotal uint32, maxBytes uint64) *AddTraceResult {
		return m.trace(AddTrace{PartitionID: pid, TxID: tx, EventType: fmt.Sprintf("%s-%d", tx, i),
			Names: []string{"n"}, MaxPerMessage: maxPer, MaxTotal: maxTotal, MaxBytes: maxBytes})
	}
	for i := range 5 {
		r := add("m1", i, 3, 100, 1<<20)
		if want := uint32(0); i >= 3 {
			want = 1
			if r.Evicted != want {
				t.Fatalf("event %d evicted %d", i, r.Evicted)
			}
		}
	}
	if got := traceTypes(must1(m.f.MessageTraces(pid, "m1"))); !reflect.DeepEqual(got, []string{"m1-2", "m1-3", "m1-4"}) {
		t.Fatalf("per-message bound kept %v", got)
	}
	// A total bound of 4 over the cluster evicts the oldest anywhere.
	add("m2", 0, 3, 4, 1<<20)
	r := add("m3", 0, 3, 4, 1<<20)
	if r.Evicted != 1 {
		t.Fatalf("evicted %d", r.Evicted)
	}
	if got := traceTypes(must1(m.f.MessageTraces(pid, "m1"))); !reflect.DeepEqual(got, []string{"m1-3", "m1-4"}) {
		t.Fatalf("total bound kept %v", got)
	}
	if c, _ := m.traceTotals(); c != 4 {
		t.Fatalf("%d events", c)
	}
	// The byte bound: room for about two events.
	_, size := m.traceTotals()
	add("m3", 1, 3, 100, size/2)
	if c, s := m.traceTotals(); c != 2 || s > size/2 {
		t.Fatalf("after the byte bound: %d events, %d bytes (bound %d)", c, s, size/2)
	}
	if _, total, _ := m.f.TracesByName("n", 10, 0); total != 2 {
		t.Fatalf("name index holds %d rows for 2 events", total)
	}
}

func TestTracesGoWithTheirMessages(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.RetentionSeconds = true, 10 })
	m.push(items("q", "p", "old")...)
	m.advance(20 * time.Second)
	m.push(items("q", "p", "new")...)
	m.push(items("other", "p", "o1")...)
	pid, other := m.partition("q", "p").UUID, m.partition("other", "p").UUID
	m.trace(AddTrace{PartitionID: pid, TxID: "old", EventType: "old", Names: []string{"n"}})
	m.trace(AddTrace{PartitionID: pid, TxID: "new", EventType: "new", Names: []string{"n"}})
	m.trace(AddTrace{PartitionID: other, TxID: "o1", EventType: "o1", Names: []string{"n"}})

	// Retention deletes the old segment: its message's events go with it.
	m.apply(&Sweep{Queue: "q", MaxSegments: 100})
	if got := must1(m.f.MessageTraces(pid, "old")); len(got) != 0 {
		t.Fatalf("traces of a deleted message %v", got)
	}
	if byName, _, _ := m.f.TracesByName("n", 10, 0); !reflect.DeepEqual(traceTypes(byName), []string{"new", "o1"}) {
		t.Fatalf("after retention %v", traceTypes(byName))
	}
	// Deleting the queue deletes the rest of its traces, and only those.
	m.deleteQueue("q")
	if byName, _, _ := m.f.TracesByName("n", 10, 0); !reflect.DeepEqual(traceTypes(byName), []string{"o1"}) {
		t.Fatalf("after queue deletion %v", traceTypes(byName))
	}
	if c, _ := m.traceTotals(); c != 1 {
		t.Fatalf("%d events counted", c)
	}
	// Every row went: the order index holds the one event left.
	m.view(func(tx *segments.Tx) error {
		if _, off, _, ok, err := tx.OldestTrace(); err != nil || !ok || off != 1 {
			t.Fatalf("oldest %v %v %v", off, ok, err)
		}
		return nil
	})
}

// An OJS backlog purge that cuts a segment after its live leased head
// deletes the cut messages' trace events too, so the totals stay true.
func TestTracesGoWhenAPurgeCutsTheirSegment(t *testing.T) {
	m := newMachine(t)
	m.ojsOK(&OJSCreateQueue{Name: "q"})
	m.push(items("q", "p", "1", "2", "3", "4")...)
	lr := m.pop(wild("q", 1))
	pid := m.partition("q", "p").UUID
	for _, tx := range []string{"3", "4"} {
		m.trace(AddTrace{PartitionID: pid, TxID: tx, EventType: "e" + tx, Names: []string{"nm"}})
	}
	m.ojsOK(&OJSPurgeQueue{Name: "q", States: PurgeBacklog})
	if got := must1(m.f.MessageTraces(pid, "3")); len(got) != 0 {
		t.Fatalf("traces of a purged message %v", got)
	}
	if byName, _, _ := m.f.TracesByName("nm", 10, 0); len(byName) != 0 {
		t.Fatalf("by name after the purge %v", traceTypes(byName))
	}
	if c, size := m.traceTotals(); c != 0 || size != 0 {
		t.Fatalf("totals after the purge: %d events, %d bytes", c, size)
	}
	m.ack(QueueMode, ackAll(lr, AckCompleted)...)
}
