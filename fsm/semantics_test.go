package fsm

import (
	"slices"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// Tests of retry charging, deduplication across deletions and cumulative
// acks under a live lease, from a review of section 4 of queen-api.md.

// queen-api.md 4.10 "One charge per delivery, not per message": a batch
// reported failed item by item in one request is charged once; "the others
// find no live lease and change nothing". 4.11: a message that always fails
// is delivered retryLimit+1 times. Here the charge that brings the counter
// to the limit must not dead-letter the rest of the batch (nor skip m1).
func TestAckFailedBatchChargesOnceAtTheLimit(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 1 })
	m.push(items("q", "p", "m1", "m2", "m3")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 3})
	ar := m.ack("", ackAll(r, AckFailed)...)
	for i, it := range ar.Items {
		if !it.Success || it.DLQ || it.Dropped {
			t.Errorf("item %d of the first failed delivery: %+v (want success, no dlq)", i, it)
		}
	}
	if n := len(m.deadLetters("q")); n != 0 {
		t.Errorf("%d dead letters after the first failed delivery with retryLimit 1, want 0", n)
	}
	// Second delivery: the whole batch again, retryCount 1.
	r2 := m.pop(Lease{Queue: "q", Batch: 3})
	if got := txids(r2); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("second delivery %v, want [m1 m2 m3]", got)
	}
}

// queen-api.md 4.13: "Window: dedupWindowSeconds (default 3600) after the
// original push. Inside the window a repeated id is a duplicate";
// queue-options.md dedupWindowSeconds: the dedup record is purged on
// GREATEST(dedupWindowSeconds, completedRetentionSeconds, 900 s), not when
// retention deletes the message. A producer retry that arrives after a
// retention sweep but inside the window must still be a duplicate.
func TestDedupSurvivesRetentionSweep(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.RetentionSeconds = true, 10 })
	first := m.push(items("q", "p", "t1")...)
	m.advance(20 * time.Second)
	if r := m.sweep("q", 100); r.Messages[RuleRetention] != 1 {
		t.Fatalf("sweep %+v", r)
	}
	again := m.push(items("q", "p", "t1")...)
	if again.Items[0].Status != PushDuplicate {
		t.Fatalf("re-push of t1 20 s after the original (dedup window 3600 s), after retention deleted it: status %d, want duplicate (%d)",
			again.Items[0].Status, PushDuplicate)
	}
	if again.Items[0].MessageID != first.Items[0].MessageID {
		t.Errorf("duplicate points at %x, want the original %x", again.Items[0].MessageID, first.Items[0].MessageID)
	}
}

// Same with maxWaitTimeSeconds, which ignores retentionEnabled.
func TestDedupSurvivesMaxWaitSweep(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.MaxWaitTimeSeconds = 10 })
	m.push(items("q", "p", "t1")...)
	m.advance(20 * time.Second)
	if r := m.sweep("q", 100); r.Messages[RuleMaxWait] != 1 {
		t.Fatalf("sweep %+v", r)
	}
	if again := m.push(items("q", "p", "t1")...); again.Items[0].Status != PushDuplicate {
		t.Fatalf("re-push inside the dedup window after maxWait eviction: status %d, want duplicate", again.Items[0].Status)
	}
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); len(got) != 0 {
		t.Fatalf("evicted message delivered again as a new one: %v", got)
	}
}

// The same with default options (retryLimit 3, push-created queue): the
// third failed delivery of a two-message batch must only charge the
// counter (to 3); the fourth delivery's failures dead-letter both messages
// (queen-api.md 4.11 "delivered N + 1 times", section 7 steps 3-5).
func TestAckFailedBatchDefaultRetryLimit(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2")...)
	for d := 1; d <= 3; d++ {
		r := m.mustPop(Lease{Queue: "q", Batch: 2})
		if got := txids(r); !slices.Equal(got, []string{"m1", "m2"}) {
			t.Fatalf("delivery %d: %v, want [m1 m2]", d, got)
		}
		for i, it := range m.ack("", ackAll(r, AckFailed)...).Items {
			if it.DLQ || it.Dropped {
				t.Errorf("delivery %d, item %d: dead-lettered before the budget was exhausted: %+v", d, i, it)
			}
		}
	}
	if dl := m.deadLetters("q"); len(dl) != 0 {
		t.Fatalf("after 3 failed deliveries (retryLimit 3): %d dead letters, want 0 (the 4th delivery dead-letters)", len(dl))
	}
	r := m.pop(Lease{Queue: "q", Batch: 2})
	if got := txids(r); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("4th delivery %v, want [m1 m2]", got)
	}
}

// queen-api.md 4.12: an ack is unresolvable only "when the partition id is
// not a known partition ..., when the partition holds no message with that
// transaction id". 4.10: with the live lease, `completed` "moves to m if m is
// after it (everything up to m counts as consumed)" and the lease ends once
// the position reaches its last message. An ack naming a stored message
// after the batch, under the live lease, is neither unresolvable nor a no-op.
func TestAckUnderLiveLeaseOfStoredMessageAfterBatch(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1}) // m1 under lease L
	pid := r.Partitions[0].PartitionID
	ar := m.ack("", ackTx(pid, "m2", r.LeaseID, AckCompleted))
	if it := ar.Items[0]; !it.Success || it.Error != "" {
		t.Fatalf("completed ack of stored message m2 under the live lease: %+v, want success", it)
	}
	if g := m.group("q", "p", QueueMode); g.Next != 3 || g.HasLease() {
		t.Fatalf("group %+v, want position at m2 (next 3) and the lease ended", g)
	}
}
