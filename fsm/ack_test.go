package fsm

import (
	"slices"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

func TestAckCompletedIsCumulative(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3", "m4")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 3})
	lp := r.Partitions[0]
	ar := m.ack("", ackOf(lp, lp.Messages[2], r.LeaseID, AckCompleted))
	it := ar.Items[0]
	if !it.Success || !it.LeaseReleased || it.DLQ || it.Dropped || it.Error != "" || !it.Resolved || it.Queue != "q" || it.Partition != "p" {
		t.Fatalf("ack %+v", it)
	}
	g := m.group("q", "p", QueueMode)
	if g.Next != 4 || g.HasLease() || g.Retry != 0 || g.Batches != 1 || g.Consumed != 3 {
		t.Fatalf("group %+v", g)
	}
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"m4"}) {
		t.Fatalf("next pop %v", got)
	}
}

func TestAckPartialBatchKeepsLease(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 3})
	lp := r.Partitions[0]
	ar := m.ack("", ackOf(lp, lp.Messages[0], r.LeaseID, AckCompleted), ackOf(lp, lp.Messages[1], r.LeaseID, AckCompleted))
	if !ar.Items[0].Success || !ar.Items[1].Success || ar.Items[0].LeaseReleased || ar.Items[1].LeaseReleased {
		t.Fatalf("ack %+v", ar.Items)
	}
	if r2 := m.pop(Lease{Queue: "q", Batch: 10}); r2.Count() != 0 {
		t.Fatalf("partially acked batch still leased, got %v", txids(r2))
	}
	if g := m.group("q", "p", QueueMode); g.Next != 3 || g.LeaseID != r.LeaseID {
		t.Fatalf("group %+v", g)
	}
	// When the lease expires only the unresolved message comes back.
	m.advance(time.Minute)
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"m3"}) {
		t.Fatalf("redelivery %v", got)
	}
}

func TestAckNeverMovesBackwards(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3", "m4")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 4})
	lp := r.Partitions[0]
	m.ack("", ackOf(lp, lp.Messages[2], r.LeaseID, AckCompleted))
	before := *m.group("q", "p", QueueMode)
	// Re-acks of consumed messages with the live lease: successful no-ops.
	ar := m.ack("", ackOf(lp, lp.Messages[0], r.LeaseID, AckCompleted), ackOf(lp, lp.Messages[2], r.LeaseID, AckCompleted))
	for _, it := range ar.Items {
		if !it.Success || it.LeaseReleased || it.Error != "" {
			t.Fatalf("re-ack %+v", it)
		}
	}
	if g := m.group("q", "p", QueueMode); *g != before {
		t.Fatalf("re-ack changed state: %+v -> %+v", before, *g)
	}
	// Finish the batch, then re-ack without a lease id.
	m.ack("", ackOf(lp, lp.Messages[3], r.LeaseID, AckCompleted))
	done := *m.group("q", "p", QueueMode)
	ar = m.ack("", ackTx(lp.PartitionID, "m1", [16]byte{}, AckCompleted))
	if !ar.Items[0].Success || ar.Items[0].LeaseReleased {
		t.Fatalf("re-ack after release %+v", ar.Items[0])
	}
	if g := m.group("q", "p", QueueMode); *g != done {
		t.Fatalf("re-ack after release changed state: %+v -> %+v", done, *g)
	}
}

func TestAckUnresolvable(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	m.push(items("q2", "p", "other")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1})
	lp := r.Partitions[0]
	q2p := m.partition("q2", "p").UUID
	cases := []struct {
		name string
		item AckItem
	}{
		{"unknown partition id", ackTx([16]byte{0xde, 0xad}, "m1", r.LeaseID, AckCompleted)},
		{"partition id not a uuid", AckItem{TxID: "m1", PartitionOK: false, Status: AckCompleted}},
		{"partition id not a uuid, id bytes valid", AckItem{TxID: "m1", PartitionID: lp.PartitionID, PartitionOK: false, Status: AckCompleted}},
		{"unknown transaction id", ackTx(lp.PartitionID, "nope", r.LeaseID, AckCompleted)},
		{"transaction id of another partition", ackTx(q2p, "m1", [16]byte{}, AckCompleted)},
		{"failed, unknown transaction id", ackTx(lp.PartitionID, "nope", [16]byte{}, AckFailed)},
	}
	before := *m.group("q", "p", QueueMode)
	for _, c := range cases {
		ar := m.ack("", c.item)
		it := ar.Items[0]
		if it.Success || it.Error != ErrUnresolvable || it.Resolved || it.LeaseReleased {
			t.Errorf("%s: %+v", c.name, it)
		}
	}
	if g := m.group("q", "p", QueueMode); *g != before {
		t.Fatalf("unresolvable acks changed state: %+v -> %+v", before, *g)
	}
	if g := m.group("q2", "p", QueueMode); g != nil {
		t.Fatalf("unresolvable ack created state %+v", g)
	}
	// One bad item does not fail the others.
	ar := m.ack("", ackTx(lp.PartitionID, "nope", [16]byte{}, AckCompleted), ackOf(lp, lp.Messages[0], r.LeaseID, AckCompleted))
	if ar.Items[0].Success || !ar.Items[1].Success || !ar.Items[1].LeaseReleased {
		t.Fatalf("mixed batch %+v", ar.Items)
	}
}

func TestAckInvalidOrExpiredLease(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 2})
	lp := r.Partitions[0]
	before := *m.group("q", "p", QueueMode)
	wrong := r.LeaseID
	wrong[15] ^= 1
	for _, st := range []uint8{AckCompleted, AckFailed, AckRetry, AckDLQ} {
		ar := m.ack("", ackOf(lp, lp.Messages[0], wrong, st))
		if it := ar.Items[0]; it.Success || it.Error != ErrInvalidLease || !it.Resolved {
			t.Fatalf("wrong lease, status %d: %+v", st, it)
		}
	}
	// Another group's lease is not this group's lease.
	other := m.mustPop(Lease{Queue: "q", Group: "other", Batch: 2})
	if ar := m.ack("", ackOf(lp, lp.Messages[0], other.LeaseID, AckCompleted)); ar.Items[0].Error != ErrInvalidLease {
		t.Fatalf("other group's lease %+v", ar.Items[0])
	}
	if g := m.group("q", "p", QueueMode); *g != before {
		t.Fatalf("rejected acks changed state: %+v -> %+v", before, *g)
	}
	if len(m.deadLetters("q")) != 0 {
		t.Fatal("rejected dlq ack wrote a dead letter")
	}
	m.advance(60 * time.Second)
	ar := m.ack("", ackOf(lp, lp.Messages[0], r.LeaseID, AckCompleted))
	if it := ar.Items[0]; it.Success || it.Error != ErrInvalidLease {
		t.Fatalf("expired lease %+v", it)
	}
	if g := m.group("q", "p", QueueMode); g.Next != 1 {
		t.Fatalf("expired-lease ack moved the position: %+v", g)
	}
}

func TestAckLateAckAfterRedeliveryRejected(t *testing.T) {
	// queen-api.md 4.5 example.
	m := newMachine(t)
	m.push(items("q", "p", seq("m", 5)...)...)
	a := m.mustPop(Lease{Queue: "q", Batch: 3})
	if b := m.pop(Lease{Queue: "q", Batch: 10}); b.Count() != 0 {
		t.Fatalf("B got %v", txids(b))
	}
	lp := a.Partitions[0]
	m.ack("", ackOf(lp, lp.Messages[0], a.LeaseID, AckCompleted), ackOf(lp, lp.Messages[1], a.LeaseID, AckCompleted))
	m.advance(61 * time.Second)
	b := m.mustPop(Lease{Queue: "q", Batch: 10})
	if got := txids(b); !slices.Equal(got, []string{"m3", "m4", "m5"}) {
		t.Fatalf("B got %v", got)
	}
	if ar := m.ack("", ackOf(lp, lp.Messages[2], a.LeaseID, AckCompleted)); ar.Items[0].Error != ErrInvalidLease {
		t.Fatalf("late ack %+v", ar.Items[0])
	}
	if g := m.group("q", "p", QueueMode); g.Next != 3 || g.LeaseID != b.LeaseID {
		t.Fatalf("group %+v", g)
	}
}

func TestAckWithoutLeaseIDAppliesToGroupState(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 2})
	pid := r.Partitions[0].PartitionID
	ar := m.ack("", ackTx(pid, "m2", [16]byte{}, AckCompleted))
	if !ar.Items[0].Success || !ar.Items[0].LeaseReleased {
		t.Fatalf("ack %+v", ar.Items[0])
	}
	// An ack naming another group acts on that group's state.
	ar = m.ack("B", ackTx(pid, "m1", [16]byte{}, AckCompleted))
	if !ar.Items[0].Success {
		t.Fatalf("ack %+v", ar.Items[0])
	}
	if g := m.group("q", "p", "B"); g == nil || g.Next != 2 || g.HasLease() {
		t.Fatalf("group B %+v", g)
	}
	if got := txids(m.pop(Lease{Queue: "q", Group: "B", Batch: 10})); !slices.Equal(got, []string{"m2"}) {
		t.Fatalf("B pop %v", got)
	}
}

func TestAckBatchAppliedInMessageOrder(t *testing.T) {
	// Items are applied per partition in message order whatever the request
	// order: every permutation must end in the same state.
	run := func(order []int) (string, []*segments.DeadLetter, []AckItemResult) {
		m := newMachine(t)
		configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 0 })
		m.push(items("q", "a", "a1", "a2", "a3")...)
		m.push(items("q", "b", "b1", "b2")...)
		r := m.mustPop(Lease{Queue: "q", Batch: 10, MaxPartitions: 2})
		all := []AckItem{
			ackOf(r.Partitions[0], r.Partitions[0].Messages[0], r.LeaseID, AckFailed),
			ackOf(r.Partitions[0], r.Partitions[0].Messages[1], r.LeaseID, AckCompleted),
			ackOf(r.Partitions[0], r.Partitions[0].Messages[2], r.LeaseID, AckDLQ),
			ackOf(r.Partitions[1], r.Partitions[1].Messages[0], r.LeaseID, AckDLQ),
			ackOf(r.Partitions[1], r.Partitions[1].Messages[1], r.LeaseID, AckFailed),
		}
		req := make([]AckItem, len(order))
		for i, j := range order {
			req[i] = all[j]
		}
		ar := m.ack("", req...)
		byItem := make([]AckItemResult, len(all))
		for i, j := range order {
			byItem[j] = ar.Items[i]
		}
		return m.digest(), m.deadLetters("q"), byItem
	}
	wantDigest, wantDL, wantRes := run([]int{0, 1, 2, 3, 4})
	var dl []string
	for _, d := range wantDL {
		dl = append(dl, d.PartitionName+"/"+d.TxID)
	}
	if want := []string{"a/a1", "a/a3", "b/b1", "b/b2"}; !slices.Equal(dl, want) {
		t.Fatalf("dead letters %v, want %v", dl, want)
	}
	if !wantRes[2].LeaseReleased || wantRes[0].LeaseReleased || !wantRes[4].LeaseReleased {
		t.Fatalf("results %+v", wantRes)
	}
	for _, order := range [][]int{{4, 3, 2, 1, 0}, {2, 0, 4, 1, 3}, {1, 3, 0, 4, 2}} {
		d, dls, res := run(order)
		if d != wantDigest {
			t.Errorf("order %v: state differs from message order", order)
		}
		for i := range dls {
			if dls[i].TxID != wantDL[i].TxID || dls[i].Seq != wantDL[i].Seq {
				t.Errorf("order %v: dead letter %d is %s, want %s", order, i, dls[i].TxID, wantDL[i].TxID)
			}
		}
		if !slices.Equal(res, wantRes) {
			t.Errorf("order %v: results %+v, want %+v", order, res, wantRes)
		}
	}
}

func TestAckFailedChargesOncePerDelivery(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 3})
	ar := m.ack("", ackAll(r, AckFailed)...)
	for i, it := range ar.Items {
		if !it.Success || it.DLQ || it.Dropped || it.LeaseReleased != (i == 0) {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	g := m.group("q", "p", QueueMode)
	if g.Retry != 1 || g.HasLease() || g.Next != 1 || g.Batches != 0 {
		t.Fatalf("group %+v", g)
	}
	// Redelivery is immediate and carries the counter.
	r2 := m.mustPop(Lease{Queue: "q", Batch: 3})
	if got := txids(r2); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("redelivery %v", got)
	}
	for _, msg := range r2.Partitions[0].Messages {
		if msg.RetryCount != 1 {
			t.Fatalf("retryCount %d", msg.RetryCount)
		}
	}
	// The same failed acks again, now in two requests: the second finds no
	// live lease and changes nothing.
	m.ack("", ackAll(r2, AckFailed)[:1]...)
	ar = m.ack("", ackTx(r2.Partitions[0].PartitionID, "m2", [16]byte{}, AckFailed))
	if !ar.Items[0].Success || ar.Items[0].LeaseReleased {
		t.Fatalf("failed without live lease %+v", ar.Items[0])
	}
	if g := m.group("q", "p", QueueMode); g.Retry != 2 {
		t.Fatalf("retry %d, want 2", g.Retry)
	}
}

func TestAckFailedAfterCompletedPrefix(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 3})
	lp := r.Partitions[0]
	ar := m.ack("", ackOf(lp, lp.Messages[0], r.LeaseID, AckCompleted), ackOf(lp, lp.Messages[1], r.LeaseID, AckFailed))
	if !ar.Items[1].LeaseReleased {
		t.Fatalf("ack %+v", ar.Items)
	}
	r2 := m.mustPop(Lease{Queue: "q", Batch: 3})
	if got := txids(r2); !slices.Equal(got, []string{"m2", "m3"}) || r2.Partitions[0].Messages[0].RetryCount != 1 {
		t.Fatalf("redelivery %v %+v", got, r2.Partitions[0].Messages)
	}
}

func TestAckFailedWithoutLiveLeaseChangesNothing(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1})
	m.advance(time.Minute)
	before := *m.group("q", "p", QueueMode)
	ar := m.ack("", ackTx(r.Partitions[0].PartitionID, "m1", [16]byte{}, AckFailed))
	if !ar.Items[0].Success || ar.Items[0].LeaseReleased {
		t.Fatalf("ack %+v", ar.Items[0])
	}
	if g := m.group("q", "p", QueueMode); *g != before {
		t.Fatalf("state changed %+v -> %+v", before, *g)
	}
}

func TestAckRetryLimitDeliversNPlusOneTimes(t *testing.T) {
	for _, limit := range []int64{0, 1, 3, 5} {
		m := newMachine(t)
		configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = limit })
		m.push(items("q", "p", "poison", "next")...)
		deliveries := 0
		var last AckItemResult
		for deliveries < 20 {
			r := m.mustPop(Lease{Queue: "q", Batch: 1})
			if txids(r)[0] != "poison" {
				break
			}
			if got := r.Partitions[0].Messages[0].RetryCount; got != uint64(deliveries) {
				t.Fatalf("limit %d: delivery %d has retryCount %d", limit, deliveries+1, got)
			}
			deliveries++
			last = m.ack("", ackAll(r, AckFailed)[0]).Items[0]
			if last.DLQ {
				break
			}
		}
		if deliveries != int(limit)+1 {
			t.Fatalf("limit %d: delivered %d times, want %d", limit, deliveries, limit+1)
		}
		if !last.Success || !last.DLQ || last.Dropped || !last.LeaseReleased {
			t.Fatalf("limit %d: final ack %+v", limit, last)
		}
		dl := m.deadLetters("q")
		if len(dl) != 1 || dl[0].TxID != "poison" || dl[0].RetryCount != uint64(limit) || dl[0].Group != QueueMode ||
			dl[0].Error != "Retries exhausted" || dl[0].PartitionName != "p" || string(dl[0].Payload) != `"poison"` {
			t.Fatalf("limit %d: dead letters %+v", limit, dl)
		}
		g := m.group("q", "p", QueueMode)
		if g.Next != 2 || g.Retry != 0 || g.HasLease() || g.Batches != 1 {
			t.Fatalf("limit %d: group %+v", limit, g)
		}
		// The partition goes on with the next message, at a fresh budget.
		r := m.mustPop(Lease{Queue: "q", Batch: 1})
		if txids(r)[0] != "next" || r.Partitions[0].Messages[0].RetryCount != 0 {
			t.Fatalf("limit %d: after dead letter %+v", limit, r.Partitions[0].Messages)
		}
	}
}

func TestAckDeadLetterRecord(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 0 })
	trace := [16]byte{9, 9}
	pr := m.push(PushItem{Queue: "q", Partition: "p", TxID: "tx", TraceID: trace, HasTrace: true,
		ProducerSub: "alice", Payload: []byte(`{"x":1}`), Encrypted: true})
	created := m.now.UnixMicro()
	m.advance(time.Second)
	r := m.mustPop(Lease{Queue: "q", Group: "billing", Batch: 1})
	it := ackAll(r, AckFailed)[0]
	it.Error = "boom"
	m.advance(time.Second)
	m.ack("billing", it)
	dl := m.deadLetters("q")
	if len(dl) != 1 {
		t.Fatalf("dead letters %+v", dl)
	}
	d := dl[0]
	q := m.queue("q")
	p := m.partition("q", "p")
	if d.QueueID != q.ID || d.PartitionID != p.ID || d.PartitionName != "p" || d.Offset != 1 ||
		d.MessageID != pr.Items[0].MessageID || d.TxID != "tx" || d.TraceID != trace || !d.HasTrace ||
		d.ProducerSub != "alice" || string(d.Payload) != `{"x":1}` || !d.Encrypted || d.Group != "billing" ||
		d.Error != "boom" || d.RetryCount != 0 || d.CreatedAt != created || d.FailedAt != m.now.UnixMicro() {
		t.Fatalf("dead letter %+v", d)
	}
	// The message stays in its partition for other groups.
	if got := txids(m.pop(Lease{Queue: "q", Batch: 1})); !slices.Equal(got, []string{"tx"}) {
		t.Fatalf("queue mode %v", got)
	}
}

func TestAckRetryCounterResetsAfterDeadLetter(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 1 })
	m.push(items("q", "p", "m1", "m2")...)
	for i := 0; i < 2; i++ {
		m.ack("", ackAll(m.mustPop(Lease{Queue: "q", Batch: 1}), AckFailed)...)
	}
	if dl := m.deadLetters("q"); len(dl) != 1 || dl[0].TxID != "m1" {
		t.Fatalf("dead letters %+v", dl)
	}
	// m2's first failure is charged, not dead-lettered (Queen's behaviour is
	// not reproduced).
	ar := m.ack("", ackAll(m.mustPop(Lease{Queue: "q", Batch: 1}), AckFailed)...)
	if ar.Items[0].DLQ || !ar.Items[0].LeaseReleased {
		t.Fatalf("first failure after a dead letter %+v", ar.Items[0])
	}
	if g := m.group("q", "p", QueueMode); g.Retry != 1 || g.Next != 2 {
		t.Fatalf("group %+v", g)
	}
}

func TestAckRetryCounterResetsOnCompletedBatch(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	m.ack("", ackAll(m.mustPop(Lease{Queue: "q", Batch: 1}), AckFailed)...)
	m.ack("", ackAll(m.mustPop(Lease{Queue: "q", Batch: 1}), AckFailed)...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1})
	if r.Partitions[0].Messages[0].RetryCount != 2 {
		t.Fatalf("retryCount %d", r.Partitions[0].Messages[0].RetryCount)
	}
	m.ack("", ackAll(r, AckCompleted)...)
	if g := m.group("q", "p", QueueMode); g.Retry != 0 {
		t.Fatalf("retry %d after a completed batch", g.Retry)
	}
}

func TestAckLoweringRetryLimitDeadLettersNextFailure(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 5 })
	m.push(items("q", "p", "m1")...)
	for i := 0; i < 3; i++ {
		m.ack("", ackAll(m.mustPop(Lease{Queue: "q", Batch: 1}), AckFailed)...)
	}
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 2 })
	if g := m.group("q", "p", QueueMode); g.Retry != 3 {
		t.Fatalf("reconfigure reset the counter: %+v", g)
	}
	ar := m.ack("", ackAll(m.mustPop(Lease{Queue: "q", Batch: 1}), AckFailed)...)
	if !ar.Items[0].DLQ {
		t.Fatalf("ack %+v", ar.Items[0])
	}
	if dl := m.deadLetters("q"); len(dl) != 1 || dl[0].RetryCount != 3 {
		t.Fatalf("dead letters %+v", dl)
	}
}

func TestAckDroppedWhenBothDeadLetterFlagsFalse(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) {
		o.RetryLimit, o.DeadLetterQueue, o.DLQAfterMaxRetries = 0, false, false
	})
	m.push(items("q", "p", "m1", "m2")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1})
	ar := m.ack("", ackAll(r, AckFailed)...)
	it := ar.Items[0]
	if !it.Success || it.DLQ || !it.Dropped || !it.LeaseReleased || it.Error != "" {
		t.Fatalf("ack %+v", it)
	}
	if dl := m.deadLetters("q"); len(dl) != 0 {
		t.Fatalf("dropped message dead-lettered: %+v", dl)
	}
	if g := m.group("q", "p", QueueMode); g.Next != 2 || g.Retry != 0 {
		t.Fatalf("group %+v", g)
	}
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"m2"}) {
		t.Fatalf("after drop %v", got)
	}
}

func TestAckOneDeadLetterFlagFalseStillDeadLetters(t *testing.T) {
	for _, flags := range [][2]bool{{false, true}, {true, false}, {true, true}} {
		m := newMachine(t)
		configureWith(m, "q", func(o *segments.Options) {
			o.RetryLimit, o.DeadLetterQueue, o.DLQAfterMaxRetries = 0, flags[0], flags[1]
		})
		m.push(items("q", "p", "m1")...)
		ar := m.ack("", ackAll(m.mustPop(Lease{Queue: "q", Batch: 1}), AckFailed)...)
		if it := ar.Items[0]; !it.Success || !it.DLQ || it.Dropped {
			t.Fatalf("flags %v: %+v", flags, it)
		}
		if dl := m.deadLetters("q"); len(dl) != 1 {
			t.Fatalf("flags %v: dead letters %+v", flags, dl)
		}
	}
}

func TestAckRetryStatusReleasesWithoutCharging(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 0 })
	m.push(items("q", "p", "m1", "m2")...)
	for i := 0; i < 3; i++ {
		r := m.mustPop(Lease{Queue: "q", Batch: 2})
		if r.Partitions[0].Messages[0].RetryCount != 0 || r.Count() != 2 {
			t.Fatalf("delivery %d: %+v", i, r.Partitions[0].Messages)
		}
		ar := m.ack("", ackAll(r, AckRetry)...)
		if !ar.Items[0].Success || !ar.Items[0].LeaseReleased || ar.Items[0].DLQ || ar.Items[1].LeaseReleased || !ar.Items[1].Success {
			t.Fatalf("retry ack %+v", ar.Items)
		}
	}
	if g := m.group("q", "p", QueueMode); g.Retry != 0 || g.Next != 1 || g.HasLease() {
		t.Fatalf("group %+v", g)
	}
	if len(m.deadLetters("q")) != 0 {
		t.Fatal("retry dead-lettered")
	}
}

func TestAckDLQStatusDeadLettersImmediately(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) {
		o.RetryLimit, o.DeadLetterQueue, o.DLQAfterMaxRetries = 10, false, false
	})
	m.push(items("q", "p", "m1", "m2", "m3")...)
	m.ack("", ackAll(m.mustPop(Lease{Queue: "q", Batch: 3}), AckFailed)...) // retry 1
	r := m.mustPop(Lease{Queue: "q", Batch: 3})
	lp := r.Partitions[0]
	it := ackOf(lp, lp.Messages[1], r.LeaseID, AckDLQ)
	it.Error = "bad payload"
	ar := m.ack("", it)
	if got := ar.Items[0]; !got.Success || !got.DLQ || got.Dropped || got.LeaseReleased {
		t.Fatalf("dlq ack %+v", got)
	}
	g := m.group("q", "p", QueueMode)
	if g.Next != 3 || g.Retry != 1 || g.LeaseID != r.LeaseID {
		t.Fatalf("group %+v (position moves to m2, counter unchanged, lease kept)", g)
	}
	dl := m.deadLetters("q")
	if len(dl) != 1 || dl[0].TxID != "m2" || dl[0].Error != "bad payload" || dl[0].RetryCount != 1 {
		t.Fatalf("dead letters %+v", dl)
	}
	// dlq on the last message ends the batch.
	ar = m.ack("", ackOf(lp, lp.Messages[2], r.LeaseID, AckDLQ))
	if !ar.Items[0].LeaseReleased {
		t.Fatalf("dlq of last %+v", ar.Items[0])
	}
	if g := m.group("q", "p", QueueMode); g.HasLease() || g.Retry != 0 || g.Next != 4 {
		t.Fatalf("group %+v", g)
	}
}

func TestAckUnknownStatus(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1})
	before := *m.group("q", "p", QueueMode)
	it := ackAll(r, AckUnknown)[0]
	it.StatusText = "later"
	ar := m.ack("", it)
	if got := ar.Items[0]; got.Success || got.Error != "Unknown status: later" || got.LeaseReleased {
		t.Fatalf("ack %+v", got)
	}
	if g := m.group("q", "p", QueueMode); *g != before {
		t.Fatalf("state changed %+v -> %+v", before, *g)
	}
}

func TestAckResolvesLongAfterDedupWindow(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DedupWindowSeconds = 60; o.CompletedRetentionSeconds = 0 })
	m.push(items("q", "p", "m1", "m2")...)
	m.advance(3 * time.Hour)
	r := m.mustPop(Lease{Queue: "q", Batch: 2})
	ar := m.ack("", ackAll(r, AckCompleted)...)
	if !ar.Items[0].Success || !ar.Items[1].Success || !ar.Items[1].LeaseReleased {
		t.Fatalf("late ack %+v", ar.Items)
	}
	if r := m.pop(Lease{Queue: "q", Batch: 10}); r.Count() != 0 {
		t.Fatalf("acked messages redelivered: %v", txids(r))
	}
}

func TestAckReusedTxIDResolvesToLeasedOccurrence(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DedupWindowSeconds = 60 })
	m.push(items("q", "p", "t")...)
	m.advance(61 * time.Second)
	m.push(items("q", "p", "t")...) // a second occurrence after the window
	if p := m.partition("q", "p"); p.Messages != 2 {
		t.Fatalf("%d messages", p.Messages)
	}
	r := m.mustPop(Lease{Queue: "q", Batch: 1})
	ar := m.ack("", ackAll(r, AckCompleted)...)
	if !ar.Items[0].LeaseReleased {
		t.Fatalf("ack of the leased occurrence %+v", ar.Items[0])
	}
	if g := m.group("q", "p", QueueMode); g.Next != 2 {
		t.Fatalf("position %d, want 2 (the older occurrence)", g.Next)
	}
	r = m.mustPop(Lease{Queue: "q", Batch: 1})
	// Without a live lease the newest occurrence wins.
	ar = m.ack("", ackTx(r.Partitions[0].PartitionID, "t", [16]byte{}, AckCompleted))
	if !ar.Items[0].LeaseReleased {
		t.Fatalf("ack of the newest occurrence %+v", ar.Items[0])
	}
	if g := m.group("q", "p", QueueMode); g.Next != 3 {
		t.Fatalf("position %d, want 3", g.Next)
	}
}

func TestAckOfNeverPoppedMessageCreatesState(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3")...)
	pid := m.partition("q", "p").UUID
	ar := m.ack("G", ackTx(pid, "m2", [16]byte{}, AckCompleted))
	if !ar.Items[0].Success || ar.Items[0].LeaseReleased {
		t.Fatalf("ack %+v", ar.Items[0])
	}
	if g := m.group("q", "p", "G"); g == nil || g.Next != 3 || g.HasLease() {
		t.Fatalf("group %+v", g)
	}
	if got := txids(m.pop(Lease{Queue: "q", Group: "G", Batch: 10})); !slices.Equal(got, []string{"m3"}) {
		t.Fatalf("after ack-created state %v", got)
	}
}

// A client that lost the response to a completed ack and retries it must not
// be told the ack failed: the message is consumed, so the re-ack is a
// successful no-op even though its lease has since been released.
func TestAckRetriedAfterLostResponseSucceeds(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 2})
	acks := ackAll(r, AckCompleted)
	if ar := m.ack("", acks...); !ar.Items[1].LeaseReleased {
		t.Fatalf("first ack %+v", ar.Items)
	}
	before := *m.group("q", "p", QueueMode)
	again := m.ack("", acks...)
	for i, it := range again.Items {
		if !it.Success || it.Error != "" || it.LeaseReleased {
			t.Fatalf("retried ack %d: %+v", i, it)
		}
	}
	if after := *m.group("q", "p", QueueMode); after != before {
		t.Fatalf("a retried ack changed the group: %+v -> %+v", before, after)
	}
	// A failed ack of a consumed message still needs the live lease.
	lp := r.Partitions[0]
	if ar := m.ack("", ackOf(lp, lp.Messages[0], r.LeaseID, AckFailed)); ar.Items[0].Error != ErrInvalidLease {
		t.Fatalf("failed ack with a released lease: %+v", ar.Items[0])
	}
}

// A dead-letter entry is unique per (message, group) (queen-api.md 2): a
// client that retries a dlq ack, or a failed ack that spent the budget,
// after losing the response (a 503 unknown_outcome) must not dead-letter
// the message twice, whether its lease is still live or already ended.
func TestAckRetriedDeadLetterWritesOneEntry(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status uint8
		limit  int64
	}{{"dlq", AckDLQ, 3}, {"failed, budget spent", AckFailed, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = tc.limit })
			m.push(items("q", "p", "m1", "m2")...)
			r := m.mustPop(Lease{Queue: "q", Batch: 2})
			lp := r.Partitions[0]
			first := ackOf(lp, lp.Messages[0], r.LeaseID, tc.status)
			if ar := m.ack("", first); !ar.Items[0].Success || !ar.Items[0].DLQ {
				t.Fatalf("first ack %+v", ar.Items[0])
			}
			before := *m.group("q", "p", QueueMode)
			// The retry while the lease on m2 is live, then after it ended.
			for _, when := range []string{"lease live", "lease ended"} {
				if when == "lease ended" {
					m.ack("", ackOf(lp, lp.Messages[1], r.LeaseID, AckCompleted))
					before = *m.group("q", "p", QueueMode)
				}
				ar := m.ack("", first)
				got := ar.Items[0]
				if tc.status == AckFailed && when == "lease ended" {
					// A failed ack needs the live lease, as a first one does
					// (TestAckRetriedAfterLostResponseSucceeds).
					if got.Error != ErrInvalidLease {
						t.Fatalf("%s: retried ack %+v", when, got)
					}
				} else if !got.Success || got.Error != "" || got.DLQ || got.Dropped || got.LeaseReleased {
					t.Fatalf("%s: retried ack %+v", when, got)
				}
				if after := *m.group("q", "p", QueueMode); after != before {
					t.Fatalf("%s: the retry changed the group: %+v -> %+v", when, before, after)
				}
				if dl := m.deadLetters("q"); len(dl) != 1 || dl[0].TxID != "m1" {
					t.Fatalf("%s: dead letters %+v", when, dl)
				}
			}
		})
	}
}

// queen-api.md 4.13: with dedupWindowSeconds 0 "a client retry after a lost
// response duplicates the message", so one delivered batch can hold the
// same transaction id twice. 4.5: the batch is complete, and its lease
// released, once every delivered message is acked; both clients ack a
// batch in one request, an item per delivered message. Each item naming the
// repeated id must take its own occurrence: if both took the first, the
// batch would stay leased until its expiry, holding the partition, and the
// copy would be delivered again.
func TestAckRepeatedIDInBatchTakesEachOccurrence(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DedupWindowSeconds = 0 })
	m.push(items("q", "p", "a", "x")...)
	m.push(items("q", "p", "a")...) // the producer's retry, stored again
	r := m.mustPop(Lease{Queue: "q", Batch: 10})
	if got := txids(r); !slices.Equal(got, []string{"a", "x", "a"}) {
		t.Fatalf("delivered %v", got)
	}
	ar := m.ack("", ackAll(r, AckCompleted)...)
	if it := ar.Items[2]; !it.Success || !it.LeaseReleased {
		t.Errorf("ack of the batch's last message (the repeated id): %+v, want success ending the lease", it)
	}
	if g := m.group("q", "p", QueueMode); g.Next != 4 || g.HasLease() || g.Batches != 1 {
		t.Fatalf("group %+v after acking every delivered message, want position 4, no lease, one batch", g)
	}
	m.push(items("q", "p", "b")...)
	r = m.pop(Lease{Queue: "q", Batch: 10})
	if got := txids(r); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("next delivery %v, want [b]", got)
	}
	m.ack("", ackAll(r, AckCompleted)...)

	// An item the apply refuses (another lease) takes no occurrence: the
	// item after it acks the first copy, not the second.
	m.push(items("q", "p", "r")...)
	m.push(items("q", "p", "r")...)
	r = m.mustPop(Lease{Queue: "q", Batch: 10})
	if got := txids(r); !slices.Equal(got, []string{"r", "r"}) {
		t.Fatalf("delivered %v", got)
	}
	pid := r.Partitions[0].PartitionID
	ar = m.ack("", ackTx(pid, "r", [16]byte{9}, AckCompleted), ackTx(pid, "r", r.LeaseID, AckCompleted))
	if ar.Items[0].Error != ErrInvalidLease || !ar.Items[1].Success || ar.Items[1].LeaseReleased {
		t.Fatalf("acks %+v, want the foreign lease refused and the first copy acked", ar.Items)
	}
	if g := m.group("q", "p", QueueMode); g.Next != 6 || !g.HasLease() {
		t.Fatalf("group %+v, want position 6 (past the first copy only) and the lease kept", g)
	}

	// The same id named twice by one request while the batch holds it once
	// is one message acked twice.
	m.push(items("q", "p2", "c", "d")...)
	r = m.mustPop(Lease{Queue: "q", Partition: "p2", Scope: ScopeSpecific, Batch: 1})
	lp := r.Partitions[0]
	ar = m.ack("", ackOf(lp, lp.Messages[0], r.LeaseID, AckCompleted), ackOf(lp, lp.Messages[0], r.LeaseID, AckCompleted))
	if !ar.Items[0].Success || !ar.Items[1].Success {
		t.Fatalf("acks %+v", ar.Items)
	}
	if g := m.group("q", "p2", QueueMode); g.Next != 2 {
		t.Fatalf("position %d, want 2 (only c)", g.Next)
	}
}
