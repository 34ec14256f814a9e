package segments

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// partCacheMax bounds how many decoded partition records a store keeps
// (about 1 KB each at most: the fixed fields, the name, 16 references).
const partCacheMax = 16384

// partCache keeps decoded partition records as they stand after the last
// committed write transaction, for write transactions only.
//
// Why: a push over many partitions loads each message's partition record
// (a B+tree search, a decode and a validation of its references), changes
// it and stores it; with 10,000 partitions that load was a tenth of a
// node's CPU. The applying node is the only writer of its state file, so
// what it stored last is what the next write transaction would read back.
// Read transactions never use it: one may have begun before the last
// commit and must see its own snapshot.
//
// Correctness rests on one rule: every write to the partitions bucket goes
// through Tx.put, Tx.del or a savepoint rollback, each of which records the
// key in the transaction's own overlay (Tx.parts); the overlay reaches the
// cache only when bbolt has committed, and is dropped otherwise. A cached
// record is never handed out: readers get a copy. Copies by value are safe
// because a Partition's name is a string and its references are never
// edited in place (recent.go builds a new slice for every change).
//
// Only the goroutine holding bbolt's single write transaction touches the
// cache, so bbolt's writer lock orders every access; it takes no lock of its
// own.
type partCache struct {
	m map[string]*cachedPart
	// ring holds the keys in insertion order; the oldest is evicted when the
	// cache is full. A key dropped from m may linger in ring: evicting it
	// later only costs a miss.
	ring []string
	next int
	max  int
	// noted is how many records the last committed transaction noted: the
	// next one's overlay is made that size, since over many partitions a
	// transaction notes hundreds and a map grown from empty rehashed its
	// way there (about 1 % of a 10,000-partition produce run's server CPU).
	noted int
}

// cachedPart is one cached record with its key: a transaction that notes
// the key takes the string from here rather than copying it again.
type cachedPart struct {
	key string
	p   Partition
}

func newPartCache(max int) *partCache {
	return &partCache{m: make(map[string]*cachedPart), max: max}
}

// add keeps a copy of p as key's committed record.
func (c *partCache) add(key string, p *Partition) {
	if e, ok := c.m[key]; ok {
		e.p = *p
		return
	}
	if len(c.ring) < c.max {
		c.ring = append(c.ring, key)
	} else {
		delete(c.m, c.ring[c.next])
		c.ring[c.next] = key
		c.next = (c.next + 1) % c.max
	}
	c.m[key] = &cachedPart{key: key, p: *p}
}

// partNote is what a write transaction knows of a partition record it
// wrote: the record it stored (known), or nothing (deleted, rolled back, or
// written by other means than PutPartition and CreatePartition). A known
// record may be pending: stored here only, written to the bucket by
// flushParts.
type partNote struct {
	key     string
	p       Partition
	known   bool
	pending bool
	// slot is the cache's record for key when the note was made, or nil.
	// The commit updates it in place: over 10,000 partitions a transaction
	// notes hundreds of records, and two map operations each on a map of
	// 16,384 were 5 % of the servers' CPU in a produce run. The slot stays the key's while the
	// note lives: only a miss fills the cache (partitionCached), and a
	// noted key never misses. An eviction may orphan it, and then the
	// update reaches nothing, which costs a later miss.
	slot *cachedPart
}

// commit applies a committed transaction's notes: a record it stored
// replaces the cached one, a key it deleted or rolled back is forgotten.
func (c *partCache) commit(notes []*partNote) {
	if c == nil {
		return // a store without a cache notes nothing
	}
	c.noted = len(notes)
	for _, n := range notes {
		switch {
		case !n.known:
			delete(c.m, n.key)
		case n.slot != nil:
			n.slot.p = n.p
		default:
			// A copy: notes are carved from the transaction's blocks
			// (newNote), which the cache must not keep alive.
			c.add(n.key, &n.p)
		}
	}
}

// partitionCached answers a write transaction's load of the partition
// stored under key from its overlay or the store's cache. ok is false when
// the caller must read the bucket; fill then says whether what it reads is
// the committed record, to be cached.
func (t *Tx) partitionCached(key []byte) (p *Partition, ok, fill bool, err error) {
	c := t.store.parts
	if t.w == nil || c == nil {
		return nil, false, false, nil
	}
	var src *Partition
	pending := false // only here, not in the bucket yet: nothing to verify against
	if n, in := t.parts[string(key)]; in {
		if !n.known {
			return nil, false, false, nil // written here, not by PutPartition: read the bucket
		}
		src, pending = &n.p, n.pending
	} else if e := c.m[string(key)]; e != nil {
		src = &e.p
	} else {
		return nil, false, true, nil
	}
	cp := t.newPart()
	*cp = *src
	if t.store.verifyCache && !pending {
		if err := t.verifyPartition(key, cp); err != nil {
			return nil, false, false, err
		}
	}
	return cp, true, false, nil
}

// newPart is a zeroed record for a load to copy into, and newNote a zeroed
// note: both are carved from blocks, since over 10,000 partitions nearly
// every message loads and notes a record of its own, two allocations a
// message otherwise. A block lives as long as the transaction, or a
// caller's copy; the cache never points into one (commit copies).
func (t *Tx) newPart() *Partition { return carve(&t.partBlock, t.carveSize()) }

func (t *Tx) newNote() *partNote { return carve(&t.noteBlock, t.carveSize()) }

// carveSize is how many a new block holds: as many records as the last
// transaction noted (over 8 partitions a few, over 10,000 hundreds), within
// bounds that keep a block under about 50 KB.
func (t *Tx) carveSize() int { return min(max(t.store.parts.noted, 8), 256) }

func carve[T any](block *[]T, size int) *T {
	b := *block
	if len(b) == cap(b) {
		b = make([]T, 0, size)
	}
	b = b[:len(b)+1]
	*block = b
	return &b[len(b)-1]
}

// note is the transaction's note for key, made on first use.
func (t *Tx) note(key []byte) *partNote {
	if n := t.parts[string(key)]; n != nil {
		return n
	}
	if t.parts == nil {
		hint := t.store.parts.noted
		t.parts = make(map[string]*partNote, hint)
		t.notes = make([]*partNote, 0, hint)
	}
	n := t.newNote()
	if e := t.store.parts.m[string(key)]; e != nil {
		n.key, n.slot = e.key, e // the cache's copy of the key serves the note too
	} else {
		n.key = string(key) // one copy for the map and the note
	}
	t.parts[n.key] = n
	t.notes = append(t.notes, n)
	return n
}

// notePartition records in the transaction's overlay that key's record is
// now p (a copy is kept), or unknown when p is nil. Tx.put notes every
// write to the partitions bucket as unknown; PutPartition and
// CreatePartition then note the record they stored, which finds the entry
// put made and fills it without allocating again.
func (t *Tx) notePartition(key []byte, p *Partition) {
	if t.store.parts == nil || t.w == nil {
		return
	}
	n := t.note(key)
	if p == nil {
		n.known, n.pending = false, false // whatever wrote the key superseded a pending record
		return
	}
	n.p, n.known = *p, true
}

// deferPart notes p as key's record without writing it: the bucket gets it
// once, from flushParts, however often the transaction changes it.
//
// Why: every push rewrites the record of each partition it reaches, and a
// transaction applies many pushes, each write a B+tree search from the
// root, a value encoded and a key copied. Counted on a three-node cluster
// (300,000 messages, the load generator's pushes of 100): over 8 partitions
// 24,000 record writes became 3,248, over 10,000 partitions 300,000 became
// 224,972 (its producers drift apart, so an entry's pushes share few
// partitions); side-by-side producers save a fifth of the apply time
// (BenchmarkApplyPush). What reads the bucket itself inside the
// transaction flushes first (ForEachPartition, Savepoint); a load of one
// record finds a pending one in the overlay.
func (t *Tx) deferPart(key []byte, p *Partition) bool {
	if t.store.parts == nil || t.w == nil || t.depth > 0 {
		return false // savepoints record the bucket's values: write through
	}
	n := t.note(key)
	n.p, n.known, n.pending = *p, true, true
	t.pending = true
	return true
}

// recordRoom fits any partition record's encoding: sixteen packed
// references and the fields take a few hundred bytes.
const recordRoom = 1 << 10

// flushParts writes every pending partition record to the bucket, in key
// order (so that nodes applying the same log lay their pages out alike).
func (t *Tx) flushParts() error {
	if !t.pending {
		return nil
	}
	due := t.flushing[:0]
	for _, n := range t.notes {
		if n.pending {
			due = append(due, n)
		}
	}
	slices.SortFunc(due, func(a, b *partNote) int { return strings.Compare(a.key, b.key) })
	bk := t.bucket(bParts)
	for _, n := range due {
		kb := t.value(len(n.key)) // carved from a block: a key a record
		copy(kb, n.key)
		// Encoded into the transaction's block of values: over 10,000
		// partitions this writes nearly a record a message.
		if err := bk.Put(kb, t.encodedValue(recordRoom, n.p.appendMarshal)); err != nil {
			return fmt.Errorf("put %s: %w", bucketParts, err)
		}
		n.pending = false
	}
	t.flushing, t.pending = due[:0], false
	return nil
}

// verifyPartition compares a cached record with the stored one
// (StoreOptions.VerifyCache): a difference means some write escaped the
// overlay, and applying on would diverge from a node without the cache.
func (t *Tx) verifyPartition(key []byte, cached *Partition) error {
	v := t.get(bParts, key)
	if v == nil {
		return fmt.Errorf("partition cache holds %q, which is not stored", key)
	}
	// Compared as this build writes them: a schema 4 record read from
	// disk and cached is stored unpacked until it is next written.
	var stored Partition
	if err := stored.unmarshal(key, v); err != nil {
		return fmt.Errorf("partition cache check: %w", err)
	}
	if c, s := cached.marshal(), stored.marshal(); !bytes.Equal(c, s) {
		return fmt.Errorf("partition cache disagrees with the record stored under %q: cached %x, stored %x", key, c, s)
	}
	return nil
}
