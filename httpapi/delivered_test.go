package httpapi

import (
	"fmt"
	"testing"

	"github.com/crownmq/crown/fsm"
)

func deliveredPop(lease, partition byte, first uint64, ids ...string) *fsm.LeaseResult {
	lp := fsm.LeasedPartition{PartitionID: [16]byte{partition}, Delivered: uint32(len(ids))}
	for i, id := range ids {
		lp.Messages = append(lp.Messages, fsm.DeliveredMessage{TxID: id, Offset: first + uint64(i)})
	}
	return &fsm.LeaseResult{LeaseID: [16]byte{lease}, Partitions: []fsm.LeasedPartition{lp}}
}

func ackItem(lease, partition byte, id string) fsm.AckItem {
	return fsm.AckItem{TxID: id, PartitionID: [16]byte{partition}, PartitionOK: true, LeaseID: [16]byte{lease}, HasLease: true}
}

// Each item naming a remembered delivery gets its message's offset, in any
// order; an item of another lease or partition, without a lease, with an
// unparsable partition or with an id the pop did not deliver gets none.
func TestDeliveredStamp(t *testing.T) {
	d := newDelivered()
	d.remember(deliveredPop(1, 7, 100, "a", "b", "c", "dd"))
	d.remember(deliveredPop(2, 7, 500, "a", "x"))
	d.remember(&fsm.LeaseResult{Partitions: deliveredPop(3, 7, 900, "z").Partitions}) // autoAck: no lease
	noLease := ackItem(1, 7, "a")
	noLease.HasLease = false
	badPartition := ackItem(1, 7, "a")
	badPartition.PartitionOK = false
	items := []fsm.AckItem{
		ackItem(1, 7, "c"), ackItem(1, 7, "a"), ackItem(1, 7, "dd"), ackItem(1, 7, "b"), // out of order
		ackItem(2, 7, "a"), ackItem(2, 7, "x"), // the same id in another delivery
		ackItem(1, 8, "a"), // another partition
		ackItem(1, 7, "d"), // an id the pop did not deliver
		ackItem(3, 7, "z"), // the autoAck pop
		noLease, badPartition,
		ackItem(1, 7, "a"), // the same item again
	}
	want := []uint64{102, 100, 103, 101, 500, 501, 0, 0, 0, 0, 0, 100}
	if n := d.stamp(items); n != 7 {
		t.Errorf("stamped %d items, want 7", n)
	}
	for i, it := range items {
		if it.At != want[i] {
			t.Errorf("item %d (%s): offset %d, want %d", i, it.TxID, it.At, want[i])
		}
	}
}

// The memory holds deliveredMax deliveries and forgets the oldest first.
func TestDeliveredForgetsTheOldest(t *testing.T) {
	d := newDelivered()
	for i := range deliveredMax + 10 {
		lr := deliveredPop(0, 1, uint64(i+1), fmt.Sprintf("m%d", i))
		lr.LeaseID = [16]byte{byte(i), byte(i >> 8), 1}
		d.remember(lr)
	}
	if len(d.batches) != deliveredMax || len(d.ring) != deliveredMax {
		t.Fatalf("%d batches in a ring of %d, want %d", len(d.batches), len(d.ring), deliveredMax)
	}
	for i := range deliveredMax + 10 {
		it := ackItem(0, 1, fmt.Sprintf("m%d", i))
		it.LeaseID = [16]byte{byte(i), byte(i >> 8), 1}
		items := []fsm.AckItem{it}
		d.stamp(items)
		if remembered := i >= 10; (items[0].At != 0) != remembered {
			t.Errorf("delivery %d: offset %d, remembered %t", i, items[0].At, remembered)
		}
	}
}
