package fsm

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func systemSampleCommands() map[Type]Command {
	return map[Type]Command{
		TypeAddTrace: &AddTrace{PartitionID: [16]byte{7, 7}, TxID: "tx-9", Group: "billing", Worker: "w-1",
			EventType: "error", Names: []string{"tenant-acme", "checkout"}, Data: []byte(`{"step":"charged"}`),
			MaxPerMessage: 100, MaxTotal: 100000, MaxBytes: 64 << 20},
		TypeSetMaintenance:    &SetMaintenance{Enabled: true, MaxMessages: 10000, MaxBytes: 16 << 20},
		TypeSetPopMaintenance: &SetPopMaintenance{Enabled: true},
	}
}

func (m *machine) maintenance(on bool) *MaintenanceResult {
	m.t.Helper()
	return m.apply(&SetMaintenance{Enabled: on, MaxMessages: PushBufferMaxMessages, MaxBytes: PushBufferMaxBytes})[0].(*MaintenanceResult)
}

func statuses(r *PushResult) []uint8 {
	out := make([]uint8, len(r.Items))
	for i, it := range r.Items {
		out[i] = it.Status
	}
	return out
}

func TestSystemPushMaintenanceBuffersThenDrainsInOrder(t *testing.T) {
	m := newMachine(t)
	m.push(items("orders", "p1", "before")...)
	if r := m.maintenance(true); !r.Switches.Maintenance || r.Switches.BufferMaxMessages != PushBufferMaxMessages {
		t.Fatalf("switch on: %+v", r)
	}
	r1 := m.push(items("orders", "p1", "b1", "b2")...)
	if !r1.Buffered() || !reflect.DeepEqual(statuses(r1), []uint8{PushBuffered, PushBuffered}) {
		t.Fatalf("push during maintenance: %+v", r1)
	}
	// A new queue and partition, and a repeated id inside the buffer.
	m.push(item("orders", "p2", "c1", `1`), item("audit", "Default", "d1", `2`))
	m.push(items("orders", "p1", "b3", "b1")...)
	sw := m.apply(&SetPopMaintenance{})[0].(*MaintenanceResult).Switches
	if sw.Buffer != (PushBufferTotals{Requests: 3, Messages: 6, Bytes: sw.Buffer.Bytes}) || sw.Buffer.Bytes == 0 {
		t.Fatalf("buffer totals %+v", sw.Buffer)
	}
	// Nothing buffered is visible yet.
	if lr := m.pop(Lease{Queue: "orders", Batch: 100}); !reflect.DeepEqual(delivered(lr), []string{"p1/before"}) {
		t.Fatalf("pop during maintenance delivered %v", delivered(lr))
	}
	if m.queue("audit") != nil {
		t.Fatal("a buffered push created its queue")
	}
	m.advance(time.Second)
	off := m.maintenance(false)
	if off.Switches.Maintenance || off.Switches.Buffer != (PushBufferTotals{}) {
		t.Fatalf("switch off: %+v", off.Switches)
	}
	if off.Drained != (DrainStats{Requests: 3, Queued: 5, Duplicates: 1}) {
		t.Fatalf("drained %+v", off.Drained)
	}
	lr := m.pop(Lease{Queue: "orders", Partition: "p1", Scope: ScopeSpecific, Group: "g", Batch: 100})
	if got := txids(lr); !reflect.DeepEqual(got, []string{"before", "b1", "b2", "b3"}) {
		t.Fatalf("drained order %v", got)
	}
	if lr := m.pop(Lease{Queue: "audit", Batch: 10}); !reflect.DeepEqual(txids(lr), []string{"d1"}) {
		t.Fatalf("audit after drain %v", txids(lr))
	}
	// Drained messages are stored at the switch-off's time.
	if p := m.partition("orders", "p2"); p == nil || p.LastCreatedAt != m.now.UnixMicro() {
		t.Fatalf("p2 %+v", p)
	}
	// Off again: pushes are stored directly; switching off twice drains nothing.
	if r := m.push(items("orders", "p1", "after")...); r.Buffered() || r.Items[0].Status != PushQueued {
		t.Fatalf("push after maintenance %+v", r)
	}
	if r := m.maintenance(false); r.Drained != (DrainStats{}) {
		t.Fatalf("second switch off drained %+v", r.Drained)
	}
	if c := must1(m.f.Counters()); c.PushMessages != 7 {
		t.Fatalf("lifetime pushed messages %d, want 7 (1 before, 5 drained, 1 after)", c.PushMessages)
	}
}

func TestSystemPushBufferBounds(t *testing.T) {
	m := newMachine(t)
	m.apply(&SetMaintenance{Enabled: true, MaxMessages: 3, MaxBytes: 1 << 20})
	if r := m.push(items("q", "p", "a", "b")...); r.Items[1].Status != PushBuffered {
		t.Fatalf("%+v", r)
	}
	// Two more would make four: the whole request is refused.
	r := m.push(items("q", "p", "c", "d")...)
	if !r.Buffered() || !reflect.DeepEqual(statuses(r), []uint8{PushBufferFull, PushBufferFull}) {
		t.Fatalf("over the message bound: %+v", r)
	}
	if r := m.push(items("q", "p", "c")...); r.Items[0].Status != PushBuffered {
		t.Fatalf("within the bound: %+v", r)
	}
	m.apply(&SetMaintenance{Enabled: true, MaxMessages: 100, MaxBytes: 10})
	big := item("q", "p", "big", `"0123456789"`)
	if r := m.push(big); r.Items[0].Status != PushBufferFull {
		t.Fatalf("over the byte bound: %+v", r)
	}
	if r := m.maintenance(false); r.Drained.Queued != 3 {
		t.Fatalf("drain %+v", r.Drained)
	}
	lr := m.pop(Lease{Queue: "q", Batch: 10})
	if !reflect.DeepEqual(txids(lr), []string{"a", "b", "c"}) {
		t.Fatalf("drained %v", txids(lr))
	}
	if err := (&SetMaintenance{Enabled: true}).Validate(); err == nil {
		t.Fatal("maintenance without buffer bounds validated")
	}
}

func TestSystemTransactionRefusedDuringPushMaintenance(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "t1")...)
	lr := m.mustPop(Lease{Queue: "q", Batch: 1})
	m.maintenance(true)
	tr := m.txn(opPush(items("q", "p", "t2")...), opAck("", ackAll(lr, AckCompleted)[0]))
	if tr.Success || tr.Error != ErrPushMaintenance {
		t.Fatalf("transaction during maintenance: %+v", tr)
	}
	if g := m.group("q", "p", QueueMode); g == nil || !g.HasLease() {
		t.Fatal("the refused transaction's ack applied")
	}
	// Acks alone go through.
	if tr := m.txn(opAck("", ackAll(lr, AckCompleted)[0])); !tr.Success {
		t.Fatalf("ack-only transaction: %+v", tr)
	}
	m.maintenance(false)
	if tr := m.txn(opPush(items("q", "p", "t2")...)); !tr.Success {
		t.Fatalf("transaction after maintenance: %+v", tr)
	}
}

func TestSystemPopMaintenanceSwitch(t *testing.T) {
	m := newMachine(t)
	var events []*Events
	m.f.Subscribe(func(e *Events) { events = append(events, e) })
	if on, err := m.f.PopMaintenance(); err != nil || on {
		t.Fatalf("initially %v %v", on, err)
	}
	r := m.apply(&SetPopMaintenance{Enabled: true})[0].(*MaintenanceResult)
	if !r.Switches.PopMaintenance || r.Switches.PopMaintenanceSince != m.now.UnixMicro() || r.Switches.Maintenance {
		t.Fatalf("%+v", r.Switches)
	}
	if !events[len(events)-1].All {
		t.Fatal("switching pop maintenance on must wake parked pops")
	}
	if on, _ := m.f.PopMaintenance(); !on {
		t.Fatal("view disagrees")
	}
	since := r.Switches.PopMaintenanceSince
	m.advance(time.Second)
	again := m.apply(&SetPopMaintenance{Enabled: true})[0].(*MaintenanceResult) // no change
	if events[len(events)-1].All || again.Switches.PopMaintenanceSince != since {
		t.Fatal("switching on twice changed something")
	}
	m.apply(&SetPopMaintenance{Enabled: false})
	if on, _ := m.f.PopMaintenance(); on {
		t.Fatal("still on")
	}
}

// The switches and the buffer are replicated state: replayed logs agree,
// and a snapshot carries them.
func TestSystemDeterminismAndSnapshot(t *testing.T) {
	m := newMachine(t)
	var logs []*raft.Log
	step := func(cmds ...Command) {
		l := m.entry(cmds...)
		logs = append(logs, l)
		m.f.ApplyBatch([]*raft.Log{l})
		m.advance(time.Millisecond)
	}
	step(&Push{Items: items("q", "p", "x1")})
	step(&SetMaintenance{Enabled: true, MaxMessages: 10, MaxBytes: 1 << 20})
	step(&Push{Items: items("q", "p", "x2", "x3")})
	step(&SetPopMaintenance{Enabled: true})
	p := m.partition("q", "p")
	step(&AddTrace{PartitionID: p.UUID, TxID: "x1", Names: []string{"n"}, Data: []byte(`{}`), MaxPerMessage: 5, MaxTotal: 5, MaxBytes: 1 << 20})

	stream := snapshotBytes(t, m.f)
	other := openFSM(t, t.TempDir(), "n2")
	other.ApplyBatch(logs)
	if _, a := digestOf(t, m.f); a != must1(digestOnly(other)) {
		t.Fatal("replayed state differs")
	}
	restored := openFSM(t, t.TempDir(), "n3")
	if err := restored.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
		t.Fatal(err)
	}
	sw := must1(restored.SystemSwitches())
	if !sw.Maintenance || !sw.PopMaintenance || sw.Buffer.Messages != 2 {
		t.Fatalf("restored switches %+v", sw)
	}
	if tr := must1(restored.MessageTraces(p.UUID, "x1")); len(tr) != 1 {
		t.Fatalf("restored traces %+v", tr)
	}
	// Drained after the restore exactly as on the original.
	last := m.entry(&SetMaintenance{})
	m.f.ApplyBatch([]*raft.Log{last})
	restored.ApplyBatch([]*raft.Log{last})
	if _, a := digestOf(t, m.f); a != must1(digestOnly(restored)) {
		t.Fatal("drain after restore differs")
	}
}

func digestOnly(f *FSM) (string, error) {
	_, d, err := f.Digest()
	return d, err
}

func TestSystemValidateAddTrace(t *testing.T) {
	ok := systemSampleCommands()[TypeAddTrace].(*AddTrace)
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(c *AddTrace){
		"empty name":    func(c *AddTrace) { c.Names = []string{""} },
		"repeated name": func(c *AddTrace) { c.Names = []string{"a", "a"} },
		"too many":      func(c *AddTrace) { c.Names = strings.Split("a b c d e f g h i j k", " ") },
		"long name":     func(c *AddTrace) { c.Names = []string{strings.Repeat("x", 256)} },
		"no data":       func(c *AddTrace) { c.Data = nil },
		"big data":      func(c *AddTrace) { c.Data = make([]byte, TraceMaxDataBytes+1) },
		"no bound":      func(c *AddTrace) { c.MaxTotal = 0 },
		"long type":     func(c *AddTrace) { c.EventType = strings.Repeat("x", 256) },
	} {
		c := *ok
		edit(&c)
		if c.Validate() == nil {
			t.Errorf("%s validated", name)
		}
	}
}

// Random pushes, traces, switches, sweeps and deletions applied one entry at
// a time and all in one batch end in the same state.
func TestSystemDeterminismRandom(t *testing.T) {
	m := newMachine(t)
	rng := newRand(3)
	queues, parts := []string{"a", "b"}, []string{"p", "q"}
	var logs []*raft.Log
	for i := range 300 {
		q, p := queues[rng.IntN(2)], parts[rng.IntN(2)]
		var c Command
		switch k := rng.IntN(20); {
		case k < 8:
			c = &Push{Items: items(q, p, fmt.Sprintf("t%d", rng.IntN(50)), fmt.Sprintf("t%d", i))}
		case k < 14:
			var pid [16]byte
			if part := m.partition(q, p); part != nil {
				pid = part.UUID
			}
			c = &AddTrace{PartitionID: pid, TxID: fmt.Sprintf("t%d", rng.IntN(i+1)), EventType: "e",
				Names: []string{fmt.Sprintf("n%d", rng.IntN(3))}, Data: []byte(`{}`), MaxPerMessage: 3, MaxTotal: 20, MaxBytes: 4096}
		case k < 16:
			c = &SetMaintenance{Enabled: rng.IntN(2) == 0, MaxMessages: 5, MaxBytes: 1 << 10}
		case k < 17:
			c = &SetPopMaintenance{Enabled: rng.IntN(2) == 0}
		case k < 18:
			c = &Transaction{Ops: []TxOp{opPush(items(q, p, fmt.Sprintf("x%d", i))...)}}
		case k < 19:
			c = &Sweep{Queue: q, MaxSegments: 3}
		default:
			c = &DeleteQueue{Queue: q}
		}
		l := m.entry(c)
		logs = append(logs, l)
		m.f.ApplyBatch([]*raft.Log{l})
		m.advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
	}
	other := openFSM(t, t.TempDir(), "n2")
	other.ApplyBatch(logs)
	if _, a := digestOf(t, m.f); a != must1(digestOnly(other)) {
		t.Fatal("batched replay differs")
	}
}

// A push buffered during push maintenance is an accepted push: its queue's
// state and access rules are applied when it is buffered (a refused push is
// refused then, not dropped at the drain), and the drain lets capacity
// bounds reached meanwhile stand aside rather than lose it.
func TestSystemBufferedPushIsAdmittedWhenBuffered(t *testing.T) {
	m := newMachine(t)
	prod := []string{"svc-a"}
	m.ojsOK(&OJSCreateQueue{Name: "acl", Config: QueueConfig{Producers: &prod}})
	m.ojsOK(&OJSCreateQueue{Name: "cap", Config: QueueConfig{MaxDepth: i64(1)}})
	m.maintenance(true)
	if r := m.pushAs("svc-b", item("acl", "", "1", `1`), item("acl", "", "2", `2`)); r.Refused == nil ||
		r.Refused.Code != RefuseDenied || r.Buffered() {
		t.Fatalf("a push the access list refuses: %+v", r)
	}
	if r := m.pushAs("svc-a", item("acl", "", "3", `3`)); !r.Buffered() {
		t.Fatalf("an allowed push: %+v", r)
	}
	if r := m.push(item("cap", "", "c1", `1`), item("cap", "", "c2", `2`)); !r.Buffered() {
		t.Fatalf("a push past a capacity the buffer cannot judge yet: %+v", r)
	}
	d := m.maintenance(false).Drained
	if d.Queued != 3 || d.Refused != 0 {
		t.Fatalf("drained %+v, want the three accepted messages queued", d)
	}
	if got := txids(m.popAs("svc-a", wild("acl", 10))); !reflect.DeepEqual(got, []string{"3"}) {
		t.Fatalf("acl holds %v", got)
	}
	if got := txids(m.pop(wild("cap", 10))); !reflect.DeepEqual(got, []string{"c1", "c2"}) {
		t.Fatalf("cap holds %v", got)
	}
}

// Pop maintenance is ordered by the log: a pop that passed the HTTP check
// but applies after the switch delivers nothing.
func TestSystemPopMaintenanceHoldsAtApply(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "a", "b")...)
	m.apply(&SetPopMaintenance{Enabled: true})
	if r := m.pop(Lease{Queue: "q", Batch: 10}); r.Count() != 0 || r.LeaseID != ([16]byte{}) {
		t.Fatalf("pop during pop maintenance: %+v", r)
	}
	m.apply(&SetPopMaintenance{Enabled: false})
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("after switching off %v", got)
	}
}
