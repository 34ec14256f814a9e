package maintenance_test

// The lease sweep against a real state machine, with the fakes of
// maintenance_test.go (package maintenance_test, as the fakes are).

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/maintenance"
	"github.com/crownmq/crown/segments"
)

// DESIGN.md, Guarantees: "Sweeps are bounded. [...] `ExpireLeases` clears
// at most 1000 lease records and inspects at most 8000 index entries per
// command", and "An idle cluster's log stays still"; lease expiry needs no
// timer to be correct (queen-api.md 5: "Lease expiry needs no timer to be
// correct [...] Timers only serve to wake parked long-polls"). With more
// live leases than one command inspects (8 x LeaseBatch), and none of them
// long expired, there is nothing to clear: a lease tick must propose a
// bounded number of commands, not re-propose an ExpireLeases that clears
// nothing, one log entry after another, for as long as the leases live.
func TestRunnerLeaseSweepDoesNotSpinOnLiveLeases(t *testing.T) {
	f, err := fsm.Open(fsm.Config{Dir: t.TempDir(), NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	p := &fsmProposer{t: t, f: f, now: time.Now()}
	o := fsm.DefaultOptions(segments.OriginConfigure)
	o.LeaseTime = 3600
	p.apply(&fsm.Configure{Queue: "q", Options: o})
	const parts = 20
	var items []fsm.PushItem
	for i := range parts {
		items = append(items, fsm.PushItem{Queue: "q", Partition: fmt.Sprintf("p%02d", i), TxID: fmt.Sprintf("t%d", i), Payload: []byte(`1`)})
	}
	p.apply(&fsm.Push{Items: items})
	// 20 groups each lease one partition: 20 live lease records.
	for i := range parts {
		res := p.apply(&fsm.Lease{Scope: fsm.ScopeSpecific, Queue: "q", Partition: fmt.Sprintf("p%02d", i),
			Group: fmt.Sprintf("g%02d", i), Batch: 1, MaxPartitions: 1})
		if lr, ok := res[0].(*fsm.LeaseResult); !ok || len(lr.Partitions) != 1 {
			t.Fatalf("lease %d: %T %+v", i, res[0], res[0])
		}
	}

	var leaseCmds atomic.Int32
	var cleared atomic.Uint64
	counting := &leaseCounting{inner: p, on: func(r *fsm.ExpireLeasesResult) {
		leaseCmds.Add(1)
		cleared.Add(r.Cleared)
	}}
	// LeaseBatch 2: a command inspects at most 16 of the 20 live records.
	r, _ := newRunner(t, maintenance.Config{RetentionInterval: time.Hour, LeaseInterval: 50 * time.Millisecond,
		LeaseBatch: 2, LeaseGrace: time.Minute}, counting, f)
	r.SetLeader(true)
	time.Sleep(300 * time.Millisecond) // about 6 lease ticks
	r.Close()
	if n := leaseCmds.Load(); n > 12 {
		t.Fatalf("%d ExpireLeases commands in about 6 ticks (cleared %d records, all leases live): the sweep re-proposes while nothing is clearable", n, cleared.Load())
	}
	if c := cleared.Load(); c != 0 {
		t.Fatalf("cleared %d live lease records", c)
	}
}

type leaseCounting struct {
	inner maintenance.Proposer
	on    func(*fsm.ExpireLeasesResult)
}

func (c *leaseCounting) Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error) {
	res, idx, err := c.inner.Propose(ctx, cmd)
	if er, ok := res.(*fsm.ExpireLeasesResult); ok && err == nil {
		c.on(er)
	}
	return res, idx, err
}

// A pop that leases a partition again after its lease expired keeps the
// old lease in the index until the lease sweep (fsm.SupersedeLease). The
// sweep removed such entries but did not count them in its result's
// Cleared, which is what the runner reads as progress: a step that removed
// a full batch of them looked like one that removed nothing, so the tick
// ended after it and the sweep drained LeaseBatch entries a LeaseInterval
// (1000 every 30 s by default), less than a cluster whose consumers let
// leases lapse can make, so the index grew without bound, and
// crown_sweep_leases_cleared_total stayed 0.
func TestRunnerLeaseSweepDrainsSupersededLeasesInOneTick(t *testing.T) {
	f, err := fsm.Open(fsm.Config{Dir: t.TempDir(), NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	start := time.Now().Add(-time.Hour)
	p := &fsmProposer{t: t, f: f, now: start}
	o := fsm.DefaultOptions(segments.OriginConfigure)
	o.LeaseTime = 3600
	p.apply(&fsm.Configure{Queue: "q", Options: o})
	const parts = 6
	var items []fsm.PushItem
	for i := range parts {
		items = append(items, fsm.PushItem{Queue: "q", Partition: fmt.Sprintf("p%d", i), TxID: fmt.Sprintf("t%d", i), Payload: []byte(`1`)})
	}
	p.apply(&fsm.Push{Items: items})
	lease := func(part string, seconds int64) {
		t.Helper()
		res := p.apply(&fsm.Lease{Scope: fsm.ScopeSpecific, Queue: "q", Partition: part, Group: "g",
			Batch: 1, MaxPartitions: 1, LeaseSeconds: seconds})
		if lr, ok := res[0].(*fsm.LeaseResult); !ok || len(lr.Partitions) != 1 {
			t.Fatalf("lease of %s: %T %+v", part, res[0], res[0])
		}
	}
	// Each partition's first lease lapses and the partition is leased
	// again for an hour: six superseded entries, then six live ones.
	for i := range parts {
		lease(fmt.Sprintf("p%d", i), 1)
	}
	p.now = p.now.Add(2 * time.Second)
	for i := range parts {
		lease(fmt.Sprintf("p%d", i), 3600)
	}
	p.now = time.Now() // the superseded leases lapsed an hour ago, past any grace
	const grace = time.Minute
	if due, _, err := f.LeasesDue(time.Now().UnixMicro(), grace.Microseconds(), 1000, [16]byte{}); err != nil || !due {
		t.Fatalf("superseded leases not due for the sweep: %v %v", due, err)
	}

	var cmds atomic.Int32
	counting := &leaseCounting{inner: wallProposer{p}, on: func(*fsm.ExpireLeasesResult) { cmds.Add(1) }}
	// LeaseBatch 2: three commands hold the six superseded entries; the
	// tick proposes them one after another, as it does for live records.
	const interval = 500 * time.Millisecond
	r, reg := newRunner(t, maintenance.Config{RetentionInterval: time.Hour, LeaseInterval: interval,
		LeaseBatch: 2, LeaseGrace: grace}, counting, f)
	r.SetLeader(true)
	waitFor(t, "the first lease sweep", 5*time.Second, func() bool { return cmds.Load() > 0 })
	time.Sleep(interval / 2) // the first tick is over, the second not yet due
	due, _, err := f.LeasesDue(time.Now().UnixMicro(), grace.Microseconds(), 1000, [16]byte{})
	r.Close()
	if err != nil || due {
		t.Fatalf("superseded leases left in the index after the first tick's %d commands (%v)", cmds.Load(), err)
	}
	if v := metric(t, reg, "crown_sweep_leases_cleared_total"); v != parts {
		t.Fatalf("crown_sweep_leases_cleared_total %v, want %d", v, parts)
	}
}
