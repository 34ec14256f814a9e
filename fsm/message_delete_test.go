package fsm

import (
	"reflect"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

func (m *machine) deleteMessage(pid [16]byte, txid string) *DeleteMessageResult {
	m.t.Helper()
	return m.apply(&DeleteMessage{Partition: pid, TxID: txid})[0].(*DeleteMessageResult)
}

// TestDeleteMessageForEveryGroup deletes messages from the middle of one
// segment, inside a group's live batch and outside it: no group receives
// them, an ack of one does not resolve, the batch still ends when what is
// left of it is acked, and the message's traces and detail are gone.
func TestDeleteMessageForEveryGroup(t *testing.T) {
	m := newMachine(t)
	pushed := m.push(items("q", "p", seq("m", 6)...)...)
	pid := m.partition("q", "p").UUID
	m.trace(AddTrace{PartitionID: pid, TxID: "m2", EventType: "seen"})
	r := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 3})
	if got := txids(r); !reflect.DeepEqual(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("popped %v", got)
	}

	for _, tx := range []string{"m2", "m6"} {
		if res := m.deleteMessage(pid, tx); !res.Found {
			t.Fatalf("delete %s: %+v", tx, res)
		}
	}
	for _, c := range []DeleteMessage{{Partition: pid, TxID: "m2"}, {Partition: pid, TxID: "never"}, {Partition: [16]byte{9}, TxID: "m1"}} {
		if res := m.deleteMessage(c.Partition, c.TxID); res.Found {
			t.Errorf("delete %+v found a message", c)
		}
	}
	m.checkPartitionRecord("q", "p")
	if got := m.stored("q", "p"); !reflect.DeepEqual(got, []string{"m1", "m3", "m4", "m5"}) {
		t.Fatalf("stored %v", got)
	}
	if d := must1(m.f.Message(pid, "m2", m.now.UnixMicro())); d != nil {
		t.Fatalf("deleted message detail %+v", d)
	}
	if tr := must1(m.f.MessageTraces(pid, "m2")); len(tr) != 0 {
		t.Fatalf("deleted message keeps traces %+v", tr)
	}
	if c, _ := m.traceTotals(); c != 0 {
		t.Fatalf("%d trace events counted after the deletion", c)
	}

	res := m.ack("g", ackTx(pid, "m1", r.LeaseID, AckCompleted), ackTx(pid, "m2", r.LeaseID, AckCompleted),
		ackTx(pid, "m3", r.LeaseID, AckCompleted))
	if it := res.Items[1]; it.Resolved || it.Success {
		t.Errorf("ack of the deleted message %+v", it)
	}
	if it := res.Items[2]; !it.Success || !it.LeaseReleased {
		t.Errorf("ack of the batch's last message %+v", it)
	}
	if g := m.group("q", "p", "g"); g.HasLease() || g.HasBatch() {
		t.Fatalf("batch left %+v", g)
	}
	if got := m.drainGroup("q", "p", "g"); !reflect.DeepEqual(got, []string{"m4", "m5"}) {
		t.Errorf("g then receives %v", got)
	}
	if got := m.drainGroup("q", "p", "other"); !reflect.DeepEqual(got, []string{"m1", "m3", "m4", "m5"}) {
		t.Errorf("another group receives %v", got)
	}
	// The id stays a duplicate of the deleted message for the rest of its
	// dedup window (queen-api.md 4.13), answering the original's id; after
	// the window it can be pushed again.
	if pr := m.push(item("q", "p", "m2", `"again"`)); pr.Items[0].Status != PushDuplicate ||
		pr.Items[0].MessageID != pushed.Items[1].MessageID {
		t.Fatalf("push of a deleted id inside the window: %+v, original %x", pr.Items[0], pushed.Items[1].MessageID)
	}
	m.advance(time.Hour + time.Second)
	if pr := m.push(item("q", "p", "m2", `"again"`)); pr.Items[0].Status != PushQueued {
		t.Fatalf("push of a deleted id after the window: %+v", pr.Items[0])
	}
}

// TestDeleteMessageEndingABatch deletes the last message of a live batch:
// the batch then ends with the message before it, or at once when nothing of
// it is left, instead of holding the lease until it expires.
func TestDeleteMessageEndingABatch(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", seq("m", 4)...)...)
	pid := m.partition("q", "p").UUID
	r := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 2})
	m.deleteMessage(pid, "m2")
	if g := m.group("q", "p", "g"); !g.LeaseLive(m.now.UnixMicro()) || g.LeaseLast != g.Next {
		t.Fatalf("after deleting the batch's last: %+v", g)
	}
	if it := m.ack("g", ackTx(pid, "m1", r.LeaseID, AckCompleted)).Items[0]; !it.Success || !it.LeaseReleased {
		t.Fatalf("ack of what is left %+v", it)
	}
	if len(m.leaseHoldersOf(r.LeaseID)) != 0 {
		t.Fatal("lease index kept")
	}

	r = m.mustPop(Lease{Queue: "q", Group: "g", Batch: 1})
	if got := txids(r); !reflect.DeepEqual(got, []string{"m3"}) {
		t.Fatalf("popped %v", got)
	}
	m.deleteMessage(pid, "m3")
	g := m.group("q", "p", "g")
	if g.HasLease() || g.HasBatch() || len(m.leaseHoldersOf(r.LeaseID)) != 0 {
		t.Fatalf("a batch with nothing left is kept: %+v", g)
	}
	m.advance(time.Millisecond)
	if got := txids(m.mustPop(Lease{Queue: "q", Group: "g", Batch: 5})); !reflect.DeepEqual(got, []string{"m4"}) {
		t.Fatalf("next pop %v", got)
	}
	m.checkPartitionRecord("q", "p")
}

// TestDeleteMessageEveryOneLeavesAnEmptyPartition deletes every message of
// a partition pushed in several segments, and a later push is delivered.
func TestDeleteMessageEveryOneLeavesAnEmptyPartition(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "a1", "a2", "a3")...)
	m.push(items("q", "p", "b1")...)
	m.push(items("q", "p", "c1", "c2")...)
	pid := m.partition("q", "p").UUID
	for _, tx := range []string{"a2", "c1", "a1", "b1", "c2", "a3"} {
		if !m.deleteMessage(pid, tx).Found {
			t.Fatalf("delete %s", tx)
		}
		m.checkPartitionRecord("q", "p")
	}
	if p := m.partition("q", "p"); p.Messages != 0 || p.Bytes != 0 || p.Segments != 0 || p.FirstOffset != p.NextOffset {
		t.Fatalf("empty partition %+v", p)
	}
	m.push(items("q", "p", "d1")...)
	if got := m.drainGroup("q", "p", "g"); !reflect.DeepEqual(got, []string{"d1"}) {
		t.Fatalf("after emptying: %v", got)
	}
}

// deleteMessage is a deletion for the determinism log: mostly of a message
// some pop delivered (often inside a live batch), sometimes of one never
// pushed.
func (g *generator) deleteMessage() Command {
	if len(g.popped) == 0 || g.pick(5) == 0 {
		return &DeleteMessage{Partition: [16]byte{byte(g.pick(3))}, TxID: g.txid()}
	}
	r := g.popped[g.pick(len(g.popped))]
	p := r.Partitions[g.pick(len(r.Partitions))]
	return &DeleteMessage{Partition: p.PartitionID, TxID: p.Messages[g.pick(len(p.Messages))].TxID}
}

func TestDeleteMessageValidate(t *testing.T) {
	long := string(make([]byte, MaxNameBytes+1))
	if err := (&DeleteMessage{TxID: long}).Validate(); err == nil {
		t.Fatal("long transaction id accepted")
	}
	if err := (&DeleteMessage{TxID: "ok"}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestDeleteMessageEndingABatchResetsRetries: a batch that failed twice is
// ended by the deletion of its only message; the next message starts with no
// failures charged, so it is not dead-lettered before the queue's retry limit.
func TestDeleteMessageEndingABatchResetsRetries(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 2; o.DeadLetterQueue = true })
	m.push(items("q", "p", "a")...)
	pid := m.partition("q", "p").UUID
	for range 2 {
		r := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 1})
		if it := m.ack("g", ackTx(pid, "a", r.LeaseID, AckFailed)).Items[0]; !it.Success {
			t.Fatalf("failed ack %+v", it)
		}
		m.advance(time.Millisecond)
	}
	m.mustPop(Lease{Queue: "q", Group: "g", Batch: 1}) // a, third delivery
	if !m.deleteMessage(pid, "a").Found {
		t.Fatal("delete a")
	}
	if g := m.group("q", "p", "g"); g.HasBatch() {
		t.Fatalf("batch kept %+v", g)
	}
	m.push(items("q", "p", "b")...)
	m.advance(time.Millisecond)
	r := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 1})
	if rc := r.Partitions[0].Messages[0].RetryCount; rc != 0 {
		t.Errorf("b, never failed, delivered with retryCount %d", rc)
	}
	// One failure of b: with retryLimit 2 it must be redelivered, not dead-lettered.
	if it := m.ack("g", ackTx(pid, "b", r.LeaseID, AckFailed)).Items[0]; it.DLQ || it.Dropped {
		t.Errorf("b dead-lettered after its first failure: %+v", it)
	}
}

// TestDeleteMessageGapIsNotCounted: a message deleted from the middle of a
// partition leaves an offset gap inside the next batch, which the queue
// statistics count neither as processing while the batch is leased nor as
// completed once it is acked.
func TestDeleteMessageGapIsNotCounted(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "a1", "a2", "a3", "a4")...)
	pid := m.partition("q", "p").UUID
	m.deleteMessage(pid, "a2")
	r := m.mustPop(Lease{Queue: "q", Batch: 2}) // queue mode: a1, a3
	if got := txids(r); !reflect.DeepEqual(got, []string{"a1", "a3"}) {
		t.Fatalf("popped %v", got)
	}
	stats := func() MessageStats { return must1(m.f.QueueView("q", m.now.UnixMicro(), false)).Stats }
	if got, want := stats(), (MessageStats{Total: 3, Processing: 2, Pending: 1}); got != want {
		t.Errorf("leased: stats %+v, want %+v (a4 is pending)", got, want)
	}
	m.ack("", ackAll(r, AckCompleted)...)
	if got, want := stats(), (MessageStats{Total: 3, Completed: 2, Pending: 1}); got != want {
		t.Errorf("acked: stats %+v, want %+v (a4 is pending)", got, want)
	}
}

// TestDeleteMessageGapIsNotConsumed: an auto-ack pop over a gap left by a
// deletion delivers two messages and counts two consumed.
func TestDeleteMessageGapIsNotConsumed(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "a1", "a2", "a3")...)
	pid := m.partition("q", "p").UUID
	m.deleteMessage(pid, "a2")
	r := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 10, AutoAck: true})
	if r.Count() != 2 {
		t.Fatalf("delivered %v", txids(r))
	}
	if g := m.group("q", "p", "g"); g.Consumed != 2 {
		t.Errorf("2 messages consumed, counted %d", g.Consumed)
	}
}

// TestDeleteMessageGapAndPurgeCount: an OJS purge of the backlog counts a live
// batch's stored messages, not its offset range, so a gap left by a deletion
// inside it does not hide a purged message from the count.
func TestDeleteMessageGapAndPurgeCount(t *testing.T) {
	m := newMachine(t)
	m.push(items("pq", "", "1", "2", "3", "4")...)
	pid := m.partition("pq", "").UUID
	m.deleteMessage(pid, "2")
	pr := m.pop(wild("pq", 2))
	if got := txids(pr); !reflect.DeepEqual(got, []string{"1", "3"}) {
		t.Fatalf("popped %v", got)
	}
	r := m.ojsOK(&OJSPurgeQueue{Name: "pq", States: PurgeBacklog})
	if got := m.stored("pq", ""); !reflect.DeepEqual(got, []string{"1", "3"}) {
		t.Fatalf("stored after purge %v", got)
	}
	if r.Affected != 1 {
		t.Errorf("purged 1 message (4), reported %d", r.Affected)
	}
}

// TestDeleteMessageThenRepushUnderTheLease: a leased message is deleted and
// its transaction id pushed again, inside the dedup window: a duplicate, so
// nothing is stored. The consumer acks its batch with its lease: the ack of
// the deleted message is unresolvable (queen-api.md 3.12), and the group goes
// on with the messages after the batch.
func TestDeleteMessageThenRepushUnderTheLease(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3")...)
	pid := m.partition("q", "p").UUID
	r := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 3})
	if !m.deleteMessage(pid, "m2").Found {
		t.Fatal("delete m2")
	}
	m.push(items("q", "p", "m4", "m5")...)
	if pr := m.push(items("q", "p", "m2")...); pr.Items[0].Status != PushDuplicate { // a corrected m2
		t.Fatalf("re-push of m2 inside the window: %+v", pr.Items[0])
	}
	res := m.ack("g", ackTx(pid, "m1", r.LeaseID, AckCompleted), ackTx(pid, "m2", r.LeaseID, AckCompleted),
		ackTx(pid, "m3", r.LeaseID, AckCompleted))
	if it := res.Items[1]; it.Resolved {
		t.Errorf("ack of the deleted m2 resolved: %+v", it)
	}
	m.advance(time.Millisecond)
	if got := m.drainGroup("q", "p", "g"); !reflect.DeepEqual(got, []string{"m4", "m5"}) {
		t.Errorf("g then receives %v, want [m4 m5]", got)
	}
}

// TestDeleteMessageLeavesNothingAcked: deleting a live batch's last message
// takes it out of the delivered count, so the status view does not count it
// as acked.
func TestDeleteMessageLeavesNothingAcked(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "a1", "a2", "a3")...)
	pid := m.partition("q", "p").UUID
	m.mustPop(Lease{Queue: "q", Group: "g", Batch: 3})
	m.deleteMessage(pid, "a3")
	b, ok := NewBuckets(m.now.Add(-time.Hour).UnixMicro(), m.now.UnixMicro(), time.Minute.Microseconds())
	if !ok {
		t.Fatal("buckets")
	}
	st := must1(m.f.Status(Scope{Queue: "q"}, b, m.now.UnixMicro()))
	if st.Leases.TotalAcked != 0 {
		t.Errorf("nothing acked; status counts %d acked of %d delivered", st.Leases.TotalAcked, st.Leases.TotalBatchSize)
	}
}

// TestDeleteMessageOfARepeatedID: an id stored twice in a partition (pushed
// again after the dedup window, here with dedup off) names its newest
// occurrence, and that is what DELETE removes. The older one stays stored and
// is delivered and acked as any message, but the id no longer addresses it
// (README): re-pointing the index would mean reading the partition back.
func TestDeleteMessageOfARepeatedID(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DedupWindowSeconds = 0 })
	m.push(items("q", "p", "x", "y")...)
	m.push(items("q", "p", "x")...)
	pid := m.partition("q", "p").UUID
	if !m.deleteMessage(pid, "x").Found {
		t.Fatal("delete x")
	}
	if got := m.stored("q", "p"); !reflect.DeepEqual(got, []string{"x", "y"}) {
		t.Fatalf("stored %v", got)
	}
	if m.deleteMessage(pid, "x").Found {
		t.Fatal("the id still addresses a message")
	}
	r := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 10})
	if got := txids(r); !reflect.DeepEqual(got, []string{"x", "y"}) {
		t.Fatalf("delivered %v", got)
	}
	res := m.ack("g", ackAll(r, AckCompleted)...)
	if !res.Items[0].Success || !res.Items[1].Success || !res.Items[1].LeaseReleased {
		t.Fatalf("acks of the batch %+v", res.Items)
	}
}

// TestForgetDeletedTxIDs: a deletion inside the dedup window is remembered
// until the window closes; the leader's sweep then forgets it, in bounded
// steps, and the id is free.
func TestForgetDeletedTxIDs(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DedupWindowSeconds = 60 })
	m.push(items("q", "p", "a", "c")...)
	m.advance(10 * time.Second)
	m.push(items("q", "p", "b")...)
	pid := m.partition("q", "p").UUID
	m.deleteMessage(pid, "a")
	m.deleteMessage(pid, "b")
	if due, err := m.f.DeletedTxIDsDue(m.now.UnixMicro()); err != nil || due {
		t.Fatalf("due inside the window: %v %v", due, err)
	}
	m.advance(55 * time.Second) // a's window closed 5 s ago, b's closes in 5 s
	if due, _ := m.f.DeletedTxIDsDue(m.now.UnixMicro()); !due {
		t.Fatal("a's expired memory is not due")
	}
	if pr := m.push(items("q", "p", "a", "b")...); pr.Items[0].Status != PushQueued || pr.Items[1].Status != PushDuplicate {
		t.Fatalf("pushes %+v", pr.Items)
	}
	r := m.apply(&ForgetDeletedTxIDs{Max: 1})[0].(*ForgetDeletedTxIDsResult)
	if *r != (ForgetDeletedTxIDsResult{Forgot: 1, More: false}) {
		t.Fatalf("forget %+v", r)
	}
	m.advance(10 * time.Second)
	m.deleteMessage(pid, "c") // c was pushed 75 s ago: nothing to remember
	r = m.apply(&ForgetDeletedTxIDs{Max: 1})[0].(*ForgetDeletedTxIDsResult)
	if *r != (ForgetDeletedTxIDsResult{Forgot: 1, More: false}) {
		t.Fatalf("second forget %+v", r)
	}
	if due, _ := m.f.DeletedTxIDsDue(m.now.UnixMicro() + 1e12); due {
		t.Fatal("memory left after forgetting")
	}
	if res, _ := m.catch(&ForgetDeletedTxIDs{}); res[0].(*ErrorResult) == nil {
		t.Fatal("a budget of 0 is applied")
	}
}
