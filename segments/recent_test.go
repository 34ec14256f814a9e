package segments

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// bucketRefs lists the first offsets of pid's references in the segments
// bucket.
func bucketRefs(t *testing.T, tx *Tx, pid uint64) []uint64 {
	t.Helper()
	var out []uint64
	_, err := tx.walkBucketSegments(pid, 0, func(first uint64, _ blobRef) (bool, error) {
		out = append(out, first)
		return true, nil
	})
	must(t, err)
	return out
}

// checkRecentInvariant checks that p's stored references, in the bucket and
// in its record, are its segments, the record's all newer.
func checkRecentInvariant(t *testing.T, tx *Tx, pid uint64) *Partition {
	t.Helper()
	p, err := tx.PartitionByID(pid)
	if err != nil || p == nil {
		t.Fatalf("partition %d: %v", pid, err)
	}
	inBucket := bucketRefs(t, tx, pid)
	if n := uint64(len(inBucket) + p.recentCount()); n != p.Segments {
		t.Fatalf("%d references in the bucket and %d in the record, %d segments", len(inBucket), p.recentCount(), p.Segments)
	}
	if p.recentCount() > recentMax {
		t.Fatalf("record holds %d references", p.recentCount())
	}
	if len(inBucket) > 0 && p.recentCount() > 0 {
		if first, _ := p.recentAt(0); first <= inBucket[len(inBucket)-1] {
			t.Fatalf("record's oldest %d not after the bucket's newest %d", first, inBucket[len(inBucket)-1])
		}
	}
	return p
}

func TestRecentReferencesMoveToTheBucket(t *testing.T) {
	s := openStore(t)
	var pid uint64
	update(t, s, func(tx *Tx) error { pid = newPartition(t, tx, "q", "p").ID; return nil })
	// Segments of one and two messages, some several to a transaction.
	var want []string
	firsts := []uint64{}
	n := 0
	for n < 2*recentMax+5 {
		update(t, s, func(tx *Tx) error {
			p := &Partition{ID: pid}
			for range 1 + n%3 {
				ids := []string{fmt.Sprintf("m%d", n)}
				if n%2 == 1 {
					ids = append(ids, fmt.Sprintf("m%d-2", n))
				}
				first := appendMsgs(t, tx, p, int64(10+n), ids...)
				firsts = append(firsts, first)
				for i, id := range ids {
					want = append(want, fmt.Sprintf("%d:%s", first+uint64(i), id))
				}
				n++
			}
			return nil
		})
		view(t, s, func(tx *Tx) error { checkRecentInvariant(t, tx, pid); return nil })
	}
	view(t, s, func(tx *Tx) error {
		p := checkRecentInvariant(t, tx, pid)
		if len(bucketRefs(t, tx, pid)) == 0 || p.recentCount() == 0 {
			t.Fatalf("%d references in the bucket, %d in the record: the test covers neither the move nor the record", len(bucketRefs(t, tx, pid)), p.recentCount())
		}
		// Every walk sees every segment once, in order, from any offset.
		for i := range want {
			var from uint64
			fmt.Sscanf(want[i], "%d:", &from)
			if got := scan(t, tx, pid, from); !slices.Equal(got, want[i:]) {
				t.Fatalf("scan from %d: %v, want %v", from, got, want[i:])
			}
		}
		var fwd, rev []uint64
		must(t, tx.Segments(p, func(si SegmentInfo) (bool, error) { fwd = append(fwd, si.First); return true, nil }))
		must(t, tx.SegmentsReverse(p, func(si SegmentInfo) (bool, error) { rev = append(rev, si.First); return true, nil }))
		slices.Reverse(rev)
		if !slices.Equal(fwd, firsts) || !slices.Equal(rev, firsts) {
			t.Fatalf("segments %v, reverse %v, want %v", fwd, rev, firsts)
		}
		for _, w := range want {
			var off uint64
			var id string
			fmt.Sscanf(w, "%d:%s", &off, &id)
			if ref, ok, err := tx.TxID(p, id); err != nil || !ok || ref.Offset != off {
				t.Fatalf("transaction id %s: %+v %v %v", id, ref, ok, err)
			}
			if m, err := tx.MessageAt(p, off); err != nil || m == nil || m.TxID != id {
				t.Fatalf("message at %d: %+v %v", off, m, err)
			}
		}
		return nil
	})
	checkAccounting(t, s)

	// Deleting from both places: the bucket's oldest segments up to the
	// record's, so the oldest offset moves into the record; then one in
	// the middle of the record; then cut one of the record short.
	update(t, s, func(tx *Tx) error {
		p, _ := tx.PartitionByID(pid)
		inBucket := bucketRefs(t, tx, pid)
		for _, f := range inBucket {
			if _, err := tx.DeleteSegment(p, f); err != nil {
				t.Fatal(err)
			}
		}
		recentFirst, _ := p.recentAt(0)
		if p.FirstOffset != recentFirst {
			t.Fatalf("oldest offset %d after deleting the bucket's segments, the record's oldest is %d", p.FirstOffset, recentFirst)
		}
		middle, _ := p.recentAt(p.recentCount() / 2)
		if n, err := tx.DeleteSegment(p, middle); err != nil || n == 0 {
			t.Fatalf("delete %d from the record: %d %v", middle, n, err)
		}
		if m, _ := tx.MessageAt(p, middle); m != nil {
			t.Fatalf("deleted message at %d still read", middle)
		}
		last, ref := p.recentAt(p.recentCount() - 1)
		if r, _ := decodeRef(ref); r.Count == 2 {
			if n, err := tx.TruncateSegment(p, last, 1); err != nil || n != 1 {
				t.Fatalf("truncate %d: %d %v", last, n, err)
			}
		} else if _, err := tx.TruncateSegment(p, last-1, 1); err != nil {
			t.Fatal(err)
		}
		return tx.PutPartition(p)
	})
	view(t, s, func(tx *Tx) error {
		p := checkRecentInvariant(t, tx, pid)
		if got := len(scan(t, tx, pid, 0)); uint64(got) != p.Messages {
			t.Fatalf("%d messages scanned, %d recorded", got, p.Messages)
		}
		return nil
	})
	checkAccounting(t, s)
}

func TestDigestIgnoresWhereReferencesAreKept(t *testing.T) {
	a, b := openStore(t), openStore(t)
	for _, s := range []*Store{a, b} {
		update(t, s, func(tx *Tx) error {
			p := newPartition(t, tx, "q", "p")
			for i := range recentMax + 3 {
				appendMsgs(t, tx, p, int64(i), fmt.Sprintf("m%d", i))
			}
			return nil
		})
	}
	update(t, b, func(tx *Tx) error {
		p, _ := tx.PartitionByID(1)
		must(t, tx.flushRecent(p))
		return tx.PutPartition(p)
	})
	view(t, b, func(tx *Tx) error {
		if p, _ := tx.PartitionByID(1); p.recentCount() != 0 {
			t.Fatal("flush kept references in the record")
		}
		return nil
	})
	_, da, err := a.Digest()
	must(t, err)
	_, db, err := b.Digest()
	must(t, err)
	if da != db {
		t.Fatal("the same segments hash differently when their references are kept elsewhere")
	}
	update(t, b, func(tx *Tx) error {
		p, _ := tx.PartitionByID(1)
		_, err := tx.DeleteSegment(p, p.NextOffset-1)
		must(t, err)
		return tx.PutPartition(p)
	})
	if _, db2, _ := b.Digest(); db2 == da {
		t.Fatal("a deleted segment left the digest unchanged")
	}
}

func TestRollbackUndoesAMoveToTheBucket(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		for i := range recentMax {
			appendMsgs(t, tx, p, int64(i), fmt.Sprintf("m%d", i))
		}
		return nil
	})
	_, before, _ := s.Digest()
	update(t, s, func(tx *Tx) error {
		sp := tx.Savepoint()
		p := &Partition{ID: 1}
		appendMsgs(t, tx, p, 100, "moved") // the record is full: this moves it
		if len(bucketRefs(t, tx, 1)) != recentMax {
			t.Fatalf("%d references moved, want %d", len(bucketRefs(t, tx, 1)), recentMax)
		}
		return tx.RollbackTo(sp)
	})
	if _, after, _ := s.Digest(); after != before {
		t.Fatal("rolled back push changed the state")
	}
	view(t, s, func(tx *Tx) error {
		if n := len(bucketRefs(t, tx, 1)); n != 0 {
			t.Fatalf("%d references left in the bucket", n)
		}
		checkRecentInvariant(t, tx, 1)
		return nil
	})
	checkAccounting(t, s)
}

// FuzzPartitionRecord: a partition record from a damaged file or snapshot
// decodes or is ErrCorrupt, never a panic, and one that decodes encodes back
// to the same bytes.
func FuzzPartitionRecord(f *testing.F) {
	p := Partition{ID: 3, QueueID: 2, Name: "p", NextOffset: 9}
	p.recentAppend(4, blobRef{File: 1, Pos: 8, Len: 40, CreatedAt: 5, Count: 3}.encode())
	p.recentAppend(7, blobRef{File: 1, Pos: 48, Len: 30, CreatedAt: 6, Count: 2}.encode())
	f.Add(key8(2, []byte("p")), p.marshal())
	f.Add(key8(2, []byte("p")), p.marshalSchema5())
	p.IDsIndexedFrom = 5
	f.Add(key8(2, []byte("p")), p.marshal())
	f.Add(key8(2, []byte("p")), p.marshalSchema7())
	p.WindowMark, p.WindowCount, p.WindowFirst = 3, 2, 8
	f.Add(key8(2, []byte("p")), p.marshal())
	f.Add(key8(2, nil), make([]byte, partitionFixed))
	f.Fuzz(func(t *testing.T, k, v []byte) {
		var p Partition
		if err := p.unmarshal(k, v); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		// A record this build wrote decodes and encodes back to itself; a
		// schema 4 to 7 one (fixed-width fields, references unpacked, or no
		// IDsIndexedFrom) to this build's form, which then round-trips.
		got := p.marshal()
		var q Partition
		if err := q.unmarshal(k, got); err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("decoded %x to %+v, encoded back %x, which decodes to %+v (%v)", v, p, got, q, err)
		}
		if again := q.marshal(); !bytes.Equal(again, got) {
			t.Fatalf("encoded %x, then %x", got, again)
		}
	})
}

// reopenAs records schema in s's file as an older build would have left
// it, closes s and opens the file again, and checks that the open recorded
// this build's schema and changed nothing else in the state.
func reopenAs(t *testing.T, s *Store, path string, schema uint64) *Store {
	t.Helper()
	_, before, err := s.Digest() // the meta bucket, schema included, is in the digest
	must(t, err)
	must(t, s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaSchema, be64(schema)) }))
	must(t, s.Close())
	s = openSized(t, path, 0)
	view(t, s, func(tx *Tx) error {
		if v := tx.tx.Bucket(bucketMeta).Get(metaSchema); u64(v) != schemaVersion {
			t.Fatalf("schema %d after opening a schema %d file", u64(v), schema)
		}
		return nil
	})
	if _, after, _ := s.Digest(); after != before {
		t.Fatalf("opening a schema %d file changed its state", schema)
	}
	return s
}

// rewriteRecords stores, in place of each partition record, what as returns
// for it (an older build's form of it, say), unless that is nil, bypassing
// the store's cache (tests reopen the store after it). It returns how many
// it rewrote.
func rewriteRecords(t *testing.T, s *Store, as func(p *Partition) []byte) int {
	t.Helper()
	n := 0
	must(t, s.db.Update(func(btx *bolt.Tx) error {
		b := btx.Bucket(bucketParts)
		var rows [][2][]byte
		must(t, b.ForEach(func(k, v []byte) error {
			var p Partition
			must(t, p.unmarshal(k, v))
			if rec := as(&p); rec != nil {
				rows = append(rows, [2][]byte{bytes.Clone(k), rec})
			}
			return nil
		}))
		for _, r := range rows {
			must(t, b.Put(r[0], r[1]))
			n++
		}
		return nil
	}))
	return n
}

// marshalSchema7 is p's record as schema 6 and 7 builds stored it.
func (p *Partition) marshalSchema7() []byte {
	b := make([]byte, 0, partitionFixed+len(p.Name)+sectionHead+p.recentCount()*packedEntryHint)
	return p.packSection(p.appendSchema7Fields(b))
}

// marshalUnpacked is p's record as a schema 4 build stored it: the
// references section as in memory, 41 bytes a reference.
func (p *Partition) marshalUnpacked() []byte {
	return append(p.appendSchema7Fields(nil), p.recent...)
}

// marshalSchema5 is p's record as a schema 5 build stored it: references
// packed after their own marker, no IDsIndexedFrom.
func (p *Partition) marshalSchema5() []byte {
	b := p.appendSchema7Fields(nil)
	if len(p.recent) == 0 {
		return b
	}
	return p.packRefs(append(b, recentPacked))
}

// A schema 4 file (references in records, unpacked) opens as this build's
// schema with nothing to rewrite: its records read as they are and are
// packed when next written. It is recorded as this build's schema, which a
// build that reads only schema 4 refuses.
func TestSchema4FileOpens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true})
	must(t, err)
	var want []string
	update(t, s, func(tx *Tx) error {
		for n, name := range []string{"p", "r"} {
			p := newPartition(t, tx, "q", name)
			for i := range recentMax + 3 {
				m := fmt.Sprintf("%s%d", name, i)
				appendMsgs(t, tx, p, int64(i), m)
				if n == 0 {
					want = append(want, fmt.Sprintf("%d:%s", i+1, m))
				}
			}
		}
		return nil
	})
	_, packed, err := s.Digest()
	must(t, err)
	unpacked := rewriteRecords(t, s, func(p *Partition) []byte {
		if p.recentCount() == 0 {
			return nil
		}
		return p.marshalUnpacked()
	})
	if unpacked != 2 {
		t.Fatalf("%d records hold references, want 2", unpacked)
	}
	if _, d, _ := s.Digest(); d != packed {
		t.Fatal("the digest of the same state differs as its references are packed or not")
	}
	s = reopenAs(t, s, path, 4)
	view(t, s, func(tx *Tx) error {
		if got := scan(t, tx, 1, 0); !slices.Equal(got, want) {
			t.Fatalf("scan of a schema 4 record: %v", got)
		}
		return nil
	})
	update(t, s, func(tx *Tx) error {
		appendMsgs(t, tx, &Partition{ID: 1}, 100, "last")
		return nil
	})
	want = append(want, fmt.Sprintf("%d:last", recentMax+4))
	view(t, s, func(tx *Tx) error {
		checkRecentInvariant(t, tx, 1)
		if v := tx.tx.Bucket(bucketParts).Get(key8(1, []byte("p"))); len(v) == 0 || v[0] != recordCompact {
			t.Fatalf("partition record after a write: %x, want this build's compact form", v)
		}
		if got := scan(t, tx, 1, 0); !slices.Equal(got, want) {
			t.Fatalf("scan %v", got)
		}
		return nil
	})
}

// A schema 3 file (every reference in the bucket) opens as schema 4 with
// nothing to rewrite, and its partitions take references into their records
// from then on. It is recorded as schema 4, which a build that reads only
// schema 3 refuses.
func TestSchema3FileOpensAsSchema4(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true})
	must(t, err)
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		for i := range 3 {
			appendMsgs(t, tx, p, int64(i), fmt.Sprintf("m%d", i))
		}
		// As a schema 3 build stored them.
		must(t, tx.flushRecent(p))
		return tx.PutPartition(p)
	})
	s = reopenAs(t, s, path, 3)
	update(t, s, func(tx *Tx) error {
		appendMsgs(t, tx, &Partition{ID: 1}, 10, "m3")
		return nil
	})
	view(t, s, func(tx *Tx) error {
		p := checkRecentInvariant(t, tx, 1)
		if len(bucketRefs(t, tx, 1)) != 3 || p.recentCount() != 1 {
			t.Fatalf("%d references in the bucket, %d in the record", len(bucketRefs(t, tx, 1)), p.recentCount())
		}
		if got := scan(t, tx, 1, 0); !slices.Equal(got, []string{"1:m0", "2:m1", "3:m2", "4:m3"}) {
			t.Fatalf("scan %v", got)
		}
		return nil
	})
}
