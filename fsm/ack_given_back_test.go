package fsm

import (
	"slices"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// queen-api.md 4.10 step 2: an ack carrying a lease id is accepted only
// while that lease holds the partition for the group. When a failed item
// of a request gives the delivery back, a later completed item of the same
// lease must not move the position past the failed message, which would
// then be neither redelivered nor dead-lettered.
func TestAckCompletedAfterFailedReleaseInOneRequestKeepsFailedMessage(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 3})
	lp := r.Partitions[0]
	ar := m.ack("",
		ackOf(lp, lp.Messages[0], r.LeaseID, AckCompleted),
		ackOf(lp, lp.Messages[1], r.LeaseID, AckFailed),
		ackOf(lp, lp.Messages[2], r.LeaseID, AckCompleted),
	)
	if it := ar.Items[1]; !it.Success || !it.LeaseReleased {
		t.Fatalf("failed item %+v, want success and the lease released", it)
	}
	if it := ar.Items[2]; it.Success || it.Error != ErrInvalidLease {
		t.Errorf("completed item after the release: %+v, want %q", it, ErrInvalidLease)
	}
	r2 := m.mustPop(Lease{Queue: "q", Batch: 3})
	if got := txids(r2); !slices.Equal(got, []string{"m2", "m3"}) || r2.Partitions[0].Messages[0].RetryCount != 1 {
		t.Fatalf("redelivery %v %+v, want [m2 m3] with retryCount 1", got, r2.Partitions[0].Messages)
	}
}

// The same after a retry item, which gives the delivery back without a
// charge: a dlq item of that lease later in the request must not
// dead-letter m2 and skip m1, and a failed item changes nothing, even
// with the budget exhausted.
func TestAckAfterRetryReleaseInOneRequest(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 0 })
	m.push(items("q", "p", "m1", "m2", "m3")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 3})
	lp := r.Partitions[0]
	ar := m.ack("",
		ackOf(lp, lp.Messages[0], r.LeaseID, AckRetry),
		ackOf(lp, lp.Messages[1], r.LeaseID, AckDLQ),
		ackOf(lp, lp.Messages[2], r.LeaseID, AckFailed),
	)
	if it := ar.Items[1]; it.Success || it.DLQ || it.Error != ErrInvalidLease {
		t.Errorf("dlq item after the release: %+v, want %q", it, ErrInvalidLease)
	}
	if it := ar.Items[2]; !it.Success || it.DLQ || it.Dropped {
		t.Errorf("failed item after the release: %+v, want a successful no-op", it)
	}
	if dl := m.deadLetters("q"); len(dl) != 0 {
		t.Errorf("%d dead letters, want 0", len(dl))
	}
	if got := txids(m.mustPop(Lease{Queue: "q", Batch: 3})); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("redelivery %v, want [m1 m2 m3]", got)
	}
}

// leaseReleased is true only for the item that gave a live lease back
// (README, "Where Crown differs"): not for a second retry or failed item of
// the same delivery, nor for one without a lease id while no lease is live.
func TestLeaseReleasedOnlyForTheItemThatGaveTheLeaseBack(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.LeaseTime = 10 })
	m.push(items("q", "p", "m1", "m2")...)
	for _, status := range []uint8{AckRetry, AckFailed} {
		r := m.mustPop(Lease{Queue: "q", Batch: 2})
		lp := r.Partitions[0]
		ar := m.ack("", ackOf(lp, lp.Messages[0], r.LeaseID, status), ackOf(lp, lp.Messages[1], r.LeaseID, status))
		if a, b := ar.Items[0], ar.Items[1]; !a.Success || !a.LeaseReleased || !b.Success || b.LeaseReleased {
			t.Fatalf("status %d: %+v, %+v; want the first item alone to release the lease", status, a, b)
		}
	}
	r := m.mustPop(Lease{Queue: "q", Batch: 2})
	lp := r.Partitions[0]
	m.advance(11 * time.Second) // the lease expired
	before := *m.group("q", "p", QueueMode)
	ar := m.ack("", ackTx(lp.PartitionID, "m1", [16]byte{}, AckRetry), ackTx(lp.PartitionID, "m2", [16]byte{}, AckFailed))
	for _, it := range ar.Items {
		if !it.Success || it.LeaseReleased || it.Error != "" {
			t.Fatalf("without a lease id after the expiry: %+v", it)
		}
	}
	if g := m.group("q", "p", QueueMode); *g != before {
		t.Fatalf("the items changed the group: %+v -> %+v", before, *g)
	}
	if it := m.ack("", ackOf(lp, lp.Messages[0], r.LeaseID, AckRetry)).Items[0]; it.Success || it.Error != ErrInvalidLease {
		t.Fatalf("with the expired lease's id: %+v, want %q", it, ErrInvalidLease)
	}
}
