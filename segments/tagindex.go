package segments

import (
	"bytes"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// The queue tag index (schema 9) lists the queues by namespace, by task and
// by both, each in name order: a key is the tag (or both), length-prefixed,
// then the queue's name, and the value is empty. Why: a discovery pop names
// a namespace and a task, and without the index every node's apply decoded
// every queue record to find the few that match (0.34-0.55 s a pop over
// 50,000 queues); a prefix walk visits only the matching queues, in the name
// order the round robin needs (discovery.go), and can start at the group's
// pointer.
//
// It is derived from the queue records and changes with them only, in the
// same write transaction (PutQueue, DeleteQueue), through put and del, so a
// savepoint's rollback takes it back with the record. Like the files
// bucket it is not in allBuckets, so not in the digest: a store that built
// it on open and one that kept it from the start hold the same state, and
// the digest must say so. It must nevertheless be exact, and
// CheckQueueTagIndex, which the tests run, compares it with a rebuild.
// Opening a file or receiving a snapshot of schema 8 or older builds it
// (rebuildQueueTagIndex) in the transaction that records schema 9, so
// there is no state in which the schema says it exists and it does not.

var (
	bucketQueueNS   = []byte("queue_ns")   // len-prefixed namespace, name -> empty
	bucketQueueTask = []byte("queue_task") // len-prefixed task, name -> empty
	bucketQueueTags = []byte("queue_tags") // len-prefixed namespace, len-prefixed task, name -> empty
)

// derivedBuckets are rebuilt from the state when a store opens a file of
// an older schema, so a snapshot of such a file may lack them.
var derivedBuckets = [][]byte{bucketQueueNS, bucketQueueTask, bucketQueueTags}

// schemaTagIndex is the first schema whose files hold the tag index.
const schemaTagIndex = 9

func derived(name []byte) bool {
	for _, b := range derivedBuckets {
		if bytes.Equal(b, name) {
			return true
		}
	}
	return false
}

// tagPrefix is the index bucket and key prefix of the queues whose tags
// match: an empty tag matches every queue, so with neither set it is the
// queues bucket itself, whose keys are 'n' then the name.
func tagPrefix(namespace, task string) (b int, prefix []byte) {
	switch {
	case namespace != "" && task != "":
		return bQueueTags, appendName(appendName(nil, namespace), task)
	case namespace != "":
		return bQueueNS, appendName(nil, namespace)
	case task != "":
		return bQueueTask, appendName(nil, task)
	default:
		return bQueues, []byte{'n'}
	}
}

// tagKeys are the three index keys of a queue.
func tagKeys(name, namespace, task string) [3][]byte {
	return [3][]byte{
		append(appendName(nil, namespace), name...),
		append(appendName(nil, task), name...),
		append(appendName(appendName(nil, namespace), task), name...),
	}
}

var tagBuckets = [3]int{bQueueNS, bQueueTask, bQueueTags}

// queueTags is the part of a queue record the index needs: decoding only
// these two fields skips the options and OJS state.
type queueTags struct {
	Namespace string `msgpack:"ns"`
	Task      string `msgpack:"task"`
}

func decodeTags(v []byte) (queueTags, error) {
	var tg queueTags
	err := unmarshalMsgpack(v, &tg)
	return tg, err
}

// indexTags moves queue name's index entries from its stored tags (old,
// nil when it has no record yet) to namespace and task.
func (t *Tx) indexTags(name string, old []byte, namespace, task string) error {
	if old != nil {
		tg, err := decodeTags(old)
		if err != nil {
			return fmt.Errorf("queue %q: %w", name, err)
		}
		if tg.Namespace == namespace && tg.Task == task {
			return nil
		}
		if err := t.unindexTags(name, tg); err != nil {
			return err
		}
	}
	for i, k := range tagKeys(name, namespace, task) {
		if err := t.put(tagBuckets[i], k, []byte{}); err != nil {
			return err
		}
	}
	return nil
}

func (t *Tx) unindexTags(name string, tg queueTags) error {
	for i, k := range tagKeys(name, tg.Namespace, tg.Task) {
		if err := t.del(tagBuckets[i], k); err != nil {
			return err
		}
	}
	return nil
}

// ForEachTaggedQueue calls fn for every queue whose namespace is namespace
// and whose task is task (an empty one matches any), in name order from
// the first name at or after from, then, wrapping around, those before it,
// until fn returns false: the order of a discovery pop's round robin
// (discovery.go). It reads only the matching queues' records.
//
// fn may write: the walk seeks its place again after each call rather
// than trust a cursor across writes to the transaction.
func (t *Tx) ForEachTaggedQueue(namespace, task, from string, fn func(*Queue) (bool, error)) error {
	b, prefix := tagPrefix(namespace, task)
	more, err := t.walkTagged(b, prefix, from, "", fn)
	if err != nil || !more || from == "" {
		return err
	}
	_, err = t.walkTagged(b, prefix, "", from, fn)
	return err
}

// walkTagged walks the names under prefix from from (inclusive) to to
// (exclusive; "" for the end of the prefix), loading each queue.
func (t *Tx) walkTagged(b int, prefix []byte, from, to string, fn func(*Queue) (bool, error)) (bool, error) {
	c := t.bucket(b).Cursor()
	seek := append(bytes.Clone(prefix), from...)
	k, _ := c.Seek(seek)
	for k != nil && bytes.HasPrefix(k, prefix) {
		name := string(k[len(prefix):])
		if to != "" && name >= to {
			return true, nil
		}
		q, err := t.Queue(name)
		if err != nil {
			return false, err
		}
		if q == nil {
			return false, fmt.Errorf("queue %q indexed under %q but not stored: %w", name, bucketOrder[b], ErrCorrupt)
		}
		more, err := fn(q)
		if err != nil || !more {
			return false, err
		}
		seek = append(seek[:len(prefix)], name...)
		if k, _ = c.Seek(seek); bytes.Equal(k, seek) {
			k, _ = c.Next()
		} // else fn deleted the entry, and k is already the one after it
	}
	return true, nil
}

// rebuildQueueTagIndex empties the tag index and fills it from the queue
// records of btx, returning the number of queues indexed. A migration runs
// it in the transaction that records the schema, so it is all or nothing.
func rebuildQueueTagIndex(btx *bolt.Tx) (int, error) {
	var bks [3]*bolt.Bucket
	for i, name := range derivedBuckets {
		if btx.Bucket(name) != nil {
			if err := btx.DeleteBucket(name); err != nil {
				return 0, fmt.Errorf("drop %s: %w", name, err)
			}
		}
		b, err := btx.CreateBucket(name)
		if err != nil {
			return 0, fmt.Errorf("create %s: %w", name, err)
		}
		bks[i] = b
	}
	n := 0
	var keys [3][][]byte
	err := btx.Bucket(bucketQueues).ForEach(func(k, v []byte) error {
		if len(k) == 0 || k[0] != 'n' {
			return fmt.Errorf("queue key %x: %w", k, ErrCorrupt)
		}
		tg, err := decodeTags(v)
		if err != nil {
			return fmt.Errorf("queue %q: %w", k[1:], err)
		}
		for i, key := range tagKeys(string(k[1:]), tg.Namespace, tg.Task) {
			keys[i] = append(keys[i], key)
		}
		n++
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("build the queue tag index: %w", err)
	}
	// In key order: bbolt splits a node only when the transaction commits,
	// so every key of a new bucket goes into one node, and a key inserted
	// before others moves all of them. The queues come in name order, in
	// which tasks (and namespaces not taken from the name) interleave:
	// inserted so, 100,000 queues took 12 s to index, quadratically more
	// with more, while the node stayed unable to open. Sorted, each insert
	// is an append.
	for i, ks := range keys {
		slices.SortFunc(ks, bytes.Compare)
		for _, k := range ks {
			if err := bks[i].Put(k, []byte{}); err != nil {
				return 0, fmt.Errorf("build the queue tag index: %w", err)
			}
		}
	}
	return n, nil
}

// CheckQueueTagIndex compares the tag index with what the queue records
// make of it, and reports the first difference. For tests and checks: it
// reads every queue.
func (t *Tx) CheckQueueTagIndex() error {
	var want [3][][]byte
	err := forEachValue(t, bQueues, nil, nil, func(k, v []byte) (bool, error) {
		tg, err := decodeTags(v)
		if err != nil {
			return false, err
		}
		for i, key := range tagKeys(string(k[1:]), tg.Namespace, tg.Task) {
			want[i] = append(want[i], key)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	for i, b := range tagBuckets {
		var got [][]byte
		c := t.bucket(b).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(v) != 0 {
				return fmt.Errorf("%s: key %q holds %x", bucketOrder[b], k, v)
			}
			got = append(got, bytes.Clone(k))
		}
		// The queues bucket is in name order and each index in tag order:
		// compare as sets.
		if d := diffSets(want[i], got); d != "" {
			return fmt.Errorf("%s disagrees with the queue records: %s", bucketOrder[b], d)
		}
	}
	return nil
}

// diffSets describes how got differs from want as sets of keys ("" when
// they are equal).
func diffSets(want, got [][]byte) string {
	m := make(map[string]int, len(want))
	for _, k := range want {
		m[string(k)]++
	}
	for _, k := range got {
		if m[string(k)] == 0 {
			return fmt.Sprintf("entry %q for no queue", k)
		}
		m[string(k)]--
	}
	for _, k := range want {
		if m[string(k)] > 0 {
			return fmt.Sprintf("entry %q missing", k)
		}
	}
	return ""
}

// queueHead is the part of a queue record a listing sorts by.
type queueHead struct {
	CreatedAt int64 `msgpack:"created"`
}

// ForEachTaggedQueueHead calls fn with the name and creation time of every
// queue ForEachTaggedQueue would visit from "", in name order, until fn
// returns false. A listing sorts by these alone and loads only the records
// of the page it shows, so a record the queue cache does not hold is
// decoded for its creation time only.
func (t *Tx) ForEachTaggedQueueHead(namespace, task string, fn func(name string, createdAt int64) bool) error {
	b, prefix := tagPrefix(namespace, task)
	c := t.bucket(b).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		name := string(k[len(prefix):])
		key := nameKey(name)
		v := t.get(bQueues, key)
		if v == nil {
			return fmt.Errorf("queue %q indexed under %q but not stored: %w", name, bucketOrder[b], ErrCorrupt)
		}
		var created int64
		if q, ok := t.store.queues.get(key, v); ok {
			created = q.CreatedAt
		} else {
			var h queueHead
			if err := unmarshalMsgpack(v, &h); err != nil {
				return fmt.Errorf("queue %q: %w", name, err)
			}
			created = h.CreatedAt
		}
		if !fn(name, created) {
			return nil
		}
	}
	return nil
}
