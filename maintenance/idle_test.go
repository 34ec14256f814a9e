package maintenance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/maintenance"
	"github.com/crownmq/crown/segments"
)

// The state machine answers the runner's checks.
var _ maintenance.DueState = (*fsm.FSM)(nil)

// wallProposer stamps each proposal with the wall clock, as a leader does
// (the runner's checks read the same clock).
type wallProposer struct{ p *fsmProposer }

func (w wallProposer) Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error) {
	w.p.mu.Lock()
	w.p.now = time.Now()
	w.p.mu.Unlock()
	return w.p.Propose(ctx, cmd)
}

// DESIGN.md, "An idle cluster's log stays still": with every timer
// ticking every 5 ms, a state that holds plenty but has nothing due (the
// OJS queue default with its completed retention and dead-letter caps, a
// queue with every rule on and live leases, a lease expired within its
// grace, dead letters under their caps, a deletion waiting for a live
// lease, a deleted id inside its dedup window) gets no entry: its applied
// index and digest stay as they were. A queue given something to sweep is
// swept at the next tick, in one entry, and the log is still again after.
func TestRunnerIdleClusterLogStaysStill(t *testing.T) {
	f, err := fsm.Open(fsm.Config{Dir: t.TempDir(), NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	p := &fsmProposer{t: t, f: f, now: time.Now().Add(-10 * time.Minute)}
	ok := func(res []any) {
		t.Helper()
		if er, bad := res[0].(*fsm.ErrorResult); bad {
			t.Fatal(er.Err)
		}
		if r, isOJS := res[0].(*fsm.OJSResult); isOJS && r.Err != nil {
			t.Fatalf("%+v", r.Err)
		}
	}
	pop := func(l fsm.Lease) *fsm.LeaseResult {
		t.Helper()
		l.Batch, l.MaxPartitions, l.WindowBatch = 1, 1, 100
		if l.Group == "" {
			l.Group = fsm.QueueMode
		}
		if l.Partition != "" {
			l.Scope = fsm.ScopeSpecific
		} else {
			l.Scope = fsm.ScopeWildcard
		}
		r := p.apply(&l)[0].(*fsm.LeaseResult)
		if r.Count() != 1 {
			t.Fatalf("pop %+v: %d messages", l, r.Count())
		}
		return r
	}
	ackAll := func(r *fsm.LeaseResult, status uint8) {
		t.Helper()
		var items []fsm.AckItem
		for _, lp := range r.Partitions {
			for _, m := range lp.Messages {
				items = append(items, fsm.AckItem{TxID: m.TxID, PartitionID: lp.PartitionID, PartitionOK: true,
					LeaseID: r.LeaseID, HasLease: true, Status: status})
			}
		}
		p.apply(&fsm.Ack{Group: r.Group, Items: items})
	}
	push := func(queue, part, tx string) [16]byte {
		t.Helper()
		r := p.apply(&fsm.Push{Items: []fsm.PushItem{{Queue: queue, Partition: part, TxID: tx, Payload: []byte(`1`)}}})[0].(*fsm.PushResult)
		if r.Items[0].Status != fsm.PushQueued {
			t.Fatalf("push %s/%s/%s: %+v", queue, part, tx, r.Items[0])
		}
		return r.Items[0].PartitionID
	}

	ok(p.apply(&fsm.OJSSetState{Name: fsm.DefaultQueue, EnsureOnly: true}))
	push(fsm.DefaultQueue, "", "j1")
	ackAll(pop(fsm.Lease{Queue: fsm.DefaultQueue}), fsm.AckCompleted) // completed, inside its retention
	o := fsm.DefaultOptions(segments.OriginConfigure)
	o.RetentionEnabled, o.RetentionSeconds, o.CompletedRetentionSeconds = true, 3600, 3600
	o.MaxWaitTimeSeconds, o.DedupWindowSeconds, o.LeaseTime = 7200, 3600, 3600
	p.apply(&fsm.Configure{Queue: "q", Options: o})
	push("q", "p0", "a")
	push("q", "p0", "b")
	push("q", "p1", "c")
	gone := push("q", "p2", "gone")
	pop(fsm.Lease{Queue: "q", Partition: "p0"})                           // live for an hour
	ackAll(pop(fsm.Lease{Queue: "q", Partition: "p1"}), fsm.AckCompleted) // consumed, inside its retention
	ok(p.apply(&fsm.DeleteMessage{Partition: gone, TxID: "gone"}))        // remembered for its dedup window
	so := fsm.DefaultOptions(segments.OriginConfigure)
	so.LeaseTime = 420 // expires 3 minutes before the runner starts: inside the 5-minute grace
	p.apply(&fsm.Configure{Queue: "short", Options: so})
	push("short", "", "s")
	pop(fsm.Lease{Queue: "short"})
	mw := fsm.DefaultOptions(segments.OriginConfigure)
	mw.MaxWaitTimeSeconds = 7200
	p.apply(&fsm.Configure{Queue: "mw", Options: mw})
	push("mw", "a", "m1")
	push("mw", "b", "m2")
	ok(p.apply(&fsm.OJSCreateQueue{Name: "dl", Config: fsm.QueueConfig{DLQEnabled: ptr(true), DLQMaxCount: ptr(int64(3)),
		DLQMaxAge: &fsm.Duration{Text: "PT1H", Micros: 3600e6}}}))
	push("dl", "", "d")
	ackAll(pop(fsm.Lease{Queue: "dl"}), fsm.AckDLQ)
	ok(p.apply(&fsm.OJSCreateQueue{Name: "leaving", Config: fsm.QueueConfig{VisibilityTimeout: ptr(int64(3600))}}))
	push("leaving", "", "l1")
	push("leaving", "", "l2")
	pop(fsm.Lease{Queue: "leaving"})
	ok(p.apply(&fsm.OJSDeleteQueue{Name: "leaving", Strategy: segments.DeleteDiscard})) // waits for the live lease
	if q, _ := f.Queue("leaving"); q == nil {
		t.Fatal("the deletion did not wait for the live lease")
	}

	for _, kind := range []string{"retention", "ojs"} {
		targets := map[string]func() ([]string, error){"retention": f.SweepTargets, "ojs": f.OJSSweepTargets}[kind]
		if got, err := targets(); err != nil || len(got) < 2 {
			t.Fatalf("%s targets %v (%v): the idle state should give the timers queues to look at", kind, got, err)
		}
	}
	// Not an empty state: each kind of sweep has work an hour or two on.
	later := time.Now().Add(2 * time.Hour).UnixMicro()
	for name, check := range map[string]func() (bool, error){
		"retention q": func() (bool, error) { return f.SweepDue("q", later) },
		"ojs dl":      func() (bool, error) { return f.OJSSweepDue("dl", later) },
		"ojs leaving": func() (bool, error) { return f.OJSSweepDue("leaving", later) },
		"leases": func() (bool, error) {
			due, _, err := f.LeasesDue(later, (5 * time.Minute).Microseconds(), 1000, [16]byte{})
			return due, err
		},
		"dedup": func() (bool, error) { return f.DeletedTxIDsDue(later) },
	} {
		if due, err := check(); err != nil || !due {
			t.Fatalf("%s not due two hours on (%v)", name, err)
		}
	}
	idx0, dig0, err := f.Digest()
	if err != nil {
		t.Fatal(err)
	}
	r, reg := newRunner(t, maintenance.Config{RetentionInterval: 5 * time.Millisecond, LeaseInterval: 5 * time.Millisecond,
		EnsureQueues: []string{fsm.DefaultQueue}}, wallProposer{p}, f)
	r.SetLeader(true)
	waitFor(t, "every timer to tick several times", 10*time.Second, func() bool {
		if idx, _, _ := f.Digest(); idx != idx0 {
			return true // moved: still() says how
		}
		for _, kind := range []string{"retention", "ojs", "leases", "dedup"} {
			if metric(t, reg, "crown_sweep_skipped_total", "kind", kind) < 20 {
				return false
			}
		}
		return true
	})
	still := func(wantIdx uint64, wantDig string) {
		t.Helper()
		idx, dig, err := f.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if idx != wantIdx || (wantDig != "" && dig != wantDig) {
			var cmds []string
			for _, kind := range []string{"retention", "ojs", "leases", "dedup"} {
				cmds = append(cmds, fmt.Sprintf("%s=%v", kind, metric(t, reg, "crown_sweep_commands_total", "kind", kind)))
			}
			t.Fatalf("the idle log moved: applied index %d -> %d, digest changed %v; sweep commands %v",
				wantIdx, idx, dig != wantDig, cmds)
		}
	}
	still(idx0, dig0)

	// Something to sweep: maxWait lowered to a minute condemns both of mw's
	// segments (10 minutes old). The next tick deletes them in one entry.
	mw.MaxWaitTimeSeconds = 60
	_, idx1 := p.applyAt(&fsm.Configure{Queue: "mw", Options: mw})
	waitFor(t, "mw swept", 10*time.Second, func() bool {
		return metric(t, reg, "crown_sweep_segments_deleted_total", "rule", "max_wait") == 2
	})
	skipped := metric(t, reg, "crown_sweep_skipped_total", "kind", "retention")
	waitFor(t, "more retention ticks", 10*time.Second, func() bool {
		return metric(t, reg, "crown_sweep_skipped_total", "kind", "retention") >= skipped+20
	})
	r.Close()
	still(idx1+1, "")
	if v := metric(t, reg, "crown_sweep_commands_total", "kind", "retention"); v != 1 {
		t.Fatalf("%v retention sweep commands, want the one that deleted mw's segments", v)
	}
	if v, err := f.QueueView("mw", time.Now().UnixMicro(), false); err != nil || v.Stats.Total != 0 {
		t.Fatalf("mw after the sweep: %+v, %v", v, err)
	}
}

func ptr[T any](v T) *T { return &v }
