package segments

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// modelMsg is one stored message of the model.
type modelMsg struct {
	off     uint64
	txid    string
	payload string
	at      int64
}

// checkAgainstModel compares every partition of the model with the store: reads,
// counters, the index, the references' invariant and the blob accounting.
func checkAgainstModel(t *testing.T, s *Store, model map[uint64][]modelMsg, where string) {
	t.Helper()
	view(t, s, func(tx *Tx) error {
		for pid, want := range model {
			p := checkRecentInvariant(t, tx, pid)
			var got []modelMsg
			must(t, tx.Scan(p, 0, func(sm *StoredMessage) (bool, error) {
				got = append(got, modelMsg{sm.Offset, sm.TxID, string(sm.Payload), sm.CreatedAt})
				return true, nil
			}))
			if !slices.Equal(got, want) {
				t.Fatalf("%s: partition %d reads %v, want %v", where, pid, got, want)
			}
			var bytesIn uint64
			for _, m := range want {
				bytesIn += uint64(len(m.payload))
				off, ok, err := tx.TxIDOffset(p.QueueID, pid, m.txid)
				if err != nil || !ok || off != m.off {
					t.Fatalf("%s: %s indexed at %d %v %v, stored at %d", where, m.txid, off, ok, err, m.off)
				}
			}
			if p.Messages != uint64(len(want)) || p.Bytes != bytesIn {
				t.Fatalf("%s: partition %d counts %d messages %d bytes, holds %d and %d", where, pid, p.Messages, p.Bytes, len(want), bytesIn)
			}
			if len(want) > 0 && p.FirstOffset != want[0].off || len(want) == 0 && p.FirstOffset != p.NextOffset {
				t.Fatalf("%s: partition %d oldest offset %d", where, pid, p.FirstOffset)
			}
		}
		return nil
	})
	checkAccounting(t, s)
}

// TestStorageRandomCutsRolloverSavepointsRestore drives random
// appends, message cuts (DeleteMessage), OJS truncations and retention
// deletions over two partitions, each operation under a savepoint that is
// rolled back at random, with 300-byte blob files (a rollover every few
// transactions) and seals between transactions; after every transaction
// the store must match a model, and at intervals a reopen, a plain
// snapshot restore and a linked snapshot restore must hold the same
// digest and reads.
//
// segments/DESIGN.md: "the files bucket accounts for each file's committed
// length and live bytes"; "A savepoint also marks the pending blobs, so
// rolling a command back drops its blobs with its keys"; "Two nodes with
// the same digest hold the same state whatever their files look like".
func TestStorageRandomCutsRolloverSavepointsRestore(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			const fileSize = 300
			path := filepath.Join(t.TempDir(), "state.db")
			s, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true, BlobFileSize: fileSize})
			must(t, err)
			defer func() { s.Close() }()
			var pids []uint64
			update(t, s, func(tx *Tx) error {
				pids = append(pids, newPartition(t, tx, "q", "a").ID, newPartition(t, tx, "q", "b").ID)
				return nil
			})
			model := map[uint64][]modelMsg{pids[0]: nil, pids[1]: nil}
			rng := rand.New(rand.NewPCG(seed, 7))
			n := 0
			for step := 0; step < 250; step++ {
				update(t, s, func(tx *Tx) error {
					for range 1 + rng.IntN(4) {
						pid := pids[rng.IntN(2)]
						before := slices.Clone(model[pid])
						sp := tx.Savepoint()
						p, err := tx.PartitionByID(pid)
						must(t, err)
						cur := model[pid]
						switch k := rng.IntN(10); {
						case k < 4 || len(cur) == 0:
							msgs := make([]Message, 1+rng.IntN(4))
							for i := range msgs {
								msgs[i] = Message{TxID: fmt.Sprintf("t%d", n), Payload: bytes.Repeat([]byte{byte('a' + n%26)}, rng.IntN(40))}
								n++
							}
							seq, err := tx.ReserveIDs(uint64(len(msgs)))
							must(t, err)
							at := int64(1000 + step)
							first, err := tx.AppendSegment(p, at, seq, msgs, false)
							must(t, err)
							for i, m := range msgs {
								cur = append(cur, modelMsg{first + uint64(i), m.TxID, string(m.Payload), at})
							}
						case k < 7:
							i := rng.IntN(len(cur))
							ok, err := tx.DeleteMessage(p, cur[i].off)
							if err != nil || !ok {
								t.Fatalf("delete %d: %v %v", cur[i].off, ok, err)
							}
							cur = slices.Delete(cur, i, i+1)
						case k < 8:
							var first, count uint64
							must(t, tx.walkSegments(p, 0, func(f uint64, ref blobRef) (bool, error) {
								first, count = f, uint64(ref.Count)
								return false, nil
							}))
							_, err := tx.DeleteSegment(p, first)
							must(t, err)
							cur = slices.DeleteFunc(cur, func(m modelMsg) bool { return m.off >= first && m.off < first+count })
						default:
							var segs [][2]uint64
							must(t, tx.walkSegments(p, 0, func(f uint64, ref blobRef) (bool, error) {
								segs = append(segs, [2]uint64{f, uint64(ref.Count)})
								return true, nil
							}))
							sg := segs[rng.IntN(len(segs))]
							keep := uint64(rng.IntN(int(sg[1])))
							_, err := tx.TruncateSegment(p, sg[0], keep)
							must(t, err)
							cur = slices.DeleteFunc(cur, func(m modelMsg) bool { return m.off >= sg[0]+keep && m.off < sg[0]+sg[1] })
						}
						must(t, tx.PutPartition(p))
						if rng.IntN(4) == 0 {
							must(t, tx.RollbackTo(sp))
							model[pid] = before
						} else {
							tx.Release(sp)
							model[pid] = cur
						}
					}
					return nil
				})
				where := fmt.Sprintf("step %d", step)
				checkAgainstModel(t, s, model, where)
				if rng.IntN(5) == 0 {
					must(t, s.SealActive(1))
					checkAgainstModel(t, s, model, where+" after a seal")
				}
				if step%25 != 24 {
					continue
				}
				_, want, err := s.Digest()
				must(t, err)
				// A plain snapshot restored elsewhere.
				r := restoreInto(t, snapshotOf(t, s), filepath.Join(t.TempDir(), "r.db"), fileSize)
				if _, got, _ := r.Digest(); got != want {
					t.Fatalf("%s: restored digest %s, want %s", where, got, want)
				}
				checkAgainstModel(t, r, model, where+" restored")
				// A linked snapshot, expanded and restored.
				manifest, dir := linkedOf(t, s)
				plain, _, err := expand(manifest, dir)
				must(t, err)
				l := restoreInto(t, plain, filepath.Join(t.TempDir(), "l.db"), fileSize)
				if _, got, _ := l.Digest(); got != want {
					t.Fatalf("%s: linked restore digest %s, want %s", where, got, want)
				}
				checkAgainstModel(t, l, model, where+" linked restore")
				// Reopened.
				must(t, s.Close())
				s, err = Open(path, StoreOptions{NoSync: true, VerifyCache: true, BlobFileSize: fileSize})
				must(t, err)
				if _, got, _ := s.Digest(); got != want {
					t.Fatalf("%s: reopened digest %s, want %s", where, got, want)
				}
				checkAgainstModel(t, s, model, where+" reopened")
				if _, err := os.Stat(path + ".restore"); err == nil {
					t.Fatalf("%s: a restore file was left beside the state", where)
				}
			}
		})
	}
}

// modelImage copies the store's database and blob directory as a process
// crash leaves them (the page cache holds every write) and returns the
// copy's database path.
func modelImage(t *testing.T, s *Store) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "state.db")
	b, err := os.ReadFile(s.path)
	must(t, err)
	must(t, os.WriteFile(dst, b, 0o600))
	copyTree(t, s.blobs.dir, blobDir(dst, s.blobs.gen))
	return dst
}

// TestStorageCrashImagesAroundTheCommit runs random transactions
// (appends, cuts, retention over 250-byte blob files, so rollovers and
// dead files are frequent) through the steps of Store.update, and copies
// the files at two crash points of each: after the blobs are written and
// before bbolt commits, and after the commit before dead files are
// unlinked. Each image must open to the state committed at that point
// (digest and blob accounting), and a store opened from an image must go
// on appending.
//
// segments/DESIGN.md: "Bytes past the recorded length (a crash between the
// two, or a rollback) are overwritten by the next write and cut off on
// open; files and generation directories no record names are removed on
// open." fsm/DESIGN.md Durability 1-2.
func TestStorageCrashImagesAroundTheCommit(t *testing.T) {
	s := openSized(t, filepath.Join(t.TempDir(), "state.db"), 250)
	var pid uint64
	update(t, s, func(tx *Tx) error { pid = newPartition(t, tx, "q", "p").ID; return nil })
	rng := rand.New(rand.NewPCG(5, 5))
	n := 0
	for step := 0; step < 120; step++ {
		_, before, err := s.Digest()
		must(t, err)
		btx, err := s.db.Begin(true)
		must(t, err)
		tx := newTx(btx, s)
		must(t, s.blobs.begin(tx, 0))
		p, err := tx.PartitionByID(pid)
		must(t, err)
		for range 1 + rng.IntN(3) {
			switch k := rng.IntN(6); {
			case k < 3 || p.Messages == 0:
				ids := make([]string, 1+rng.IntN(3))
				for i := range ids {
					ids[i] = fmt.Sprintf("c%d", n)
					n++
				}
				appendMsgs(t, tx, p, int64(10+step), ids...)
			case k < 5:
				var offs []uint64
				must(t, tx.Scan(p, 0, func(sm *StoredMessage) (bool, error) { offs = append(offs, sm.Offset); return true, nil }))
				if _, err := tx.DeleteMessage(p, offs[rng.IntN(len(offs))]); err != nil {
					t.Fatal(err)
				}
			default:
				if _, err := tx.DeleteSegment(p, p.FirstOffset); err != nil {
					t.Fatal(err)
				}
			}
			must(t, tx.PutPartition(p))
		}
		dead, err := s.prepareCommit(tx)
		must(t, err)
		pre := modelImage(t, s)
		must(t, btx.Commit())
		post := modelImage(t, s)
		s.parts.commit(tx.notes)
		s.blobs.commit(tx.w, dead)
		_, after, err := s.Digest()
		must(t, err)
		for _, c := range []struct {
			path, want, what string
		}{{pre, before, "before the commit"}, {post, after, "after the commit"}} {
			r, err := Open(c.path, StoreOptions{NoSync: true, VerifyCache: true, BlobFileSize: 250})
			if err != nil {
				t.Fatalf("step %d, crash %s: open: %v", step, c.what, err)
			}
			if _, got, err := r.Digest(); err != nil || got != c.want {
				r.Close()
				t.Fatalf("step %d, crash %s: digest %s (%v), want %s", step, c.what, got, err, c.want)
			}
			checkAccounting(t, r)
			update(t, r, func(tx *Tx) error {
				q, err := tx.PartitionByID(pid)
				must(t, err)
				appendMsgs(t, tx, q, 9999, "after-crash")
				return nil
			})
			checkAccounting(t, r)
			must(t, r.Close())
		}
	}
}
