package fsm

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// ---- helpers ----

func (m *machine) ojs(c Command) *OJSResult {
	m.t.Helper()
	r, ok := m.apply(c)[0].(*OJSResult)
	if !ok {
		m.t.Fatalf("%T: result %T", c, m.apply)
	}
	return r
}

func (m *machine) ojsOK(c Command) *OJSResult {
	m.t.Helper()
	r := m.ojs(c)
	if r.Err != nil {
		m.t.Fatalf("%T: %+v", c, r.Err)
	}
	return r
}

func (m *machine) ojsErr(c Command, status int, typ string) {
	m.t.Helper()
	r := m.ojs(c)
	if r.Err == nil || r.Err.Status != status || r.Err.Type != typ {
		m.t.Fatalf("%T: want %d %s, got %+v", c, status, typ, r.Err)
	}
}

func (m *machine) pushAs(principal string, items ...PushItem) *PushResult {
	m.t.Helper()
	return m.apply(&PushAs{Principal: principal, Items: items})[0].(*PushResult)
}

func (m *machine) popAs(principal string, l Lease) *LeaseResult {
	m.t.Helper()
	return m.apply(&LeaseAs{Lease: l, Principal: principal})[0].(*LeaseResult)
}

func (m *machine) depth(queue string) uint64 {
	var d uint64
	m.view(func(tx *segments.Tx) error {
		if q := must1(tx.Queue(queue)); q != nil {
			d, _ = queueDepth(tx, q, false)
		}
		return nil
	})
	return d
}

func wild(queue string, batch uint32) Lease {
	return Lease{Scope: ScopeWildcard, Queue: queue, Group: QueueMode, Batch: batch, MaxPartitions: 1}
}

func bptr(b bool) *bool { return &b }

// ---- tests ----

func TestOJSDurationParser(t *testing.T) {
	good := map[string]int64{"PT0.5S": 500000, "PT1S": 1e6, "PT5M": 300e6, "P7D": 7 * 86400e6, "P180D": 180 * 86400e6,
		"P1W": 7 * 86400e6, "P1W2D": 9 * 86400e6, "P1DT1H": 90000e6, "PT1H30M": 5400e6, "PT0S": 0, "PT1.000001S": 1000001,
		"P0D": 0, "PT10H5M3.25S": 36303250000,
		// Any number of fraction digits: the value is read to the µs.
		"PT1.0000001S": 1e6, "PT0.123456789S": 123456}
	for s, want := range good {
		got, err := ParseDuration(s)
		if err != nil || got != want {
			t.Errorf("%s: got %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "P", "PT", "P1Y", "P1M", "p1d", "P1d", "PT1.5M", "P1.5D", "P1DT", "PT1S1M", "P1D1W",
		"PT1H1H", "1D", "P-1D", "PT1.S", "PT.5S", "P1DT1", "P 1D", "PT1HT1M", "P99999999999999999999D"} {
		if _, err := ParseDuration(s); err == nil {
			t.Errorf("%q: accepted", s)
		}
	}
	// Of the accepted form but too large: a range error, not a form error.
	for _, s := range []string{"P99999999999999999999D", "P999999999999999999D", "PT9223372036854775807S",
		"P15250284452471W", "P1DT9999999999999999999999999999H", "P000000000000000000000000000000000000000000000000000000000000000015250284452471W"} {
		if _, err := ParseDuration(s); !errors.Is(err, ErrDurationRange) {
			t.Errorf("%q: %v, want ErrDurationRange", s, err)
		}
	}
	// A long run of leading zeros is still a small value; a bad form with a
	// huge number is a form error.
	if us, err := ParseDuration("PT000000000000000000000000000000000000000000000000000000000000000001S"); err != nil || us != 1e6 {
		t.Errorf("leading zeros: %d, %v", us, err)
	}
	for _, s := range []string{"P99999999999999999999Y", "P99999999999999999999DX", "P99999999999999999999DT"} {
		if _, err := ParseDuration(s); !errors.Is(err, ErrDuration) {
			t.Errorf("%q: %v, want ErrDuration", s, err)
		}
	}
	// CheckConfig calls an overflowing duration out_of_range.
	errs := CheckConfig(&QueueConfig{CompletedTTL: &Duration{Text: "P999999999999999999D"}})
	if len(errs) != 1 || errs[0].Type != "out_of_range" || errs[0].Field != "retention.completed_ttl" {
		t.Errorf("CheckConfig of an overflowing duration: %+v", errs)
	}
}

func FuzzOJSDuration(f *testing.F) {
	for _, s := range []string{"P7D", "PT0.5S", "P1W2DT3H4M5.6S", "P1Y", "PT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		us, err := ParseDuration(s)
		if err != nil {
			return
		}
		if us < 0 || !strings.HasPrefix(s, "P") {
			t.Fatalf("%q: %d", s, us)
		}
	})
}

func TestOJSGlobAndPolicyChoice(t *testing.T) {
	for _, c := range []struct {
		p, n string
		ok   bool
	}{{"batch.*", "batch.import", true}, {"batch.*", "batch.eu.nightly", true}, {"batch.*", "batch", false},
		{"batch.*", "batch-import", false}, {"*", "anything", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"*.x.*", "a.x.b", true}, {"a*b*c", "axxbyyc", true}, {"a*b*c", "axxbyy", false}} {
		if GlobMatch(c.p, c.n) != c.ok {
			t.Errorf("%s ~ %s: want %v", c.p, c.n, c.ok)
		}
	}
	m := newMachine(t)
	put := func(name, match string, prio int64, vis int64) {
		m.ojsOK(&OJSPutPolicy{Name: name, Mode: PolicyCreate, Match: match, HasMatch: true, Priority: prio, HasPriority: true,
			Set: QueueConfig{VisibilityTimeout: i64(vis)}})
	}
	put("wide", "*", 0, 11)
	put("batch", "batch.*", 0, 22) // more literals than "wide"
	put("zeta", "batch.i*", 0, 33) // more literals than "batch"
	put("alpha", "batch.?mport", 0, 44)
	put("beta", "batch.i?port", 0, 55) // ties with alpha on literals: alpha sorts first
	put("urgent", "*.urgent", 5, 66)
	cases := map[string]string{"other": "wide", "batch.eu": "batch", "batch.ix": "zeta", "batch.import": "alpha", "batch.urgent": "urgent"}
	for q, want := range cases {
		m.push(item(q, "", "t", `1`))
		got := m.queue(q)
		if got.OJS == nil || got.OJS.Policy != want {
			t.Errorf("%s bound to %+v, want %s", q, got.OJS, want)
		}
	}
	// Editing a policy reaches bound queues at once; a new match does not rebind.
	m.ojsOK(&OJSPutPolicy{Name: "batch", Mode: PolicyPatch, Set: QueueConfig{VisibilityTimeout: i64(77)}, Match: "zzz", HasMatch: true})
	if q := m.queue("batch.eu"); q.Options.LeaseTime != 77 || q.OJS.Policy != "batch" {
		t.Fatalf("after policy edit: lease %d policy %s", q.Options.LeaseTime, q.OJS.Policy)
	}
	// Deleting a policy unbinds: back to the push default.
	r := m.ojsOK(&OJSDeletePolicy{Name: "batch"})
	if r.Unbound != 1 {
		t.Fatalf("unbound %d", r.Unbound)
	}
	if q := m.queue("batch.eu"); q.Options.LeaseTime != PushLeaseSeconds || q.OJS.Policy != "" {
		t.Fatalf("after policy delete: lease %d policy %q", q.Options.LeaseTime, q.OJS.Policy)
	}
}

// What a /configure names shares the top layer with the OJS overrides:
// policies never beat it (not even values OJS cannot say: a day's lease,
// retention off, the dead-letter flags apart), a later PATCH of the same
// option replaces it, and a PATCH removing that option's override lets the
// policies through again.
func TestOJSConfigureNamedSharesTopLayer(t *testing.T) {
	m := newMachine(t)
	m.ojsOK(&OJSPutPolicy{Name: DefaultPolicyName, Mode: PolicyPut, Set: QueueConfig{VisibilityTimeout: i64(45),
		DLQEnabled: bptr(false), CompletedTTL: &Duration{Text: "PT1S", Micros: 1e6}}})
	opts := DefaultOptions(0)
	opts.LeaseTime, opts.DeadLetterQueue, opts.DLQAfterMaxRetries, opts.RetentionEnabled = 86400, true, false, false
	m.apply(&ConfigureSet{Configure: Configure{Queue: "q", Options: opts}, Present: PresentLease | PresentDLQ | PresentRetention})
	want := func(what string, lease int64, dlq, dlqMax, retention bool, named uint32) {
		t.Helper()
		q := m.queue("q")
		o := q.Options
		if o.LeaseTime != lease || o.DeadLetterQueue != dlq || o.DLQAfterMaxRetries != dlqMax || o.RetentionEnabled != retention || q.Named != named {
			t.Fatalf("%s: lease %d dlq %v/%v retention %v named %b; want %d %v/%v %v %b", what, o.LeaseTime,
				o.DeadLetterQueue, o.DLQAfterMaxRetries, o.RetentionEnabled, q.Named, lease, dlq, dlqMax, retention, named)
		}
	}
	want("configured under _default", 86400, true, false, false, PresentLease|PresentDLQ|PresentRetention)
	m.ojsOK(&OJSPutPolicy{Name: DefaultPolicyName, Mode: PolicyPatch, Set: QueueConfig{VisibilityTimeout: i64(50)}})
	want("after a _default edit", 86400, true, false, false, PresentLease|PresentDLQ|PresentRetention)
	m.ojsOK(&OJSUpdateQueue{Name: "q", Set: QueueConfig{VisibilityTimeout: i64(9)}})
	want("after a PATCH of the lease", 9, true, false, false, PresentDLQ|PresentRetention)
	m.ojsOK(&OJSUpdateQueue{Name: "q", Unset: FieldDLQEnabled})
	want("after dead_letter.enabled: null", 9, false, false, false, PresentRetention)
	if ov := Overrides(m.queue("q")); ov.VisibilityTimeout == nil || *ov.VisibilityTimeout != 9 || ov.DLQEnabled != nil || ov.CompletedTTL != nil {
		t.Fatalf("overrides shown: %+v", ov)
	}
}

func TestOJSLeaseDefaultsByOrigin(t *testing.T) {
	m := newMachine(t)
	m.push(item("pushed", "", "t", `1`))
	m.apply(&ConfigureSet{Configure: Configure{Queue: "configured", Options: DefaultOptions(0)}})
	m.ojsOK(&OJSCreateQueue{Name: "ojs", Bind: BindAuto})
	for q, want := range map[string]int64{"pushed": 60, "configured": 300, "ojs": 30} {
		if got := m.queue(q).Options.LeaseTime; got != want {
			t.Errorf("%s: lease %d, want %d", q, got, want)
		}
	}
	// A policy's visibility_timeout wins over the origin default, not over
	// a leaseTime the configure named.
	m.ojsOK(&OJSPutPolicy{Name: DefaultPolicyName, Mode: PolicyPut, Set: QueueConfig{VisibilityTimeout: i64(45)}})
	for q := range map[string]bool{"pushed": true, "configured": true, "ojs": true} {
		if got := m.queue(q).Options.LeaseTime; got != 45 {
			t.Errorf("%s under _default: lease %d, want 45", q, got)
		}
	}
	opts := DefaultOptions(0)
	opts.LeaseTime = 120
	m.apply(&ConfigureSet{Configure: Configure{Queue: "configured", Options: opts}, Present: PresentLease})
	if q := m.queue("configured"); q.Options.LeaseTime != 120 || q.OJS.Overrides.VisibilityTimeout != nil ||
		q.Named != PresentLease || *Overrides(q).VisibilityTimeout != 120 {
		t.Fatalf("configure: lease %d", q.Options.LeaseTime)
	}
	// And an OJS override shows in the Queen options.
	m.ojsOK(&OJSUpdateQueue{Name: "configured", Set: QueueConfig{VisibilityTimeout: i64(9), DLQEnabled: bptr(false),
		CompletedTTL: &Duration{Text: "P1D", Micros: 86400e6}}})
	o := m.queue("configured").Options
	if o.LeaseTime != 9 || o.DeadLetterQueue || o.DLQAfterMaxRetries || !o.RetentionEnabled || o.CompletedRetentionSeconds != 86400 {
		t.Fatalf("options after patch: %+v", o)
	}
}

func TestOJSStateTable(t *testing.T) {
	m := newMachine(t)
	m.ojsOK(&OJSCreateQueue{Name: "q"})
	m.push(items("q", "", "a", "b")...)
	// paused: pushes held, pops skip.
	m.ojsOK(&OJSSetState{Name: "q", Pause: true})
	pausedAt := m.queue("q").OJS.PausedAt
	m.advance(time.Second)
	m.ojsOK(&OJSSetState{Name: "q", Pause: true}) // idempotent, keeps paused_at
	if m.queue("q").OJS.PausedAt != pausedAt {
		t.Fatal("second pause moved paused_at")
	}
	if r := m.push(item("q", "", "c", `1`)); r.Refused != nil {
		t.Fatalf("push to paused refused: %+v", r.Refused)
	}
	if r := m.pop(wild("q", 10)); r.Count() != 0 {
		t.Fatal("pop from a paused queue delivered")
	}
	m.ojsErr(&OJSUpdateQueue{Name: "q", State: ToDraining}, 409, "invalid_state_transition")
	m.ojsOK(&OJSSetState{Name: "q", Pause: false})
	m.ojsOK(&OJSSetState{Name: "q", Pause: false}) // no-op
	// draining (graceful): pushes 409, pops deliver, pause/resume 409.
	m.ojsOK(&OJSUpdateQueue{Name: "q", State: ToDraining})
	if r := m.push(item("q", "", "d", `1`)); r.Refused == nil || r.Refused.Code != RefuseDraining {
		t.Fatalf("push to draining: %+v", r.Refused)
	}
	m.ojsErr(&OJSSetState{Name: "q", Pause: true}, 409, "queue_draining")
	m.ojsErr(&OJSSetState{Name: "q", Pause: false}, 409, "queue_draining")
	m.ojsErr(&OJSUpdateQueue{Name: "q", State: ToPaused}, 409, "invalid_state_transition")
	r := m.pop(wild("q", 10))
	if r.Count() != 3 {
		t.Fatalf("draining pop delivered %d", r.Count())
	}
	// Cancel the drain, drain again, then the sweep deletes it at depth 0.
	m.ojsOK(&OJSUpdateQueue{Name: "q", State: ToActive})
	m.ojsOK(&OJSUpdateQueue{Name: "q", State: ToDraining})
	if sr := m.apply(&OJSSweep{Queue: "q", MaxDLQ: 10})[0].(*OJSSweepResult); sr.Finished {
		t.Fatal("drain finished with messages leased")
	}
	m.ack(QueueMode, ackAll(r, AckCompleted)...)
	if sr := m.apply(&OJSSweep{Queue: "q", MaxDLQ: 10})[0].(*OJSSweepResult); !sr.Finished || m.queue("q") != nil {
		t.Fatalf("drain did not finish: %+v", sr)
	}
	// Implicit creation by pause; strict mode refuses.
	m.ojsOK(&OJSSetState{Name: "pause-test", Pause: true})
	if q := m.queue("pause-test"); q == nil || StateName(q) != "paused" || q.Origin != segments.OriginOJS {
		t.Fatal("pause of an unknown name did not create it paused")
	}
	m.ojsErr(&OJSSetState{Name: "nope", Pause: true, Strict: true}, 404, "queue_not_found")
	m.ojsErr(&OJSUpdateQueue{Name: "nope"}, 404, "queue_not_found")
	m.ojsErr(&OJSCreateQueue{Name: "pause-test"}, 409, "queue_exists")
}

func TestOJSCapacityAllOrNothing(t *testing.T) {
	m := newMachine(t)
	m.ojsOK(&OJSCreateQueue{Name: "cap", Config: QueueConfig{MaxDepth: i64(3)}})
	if r := m.push(items("cap", "p", "1", "2")...); r.Refused != nil {
		t.Fatal(r.Refused)
	}
	before := m.digest()
	// Two more (one to another queue, which must not be stored either).
	r := m.push(item("other", "", "x", `1`), item("cap", "p", "3", `1`), item("cap", "q", "4", `1`))
	if r.Refused == nil || r.Refused.Code != RefuseFull || r.Refused.Depth != 2 || r.Refused.Bound != 3 {
		t.Fatalf("refusal %+v", r.Refused)
	}
	if m.queue("other") != nil || m.depth("cap") != 2 {
		t.Fatal("a refused push stored something")
	}
	if m.queue("cap").OJS.Overflow != 1 {
		t.Fatal("overflow not counted")
	}
	_ = before
	// Duplicates do not count; consumption frees room.
	if r := m.push(item("cap", "p", "1", `1`), item("cap", "p", "3", `1`)); r.Refused != nil {
		t.Fatalf("dup + 1: %+v", r.Refused)
	}
	pr := m.pop(wild("cap", 2))
	m.ack(QueueMode, ackAll(pr, AckCompleted)...)
	if d := m.depth("cap"); d != 1 {
		t.Fatalf("depth after ack %d", d)
	}
	if r := m.push(items("cap", "p", "5", "6")...); r.Refused != nil {
		t.Fatal(r.Refused)
	}
	// Size bound; lowering a bound removes nothing.
	m.ojsOK(&OJSUpdateQueue{Name: "cap", Set: QueueConfig{MaxDepth: i64(1), MaxSizeBytes: i64(100)}})
	if d := m.depth("cap"); d != 3 {
		t.Fatalf("lowering max_depth removed messages: %d", d)
	}
	m.ojsOK(&OJSUpdateQueue{Name: "cap", Unset: FieldMaxDepth})
	if r := m.push(item("cap", "p", "big", strings.Repeat("x", 100))); r.Refused == nil || r.Refused.BoundType != "size" {
		t.Fatalf("size refusal %+v", r.Refused)
	}
	// A transaction that pushes into a full queue fails whole.
	m.ojsOK(&OJSUpdateQueue{Name: "cap", Set: QueueConfig{MaxDepth: i64(3)}, Unset: FieldMaxSizeBytes})
	tr := m.txn(opPush(item("other", "", "y", `1`)), opPush(item("cap", "p", "7", `1`)))
	if tr.Success || tr.Refused == nil || m.queue("other") != nil {
		t.Fatalf("transaction %+v", tr)
	}
}

func TestOJSAccessLists(t *testing.T) {
	m := newMachine(t)
	prod, cons := []string{"svc-a"}, []string{"worker"}
	m.ojsOK(&OJSCreateQueue{Name: "acl", Config: QueueConfig{Producers: &prod, Consumers: &cons}})
	if r := m.push(item("acl", "", "1", `1`)); r.Refused == nil || r.Refused.Code != RefuseDenied {
		t.Fatal("anonymous push accepted")
	}
	if r := m.pushAs("svc-b", item("acl", "", "1", `1`)); r.Refused == nil {
		t.Fatal("svc-b push accepted")
	}
	if r := m.pushAs("svc-a", item("acl", "", "1", `1`)); r.Refused != nil {
		t.Fatal(r.Refused)
	}
	if r := m.popAs("svc-a", wild("acl", 1)); r.Denied != "acl" || r.Count() != 0 {
		t.Fatal("svc-a pop not denied")
	}
	if r := m.pop(wild("acl", 1)); r.Denied != "acl" {
		t.Fatal("anonymous pop not denied")
	}
	if r := m.popAs("worker", wild("acl", 1)); r.Count() != 1 {
		t.Fatal("worker pop denied")
	}
	// Transactions push as their principal: the anonymous one and svc-b are
	// refused whole, svc-a commits.
	txn := func(principal, tx string) *TransactionResult {
		return m.apply(&TransactionAs{Principal: principal, Transaction: Transaction{Ops: []TxOp{
			opPush(item("open", "", tx, `1`)), opPush(item("acl", "", tx, `1`))}}})[0].(*TransactionResult)
	}
	if r := m.txn(opPush(item("acl", "", "t0", `1`))); r.Success || r.Refused == nil || r.Refused.Code != RefuseDenied {
		t.Fatalf("anonymous transaction %+v", r)
	}
	if r := txn("svc-b", "t1"); r.Success || r.Refused == nil || r.Refused.Code != RefuseDenied || m.queue("open") != nil {
		t.Fatalf("svc-b transaction %+v (open queue %v)", r, m.queue("open"))
	}
	if r := txn("svc-a", "t2"); !r.Success || len(r.Results) != 2 {
		t.Fatalf("svc-a transaction %+v", r)
	}
	// Empty list: nobody.
	none := []string{}
	m.ojsOK(&OJSUpdateQueue{Name: "acl", Set: QueueConfig{Producers: &none}})
	if r := m.pushAs("svc-a", item("acl", "", "2", `1`)); r.Refused == nil {
		t.Fatal("empty producers list accepted a push")
	}
}

func TestOJSMaxConcurrency(t *testing.T) {
	m := newMachine(t)
	m.ojsOK(&OJSCreateQueue{Name: "mc", Config: QueueConfig{MaxConcurrency: i64(2)}})
	for _, p := range []string{"a", "b", "c"} {
		m.push(item("mc", p, "t"+p, `1`))
	}
	l := Lease{Scope: ScopeWildcard, Queue: "mc", Group: QueueMode, Batch: 10, MaxPartitions: 10}
	r := m.pop(l)
	if len(r.Partitions) != 2 {
		t.Fatalf("claimed %d batches with max_concurrency 2", len(r.Partitions))
	}
	if r2 := m.pop(l); r2.Count() != 0 {
		t.Fatal("pop past max_concurrency delivered")
	}
	if pc := m.checkPop(l); pc.Deliverable != 0 {
		t.Fatal("CheckPop reports deliverable past max_concurrency")
	}
	m.ack(QueueMode, ackAll(r, AckCompleted)...)
	if r3 := m.pop(l); len(r3.Partitions) != 1 {
		t.Fatal("pop after acks")
	}
}

func TestOJSDeleteStrategies(t *testing.T) {
	m := newMachine(t)
	m.push(items("rej", "", "1")...)
	m.ojsErr(&OJSDeleteQueue{Name: "rej", Strategy: segments.DeleteReject}, 409, "queue_not_empty")
	pr := m.pop(wild("rej", 1))
	m.ack(QueueMode, ackAll(pr, AckCompleted)...)
	if r := m.ojsOK(&OJSDeleteQueue{Name: "rej", Strategy: segments.DeleteReject}); !r.Deleted || m.queue("rej") != nil {
		t.Fatal("reject of an empty queue")
	}
	// purge with an active lease: 202-style pending, pops get nothing,
	// the ack ending the last lease completes it.
	m.push(items("pg", "", "1", "2", "3")...)
	pr = m.pop(wild("pg", 1))
	r := m.ojsOK(&OJSDeleteQueue{Name: "pg", Strategy: segments.DeletePurge})
	if !r.Pending || r.Affected != 2 || m.depth("pg") != 1 {
		t.Fatalf("purge with a lease: %+v, depth %d", r, m.depth("pg"))
	}
	if m.push(item("pg", "", "4", `1`)).Refused.Code != RefuseDeleting {
		t.Fatal("push to a deleting queue")
	}
	if m.pop(wild("pg", 5)).Count() != 0 {
		t.Fatal("pop from a deleting queue")
	}
	m.ojsErr(&OJSDeleteQueue{Name: "pg", Strategy: segments.DeleteMove, Target: "x"}, 409, "queue_deleting")
	if r := m.ojsOK(&OJSDeleteQueue{Name: "pg", Strategy: segments.DeletePurge}); !r.Pending {
		t.Fatal("repeat delete not pending")
	}
	m.ojsErr(&OJSUpdateQueue{Name: "pg", Set: QueueConfig{MaxDepth: i64(1)}}, 409, "queue_deleting")
	m.ojsErr(&OJSPurgeQueue{Name: "pg", States: PurgeBacklog}, 409, "queue_deleting")
	m.ack(QueueMode, ackAll(pr, AckCompleted)...)
	if m.queue("pg") != nil {
		t.Fatal("deletion not finished by the last ack")
	}
	// move keeps per-partition order, onto partitions of the same name.
	for p := 0; p < 3; p++ {
		for i := 0; i < 4; i++ {
			m.push(item("src", "p"+string(rune('0'+p)), "m"+string(rune('0'+p))+string(rune('0'+i)), `1`))
		}
	}
	m.push(item("dst", "p1", "existing", `1`))
	pr = m.pop(Lease{Scope: ScopeSpecific, Queue: "src", Partition: "p0", Group: QueueMode, Batch: 1, MaxPartitions: 1})
	m.ack(QueueMode, ackAll(pr, AckCompleted)...) // m00 consumed: not moved
	r = m.ojsOK(&OJSDeleteQueue{Name: "src", Strategy: segments.DeleteMove, Target: "dst"})
	if !r.Deleted || r.Affected != 11 {
		t.Fatalf("move: %+v", r)
	}
	if got := m.stored("dst", "p0"); strings.Join(got, ",") != "m01,m02,m03" {
		t.Fatalf("p0 moved as %v", got)
	}
	if got := m.stored("dst", "p1"); strings.Join(got, ",") != "existing,m10,m11,m12,m13" {
		t.Fatalf("p1 moved as %v", got)
	}
	m.ojsErr(&OJSDeleteQueue{Name: "dst", Strategy: segments.DeleteMove, Target: "dst"}, 422, "invalid_target")
	m.ojsOK(&OJSCreateQueue{Name: "small", Config: QueueConfig{MaxDepth: i64(2)}})
	m.ojsErr(&OJSDeleteQueue{Name: "dst", Strategy: segments.DeleteMove, Target: "small"}, 409, "target_queue_full")
	// discard; the default queue is protected.
	if r := m.ojsOK(&OJSDeleteQueue{Name: "dst", Strategy: segments.DeleteDiscard}); !r.Deleted || r.Affected != 12 {
		t.Fatalf("discard %+v", r)
	}
	m.ojsOK(&OJSSetState{Name: "default", Pause: false})
	m.ojsErr(&OJSDeleteQueue{Name: "default", Strategy: segments.DeletePurge}, 409, "queue_protected")
	// The Queen delete is refused the same way, and changes nothing.
	before, err := m.f.Queue("default")
	if err != nil || before == nil {
		t.Fatalf("default: %v %v", before, err)
	}
	if r := m.apply(&DeleteQueue{Queue: "default"})[0].(*DeleteQueueResult); r.Refused == nil ||
		r.Refused.Code != RefuseProtected {
		t.Fatalf("Queen delete of default: %+v", r)
	}
	if after, err := m.f.Queue("default"); err != nil || !reflect.DeepEqual(after, before) {
		t.Fatalf("a refused delete changed the queue: %+v, was %+v (%v)", after, before, err)
	}
}

func TestOJSPurgeKeepsLeased(t *testing.T) {
	m := newMachine(t)
	m.push(items("pq", "", "1", "2")...)
	m.push(items("pq", "", "3", "4")...)
	pr := m.pop(wild("pq", 1)) // "1" leased
	r := m.ojsOK(&OJSPurgeQueue{Name: "pq", States: PurgeBacklog})
	if r.Affected != 3 {
		t.Fatalf("purged %d", r.Affected)
	}
	m.ack(QueueMode, ackAll(pr, AckCompleted)...)
	if got := m.pop(wild("pq", 10)); got.Count() != 0 {
		t.Fatalf("purged messages delivered: %v", txids(got))
	}
	if d := m.depth("pq"); d != 0 {
		t.Fatalf("depth %d", d)
	}
}

func TestOJSDeadLetterPruning(t *testing.T) {
	m := newMachine(t)
	m.ojsOK(&OJSCreateQueue{Name: "dl", Config: QueueConfig{DLQEnabled: bptr(true), DLQMaxCount: i64(2),
		DLQMaxAge: &Duration{Text: "PT1H", Micros: 3600e6}}})
	for i := 0; i < 4; i++ {
		m.push(item("dl", "", "m"+string(rune('0'+i)), `1`))
		pr := m.pop(wild("dl", 1))
		m.ack(QueueMode, ackAll(pr, AckDLQ)...)
		m.advance(20 * time.Minute)
	}
	// Ages: 80, 60, 40, 20 minutes. max_age prunes the first two (>= 1 h),
	// then max_count keeps the newest two.
	sr := m.apply(&OJSSweep{Queue: "dl", MaxDLQ: 100})[0].(*OJSSweepResult)
	if sr.Pruned != 2 || len(m.deadLetters("dl")) != 2 {
		t.Fatalf("pruned %d, left %d", sr.Pruned, len(m.deadLetters("dl")))
	}
	m.ojsOK(&OJSUpdateQueue{Name: "dl", Set: QueueConfig{DLQMaxCount: i64(1)}})
	sr = m.apply(&OJSSweep{Queue: "dl", MaxDLQ: 100})[0].(*OJSSweepResult)
	if left := m.deadLetters("dl"); sr.Pruned != 1 || len(left) != 1 || left[0].TxID != "m3" {
		t.Fatalf("count pruning: %+v", sr)
	}
	// Idempotent.
	if sr = m.apply(&OJSSweep{Queue: "dl", MaxDLQ: 100})[0].(*OJSSweepResult); sr.Pruned != 0 {
		t.Fatal("second sweep pruned")
	}
}

func TestOJSPatchAndEvents(t *testing.T) {
	m := newMachine(t)
	m.ojsOK(&OJSCreateQueue{Name: "ev", Config: QueueConfig{MaxDepth: i64(5)}})
	if r := m.ojsOK(&OJSUpdateQueue{Name: "ev", Set: QueueConfig{MaxDepth: i64(5)}}); r.Changed {
		t.Fatal("a patch that changes nothing changed something")
	}
	m.ojsOK(&OJSUpdateQueue{Name: "ev", Unset: FieldMaxDepth, State: ToPaused})
	if q := m.queue("ev"); q.OJS.Overrides.MaxDepth != nil || q.OJS.Limits.MaxDepth != 0 {
		t.Fatal("null did not remove the override")
	}
	m.ojsOK(&OJSPurgeQueue{Name: "ev", States: PurgeBacklog})
	m.ojsOK(&OJSDeleteQueue{Name: "ev", Strategy: segments.DeletePurge})
	var types []string
	m.view(func(tx *segments.Tx) error {
		return tx.ForEachQueueEvent(0, func(e *segments.QueueEvent) (bool, error) {
			types = append(types, e.Type)
			if segments.EventSeq(e.ID) != e.Seq {
				t.Errorf("event id does not encode its number")
			}
			return true, nil
		})
	})
	want := "queue.created,queue.config_updated,queue.paused,queue.purged,queue.deleted"
	if strings.Join(types, ",") != want {
		t.Fatalf("events %v", types)
	}
}

func TestOJSPlainQueenQueueUnchanged(t *testing.T) {
	m := newMachine(t)
	m.push(item("plain", "", "1", `1`))
	q := m.queue("plain")
	if q.OJS != nil || q.Base != nil || q.Options != DefaultOptions(segments.OriginPush) {
		t.Fatalf("a plain push-born queue got OJS state: %+v", q)
	}
}

// An ensure-only state command creates a missing queue (active) and changes
// nothing on an existing one: a new leader must not resume a queue an
// operator paused.
func TestOJSEnsureOnly(t *testing.T) {
	m := newMachine(t)
	r := m.apply(&OJSSetState{Name: "default", EnsureOnly: true})[0].(*OJSResult)
	if r.Err != nil || !r.Created || m.queue("default") == nil {
		t.Fatalf("ensure of a missing queue: %+v", r)
	}
	if q := m.queue("default"); q.OJS != nil && q.OJS.State != segments.OJSActive {
		t.Fatalf("ensured queue not active: %+v", q.OJS)
	}
	m.apply(&OJSSetState{Name: "default", Pause: true})
	r = m.apply(&OJSSetState{Name: "default", EnsureOnly: true})[0].(*OJSResult)
	if r.Err != nil || r.Created || r.Changed {
		t.Fatalf("ensure of an existing queue: %+v", r)
	}
	if q := m.queue("default"); q.OJS == nil || q.OJS.State != segments.OJSPaused {
		t.Fatal("ensure resumed a paused queue")
	}
	if r := m.apply(&OJSSetState{Name: "strict-q", EnsureOnly: true, Strict: true})[0].(*OJSResult); r.Err != nil || !r.Created {
		t.Fatalf("ensure under strict mode: %+v", r)
	}
}

// TestOJSDefaultSurvivesDrain checks that the queue default, which always
// exists (ojs-queues.md 1), cannot be drained: PATCH state draining is
// refused with 409 queue_protected, and a sweep leaves the queue in place.
func TestOJSDefaultSurvivesDrain(t *testing.T) {
	m := newMachine(t)
	m.ojsOK(&OJSSetState{Name: DefaultQueue, EnsureOnly: true})
	m.ojsErr(&OJSUpdateQueue{Name: DefaultQueue, State: ToDraining}, 409, "queue_protected")
	m.apply(&OJSSweep{Queue: DefaultQueue, MaxDLQ: 10})
	q := m.queue(DefaultQueue)
	if q == nil {
		t.Fatal("a refused drain of the empty queue default deleted it")
	}
	if StateName(q) != "active" {
		t.Fatalf("default is %s after a refused drain", StateName(q))
	}
	// Other queues still drain and go when empty.
	m.ojsOK(&OJSCreateQueue{Name: "other"})
	m.ojsOK(&OJSUpdateQueue{Name: "other", State: ToDraining})
	m.apply(&OJSSweep{Queue: "other", MaxDLQ: 10})
	if m.queue("other") != nil {
		t.Fatal("a drained empty queue was not deleted")
	}
}

// TestOJSMoveIntoNewTargetChecksCapacity checks that a DELETE with strategy
// move into a target that does not exist yet checks the capacity the target
// would get from its policy layers (ojs-queues.md 6.5, 4.1): 409
// target_queue_full, and nothing moves or is created.
func TestOJSMoveIntoNewTargetChecksCapacity(t *testing.T) {
	m := newMachine(t)
	m.ojsOK(&OJSPutPolicy{Name: "tiny", Mode: PolicyCreate, Match: "tiny.*", HasMatch: true,
		Set: QueueConfig{MaxDepth: i64(2)}})
	m.push(items("src", "", "1", "2", "3", "4", "5")...)
	m.ojsErr(&OJSDeleteQueue{Name: "src", Strategy: segments.DeleteMove, Target: "tiny.new"}, 409, "target_queue_full")
	if m.queue("tiny.new") != nil {
		t.Fatal("the refused move created the target")
	}
	if m.queue("src") == nil || m.depth("src") != 5 {
		t.Fatalf("the refused move changed the source: depth %d", m.depth("src"))
	}
	// Within the bound the move creates the target, bound to the policy.
	m.push(items("two", "", "a", "b")...)
	if r := m.ojsOK(&OJSDeleteQueue{Name: "two", Strategy: segments.DeleteMove, Target: "tiny.ok"}); !r.Deleted || r.Affected != 2 {
		t.Fatalf("move of 2 into a new queue bound to max_depth 2: %+v", r)
	}
	if q := m.queue("tiny.ok"); q == nil || q.OJS == nil || q.OJS.Policy != "tiny" || m.depth("tiny.ok") != 2 {
		t.Fatalf("target after the move: %+v, depth %d", q, m.depth("tiny.ok"))
	}
}

// TestOJSStrictMoveUnknownTarget checks that in strict mode a DELETE with
// strategy move to an unknown target is 404 queue_not_found before any
// change (ojs-queues.md 6.5, 4.3), and that without strict the target is
// created implicitly.
func TestOJSStrictMoveUnknownTarget(t *testing.T) {
	m := newMachine(t)
	m.push(items("src", "", "1", "2")...)
	m.ojsErr(&OJSDeleteQueue{Name: "src", Strategy: segments.DeleteMove, Target: "nowhere", Strict: true}, 404, "queue_not_found")
	if m.queue("nowhere") != nil || m.queue("src") == nil || m.depth("src") != 2 {
		t.Fatal("a refused strict move changed something")
	}
	m.push(items("there", "", "x")...)
	if r := m.ojsOK(&OJSDeleteQueue{Name: "src", Strategy: segments.DeleteMove, Target: "there", Strict: true}); !r.Deleted || r.Affected != 2 {
		t.Fatalf("strict move to an existing target: %+v", r)
	}
	m.push(items("again", "", "1")...)
	if r := m.ojsOK(&OJSDeleteQueue{Name: "again", Strategy: segments.DeleteMove, Target: "fresh"}); !r.Deleted || m.queue("fresh") == nil {
		t.Fatalf("move to an unknown target without strict: %+v", r)
	}
}

// TestOJSPurgeCompletedPartlyConsumedSegment checks that a purge of
// completed messages removes every consumed message, including the consumed
// head of a segment whose tail is still unconsumed (ojs-queues.md 6.7): the
// tail keeps its offsets and order, a live lease in it is untouched, the
// transaction ids of the removed messages are freed, and the layout's
// invariants hold.
func TestOJSPurgeCompletedPartlyConsumedSegment(t *testing.T) {
	for _, c := range []struct {
		name     string
		consumed int // of the 5 messages of the partly consumed segment
	}{{"one", 1}, {"two", 2}, {"four", 4}} {
		t.Run(c.name, func(t *testing.T) {
			m := newMachine(t)
			m.push(items("pc", "", "w1", "w2")...)              // a segment consumed whole
			m.push(items("pc", "", "1", "2", "3", "4", "5")...) // the partly consumed one
			m.push(items("pc", "", "6")...)                     // an unconsumed one
			pr := m.pop(wild("pc", uint32(2+c.consumed)))
			m.ack(QueueMode, ackAll(pr, AckCompleted)...)
			r := m.ojsOK(&OJSPurgeQueue{Name: "pc", States: PurgeCompleted})
			if r.Affected != uint64(2+c.consumed) {
				t.Fatalf("purged %d, want %d", r.Affected, 2+c.consumed)
			}
			var want []string
			for i := c.consumed + 1; i <= 6; i++ {
				want = append(want, string(rune('0'+i)))
			}
			if got := m.stored("pc", ""); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("stored %v, want %v", got, want)
			}
			p := m.partition("pc", "")
			if p.Messages != uint64(len(want)) || p.FirstOffset != p.NextOffset-uint64(len(want)) {
				t.Fatalf("partition: %d messages, offsets %d to %d", p.Messages, p.FirstOffset, p.NextOffset)
			}
			m.view(func(tx *segments.Tx) error {
				v := ojsView(tx, m.queue("pc"), m.now.UnixMicro())
				if v.Completed != 0 || v.Depth != uint64(len(want)) || v.Available != uint64(len(want)) {
					t.Errorf("view after purge: %+v", v)
				}
				if err := checkInvariants(tx); err != nil {
					t.Error(err)
				}
				return nil
			})
			// The next pop gets the tail in order; a second purge while it is
			// leased removes nothing, and the lease still acks.
			pr = m.pop(wild("pc", 1))
			if got := txids(pr); len(got) != 1 || got[0] != want[0] {
				t.Fatalf("pop after purge: %v, want %s", got, want[0])
			}
			if r := m.ojsOK(&OJSPurgeQueue{Name: "pc", States: PurgeCompleted}); r.Affected != 0 {
				t.Fatalf("second purge removed %d", r.Affected)
			}
			if ar := m.ack(QueueMode, ackAll(pr, AckCompleted)...); ar == nil {
				t.Fatal("ack after purge")
			}
			if got := m.stored("pc", ""); len(got) != len(want) {
				t.Fatalf("stored after the second purge: %v", got)
			}
			// The removed messages' transaction ids are free again.
			if res := m.push(item("pc", "", "1", `1`)); res.Items[0].Status != PushQueued {
				t.Fatalf("re-push of a purged transaction id: %+v", res.Items[0])
			}
			m.view(func(tx *segments.Tx) error {
				if err := checkInvariants(tx); err != nil {
					t.Error(err)
				}
				return nil
			})
		})
	}
}

// viewOf is the OJS view of a queue at the machine's clock.
func (m *machine) viewOf(queue string) OJSQueueView {
	m.t.Helper()
	var v OJSQueueView
	m.view(func(tx *segments.Tx) error {
		v = ojsView(tx, m.queue(queue), m.now.UnixMicro())
		return nil
	})
	return v
}

// TestOJSDeletePurgeWithLeaseRemovesIdleNow checks that a DELETE with
// strategy purge (and discard) of a queue with a live lease removes the
// jobs that are not active at once and leaves only the leased ones, which
// go when they settle (ojs-queues.md 6.5): the 202 counts are what is left.
func TestOJSDeletePurgeWithLeaseRemovesIdleNow(t *testing.T) {
	for _, strategy := range []uint8{segments.DeletePurge, segments.DeleteDiscard} {
		t.Run(StrategyName(strategy), func(t *testing.T) {
			m := newMachine(t)
			m.push(items("pg", "", "1", "2", "3")...)
			m.push(items("pg", "", "4")...)
			m.push(items("pg", "other", "o1", "o2")...) // a partition without a lease
			pr := m.pop(Lease{Scope: ScopeSpecific, Queue: "pg", Partition: "", Group: QueueMode, Batch: 1, MaxPartitions: 1})
			if got := txids(pr); len(got) != 1 || got[0] != "1" {
				t.Fatalf("setup pop: %v", got)
			}
			r := m.ojsOK(&OJSDeleteQueue{Name: "pg", Strategy: strategy})
			if !r.Pending || r.Affected != 5 {
				t.Fatalf("delete with a lease: %+v", r)
			}
			if got := m.stored("pg", ""); strings.Join(got, ",") != "1" {
				t.Fatalf("stored after the delete: %v, want only the leased 1", got)
			}
			if got := m.stored("pg", "other"); len(got) != 0 {
				t.Fatalf("idle partition still stores %v", got)
			}
			if v := m.viewOf("pg"); v.Depth != 1 || v.Active != 1 || v.Available != 0 {
				t.Fatalf("view after the delete: %+v", v)
			}
			// A repeat answers the progress: what is left.
			if r := m.ojsOK(&OJSDeleteQueue{Name: "pg", Strategy: strategy}); !r.Pending || r.Affected != 1 {
				t.Fatalf("repeat: %+v", r)
			}
			m.view(func(tx *segments.Tx) error {
				if err := checkInvariants(tx); err != nil {
					t.Error(err)
				}
				return nil
			})
			m.ack(QueueMode, ackAll(pr, AckCompleted)...)
			if m.queue("pg") != nil {
				t.Fatal("deletion not finished by the last ack")
			}
		})
	}
}

// TestOJSDeleteMoveWithLeaseMovesIdleNow checks that a DELETE with strategy
// move of a queue with a live lease moves the jobs that are not active at
// once into the target, created now, and the leased ones when their lease
// settles: not at all when acked, at the end of the target's order when the
// lease expires (the sweep finishes the deletion) (ojs-queues.md 6.5).
func TestOJSDeleteMoveWithLeaseMovesIdleNow(t *testing.T) {
	for _, c := range []struct {
		name   string
		settle func(m *machine, pr *LeaseResult)
		want0  string
	}{
		{"ack", func(m *machine, pr *LeaseResult) { m.ack(QueueMode, ackAll(pr, AckCompleted)...) }, "a2,a3,a4"},
		{"expiry", func(m *machine, pr *LeaseResult) {
			m.advance(time.Duration(m.queue("src").Options.LeaseTime+1) * time.Second)
			if r := m.apply(&OJSSweep{Queue: "src", MaxDLQ: 10})[0].(*OJSSweepResult); !r.Finished {
				m.t.Fatalf("sweep after expiry: %+v", r)
			}
		}, "a2,a3,a4,a1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newMachine(t)
			m.push(items("src", "p0", "a1", "a2", "a3")...)
			m.push(items("src", "p0", "a4")...)
			m.push(items("src", "p1", "b1", "b2")...)
			pr := m.pop(Lease{Scope: ScopeSpecific, Queue: "src", Partition: "p0", Group: QueueMode, Batch: 1, MaxPartitions: 1})
			if got := txids(pr); len(got) != 1 || got[0] != "a1" {
				t.Fatalf("setup pop: %v", got)
			}
			r := m.ojsOK(&OJSDeleteQueue{Name: "src", Strategy: segments.DeleteMove, Target: "dst"})
			if !r.Pending || r.Affected != 5 {
				t.Fatalf("move with a lease: %+v", r)
			}
			if m.queue("dst") == nil {
				t.Fatal("the target was not created by the move")
			}
			if got := m.stored("dst", "p0"); strings.Join(got, ",") != "a2,a3,a4" {
				t.Fatalf("dst p0 after the delete: %v", got)
			}
			if got := m.stored("dst", "p1"); strings.Join(got, ",") != "b1,b2" {
				t.Fatalf("dst p1 after the delete: %v", got)
			}
			if got := m.stored("src", "p0"); strings.Join(got, ",") != "a1" {
				t.Fatalf("src p0 after the delete: %v", got)
			}
			if v := m.viewOf("src"); v.Depth != 1 || v.Active != 1 || v.Available != 0 {
				t.Fatalf("source view after the delete: %+v", v)
			}
			if d := m.depth("dst"); d != 5 {
				t.Fatalf("target depth %d", d)
			}
			// The moved jobs are deliverable from the target at once.
			if got := txids(m.pop(Lease{Scope: ScopeSpecific, Queue: "dst", Partition: "p1", Group: QueueMode, Batch: 10, MaxPartitions: 1})); strings.Join(got, ",") != "b1,b2" {
				t.Fatalf("pop from the target: %v", got)
			}
			m.view(func(tx *segments.Tx) error {
				if err := checkInvariants(tx); err != nil {
					t.Error(err)
				}
				return nil
			})
			c.settle(m, pr)
			if m.queue("src") != nil {
				t.Fatal("deletion not finished")
			}
			if got := m.stored("dst", "p0"); strings.Join(got, ",") != c.want0 {
				t.Fatalf("dst p0 at the end: %v, want %s", got, c.want0)
			}
		})
	}
}

// TestOJSPurgeBacklogCutsSegmentAcrossCursor checks that a purge of the
// backlog removes the unconsumed tail of a segment whose head was consumed
// and holds a live batch: only the leased message stays.
func TestOJSPurgeBacklogCutsSegmentAcrossCursor(t *testing.T) {
	m := newMachine(t)
	m.push(items("pq", "", "1", "2", "3", "4", "5", "6")...) // one segment
	pr := m.pop(wild("pq", 2))
	m.ack(QueueMode, ackAll(pr, AckCompleted)...)
	pr = m.pop(wild("pq", 1)) // "3" leased
	if r := m.ojsOK(&OJSPurgeQueue{Name: "pq", States: PurgeBacklog}); r.Affected != 3 {
		t.Fatalf("purged %d, want 3", r.Affected)
	}
	if got := m.stored("pq", ""); strings.Join(got, ",") != "1,2,3" {
		t.Fatalf("stored after the purge: %v", got)
	}
	m.ack(QueueMode, ackAll(pr, AckCompleted)...)
	if got := m.pop(wild("pq", 10)); got.Count() != 0 {
		t.Fatalf("purged messages delivered: %v", txids(got))
	}
	m.view(func(tx *segments.Tx) error {
		if err := checkInvariants(tx); err != nil {
			t.Error(err)
		}
		return nil
	})
}
