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
