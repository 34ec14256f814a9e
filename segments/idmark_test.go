package segments

import (
	"path/filepath"
	"testing"
)

// checkIDsIndexed checks idmark.go's invariant on partition pid: the index
// names every message stored at IDsIndexedFrom or later. It returns the
// partition.
func checkIDsIndexed(t *testing.T, tx *Tx, pid uint64) *Partition {
	t.Helper()
	p, err := tx.PartitionByID(pid)
	if err != nil || p == nil {
		t.Fatalf("partition %d: %v", pid, err)
	}
	must(t, tx.Scan(p, p.IDsIndexedFrom, func(sm *StoredMessage) (bool, error) {
		off, ok, err := tx.TxIDOffset(p.QueueID, p.ID, sm.TxID)
		if err != nil || !ok || off != sm.Offset {
			t.Fatalf("message %q at %d, past IDsIndexedFrom %d: the index names offset %d (found %t, %v)",
				sm.TxID, sm.Offset, p.IDsIndexedFrom, off, ok, err)
		}
		return true, nil
	}))
	return p
}

// An append moves IDsIndexedFrom past itself only when it may stop the index
// naming an older message: an id the index holds, an id twice in the
// segment, or a caller that did not look. Deleting a message moves nothing.
func TestIDsIndexedFrom(t *testing.T) {
	s := openStore(t)
	var pid uint64
	step := func(what string, want func(p *Partition) uint64, fn func(tx *Tx, p *Partition)) {
		t.Helper()
		update(t, s, func(tx *Tx) error {
			p, err := tx.PartitionByID(pid)
			must(t, err)
			before := *p
			fn(tx, p)
			p = checkIDsIndexed(t, tx, pid)
			if w := want(&before); p.IDsIndexedFrom != w {
				t.Fatalf("%s: IDsIndexedFrom %d, want %d (next offset %d)", what, p.IDsIndexedFrom, w, p.NextOffset)
			}
			return nil
		})
	}
	unchanged := func(p *Partition) uint64 { return p.IDsIndexedFrom }
	update(t, s, func(tx *Tx) error { pid = newPartition(t, tx, "q", "p").ID; return nil })
	step("new ids", unchanged, func(tx *Tx, p *Partition) { appendMsgs(t, tx, p, 1, "a", "b") })
	step("another new id", unchanged, func(tx *Tx, p *Partition) { appendMsgs(t, tx, p, 2, "c") })
	step("an id the index holds", func(p *Partition) uint64 { return p.NextOffset + 1 },
		func(tx *Tx, p *Partition) { appendMsgs(t, tx, p, 3, "a") })
	step("deleting that repeat", unchanged, func(tx *Tx, p *Partition) {
		off, ok, err := tx.TxIDOffset(p.QueueID, p.ID, "a")
		must(t, err)
		if deleted, err := tx.DeleteMessage(p, off); err != nil || !deleted || !ok {
			t.Fatalf("delete %d: %t %v", off, deleted, err)
		}
		must(t, tx.PutPartition(p))
	})
	// The first "a" is below IDsIndexedFrom, unnamed since the repeat; the
	// index misses "a" now, and a new one is named.
	step("the id again, missed by the index", unchanged, func(tx *Tx, p *Partition) { appendMsgs(t, tx, p, 4, "a") })
	step("an id twice in one segment", func(p *Partition) uint64 { return p.NextOffset + 2 },
		func(tx *Tx, p *Partition) { appendMsgs(t, tx, p, 5, "d", "d") })
	step("a caller that did not look", func(p *Partition) uint64 { return p.NextOffset + 1 }, func(tx *Tx, p *Partition) {
		seq, err := tx.ReserveIDs(1)
		must(t, err)
		_, err = tx.AppendSegment(p, 6, seq, []Message{{TxID: "e", Payload: []byte(`"e"`)}}, false)
		must(t, err)
		must(t, tx.PutPartition(p))
	})
	view(t, s, func(tx *Tx) error {
		p := checkIDsIndexed(t, tx, pid)
		if p.IDsIndexed(p.IDsIndexedFrom-1) || !p.IDsIndexed(p.IDsIndexedFrom) {
			t.Fatalf("IDsIndexed around %d", p.IDsIndexedFrom)
		}
		return nil
	})
}

// A schema 5 file opens as this build's schema with nothing to rewrite. Its
// records did not record IDsIndexedFrom, so they read as if every message
// they hold might repeat an id; an append then stores it.
func TestSchema5FileOpens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openSized(t, path, 0)
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		for i := range recentMax + 3 {
			appendMsgs(t, tx, p, int64(i), string(rune('a'+i)))
		}
		return nil
	})
	// Rewrite every record as a schema 5 build stored it.
	rewriteRecords(t, s, func(p *Partition) []byte {
		if p.IDsIndexedFrom != 0 {
			t.Fatalf("unique ids, yet IDsIndexedFrom %d", p.IDsIndexedFrom)
		}
		return p.marshalSchema5()
	})
	s = reopenAs(t, s, path, 5)
	var next uint64
	view(t, s, func(tx *Tx) error {
		p := checkIDsIndexed(t, tx, 1)
		if next = p.NextOffset; p.IDsIndexedFrom != next {
			t.Fatalf("a schema 5 record reads IDsIndexedFrom %d, want its next offset %d", p.IDsIndexedFrom, next)
		}
		return nil
	})
	update(t, s, func(tx *Tx) error {
		appendMsgs(t, tx, &Partition{ID: 1}, 100, "new")
		return nil
	})
	view(t, s, func(tx *Tx) error {
		p := checkIDsIndexed(t, tx, 1)
		if p.IDsIndexedFrom != next {
			t.Fatalf("IDsIndexedFrom %d after a new id, want %d kept", p.IDsIndexedFrom, next)
		}
		if v := tx.tx.Bucket(bucketParts).Get(key8(1, []byte("p"))); len(v) == 0 || v[0] != recordCompact {
			t.Fatalf("partition record after a write: %x, want this build's compact form", v)
		}
		return nil
	})
}
