package checker

import (
	"strings"
	"testing"

	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

// A delivery is of m only when it carries the transaction id pushed as m.
// Another partition's message delivered at m's place, or another run's
// with m's seq, was never pushed there (unexpected), and does not deliver
// m: m is lost for that group.
func TestCheckerForeignTxnIsUnexpected(t *testing.T) {
	t.Run("other-partition", func(t *testing.T) {
		b := &h{}
		b.push(0, 10, history.OK, 0)
		b.add(history.Op{Kind: history.KindPop, Start: 20, End: 25, Outcome: history.OK, Queue: q, Group: "g1", Lease: "L",
			Items: []history.Item{{Partition: p, Seq: 0, Txn: history.Txn("run", q, "p1", 0), MsgID: "zz", DataSeq: 0}}})
		b.final(100, 1, "d", "d", "d")
		res := check(t, b)
		if res.ViolationKinds[KindPhantom] != 1 || res.ViolationKinds[KindLost] != 1 || res.ViolationKinds[KindStoredTwice] != 0 {
			t.Fatalf("kinds %v; want one %s and one %s, no %s", res.ViolationKinds, KindPhantom, KindLost, KindStoredTwice)
		}
		expect(t, res, 1, 0, 0, 1, 0, false)
	})
	t.Run("other-run", func(t *testing.T) {
		b := &h{}
		b.push(0, 10, history.OK, 0)
		b.pop(20, 25, "g1", 0)
		b.ack(26, 28, "g1", "completed", history.OK, 0)
		b.add(history.Op{Kind: history.KindPop, Start: 30, End: 35, Outcome: history.OK, Queue: q, Group: "g2", Lease: "L",
			Items: []history.Item{{Partition: p, Seq: 0, Txn: history.Txn("oldrun", q, p, 0), DataSeq: 0}}})
		b.final(100, 1, "d", "d", "d")
		res := check(t, b)
		expect(t, res, 1, 0, 0, 1, 0, false) // g2: never-pushed, and the real seq 0 lost
		if res.ViolationKinds[KindPhantom] != 1 {
			t.Fatalf("kinds %v", res.ViolationKinds)
		}
	})
	t.Run("unparsable", func(t *testing.T) {
		// Seq 0 is also what the workload records for an id it cannot
		// parse: such a delivery must not stand for the real seq 0.
		b := &h{}
		b.push(0, 10, history.OK, 0)
		b.add(history.Op{Kind: history.KindPop, Start: 20, End: 25, Outcome: history.OK, Queue: q, Group: "g1", Lease: "L",
			Items: []history.Item{{Partition: p, Seq: 0, Txn: "not-a-chaos-id", DataSeq: -1}}})
		b.final(100, 1, "d", "d", "d")
		expect(t, check(t, b), 1, 0, 0, 1, 0, false)
	})
}

// Every node stores the same number of messages in each partition, even
// when each count lies within what the pushes allow.
func TestCheckerFinalTotalsDifferAcrossNodes(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0)
	b.push(20, 30, history.Unknown, 1) // may or may not be stored
	b.pop(40, 45, "g1", 0)
	b.ack(50, 55, "g1", "completed", history.OK, 0)
	b.final(100, 1, "d", "d", "d")
	b.ops[len(b.ops)-1].States[1].Totals[q+"/"+p] = 2 // node2 stores seq 1, node1 and node3 do not
	res := check(t, b)
	if res.OK || res.Divergence == 0 || res.ViolationKinds[KindCountsDiffer] != 1 {
		t.Fatalf("nodes storing 1, 2 and 1 messages in %s/%s passed: ok %v, divergence %d, kinds %v", q, p, res.OK, res.Divergence, res.ViolationKinds)
	}
	if d := res.Violations[0].Detail; !strings.Contains(d, "node2 2") {
		t.Fatalf("detail %q does not name node2's count", d)
	}
}

// A node whose count read failed has no counts to judge: whatever partial
// totals it carries, a partition the read did not reach is not "stored 0".
func TestCheckerFinalTotalsOfFailedReadNotJudged(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0, 1)
	b.pop(20, 25, "g1", 0, 1)
	b.ack(30, 35, "g1", "completed", history.OK, 0, 1)
	b.final(100, 2, "d", "d", "d")
	st := &b.ops[len(b.ops)-1].States[2]
	st.Totals, st.Error = map[string]int64{}, "totals: context deadline exceeded"
	res := check(t, b)
	expect(t, res, 0, 0, 0, 0, 0, true)
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "node3") {
		t.Fatalf("notes %q: want one saying node3's counts were not checked", res.Notes)
	}
}

// A message delivered twice to a group needs a cause between the two pops;
// a failed ack whose every item was rejected released nothing, as an ack
// answered with an item error moves nothing.
func TestCheckerRejectedFailedAckIsNoCause(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0)
	b.pop(20, 25, "g1", 0)
	b.add(history.Op{Kind: history.KindAck, Start: 30, End: 35, Outcome: history.OK, Queue: q, Group: "g1", Status: "failed", Lease: "L",
		Items: []history.Item{{Partition: p, Seq: 0, Txn: txn(0), Success: false, Status: "Invalid or expired lease"}}})
	b.pop(1000, 1005, "g1", 0) // one second later: the 5 s lease cannot have expired
	b.ack(1010, 1015, "g1", "completed", history.OK, 0)
	b.final(7000, 1, "d", "d", "d")
	res := check(t, withLease(b))
	expect(t, res, 0, 0, 1, 0, 0, false)
	if res.ViolationKinds[KindNoCause] != 1 {
		t.Fatalf("kinds %v", res.ViolationKinds)
	}
}

// Acks are cumulative: m delivered to G by a pop sent after an ack of a
// later message was answered success is a duplicate.
func TestCheckerCumulativeAckCoversEarlierMessages(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0, 1, 2)
	b.pop(20, 25, "g1", 0, 1, 2)
	b.ack(30, 35, "g1", "completed", history.OK, 2)
	b.pop(40, 45, "g1", 1)
	b.final(100, 3, "d", "d", "d")
	res := check(t, b)
	expect(t, res, 0, 1, 0, 0, 0, false)
}

// Legitimate retries raise nothing: a push whose answer was lost, retried
// with the same transaction ids and answered duplicate with the original
// ids; an unconfirmed push (unknown, then failed) that landed and is
// delivered; an unconfirmed push that did not land; a failed ack whose
// outcome is unknown releasing the batch at once.
func TestCheckerLegitimateRetriesPass(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.Unknown, 0, 1)
	b.add(history.Op{Kind: history.KindPush, Start: 20, End: 30, Outcome: history.OK, Queue: q,
		Items: []history.Item{{Partition: p, Seq: 0, Txn: txn(0), Status: "duplicate", MsgID: msgID(0)}, {Partition: p, Seq: 1, Txn: txn(1), Status: "duplicate", MsgID: msgID(1)}}})
	b.push(40, 50, history.Unknown, 2)
	b.push(60, 70, history.Fail, 2)
	b.push(80, 90, history.Unknown, 3)
	b.pop(100, 105, "g1", 0, 1, 2)
	b.ack(110, 115, "g1", "failed", history.Unknown, 0, 1, 2)
	b.pop(120, 125, "g1", 0, 1, 2)
	b.ack(130, 135, "g1", "completed", history.OK, 0, 1, 2)
	b.final(7000, 3, "d", "d", "d")
	res := check(t, withLease(b))
	expect(t, res, 0, 0, 0, 0, 0, true)
}

// Stored-twice is counted once per message, whatever the group, and
// delivered-after-completed once per message and group: neither may
// swallow the other, in queue mode (group "") as in a named group.
func TestCheckerQueueModeDupDeliveryNotSwallowedByStoredTwice(t *testing.T) {
	for _, g := range []string{"g1", ""} {
		b := &h{}
		b.push(0, 10, history.OK, 0)
		b.add(history.Op{Kind: history.KindPush, Start: 20, End: 30, Outcome: history.OK, Queue: q,
			Items: []history.Item{{Partition: p, Seq: 0, Txn: txn(0), Status: "queued", MsgID: "second"}}})
		b.pop(40, 45, g, 0)
		b.ack(50, 55, g, "completed", history.OK, 0)
		b.add(history.Op{Kind: history.KindPop, Start: 60, End: 65, Outcome: history.OK, Queue: q, Group: g, Lease: "L2",
			Items: []history.Item{{Partition: p, Seq: 0, Txn: txn(0), MsgID: "second", DataSeq: 0}}})
		b.final(100, 2, "d", "d", "d")
		res := check(t, b)
		if res.ViolationKinds[KindStoredTwice] != 1 || res.ViolationKinds[KindDupDelivery] != 1 {
			t.Errorf("group %s: kinds %v; want one %s and one %s", GroupName(g), res.ViolationKinds, KindStoredTwice, KindDupDelivery)
		}
	}
}
