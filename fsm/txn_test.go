package fsm

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

func TestTransactionPushAndAck(t *testing.T) {
	m := newMachine(t)
	m.push(items("stageA", "p", "in")...)
	r := m.mustPop(Lease{Queue: "stageA", Batch: 1})
	tr := m.txn(
		opAck("", ackAll(r, AckCompleted)[0]),
		opPush(item("stageB.x", "p", "out1", `1`), item("stageB.x", "p", "out2", `2`)),
	)
	if !tr.Success || tr.Error != "" || len(tr.Results) != 3 {
		t.Fatalf("transaction %+v", tr)
	}
	a := tr.Results[0]
	if a.Kind != OpAck || !a.Success || a.TxID != "in" || a.DLQ {
		t.Fatalf("ack result %+v", a)
	}
	pid := m.partition("stageB.x", "p").UUID
	for i, res := range tr.Results[1:] {
		if res.Kind != OpPush || !res.Success || res.Status != PushQueued || res.PartitionID != pid ||
			res.Queue != "stageB.x" || res.TxID != seq("out", 2)[i] || res.MessageID == ([16]byte{}) {
			t.Fatalf("push result %d: %+v", i, res)
		}
	}
	if g := m.group("stageA", "p", QueueMode); g.Next != 2 || g.HasLease() {
		t.Fatalf("input not consumed: %+v", g)
	}
	q := m.queue("stageB.x")
	if q == nil || q.Namespace != "stageB" || q.Task != "x" || q.Options.LeaseTime != 60 {
		t.Fatalf("implicit creation in a transaction: %+v", q)
	}
	out := m.mustPop(Lease{Queue: "stageB.x", Batch: 10})
	if got := txids(out); !slices.Equal(got, []string{"out1", "out2"}) {
		t.Fatalf("output %v", got)
	}
	if out.Partitions[0].Messages[0].ID != tr.Results[1].MessageID {
		t.Fatal("push result id differs from the stored id")
	}
}

func TestTransactionAtomicityUnresolvableAckRollsBackPush(t *testing.T) {
	// Two machines with the same history; one runs a transaction whose push
	// is followed by an unresolvable ack, the other a transaction with only
	// the failing ack. Same log index, stamp and counters: equal digests
	// prove the push left nothing behind (no queue, partition, message,
	// transaction id, sequence number).
	setup := func() *machine {
		m := newMachine(t)
		m.push(items("q", "p", "m1")...)
		m.mustPop(Lease{Queue: "q", Batch: 1})
		return m
	}
	bad := ackTx([16]byte{0xba, 0xd}, "nope", [16]byte{}, AckCompleted)
	a, b := setup(), setup()
	trA := a.txn(opPush(item("fresh", "p", "x", `1`), item("q", "p", "m2", `2`)), opAck("", bad))
	trB := b.txn(opAck("", bad))
	if trA.Success || trA.Error != "ACK operation failed: unresolvable" || trB.Success {
		t.Fatalf("transactions %+v %+v", trA, trB)
	}
	if last := trA.Results[len(trA.Results)-1]; last.Kind != OpAck || last.Success || last.Error != ErrUnresolvable {
		t.Fatalf("failing op %+v", last)
	}
	if a.digest() != b.digest() {
		t.Fatal("a failed transaction left writes behind")
	}
	if a.queue("fresh") != nil {
		t.Fatal("queue created by a failed transaction")
	}
	if p := a.partition("q", "p"); p.Messages != 1 {
		t.Fatalf("message pushed by a failed transaction: %+v", p)
	}
	for _, m := range []*machine{a, b} {
		if r := m.pop(Lease{Queue: "q", Group: "other", Batch: 10}); !slices.Equal(txids(r), []string{"m1"}) {
			t.Fatalf("other group sees %v", txids(r))
		}
	}
	// The ids of the rolled-back push are handed out again, on both machines alike.
	pa := a.push(items("q", "p", "m2")...)
	pb := b.push(items("q", "p", "m2")...)
	if pa.Items[0] != pb.Items[0] || a.digest() != b.digest() {
		t.Fatal("machines diverged after a rolled-back transaction")
	}
}

func TestTransactionFailureRollsBackEarlierAcks(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 0 })
	m.push(items("q", "p", "m1", "m2")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 2})
	before := *m.group("q", "p", QueueMode)
	lp := r.Partitions[0]
	tr := m.txn(
		opAck("", ackOf(lp, lp.Messages[0], r.LeaseID, AckDLQ)),
		opAck("", ackOf(lp, lp.Messages[1], r.LeaseID, AckCompleted)),
		opAck("G", ackTx(lp.PartitionID, "m1", [16]byte{}, AckCompleted)),
		TxOp{Kind: OpInvalid, Name: "publish"},
	)
	if tr.Success || !strings.Contains(tr.Error, "publish") || len(tr.Results) != 4 {
		t.Fatalf("transaction %+v", tr)
	}
	if g := m.group("q", "p", QueueMode); *g != before {
		t.Fatalf("state changed: %+v -> %+v", before, *g)
	}
	if m.group("q", "p", "G") != nil {
		t.Fatal("group state created by a failed transaction")
	}
	if dl := m.deadLetters("q"); len(dl) != 0 {
		t.Fatalf("dead letter kept by a failed transaction: %+v", dl)
	}
	// The lease is untouched: the messages come back when it expires.
	if r2 := m.pop(Lease{Queue: "q", Batch: 10}); r2.Count() != 0 {
		t.Fatal("lease released by a failed transaction")
	}
	m.advance(300 * time.Second)
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("after expiry %v", got)
	}
}

func TestTransactionInvalidLeaseFails(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1})
	wrong := r.LeaseID
	wrong[0] ^= 0xff
	tr := m.txn(opPush(item("q", "p", "m2", `2`)), opAck("", ackOf(r.Partitions[0], r.Partitions[0].Messages[0], wrong, AckCompleted)))
	if tr.Success || tr.Error != "ACK operation failed: "+ErrInvalidLease {
		t.Fatalf("transaction %+v", tr)
	}
	if p := m.partition("q", "p"); p.Messages != 1 {
		t.Fatal("push of a failed transaction stored")
	}
}

func TestTransactionDuplicatePushDoesNotFail(t *testing.T) {
	m := newMachine(t)
	orig := m.push(items("q", "p", "dup")...)
	tr := m.txn(opPush(item("q", "p", "dup", `again`), item("q", "p", "new", `1`)))
	if !tr.Success {
		t.Fatalf("transaction %+v", tr)
	}
	if d := tr.Results[0]; !d.Success || d.Status != PushDuplicate || d.MessageID != orig.Items[0].MessageID {
		t.Fatalf("duplicate item %+v", d)
	}
	if n := tr.Results[1]; n.Status != PushQueued {
		t.Fatalf("new item %+v", n)
	}
	// Retrying the whole transaction gives the same outcome.
	tr2 := m.txn(opPush(item("q", "p", "dup", `again`), item("q", "p", "new", `1`)))
	if !tr2.Success || tr2.Results[1].Status != PushDuplicate || tr2.Results[1].MessageID != tr.Results[1].MessageID {
		t.Fatalf("retried transaction %+v", tr2)
	}
	if p := m.partition("q", "p"); p.Messages != 2 {
		t.Fatalf("%d messages", p.Messages)
	}
}

func TestTransactionFailedChargesBudget(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 1 })
	m.push(items("q", "p", "m1")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1})
	tr := m.txn(opAck("", ackAll(r, AckFailed)[0]))
	if !tr.Success || tr.Results[0].DLQ {
		t.Fatalf("first failed %+v", tr)
	}
	if g := m.group("q", "p", QueueMode); g.Retry != 1 || g.HasLease() || g.Next != 1 {
		t.Fatalf("group %+v", g)
	}
	if len(m.deadLetters("q")) != 0 {
		t.Fatal("failed inside a transaction dead-lettered with budget left")
	}
	r = m.mustPop(Lease{Queue: "q", Batch: 1})
	if r.Partitions[0].Messages[0].RetryCount != 1 {
		t.Fatalf("retryCount %d", r.Partitions[0].Messages[0].RetryCount)
	}
	tr = m.txn(opAck("", ackAll(r, AckFailed)[0]))
	if !tr.Success || !tr.Results[0].DLQ {
		t.Fatalf("exhausted %+v", tr)
	}
	if dl := m.deadLetters("q"); len(dl) != 1 || dl[0].RetryCount != 1 {
		t.Fatalf("dead letters %+v", dl)
	}
	if g := m.group("q", "p", QueueMode); g.Retry != 0 || g.HasLease() || g.Next != 2 {
		t.Fatalf("group %+v", g)
	}
}

func TestTransactionFailedDropsWithBothFlagsFalse(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) {
		o.RetryLimit, o.DeadLetterQueue, o.DLQAfterMaxRetries = 0, false, false
	})
	m.push(items("q", "p", "m1")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1})
	tr := m.txn(opAck("", ackAll(r, AckFailed)[0]))
	if !tr.Success || tr.Results[0].DLQ {
		t.Fatalf("transaction %+v", tr)
	}
	if len(m.deadLetters("q")) != 0 {
		t.Fatal("dead-lettered")
	}
	if g := m.group("q", "p", QueueMode); g.Next != 2 || g.HasLease() {
		t.Fatalf("group %+v", g)
	}
}

func TestTransactionDLQReleasesLease(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 3})
	lp := r.Partitions[0]
	tr := m.txn(opAck("", ackOf(lp, lp.Messages[0], r.LeaseID, AckDLQ)))
	if !tr.Success || !tr.Results[0].DLQ {
		t.Fatalf("transaction %+v", tr)
	}
	if g := m.group("q", "p", QueueMode); g.Next != 2 || g.HasLease() {
		t.Fatalf("group %+v (position at m1, lease released)", g)
	}
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"m2", "m3"}) {
		t.Fatalf("after transactional dlq %v", got)
	}
}

func TestTransactionRetryStatusFails(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 1})
	before := *m.group("q", "p", QueueMode)
	tr := m.txn(opAck("", ackAll(r, AckRetry)[0]))
	if tr.Success || tr.Error != "ACK operation failed: Unknown status: retry" {
		t.Fatalf("transaction %+v", tr)
	}
	it := ackAll(r, AckUnknown)[0]
	it.StatusText = "nah"
	tr = m.txn(opAck("", it))
	if tr.Success || tr.Error != "ACK operation failed: Unknown status: nah" {
		t.Fatalf("transaction %+v", tr)
	}
	if g := m.group("q", "p", QueueMode); *g != before {
		t.Fatalf("state changed %+v -> %+v", before, *g)
	}
}

func TestTransactionUnknownOpFails(t *testing.T) {
	m := newMachine(t)
	tr := m.txn(opPush(item("q", "p", "m1", `1`)), TxOp{Kind: 99, Name: "mystery"})
	if tr.Success || !strings.Contains(tr.Error, "mystery") {
		t.Fatalf("transaction %+v", tr)
	}
	if last := tr.Results[len(tr.Results)-1]; last.Kind != OpInvalid || last.Success {
		t.Fatalf("failing op %+v", last)
	}
	if m.queue("q") != nil {
		t.Fatal("push of a failed transaction kept")
	}
}

func TestTransactionAckOfNeverPoppedMessage(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3")...)
	pid := m.partition("q", "p").UUID
	tr := m.txn(opAck("G", ackTx(pid, "m2", [16]byte{}, AckCompleted)))
	if !tr.Success {
		t.Fatalf("transaction %+v", tr)
	}
	if g := m.group("q", "p", "G"); g == nil || g.Next != 3 || g.HasLease() {
		t.Fatalf("group %+v", g)
	}
	if got := txids(m.pop(Lease{Queue: "q", Group: "G", Batch: 10})); !slices.Equal(got, []string{"m3"}) {
		t.Fatalf("G next %v", got)
	}
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("queue mode untouched %v", got)
	}
}

func TestTransactionAckOfMessagePushedEarlierInIt(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "seed")...) // the partition exists, so its id is known
	pid := m.partition("q", "p").UUID
	tr := m.txn(opPush(item("q", "p", "m1", `1`)), opAck("", ackTx(pid, "m1", [16]byte{}, AckCompleted)))
	if !tr.Success {
		t.Fatalf("transaction %+v", tr)
	}
	if r := m.pop(Lease{Queue: "q", Batch: 10}); r.Count() != 0 {
		t.Fatalf("consumed in the same transaction, got %v", txids(r))
	}
}

func TestTransactionEmpty(t *testing.T) {
	m := newMachine(t)
	if tr := m.txn(); !tr.Success || len(tr.Results) != 0 {
		t.Fatalf("empty transaction %+v", tr)
	}
}

// An ack that follows a push to the same partition inside one transaction
// sees the pushed message even when an earlier ack of the transaction had
// loaded the partition: a dlq of it writes its dead-letter entry.
func TestTransactionAckSeesMessagePushedAfterEarlierAck(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "a")...)
	pid := m.partition("q", "p").UUID
	tr := m.txn(
		opAck("", ackTx(pid, "a", [16]byte{}, AckCompleted)),
		opPush(items("q", "p", "x")...),
		opAck("", ackTx(pid, "x", [16]byte{}, AckDLQ)),
	)
	if !tr.Success || !tr.Results[2].DLQ {
		t.Fatalf("transaction %+v", tr)
	}
	dl := m.deadLetters("q")
	if len(dl) != 1 || dl[0].TxID != "x" || string(dl[0].Payload) != `"x"` {
		t.Fatalf("dead letters %+v", dl)
	}
	if g := m.group("q", "p", QueueMode); g.Next != 3 || g.Consumed != 2 {
		t.Fatalf("group %+v (both messages consumed)", g)
	}
}
