package checker

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

// h builds hand-made histories. Times are in milliseconds, converted to the
// history's nanoseconds.
type h struct {
	ops []history.Op
	id  int64
}

const q, p = "q", "p0"

func txn(seq int64) string { return history.Txn("run", q, p, seq) }

func (b *h) add(op history.Op) *h {
	b.id++
	op.ID = b.id
	op.Start *= 1e6
	op.End *= 1e6
	b.ops = append(b.ops, op)
	return b
}

func msgID(seq int64) string { return "m" + string(rune('a'+seq)) }

// push records a push of seqs answered with outcome (queued on ok).
func (b *h) push(t0, t1 int64, outcome string, seqs ...int64) *h {
	op := history.Op{Kind: history.KindPush, Start: t0, End: t1, Outcome: outcome, Queue: q}
	for _, s := range seqs {
		it := history.Item{Partition: p, Seq: s, Txn: txn(s)}
		if outcome == history.OK {
			it.Status, it.MsgID = "queued", msgID(s)
		}
		op.Items = append(op.Items, it)
	}
	return b.add(op)
}

// pop records a pop answered ok delivering seqs to group g.
func (b *h) pop(t0, t1 int64, g string, seqs ...int64) *h {
	op := history.Op{Kind: history.KindPop, Start: t0, End: t1, Outcome: history.OK, Queue: q, Group: g, Lease: "L"}
	for _, s := range seqs {
		op.Items = append(op.Items, history.Item{Partition: p, Seq: s, Txn: txn(s), MsgID: msgID(s), DataSeq: s})
	}
	return b.add(op)
}

// ack records a batch ack with status and outcome; on ok every item succeeds.
func (b *h) ack(t0, t1 int64, g, status, outcome string, seqs ...int64) *h {
	op := history.Op{Kind: history.KindAck, Start: t0, End: t1, Outcome: outcome, Queue: q, Group: g, Status: status, Lease: "L"}
	for _, s := range seqs {
		op.Items = append(op.Items, history.Item{Partition: p, Seq: s, Txn: txn(s), Success: outcome == history.OK})
	}
	return b.add(op)
}

// final records the final state; digests by node.
func (b *h) final(t int64, total int64, digests ...string) *h {
	var st []history.NodeState
	ok := true
	for i, d := range digests {
		st = append(st, history.NodeState{Node: []string{"node1", "node2", "node3"}[i], AppliedIndex: 100, Digest: d,
			Totals: map[string]int64{q + "/" + p: total}})
		ok = ok && d == digests[0]
	}
	return b.add(history.Op{Kind: history.KindFinal, Start: t, End: t, States: st, Passed: &ok})
}

func check(t *testing.T, b *h) *Result {
	t.Helper()
	// Round-trip through the file format, as the real runs do.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i := range b.ops {
		if err := enc.Encode(&b.ops[i]); err != nil {
			t.Fatal(err)
		}
	}
	ops, err := history.Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	res := Check(ops, Options{RequireFinal: true})
	for _, v := range res.Violations {
		t.Logf("violation: %s", v)
	}
	return res
}

func expect(t *testing.T, res *Result, lost, dup, reord, unexpected, div int, ok bool) {
	t.Helper()
	if res.Lost != lost || res.Duplicated != dup || res.Reordered != reord || res.Unexpected != unexpected ||
		res.Divergence != div || res.OK != ok {
		t.Fatalf("got lost %d, duplicated %d, reordered %d, unexpected %d, divergence %d, ok %v; want %d, %d, %d, %d, %d, %v (kinds %v)",
			res.Lost, res.Duplicated, res.Reordered, res.Unexpected, res.Divergence, res.OK, lost, dup, reord, unexpected, div, ok,
			res.ViolationKinds)
	}
}

// clean is a history with every documented kind of redelivery and nothing wrong.
func clean() *h {
	b := &h{}
	b.push(0, 10, history.OK, 0, 1, 2)
	b.push(20, 30, history.OK, 3)
	// Group g1: delivered 0..2, acked; then 3.
	b.pop(40, 45, "g1", 0, 1, 2)
	b.ack(50, 55, "g1", "completed", history.OK, 0, 1, 2)
	b.pop(60, 65, "g1", 3)
	b.ack(70, 75, "g1", "completed", history.OK, 3)
	// Group g2: a failed ack redelivers the batch at once.
	b.pop(40, 46, "g2", 0, 1)
	b.ack(50, 56, "g2", "failed", history.OK, 0, 1)
	b.pop(60, 66, "g2", 0, 1, 2)
	// Prefix acked, the rest abandoned: after the lease expired the
	// delivery restarts right after the prefix (backwards, allowed).
	b.ack(70, 76, "g2", "completed", history.OK, 0)
	b.pop(6000, 6005, "g2", 1, 2, 3)
	b.ack(6010, 6015, "g2", "completed", history.OK, 1, 2, 3)
	// Queue mode: an ack whose outcome is unknown may have moved the
	// position, so the next delivery may start after it...
	b.pop(40, 47, "", 0, 1)
	b.ack(50, 57, "", "completed", history.Unknown, 0, 1)
	b.pop(60, 67, "", 2, 3)
	// ...and a late ack rejected for an expired lease moves nothing.
	b.ack(6000, 6001, "", "completed", history.OK, 2, 3)
	// Redelivered once the lease expired, and completed: every group
	// completed every message, as after the final drain.
	b.pop(6100, 6105, "", 2, 3)
	b.ack(6110, 6115, "", "completed", history.OK, 2, 3)
	b.final(7000, 4, "d", "d", "d")
	// The rejected ack: its items report failure.
	for i := range b.ops {
		if b.ops[i].Start == 6000*1e6 && b.ops[i].Group == "" {
			for j := range b.ops[i].Items {
				b.ops[i].Items[j].Success = false
				b.ops[i].Items[j].Status = "Invalid or expired lease"
			}
		}
	}
	return b
}

func TestCleanHistoryPasses(t *testing.T) {
	res := check(t, clean())
	expect(t, res, 0, 0, 0, 0, 0, true)
	if res.Messages.Confirmed != 4 || res.Deliveries != 18 || res.Redeliveries == 0 {
		t.Fatalf("messages %+v, deliveries %d, redeliveries %d", res.Messages, res.Deliveries, res.Redeliveries)
	}
	if !res.Converged || res.Operations.All.Total != 18 {
		t.Fatalf("converged %v, operations %+v", res.Converged, res.Operations.All)
	}
}

func TestLostWrite(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0, 1)
	b.pop(20, 25, "g1", 0, 1)
	b.ack(30, 35, "g1", "completed", history.OK, 0, 1)
	b.pop(20, 25, "g2", 0) // g2 never gets seq 1
	b.ack(30, 35, "g2", "completed", history.OK, 0)
	b.final(100, 2, "d", "d", "d")
	res := check(t, b)
	expect(t, res, 1, 0, 0, 0, 0, false)
	v := res.Violations[0]
	if v.Kind != KindLost || v.Group != "g2" || v.Seq != 1 {
		t.Fatalf("violation %+v", v)
	}
}

func TestLostWriteInFinalState(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0, 1)
	b.pop(20, 25, "g1", 0, 1)
	b.ack(30, 35, "g1", "completed", history.OK, 0, 1)
	b.final(100, 1, "d", "d", "d") // only one message stored
	res := check(t, b)
	expect(t, res, 3, 0, 0, 0, 0, false) // one per node
	if res.ViolationKinds[KindStoredLess] != 3 {
		t.Fatalf("kinds %v", res.ViolationKinds)
	}
}

func TestUnknownPushNeedNotExist(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0)
	b.push(20, 30, history.Unknown, 1) // never confirmed, never delivered
	b.pop(40, 45, "g1", 0)
	b.ack(50, 55, "g1", "completed", history.OK, 0)
	b.final(100, 1, "d", "d", "d")
	res := check(t, b)
	expect(t, res, 0, 0, 0, 0, 0, true)
	if res.Messages.UnknownOnly != 1 {
		t.Fatalf("messages %+v", res.Messages)
	}
}

func TestDuplicateDeliveryAfterCompletedAck(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0, 1)
	b.pop(20, 25, "g1", 0, 1)
	b.ack(30, 35, "g1", "completed", history.OK, 0, 1)
	b.pop(40, 45, "g1", 1) // seq 1 was acknowledged completed before this pop was sent
	b.final(100, 2, "d", "d", "d")
	res := check(t, b)
	expect(t, res, 0, 1, 0, 0, 0, false)
	if v := res.Violations[0]; v.Kind != KindDupDelivery || v.Seq != 1 {
		t.Fatalf("violation %+v", v)
	}
}

func TestConcurrentAckIsNotADuplicate(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0, 1)
	b.pop(20, 25, "g1", 0, 1)
	// The ack's answer arrives after the next pop was sent: the pop may
	// have been applied first (e.g. the lease had expired).
	b.ack(30, 50, "g1", "completed", history.OK, 0, 1)
	b.pop(40, 45, "g1", 0, 1)
	b.final(100, 2, "d", "d", "d")
	expect(t, check(t, b), 0, 0, 0, 0, 0, true)
}

func TestDuplicateStorage(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.Unknown, 0)
	b.push(20, 30, history.OK, 0) // the retry is queued: the first attempt must not have stored it
	b.pop(40, 45, "g1", 0)
	// ...but the first attempt did store it too: delivered again with another id.
	b.add(history.Op{Kind: history.KindPop, Start: 60, End: 65, Outcome: history.OK, Queue: q, Group: "g2",
		Items: []history.Item{{Partition: p, Seq: 0, Txn: txn(0), MsgID: "other", DataSeq: 0}}})
	b.ack(70, 75, "g1", "completed", history.OK, 0)
	b.ack(70, 75, "g2", "completed", history.OK, 0)
	b.final(100, 2, "d", "d", "d")
	res := check(t, b)
	// One stored-twice (counted once per message) plus the stored count
	// (2 > 1) on each node.
	expect(t, res, 0, 4, 0, 0, 0, false)
	if res.ViolationKinds[KindStoredTwice] != 1 || res.ViolationKinds[KindStoredMore] != 3 {
		t.Fatalf("kinds %v", res.ViolationKinds)
	}
}

func TestTwoQueuedResultsWithDifferentIDs(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0)
	b.add(history.Op{Kind: history.KindPush, Start: 20, End: 30, Outcome: history.OK, Queue: q,
		Items: []history.Item{{Partition: p, Seq: 0, Txn: txn(0), Status: "queued", MsgID: "second"}}})
	b.pop(40, 45, "g1", 0)
	b.ack(50, 55, "g1", "completed", history.OK, 0)
	b.final(100, 1, "d", "d", "d")
	res := check(t, b)
	expect(t, res, 0, 1, 0, 0, 0, false)
	if res.ViolationKinds[KindStoredTwice] != 1 {
		t.Fatalf("kinds %v", res.ViolationKinds)
	}
}

func TestReorderWithinBatch(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0, 1, 2)
	b.pop(20, 25, "g1", 0, 2, 1)
	b.ack(30, 35, "g1", "completed", history.OK, 0, 2, 1)
	b.final(100, 3, "d", "d", "d")
	res := check(t, b)
	expect(t, res, 0, 0, 2, 0, 0, false) // 2 after 0, then 1 after 2
	if res.ViolationKinds[KindOutOfOrder] != 2 {
		t.Fatalf("kinds %v", res.ViolationKinds)
	}
}

func TestSkippedMessage(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0, 1, 2)
	b.pop(20, 25, "g1", 0)
	b.ack(30, 35, "g1", "completed", history.OK, 0)
	b.pop(40, 45, "g1", 2) // seq 1 was never consumed
	b.pop(50, 55, "g1", 1) // and comes later: still out of order
	b.ack(60, 65, "g1", "completed", history.OK, 1, 2)
	b.final(100, 3, "d", "d", "d")
	res := check(t, b)
	expect(t, res, 0, 0, 1, 0, 0, false)
	if v := res.Violations[0]; v.Kind != KindSkipped || v.Seq != 2 {
		t.Fatalf("violation %+v", v)
	}
}

func TestRejectedAckDoesNotExcuseAJump(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0, 1)
	b.pop(20, 25, "g1", 0, 1)
	b.add(history.Op{Kind: history.KindAck, Start: 30, End: 35, Outcome: history.OK, Queue: q, Group: "g1", Status: "completed",
		Items: []history.Item{{Partition: p, Seq: 0, Txn: txn(0), Success: false, Status: "Invalid or expired lease"}}})
	b.pop(40, 45, "g1", 1)
	b.ack(50, 55, "g1", "completed", history.OK, 1)
	b.final(100, 2, "d", "d", "d")
	expect(t, check(t, b), 0, 0, 1, 0, 0, false)
}

func TestFailedPushDelivered(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.Fail, 0) // e.g. 503 no_leader: nothing applied
	b.pop(20, 25, "g1", 0)
	b.final(100, 1, "d", "d", "d")
	res := check(t, b)
	expect(t, res, 0, 3, 0, 1, 0, false) // and stored (on each node) although nothing could be
	if res.ViolationKinds[KindFailedApplied] != 1 {
		t.Fatalf("kinds %v", res.ViolationKinds)
	}
}

func TestPayloadMismatch(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0)
	b.add(history.Op{Kind: history.KindPop, Start: 20, End: 25, Outcome: history.OK, Queue: q, Group: "g1",
		Items: []history.Item{{Partition: p, Seq: 0, Txn: txn(0), MsgID: msgID(0), DataSeq: 7}}})
	b.ack(30, 35, "g1", "completed", history.OK, 0)
	b.final(100, 1, "d", "d", "d")
	expect(t, check(t, b), 0, 0, 0, 1, 0, false)
}

func TestDivergence(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0)
	b.pop(20, 25, "g1", 0)
	b.ack(30, 35, "g1", "completed", history.OK, 0)
	b.final(100, 1, "d", "d", "x")
	res := check(t, b)
	expect(t, res, 0, 0, 0, 0, 1, false)
	if res.Converged || res.Violations[0].Kind != KindDivergence {
		t.Fatalf("converged %v, %+v", res.Converged, res.Violations)
	}
}

func TestLaggingCheckpointIsNotConverged(t *testing.T) {
	b := clean()
	f := false
	b.add(history.Op{Kind: history.KindCheckpoint, Start: 80, End: 90, Label: "cp", Passed: &f, States: []history.NodeState{
		{Node: "node1", AppliedIndex: 10, Digest: "a"}, {Node: "node2", AppliedIndex: 9, Digest: "b"}}})
	res := check(t, b)
	expect(t, res, 0, 0, 0, 0, 1, false)
	if res.ViolationKinds[KindNotConverged] != 1 {
		t.Fatalf("kinds %v", res.ViolationKinds)
	}
}

func TestMissingFinalState(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0)
	b.pop(20, 25, "g1", 0)
	b.ack(30, 35, "g1", "completed", history.OK, 0)
	res := check(t, b)
	if res.OK || res.HaveFinalState {
		t.Fatalf("a history without final state passed")
	}
	if Check(b.ops, Options{}).OK != true {
		t.Fatalf("without RequireFinal the history should pass")
	}
}

func TestWindowsAvailabilityAndRecovery(t *testing.T) {
	b := clean()
	b.add(history.Op{Kind: history.KindWindow, Start: 15, End: 52, Label: "isolate leader", Window: 1})
	b.add(history.Op{Kind: history.KindRecovery, Start: 52, Window: 1, Recovery: &history.Recovery{Healthy: 2e9, Writes: 3e9}})
	res := check(t, b)
	expect(t, res, 0, 0, 0, 0, 0, true)
	if len(res.Windows) != 1 {
		t.Fatalf("windows %+v", res.Windows)
	}
	w := res.Windows[0]
	// Sent in [15ms, 52ms): push@20, pops@40 (three), acks@50 (three).
	if w.Ops.Total != 7 || w.Ops.Unknown != 1 || w.RecoveryWritesSec != 3 || w.RecoveryHealthySec != 2 {
		t.Fatalf("window %+v", w)
	}
	if res.Baseline.Total+w.Ops.Total != res.Operations.All.Total {
		t.Fatalf("baseline %+v + window %+v != %+v", res.Baseline, w.Ops, res.Operations.All)
	}
}

func withLease(b *h) *h {
	b.ops = append([]history.Op{{ID: 0, Kind: history.KindMeta, Meta: &history.Meta{LeaseSeconds: 5}}}, b.ops...)
	return b
}

func TestCleanHistoryWithLeaseRule(t *testing.T) {
	expect(t, check(t, withLease(clean())), 0, 0, 0, 0, 0, true)
}

func TestRedeliveryWithoutCause(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0, 1)
	b.pop(20, 25, "g1", 0, 1)
	b.ack(30, 35, "g1", "completed", history.OK, 0)
	// seq 1 comes again one second later: the lease (5 s) cannot have
	// expired and nothing released it.
	b.pop(1000, 1005, "g1", 1)
	b.ack(1010, 1015, "g1", "completed", history.OK, 1)
	b.final(7000, 2, "d", "d", "d")
	res := check(t, withLease(b))
	expect(t, res, 0, 0, 1, 0, 0, false)
	if v := res.Violations[0]; v.Kind != KindNoCause || v.Seq != 1 {
		t.Fatalf("violation %+v", v)
	}
	// After the lease time it is a documented redelivery.
	b.ops[len(b.ops)-3].Start, b.ops[len(b.ops)-3].End = 5100*1e6, 5105*1e6
	b.ops[len(b.ops)-2].Start, b.ops[len(b.ops)-2].End = 5110*1e6, 5115*1e6
	expect(t, check(t, withLease(b)), 0, 0, 0, 0, 0, true)
}

func TestConcurrentPopsAfterFailedAck(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0)
	// A long-poll sent first is answered last: it was woken by the failed
	// ack of the other consumer's delivery, so it committed second.
	b.pop(20, 500, "g1", 0)
	b.pop(100, 200, "g1", 0)
	b.ack(210, 220, "g1", "failed", history.OK, 0)
	b.ack(600, 610, "g1", "completed", history.OK, 0)
	b.final(7000, 1, "d", "d", "d")
	expect(t, check(t, withLease(b)), 0, 0, 0, 0, 0, true)
	// Without the failed ack, the two deliveries cannot both be right.
	b.ops = slices.DeleteFunc(b.ops, func(op history.Op) bool { return op.Kind == history.KindAck && op.Status == "failed" })
	expect(t, check(t, withLease(b)), 0, 0, 1, 0, 0, false)
}

// A run none of whose pushes was confirmed (every push failed or went
// unanswered) checked nothing: it fails with a note instead of passing.
func TestNothingConfirmedFails(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.Fail, 0)
	b.final(50, 0, "d", "d", "d")
	res := check(t, b)
	if res.OK || !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "no push was confirmed") }) {
		t.Fatalf("a run with no confirmed push: ok %v, notes %q; want a failure saying nothing was checked", res.OK, res.Notes)
	}
	if !Check(b.ops, Options{}).OK {
		t.Fatal("a hand-made history without RequireFinal is judged on what it holds")
	}
}
