package fsm

import (
	"slices"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

func (m *machine) sweep(queue string, max uint32) *SweepResult {
	m.t.Helper()
	return m.apply(&Sweep{Queue: queue, MaxSegments: max})[0].(*SweepResult)
}

// stored lists the transaction ids still stored in a partition.
func (m *machine) stored(queue, part string) []string {
	m.t.Helper()
	p := m.partition(queue, part)
	if p == nil {
		return nil
	}
	var out []string
	m.view(func(tx *segments.Tx) error {
		return tx.Scan(p, 0, func(sm *segments.StoredMessage) (bool, error) {
			out = append(out, sm.TxID)
			return true, nil
		})
	})
	return out
}

func TestSweepRetentionDeletesOldSegmentsConsumedOrNot(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.RetentionSeconds = true, 60 })
	m.push(items("q", "p", "old1", "old2")...)
	m.advance(30 * time.Second)
	m.push(items("q", "p", "mid")...)
	m.advance(31 * time.Second) // old: 61 s, mid: 31 s
	m.push(items("q", "p", "new")...)
	r := m.sweep("q", 100)
	if r.Segments[RuleRetention] != 1 || r.Messages[RuleRetention] != 2 || r.More {
		t.Fatalf("sweep %+v", r)
	}
	if got := m.stored("q", "p"); !slices.Equal(got, []string{"mid", "new"}) {
		t.Fatalf("stored %v", got)
	}
	// A consumer that never read them skips the deleted messages silently.
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"mid", "new"}) {
		t.Fatalf("pop %v", got)
	}
	// Sweeping again at the same time deletes nothing more.
	if r := m.sweep("q", 100); r.Segments != ([numRules]uint64{}) {
		t.Fatalf("second sweep %+v", r)
	}
}

func TestSweepRetentionNeedsEnabledFlag(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionSeconds, o.CompletedRetentionSeconds = 1, 1 })
	m.push(items("q", "p", "a")...)
	m.ack("", ackTx(m.partition("q", "p").UUID, "a", [16]byte{}, AckCompleted))
	m.advance(time.Hour)
	if r := m.sweep("q", 100); r.Segments != ([numRules]uint64{}) {
		t.Fatalf("sweep without retentionEnabled %+v", r)
	}
	if got := m.stored("q", "p"); len(got) != 1 {
		t.Fatalf("stored %v", got)
	}
	if HasRules(&m.queue("q").Options) {
		t.Fatal("HasRules without retentionEnabled")
	}
}

func TestSweepConsumerInsideDeletedRangeResumes(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.RetentionSeconds, o.RetryLimit = true, 60, 0 })
	m.push(items("q", "p", "a1", "a2", "a3")...)
	m.advance(10 * time.Second)
	m.push(items("q", "p", "b1")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1})
	lp := r.Partitions[0]
	m.ack("", ackOf(lp, lp.Messages[0], r.LeaseID, AckDLQ)) // a dead letter; position a1
	m.advance(55 * time.Second)                             // a*: 65 s, b1: 55 s
	m.sweep("q", 100)
	if got := m.stored("q", "p"); !slices.Equal(got, []string{"b1"}) {
		t.Fatalf("stored %v", got)
	}
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"b1"}) {
		t.Fatalf("resumed at %v", got)
	}
	// Acks for deleted messages are unresolvable; dead letters stay.
	if ar := m.ack("", ackTx(lp.PartitionID, "a2", [16]byte{}, AckCompleted)); ar.Items[0].Error != ErrUnresolvable {
		t.Fatalf("ack of a deleted message %+v", ar.Items[0])
	}
	if dl := m.deadLetters("q"); len(dl) != 1 || dl[0].TxID != "a1" {
		t.Fatalf("dead letters %+v", dl)
	}
	// A deleted message's id stays a duplicate for the rest of its dedup
	// window (queen-api.md 4.13), then can be pushed again.
	if pr := m.push(items("q", "p", "a2")...); pr.Items[0].Status != PushDuplicate {
		t.Fatalf("push inside the window %+v", pr.Items[0])
	}
	m.advance(time.Hour)
	if pr := m.push(items("q", "p", "a2")...); pr.Items[0].Status != PushQueued {
		t.Fatalf("push after the window %+v", pr.Items[0])
	}
}

func TestSweepCompletedRetentionCappedBySlowestGroup(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.CompletedRetentionSeconds = true, 60 })
	m.push(items("q", "p", "s1")...)
	m.push(items("q", "p", "s2")...)
	m.push(items("q", "p", "s3")...)
	m.push(items("q", "untouched", "u1")...)
	pid := m.partition("q", "p").UUID
	m.ack("fast", ackTx(pid, "s3", [16]byte{}, AckCompleted))
	m.ack("slow", ackTx(pid, "s1", [16]byte{}, AckCompleted))
	m.advance(61 * time.Second)
	r := m.sweep("q", 100)
	if r.Segments[RuleCompleted] != 1 || r.Messages[RuleCompleted] != 1 {
		t.Fatalf("sweep %+v", r)
	}
	if got := m.stored("q", "p"); !slices.Equal(got, []string{"s2", "s3"}) {
		t.Fatalf("stored %v", got)
	}
	// A partition no group has read keeps its old messages.
	if got := m.stored("q", "untouched"); !slices.Equal(got, []string{"u1"}) {
		t.Fatalf("unconsumed partition %v", got)
	}
	m.ack("slow", ackTx(pid, "s3", [16]byte{}, AckCompleted))
	m.sweep("q", 100)
	if got := m.stored("q", "p"); len(got) != 0 {
		t.Fatalf("stored %v", got)
	}
	// Young consumed messages stay until they are old enough.
	m.push(items("q", "p", "y1")...)
	m.ack("slow", ackTx(pid, "y1", [16]byte{}, AckCompleted))
	m.ack("fast", ackTx(pid, "y1", [16]byte{}, AckCompleted))
	m.sweep("q", 100)
	if got := m.stored("q", "p"); !slices.Equal(got, []string{"y1"}) {
		t.Fatalf("young consumed %v", got)
	}
}

func TestSweepMaxWaitIgnoresRetentionFlagAndLeases(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.MaxWaitTimeSeconds = 30 })
	m.push(items("q", "p", "a")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1, LeaseSeconds: 3600})
	m.advance(31 * time.Second)
	m.push(items("q", "p", "b")...)
	sr := m.sweep("q", 100)
	if sr.Segments[RuleMaxWait] != 1 {
		t.Fatalf("sweep %+v", sr)
	}
	if got := m.stored("q", "p"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("stored %v", got)
	}
	if len(m.deadLetters("q")) != 0 {
		t.Fatal("maxWait dead-lettered")
	}
	// The leased message is gone: its ack is unresolvable, and since the
	// whole batch was deleted the lease ended with it, so the group moves on
	// to the next stored message at once instead of waiting for the expiry.
	if ar := m.ack("", ackAll(r, AckCompleted)...); ar.Items[0].Error != ErrUnresolvable {
		t.Fatalf("ack %+v", ar.Items[0])
	}
	if g := m.group("q", "p", QueueMode); g.HasLease() || g.HasBatch() {
		t.Fatalf("a batch whose messages were all deleted is still open: %+v", g)
	}
	if p := m.pop(Lease{Queue: "q", Batch: 10}); !slices.Equal(txids(p), []string{"b"}) {
		t.Fatalf("after the sweep the group gets %v, want [b]", txids(p))
	}
}

func TestSweepBudget(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.RetentionSeconds = true, 1 })
	for i := 0; i < 5; i++ {
		m.push(items("q", "a", seq("a", 5)[i])...)
		m.push(items("q", "b", seq("b", 5)[i])...)
	}
	m.advance(2 * time.Second)
	var total uint64
	rounds := 0
	for {
		r := m.sweep("q", 3)
		n := r.Segments[RuleRetention]
		if n > 3 {
			t.Fatalf("sweep deleted %d segments over a budget of 3", n)
		}
		total += n
		rounds++
		if !r.More {
			break
		}
		if rounds > 10 {
			t.Fatal("sweep never finishes")
		}
	}
	if total != 10 || rounds < 4 {
		t.Fatalf("deleted %d segments in %d rounds", total, rounds)
	}
	if len(m.stored("q", "a"))+len(m.stored("q", "b")) != 0 {
		t.Fatal("messages left")
	}
}

func TestSweepUnknownQueueOrNoRules(t *testing.T) {
	m := newMachine(t)
	if r := m.sweep("nope", 10); r.Segments != ([numRules]uint64{}) || r.More {
		t.Fatalf("%+v", r)
	}
	m.push(items("q", "p", "a")...)
	m.advance(24 * time.Hour)
	if r := m.sweep("q", 10); r.Segments != ([numRules]uint64{}) {
		t.Fatalf("%+v", r)
	}
}

func TestExpireLeasesClearsOnlyLongExpired(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "a", "a1")...)
	m.push(items("q", "b", "b1")...)
	old := m.mustPop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "a", Batch: 1, LeaseSeconds: 10})
	m.advance(15 * time.Second)
	live := m.mustPop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "b", Batch: 1, LeaseSeconds: 60})
	res := m.apply(&ExpireLeases{Grace: int64(5 * time.Second / time.Microsecond), Max: 100})[0].(*ExpireLeasesResult)
	if res.Cleared != 1 || res.More {
		t.Fatalf("expire %+v", res)
	}
	if g := m.group("q", "a", QueueMode); g.HasLease() || g.Next != 1 {
		t.Fatalf("expired record %+v", g)
	}
	if g := m.group("q", "b", QueueMode); g.LeaseID != live.LeaseID {
		t.Fatalf("live lease cleared %+v", g)
	}
	m.view(func(tx *segments.Tx) error {
		if pids, _ := tx.LeaseHolders(old.LeaseID); len(pids) != 0 {
			t.Fatal("expired lease still indexed")
		}
		return nil
	})
	// Redelivery is unchanged.
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10, MaxPartitions: 5})); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("after expire %v", got)
	}
}

// TestSweepEndingABatchResetsRetries: retention deletes every message of a
// leased batch that had failed twice; the batch ends and the next message
// starts with no failures charged (the counter belonged to the deleted ones).
func TestSweepEndingABatchResetsRetries(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) {
		o.RetentionEnabled, o.RetentionSeconds, o.RetryLimit, o.DeadLetterQueue = true, 60, 2, true
	})
	m.push(items("q", "p", "a")...)
	pid := m.partition("q", "p").UUID
	for range 2 {
		r := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 1})
		m.ack("g", ackTx(pid, "a", r.LeaseID, AckFailed))
		m.advance(time.Millisecond)
	}
	m.mustPop(Lease{Queue: "q", Group: "g", Batch: 1, LeaseSeconds: 300})
	m.advance(61 * time.Second)
	m.push(items("q", "p", "b")...)
	if _, msgs := swept(m.sweep("q", 10)); msgs != 1 {
		t.Fatalf("swept %d messages", msgs)
	}
	if g := m.group("q", "p", "g"); g.HasBatch() || g.Retry != 0 {
		t.Fatalf("after the sweep %+v", g)
	}
	r := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 1})
	if rc := r.Partitions[0].Messages[0].RetryCount; rc != 0 {
		t.Errorf("b delivered with retryCount %d", rc)
	}
}
