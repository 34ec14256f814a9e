package httpapi

import (
	"sync"

	"github.com/crownmq/crown/fsm"
)

// deliveredMax is how many delivered batches (one lease on one partition)
// a node remembers: about 3 KB each for 100 messages with 20-byte ids, 3 MB
// in all. A batch is acknowledged within its lease, so this covers every
// consumer of a busy node many times over; an older batch's acks are looked
// up in the index as before.
//
// deliveredMaxBytes bounds what they hold: a batch may be 10,000 messages
// with 255-byte ids, 2.7 MB, and a thousand groups popping such batches
// held 2.7 GB on the leader. A batch over it is not remembered.
const (
	deliveredMax      = 1024
	deliveredMaxBytes = 32 << 20
)

// delivered remembers where the messages of the pops this node proposed are
// stored, so that their acknowledgments, proposed here too, carry the
// offsets (fsm.AckAt) and no node looks them up in the transaction-id index.
//
// What it remembers is a fact about the log, true for good: the message at
// this offset of this partition has this transaction id (fsm/ackat.go says
// why, and what the apply checks before using it). So it needs no clearing
// when leadership moves, and a node that leads again uses what it
// remembered before.
//
// Lock order: mu is a leaf, never held while calling out.
type delivered struct {
	mu      sync.Mutex
	batches map[deliveryKey]*deliveredBatch
	// ring holds the keys in insertion order, the n of them from head on;
	// the oldest are forgotten when the memory is full.
	ring    []deliveryKey
	head, n int
	bytes   int // what the remembered batches hold
}

type deliveryKey struct{ lease, partition [16]byte }

// deliveredBatch is one partition's messages of one pop, in delivery
// order; ids holds their transaction ids end to end, message i's ending at
// ends[i]. Four allocations a batch, none a message.
type deliveredBatch struct {
	ids     []byte
	ends    []uint32
	offsets []uint64
}

// size is about what b holds in memory.
func (b *deliveredBatch) size() int { return 128 + len(b.ids) + 4*len(b.ends) + 8*len(b.offsets) }

func newDelivered() *delivered {
	return &delivered{batches: make(map[deliveryKey]*deliveredBatch, deliveredMax), ring: make([]deliveryKey, deliveredMax)}
}

// remember records what a pop this node proposed delivered. A pop without
// a lease (autoAck) is acknowledged by nothing.
func (d *delivered) remember(lr *fsm.LeaseResult) {
	if lr.LeaseID == ([16]byte{}) {
		return
	}
	for i := range lr.Partitions {
		lp := &lr.Partitions[i]
		if len(lp.Messages) == 0 {
			continue
		}
		size := 0
		for j := range lp.Messages {
			size += len(lp.Messages[j].TxID)
		}
		b := &deliveredBatch{ids: make([]byte, 0, size), ends: make([]uint32, len(lp.Messages)),
			offsets: make([]uint64, len(lp.Messages))}
		for j := range lp.Messages {
			m := &lp.Messages[j]
			b.ids = append(b.ids, m.TxID...)
			b.ends[j], b.offsets[j] = uint32(len(b.ids)), m.Offset
		}
		d.put(deliveryKey{lr.LeaseID, lp.PartitionID}, b)
	}
}

func (d *delivered) put(k deliveryKey, b *deliveredBatch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	size := b.size()
	if size > deliveredMaxBytes {
		return // its acks look the messages up in the index
	}
	if old, ok := d.batches[k]; ok {
		// A lease names a partition once; keep the newer anyway.
		d.bytes += size - old.size()
		d.batches[k] = b
		for d.bytes > deliveredMaxBytes {
			d.forgetOldest()
		}
		return
	}
	for d.n == len(d.ring) || d.bytes+size > deliveredMaxBytes {
		d.forgetOldest()
	}
	d.ring[(d.head+d.n)%len(d.ring)] = k
	d.n++
	d.batches[k] = b
	d.bytes += size
}

func (d *delivered) forgetOldest() {
	k := d.ring[d.head]
	if b, ok := d.batches[k]; ok {
		d.bytes -= b.size()
		delete(d.batches, k)
	}
	d.head = (d.head + 1) % len(d.ring)
	d.n--
}

// stamp writes into each item that names a remembered delivery (its lease
// and partition) the offset of the message with its transaction id. Items
// of one batch usually come in delivery order, so the search goes on from
// the previous match and wraps around once.
func (d *delivered) stamp(items []fsm.AckItem) (stamped int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var (
		key    deliveryKey
		looked bool
		b      *deliveredBatch
		next   int // where the search in b starts
	)
	for i := range items {
		it := &items[i]
		if !it.HasLease || !it.PartitionOK {
			continue
		}
		if k := (deliveryKey{it.LeaseID, it.PartitionID}); !looked || k != key {
			key, looked, b, next = k, true, d.batches[k], 0
		}
		if b == nil {
			continue
		}
		n := len(b.offsets)
		for j := range n {
			m := (next + j) % n
			start := uint32(0)
			if m > 0 {
				start = b.ends[m-1]
			}
			if string(b.ids[start:b.ends[m]]) == it.TxID {
				it.At, next = b.offsets[m], m+1
				stamped++
				break
			}
		}
	}
	return stamped
}
