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

// What the memory holds is bounded in bytes too: batches of 10,000
// messages with 255-byte ids (2.7 MB each) from a thousand consumer
// groups held 2.7 GB. The oldest go first, and a batch larger than the
// whole bound is not remembered.
func TestDeliveredBoundsItsBytes(t *testing.T) {
	d := newDelivered()
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = fmt.Sprintf("%06d%0249d", i, 0)
	}
	const pops = 100
	for g := range pops {
		lr := deliveredPop(0, 1, 1, ids...)
		lr.LeaseID = [16]byte{byte(g), 2}
		d.remember(lr)
	}
	held := 0
	for _, b := range d.batches {
		held += len(b.ids) + 4*len(b.ends) + 8*len(b.offsets)
	}
	if held > deliveredMaxBytes {
		t.Fatalf("%d batches of 10,000 messages with 255-byte ids hold %d MB; the bound is %d MB",
			len(d.batches), held>>20, deliveredMaxBytes>>20)
	}
	last := ackItem(pops-1, 1, ids[5])
	last.LeaseID = [16]byte{pops - 1, 2}
	first := ackItem(0, 1, ids[5])
	first.LeaseID = [16]byte{0, 2}
	items := []fsm.AckItem{last, first}
	d.stamp(items)
	if items[0].At != 6 || items[1].At != 0 {
		t.Errorf("newest batch's ack stamped at %d (want 6), oldest's at %d (want 0: forgotten)", items[0].At, items[1].At)
	}

	huge := make([]string, deliveredMaxBytes/255+1)
	for i := range huge {
		huge[i] = fmt.Sprintf("%0255d", i)
	}
	lr := deliveredPop(9, 9, 1, huge...)
	d.remember(lr)
	if _, ok := d.batches[deliveryKey{lr.LeaseID, lr.Partitions[0].PartitionID}]; ok {
		t.Errorf("a batch over the whole bound was remembered")
	}
}

// The count of bytes held stays that of the batches remembered, through
// evictions by count and by size and a batch replaced under its key.
func TestDeliveredCountsItsBytes(t *testing.T) {
	d := newDelivered()
	check := func(when string) {
		t.Helper()
		sum := 0
		for _, b := range d.batches {
			sum += b.size()
		}
		if sum != d.bytes || len(d.batches) != d.n || d.bytes > deliveredMaxBytes {
			t.Fatalf("%s: counted %d bytes in %d keys; the batches hold %d in %d", when, d.bytes, d.n, sum, len(d.batches))
		}
	}
	for i := range deliveredMax + 10 {
		lr := deliveredPop(0, 1, 1, fmt.Sprintf("m%d", i))
		lr.LeaseID = [16]byte{byte(i), byte(i >> 8), 3}
		d.remember(lr)
	}
	check("evicted by count")
	big := make([]string, 40000)
	for i := range big {
		big[i] = fmt.Sprintf("%0200d", i)
	}
	for g := range 10 {
		lr := deliveredPop(byte(g), 2, 1, big...)
		d.remember(lr)
		d.remember(lr) // the same key again
	}
	check("evicted by size")
}
