package fsm

import (
	"fmt"
	"testing"

	"github.com/crownmq/crown/segments"
)

// checkInvariants verifies the cross-record invariants of the layout that
// every command must keep.
func checkInvariants(tx *segments.Tx) error {
	type holder struct {
		lease [16]byte
		pid   uint64
		group string
	}
	indexed := map[holder]bool{}
	if err := tx.ForEachLease(func(lease [16]byte, pid uint64, group string, superseded int64) (bool, error) {
		// A superseded lease is remembered for extensions only; no group
		// holds it.
		if superseded == 0 {
			indexed[holder{lease, pid, group}] = true
		}
		return true, nil
	}); err != nil {
		return err
	}
	var problems []string
	fail := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	// The tag index is derived: it must be what a rebuild makes of it.
	if err := tx.CheckQueueTagIndex(); err != nil {
		fail("%v", err)
	}
	err := tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
		if q2, _ := tx.QueueByID(q.ID); q2 == nil || q2.Name != q.Name {
			fail("queue %q: id index", q.Name)
		}
		return true, tx.ForEachPartition(q.ID, "", func(p *segments.Partition) (bool, error) {
			where := fmt.Sprintf("%q/%q", q.Name, p.Name)
			if p2, _ := tx.PartitionByUUID(p.UUID); p2 == nil || p2.ID != p.ID {
				fail("%s: uuid index", where)
			}
			// Segments and counters.
			var msgs, segs uint64
			first := p.NextOffset
			lastEnd := uint64(0)
			var lastCreated int64
			if err := tx.Segments(p, func(si segments.SegmentInfo) (bool, error) {
				if segs == 0 {
					first = si.First
				}
				if si.First < lastEnd || si.CreatedAt < lastCreated {
					fail("%s: segment %d out of order", where, si.First)
				}
				lastEnd, lastCreated = si.First+si.Count, si.CreatedAt
				msgs += si.Count
				segs++
				return true, nil
			}); err != nil {
				return false, err
			}
			if msgs != p.Messages || segs != p.Segments || first != p.FirstOffset || lastEnd > p.NextOffset {
				fail("%s: counters %d msgs/%d segs/first %d, record %+v", where, msgs, segs, first, p)
			}
			// Every stored transaction id resolves to a stored message carrying it.
			seen := map[string]bool{}
			if err := tx.Scan(p, 0, func(sm *segments.StoredMessage) (bool, error) {
				if seen[sm.TxID] {
					return true, nil
				}
				seen[sm.TxID] = true
				ref, ok, err := tx.TxID(p, sm.TxID)
				if err != nil {
					return false, err
				}
				if !ok {
					fail("%s: txid %q not indexed", where, sm.TxID)
					return true, nil
				}
				if ref.Offset < sm.Offset {
					fail("%s: txid %q indexed at %d, older than %d", where, sm.TxID, ref.Offset, sm.Offset)
				}
				return true, nil
			}); err != nil {
				return false, err
			}
			for id := range seen {
				ref, _, err := tx.TxID(p, id)
				if err != nil {
					return false, err
				}
				m, err := tx.MessageAt(p, ref.Offset)
				if err != nil {
					return false, err
				}
				if m == nil || m.TxID != id || m.ID != ref.MessageID() {
					fail("%s: txid %q index points at %+v", where, id, m)
				}
			}
			// Group states and the lease index agree.
			return true, tx.ForEachGroup(p.ID, func(name string, g *segments.Group) (bool, error) {
				if g.Next > p.NextOffset {
					fail("%s group %s: position %d past the end %d", where, name, g.Next, p.NextOffset)
				}
				if g.HasLease() {
					h := holder{g.LeaseID, p.ID, name}
					if !indexed[h] {
						fail("%s group %s: lease %x not indexed", where, name, g.LeaseID)
					}
					delete(indexed, h)
					if g.Next > g.LeaseLast || g.LeaseLast >= p.NextOffset || g.LeaseDelivered == 0 {
						fail("%s group %s: lease range next %d last %d delivered %d", where, name, g.Next, g.LeaseLast, g.LeaseDelivered)
					}
				}
				return true, nil
			})
		})
	})
	if err != nil {
		return err
	}
	for h := range indexed {
		fail("lease index entry %x/%d/%s has no group lease", h.lease, h.pid, h.group)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d invariant violations, first: %s", len(problems), problems[0])
	}
	return nil
}

func TestInvariantsUnderRandomTraffic(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		g := &generator{t: t, rng: newRand(seed), m: newMachine(t), rollbacks: true}
		g.rec = &recording{ref: g.m}
		for n := 0; len(g.rec.logs) < 800; n++ {
			g.step()
			if n%10 == 0 {
				if err := g.m.f.View(checkInvariants); err != nil {
					t.Fatalf("seed %d after entry %d: %v", seed, len(g.rec.logs), err)
				}
			}
		}
		if err := g.m.f.View(checkInvariants); err != nil {
			t.Fatalf("seed %d at the end: %v", seed, err)
		}
	}
}
