package fsm

import (
	"testing"
	"time"
)

func TestExtendEveryPartitionOfAPop(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "a", "a1")...)
	m.push(items("q", "b", "b1")...)
	m.push(items("q", "c", "c1")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 10, MaxPartitions: 2})
	other := m.mustPop(Lease{Queue: "q", Batch: 10}) // c, another lease
	m.advance(50 * time.Second)
	er := m.extend(r.LeaseID, 120)
	want := m.now.Add(120 * time.Second).UnixMicro()
	if !er.Success || er.Error != "" || er.ExpiresAt != want {
		t.Fatalf("extend %+v, want expiry %d", er, want)
	}
	for _, p := range r.Partitions {
		if g := m.group("q", p.Partition, QueueMode); g.LeaseExpiry != want || g.LeaseID != r.LeaseID {
			t.Fatalf("partition %s: %+v", p.Partition, g)
		}
	}
	if g := m.group("q", other.Partitions[0].Partition, QueueMode); g.LeaseExpiry != m.now.Add(10*time.Second).UnixMicro() {
		t.Fatalf("another lease was extended: %+v", g)
	}
	// The lease now outlives its original expiry.
	m.advance(100 * time.Second)
	if r2 := m.pop(Lease{Queue: "q", Batch: 10, MaxPartitions: 5}); r2.Count() != 1 || r2.Partitions[0].Partition != "c" {
		t.Fatalf("after the original expiry: %v", delivered(r2))
	}
}

func TestExtendNeverShortens(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1, LeaseSeconds: 600})
	expiry := m.group("q", "p", QueueMode).LeaseExpiry
	er := m.extend(r.LeaseID, 10)
	if !er.Success || er.ExpiresAt != expiry {
		t.Fatalf("extend %+v, want unchanged expiry %d", er, expiry)
	}
	if g := m.group("q", "p", QueueMode); g.LeaseExpiry != expiry {
		t.Fatalf("lease shortened to %d", g.LeaseExpiry)
	}
}

func TestExtendDefaultsToSixtySeconds(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1, LeaseSeconds: 5})
	for _, secs := range []int64{0, -3} {
		er := m.extend(r.LeaseID, secs)
		if !er.Success || er.ExpiresAt != m.now.Add(60*time.Second).UnixMicro() {
			t.Fatalf("extend(%d) %+v", secs, er)
		}
	}
}

func TestExtendChangesNothingElse(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 2})
	lp := r.Partitions[0]
	m.ack("", ackOf(lp, lp.Messages[0], r.LeaseID, AckCompleted))
	before := *m.group("q", "p", QueueMode)
	m.extend(r.LeaseID, 300)
	after := *m.group("q", "p", QueueMode)
	after.LeaseExpiry = before.LeaseExpiry
	if after != before {
		t.Fatalf("extend changed more than the expiry: %+v -> %+v", before, after)
	}
}

func TestExtendLeaseNotFound(t *testing.T) {
	m := newMachine(t)
	if er := m.extend([16]byte{1}, 60); er.Success || er.Error != ErrLeaseNotFound {
		t.Fatalf("never existed: %+v", er)
	}
	m.push(items("q", "p", "m1")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1})
	m.ack("", ackAll(r, AckCompleted)...)
	if er := m.extend(r.LeaseID, 60); er.Success || er.Error != ErrLeaseNotFound {
		t.Fatalf("after release by ack: %+v", er)
	}
	m.push(items("q", "p", "m2")...)
	for _, st := range []uint8{AckFailed, AckRetry} {
		r = m.mustPop(Lease{Queue: "q", Batch: 1})
		m.ack("", ackAll(r, st)...)
		if er := m.extend(r.LeaseID, 60); er.Success || er.Error != ErrLeaseNotFound {
			t.Fatalf("after release by status %d: %+v", st, er)
		}
	}
	// A lease superseded by a new pop after it expired is still an expired
	// lease (queen-api.md 4.14), not an unknown one, until the lease sweep
	// drops it after the same grace as a lease that expired in place.
	r = m.mustPop(Lease{Queue: "q", Batch: 1})
	m.advance(time.Minute)
	m.mustPop(Lease{Queue: "q", Batch: 1})
	if er := m.extend(r.LeaseID, 60); er.Success || er.Error != ErrLeaseExpired {
		t.Fatalf("after re-lease: %+v", er)
	}
	grace := (5 * time.Minute).Microseconds()
	m.apply(&ExpireLeases{Grace: grace, Max: 100})
	if er := m.extend(r.LeaseID, 60); er.Error != ErrLeaseExpired {
		t.Fatalf("after a sweep inside the grace: %+v", er)
	}
	m.advance(5 * time.Minute)
	m.apply(&ExpireLeases{Grace: grace, Max: 100})
	if er := m.extend(r.LeaseID, 60); er.Success || er.Error != ErrLeaseNotFound {
		t.Fatalf("after a sweep past the grace: %+v", er)
	}
	// autoAck pops hand out no lease.
	if er := m.extend([16]byte{}, 60); er.Success {
		t.Fatalf("zero lease id: %+v", er)
	}
}

func TestExtendLeaseAlreadyExpired(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1, LeaseSeconds: 30})
	m.advance(30 * time.Second)
	before := *m.group("q", "p", QueueMode)
	if er := m.extend(r.LeaseID, 60); er.Success || er.Error != ErrLeaseExpired {
		t.Fatalf("expired: %+v", er)
	}
	if g := m.group("q", "p", QueueMode); *g != before {
		t.Fatalf("extend of an expired lease changed state %+v -> %+v", before, *g)
	}
}
