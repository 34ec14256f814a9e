package checker

import (
	"testing"

	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

// These histories each hide a broken guarantee that an earlier checker
// passed: each must fail (the controls beside them must still pass).

// A message delivered once and then never consumed is not safe because it
// was seen: if the broker drops it (say the group's position moves past it
// when the lease ends, and it is the partition's last message, so no later
// delivery shows the gap) the final drain never completes and the old
// checker, which only asked "delivered at least once?", passed the run.
// The drain's goal is that every group completed every message pushed ok,
// so a confirmed message that no success ack of the group covers is lost.
func TestDeliveredButNeverCompletedIsLost(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0, 1)
	b.pop(20, 25, "g1", 0, 1)
	b.ack(30, 35, "g1", "completed", history.OK, 0) // seq 1 abandoned...
	// ...and never delivered again, although nothing completed it.
	b.final(9000, 2, "d", "d", "d")
	res := check(t, withLease(b))
	expect(t, res, 1, 0, 0, 0, 0, false)
	if v := res.Violations[0]; v.Kind != KindNotCompleted || v.Group != "g1" || v.Seq != 1 {
		t.Fatalf("violation %+v", v)
	}
	// A completed ack of a later message covers it (acks are cumulative),
	// and so does a re-ack answered success; an ack in doubt does not: the
	// drain re-sends those until they are answered.
	b2 := &h{}
	b2.push(0, 10, history.OK, 0, 1)
	b2.pop(20, 25, "g1", 0, 1)
	b2.ack(30, 35, "g1", "completed", history.Unknown, 0, 1)
	b2.final(9000, 2, "d", "d", "d")
	expect(t, check(t, withLease(b2)), 2, 0, 0, 0, 0, false)
	b2.ack(40, 45, "g1", "completed", history.OK, 1)
	expect(t, check(t, withLease(b2)), 0, 0, 0, 0, 0, true)
}

// The final record's passed flag is the runner's claim; the states it holds
// are the evidence. A history whose flag says converged while its nodes sit
// at different applied indexes or digests, or where a node of the run is
// missing, must not pass.
func TestFinalFlagAgainstStates(t *testing.T) {
	base := func() *h {
		b := &h{}
		b.add(history.Op{Kind: history.KindMeta, Meta: &history.Meta{LeaseSeconds: 5,
			Nodes: map[string]string{"node1": "u1", "node2": "u2", "node3": "u3"}}})
		b.push(0, 10, history.OK, 0)
		b.pop(20, 25, "g1", 0)
		b.ack(30, 35, "g1", "completed", history.OK, 0)
		b.final(9000, 1, "d", "d", "d")
		return b
	}
	expect(t, check(t, base()), 0, 0, 0, 0, 0, true)

	t.Run("same-index-other-digest", func(t *testing.T) {
		b := base()
		b.ops[len(b.ops)-1].States[2].Digest = "x" // flag still says passed
		res := check(t, b)
		expect(t, res, 0, 0, 0, 0, 1, false)
		if res.Converged || res.ViolationKinds[KindDivergence] != 1 {
			t.Fatalf("converged %v, kinds %v", res.Converged, res.ViolationKinds)
		}
	})
	t.Run("other-index", func(t *testing.T) {
		b := base()
		b.ops[len(b.ops)-1].States[1].AppliedIndex = 99
		b.ops[len(b.ops)-1].States[1].Digest = "older"
		res := check(t, b)
		expect(t, res, 0, 0, 0, 0, 1, false)
		if res.ViolationKinds[KindNotConverged] != 1 {
			t.Fatalf("kinds %v", res.ViolationKinds)
		}
	})
	t.Run("node-missing", func(t *testing.T) {
		b := base()
		b.ops[len(b.ops)-1].States = b.ops[len(b.ops)-1].States[:2]
		expect(t, check(t, b), 0, 0, 0, 0, 1, false)
	})
	t.Run("no-states", func(t *testing.T) {
		b := base()
		b.ops[len(b.ops)-1].States = nil
		expect(t, check(t, b), 0, 0, 0, 0, 1, false)
	})
}

// The same for a checkpoint.
func TestCheckpointFlagAgainstStates(t *testing.T) {
	b := clean()
	ok := true
	b.add(history.Op{Kind: history.KindCheckpoint, Start: 80, End: 90, Label: "cp", Passed: &ok, States: []history.NodeState{
		{Node: "node1", AppliedIndex: 10, Digest: "a"}, {Node: "node2", AppliedIndex: 10, Digest: "b"},
		{Node: "node3", AppliedIndex: 10, Digest: "a"}}})
	res := check(t, b)
	expect(t, res, 0, 0, 0, 0, 1, false)
	if len(res.Checkpoints) != 1 || res.Checkpoints[0].Passed {
		t.Fatalf("checkpoints %+v", res.Checkpoints)
	}
}

// A pop that was in flight when a completed ack of m (or of a later
// message) was answered may have been applied on either side of that ack.
// Applied after it, delivering m is a duplicate of a completed message.
// Applied before it, the pop leased m while the ack succeeded: the ack's
// own lease still held m (or m was consumed already), which is two leases
// at once, since the pop's consumer cannot ack a lease it has not been
// told yet. Either way a violation. The old checker only compared acks
// answered before the pop was sent, and excused the second delivery by the
// lease time measured up to the pop's answer: a pop stuck longer than the
// lease (behind a partition) hid a duplicate of a completed message.
func TestPopSpanningCompletedAck(t *testing.T) {
	build := func(ackT0, ackT1 int64) *h {
		b := &h{}
		b.push(0, 10, history.OK, 0, 1)
		b.pop(20, 30, "g1", 0)                                // consumer A leases seq 0
		b.ack(ackT0, ackT1, "g1", "completed", history.OK, 0) // and completes it
		b.pop(500, 6500, "g1", 0, 1)                          // consumer B: sent at 0.5 s, answered at 6.5 s
		b.ack(6600, 6700, "g1", "completed", history.OK, 0, 1)
		b.final(9000, 2, "d", "d", "d")
		return b
	}
	for _, tc := range []struct {
		name         string
		ackT0, ackT1 int64
	}{
		{"ack-within-lease", 1000, 1100},
		{"ack-after-lease-time", 5500, 5600}, // A's lease had expired: a success still means m was consumed
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := check(t, withLease(build(tc.ackT0, tc.ackT1)))
			expect(t, res, 0, 1, 0, 0, 0, false)
			if v := res.Violations[0]; v.Kind != KindDupDelivery || v.Seq != 0 {
				t.Fatalf("violation %+v", v)
			}
		})
	}
	t.Run("release-before-ack", func(t *testing.T) {
		// A failed ack released A's lease first: then nobody could
		// complete seq 0 before B was answered, so the success is no
		// excuse either.
		b := build(1000, 1100)
		b.ack(600, 700, "g1", "failed", history.OK, 0)
		expect(t, check(t, withLease(b)), 0, 1, 0, 0, 0, false)
	})
	t.Run("late-ack-rejected", func(t *testing.T) {
		// A's late ack rejected for its expired lease completed nothing:
		// B's delivery after the lease time is the documented redelivery.
		b := build(5500, 5600)
		for j := range b.ops[2].Items {
			b.ops[2].Items[j].Success, b.ops[2].Items[j].Status = false, "Invalid or expired lease"
		}
		expect(t, check(t, withLease(b)), 0, 0, 0, 0, 0, true)
	})
}

// A pop whose answer reached its client later than its lease lasted (the
// relaying follower was paused holding it, chaos seed 2065) can have been
// applied first: its lease expired, another pop leased the partition and
// its consumer completed the message, and only then did the late answer
// arrive. That is a redelivery under an ended lease, not a duplicate; the
// same completion under a lease taken before the first could have
// expired still is one.
func TestPopAnsweredAfterItsLeaseExpired(t *testing.T) {
	build := func(otherT0, otherT1 int64) *h {
		b := &h{}
		b.push(0, 10, history.OK, 0)
		b.pop(500, 8000, "g1", 0) // consumer A: sent at 0.5 s, its answer held until 8 s
		b.ops[len(b.ops)-1].Lease = "LA"
		b.pop(otherT0, otherT1, "g1", 0) // consumer B
		b.ops[len(b.ops)-1].Lease = "LB"
		b.ack(otherT1+100, otherT1+200, "g1", "completed", history.OK, 0)
		b.ops[len(b.ops)-1].Lease = "LB"
		b.ack(8100, 8200, "g1", "completed", history.OK, 0) // A's ack, refused: its lease ended
		b.ops[len(b.ops)-1].Lease = "LA"
		for j := range b.ops[len(b.ops)-1].Items {
			b.ops[len(b.ops)-1].Items[j].Success, b.ops[len(b.ops)-1].Items[j].Status = false, "Invalid or expired lease"
		}
		b.final(9000, 1, "d", "d", "d")
		return b
	}
	t.Run("B-after-A's-lease-time", func(t *testing.T) {
		expect(t, check(t, withLease(build(5600, 5700))), 0, 0, 0, 0, 0, true)
	})
	t.Run("B-within-A's-lease-time", func(t *testing.T) {
		res := check(t, withLease(build(1000, 1100)))
		expect(t, res, 0, 1, 0, 0, 0, false)
		if v := res.Violations[0]; v.Kind != KindDupDelivery || v.Seq != 0 {
			t.Fatalf("violation %+v", v)
		}
	})
}

// Every group of the run reads every queue a producer pushed to, whether
// or not the meta record lists that queue: a queue the meta forgot must not
// escape the loss check.
func TestQueueMissingFromMeta(t *testing.T) {
	b := &h{}
	b.add(history.Op{Kind: history.KindMeta, Meta: &history.Meta{LeaseSeconds: 5, Queues: []string{"other"},
		Groups: []string{"g1", "g2"}}})
	b.push(0, 10, history.OK, 0)
	b.pop(20, 25, "g1", 0)
	b.ack(30, 35, "g1", "completed", history.OK, 0)
	b.final(9000, 1, "d", "d", "d")
	res := check(t, b)
	expect(t, res, 1, 0, 0, 0, 0, false)
	if v := res.Violations[0]; v.Kind != KindLost || v.Group != "g2" {
		t.Fatalf("violation %+v", v)
	}
}

// An ack item names a message by its transaction id: acking a message that
// was never pushed there (another run's, with a high seq) must not count as
// completing, nor as moving the position past, the real messages. The
// delivery is unexpected either way; the loss and the skip behind it must
// be counted too.
func TestForeignAckMovesNothing(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0, 1, 2, 3)
	foreign := history.Item{Partition: p, Seq: 9999, Txn: history.Txn("oldrun", q, p, 9999), MsgID: "zz", DataSeq: 9999}
	b.add(history.Op{Kind: history.KindPop, Start: 20, End: 25, Outcome: history.OK, Queue: q, Group: "g1", Lease: "L",
		Items: []history.Item{{Partition: p, Seq: 0, Txn: txn(0), MsgID: msgID(0), DataSeq: 0}, {Partition: p, Seq: 1, Txn: txn(1), MsgID: msgID(1), DataSeq: 1}, foreign}})
	ackItems := []history.Item{{Partition: p, Seq: 0, Txn: txn(0), Success: true}, foreign}
	ackItems[1].Success = true
	b.add(history.Op{Kind: history.KindAck, Start: 30, End: 35, Outcome: history.OK, Queue: q, Group: "g1", Status: "completed", Lease: "L",
		Items: ackItems})
	b.pop(40, 45, "g1", 3) // seq 2 skipped (and never delivered)
	b.ack(50, 55, "g1", "completed", history.OK, 3)
	b.final(9000, 4, "d", "d", "d")
	res := check(t, withLease(b))
	if res.ViolationKinds[KindPhantom] != 1 || res.ViolationKinds[KindSkipped] != 1 || res.ViolationKinds[KindLost] != 1 ||
		res.ViolationKinds[KindDupDelivery] != 0 {
		t.Fatalf("kinds %v; want one each of %s, %s, %s and no %s", res.ViolationKinds, KindPhantom, KindSkipped, KindLost, KindDupDelivery)
	}
}

// Messages stored in a partition no push ever went to were never pushed:
// the stored-count bound applies to every partition the nodes report, not
// only to those the workload wrote.
func TestStoredInPartitionNeverPushed(t *testing.T) {
	b := &h{}
	b.push(0, 10, history.OK, 0)
	b.pop(20, 25, "g1", 0)
	b.ack(30, 35, "g1", "completed", history.OK, 0)
	b.final(9000, 1, "d", "d", "d")
	for i := range b.ops[len(b.ops)-1].States {
		b.ops[len(b.ops)-1].States[i].Totals[q+"/p9"] = 3
	}
	res := check(t, b)
	expect(t, res, 0, 3, 0, 0, 0, false) // one per node
	if res.ViolationKinds[KindStoredMore] != 3 {
		t.Fatalf("kinds %v", res.ViolationKinds)
	}
}
