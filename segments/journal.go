package segments

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// The partition journal: a write transaction's partition records go to the
// end of the active blob file, as one blob, instead of into their places in
// the partitions bucket; the records reach the bucket later, and only the
// ones no later transaction changed again.
//
// Why: over many partitions every push rewrites its partition's record,
// and bbolt writes back, with a pwrite and a serialisation each, every leaf
// a transaction changed. A produce run over 10,000 partitions spread an
// entry's records over about 65 leaves of the partitions bucket, which made
// writing them a fifth of the servers' CPU (docs/performance.md, lessons
// 46 and 48). The journal writes the same records as one sequential append
// and one key, and a record many transactions change in a row is written
// to its leaf once, when the oldest transaction holding it is folded.
//
// What is where. The bucket `pjournal` maps the sequence of a transaction
// that journaled (its bbolt transaction id) to the reference of its blob:
// entries of a partition key and either the record as the bucket would
// hold it, or nothing, a marker saying that the transaction wrote the key
// in the bucket itself (a partition created or deleted, a savepoint's
// write-through), so that the bucket's value wins over older entries. A
// key's record is the one of its newest entry when that is a record, else
// the bucket's. Memory mirrors the journal (partJournal.vers): every
// journaled version of every key, with the sequence that wrote it and the
// one that folded it, so that no lookup reads a blob.
//
// Folding. Once more than journalMax transactions are journaled, each
// journaling transaction folds the oldest (two at most): every record of it
// that is still its key's newest goes into the bucket, the others are
// dropped, and its key and blob go. Folding happens inside a write
// transaction, so a crash leaves the journal and the bucket as one commit
// left them; opening a store folds whatever its journal holds (foldAll),
// so the journal is empty whenever no store has the file open. Nothing of
// it is state: the digest reads every record through it, and two stores
// with different journals hold the same partitions.
//
// Snapshots of readers. A read transaction sees the bucket and the journal
// as of the commit it began at, while the writer goes on adding and
// folding. A version is visible to a reader that began at commit s when
// it was journaled at or before s and is the newest such, and not if the
// commit that folded it (its record then is in the bucket) is at or before
// s. Readers register the last commit before they begin (enter), and
// versions are forgotten only when no registered reader nor a later one
// can see them (prune), so every reader finds in memory what its snapshot
// holds.
//
// Lock order: blobSet.gc before partJournal.mu (View takes gc, then enters).

// journalMax is how many journaling transactions stay unfolded. Over
// 10,000 partitions a partition is pushed to about every twentieth entry,
// so among 64 transactions nearly every record is superseded before it is
// folded; memory holds 64 transactions' records (about 5 MB there).
const journalMax = 64

// journalMaxEntries also folds while more records than this are journaled,
// so a run of transactions over a great many partitions stays bounded.
const journalMaxEntries = 1 << 17

// partJournal is a store's journal of partition records.
type partJournal struct {
	mu sync.RWMutex
	// vers holds each key's versions, oldest first. Guarded by mu; only
	// the writer changes it.
	vers map[string][]jver
	// readers counts registered readers by the commit they began after.
	readers map[uint64]int
	// committed is the last committed write transaction's id.
	committed uint64

	// The writer's alone (bbolt runs one write transaction at a time):
	// journaled transactions not yet folded, oldest first, and how many
	// records they hold.
	seqs    []jseq
	entries int
	// max and maxEntries bound the unfolded journal (tests lower them).
	max, maxEntries int
	// prune holds keys with versions a prune could not drop yet (a reader
	// could still see them); floor is the floor it last ran at.
	prune map[string]struct{}
	floor uint64
	// folded counts the journaled transactions folded since opening.
	folded uint64
}

// jver is one journaled version of a key.
type jver struct {
	seq    uint64 // the transaction that journaled it
	rec    []byte // the record; nil for a marker (the bucket holds the value)
	folded uint64 // the transaction that folded it, 0 while unfolded
}

// jseq is one journaled transaction: its blob and its entries in key order.
type jseq struct {
	seq  uint64
	ref  blobRef
	keys []string
	recs [][]byte
}

func newPartJournal(committed uint64) *partJournal {
	return &partJournal{
		vers: map[string][]jver{}, readers: map[uint64]int{}, committed: committed,
		max: journalMax, maxEntries: journalMaxEntries, prune: map[string]struct{}{},
	}
}

// enter registers a reader about to begin a read transaction; the value it
// returns goes to leave when the transaction ends.
func (j *partJournal) enter() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	c := j.committed
	j.readers[c]++
	return c
}

func (j *partJournal) leave(c uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.readers[c]--; j.readers[c] <= 0 {
		delete(j.readers, c)
	}
}

// lookup answers the record of key that a transaction seeing commits up to
// s reads: ok false means the bucket's.
func (j *partJournal) lookup(key []byte, s uint64) (rec []byte, ok bool) {
	j.mu.RLock()
	defer j.mu.RUnlock()
	vs := j.vers[string(key)]
	for i := len(vs) - 1; i >= 0; i-- {
		if v := vs[i]; v.seq <= s {
			if v.rec == nil || (v.folded != 0 && v.folded <= s) {
				return nil, false
			}
			return v.rec, true
		}
	}
	return nil, false
}

// journaled says whether key has versions the journal still holds (the
// writer's question, so no lock).
func (j *partJournal) journaled(key string) bool { return len(j.vers[key]) > 0 }

// visible is what t reads as key's committed record from the journal: the
// newest version a read transaction's snapshot holds, or for the write
// transaction the newest committed, unless it wrote the key in the bucket
// itself (it noted it), when the bucket is what it wrote.
func (t *Tx) journalRecord(key []byte) ([]byte, bool) {
	s := t.id
	if t.w != nil {
		if _, noted := t.parts[string(key)]; noted {
			return nil, false
		}
		s-- // the write transaction's own id: what it writes is not committed
	}
	return t.store.journal.lookup(key, s)
}

// storedPartition is the record t reads under key (nil if none): the
// journal's, else the bucket's.
func (t *Tx) storedPartition(key []byte) []byte {
	if rec, ok := t.journalRecord(key); ok {
		return rec
	}
	return t.get(bParts, key)
}

// materialize writes key's journaled record into the bucket before the
// transaction first writes the key there inside a savepoint: the undo
// record must hold the value a rollback restores, and the bucket's may be
// older than the journal's.
func (t *Tx) materialize(key []byte) error {
	if t.w == nil || t.depth == 0 {
		return nil
	}
	if _, noted := t.parts[string(key)]; noted {
		return nil
	}
	rec, ok := t.journalRecord(key)
	if !ok {
		return nil
	}
	if err := t.bucket(bParts).Put(bytes.Clone(key), rec); err != nil {
		return fmt.Errorf("put %s: %w", bucketParts, err)
	}
	return nil
}

// journalBlob encodes a transaction's entries:
//
//	'J', version 1, uvarint count,
//	per entry: uvarint key length, key, uvarint record length, record
//	(length 0: a marker),
//	u32 CRC-32C of every byte before it.
//
// It returns the blob and each record as a slice of it.
func journalBlob(keys []string, recs [][]byte) ([]byte, [][]byte) {
	size := 2 + binary.MaxVarintLen64 + 4
	for i, k := range keys {
		size += 2*binary.MaxVarintLen32 + len(k) + len(recs[i])
	}
	b := make([]byte, 0, size)
	b = append(b, 'J', 1)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	out := make([][]byte, len(recs))
	for i, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(recs[i])))
		if recs[i] != nil {
			start := len(b)
			b = append(b, recs[i]...)
			out[i] = b[start:len(b):len(b)]
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), out
}

// parseJournalBlob decodes a journal blob (a marker's record is nil). It
// reads bytes from disk and from other nodes' snapshots: whatever they
// hold, it answers entries or ErrCorrupt, never a panic.
func parseJournalBlob(b []byte) (keys [][]byte, recs [][]byte, err error) {
	bad := func(what string) error { return fmt.Errorf("journal blob: %s: %w", what, ErrCorrupt) }
	if len(b) < 7 {
		return nil, nil, bad("too short")
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[len(body):]) {
		return nil, nil, bad("checksum mismatch")
	}
	if body[0] != 'J' || body[1] != 1 {
		return nil, nil, bad(fmt.Sprintf("header %x", body[:2]))
	}
	r := body[2:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			return 0, false
		}
		r = r[n:]
		return v, true
	}
	count, ok := next()
	if !ok || count > uint64(len(r)) { // an entry takes two bytes at least
		return nil, nil, bad("entry count")
	}
	for range count {
		kl, ok := next()
		if !ok || kl == 0 || kl > uint64(len(r)) {
			return nil, nil, bad("key length")
		}
		k := r[:kl:kl]
		r = r[kl:]
		rl, ok := next()
		if !ok || rl > uint64(len(r)) {
			return nil, nil, bad("record length")
		}
		var rec []byte
		if rl > 0 {
			rec = r[:rl:rl]
		}
		r = r[rl:]
		keys, recs = append(keys, k), append(recs, rec)
	}
	if len(r) != 0 {
		return nil, nil, bad("bytes after the last entry")
	}
	return keys, recs, nil
}

// journalParts journals the transaction's partition records, in place of
// writing them to the bucket, and folds the oldest journaled transactions
// past the bound. It runs last before the blobs are flushed; commitJournal
// or abortJournal then settles what it changed in memory.
func (t *Tx) journalParts() error {
	j := t.store.journal
	if j == nil || t.w == nil {
		return t.flushParts()
	}
	var keys []string
	var recs [][]byte
	for _, n := range t.notes {
		switch {
		case n.pending:
			keys = append(keys, n.key)
			recs = append(recs, n.p.marshal())
			n.pending = false
		case j.journaled(n.key):
			// Written in the bucket here: older versions must not win
			// over it, in memory or when a store opening folds them.
			keys = append(keys, n.key)
			recs = append(recs, nil)
		}
	}
	t.pending = false
	if len(keys) > 0 {
		if err := t.journal(keys, recs); err != nil {
			return err
		}
	}
	// Two folds at most, the new transaction's never: a fold writes its
	// records to their leaves, and many in one commit would hold back
	// every producer while it commits.
	limit := 2
	if t.foldAll {
		limit = len(j.seqs)
	}
	for t.folds < limit {
		q := len(j.seqs) - t.folds
		if t.journaled {
			q-- // this transaction's own
		}
		if q <= 0 || (!t.foldAll && q <= j.max && j.entries <= j.maxEntries) {
			break
		}
		if err := t.foldOldest(); err != nil {
			return err
		}
	}
	return nil
}

// journal appends one journal blob of the entries (keys with their
// records, nil for a marker) and records them in memory.
func (t *Tx) journal(keys []string, recs [][]byte) error {
	j := t.store.journal
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	sk, sr := make([]string, len(keys)), make([][]byte, len(keys))
	for i, o := range order {
		sk[i], sr[i] = keys[o], recs[o]
	}
	blob, held := journalBlob(sk, sr)
	ref := t.appendRawBlob(blob)
	seq := t.id
	if err := t.put(bPJournal, be64(seq), ref.encode()); err != nil {
		return err
	}
	j.mu.Lock()
	for i, k := range sk {
		j.vers[k] = append(j.vers[k], jver{seq: seq, rec: held[i]})
	}
	j.mu.Unlock()
	j.seqs = append(j.seqs, jseq{seq: seq, ref: ref, keys: sk, recs: held})
	j.entries += len(sk)
	t.journaled = true
	return nil
}

// foldOldest folds the oldest journaled transaction not yet folded in
// this one (t.folds counts those): its records that are still their key's
// newest version go into the bucket.
func (t *Tx) foldOldest() error {
	j := t.store.journal
	seq := t.id
	q := &j.seqs[t.folds]
	bk := t.bucket(bParts)
	for i, k := range q.keys {
		// A key without versions left has none a reader could see: the
		// bucket's value is every reader's.
		rec := q.recs[i]
		if vs := j.vers[k]; rec != nil && len(vs) > 0 && vs[len(vs)-1].seq == q.seq {
			kb := t.value(len(k))
			copy(kb, k)
			if err := bk.Put(kb, rec); err != nil {
				return fmt.Errorf("fold %s: %w", bucketParts, err)
			}
		}
	}
	if err := t.del(bPJournal, be64(q.seq)); err != nil {
		return err
	}
	if err := t.freeBlob(q.ref); err != nil {
		return fmt.Errorf("free journal blob: %w", err)
	}
	j.mu.Lock()
	for _, k := range q.keys {
		vs := j.vers[k]
		for i := range vs {
			if vs[i].seq == q.seq {
				vs[i].folded = seq
				break
			}
		}
	}
	j.mu.Unlock()
	j.entries -= len(q.keys)
	t.folds++
	return nil
}

// commitJournal settles a committed transaction: the folded transactions
// leave the journal, and versions no reader can see any more are dropped.
func (s *Store) commitJournal(t *Tx) {
	j := s.journal
	j.mu.Lock()
	defer j.mu.Unlock()
	j.committed = t.id
	j.folded += uint64(t.folds)
	for _, q := range j.seqs[:t.folds] {
		for _, k := range q.keys {
			j.prune[k] = struct{}{}
		}
	}
	j.seqs = j.seqs[t.folds:]
	floor := j.committed
	for c := range j.readers {
		floor = min(floor, c)
	}
	if t.folds == 0 && floor == j.floor {
		return // nothing new to drop, and no reader left that held it back
	}
	j.floor = floor
	for k := range j.prune {
		vs := j.vers[k]
		i := len(vs) - 1
		for i >= 0 && vs[i].seq > floor {
			i--
		}
		// Versions before i are hidden by i from every reader at or past
		// the floor; i itself too once it is a marker or folded by then.
		if i >= 0 && (vs[i].rec == nil || (vs[i].folded != 0 && vs[i].folded <= floor)) {
			i++
		}
		if i > 0 {
			vs = append(vs[:0:0], vs[i:]...)
		}
		switch {
		case len(vs) == 0:
			delete(j.vers, k)
			delete(j.prune, k)
		default:
			j.vers[k] = vs
			if vs[0].folded == 0 && vs[0].rec != nil {
				delete(j.prune, k) // its next fold brings it back
			}
		}
	}
}

// abortJournal undoes in memory what a transaction that did not commit
// journaled and folded (bbolt's next write transaction reuses its id).
func (s *Store) abortJournal(t *Tx) {
	j := s.journal
	if j == nil || !t.journaled {
		return
	}
	seq := t.id
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, q := range j.seqs[:t.folds] {
		for _, k := range q.keys {
			for i, v := range j.vers[k] {
				if v.folded == seq {
					j.vers[k][i].folded = 0
				}
			}
		}
		j.entries += len(q.keys)
	}
	last := j.seqs[len(j.seqs)-1]
	for _, k := range last.keys {
		if vs := j.vers[k]; len(vs) == 1 {
			delete(j.vers, k)
		} else {
			j.vers[k] = vs[:len(vs)-1]
		}
	}
	j.seqs = j.seqs[:len(j.seqs)-1]
	j.entries -= len(last.keys)
}

// foldEverything folds every journaled transaction now, so that the
// bucket holds every record (tests that read or rewrite it).
func (s *Store) foldEverything() error {
	return s.update(0, func(t *Tx) error { t.foldAll = true; return nil })
}

// foldAll empties the journal into the bucket: a store opening starts
// with an empty journal and nothing in memory.
func (s *Store) foldAll() error {
	return s.update(0, func(t *Tx) error {
		c := t.bucket(bPJournal).Cursor()
		var seqs [][]byte
		var refs []blobRef
		latest := map[string][]byte{}
		for k, v := c.First(); k != nil; k, v = c.Next() {
			ref, err := decodeRef(v)
			if err != nil || len(k) != 8 {
				return fmt.Errorf("journal entry %x: %w", k, ErrCorrupt)
			}
			blob, err := t.store.blobs.read(ref)
			if err != nil {
				return fmt.Errorf("journal entry %d: %w", u64(k), err)
			}
			keys, recs, err := parseJournalBlob(blob)
			if err != nil {
				return fmt.Errorf("journal entry %d: %w", u64(k), err)
			}
			for i, key := range keys {
				latest[string(key)] = recs[i]
			}
			seqs, refs = append(seqs, bytes.Clone(k)), append(refs, ref)
		}
		keys := make([]string, 0, len(latest))
		for k := range latest {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if rec := latest[k]; rec != nil {
				if err := t.bucket(bParts).Put([]byte(k), rec); err != nil {
					return fmt.Errorf("fold %s: %w", bucketParts, err)
				}
			}
		}
		for i, k := range seqs {
			if err := t.del(bPJournal, k); err != nil {
				return err
			}
			if err := t.freeBlob(refs[i]); err != nil {
				return fmt.Errorf("free journal blob: %w", err)
			}
		}
		return nil
	})
}

// appendRawBlob appends b to the transaction's pending blob bytes and
// accounts for it as live, like a segment's.
func (t *Tx) appendRawBlob(b []byte) blobRef {
	w := t.w
	start := len(w.pending)
	w.pending = append(w.pending, b...)
	ref := blobRef{File: w.active, Pos: w.base + int64(start), Len: uint32(len(b))}
	w.live += uint64(ref.Len)
	return ref
}

// openJournal starts an opened store's journal, folding what the file's
// journal holds (an earlier session's, a received snapshot's).
func (s *Store) openJournal() error {
	var id uint64
	empty := true
	if err := s.db.View(func(tx *bolt.Tx) error {
		id = uint64(tx.ID())
		k, _ := tx.Bucket(bucketPJournal).Cursor().First()
		empty = k == nil
		return nil
	}); err != nil {
		return fmt.Errorf("read the partition journal: %w", err)
	}
	s.journal = newPartJournal(id)
	if empty {
		return nil
	}
	if err := s.foldAll(); err != nil {
		return fmt.Errorf("fold the partition journal: %w", err)
	}
	return nil
}
