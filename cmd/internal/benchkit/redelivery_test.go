package benchkit

import (
	"context"
	"sync"
	"testing"
	"time"
)

// leaseBroker plays queen-api.md 4.5's example: consumer A pops a batch under
// lease L1 and is slow to ack; L1 expires; consumer B pops the same messages
// under L2 and acks them; A's late ack carrying L1 is rejected ("Invalid or
// expired lease").
type leaseBroker struct {
	mu         sync.Mutex
	msgs       []string
	pops       int           // pops that delivered
	ackStarted chan struct{} // A's ack is in flight (its lease expires meanwhile)
	bAcked     chan struct{} // B's ack succeeded
}

type leaseHandle struct{ lease int }

func (b *leaseBroker) Producer(int) (Producer, error)      { return leaseProducer{b}, nil }
func (b *leaseBroker) Consumer(int, int) (Consumer, error) { return leaseConsumer{b}, nil }

type leaseProducer struct{ b *leaseBroker }

func (leaseProducer) Close() {}
func (p leaseProducer) Push(_ context.Context, items []Item) (int, error) {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	for _, it := range items {
		p.b.msgs = append(p.b.msgs, it.TxnID)
	}
	return 0, nil
}

type leaseConsumer struct{ b *leaseBroker }

func (leaseConsumer) Close() {}

func (c leaseConsumer) Pop(ctx context.Context) ([]Delivery, error) {
	b := c.b
	b.mu.Lock()
	lease := 0
	switch {
	case b.pops == 0 && len(b.msgs) > 0:
		lease = 1 // A
	case b.pops == 1:
		select {
		case <-b.ackStarted:
			lease = 2 // B, after L1 expired
		default:
		}
	}
	var out []Delivery
	if lease > 0 {
		b.pops++
		msgs := b.msgs
		if lease == 1 {
			msgs = msgs[:5] // A takes the first half; B later gets them again and the rest
		}
		for _, id := range msgs {
			out = append(out, Delivery{TxnID: id, Bytes: 10, Handle: leaseHandle{lease}})
		}
	}
	b.mu.Unlock()
	if lease == 0 {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	return out, nil
}

func (c leaseConsumer) Ack(ctx context.Context, ds []Delivery) ([]bool, error) {
	b := c.b
	if ds[0].Handle.(leaseHandle).lease == 2 {
		close(b.bAcked)
		return nil, nil
	}
	close(b.ackStarted)
	select { // A's ack is answered after B's: L1 is no longer live
	case <-b.bAcked:
	case <-time.After(5 * time.Second):
	}
	failed := make([]bool, len(ds))
	for i := range failed {
		failed[i] = true // "Invalid or expired lease"
	}
	return failed, nil
}

// TestRunLeaseExpiryIsRedelivery: a message delivered again because the
// first delivery's lease expired, whose first ack is then rejected, was
// acknowledged exactly once: an at-least-once redelivery, not a duplicate,
// and acknowledged (the late refusal does not undo the second ack).
//
// queen-api.md 4.5: "`expiresAt` passes | Expired: P is eligible again for G"
// and "B pops with batch=10: it gets m3, m4, m5 under a new lease L2. A's late
// ack of m3 carrying leaseId: L1 is rejected (Invalid or expired lease)";
// 4.19: "at-least-once with explicit acks (a message is redelivered until an
// ack resolves it)"; bench run --help: "redelivered (again after the previous
// delivery's ack failed, as when its lease expired before the ack:
// at-least-once)".
func TestRunLeaseExpiryIsRedelivery(t *testing.T) {
	c := testConfig(ModeBoth, 10, 1, 1)
	c.PushBatch, c.Consumers, c.IdleTimeout = 5, 2, 300*time.Millisecond
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	b := &leaseBroker{ackStarted: make(chan struct{}), bAcked: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var counters Counters
	rep := Run(ctx, c, b, &counters)
	v := rep.Verification[0]
	if b.pops != 2 {
		t.Fatalf("scenario did not play out: %d delivering pops", b.pops)
	}
	if !rep.OK || v.Unique != 10 || v.Duplicates != 0 || v.Redelivered != 5 || v.Unacked != 0 {
		t.Fatalf("lease expired, first ack rejected, second ack applied: ok %v, verification %+v; want unique 10, duplicates 0, redelivered 5, unacked 0, ok",
			rep.OK, v)
	}
}

// delivery is one step of TestTrackerOverlappingDeliveries: deliver (in a
// batch of its own) or answer the ack of the delivery numbered ack.
type delivery struct {
	deliver bool
	ack     int
	failed  bool
}

// TestTrackerOverlappingDeliveries: a delivery made while the previous
// delivery's ack is pending is settled by that ack, whatever order the acks
// come back in: refused (the lease had expired) makes it a redelivery,
// applied (the lease was live) a duplicate, and unanswered when the run ends
// a duplicate (nothing excused it). An ack that succeeded is final.
func TestTrackerOverlappingDeliveries(t *testing.T) {
	d := delivery{deliver: true}
	ok := func(n int) delivery { return delivery{ack: n} }
	fail := func(n int) delivery { return delivery{ack: n, failed: true} }
	for _, tc := range []struct {
		name                string
		steps               []delivery
		dupes, redel, unack int64
	}{
		{"queen-api 4.5: later ack first", []delivery{d, d, ok(1), fail(0)}, 0, 1, 0},
		{"first ack refused first", []delivery{d, d, fail(0), ok(1)}, 0, 1, 0},
		{"both acks applied", []delivery{d, d, ok(1), ok(0)}, 1, 0, 0},
		{"first applied, second refused", []delivery{d, d, ok(0), fail(1)}, 1, 0, 0},
		{"both refused: expected again", []delivery{d, d, fail(1), fail(0)}, 0, 1, 1},
		{"both refused, then delivered", []delivery{d, d, fail(1), fail(0), d, ok(2)}, 0, 2, 0},
		{"two leases expired", []delivery{d, d, d, ok(2), fail(1), fail(0)}, 0, 2, 0},
		{"second's lease expired before the first ack", []delivery{d, d, fail(1), d, fail(0), ok(2)}, 0, 2, 0},
		{"after an applied ack", []delivery{d, d, ok(1), d, fail(0), fail(2)}, 1, 1, 0},
		{"first ack never answered", []delivery{d, d, ok(1)}, 1, 0, 0},
		{"no ack answered", []delivery{d, d}, 1, 0, 1},
		{"sequential", []delivery{d, fail(0), d, ok(1)}, 0, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig(ModeBoth, 1, 1, 1)
			tr := NewTracker(c)
			tr.Attempted(0, 1)
			tr.Confirmed(0, 1)
			var msgs [][]Msg
			for _, s := range tc.steps {
				if s.deliver {
					msgs = append(msgs, tr.Delivered(0, ids(c, 0, 0)))
					continue
				}
				tr.Acked(0, msgs[s.ack], []bool{s.failed})
			}
			r := tr.Results(groupName)[0]
			want := GroupResult{Group: "g0", Expected: 1, Deliveries: int64(len(msgs)), Unique: 1,
				Duplicates: tc.dupes, Redelivered: tc.redel, Unacked: tc.unack, OK: tc.dupes == 0}
			if r != want {
				t.Errorf("result\n %+v\nwant\n %+v", r, want)
			}
		})
	}
}
