package fsm

import (
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// queen-api.md 4.14: "an expired lease reports `Lease already expired`, a
// lease that was released [...] or never existed reports `Lease not
// found`", and maintenance/DESIGN.md: ExpireLeases "only clears records
// expired more than 5 minutes ago, so an extension still answers `Lease
// already expired` for a while". A maxWait (or retention) sweep that
// deleted every message of a batch whose lease had already expired
// unindexed the lease outright, so an extension a moment after the expiry
// answered "Lease not found", as for a lease that never existed. The sweep
// keeps it indexed as superseded at its expiry: the extension says it
// expired, and ExpireLeases drops it after the grace as for any other.
func TestSweepKeepsExpiredLeaseAnsweringExpired(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.MaxWaitTimeSeconds = 60 })
	m.push(items("q", "p", "a")...)
	expired := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 1, LeaseSeconds: 10})
	m.push(items("q", "p2", "b")...)
	live := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 1, LeaseSeconds: 3600})
	m.advance(61 * time.Second) // both batches past maxWait; the first lease expired 51 s ago
	if segs, _ := swept(m.sweep("q", 10)); segs != 2 {
		t.Fatalf("swept %d segments", segs)
	}
	for _, p := range []string{"p", "p2"} {
		if g := m.group("q", p, "g"); g.HasBatch() || g.HasLease() {
			t.Fatalf("%s: batch not ended %+v", p, g)
		}
	}
	if r := m.extend(expired.LeaseID, 30); r.Success || r.Error != ErrLeaseExpired {
		t.Fatalf("extension of the expired lease %+v, want %q", r, ErrLeaseExpired)
	}
	// The live lease's batch is gone: the lease ended with it.
	if r := m.extend(live.LeaseID, 30); r.Success || r.Error != ErrLeaseNotFound {
		t.Fatalf("extension of the ended live lease %+v, want %q", r, ErrLeaseNotFound)
	}
	// After the grace the lease sweep forgets it.
	grace := int64(5 * time.Minute / time.Microsecond)
	m.advance(5 * time.Minute)
	m.apply(&ExpireLeases{Grace: grace, Max: 10})
	if r := m.extend(expired.LeaseID, 30); r.Error != ErrLeaseNotFound {
		t.Fatalf("extension after the grace %+v", r)
	}
	if n := m.leaseEntries(); n != 0 {
		t.Fatalf("%d lease index entries left", n)
	}
}

// leaseEntries counts the lease index's entries.
func (m *machine) leaseEntries() int {
	m.t.Helper()
	n := 0
	m.view(func(tx *segments.Tx) error {
		return tx.ForEachLease(func([16]byte, uint64, string, int64) (bool, error) {
			n++
			return true, nil
		})
	})
	return n
}

// The same for a message DELETE of the last message of a batch whose lease
// has expired: the extension says the lease expired, not that it never
// existed; a live lease's batch ended by a DELETE takes its lease along.
func TestDeleteMessageKeepsExpiredLeaseAnsweringExpired(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "a")...)
	m.push(items("q", "p2", "b")...)
	expired := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 1, LeaseSeconds: 10})
	live := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 1, LeaseSeconds: 3600})
	m.advance(11 * time.Second)
	m.deleteMessage(m.partition("q", "p").UUID, "a")
	m.deleteMessage(m.partition("q", "p2").UUID, "b")
	if r := m.extend(expired.LeaseID, 30); r.Success || r.Error != ErrLeaseExpired {
		t.Fatalf("extension of the expired lease %+v, want %q", r, ErrLeaseExpired)
	}
	if r := m.extend(live.LeaseID, 30); r.Success || r.Error != ErrLeaseNotFound {
		t.Fatalf("extension of the ended live lease %+v, want %q", r, ErrLeaseNotFound)
	}
}
