package fsm

import (
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/crownmq/crown/segments"
)

// TestOJSPurgeBacklogWithSeveralGroups: a purge of the backlog removes, for
// every consumer group, what it has not consumed, except the batches leased
// now (ojs-queues.md 6.7: leased jobs are left to finish). Those batches are
// one log shared by the groups, so what lies between them is removed too:
// a group whose batch ends is not handed the messages after it that another
// group had already consumed.
//
// What storage cannot do, and the test pins: a message inside another
// group's live batch stays stored for that group's redelivery, so a group
// behind that batch still reads it once its own batch ends.
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
	if got := strings.Join(delivered(m.pop(specific("A", 10))), ","); got != "p/m4,p/m5,p/m6" {
		t.Fatalf("A was handed %q after its batch, want only C's live batch p/m4,p/m5,p/m6 (m3, consumed by C, and m7..m10 purged)", got)
	}
	m.ack("C", ackAll(c, AckCompleted)...)
	if r := m.pop(specific("C", 10)); r.Count() != 0 {
		t.Fatalf("C was handed %v after its batch", delivered(r))
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
		// Each group's batch ends; what it reads next is only what other
		// live batches hold past it.
		for g, b := range batches {
			m.ack(g, ackAll(b.res, AckCompleted)...)
			for _, d := range delivered(lease(g, n+1)) {
				off := offsetOf(t, d)
				if off <= b.last || !inBatch(off) {
					t.Fatalf("seed %d: group %s read %s after its batch ended at m%d (batches %v)", seed, g, d, b.last, batches)
				}
			}
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
