package fsm

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// Acknowledgments resolved by the index (ackByIndex) get the answers the
// scan of their batch gives, with ids that come back after their dedup
// window, messages deleted by id, and a queue without deduplication. The
// machine runs with VerifyAcks, which scans every such batch as well and
// stops the apply at the first difference; the test counts the batches that
// took the index's way, so that it cannot pass without any.
func TestAckByIndexGivesTheScansAnswers(t *testing.T) {
	for seed := range 6 {
		dedup := int64(5)
		if seed%3 == 2 {
			dedup = 0 // every push may repeat an id: never by the index
		}
		t.Run(fmt.Sprintf("seed=%d/dedup=%d", seed, dedup), func(t *testing.T) {
			m := newMachine(t)
			rng := rand.New(rand.NewPCG(uint64(seed), 36))
			configureWith(m, "q", func(o *segments.Options) { o.DedupWindowSeconds = dedup; o.RetryLimit = 2; o.LeaseTime = 10 })
			parts := []string{"p0", "p1", "p2"}
			id := func() string { return fmt.Sprintf("t%d", rng.IntN(100)) }
			statuses := []uint8{AckCompleted, AckCompleted, AckFailed, AckRetry, AckDLQ}
			var (
				held                []*LeaseResult
				byIndex, bySegments int
			)
			for range 1500 {
				switch op := rng.IntN(10); {
				case op < 3:
					var its []PushItem
					for range 1 + rng.IntN(3) {
						its = append(its, item("q", parts[rng.IntN(len(parts))], id(), `"x"`))
					}
					m.push(its...)
				case op < 4:
					m.advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
				case op < 7:
					r := m.pop(Lease{Queue: "q", Batch: uint32(1 + rng.IntN(6)), MaxPartitions: uint32(1 + rng.IntN(3))})
					if r.Count() > 0 {
						held = append(held, r)
					}
				case op < 9 && len(held) > 0:
					i := rng.IntN(len(held))
					r := held[i]
					var (
						its   []AckItem
						names []string // each item's partition
					)
					for _, lp := range r.Partitions {
						p, g := m.partition("q", lp.Partition), m.group("q", lp.Partition, QueueMode)
						if g != nil && g.LeaseLive(m.now.UnixMicro()) && g.Next <= g.LeaseLast {
							if ackByIndex(p, g.Next) {
								byIndex++
							} else {
								bySegments++
							}
						}
						for _, dm := range lp.Messages {
							if rng.IntN(10) < 7 {
								its = append(its, ackOf(lp, dm, r.LeaseID, statuses[rng.IntN(len(statuses))]))
								names = append(names, lp.Partition)
							}
						}
						if rng.IntN(4) == 0 { // an id from elsewhere in the partition, or none
							its = append(its, ackOf(lp, DeliveredMessage{TxID: id()}, r.LeaseID, AckCompleted))
							names = append(names, lp.Partition)
						}
					}
					if rng.IntN(3) > 0 {
						m.ack("", its...)
					} else {
						// A transaction, its pushes between the acks
						// (which may repeat an id of the batch).
						var ops []TxOp
						for k, it := range its {
							if it.Status == AckDLQ || it.Status == AckRetry {
								it.Status = AckCompleted // a transaction's own rules differ
							}
							ops = append(ops, opAck("", it))
							if rng.IntN(3) == 0 {
								again := its[rng.IntN(len(its))].TxID // an id of the batch, half the time
								if rng.IntN(2) == 0 {
									again = id()
								}
								ops = append(ops, opPush(item("q", names[k], again, `"x"`)))
							}
						}
						m.txn(ops...)
					}
					if rng.IntN(2) == 0 {
						held = append(held[:i], held[i+1:]...)
					}
				default:
					if p := m.partition("q", parts[rng.IntN(len(parts))]); p != nil {
						m.apply(&DeleteMessage{Partition: p.UUID, TxID: id()})
					}
				}
			}
			t.Logf("batches acknowledged by the index %d, by their segments %d", byIndex, bySegments)
			if dedup > 0 && (byIndex == 0 || bySegments == 0) {
				t.Fatal("want batches acknowledged both ways")
			}
			if dedup == 0 && byIndex != 0 {
				t.Fatal("a queue without deduplication acknowledged by the index")
			}
		})
	}
}

// A transaction whose push repeats an id of a batch an earlier ack of the
// same transaction resolved through the index: the index now names the new
// message, outside the batch, and a later ack of the id must still complete
// the one in the batch (the session scans it from then on), not consume the
// new one unseen.
func TestAckByIndexInATransactionThatRepeatsAnID(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DedupWindowSeconds = 1 })
	m.push(items("q", "p", "a", "t")...)
	m.advance(2 * time.Second) // t's dedup window closed: a push of it is stored again
	r := m.mustPop(Lease{Queue: "q", Batch: 10})
	lp := r.Partitions[0]
	if p, g := m.partition("q", "p"), m.group("q", "p", QueueMode); !ackByIndex(p, g.Next) {
		t.Fatalf("the batch is not acknowledged through the index: IDsIndexedFrom %d, next %d", p.IDsIndexedFrom, g.Next)
	}
	tr := m.txn(
		opAck("", ackOf(lp, lp.Messages[0], r.LeaseID, AckCompleted)),
		opPush(item("q", "p", "t", `"again"`)),
		opAck("", ackOf(lp, lp.Messages[1], r.LeaseID, AckCompleted)),
	)
	if !tr.Success || tr.Results[1].Status != PushQueued {
		t.Fatalf("transaction %+v", tr)
	}
	if p := m.partition("q", "p"); p.IDsIndexed(p.NextOffset - 1) {
		t.Fatalf("the repeat left IDsIndexedFrom at %d (next offset %d)", p.IDsIndexedFrom, p.NextOffset)
	}
	again := m.mustPop(Lease{Queue: "q", Batch: 10})
	if got := txids(again); len(got) != 1 || got[0] != "t" || string(again.Partitions[0].Messages[0].Payload) != `"again"` {
		t.Fatalf("after the transaction the pop delivered %v, want the repeated t", got)
	}
}
