package segments

import (
	"bytes"
	"sync"
)

// queueCacheMax bounds how many decoded queue records a store keeps (a few
// hundred bytes each: the record's bytes and the decoded copy).
const queueCacheMax = 4096

// queueCache keeps the last decoded record of each queue beside the bytes it
// was decoded from.
//
// Why: a queue's record is a msgpack map, decoded by reflection in about
// 6 µs (BenchmarkQueueLoad; 0.3 µs from the cache), and every pop loads it
// two or three times on the node it reaches (its look for something to
// claim, then the lease's apply) and once on every other node, every ack
// and push once a command on every node: 2.6 % of the servers' CPU in a
// consume run over 8 partitions, 4.7 % over 10,000 (docs/performance.md
// lesson 54), for a record that changes only when the queue is configured.
// Listings (ForEachQueue: the resource and OJS views; discovery pops read
// only the queues the tag index lists, tagindex.go) read every record,
// 5.8 µs a queue decoded
// (BenchmarkListQueues: 100 queues in 579 µs, 26 µs from the cache).
//
// Correctness rests on comparing bytes, not on invalidation: a hit needs
// the stored value to equal the cached bytes exactly, and equal bytes
// decode to equal records whichever transaction read them (a read view of
// an older commit, the open write transaction, one that rolls back later).
// Nothing that writes a queue has to know the cache exists. A cached record
// is never handed out: readers get a copy, and only records whose copy by
// value shares nothing mutable are cached (Base is copied; a record with
// OJS state, whose nested pointers a copy would share, is decoded every
// time, as before).
//
// Readers of any goroutine use it; mu is a leaf lock, held only around a
// map lookup or update (DESIGN.md, "Lock order").
type queueCache struct {
	mu sync.Mutex
	// m is keyed by the record's key in the queues bucket (nameKey).
	m map[string]*cachedQueue
	// max is the most entries m holds; a full cache is emptied, which only
	// costs misses (the queues in use fill it again at once).
	max int
}

type cachedQueue struct {
	raw []byte
	q   Queue
}

func newQueueCache(max int) *queueCache {
	return &queueCache{m: make(map[string]*cachedQueue), max: max}
}

// get returns a copy of the cached record stored under key if raw is
// exactly the value it was decoded from.
func (c *queueCache) get(key, raw []byte) (*Queue, bool) {
	c.mu.Lock()
	e := c.m[string(key)]
	if e == nil || !bytes.Equal(e.raw, raw) {
		c.mu.Unlock()
		return nil, false
	}
	q := e.q
	c.mu.Unlock()
	q.cloneShared()
	return &q, true
}

// put caches q, just decoded from raw (which the caller's transaction owns:
// it is copied), when a copy by value can be handed out safely.
func (c *queueCache) put(key, raw []byte, q *Queue) {
	if q.OJS != nil {
		return
	}
	e := &cachedQueue{raw: bytes.Clone(raw), q: *q}
	e.q.cloneShared()
	c.mu.Lock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[string(key)] = e
	c.mu.Unlock()
}

// loadQueue is the queue record stored under key as value v, from the
// cache when v is what it holds, else decoded (and cached).
func (t *Tx) loadQueue(key, v []byte) (*Queue, error) {
	if q, ok := t.store.queues.get(key, v); ok {
		return q, nil
	}
	q := new(Queue)
	if err := unmarshalMsgpack(v, q); err != nil {
		return nil, err
	}
	t.store.queues.put(key, v, q)
	return q, nil
}

// cloneShared replaces the pointers of a copied record that the cache may
// share with the original by pointers to copies of their own. Only records
// without OJS state reach it.
func (q *Queue) cloneShared() {
	if q.Base != nil {
		b := *q.Base
		q.Base = &b
	}
}
