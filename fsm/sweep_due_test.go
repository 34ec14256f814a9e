package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/segments"
)

// The leader proposes a sweep only when its read-only check says the
// command would change something (sweep_due.go; maintenance/DESIGN.md, "An
// idle cluster's log stays still"). A check that says "not due" when the
// command would change something loses a deletion for a tick at least (and
// for good if it keeps saying so); one that says "due" when nothing would
// change puts an empty entry in the log on every tick. These tests drive
// random traffic (the determinism generator: pushes, pops, acks, extends,
// transactions, configures, OJS administration, deletions, sweeps, clock
// steps forward and back) and after each step compare each check with what
// applying its command actually did to the state.
//
// "Changed" is measured on twin state machines kept in lockstep: at the
// same index and time, one applies the command, the other a command that
// changes nothing (a sweep of a queue that does not exist), and their
// digests are compared; both then apply the other's entry, which brings
// them back to the same state (the command is idempotent at one time). The
// digest covers the meta bucket too (applied index, the state's time), so
// a digest compared before and after on one machine would always differ.

// sweepTwin holds the reference machine (driven by the generator) and its
// twin.
type sweepTwin struct {
	t     *testing.T
	g     *generator
	b     *FSM
	fed   int // entries of the generator's log applied to b
	stats map[string]*[2][2]int
}

// noopSweep changes nothing but the applied index and the state's time.
var noopSweep = &Sweep{Queue: "no.such.queue", MaxSegments: 1}

// catchUp applies to the twin what the generator committed since last time.
func (w *sweepTwin) catchUp() {
	for ; w.fed < len(w.g.rec.logs); w.fed++ {
		w.b.ApplyBatch([]*raft.Log{w.g.rec.logs[w.fed]})
	}
}

// logAt encodes cmd as the entry at index, stamped at.
func (w *sweepTwin) logAt(index uint64, at int64, cmd Command) *raft.Log {
	w.t.Helper()
	b, err := AppendEntry(nil, &Entry{Stamp: at, Origin: w.g.m.node, Commands: []Command{cmd}})
	if err != nil {
		w.t.Fatal(err)
	}
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: b}
}

// changes applies cmd stamped at to the reference and a no-op to the twin
// at the same index, reports whether their states differ, and then
// applies each the other's entry so that they agree again.
func (w *sweepTwin) changes(cmd Command, at int64) bool {
	w.t.Helper()
	a, m := w.g.m.f, w.g.m
	m.index++
	a.ApplyBatch([]*raft.Log{w.logAt(m.index, at, cmd)})
	w.b.ApplyBatch([]*raft.Log{w.logAt(m.index, at, noopSweep)})
	_, da := digestOf(w.t, a)
	_, db := digestOf(w.t, w.b)
	m.index++
	a.ApplyBatch([]*raft.Log{w.logAt(m.index, at, noopSweep)})
	w.b.ApplyBatch([]*raft.Log{w.logAt(m.index, at, cmd)})
	ia, da2 := digestOf(w.t, a)
	ib, db2 := digestOf(w.t, w.b)
	if ia != ib || da2 != db2 {
		w.t.Fatalf("index %d: the twins disagree after exchanging %s and a no-op", ia, TypeName(cmd.Type()))
	}
	return da != db
}

// stateNow is the reference's stored time.
func (w *sweepTwin) stateNow() int64 {
	var now int64
	w.g.m.view(func(tx *segments.Tx) error { now = tx.Now(); return nil })
	return now
}

// probe compares one check, run at the leader's now, with the effect of
// its command applied at the same now. A "due" answer must also hold at
// any later time (the monotonicity the runner relies on).
func (w *sweepTwin) probe(kind string, now int64, check func(now int64) (bool, error), cmd Command) {
	w.t.Helper()
	due, err := check(now)
	if err != nil {
		w.t.Fatalf("%s check: %v", kind, err)
	}
	if due {
		for _, later := range []time.Duration{time.Microsecond, time.Second, time.Hour} {
			if d, err := check(now + later.Microseconds()); err != nil || !d {
				w.t.Fatalf("%s: due at %d but not %v later (%v): a later time must only condemn more", kind, now, later, err)
			}
		}
	}
	changed := w.changes(cmd, now)
	if due != changed {
		w.t.Fatalf("%s (%+v) at %d (state time %d): check says due=%v, applying it changed the state: %v",
			kind, cmd, now, w.stateNow(), due, changed)
	}
	s := w.stats[kind]
	if s == nil {
		s = &[2][2]int{}
		w.stats[kind] = s
	}
	s[b2i(due)][b2i(changed)]++
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sweepDueQueues are the queues the walk sweeps: the generator's, the
// OJS queues its commands create, and one that never exists.
var sweepDueQueues = []string{"orders.eu", "orders.us", "stock", "", "other", "moved.here", DefaultQueue, "o.del", "no.such.queue"}

// probeOne runs one random check against its command.
func (w *sweepTwin) probeOne() {
	g := w.g
	// The leader's now: its clock (the generator's, which also steps
	// back), or behind the state's time (a new leader with a slow clock).
	now := g.m.now.UnixMicro()
	if g.pick(4) == 0 {
		behind := []time.Duration{time.Second, 30 * time.Second, 10 * time.Minute}[g.pick(3)]
		now = w.stateNow() - 1 - int64(g.pick(int(behind.Microseconds())))
	}
	f := g.m.f
	q := sweepDueQueues[g.pick(len(sweepDueQueues))]
	kind := g.pick(4)
	if kind == 1 && g.pick(4) != 0 {
		// Mostly queues the OJS surface has touched: the others have
		// nothing an OJS sweep could do.
		var ojs []string
		for _, name := range sweepDueQueues {
			if qr := g.m.queue(name); qr != nil && qr.OJS != nil {
				ojs = append(ojs, name)
			}
		}
		if len(ojs) > 0 {
			q = ojs[g.pick(len(ojs))]
		}
	}
	// Half the time, the leader's now is where a rule's answer flips: a
	// time the state holds plus the rule's age, or a microsecond either
	// side, when that is not behind the state's time nor far ahead of it
	// (the clock then moves there: the leader's clock said so).
	boundary := func(times []int64) {
		if len(times) == 0 || g.pick(3) == 0 {
			return
		}
		t := times[g.pick(len(times))] + int64(g.pick(3)-1)
		if sn := w.stateNow(); t >= sn && t-sn <= (15*time.Minute).Microseconds() {
			now = t
			if at := time.UnixMicro(t); at.After(g.m.now) {
				g.m.now = at
			}
		}
	}
	switch kind {
	case 0:
		boundary(w.sweepTimes(q))
		w.probe("sweep", now, func(n int64) (bool, error) { return f.SweepDue(q, n) },
			&Sweep{Queue: q, MaxSegments: uint32(1 + g.pick(3))})
	case 1:
		boundary(w.ojsTimes(q))
		w.probe("ojs", now, func(n int64) (bool, error) { return f.OJSSweepDue(q, n) },
			&OJSSweep{Queue: q, MaxDLQ: uint32(1 + g.pick(3))})
	case 2:
		grace := []int64{0, 1e6, 10e6, 60e6}[g.pick(4)]
		batch := uint32(1 + g.pick(2)) // inspects 8 or 16 index entries: fewer than the walk holds at times
		boundary(w.leaseTimes(grace))
		from := w.leaseFrom()
		w.probe("leases", now, func(n int64) (bool, error) {
			due, _, err := f.LeasesDue(n, grace, batch, from)
			return due, err
		}, &ExpireLeases{Grace: grace, Max: batch, From: from})
	default:
		w.probe("dedup", now, f.DeletedTxIDsDue, &ForgetDeletedTxIDs{Max: uint32(1 + g.pick(3))})
	}
}

// sweepTimes are the times at which q's rules condemn the first segment
// of one of its partitions.
func (w *sweepTwin) sweepTimes(queue string) []int64 {
	var out []int64
	w.g.m.view(func(tx *segments.Tx) error {
		q, err := tx.Queue(queue)
		if err != nil || q == nil {
			return err
		}
		o := q.Options
		return tx.ForEachPartition(q.ID, "", func(p *segments.Partition) (bool, error) {
			return true, tx.Segments(p, func(si segments.SegmentInfo) (bool, error) {
				for _, age := range []int64{o.RetentionSeconds, o.CompletedRetentionSeconds, o.MaxWaitTimeSeconds} {
					if age > 0 {
						out = append(out, si.CreatedAt+Micros(age))
					}
				}
				return false, nil
			})
		})
	})
	return out
}

// ojsTimes are the times at which q's oldest dead letter passes max_age
// and at which its leases expire (a deletion waits for them).
func (w *sweepTwin) ojsTimes(queue string) []int64 {
	var out []int64
	w.g.m.view(func(tx *segments.Tx) error {
		q, err := tx.Queue(queue)
		if err != nil || q == nil || q.OJS == nil {
			return err
		}
		if age := q.OJS.Limits.DLQMaxAge; age > 0 {
			if err := tx.ForEachDeadLetterOldest(q.ID, func(d *segments.DeadLetter) (bool, error) {
				out = append(out, d.FailedAt+age)
				return false, nil
			}); err != nil {
				return err
			}
		}
		return tx.ForEachPartition(q.ID, "", func(p *segments.Partition) (bool, error) {
			return true, tx.ForEachGroup(p.ID, func(_ string, g *segments.Group) (bool, error) {
				if g.HasLease() {
					out = append(out, g.LeaseExpiry)
				}
				return true, nil
			})
		})
	})
	return out
}

// leaseTimes are the times at which the lease index's entries go stale.
func (w *sweepTwin) leaseTimes(grace int64) []int64 {
	var out []int64
	w.g.m.view(func(tx *segments.Tx) error {
		return tx.ForEachLease(func(lease [16]byte, pid uint64, group string, superseded int64) (bool, error) {
			if superseded != 0 { // rarer than live leases: weighed up
				out = append(out, superseded+grace, superseded+grace, superseded+grace)
			}
			g, err := tx.Group(pid, group)
			if g != nil && g.LeaseID == lease {
				out = append(out, g.LeaseExpiry+grace)
			}
			return true, err
		})
	})
	return out
}

// leaseFrom is where a probed lease sweep starts: the index's start, an
// entry's own id, or the id after it (as a previous sweep's Next is).
func (w *sweepTwin) leaseFrom() [16]byte {
	var ids [][16]byte
	w.g.m.view(func(tx *segments.Tx) error {
		return tx.ForEachLease(func(lease [16]byte, _ uint64, _ string, _ int64) (bool, error) {
			ids = append(ids, lease)
			return true, nil
		})
	})
	if len(ids) == 0 || w.g.pick(3) == 0 {
		return [16]byte{}
	}
	id := ids[w.g.pick(len(ids))]
	if w.g.pick(2) == 0 {
		return afterLease(id)
	}
	return id
}

// held pops ten partitions of a queue whose leases last an hour, each in a
// group of its own: the oldest ids of the lease index stay live for an
// hour, so a lease sweep that inspects only 8 of them finds nothing while
// newer short leases expire behind them.
func (w *sweepTwin) held() {
	g := w.g
	o := DefaultOptions(segments.OriginConfigure)
	o.LeaseTime = 3600
	g.commit(&Configure{Queue: "held", Options: o})
	for i := range 10 {
		part := fmt.Sprintf("h%d", i)
		g.commit(&Push{Items: []PushItem{{Queue: "held", Partition: part, TxID: g.txid(), Payload: []byte(`1`)}}})
		g.commit(&Lease{Scope: ScopeSpecific, Queue: "held", Partition: part, Group: fmt.Sprintf("hg%d", i),
			Batch: 1, MaxPartitions: 1, WindowBatch: 100})
	}
}

// ojsDel drives the OJS queue o.del through deletions that wait for a
// live lease and graceful drains that wait for depth 0.
func (w *sweepTwin) ojsDel() {
	g := w.g
	q := g.m.queue("o.del")
	if q == nil {
		g.commit(&OJSCreateQueue{Name: "o.del", Config: QueueConfig{VisibilityTimeout: i64(int64(5 + g.pick(30)))}})
		g.commit(&Push{Items: []PushItem{{Queue: "o.del", Partition: []string{"a", "b"}[g.pick(2)], TxID: g.txid(), Payload: []byte(`1`)}}})
		return
	}
	switch g.pick(5) {
	case 0:
		g.commit(&Push{Items: []PushItem{{Queue: "o.del", Partition: []string{"a", "b"}[g.pick(2)], TxID: g.txid(), Payload: []byte(`1`)}}})
	case 1, 2:
		r := g.commit(&Lease{Scope: ScopeWildcard, Queue: "o.del", Group: QueueMode, Batch: 2, MaxPartitions: 1, WindowBatch: 100})[0].(*LeaseResult)
		if r.Count() > 0 && g.pick(2) == 0 {
			g.commit(&Ack{Group: QueueMode, Items: ackAll(r, AckCompleted)})
		}
	case 3:
		g.commit(&OJSDeleteQueue{Name: "o.del", Strategy: []uint8{segments.DeletePurge, segments.DeleteMove, segments.DeleteDiscard}[g.pick(3)], Target: "other"})
	default:
		g.commit(&OJSUpdateQueue{Name: "o.del", State: ToDraining})
	}
}

// extra drives what the generator does not: dead-letter age caps (it sets
// only max_count), the OJS queue default, OJS deletions and drains, ids
// deleted inside their dedup window, and bigger steps of time so that
// rules and caps come due.
func (w *sweepTwin) extra() {
	g := w.g
	switch g.pick(7) {
	case 4, 5:
		w.ojsDel()
	case 6:
		// A deleted message's id, remembered for its dedup window.
		o := DefaultOptions(segments.OriginConfigure)
		o.DedupWindowSeconds = int64(1 + g.pick(60))
		g.commit(&Configure{Queue: "dd", Options: o})
		tx := g.txid()
		pr := g.commit(&Push{Items: []PushItem{{Queue: "dd", Partition: "p", TxID: tx, Payload: []byte(`1`)}}})[0].(*PushResult)
		g.commit(&DeleteMessage{Partition: pr.Items[0].PartitionID, TxID: tx})
	case 0:
		q := sweepDueQueues[g.pick(7)]
		if q == "" {
			q = "other"
		}
		cfg := QueueConfig{DLQEnabled: bptr(true)}
		if g.pick(2) == 0 {
			s := int64(1 + g.pick(60))
			cfg.DLQMaxAge = &Duration{Text: fmt.Sprintf("PT%dS", s), Micros: s * 1e6}
		}
		if g.pick(2) == 0 {
			cfg.DLQMaxCount = i64(int64(1 + g.pick(4)))
		}
		if g.pick(3) == 0 {
			cfg.CompletedTTL = &Duration{Text: "PT30S", Micros: 30e6}
		}
		g.commit(&OJSUpdateQueue{Name: q, Set: cfg})
	case 1:
		g.m.advance(time.Duration(10+g.pick(120)) * time.Second)
	case 2:
		g.commit(&OJSSetState{Name: DefaultQueue, EnsureOnly: true})
	default:
		// Dead letters: messages pushed, popped and acked to the
		// dead-letter queue, mostly of a queue with dead-letter caps.
		q := sweepDueQueues[g.pick(7)]
		var capped []string
		for _, name := range sweepDueQueues {
			if qr := g.m.queue(name); qr != nil && qr.OJS != nil && (qr.OJS.Limits.DLQMaxAge > 0 || qr.OJS.Limits.DLQMaxCount > 0) {
				capped = append(capped, name)
			}
		}
		if len(capped) > 0 && g.pick(4) != 0 {
			q = capped[g.pick(len(capped))]
		}
		g.commit(&Push{Items: []PushItem{{Queue: q, Partition: "dlq", TxID: g.txid(), Payload: []byte(`1`)}}})
		r := g.commit(&Lease{Scope: ScopeSpecific, Queue: q, Partition: "dlq", Group: QueueMode, Batch: uint32(1 + g.pick(3)),
			MaxPartitions: 1, WindowBatch: 100})[0].(*LeaseResult)
		if r.Count() > 0 {
			g.commit(&Ack{Group: r.Group, Items: ackAll(r, AckDLQ)})
		}
	}
}

func TestSweepDueMatchesApply(t *testing.T) {
	steps := 600
	if testing.Short() {
		steps = 150
	}
	total := map[string]*[2][2]int{}
	for _, seed := range []uint64{11, 12, 13, 14} {
		g := &generator{t: t, rng: newRand(seed), m: newMachine(t), rollbacks: true}
		g.rec = &recording{ref: g.m}
		w := &sweepTwin{t: t, g: g, b: openFSM(t, t.TempDir(), "n1"), stats: map[string]*[2][2]int{}}
		g.commit(&OJSSetState{Name: DefaultQueue, EnsureOnly: true})
		w.held()
		for i := 0; i < steps; i++ {
			if i == steps/2 {
				w.held() // again: newer lease ids behind what the first ones left
			}
			if g.pick(4) == 0 {
				w.extra()
			} else {
				g.step()
			}
			w.catchUp()
			for range 1 + g.pick(2) {
				w.probeOne()
			}
		}
		for k, s := range w.stats {
			if total[k] == nil {
				total[k] = &[2][2]int{}
			}
			for i := range 2 {
				for j := range 2 {
					total[k][i][j] += s[i][j]
				}
			}
		}
	}
	// The walk must have seen each check answer both ways, or it proved
	// little.
	for _, kind := range []string{"sweep", "ojs", "leases", "dedup"} {
		s := total[kind]
		if s == nil || s[1][1] == 0 || s[0][0] == 0 {
			t.Errorf("%s: the walk never saw it both due and not due: %v", kind, s)
			continue
		}
		t.Logf("%s: %d due, %d not due", kind, s[1][1], s[0][0])
	}
}

// An idle queue with every rule on, the OJS queue default with its
// completed retention and dead-letter caps, live and recently expired
// leases, dead letters under their caps and a deleted id inside its dedup
// window: no check is due, at the state's time or an hour's worth of
// ticks of a slow leader's clock; each becomes due when its time comes.
func TestSweepDueIdleState(t *testing.T) {
	m := newMachine(t)
	m.apply(&OJSSetState{Name: DefaultQueue, EnsureOnly: true})
	configureWith(m, "q", func(o *segments.Options) {
		o.RetentionEnabled, o.RetentionSeconds, o.CompletedRetentionSeconds = true, 3600, 600
		o.MaxWaitTimeSeconds, o.DedupWindowSeconds, o.LeaseTime = 7200, 900, 60
	})
	m.push(items("q", "p0", "a", "b")...)
	m.push(items("q", "p1", "c")...)
	m.mustPop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "p0", Batch: 1, MaxPartitions: 1}) // expires in 60 s
	pr := m.mustPop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "p1", Batch: 1, MaxPartitions: 1})
	m.ack("", ackAll(pr, AckCompleted)...) // consumed: the completed rule condemns it after 600 s
	m.ojsOK(&OJSCreateQueue{Name: "dl", Config: QueueConfig{DLQEnabled: bptr(true), DLQMaxCount: i64(3),
		DLQMaxAge: &Duration{Text: "PT1H", Micros: 3600e6}}})
	m.push(item("dl", "", "x", `1`))
	m.ack(QueueMode, ackAll(m.mustPop(wild("dl", 1)), AckDLQ)...)
	m.push(item("q", "p2", "gone", `1`))
	m.apply(&DeleteMessage{Partition: m.partition("q", "p2").UUID, TxID: "gone"})
	m.advance(2 * time.Minute) // the p0 lease expired a minute ago
	m.apply(noopSweep)         // the state's time follows

	f := m.f
	stateNow := m.now.UnixMicro()
	checks := func(now int64) map[string]bool {
		out := map[string]bool{}
		for _, q := range []string{"q", DefaultQueue, "dl"} {
			d, err := f.SweepDue(q, now)
			if err != nil {
				t.Fatal(err)
			}
			out["sweep "+q] = d
			if d, err = f.OJSSweepDue(q, now); err != nil {
				t.Fatal(err)
			}
			out["ojs "+q] = d
		}
		d, _, err := f.LeasesDue(now, (5 * time.Minute).Microseconds(), 1000, [16]byte{})
		if err != nil {
			t.Fatal(err)
		}
		out["leases"] = d
		if d, err = f.DeletedTxIDsDue(now); err != nil {
			t.Fatal(err)
		}
		out["dedup"] = d
		return out
	}
	for _, now := range []int64{stateNow, stateNow - time.Hour.Microseconds()} {
		for k, due := range checks(now) {
			if due {
				t.Errorf("%s due on an idle state at %+d µs from the state's time", k, now-stateNow)
			}
		}
	}
	// Each comes due: leases past the grace, the dedup window, the
	// completed rule, the dead-letter age, retention, maxWait.
	at := func(d time.Duration) map[string]bool { return checks(stateNow + d.Microseconds()) }
	for _, c := range []struct {
		after time.Duration
		key   string
	}{
		{4*time.Minute + time.Second, "leases"},  // expired at T0+60 s, grace 300 s; now T0+120 s
		{13*time.Minute + time.Second, "dedup"},  // window 900 s from T0
		{8*time.Minute + time.Second, "sweep q"}, // p1's consumed segment, completed rule 600 s
		{58*time.Minute + time.Second, "ojs dl"}, // dead-lettered at T0, max_age 1 h
	} {
		if got := at(c.after - 2*time.Second); got[c.key] {
			t.Errorf("%s due %v early", c.key, 2*time.Second)
		}
		if got := at(c.after); !got[c.key] {
			t.Errorf("%s not due %v after the idle state", c.key, c.after)
		}
	}
}

// A lease superseded by a later pop of its group stays indexed for the
// grace after its own expiry, as one that expired in place does
// (applyExpireLeases: stale once its expiry is at or before now - grace):
// the check flips at exactly that microsecond. (The walk rarely lands on
// it with no other stale entry in view.)
func TestSweepDueSupersededLeaseBoundary(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.LeaseTime = 10 })
	m.push(items("q", "p", "a")...)
	first := m.mustPop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "p", Batch: 1, MaxPartitions: 1})
	expiry := m.now.Add(10 * time.Second).UnixMicro()
	m.advance(11 * time.Second)
	second := m.mustPop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "p", Batch: 1, MaxPartitions: 1}) // supersedes the first, lives until +21 s
	if first.LeaseID == second.LeaseID {
		t.Fatal("the second pop kept the first lease")
	}
	grace := (30 * time.Second).Microseconds()
	for _, c := range []struct {
		at  int64
		due bool
	}{{expiry + grace - 1, false}, {expiry + grace, true}} {
		due, _, err := m.f.LeasesDue(c.at, grace, 1000, [16]byte{})
		if err != nil || due != c.due {
			t.Fatalf("at the superseded lease's expiry + grace %+d µs: due %v (%v), want %v", c.at-expiry-grace, due, err, c.due)
		}
	}
}
