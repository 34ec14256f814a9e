package segments

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// bucketKeys counts pid's keys in the segments bucket and checks that each
// value decodes to at most blockMax references.
func bucketKeys(t *testing.T, tx *Tx, pid uint64) int {
	t.Helper()
	n := 0
	c := tx.bucket(bSegments).Cursor()
	prefix := be64(pid)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		refs, err := entryRefs(pid, u64(k[8:]), v)
		must(t, err)
		if len(refs)/recentEntry > blockMax {
			t.Fatalf("entry %d holds %d references", u64(k[8:]), len(refs)/recentEntry)
		}
		n++
	}
	return n
}

// rewriteBucketAsSingles stores every reference in the segments bucket
// under its own key, as schema 6 and older builds did, and returns how many
// references there are.
func rewriteBucketAsSingles(t *testing.T, s *Store) int {
	t.Helper()
	n := 0
	must(t, s.db.Update(func(btx *bolt.Tx) error {
		b := btx.Bucket(bucketSegments)
		var keys, singles [][]byte
		must(t, b.ForEach(func(k, v []byte) error {
			refs, err := entryRefs(u64(k), u64(k[8:]), v)
			must(t, err)
			keys = append(keys, bytes.Clone(k))
			for i := 0; i < len(refs); i += recentEntry {
				singles = append(singles, key88(u64(k), u64(refs[i:])), refs[i+8:i+recentEntry])
			}
			return nil
		}))
		for _, k := range keys {
			must(t, b.Delete(k))
		}
		for i := 0; i < len(singles); i += 2 {
			must(t, b.Put(singles[i], singles[i+1]))
			n++
		}
		return nil
	}))
	return n
}

// A move of a full record to the bucket is one key; the walks see its
// references one by one.
func TestMoveToTheBucketIsOneBlock(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		for i := range 2*recentMax + 1 {
			appendMsgs(t, tx, p, int64(i), fmt.Sprintf("m%d", i))
		}
		return nil
	})
	view(t, s, func(tx *Tx) error {
		p := checkRecentInvariant(t, tx, 1)
		if n := bucketKeys(t, tx, 1); n != 2 {
			t.Fatalf("%d keys in the bucket after two moves, want 2", n)
		}
		if got := bucketRefs(t, tx, 1); len(got) != 2*recentMax || got[0] != 1 || got[len(got)-1] != 2*recentMax {
			t.Fatalf("bucket walk %v", got)
		}
		if p.recentCount() != 1 {
			t.Fatalf("%d references in the record, want 1", p.recentCount())
		}
		return nil
	})
	checkAccounting(t, s)
}

// Cuts inside a block insert into it; one that would take it past
// blockMax splits it, and every walk still reads each message once, in
// order.
func TestBlockSplitsWhenCutsOutgrowIt(t *testing.T) {
	s := openStore(t)
	const per = 7
	var want []string
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		for seg := range recentMax + 1 {
			ids := make([]string, per)
			for i := range ids {
				ids[i] = fmt.Sprintf("m%d-%d", seg, i)
			}
			first := appendMsgs(t, tx, p, int64(seg), ids...)
			for i, id := range ids {
				want = append(want, fmt.Sprintf("%d:%s", first+uint64(i), id))
			}
		}
		return nil
	})
	drop := func(off uint64) {
		t.Helper()
		update(t, s, func(tx *Tx) error {
			p, _ := tx.PartitionByID(1)
			if ok, err := tx.DeleteMessage(p, off); err != nil || !ok {
				t.Fatalf("delete %d: %v %v", off, ok, err)
			}
			want = slices.DeleteFunc(want, func(w string) bool { return strings.HasPrefix(w, fmt.Sprintf("%d:", off)) })
			return tx.PutPartition(p)
		})
	}
	// The middle message of each of the block's 16 segments: 32 segments,
	// a full block; then the middle of the first segment's head: 33.
	for seg := range recentMax {
		drop(uint64(seg*per + 1 + per/2))
	}
	view(t, s, func(tx *Tx) error {
		if n := bucketKeys(t, tx, 1); n != 1 {
			t.Fatalf("%d keys after filling the block, want 1", n)
		}
		return nil
	})
	drop(2)
	view(t, s, func(tx *Tx) error {
		p := checkRecentInvariant(t, tx, 1)
		if n := bucketKeys(t, tx, 1); n != 2 {
			t.Fatalf("%d keys after the block outgrew %d references, want 2", n, blockMax)
		}
		if p.Segments != 2*recentMax+2 {
			t.Fatalf("%d segments", p.Segments)
		}
		for i := range want {
			var from uint64
			fmt.Sscanf(want[i], "%d:", &from)
			if got := scan(t, tx, 1, from); !slices.Equal(got, want[i:]) {
				t.Fatalf("scan from %d: %v, want %v", from, got, want[i:])
			}
		}
		var fwd, rev []uint64
		must(t, tx.Segments(p, func(si SegmentInfo) (bool, error) { fwd = append(fwd, si.First); return true, nil }))
		must(t, tx.SegmentsReverse(p, func(si SegmentInfo) (bool, error) { rev = append(rev, si.First); return true, nil }))
		slices.Reverse(rev)
		if !slices.Equal(fwd, rev) || len(fwd) != int(p.Segments) || !slices.IsSorted(fwd) {
			t.Fatalf("segments %v, reverse %v", fwd, rev)
		}
		for _, f := range fwd {
			if si, ok, err := tx.SegmentAt(p, f); err != nil || !ok || si.First != f {
				t.Fatalf("segment at %d: %+v %v %v", f, si, ok, err)
			}
		}
		return nil
	})
	checkAccounting(t, s)
}

// A schema 6 file holds every reference of the bucket under its own key.
// It opens as this build's schema with nothing rewritten, hashes as the
// same state in blocks does, and every later edit of it (cuts, deletions,
// truncations, moves) leaves the state a store kept in blocks from the
// start reaches with the same edits.
func TestSchema6FileEditsAsBlocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	legacy, blocks := openSized(t, path, 0), openStore(t)
	fill := func(s *Store) {
		update(t, s, func(tx *Tx) error {
			for _, name := range []string{"p", "r"} {
				p := newPartition(t, tx, "q", name)
				for seg := range 3*recentMax + 5 {
					ids := make([]string, 1+seg%4)
					for i := range ids {
						ids[i] = fmt.Sprintf("%s%d-%d", name, seg, i)
					}
					appendMsgs(t, tx, p, int64(seg), ids...)
				}
			}
			return nil
		})
	}
	fill(legacy)
	fill(blocks)
	_, want, err := blocks.Digest()
	must(t, err)
	if n := rewriteBucketAsSingles(t, legacy); n != 2*3*recentMax {
		t.Fatalf("%d references rewritten, want %d", n, 2*3*recentMax)
	}
	if _, got, _ := legacy.Digest(); got != want {
		t.Fatal("the same segments hash differently as singles and in blocks")
	}
	legacy = reopenAs(t, legacy, path, 6)
	view(t, legacy, func(tx *Tx) error {
		if n := bucketKeys(t, tx, 1); n != 3*recentMax {
			t.Fatalf("%d keys, want the %d singles", n, 3*recentMax)
		}
		return nil
	})

	rng := rand.New(rand.NewPCG(6, 7))
	n := 0
	for step := range 300 {
		// The choice is made on the legacy store; both stores apply it to
		// their own copy of the partition's record, then store it.
		var (
			pid uint64
			op  func(tx *Tx, p *Partition) error
		)
		view(t, legacy, func(tx *Tx) error {
			p, _ := tx.PartitionByID(uint64(1 + rng.IntN(2)))
			var segs [][2]uint64
			must(t, tx.walkSegments(p, 0, func(f uint64, ref blobRef) (bool, error) {
				segs = append(segs, [2]uint64{f, uint64(ref.Count)})
				return true, nil
			}))
			pid = p.ID
			switch k := rng.IntN(10); {
			case k < 3 || len(segs) == 0:
				ids := make([]string, 1+rng.IntN(4))
				for i := range ids {
					ids[i] = fmt.Sprintf("n%d", n)
					n++
				}
				op = func(tx *Tx, p *Partition) error {
					appendMsgs(t, tx, p, int64(1000+step), ids...)
					return nil
				}
			case k < 7:
				sg := segs[rng.IntN(len(segs))]
				off := sg[0] + uint64(rng.IntN(int(sg[1])))
				op = func(tx *Tx, p *Partition) error {
					ok, err := tx.DeleteMessage(p, off)
					if err == nil && !ok {
						err = fmt.Errorf("partition %d: nothing at %d", pid, off)
					}
					return err
				}
			case k < 8:
				// Retention: the oldest segment.
				op = func(tx *Tx, p *Partition) error { _, err := tx.DeleteSegment(p, segs[0][0]); return err }
			default:
				sg := segs[rng.IntN(len(segs))]
				keep := uint64(rng.IntN(int(sg[1])))
				op = func(tx *Tx, p *Partition) error { _, err := tx.TruncateSegment(p, sg[0], keep); return err }
			}
			return nil
		})
		for _, s := range []*Store{legacy, blocks} {
			update(t, s, func(tx *Tx) error {
				p, err := tx.PartitionByID(pid)
				if err != nil {
					return err
				}
				if err := op(tx, p); err != nil {
					return err
				}
				return tx.PutPartition(p)
			})
		}
		sameDigest(t, legacy, blocks, "step %d: the store opened from singles and the one in blocks differ", step)
		view(t, legacy, func(tx *Tx) error {
			for pid := uint64(1); pid <= 2; pid++ {
				checkRecentInvariant(t, tx, pid)
				bucketKeys(t, tx, pid)
			}
			return nil
		})
	}
	checkAccounting(t, legacy)
	checkAccounting(t, blocks)
}

// A damaged bucket value is ErrCorrupt, whichever way it is damaged.
func TestDamagedBlocks(t *testing.T) {
	ref := func(first uint64, count uint32) []byte {
		return append(be64(first), blobRef{File: 1, Pos: int64(first) * 10, Len: 10, CreatedAt: 7, Count: count}.encode()...)
	}
	good := packBlock(slices.Concat(ref(5, 2), ref(7, 1), ref(8, 3)))
	if refs, err := entryRefs(1, 5, good); err != nil || len(refs) != 3*recentEntry {
		t.Fatalf("a good block: %d bytes, %v", len(refs), err)
	}
	full := func(n int) []byte {
		var refs []byte
		for i := range n {
			refs = append(refs, ref(uint64(5+i), 1)...)
		}
		return packBlock(refs)
	}
	if _, err := entryRefs(1, 5, full(blockMax)); err != nil {
		t.Fatalf("a block of %d: %v", blockMax, err)
	}
	for _, c := range []struct {
		name  string
		first uint64
		v     []byte
	}{
		{"empty value", 5, nil},
		{"a single reference cut short", 5, blobRef{Count: 1}.encode()[:refSize-1]},
		{"a marker alone", 5, []byte{blockMarker}},
		{"its first reference not at its key", 5, append([]byte{blockMarker}, packRefList(nil, ref(7, 1), 5, 0)...)},
		{"cut inside a reference", 5, good[:len(good)-1]},
		{"out of order", 5, packBlock(slices.Concat(ref(5, 2), ref(9, 1), ref(8, 1)))},
		{"one offset twice", 5, packBlock(slices.Concat(ref(5, 2), ref(5, 1)))},
		{"more than blockMax", 5, full(blockMax + 1)},
		{"a reference with a negative position", 5, packBlock(append(be64(5), blobRef{Pos: -1, Count: 1}.encode()...))},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := entryRefs(1, c.first, c.v); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
		})
	}
}

// FuzzEntryRefs: a segments-bucket value from a damaged file or snapshot
// decodes or is ErrCorrupt, never a panic; what decodes packs into a block
// that decodes to the same references.
func FuzzEntryRefs(f *testing.F) {
	r := blobRef{File: 2, Pos: 40, Len: 30, CreatedAt: 1_700_000_000_000_000, Count: 4}
	f.Add(uint64(9), r.encode())
	f.Add(uint64(9), packBlock(slices.Concat(append(be64(9), r.encode()...), append(be64(13), r.encode()...))))
	f.Add(uint64(0), []byte{blockMarker, 0})
	f.Fuzz(func(t *testing.T, first uint64, v []byte) {
		refs, err := entryRefs(3, first, v)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		again, err := entryRefs(3, first, packBlock(refs))
		if err != nil || !bytes.Equal(again, refs) {
			t.Fatalf("%x decoded to %x, packed and decoded to %x (%v)", v, refs, again, err)
		}
	})
}
