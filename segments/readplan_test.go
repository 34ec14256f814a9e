package segments

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readPlanned lists "offset:txid" of each planned range.
func readPlanned(t *testing.T, tx *Tx, rp *ReadPlan) [][]string {
	t.Helper()
	out := make([][]string, rp.Len())
	err := tx.ReadPlanned(rp, func(rng int, sm *StoredMessage) error {
		out[rng] = append(out[rng], fmt.Sprintf("%d:%s", sm.Offset, sm.TxID))
		return nil
	})
	must(t, err)
	return out
}

// newPartitions commits queue q with n partitions, p000.., and returns
// their ids in name order.
func newPartitions(t *testing.T, s *Store, n int) []uint64 {
	t.Helper()
	pids := make([]uint64, n)
	update(t, s, func(tx *Tx) error {
		for i := range pids {
			pids[i] = newPartition(t, tx, "q", fmt.Sprintf("p%03d", i)).ID
		}
		return nil
	})
	return pids
}

// scanRange is what Scan gives of pid from from to last.
func scanRange(t *testing.T, tx *Tx, pid, from, last uint64) []string {
	t.Helper()
	var out []string
	for _, m := range scan(t, tx, pid, from) {
		var off uint64
		fmt.Sscanf(m, "%d:", &off)
		if off <= last {
			out = append(out, m)
		}
	}
	return out
}

// TestReadPlanGivesWhatScanGives plans random ranges over partitions whose
// segments interleave in several blob files, with deleted messages, and in a
// transaction that appended segments of its own, and compares every range
// with Scan.
func TestReadPlanGivesWhatScanGives(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 7))
			s, err := Open(filepath.Join(t.TempDir(), "state.db"), StoreOptions{NoSync: true, VerifyCache: true, BlobFileSize: 2 << 10})
			must(t, err)
			t.Cleanup(func() { s.Close() })
			const parts = 12
			pids := newPartitions(t, s, parts)
			n := 0
			fill := func(tx *Tx, segments int) {
				for range segments {
					p := &Partition{ID: pids[rnd.IntN(parts)]}
					ids := make([]string, 1+rnd.IntN(3))
					for i := range ids {
						ids[i] = fmt.Sprintf("m%d", n)
						n++
					}
					appendMsgs(t, tx, p, int64(10+n), ids...)
				}
			}
			for range 20 {
				update(t, s, func(tx *Tx) error { fill(tx, 1+rnd.IntN(12)); return nil })
			}
			update(t, s, func(tx *Tx) error {
				for range 15 {
					p, err := tx.PartitionByID(pids[rnd.IntN(parts)])
					must(t, err)
					if p.NextOffset == 0 {
						continue
					}
					if _, err := tx.DeleteMessage(p, rnd.Uint64N(p.NextOffset)); err != nil {
						t.Fatal(err)
					}
					must(t, tx.PutPartition(p))
				}
				return nil
			})
			check := func(tx *Tx) {
				var (
					rp   ReadPlan
					want [][]string
				)
				for _, i := range rnd.Perm(parts)[:1+rnd.IntN(parts)] {
					p, err := tx.PartitionByID(pids[i])
					must(t, err)
					if p.NextOffset == 0 {
						continue
					}
					from := rnd.Uint64N(p.NextOffset)
					last := from + rnd.Uint64N(p.NextOffset-from)
					rng, err := tx.PlanRead(&rp, p, from, last)
					must(t, err)
					if rng != len(want) {
						t.Fatalf("range %d numbered %d", len(want), rng)
					}
					want = append(want, scanRange(t, tx, pids[i], from, last))
				}
				got := readPlanned(t, tx, &rp)
				for i := range want {
					if !slices.Equal(got[i], want[i]) {
						t.Fatalf("range %d: read %v, Scan %v", i, got[i], want[i])
					}
				}
			}
			for range 10 {
				view(t, s, func(tx *Tx) error { check(tx); return nil })
				// Segments of the transaction's own, not yet in any file.
				update(t, s, func(tx *Tx) error { fill(tx, 5); check(tx); return nil })
			}
		})
	}
}

// TestReadPlanReadsNeighboursTogether: one-message segments of 100
// partitions, written side by side by one transaction, are read by one
// pread when planned together, where a Scan of each reads each.
func TestReadPlanReadsNeighboursTogether(t *testing.T) {
	s := openStore(t)
	const parts = 100
	pids := newPartitions(t, s, parts)
	// Two layers: each partition's first message in one transaction, its
	// second in the next, so a partition's two segments lie 100 segments
	// (about 10 KB, more than planGap) apart and a layer's lie side by side.
	id := func(layer, i int) string { return fmt.Sprintf("m%d-%d-%s", layer, i, strings.Repeat("x", 32)) }
	for layer := range 2 {
		update(t, s, func(tx *Tx) error {
			for i, pid := range pids {
				appendMsgs(t, tx, &Partition{ID: pid}, int64(10+layer), id(layer, i))
			}
			return nil
		})
	}
	reads := func(fn func(tx *Tx)) uint64 {
		before := s.blobs.reads.Load()
		view(t, s, func(tx *Tx) error { fn(tx); return nil })
		return s.blobs.reads.Load() - before
	}
	plan := func(tx *Tx, from, last uint64) [][]string {
		var rp ReadPlan
		for _, pid := range pids {
			p, err := tx.PartitionByID(pid)
			must(t, err)
			_, err = tx.PlanRead(&rp, p, from, last)
			must(t, err)
		}
		return readPlanned(t, tx, &rp)
	}
	if n := reads(func(tx *Tx) {
		got := plan(tx, 1, 1)
		for i := range got {
			if want := []string{"1:" + id(0, i)}; !slices.Equal(got[i], want) {
				t.Fatalf("partition %d: %v, want %v", i, got[i], want)
			}
		}
	}); n != 1 {
		t.Fatalf("a layer of 100 neighbouring segments took %d preads, want 1", n)
	}
	if n := reads(func(tx *Tx) { plan(tx, 1, 2) }); n != 1 {
		t.Fatalf("two layers, 20 KB in all, took %d preads, want 1", n)
	}
	if n := reads(func(tx *Tx) {
		for _, pid := range pids {
			scan(t, tx, pid, 0)
		}
	}); n != 4*parts { // Scan and ScanTxIDs, two segments each
		t.Fatalf("scanning each partition took %d preads, want %d", n, 4*parts)
	}
	// Only the first partition's two segments: 99 segments lie between
	// them, more than planGap, so two reads.
	if n := reads(func(tx *Tx) {
		var rp ReadPlan
		p, err := tx.PartitionByID(pids[0])
		must(t, err)
		_, err = tx.PlanRead(&rp, p, 1, 2)
		must(t, err)
		if got := readPlanned(t, tx, &rp); !slices.Equal(got[0], []string{"1:" + id(0, 0), "2:" + id(1, 0)}) {
			t.Fatalf("read %v", got[0])
		}
	}); n != 2 {
		t.Fatalf("two segments far apart took %d preads, want 2", n)
	}
}
