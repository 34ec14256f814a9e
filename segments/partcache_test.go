package segments

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
)

// loadPart loads a partition by number in a write transaction, the only kind
// the cache serves.
func loadPart(t *testing.T, tx *Tx, pid uint64) *Partition {
	t.Helper()
	p, err := tx.PartitionByID(pid)
	if err != nil {
		t.Fatalf("load partition %d: %v", pid, err)
	}
	return p
}

// wantScan checks what a read transaction scans from p's first offset.
func wantScan(t *testing.T, s *Store, pid uint64, want string) {
	t.Helper()
	view(t, s, func(tx *Tx) error {
		if got := strings.Join(scan(t, tx, pid, 1), " "); got != want {
			t.Fatalf("scan: %s, want %s", got, want)
		}
		return nil
	})
}

// storedPartition creates partition q/p0 in its own transaction.
func storedPartition(t *testing.T, s *Store) Partition {
	t.Helper()
	var p Partition
	update(t, s, func(tx *Tx) error {
		p = *newPartition(t, tx, "q", "p0")
		return nil
	})
	return p
}

// cached reports whether the store's cache holds p's record.
func cached(s *Store, p *Partition) bool {
	_, ok := s.parts.m[string(key8(p.QueueID, []byte(p.Name)))]
	return ok
}

func TestPartitionCacheServesCommittedRecords(t *testing.T) {
	s := openStore(t) // VerifyCache: every hit below is compared with the bucket
	var p Partition
	update(t, s, func(tx *Tx) error {
		p = *newPartition(t, tx, "q", "p0")
		appendMsgs(t, tx, &p, 10, "a", "b")
		return nil
	})
	if !cached(s, &p) {
		t.Fatal("a committed PutPartition is not cached")
	}
	update(t, s, func(tx *Tx) error {
		got := loadPart(t, tx, p.ID)
		if got.NextOffset != 3 || got.Messages != 2 || got.recentCount() != 1 {
			t.Fatalf("cached load: next %d, messages %d, references %d", got.NextOffset, got.Messages, got.recentCount())
		}
		// What the caller changes is its own copy.
		got.NextOffset, got.Name = 99, "other"
		if again := loadPart(t, tx, p.ID); again.NextOffset != 3 || again.Name != "p0" {
			t.Fatalf("a caller's edit reached the cache: %+v", again)
		}
		return nil
	})

	// A failed transaction leaves the committed record cached, not its own.
	boom := errors.New("boom")
	if err := s.Update(func(tx *Tx) error {
		appendMsgs(t, tx, &p, 20, "c")
		if got := loadPart(t, tx, p.ID); got.NextOffset != 4 {
			t.Fatalf("a transaction does not read its own write: next %d", got.NextOffset)
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("update: %v", err)
	}
	update(t, s, func(tx *Tx) error {
		if got := loadPart(t, tx, p.ID); got.NextOffset != 3 {
			t.Fatalf("after a failed transaction: next %d, want 3", got.NextOffset)
		}
		return nil
	})
	wantScan(t, s, p.ID, "1:a 2:b")
}

func TestPartitionCacheFollowsSavepointRollback(t *testing.T) {
	s := openStore(t)
	p := storedPartition(t, s)
	update(t, s, func(tx *Tx) error {
		appendMsgs(t, tx, &p, 10, "a") // noted in the overlay
		sp := tx.Savepoint()
		appendMsgs(t, tx, &p, 11, "b")
		must(t, tx.RollbackTo(sp))
		if got := loadPart(t, tx, p.ID); got.NextOffset != 2 || got.Messages != 1 {
			t.Fatalf("after rollback: next %d, messages %d, want 2 and 1", got.NextOffset, got.Messages)
		}
		appendMsgs(t, tx, &p, 12, "c")
		return nil
	})
	update(t, s, func(tx *Tx) error {
		if got := loadPart(t, tx, p.ID); got.NextOffset != 3 || got.Messages != 2 {
			t.Fatalf("committed: next %d, messages %d, want 3 and 2", got.NextOffset, got.Messages)
		}
		return nil
	})
	wantScan(t, s, p.ID, "1:a 2:c")
}

func TestPartitionCacheForgetsDeletedPartitions(t *testing.T) {
	s := openStore(t)
	var p Partition
	var q *Queue
	update(t, s, func(tx *Tx) error {
		p = *newPartition(t, tx, "q", "p0")
		appendMsgs(t, tx, &p, 10, "a")
		var err error
		q, err = tx.Queue("q")
		return err
	})
	update(t, s, func(tx *Tx) error { return tx.DeleteQueue(q) })
	if cached(s, &p) {
		t.Fatal("a deleted partition is still cached")
	}
	update(t, s, func(tx *Tx) error {
		if got, err := tx.Partition(p.QueueID, p.Name); err != nil || got != nil {
			t.Fatalf("deleted partition loads as %+v, %v", got, err)
		}
		return nil
	})
}

// A write to the partitions bucket that bypasses Tx.put would leave the
// cache stale; VerifyCache must catch it at the next load.
func TestVerifyCacheCatchesAnEscapedWrite(t *testing.T) {
	s := openStore(t)
	p := storedPartition(t, s)
	update(t, s, func(tx *Tx) error {
		changed := p
		changed.Messages = 7
		return tx.bucket(bParts).Put(key8(p.QueueID, []byte(p.Name)), changed.marshal())
	})
	err := s.Update(func(tx *Tx) error {
		_, err := tx.PartitionByID(p.ID)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "partition cache disagrees") {
		t.Fatalf("load after an escaped write: %v, want the cache's disagreement", err)
	}
}

func TestPartitionCacheEvictsOldest(t *testing.T) {
	c := newPartCache(3)
	for i := range 5 {
		c.add(fmt.Sprint(i), &Partition{ID: uint64(i)})
	}
	if len(c.m) != 3 {
		t.Fatalf("cache holds %d records, bound 3", len(c.m))
	}
	for i := range 5 {
		if _, ok := c.m[fmt.Sprint(i)]; ok != (i >= 2) {
			t.Fatalf("record %d cached %v after five adds to a cache of three", i, ok)
		}
	}
	c.add("4", &Partition{ID: 40}) // an update neither grows nor evicts
	if len(c.m) != 3 || c.m["4"].p.ID != 40 || c.m["2"] == nil {
		t.Fatalf("update of a cached key: %v", c.m)
	}
}

// Random pushes, failed transactions, savepoint rollbacks, walks of the
// bucket and deletes over more partitions than the cache holds, with every
// cache hit verified against the bucket; after every round the state must
// digest like the same operations applied to a store without the cache,
// which writes every record through at once.
func TestPartitionCacheRandomized(t *testing.T) {
	dir := t.TempDir()
	cachedStore, err := Open(filepath.Join(dir, "a.db"), StoreOptions{NoSync: true, VerifyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cachedStore.Close()
	cachedStore.parts = newPartCache(8) // fewer than the partitions: eviction is exercised
	plain, err := Open(filepath.Join(dir, "b.db"), StoreOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.parts = nil // no cache, no overlay, nothing kept back

	const parts = 20
	rng := rand.New(rand.NewPCG(1, 2))
	seq := 0
	for round := range 60 {
		// Decide the round's operations first, so both stores apply the same.
		type op struct {
			part     int
			n        int
			rollback bool
			walk     bool // read the bucket itself afterwards
		}
		var ops []op
		for range 1 + rng.IntN(6) {
			ops = append(ops, op{part: rng.IntN(parts), n: 1 + rng.IntN(3), rollback: rng.IntN(4) == 0, walk: rng.IntN(4) == 0})
		}
		fail := rng.IntN(5) == 0
		deleteQueue := round%17 == 16
		base := seq
		apply := func(tx *Tx) error {
			seq := base
			q, err := tx.Queue("q")
			if err != nil {
				return err
			}
			if deleteQueue && q != nil {
				return tx.DeleteQueue(q)
			}
			for _, o := range ops {
				name := fmt.Sprintf("p%02d", o.part)
				if q == nil {
					q = &Queue{Name: "q", UUID: [16]byte{1}}
					if err := tx.CreateQueue(q); err != nil {
						return err
					}
				}
				p, err := tx.Partition(q.ID, name)
				if err != nil {
					return err
				}
				if p == nil {
					p = &Partition{QueueID: q.ID, Name: name, UUID: [16]byte{2, byte(o.part)}}
					if err := tx.CreatePartition(p); err != nil {
						return err
					}
				}
				sp := 0
				if o.rollback {
					sp = tx.Savepoint()
				}
				ids := make([]string, o.n)
				for i := range ids {
					seq++
					ids[i] = fmt.Sprintf("m%d", seq)
				}
				appendMsgs(t, tx, p, int64(round), ids...)
				if o.rollback {
					if err := tx.RollbackTo(sp); err != nil {
						return err
					}
				}
				if o.walk {
					// What the bucket holds now is what a load answers.
					err := tx.ForEachPartition(q.ID, "", func(w *Partition) (bool, error) {
						l, err := tx.Partition(q.ID, w.Name)
						if err == nil && !bytes.Equal(l.marshal(), w.marshal()) {
							err = fmt.Errorf("walk read %+v, a load %+v", w, l)
						}
						return err == nil, err
					})
					if err != nil {
						return err
					}
				}
			}
			if fail {
				return errors.New("fail on purpose")
			}
			return nil
		}
		if err := cachedStore.Update(apply); err != nil && !fail {
			t.Fatalf("round %d, cached store: %v", round, err)
		}
		if err := plain.Update(apply); err != nil && !fail {
			t.Fatalf("round %d, plain store: %v", round, err)
		}
		if !fail {
			for _, o := range ops {
				seq += o.n
			}
		}
		sameDigest(t, cachedStore, plain, "round %d: digests differ with the cache and without", round)
	}
	if len(cachedStore.parts.m) > 8 {
		t.Fatalf("cache holds %d records, bound 8", len(cachedStore.parts.m))
	}
}

// A transaction over more partitions than a carving block holds (256) and
// whose records fill many blocks of values: every load, note and encoded
// record crosses block boundaries, and what it commits must be what a
// store without a cache commits, record for record (VerifyCache checks
// every cache hit against the bucket on the way).
func TestPartitionRecordsAcrossCarvingBlocks(t *testing.T) {
	dir := t.TempDir()
	cached, err := Open(filepath.Join(dir, "a.db"), StoreOptions{NoSync: true, VerifyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cached.Close()
	plain, err := Open(filepath.Join(dir, "b.db"), StoreOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.parts = nil

	const parts = 700
	name := func(i int) string { return fmt.Sprintf("p%04d", i) }
	round := func(r int) func(tx *Tx) error {
		return func(tx *Tx) error {
			q, err := tx.Queue("q")
			if err != nil {
				return err
			}
			if q == nil {
				q = &Queue{Name: "q", UUID: [16]byte{1}}
				if err := tx.CreateQueue(q); err != nil {
					return err
				}
			}
			for i := range parts {
				p, err := tx.Partition(q.ID, name(i))
				if err != nil {
					return err
				}
				if p == nil {
					p = &Partition{QueueID: q.ID, Name: name(i), UUID: [16]byte{2, byte(i), byte(i >> 8)}}
					if err := tx.CreatePartition(p); err != nil {
						return err
					}
				}
				// Twice in some partitions: the second load finds the note.
				for k := range 1 + i%2 {
					appendMsgs(t, tx, p, int64(r), fmt.Sprintf("r%d-%d-%d", r, i, k))
				}
			}
			return nil
		}
	}
	for r := range 3 { // creates, then loads from the cache (a slot per note)
		if err := cached.Update(round(r)); err != nil {
			t.Fatalf("round %d, cached store: %v", r, err)
		}
		if err := plain.Update(round(r)); err != nil {
			t.Fatalf("round %d, plain store: %v", r, err)
		}
		if cached.parts.noted < parts {
			t.Fatalf("round %d noted %d records, want at least %d", r, cached.parts.noted, parts)
		}
		records := func(s *Store) map[string][]byte {
			out := map[string][]byte{}
			view(t, s, func(tx *Tx) error {
				q, err := tx.Queue("q")
				if err != nil {
					return err
				}
				return tx.ForEachPartition(q.ID, "", func(p *Partition) (bool, error) {
					out[p.Name] = p.marshal()
					return true, nil
				})
			})
			return out
		}
		a, b := records(cached), records(plain)
		if len(a) != parts || len(b) != parts {
			t.Fatalf("round %d: %d and %d records, want %d", r, len(a), len(b), parts)
		}
		for k, v := range b {
			if !bytes.Equal(a[k], v) {
				t.Fatalf("round %d, %s: with the cache %x, without %x", r, k, a[k], v)
			}
		}
		sameDigest(t, cached, plain, "round %d: digests differ with the cache and without", r)
	}
}
