package segments

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// storedMsg is what a deletion must leave untouched of a message.
type storedMsg struct {
	off       uint64
	txid      string
	id        [16]byte
	createdAt int64
}

func storedMsgs(t *testing.T, tx *Tx, p *Partition) []storedMsg {
	t.Helper()
	var out []storedMsg
	must(t, tx.Scan(p, 0, func(sm *StoredMessage) (bool, error) {
		if string(sm.Payload) != fmt.Sprintf("%q", sm.TxID) {
			t.Fatalf("message %s at %d reads payload %s", sm.TxID, sm.Offset, sm.Payload)
		}
		out = append(out, storedMsg{sm.Offset, sm.TxID, sm.ID, sm.CreatedAt})
		return true, nil
	}))
	return out
}

// TestDeleteMessageCutsItsSegment deletes every message of a partition one
// at a time, in random order, from segments in the bucket and in the record:
// after each deletion the others read back with their offsets, ids, times and
// payloads, the deleted one is gone from reads and the transaction-id index,
// the counters and the references' invariant hold, and the blob files account
// for exactly what is referenced.
func TestDeleteMessageCutsItsSegment(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := openStore(t)
			var pid uint64
			update(t, s, func(tx *Tx) error { pid = newPartition(t, tx, "q", "p").ID; return nil })
			// Segments of one to four messages, enough that some of their
			// references moved to the bucket, then some of six.
			n := 0
			for seg := range 2*recentMax + 7 {
				update(t, s, func(tx *Tx) error {
					size := 1 + seg%4
					if seg >= 2*recentMax {
						size = 6 // the record's: cut twice each, they fill it
					}
					ids := make([]string, size)
					for i := range ids {
						ids[i] = fmt.Sprintf("m%d", n)
						n++
					}
					appendMsgs(t, tx, &Partition{ID: pid}, int64(100+seg), ids...)
					return nil
				})
			}
			var model []storedMsg
			view(t, s, func(tx *Tx) error {
				p := checkRecentInvariant(t, tx, pid)
				if len(bucketRefs(t, tx, pid)) == 0 || p.recentCount() == 0 {
					t.Fatal("the partition's references are not in both places")
				}
				model = storedMsgs(t, tx, p)
				return nil
			})
			rng := rand.New(rand.NewPCG(seed, 7))
			var sawFullCut, sawFirst, sawLast, sawSingle bool
			for len(model) > 0 {
				i := rng.IntN(len(model))
				if !sawFullCut {
					// Cut the record's segments in the middle until it is
					// full and one more cut must move its references.
					view(t, s, func(tx *Tx) error {
						p, _ := tx.PartitionByID(pid)
						for r := range p.recentCount() {
							f, v := p.recentAt(r)
							if ref, _ := decodeRef(v); ref.Count >= 3 {
								i = slices.IndexFunc(model, func(m storedMsg) bool { return m.off == f+1 })
								break
							}
						}
						return nil
					})
				}
				victim := model[i]
				update(t, s, func(tx *Tx) error {
					p, _ := tx.PartitionByID(pid)
					var segFirst, segCount uint64
					must(t, tx.walkSegments(p, victim.off, func(f uint64, ref blobRef) (bool, error) {
						segFirst, segCount = f, uint64(ref.Count)
						return false, nil
					}))
					inRecord := p.recentIndex(segFirst) >= 0
					head, tail := victim.off > segFirst, victim.off < segFirst+segCount-1
					sawFullCut = sawFullCut || inRecord && head && tail && p.recentCount() == recentMax
					sawFirst = sawFirst || !head && tail
					sawLast = sawLast || head && !tail
					sawSingle = sawSingle || segCount == 1
					bytesBefore, segmentsBefore := p.Bytes, p.Segments
					ok, err := tx.DeleteMessage(p, victim.off)
					if err != nil || !ok {
						t.Fatalf("delete %d: %v %v", victim.off, ok, err)
					}
					if ok, err := tx.DeleteMessage(p, victim.off); err != nil || ok {
						t.Fatalf("second delete of %d: %v %v", victim.off, ok, err)
					}
					wantSegments := segmentsBefore
					switch {
					case head && tail:
						wantSegments++
					case !head && !tail:
						wantSegments--
					}
					if p.Segments != wantSegments || p.Bytes != bytesBefore-uint64(len(fmt.Sprintf("%q", victim.txid))) {
						t.Fatalf("after deleting %d: %d segments, %d bytes; want %d, %d", victim.off, p.Segments, p.Bytes, wantSegments, bytesBefore)
					}
					return tx.PutPartition(p)
				})
				model = slices.Delete(model, i, i+1)
				view(t, s, func(tx *Tx) error {
					p := checkRecentInvariant(t, tx, pid)
					if got := storedMsgs(t, tx, p); !slices.Equal(got, model) {
						t.Fatalf("after deleting %d read %v, want %v", victim.off, got, model)
					}
					if p.Messages != uint64(len(model)) {
						t.Fatalf("%d messages counted, %d stored", p.Messages, len(model))
					}
					if len(model) > 0 && p.FirstOffset != model[0].off || len(model) == 0 && p.FirstOffset != p.NextOffset {
						t.Fatalf("oldest offset %d", p.FirstOffset)
					}
					if _, ok, _ := tx.TxIDOffset(p.QueueID, pid, victim.txid); ok {
						t.Fatalf("%s still indexed", victim.txid)
					}
					if m, err := tx.MessageAt(p, victim.off); err != nil || m != nil {
						t.Fatalf("deleted %d reads %+v %v", victim.off, m, err)
					}
					for _, m := range model {
						if off, ok, err := tx.TxIDOffset(p.QueueID, pid, m.txid); err != nil || !ok || off != m.off {
							t.Fatalf("%s indexed at %d %v %v, stored at %d", m.txid, off, ok, err, m.off)
						}
					}
					if len(model) > 0 {
						// A read from the deleted offset starts at the next stored one.
						var want []string
						for _, m := range model {
							if m.off > victim.off {
								want = append(want, fmt.Sprintf("%d:%s", m.off, m.txid))
							}
						}
						if got := scan(t, tx, pid, victim.off); !slices.Equal(got, want) {
							t.Fatalf("scan from deleted %d: %v, want %v", victim.off, got, want)
						}
					}
					return nil
				})
				checkAccounting(t, s)
			}
			if !sawFullCut || !sawFirst || !sawLast || !sawSingle {
				t.Fatalf("cases not reached: cut in a full record %v, first %v, last %v, single %v", sawFullCut, sawFirst, sawLast, sawSingle)
			}
		})
	}
}

// TestDeleteMessageRollsBack checks that a savepoint rollback undoes a cut:
// the message, its index entry and the segment layout are as before.
func TestDeleteMessageRollsBack(t *testing.T) {
	s := openStore(t)
	pid := seedPartition(t, s, 10, "a", "b", "c")
	var before []storedMsg
	view(t, s, func(tx *Tx) error { p, _ := tx.PartitionByID(pid); before = storedMsgs(t, tx, p); return nil })
	update(t, s, func(tx *Tx) error {
		sp := tx.Savepoint()
		p, _ := tx.PartitionByID(pid)
		if ok, err := tx.DeleteMessage(p, before[1].off); err != nil || !ok {
			t.Fatalf("delete: %v %v", ok, err)
		}
		must(t, tx.PutPartition(p))
		must(t, tx.RollbackTo(sp))
		p, _ = tx.PartitionByID(pid)
		if got := storedMsgs(t, tx, p); !slices.Equal(got, before) {
			t.Fatalf("after rollback %v, want %v", got, before)
		}
		return nil
	})
	view(t, s, func(tx *Tx) error {
		p := checkRecentInvariant(t, tx, pid)
		if got := storedMsgs(t, tx, p); !slices.Equal(got, before) || p.Messages != 3 {
			t.Fatalf("committed %v (%d counted), want %v", got, p.Messages, before)
		}
		return nil
	})
	checkAccounting(t, s)
}

// TestDeleteMessageInterleaved mixes cuts with appends (several in one
// transaction, cuts of segments still pending in it), retention deletions of
// the oldest segment and OJS truncations, against a model: reads, offsets,
// ids, counters, FirstOffset, the index, the references' invariant and the
// blob accounting.
func TestDeleteMessageInterleaved(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := openStore(t)
			var pid uint64
			update(t, s, func(tx *Tx) error { pid = newPartition(t, tx, "q", "p").ID; return nil })
			rng := rand.New(rand.NewPCG(seed, 99))
			var model []storedMsg
			n := 0
			for step := 0; step < 400; step++ {
				update(t, s, func(tx *Tx) error {
					for range 1 + rng.IntN(3) {
						p, _ := tx.PartitionByID(pid)
						switch k := rng.IntN(10); {
						case k < 4 || len(model) == 0:
							ids := make([]string, 1+rng.IntN(5))
							for i := range ids {
								ids[i] = fmt.Sprintf("m%d", n)
								n++
							}
							appendMsgs(t, tx, p, int64(100+step), ids...)
							// read the new ones back into the model
							var got []storedMsg
							must(t, tx.Scan(p, p.NextOffset-uint64(len(ids)), func(sm *StoredMessage) (bool, error) {
								got = append(got, storedMsg{sm.Offset, sm.TxID, sm.ID, sm.CreatedAt})
								return true, nil
							}))
							model = append(model, got...)
							continue
						case k < 8:
							i := rng.IntN(len(model))
							ok, err := tx.DeleteMessage(p, model[i].off)
							if err != nil || !ok {
								t.Fatalf("delete %d: %v %v", model[i].off, ok, err)
							}
							model = slices.Delete(model, i, i+1)
						case k < 9:
							// retention: the oldest segment
							var first, count uint64
							must(t, tx.walkSegments(p, 0, func(f uint64, ref blobRef) (bool, error) {
								first, count = f, uint64(ref.Count)
								return false, nil
							}))
							if _, err := tx.DeleteSegment(p, first); err != nil {
								t.Fatal(err)
							}
							model = slices.DeleteFunc(model, func(m storedMsg) bool { return m.off >= first && m.off < first+count })
						default:
							// OJS purge: truncate a random segment
							var segs [][2]uint64
							must(t, tx.walkSegments(p, 0, func(f uint64, ref blobRef) (bool, error) {
								segs = append(segs, [2]uint64{f, uint64(ref.Count)})
								return true, nil
							}))
							sg := segs[rng.IntN(len(segs))]
							keep := uint64(rng.IntN(int(sg[1])))
							if _, err := tx.TruncateSegment(p, sg[0], keep); err != nil {
								t.Fatal(err)
							}
							model = slices.DeleteFunc(model, func(m storedMsg) bool { return m.off >= sg[0]+keep && m.off < sg[0]+sg[1] })
						}
						must(t, tx.PutPartition(p))
					}
					return nil
				})
				view(t, s, func(tx *Tx) error {
					p := checkRecentInvariant(t, tx, pid)
					got := storedMsgs(t, tx, p)
					if !slices.Equal(got, model) {
						t.Fatalf("step %d: read %v, want %v", step, got, model)
					}
					if p.Messages != uint64(len(model)) {
						t.Fatalf("step %d: %d counted, %d stored", step, p.Messages, len(model))
					}
					var bytes uint64
					for _, m := range model {
						bytes += uint64(len(fmt.Sprintf("%q", m.txid)))
						if off, ok, err := tx.TxIDOffset(p.QueueID, pid, m.txid); err != nil || !ok || off != m.off {
							t.Fatalf("step %d: %s indexed at %d %v %v, stored at %d", step, m.txid, off, ok, err, m.off)
						}
					}
					if p.Bytes != bytes {
						t.Fatalf("step %d: %d bytes counted, %d stored", step, p.Bytes, bytes)
					}
					if len(model) > 0 && p.FirstOffset != model[0].off || len(model) == 0 && p.FirstOffset != p.NextOffset {
						t.Fatalf("step %d: oldest offset %d", step, p.FirstOffset)
					}
					return nil
				})
				checkAccounting(t, s)
			}
		})
	}
}
