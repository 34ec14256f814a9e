package fsm

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// TestOJSPurgeBacklogWithSeveralGroups: a purge of the backlog removes, for
// every consumer group, what it has not consumed, except the batches leased
// now (ojs-queues.md 6.7: leased jobs are left to finish). Those batches are
// one log shared by the groups, so what lies between them is removed too:
// a group whose batch ends is not handed the messages after it that another
// group had already consumed. A message inside another group's live batch
// stays stored for that group's redelivery, and a group behind that batch
// skips it once its own batch ends (Group.SkipFrom, SkipTo).
func TestOJSPurgeBacklogWithSeveralGroups(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10")...)
	specific := func(group string, batch uint32) Lease {
		return Lease{Scope: ScopeSpecific, Queue: "q", Partition: "p", Group: group, Batch: batch, MaxPartitions: 1}
	}
	a := m.pop(specific("A", 2)) // A leases m1, m2
	m.ack("C", ackAll(m.pop(specific("C", 3)), AckCompleted)...)
	c := m.pop(specific("C", 3))                                 // C leases m4..m6
	m.ack("B", ackAll(m.pop(specific("B", 1)), AckCompleted)...) // B consumed m1, holds no lease
	if got := strings.Join(delivered(a), ","); got != "p/m1,p/m2" {
		t.Fatalf("A leased %s", got)
	}
	if got := strings.Join(delivered(c), ","); got != "p/m4,p/m5,p/m6" {
		t.Fatalf("C leased %s", got)
	}

	m.ojsOK(&OJSPurgeQueue{Name: "q", States: PurgeBacklog})

	if r := m.pop(specific("B", 10)); r.Count() != 0 {
		t.Fatalf("B, which held no lease, was handed %v after the purge", delivered(r))
	}
	m.ack("A", ackAll(a, AckCompleted)...)
	if r := m.pop(specific("A", 10)); r.Count() != 0 {
		t.Fatalf("A was handed %v after its batch: m3..m10 were purged for it (m4..m6 stay only for C's live batch)", delivered(r))
	}
	m.ack("C", ackAll(c, AckCompleted)...)
	if r := m.pop(specific("C", 10)); r.Count() != 0 {
		t.Fatalf("C was handed %v after its batch", delivered(r))
	}
	// What is pushed after the purge reaches every group.
	m.push(items("q", "p", "m11")...)
	for _, g := range []string{"A", "B", "C"} {
		if got := strings.Join(delivered(m.pop(specific(g, 10))), ","); got != "p/m11" {
			t.Fatalf("group %s was handed %q after a push following the purge, want p/m11", g, got)
		}
	}
}

// TestOJSPurgeSkipSurvivesRedelivery: a group whose live batch sits before
// another group's when the backlog is purged keeps skipping the purged range
// however its own batch ends: redelivered after its lease expires (only its
// own messages come back, not the other group's batch behind them), then
// completed; a seek back in time reads up to the range and then past it; and
// the skip is written only into the records of the groups it concerns.
func TestOJSPurgeSkipSurvivesRedelivery(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8")...)
	specific := func(group string, batch uint32) Lease {
		return Lease{Scope: ScopeSpecific, Queue: "q", Partition: "p", Group: group, Batch: batch, MaxPartitions: 1, LeaseSeconds: 30}
	}
	if got := strings.Join(delivered(m.pop(specific("B", 2))), ","); got != "p/m1,p/m2" {
		t.Fatalf("B leased %s", got)
	}
	m.ack("A", ackAll(m.pop(specific("A", 4)), AckCompleted)...)
	a := m.pop(specific("A", 2)) // A leases m5, m6
	if got := strings.Join(delivered(a), ","); got != "p/m5,p/m6" {
		t.Fatalf("A leased %s", got)
	}
	m.ojsOK(&OJSPurgeQueue{Name: "q", States: PurgeBacklog})
	if g := m.group("q", "p", "B"); g.SkipFrom != 3 || g.SkipTo != 9 {
		t.Fatalf("B's record after the purge skips [%d, %d), want [3, 9)", g.SkipFrom, g.SkipTo)
	}
	if g := m.group("q", "p", "A"); g.SkipFrom != 7 || g.SkipTo != 9 {
		t.Fatalf("A's record after the purge skips [%d, %d), want [7, 9)", g.SkipFrom, g.SkipTo)
	}

	// B's lag counts its own batch, not A's behind it; nothing is
	// available to any group (both batches are leased), so there is no
	// oldest available message.
	details, err := m.f.ConsumerGroup("B", m.now.UnixMicro())
	if err != nil || len(details) != 1 || len(details[0].Partitions) != 1 {
		t.Fatalf("group B: %+v %v", details, err)
	}
	if lag := details[0].Partitions[0].OffsetLag; lag != 2 {
		t.Fatalf("B's offset lag after the purge is %d, want 2 (m1, m2)", lag)
	}
	v, err := m.f.OJSQueue("q", m.now.UnixMicro())
	if err != nil || v.OldestAt != 0 {
		t.Fatalf("queue view after the purge: oldest available at %d (%v), want none", v.OldestAt, err)
	}

	m.advance(31 * time.Second) // B's lease expires
	again := m.pop(specific("B", 10))
	if got := strings.Join(delivered(again), ","); got != "p/m1,p/m2" {
		t.Fatalf("B's redelivery was %q, want its own batch p/m1,p/m2 and not A's m5,m6 behind it", got)
	}
	m.ack("B", ackAll(again, AckCompleted)...)
	if g := m.group("q", "p", "B"); g.Next != 9 || g.HasSkip() {
		t.Fatalf("B after its batch: next %d, skip [%d, %d); want next 9 and no skip", g.Next, g.SkipFrom, g.SkipTo)
	}
	if r := m.pop(specific("B", 10)); r.Count() != 0 {
		t.Fatalf("B was handed %v after its redelivered batch", delivered(r))
	}
	// A still gets its own batch back and then nothing.
	m.ack("A", ackAll(a, AckRetry)...)
	if got := strings.Join(delivered(m.pop(specific("A", 10))), ","); got != "p/m5,p/m6" {
		t.Fatalf("A's redelivery was %q, want p/m5,p/m6", got)
	}
	m.push(items("q", "p", "m9")...)
	m.apply(&Seek{Queue: "q", Group: "B", Timestamp: 0})
	var got []string
	for {
		r := m.pop(specific("B", 10))
		if r.Count() == 0 {
			break
		}
		got = append(got, delivered(r)...)
		m.ack("B", ackAll(r, AckCompleted)...)
	}
	// A seek passes no skip: the range went with B's batch. m1, m2 were
	// consumed and stay stored; m5, m6 are A's batch, which B never skips
	// again once its position went past the range.
	if strings.Join(got, ",") != "p/m1,p/m2,p/m5,p/m6,p/m9" {
		t.Fatalf("B after a seek to the start read %v", got)
	}
}

// TestOJSPurgeSkipInQueueModeViews: with a queue-mode cursor the Queen
// statuses follow it (queen-api.md 3.12), and a message its skip range
// covers is completed for it: after a purge beside a named group's batch
// and the end of that batch, the named group's batch is no longer pending
// in the stats, the listings or the message's own view.
func TestOJSPurgeSkipInQueueModeViews(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8")...)
	specific := func(group string, batch uint32) Lease {
		return Lease{Scope: ScopeSpecific, Queue: "q", Partition: "p", Group: group, Batch: batch, MaxPartitions: 1, LeaseSeconds: 30}
	}
	qm := m.pop(specific("", 2)) // the queue-mode cursor leases m1, m2
	m.ack("g", ackAll(m.pop(specific("g", 4)), AckCompleted)...)
	g := m.pop(specific("g", 2)) // g leases m5, m6
	if got := strings.Join(delivered(qm), ",") + " " + strings.Join(delivered(g), ","); got != "p/m1,p/m2 p/m5,p/m6" {
		t.Fatalf("setup: leased %s", got)
	}
	m.ojsOK(&OJSPurgeQueue{Name: "q", States: PurgeBacklog})
	m.ack("g", ackAll(g, AckCompleted)...)

	// Stored: m1, m2 (the queue-mode batch) and m5, m6 (g's, kept while
	// it lasted); the queue-mode cursor's range skips m5, m6.
	qv, err := m.f.QueueView("q", m.now.UnixMicro(), false)
	if err != nil || qv == nil {
		t.Fatalf("queue view %v %v", qv, err)
	}
	if st := qv.Stats; st.Total != 4 || st.Completed != 2 || st.Processing != 2 || st.Pending != 0 {
		t.Fatalf("stats %+v, want 4 stored: m5, m6 completed, m1, m2 processing, none pending", st)
	}
	for status, want := range map[string]string{StatusCompleted: "m6 m5", StatusProcessing: "m2 m1", StatusPending: ""} {
		wantListed(t, status, listedTx(m.list(MessageQuery{Queue: "q", Status: status})), want)
	}
	v, err := m.f.OJSQueue("q", m.now.UnixMicro())
	if err != nil || v.Depth != 2 || v.Active != 2 || v.Available != 0 {
		t.Fatalf("OJS view %+v %v, want depth 2, all active", v, err)
	}
	d, err := m.f.Message(m.partition("q", "p").UUID, "m5", m.now.UnixMicro())
	if err != nil || d == nil {
		t.Fatalf("message m5: %v %v", d, err)
	}
	if d.Status != StatusCompleted || len(d.Groups) != 2 || !d.Groups[0].Consumed || !d.Groups[1].Consumed {
		t.Fatalf("m5: status %q, groups %+v; want completed, passed by both", d.Status, d.Groups)
	}
}

// TestOJSIdleBacklogModel drives random consumer groups over a partition of
// several segments (some groups with a batch leased now, some without),
// then purges the backlog, or deletes the queue with a move while batches
// are active, and checks against a model of the rule: a message goes iff a
// group would read it after the purge (past the end of a live batch) and it
// is in no live batch; a move takes exactly what a purge removes, in order.
func TestOJSIdleBacklogModel(t *testing.T) {
	for seed := int64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewSource(seed))
		move := seed%2 == 0
		m := newMachine(t)
		n := 0
		for range 1 + rng.Intn(5) { // each push is a segment of its own
			var txs []string
			for range 1 + rng.Intn(6) {
				n++
				txs = append(txs, fmt.Sprintf("m%d", n))
			}
			m.push(items("q", "p", txs...)...)
		}
		lease := func(group string, batch int) *LeaseResult {
			return m.pop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "p", Group: group, Batch: uint32(batch), MaxPartitions: 1})
		}
		type live struct {
			first, last int
			res         *LeaseResult
		}
		batches := map[string]live{}
		slowest := 0 // the lowest cursor of a group with a record, 0: none
		groups := 1 + rng.Intn(4)
		for gi := range groups {
			g := fmt.Sprintf("g%d", gi)
			next := 0
			if k := rng.Intn(n + 1); k > 0 {
				r := lease(g, k)
				d := delivered(r)
				next = offsetOf(t, d[len(d)-1]) + 1
				m.ack(g, ackAll(r, AckCompleted)...)
			}
			if rng.Intn(3) > 0 {
				r := lease(g, 1+rng.Intn(4))
				if d := delivered(r); len(d) > 0 {
					batches[g] = live{offsetOf(t, d[0]), offsetOf(t, d[len(d)-1]), r}
					next = offsetOf(t, d[0])
				}
			}
			if next > 0 && (slowest == 0 || next < slowest) {
				slowest = next
			}
		}
		stored := func() map[int]bool {
			out := map[int]bool{}
			for _, tx := range m.stored("q", "p") {
				out[offsetOf(t, "p/"+tx)] = true
			}
			return out
		}
		before := stored()
		inBatch := func(off int) bool {
			for _, b := range batches {
				if off >= b.first && off <= b.last {
					return true
				}
			}
			return false
		}
		goes := func(off int) bool {
			if len(batches) == 0 {
				return off >= slowest // every group moves to the end
			}
			read := false
			for _, b := range batches {
				read = read || off > b.last
			}
			return read && !inBatch(off)
		}
		var wantGone []string
		for off := 1; off <= n; off++ {
			if before[off] && goes(off) {
				wantGone = append(wantGone, fmt.Sprintf("m%d", off))
			}
		}
		if move {
			m.ojsOK(&OJSDeleteQueue{Name: "q", Strategy: segments.DeleteMove, Target: "t"})
			// With no live batch the move completes at once and takes the
			// whole backlog, which is what goes() says of every offset then.
			if got := m.stored("t", "p"); strings.Join(got, ",") != strings.Join(wantGone, ",") {
				t.Fatalf("seed %d: the move took %v, want %v (batches %v)", seed, got, wantGone, batches)
			}
		} else {
			m.ojsOK(&OJSPurgeQueue{Name: "q", States: PurgeBacklog})
		}
		if m.queue("q") == nil {
			continue // no live batch: the move completed at once
		}
		after := stored()
		for off := 1; off <= n; off++ {
			if want := before[off] && !goes(off); after[off] != want {
				t.Fatalf("seed %d: after the purge m%d stored %v, want %v (batches %v, stored before %v)",
					seed, off, after[off], want, batches, before)
			}
		}
		m.view(func(tx *segments.Tx) error {
			if err := checkInvariants(tx); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			return nil
		})
		// Each group's batch ends, in an order of the seed's; it reads
		// nothing of what was stored before the purge, other live batches
		// included, and the views count as consumed by it everything but
		// its batch while the batch lasts.
		order := make([]string, 0, len(batches))
		for g := range batches {
			order = append(order, g)
		}
		slices.Sort(order)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		left := maps.Clone(batches)
		inLeft := func(off int) (holders int) {
			for _, b := range left {
				if off >= b.first && off <= b.last {
					holders++
				}
			}
			return holders
		}
		checkViews := func(when string) {
			t.Helper()
			if move && len(left) == 0 && m.queue("q") == nil {
				return // the last batch ended: the deletion completed
			}
			var pending, completed []string
			for off := 1; off <= n; off++ {
				switch {
				case !after[off]:
				case inLeft(off) > 0:
					pending = append(pending, fmt.Sprintf("m%d", off))
				default:
					completed = append(completed, fmt.Sprintf("m%d", off))
				}
			}
			v, err := m.f.OJSQueue("q", m.now.UnixMicro())
			if err != nil || v == nil {
				t.Fatalf("seed %d %s: OJS view %v %v", seed, when, v, err)
			}
			if v.Depth != uint64(len(pending)) || v.Available != 0 || v.Active != uint64(len(pending)) {
				t.Fatalf("seed %d %s: OJS depth %d, available %d, active %d; want %d (every message left is in a live batch: %v), 0, %d",
					seed, when, v.Depth, v.Available, v.Active, len(pending), pending, len(pending))
			}
			qv, err := m.f.QueueView("q", m.now.UnixMicro(), false)
			if err != nil || qv == nil {
				t.Fatalf("seed %d %s: queue view %v %v", seed, when, qv, err)
			}
			if qv.Stats.Pending != uint64(len(pending)) || qv.Stats.Completed != uint64(len(completed)) {
				t.Fatalf("seed %d %s: queue stats %+v, want %d pending %v and %d completed", seed, when, qv.Stats,
					len(pending), pending, len(completed))
			}
			for status, want := range map[string][]string{StatusPending: pending, StatusCompleted: completed} {
				l := m.list(MessageQuery{Queue: "q", Status: status})
				var got []string
				for _, s := range l.Messages {
					got = append(got, s.TxID)
					if held := inLeft(offsetOf(t, "p/"+s.TxID)); s.ConsumedBy != s.TotalGroups-held {
						t.Fatalf("seed %d %s: %s consumed by %d of %d groups, want all but the %d holding it",
							seed, when, s.TxID, s.ConsumedBy, s.TotalGroups, held)
					}
				}
				slices.SortFunc(got, func(a, b string) int { return offsetOf(t, "p/"+a) - offsetOf(t, "p/"+b) })
				if strings.Join(got, ",") != strings.Join(want, ",") {
					t.Fatalf("seed %d %s: listed %s %v, want %v", seed, when, status, got, want)
				}
			}
		}
		checkViews("after the purge")
		for _, g := range order {
			b := batches[g]
			m.ack(g, ackAll(b.res, AckCompleted)...)
			delete(left, g)
			if d := delivered(lease(g, n+1)); len(d) > 0 {
				t.Fatalf("seed %d: group %s read %v after its batch ended at m%d (batches %v)", seed, g, d, b.last, batches)
			}
			checkViews("after " + g + "'s batch ended")
		}
	}
}

// offsetOf reads the offset out of a delivered "p/mN" (the harness pushed
// mN at offset N).
func offsetOf(t *testing.T, d string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(d, "p/m"))
	if err != nil {
		t.Fatalf("not a p/mN: %q", d)
	}
	return n
}
