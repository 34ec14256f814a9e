package fsm

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// streamsSampleCommands holds one command of each streams type with every
// field set, for the codec round trip.
func streamsSampleCommands(push PushItem, ack AckItem) map[Type]Command {
	return map[Type]Command{
		TypeStreamRegister: &StreamRegister{Name: "orders.per_customer", Source: "orders", Sink: "orders.totals",
			ConfigHash: "sha256:3f2a", Reset: true},
		TypeStreamCycle: &StreamCycle{QueryID: [16]byte{1, 2}, PartitionID: [16]byte{3, 4}, Group: "streams.q",
			Ops: []StateOp{
				{Kind: StateUpsert, Key: "win:1715850000000", Value: []byte(`{"sum":12.5,"windowEnd":1715850060000}`),
					HasWindowEnd: true, WindowEnd: 1715850060000},
				{Kind: StateDelete, Key: "win:1715849940000"},
			},
			Items: []PushItem{push}, HasAck: true, Ack: ack, ReleaseLease: true, Principal: "svc"},
	}
}

func (m *machine) register(name, source, sink, hash string, reset bool) *StreamRegisterResult {
	m.t.Helper()
	return m.apply(&StreamRegister{Name: name, Source: source, Sink: sink, ConfigHash: hash, Reset: reset})[0].(*StreamRegisterResult)
}

func (m *machine) cycle(c StreamCycle) *StreamCycleResult {
	m.t.Helper()
	if c.Group == "" {
		c.Group = QueueMode
	}
	return m.apply(&c)[0].(*StreamCycleResult)
}

// stateKeys reads state and returns "key=value" per row, in answer order.
func (m *machine) stateKeys(q StreamStateQuery) []string {
	m.t.Helper()
	rows, found, err := m.f.StreamState(q)
	if err != nil || !found {
		m.t.Fatalf("state read %+v: found %v, %v", q, found, err)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Key + "=" + string(r.Value)
	}
	return out
}

// twins runs setup on two machines, which then hold the same state.
func twins(t *testing.T, setup func(m *machine)) (*machine, *machine) {
	a, b := newMachine(t), newMachine(t)
	setup(a)
	setup(b)
	return a, b
}

// unchanged applies cmd to m and a command that changes nothing (the
// extension of an unknown lease) to twin, and reports whether their states
// still agree: the digest includes the applied index, which any entry moves.
func unchanged(m, twin *machine, cmd Command) (any, bool) {
	m.t.Helper()
	r := m.apply(cmd)[0]
	if er := twin.extend([16]byte{0xee}, 1); er.Success {
		m.t.Fatalf("no-op extension succeeded")
	}
	return r, m.digest() == twin.digest()
}

func upsert(key, value string) StateOp {
	return StateOp{Kind: StateUpsert, Key: key, Value: []byte(value)}
}

func ripeUpsert(key string, windowEnd float64) StateOp {
	op := upsert(key, `{"windowEnd":1}`)
	op.HasWindowEnd, op.WindowEnd = true, windowEnd
	return op
}

// streamSetup registers a query over "orders", pushes txs to its partition
// p and returns the query id and the partition's UUID.
func streamSetup(m *machine, txs ...string) (query, part [16]byte) {
	m.t.Helper()
	r := m.register("agg", "orders", "totals", "h1", false)
	m.push(items("orders", "p", txs...)...)
	return r.QueryID, m.partition("orders", "p").UUID
}

func TestStreamRegister(t *testing.T) {
	m := newMachine(t)
	r := m.register("agg", "orders", "totals", "h1", false)
	if !r.Fresh || r.Reset || r.Conflict != "" || r.QueryID == [16]byte{} || r.Name != "agg" || r.ConfigHash != "h1" {
		t.Fatalf("fresh registration %+v", r)
	}
	id := r.QueryID
	again := m.register("agg", "orders", "totals", "h1", false)
	if again.Fresh || again.Reset || again.Conflict != "" || again.QueryID != id {
		t.Fatalf("idempotent registration %+v", again)
	}
	m.push(item("orders", "p", "t1", "1"))
	part := m.partition("orders", "p").UUID
	if c := m.cycle(StreamCycle{QueryID: id, PartitionID: part, Ops: []StateOp{upsert("a", "1"), upsert("b", "2")}}); !c.Success {
		t.Fatalf("cycle %+v", c)
	}

	var stored *segments.StreamQuery
	m.view(func(tx *segments.Tx) (err error) { stored, err = tx.StreamQuery(id); return err })
	for _, tc := range []struct{ source, hash, want string }{
		{"orders", "h2", "config_hash mismatch"},
		{"other", "h1", "source_queue mismatch"},
	} {
		c := m.register("agg", tc.source, "totals", tc.hash, false)
		if !strings.HasPrefix(c.Conflict, tc.want+": ") || c.QueryID != id || c.ConfigHash != "h1" || c.Fresh || c.Reset {
			t.Errorf("%s: %+v", tc.want, c)
		}
		m.view(func(tx *segments.Tx) error {
			q, err := tx.StreamQuery(id)
			if !reflect.DeepEqual(q, stored) {
				t.Errorf("%s: a refused registration changed the query: %+v", tc.want, q)
			}
			return err
		})
	}
	if got := m.stateKeys(StreamStateQuery{QueryID: id, PartitionID: part}); len(got) != 2 {
		t.Fatalf("state after refused registrations: %v", got)
	}

	// A new sink is recorded without touching the state.
	if c := m.register("agg", "orders", "totals2", "h1", false); c.Conflict != "" || c.Reset {
		t.Errorf("sink change %+v", c)
	}
	m.view(func(tx *segments.Tx) error {
		q, err := tx.StreamQuery(id)
		if err != nil || q.Sink != "totals2" {
			t.Errorf("sink after re-registration: %+v %v", q, err)
		}
		return err
	})

	// A reset replaces the hash and deletes every row, on every partition.
	c := m.register("agg", "orders", "totals", "h2", true)
	if !c.Reset || c.Fresh || c.Conflict != "" || c.QueryID != id || c.ConfigHash != "h2" || c.Removed != 2 {
		t.Fatalf("reset %+v", c)
	}
	if got := m.stateKeys(StreamStateQuery{QueryID: id, PartitionID: part}); len(got) != 0 {
		t.Errorf("state after reset: %v", got)
	}
	if c := m.register("agg", "orders", "totals", "h2", false); c.Conflict != "" || c.Fresh {
		t.Errorf("registration with the new hash %+v", c)
	}
	// A reset of a query that does not exist simply creates it.
	if c := m.register("other", "orders", "", "h", true); !c.Fresh || c.Reset {
		t.Errorf("fresh reset %+v", c)
	}

	// Validation: an empty required field or an overlong name changes nothing.
	for _, cmd := range []*StreamRegister{
		{Name: "", Source: "s", ConfigHash: "h"},
		{Name: "n", Source: "", ConfigHash: "h"},
		{Name: "n", Source: "s", ConfigHash: ""},
		{Name: strings.Repeat("n", MaxNameBytes+1), Source: "s", ConfigHash: "h"},
	} {
		if _, ok := m.apply(cmd)[0].(*ErrorResult); !ok {
			t.Errorf("%+v: not refused", cmd)
		}
	}
}

func TestStreamStateOpsAndReads(t *testing.T) {
	m := newMachine(t)
	id, part := streamSetup(m, "t1")
	other := m.register("agg2", "orders", "", "h", false).QueryID
	t0 := m.now.UnixMicro()
	c := m.cycle(StreamCycle{QueryID: id, PartitionID: part, Ops: []StateOp{
		upsert("agg\x1fb", `{"n":2}`), upsert("agg\x1fa", `{"n":1}`), upsert("gone", "0"),
		ripeUpsert("win:100", 100), ripeUpsert("win:200", 200), ripeUpsert("win:300", 300),
		upsert("win:nan", `{"windowEnd":"soon"}`),
		{Kind: StateDelete, Key: "gone"}, {Kind: StateDelete, Key: "never-there"},
	}})
	if !c.Success || c.StateOps != 9 || c.Queue != "orders" || c.Ack != nil || len(c.Push) != 0 {
		t.Fatalf("cycle %+v", c)
	}
	m.advance(time.Second)
	if c := m.cycle(StreamCycle{QueryID: id, PartitionID: part, Ops: []StateOp{upsert("agg\x1fb", `{"n":3}`)}}); !c.Success {
		t.Fatalf("second cycle %+v", c)
	}
	if c := m.cycle(StreamCycle{QueryID: other, PartitionID: part, Ops: []StateOp{upsert("agg\x1fa", `"other"`)}}); !c.Success {
		t.Fatalf("other query's cycle %+v", c)
	}

	all := m.stateKeys(StreamStateQuery{QueryID: id, PartitionID: part})
	want := []string{"agg\x1fa={\"n\":1}", "agg\x1fb={\"n\":3}", `win:100={"windowEnd":1}`, `win:200={"windowEnd":1}`,
		`win:300={"windowEnd":1}`, `win:nan={"windowEnd":"soon"}`}
	if !reflect.DeepEqual(all, want) {
		t.Errorf("all rows\n got %q\nwant %q", all, want)
	}
	if got := m.stateKeys(StreamStateQuery{QueryID: id, PartitionID: part, Prefix: "agg\x1f"}); !reflect.DeepEqual(got, want[:2]) {
		t.Errorf("prefix rows %q", got)
	}
	keys := StreamStateQuery{QueryID: id, PartitionID: part, Keys: []string{"win:300", "missing", "agg\x1fa", "win:300"}}
	if got := m.stateKeys(keys); !reflect.DeepEqual(got, []string{want[0], want[4]}) {
		t.Errorf("rows by key %q", got)
	}
	keys.Prefix = "win:"
	if got := m.stateKeys(keys); !reflect.DeepEqual(got, []string{want[4]}) {
		t.Errorf("rows by key and prefix %q", got)
	}
	ripe := StreamStateQuery{QueryID: id, PartitionID: part, HasRipe: true, RipeAtOrBefore: 200}
	if got := m.stateKeys(ripe); !reflect.DeepEqual(got, want[2:4]) {
		t.Errorf("ripe rows %q", got)
	}
	ripe.Keys = []string{"win:200", "win:300", "agg\x1fa"}
	if got := m.stateKeys(ripe); !reflect.DeepEqual(got, want[3:4]) {
		t.Errorf("ripe rows by key %q", got)
	}

	rows, _, _ := m.f.StreamState(StreamStateQuery{QueryID: id, PartitionID: part, Keys: []string{"agg\x1fa", "agg\x1fb"}})
	if len(rows) != 2 || rows[0].UpdatedAt != t0 || rows[1].UpdatedAt != t0+1e6 {
		t.Errorf("updated_at %+v, want %d then %d", rows, t0, t0+1e6)
	}
	if got := m.stateKeys(StreamStateQuery{QueryID: other, PartitionID: part}); !reflect.DeepEqual(got, []string{`agg` + "\x1f" + `a="other"`}) {
		t.Errorf("queries share state: %q", got)
	}
	if got := m.stateKeys(StreamStateQuery{QueryID: id, PartitionID: [16]byte{9}}); len(got) != 0 {
		t.Errorf("unknown partition has rows %q", got)
	}
	if _, found, err := m.f.StreamState(StreamStateQuery{QueryID: [16]byte{9}, PartitionID: part}); found || err != nil {
		t.Errorf("unknown query: found %v, %v", found, err)
	}

	// Validation refuses what storage could not hold, before any write.
	for _, op := range []StateOp{
		upsert(strings.Repeat("k", MaxStateKeyBytes+1), "1"),
		upsert("k", `"`+strings.Repeat("v", MaxStateValueBytes)+`"`),
		{Kind: StateUpsert, Key: "k"},
		{Kind: 9, Key: "k"},
	} {
		if _, ok := m.apply(&StreamCycle{QueryID: id, PartitionID: part, Group: QueueMode, Ops: []StateOp{op}})[0].(*ErrorResult); !ok {
			t.Errorf("op %.40q: not refused", op.Key)
		}
	}
}

func TestStreamStateReadCap(t *testing.T) {
	m := newMachine(t)
	id, part := streamSetup(m, "t1")
	ops := make([]StateOp, MaxStateRows+1)
	for i := range ops {
		ops[i] = upsert(string(rune('a'+i%26))+strings.Repeat("x", i/26), "1")
	}
	// More rows than one cycle may write (MaxStateOps), in two.
	for _, half := range [][]StateOp{ops[:len(ops)/2], ops[len(ops)/2:]} {
		if c := m.cycle(StreamCycle{QueryID: id, PartitionID: part, Ops: half}); !c.Success {
			t.Fatalf("cycle %+v", c)
		}
	}
	_, _, err := m.f.StreamState(StreamStateQuery{QueryID: id, PartitionID: part})
	var tooLarge *StateReadTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Rows != MaxStateRows {
		t.Fatalf("read over the cap: %v", err)
	}
	if got := m.stateKeys(StreamStateQuery{QueryID: id, PartitionID: part, Prefix: "b"}); len(got) == 0 || len(got) > MaxStateRows {
		t.Errorf("a narrower read: %d rows", len(got))
	}
}

// A cycle whose ack fails applies nothing: no state, no push, no queue
// created, no group state, and the lease runs on.
func TestStreamCycleAckFailureAppliesNothing(t *testing.T) {
	var id, part [16]byte
	var lr *LeaseResult
	m, twin := twins(t, func(m *machine) {
		id, part = streamSetup(m, "t1", "t2")
		lr = m.mustPop(Lease{Queue: "orders", Group: "g", Batch: 2})
	})
	cases := []struct {
		name string
		ack  AckItem
		want string
	}{
		{"unknown message", AckItem{TxID: "nope", Status: AckCompleted}, "ack failed: unresolvable"},
		{"stale lease", AckItem{TxID: "t1", Status: AckCompleted, LeaseID: [16]byte{7}, HasLease: true}, "ack failed: " + ErrInvalidLease},
		{"unknown status", AckItem{TxID: "t1", Status: AckUnknown, StatusText: "maybe"}, "ack failed: Unknown status: maybe"},
		{"retry", AckItem{TxID: "t1", Status: AckRetry}, "ack failed: Unknown status: retry"},
	}
	for _, tc := range cases {
		r, same := unchanged(m, twin, &StreamCycle{QueryID: id, PartitionID: part, Group: "g",
			Ops:    []StateOp{upsert("a", "1")},
			Items:  []PushItem{item("sink", "s", "out-1", `{"x":1}`)},
			HasAck: true, Ack: tc.ack, ReleaseLease: true})
		if c := r.(*StreamCycleResult); c.Success || c.Error != tc.want || c.Queue != "orders" {
			t.Errorf("%s: %+v, want error %q", tc.name, c, tc.want)
		}
		if !same {
			t.Errorf("%s: a failed cycle changed the state", tc.name)
		}
	}
	if got := m.stateKeys(StreamStateQuery{QueryID: id, PartitionID: part}); len(got) != 0 {
		t.Errorf("state written by failed cycles: %v", got)
	}
	if m.queue("sink") != nil {
		t.Errorf("a failed cycle created its sink queue")
	}
	if g := m.group("orders", "p", "g"); g == nil || g.Next != 1 || g.Consumed != 0 || g.LeaseID != lr.LeaseID || !g.LeaseLive(m.now.UnixMicro()) {
		t.Errorf("group after failed cycles %+v", g)
	}

	for _, tc := range []struct {
		name   string
		query  [16]byte
		part   [16]byte
		prefix string
	}{
		{"unknown query", [16]byte{9}, part, ErrStreamQueryNotFound},
		{"unknown partition", id, [16]byte{9}, ErrStreamPartitionNotFound},
	} {
		c := m.cycle(StreamCycle{QueryID: tc.query, PartitionID: tc.part, Ops: []StateOp{upsert("a", "1")}})
		if c.Success || c.Error != tc.prefix {
			t.Errorf("%s: %+v", tc.name, c)
		}
	}
	m.push(item("elsewhere", "p", "e1", "1"))
	c := m.cycle(StreamCycle{QueryID: id, PartitionID: m.partition("elsewhere", "p").UUID, Ops: []StateOp{upsert("a", "1")}})
	if c.Success || !strings.Contains(c.Error, `not of the query's source queue "orders"`) {
		t.Errorf("partition of another queue: %+v", c)
	}
}

// Offsets start at 1: a group's position (Next) is the offset after the
// last message it consumed.
func TestStreamCycleCompleted(t *testing.T) {
	m := newMachine(t)
	id, part := streamSetup(m, "t1", "t2", "t3")
	lr := m.mustPop(Lease{Queue: "orders", Group: "g", Batch: 3})
	lease := lr.LeaseID

	// Acking the middle message without release_lease keeps the lease.
	c := m.cycle(StreamCycle{QueryID: id, PartitionID: part, Group: "g", Ops: []StateOp{upsert("a", "1")},
		Items:  []PushItem{item("totals", "c42", "out-1", `{"sum":1}`), item("totals", "c42", "out-1", `{"sum":1}`)},
		HasAck: true, Ack: AckItem{TxID: "t2", LeaseID: lease, HasLease: true, Status: AckCompleted}})
	if !c.Success || c.Ack == nil || c.Ack.LeaseReleased || c.Ack.DLQ || len(c.Push) != 2 {
		t.Fatalf("cycle %+v", c)
	}
	if c.Push[0].Status != PushQueued || c.Push[1].Status != PushDuplicate || c.Push[1].MessageID != c.Push[0].MessageID {
		t.Errorf("push results %+v", c.Push)
	}
	g := m.group("orders", "p", "g")
	if g.Next != 3 || g.LeaseID != lease || !g.LeaseLive(m.now.UnixMicro()) || g.Consumed != 2 {
		t.Errorf("group after a partial ack %+v", g)
	}

	// A re-run of the same cycle (a client retry) succeeds and pushes nothing new.
	c = m.cycle(StreamCycle{QueryID: id, PartitionID: part, Group: "g", Ops: []StateOp{upsert("a", "1")},
		Items:  []PushItem{item("totals", "c42", "out-1", `{"sum":1}`)},
		HasAck: true, Ack: AckItem{TxID: "t2", LeaseID: lease, HasLease: true, Status: AckCompleted}})
	if !c.Success || c.Push[0].Status != PushDuplicate {
		t.Errorf("retried cycle %+v", c)
	}

	// release_lease ends the lease even though t3 is unacked: it comes back.
	c = m.cycle(StreamCycle{QueryID: id, PartitionID: part, Group: "g", HasAck: true, ReleaseLease: true,
		Ack: AckItem{TxID: "t2", LeaseID: lease, HasLease: true, Status: AckCompleted}})
	if !c.Success || !c.Ack.LeaseReleased {
		t.Fatalf("release %+v", c)
	}
	if g := m.group("orders", "p", "g"); g.HasLease() || g.Next != 3 {
		t.Errorf("group after release %+v", g)
	}
	again := m.mustPop(Lease{Queue: "orders", Group: "g", Batch: 3})
	if got := txids(again); !reflect.DeepEqual(got, []string{"t3"}) {
		t.Fatalf("redelivered %v", got)
	}
	// Acking the last message ends the lease without release_lease.
	c = m.cycle(StreamCycle{QueryID: id, PartitionID: part, Group: "g", HasAck: true,
		Ack: AckItem{TxID: "t3", LeaseID: again.LeaseID, HasLease: true, Status: AckCompleted}})
	if !c.Success || !c.Ack.LeaseReleased {
		t.Fatalf("batch completion %+v", c)
	}
	if g := m.group("orders", "p", "g"); g.HasLease() || g.Next != 4 || g.Consumed != 3 {
		t.Errorf("group after the batch %+v", g)
	}
	// The sink holds the one queued message.
	sink := m.mustPop(Lease{Queue: "totals", Batch: 10})
	if got := txids(sink); !reflect.DeepEqual(got, []string{"out-1"}) {
		t.Errorf("sink %v", got)
	}

	// A cycle may consume a message that was never popped (no lease id).
	m.push(item("orders", "p", "t4", "4"))
	c = m.cycle(StreamCycle{QueryID: id, PartitionID: part, Group: "fresh", HasAck: true, ReleaseLease: true,
		Ack: AckItem{TxID: "t4", Status: AckCompleted}})
	if g := m.group("orders", "p", "fresh"); !c.Success || g == nil || g.Next != 5 {
		t.Errorf("unpopped consume %+v %+v", c, g)
	}
}

func TestStreamCycleFailedAndDLQ(t *testing.T) {
	for _, status := range []uint8{AckFailed, AckDLQ} {
		m := newMachine(t)
		configureWith(m, "orders", func(o *segments.Options) { o.RetryLimit = 5 })
		id, part := streamSetup(m, "t1", "t2")
		lr := m.mustPop(Lease{Queue: "orders", Group: "g", Batch: 2})
		c := m.cycle(StreamCycle{QueryID: id, PartitionID: part, Group: "g", Ops: []StateOp{upsert("a", "1")},
			HasAck: true, ReleaseLease: false,
			Ack: AckItem{TxID: "t1", LeaseID: lr.LeaseID, HasLease: true, Status: status, Error: "bad input"}})
		if !c.Success || !c.Ack.DLQ || !c.Ack.LeaseReleased {
			t.Fatalf("status %d: %+v", status, c)
		}
		g := m.group("orders", "p", "g")
		if g.HasLease() || g.Next != 2 || g.Retry != 0 {
			t.Errorf("status %d: group %+v", status, g)
		}
		dl := m.deadLetters("orders")
		if len(dl) != 1 || dl[0].TxID != "t1" || dl[0].Group != "g" || dl[0].Error != "bad input" || dl[0].RetryCount != 0 {
			t.Errorf("status %d: dead letters %+v", status, dl)
		}
		// The next message comes next; the dead-lettered one does not.
		if got := txids(m.mustPop(Lease{Queue: "orders", Group: "g", Batch: 2})); !reflect.DeepEqual(got, []string{"t2"}) {
			t.Errorf("status %d: after dead-letter %v", status, got)
		}
		if got := m.stateKeys(StreamStateQuery{QueryID: id, PartitionID: part}); len(got) != 1 {
			t.Errorf("status %d: state %v", status, got)
		}
	}
}

func TestStreamStateGoesWithTheSourceQueue(t *testing.T) {
	m := newMachine(t)
	id, part := streamSetup(m, "t1")
	if c := m.cycle(StreamCycle{QueryID: id, PartitionID: part, Ops: []StateOp{upsert("a", "1")}}); !c.Success {
		t.Fatal(c)
	}
	m.deleteQueue("orders")
	if got := m.stateKeys(StreamStateQuery{QueryID: id, PartitionID: part}); len(got) != 0 {
		t.Errorf("state of a deleted source queue: %v", got)
	}
	if r := m.register("agg", "orders", "totals", "h1", false); r.QueryID != id || r.Fresh || r.Conflict != "" {
		t.Errorf("the query after its source was deleted: %+v", r)
	}
}

// Replaying the same streams commands yields the same state, and a failed
// cycle inside a batch leaves the batch's other commands applied.
func TestStreamDeterministicReplay(t *testing.T) {
	run := func() (string, []any) {
		m := newMachine(t)
		id, part := streamSetup(m, "t1", "t2")
		lr := m.mustPop(Lease{Queue: "orders", Group: "g", Batch: 2})
		res := m.apply(
			&StreamCycle{QueryID: id, PartitionID: part, Group: "g", Ops: []StateOp{upsert("x", "1")},
				HasAck: true, Ack: AckItem{TxID: "missing", Status: AckCompleted}},
			&StreamCycle{QueryID: id, PartitionID: part, Group: "g", Ops: []StateOp{ripeUpsert("w", 5)},
				Items:  []PushItem{item("totals", "a", "o1", "1"), item("totals", "b", "o2", "2")},
				HasAck: true, ReleaseLease: true, Ack: AckItem{TxID: "t1", LeaseID: lr.LeaseID, HasLease: true, Status: AckCompleted}},
			&StreamRegister{Name: "agg", Source: "orders", Sink: "totals", ConfigHash: "h2", Reset: true},
			&StreamCycle{QueryID: id, PartitionID: part, Group: "g", Ops: []StateOp{upsert("y", "2")}},
		)
		if c := res[0].(*StreamCycleResult); c.Success {
			t.Fatalf("first cycle %+v", c)
		}
		if c := res[1].(*StreamCycleResult); !c.Success || !c.Ack.LeaseReleased {
			t.Fatalf("second cycle %+v", c)
		}
		if got := m.stateKeys(StreamStateQuery{QueryID: id, PartitionID: part}); !reflect.DeepEqual(got, []string{"y=2"}) {
			t.Fatalf("state %v", got)
		}
		return m.digest(), res
	}
	d1, r1 := run()
	d2, r2 := run()
	if d1 != d2 || !reflect.DeepEqual(r1, r2) {
		t.Errorf("replays differ: %s vs %s", d1, d2)
	}
}

// Queries and state travel with a snapshot.
func TestStreamStateInSnapshot(t *testing.T) {
	m := newMachine(t)
	id, part := streamSetup(m, "t1")
	if c := m.cycle(StreamCycle{QueryID: id, PartitionID: part, Ops: []StateOp{upsert("a", `{"n":1}`), ripeUpsert("w", 9)}}); !c.Success {
		t.Fatal(c)
	}
	stream := snapshotBytes(t, m.f)
	n := newMachine(t)
	if err := n.f.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
		t.Fatal(err)
	}
	n.index, n.now = m.index, m.now
	if n.digest() != m.digest() {
		t.Fatalf("restored digest differs")
	}
	if got := n.stateKeys(StreamStateQuery{QueryID: id, PartitionID: part, HasRipe: true, RipeAtOrBefore: 9}); !reflect.DeepEqual(got, []string{`w={"windowEnd":1}`}) {
		t.Errorf("restored state %q", got)
	}
	if r := n.register("agg", "orders", "totals", "h1", false); r.QueryID != id || r.Fresh {
		t.Errorf("restored query %+v", r)
	}
}

// During push maintenance a cycle that pushes fails whole; one that only
// changes state and acks runs.
func TestStreamCycleDuringPushMaintenance(t *testing.T) {
	m := newMachine(t)
	id, part := streamSetup(m, "t1")
	if r, ok := m.apply(&SetMaintenance{Enabled: true, MaxMessages: 10, MaxBytes: 1 << 20})[0].(*MaintenanceResult); !ok || !r.Switches.Maintenance {
		t.Fatalf("switch on: %+v", r)
	}
	c := m.cycle(StreamCycle{QueryID: id, PartitionID: part, Ops: []StateOp{upsert("a", "1")},
		Items: []PushItem{item("totals", "p", "o1", "1")}})
	if c.Success || c.Error != ErrStreamPushMaintenance {
		t.Fatalf("pushing cycle %+v", c)
	}
	if got := m.stateKeys(StreamStateQuery{QueryID: id, PartitionID: part}); len(got) != 0 {
		t.Errorf("state of a refused cycle %v", got)
	}
	c = m.cycle(StreamCycle{QueryID: id, PartitionID: part, Ops: []StateOp{upsert("a", "1")},
		HasAck: true, Ack: AckItem{TxID: "t1", Status: AckCompleted}})
	if !c.Success {
		t.Errorf("cycle without pushes %+v", c)
	}
}

// A cycle is fenced by its lease (3.18): a worker whose lease expired, and
// whose message another worker has since consumed, fails whole: no state
// row and no push of it survive. Its dead letters record retry count 0.
func TestStreamCycleStaleLeaseFailsWhole(t *testing.T) {
	m := newMachine(t)
	id, part := streamSetup(m, "t1", "t2")
	stale := m.mustPop(Lease{Queue: "orders", Group: "g", Batch: 2, LeaseSeconds: 1})
	m.advance(2 * time.Second)
	fresh := m.mustPop(Lease{Queue: "orders", Group: "g", Batch: 2})
	if c := m.cycle(StreamCycle{QueryID: id, PartitionID: part, Group: "g", Ops: []StateOp{upsert("sum", `"B"`)},
		HasAck: true, ReleaseLease: true, Ack: AckItem{TxID: "t2", LeaseID: fresh.LeaseID, HasLease: true, Status: AckCompleted}}); !c.Success {
		t.Fatalf("fresh cycle %+v", c)
	}
	c := m.cycle(StreamCycle{QueryID: id, PartitionID: part, Group: "g", Ops: []StateOp{upsert("sum", `"A-stale"`)},
		Items:  []PushItem{item("totals", "c42", "out-A", `{}`)},
		HasAck: true, Ack: AckItem{TxID: "t2", LeaseID: stale.LeaseID, HasLease: true, Status: AckCompleted}})
	if c.Success || c.Error != "ack failed: "+ErrInvalidLease {
		t.Fatalf("stale cycle %+v", c)
	}
	rows, _, err := m.f.StreamState(StreamStateQuery{QueryID: id, PartitionID: part})
	if err != nil || len(rows) != 1 || string(rows[0].Value) != `"B"` {
		t.Fatalf("state after the stale cycle %+v %v", rows, err)
	}
	if m.queue("totals") != nil && len(txids(m.pop(Lease{Queue: "totals", Batch: 10}))) != 0 {
		t.Fatal("the stale cycle's push survived")
	}

	// Dead-lettered by a cycle: retry count 0, whatever the group's counter.
	configureWith(m, "orders", func(o *segments.Options) { o.RetryLimit = 5 })
	m.push(items("orders", "p", "t3")...)
	first := m.mustPop(Lease{Queue: "orders", Group: "g", Batch: 1})
	m.ack("g", ackAll(first, AckFailed)...) // the counter is 1 now
	again := m.mustPop(Lease{Queue: "orders", Group: "g", Batch: 1})
	if c := m.cycle(StreamCycle{QueryID: id, PartitionID: part, Group: "g", HasAck: true,
		Ack: AckItem{TxID: "t3", LeaseID: again.LeaseID, HasLease: true, Status: AckFailed}}); !c.Success || !c.Ack.DLQ {
		t.Fatalf("dlq cycle %+v", c)
	}
	if dl := m.deadLetters("orders"); len(dl) != 1 || dl[0].TxID != "t3" || dl[0].RetryCount != 0 {
		t.Fatalf("dead letters %+v", dl)
	}
}

// A cycle's failed or dlq ack ends the lease it was made under (queen-api.md
// 3.18), also when its message was consumed already: the dead-letter is a
// no-op then, the lease's end is not, and the rest of the batch comes back.
func TestStreamCycleDLQOfConsumedMessageEndsTheLease(t *testing.T) {
	for _, status := range []uint8{AckFailed, AckDLQ} {
		m := newMachine(t)
		id, part := streamSetup(m, "t1", "t2", "t3")
		lr := m.mustPop(Lease{Queue: "orders", Group: "g", Batch: 3})
		c := m.cycle(StreamCycle{QueryID: id, PartitionID: part, Group: "g", HasAck: true,
			Ack: AckItem{TxID: "t1", LeaseID: lr.LeaseID, HasLease: true, Status: AckCompleted}})
		if !c.Success || c.Ack.LeaseReleased {
			t.Fatalf("status %d: partial ack %+v", status, c)
		}
		c = m.cycle(StreamCycle{QueryID: id, PartitionID: part, Group: "g", HasAck: true,
			Ack: AckItem{TxID: "t1", LeaseID: lr.LeaseID, HasLease: true, Status: status}})
		if !c.Success || !c.Ack.LeaseReleased || c.Ack.DLQ {
			t.Fatalf("status %d: dlq of a consumed message %+v", status, c.Ack)
		}
		if g := m.group("orders", "p", "g"); g.HasLease() || g.Next != 2 {
			t.Errorf("status %d: group %+v", status, g)
		}
		if dl := m.deadLetters("orders"); len(dl) != 0 {
			t.Errorf("status %d: dead letters %+v", status, dl)
		}
		if got := txids(m.mustPop(Lease{Queue: "orders", Group: "g", Batch: 3})); !reflect.DeepEqual(got, []string{"t2", "t3"}) {
			t.Errorf("status %d: after the lease ended %v", status, got)
		}
	}
}
