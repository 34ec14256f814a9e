package segments

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), StoreOptions{NoSync: true, VerifyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func update(t *testing.T, s *Store, fn func(tx *Tx) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func view(t *testing.T, s *Store, fn func(tx *Tx) error) {
	t.Helper()
	if err := s.View(fn); err != nil {
		t.Fatal(err)
	}
}

// newPartition creates a queue and a partition in it.
func newPartition(t *testing.T, tx *Tx, queue, name string) *Partition {
	t.Helper()
	q, err := tx.Queue(queue)
	if err != nil {
		t.Fatal(err)
	}
	if q == nil {
		q = &Queue{Name: queue, UUID: [16]byte{byte(len(queue)), 1}}
		if err := tx.CreateQueue(q); err != nil {
			t.Fatal(err)
		}
	}
	p := &Partition{QueueID: q.ID, Name: name, UUID: [16]byte{byte(len(queue)), byte(len(name)), 2}}
	if err := tx.CreatePartition(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// appendMsgs stores one segment of messages with the given transaction ids.
// It works on p's stored record, copied into p, as the state machine loads
// a partition in each transaction: a p left over from a transaction that
// failed would hold what it never committed.
func appendMsgs(t *testing.T, tx *Tx, p *Partition, createdAt int64, txids ...string) uint64 {
	t.Helper()
	stored, err := tx.PartitionByID(p.ID)
	if err != nil || stored == nil {
		t.Fatalf("partition %d: %v", p.ID, err)
	}
	*p = *stored
	msgs := make([]Message, len(txids))
	// idsNew as the state machine's push decides it: every id looked up
	// and not found, none twice in the segment.
	idsNew, seen := true, map[string]bool{}
	for i, id := range txids {
		msgs[i] = Message{TxID: id, Payload: []byte(fmt.Sprintf("%q", id))}
		_, found, err := tx.TxIDOffset(p.QueueID, p.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		idsNew = idsNew && !found && !seen[id]
		seen[id] = true
	}
	seq, err := tx.ReserveIDs(uint64(len(msgs)))
	if err != nil {
		t.Fatal(err)
	}
	first, err := tx.AppendSegment(p, createdAt, seq, msgs, idsNew)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.PutPartition(p); err != nil {
		t.Fatal(err)
	}
	return first
}

// seedPartition commits queue q's partition p holding one segment of
// messages with the given transaction ids, and returns its id.
func seedPartition(t *testing.T, s *Store, createdAt int64, txids ...string) uint64 {
	t.Helper()
	var pid uint64
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		pid = p.ID
		appendMsgs(t, tx, p, createdAt, txids...)
		return nil
	})
	return pid
}

// scan lists "offset:txid" from an offset.
func scan(t *testing.T, tx *Tx, pid, from uint64) []string {
	t.Helper()
	var out []string
	p, err := tx.PartitionByID(pid)
	if err != nil {
		t.Fatalf("partition %d: %v", pid, err)
	}
	if p == nil {
		return nil
	}
	err = tx.Scan(p, from, func(sm *StoredMessage) (bool, error) {
		out = append(out, fmt.Sprintf("%d:%s", sm.Offset, sm.TxID))
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// ScanTxIDs must walk the same ids at the same offsets, from the
	// pending appends and from the files alike.
	var ids []string
	err = tx.ScanTxIDs(p, from, func(off uint64, txID []byte) (bool, error) {
		ids = append(ids, fmt.Sprintf("%d:%s", off, txID))
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, out) {
		t.Fatalf("ScanTxIDs of partition %d from %d walked %v, Scan %v", pid, from, ids, out)
	}
	return out
}

func TestSavepointRollbackRestoresKeys(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		must(t, tx.PutSetting("keep", []byte("k")))
		must(t, tx.PutSetting("overwrite", []byte("old")))
		must(t, tx.PutSetting("delete", []byte("d")))
		must(t, tx.PutNode(&Node{ID: "n1", RaftAddr: "r"}))
		return nil
	})
	_, before, _ := s.Digest()
	update(t, s, func(tx *Tx) error {
		sp := tx.Savepoint()
		must(t, tx.PutSetting("new", []byte("n")))
		must(t, tx.PutSetting("overwrite", []byte("new")))
		must(t, tx.PutSetting("overwrite", []byte("newer")))
		must(t, tx.PutSetting("delete", nil))
		must(t, tx.del(bSettings, []byte("delete")))
		must(t, tx.DeleteNode("n1"))
		must(t, tx.PutNode(&Node{ID: "n2"}))
		if string(tx.Setting("overwrite")) != "newer" || tx.Setting("delete") != nil {
			t.Fatal("writes not visible inside the savepoint")
		}
		must(t, tx.RollbackTo(sp))
		if string(tx.Setting("overwrite")) != "old" || string(tx.Setting("delete")) != "d" ||
			tx.Setting("new") != nil || string(tx.Setting("keep")) != "k" {
			t.Fatal("rollback did not restore the settings")
		}
		nodes, err := tx.Nodes()
		if err != nil || len(nodes) != 1 || nodes[0].ID != "n1" {
			t.Fatalf("nodes %+v %v", nodes, err)
		}
		return nil
	})
	if _, after, _ := s.Digest(); after != before {
		t.Fatal("state differs after rollback")
	}
}

func TestSavepointNestedAndRelease(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		must(t, tx.PutSetting("a", []byte("0")))
		return nil
	})
	update(t, s, func(tx *Tx) error {
		outer := tx.Savepoint()
		must(t, tx.PutSetting("a", []byte("1")))
		inner := tx.Savepoint()
		must(t, tx.PutSetting("a", []byte("2")))
		must(t, tx.PutSetting("b", []byte("2")))
		must(t, tx.RollbackTo(inner))
		if string(tx.Setting("a")) != "1" || tx.Setting("b") != nil {
			t.Fatalf("inner rollback: a=%s b=%s", tx.Setting("a"), tx.Setting("b"))
		}
		inner = tx.Savepoint()
		must(t, tx.PutSetting("c", []byte("3")))
		tx.Release(inner) // kept for now, but still under outer
		must(t, tx.RollbackTo(outer))
		if string(tx.Setting("a")) != "0" || tx.Setting("c") != nil {
			t.Fatalf("outer rollback: a=%s c=%s", tx.Setting("a"), tx.Setting("c"))
		}
		// A released savepoint keeps its writes.
		sp := tx.Savepoint()
		must(t, tx.PutSetting("d", []byte("4")))
		tx.Release(sp)
		// Writes outside any savepoint are not recorded.
		must(t, tx.PutSetting("e", []byte("5")))
		if len(tx.undo) != 0 || tx.depth != 0 {
			t.Fatalf("undo log %d entries at depth %d", len(tx.undo), tx.depth)
		}
		return nil
	})
	view(t, s, func(tx *Tx) error {
		if string(tx.Setting("d")) != "4" || string(tx.Setting("e")) != "5" || string(tx.Setting("a")) != "0" {
			t.Fatalf("committed a=%s d=%s e=%s", tx.Setting("a"), tx.Setting("d"), tx.Setting("e"))
		}
		return nil
	})
}

func TestSavepointRollsBackLayoutWrites(t *testing.T) {
	s := openStore(t)
	var pid uint64
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		pid = p.ID
		appendMsgs(t, tx, p, 100, "a", "b")
		must(t, tx.PutGroup(p.ID, "g", &Group{Next: 1, LeaseID: [16]byte{1}, LeaseExpiry: 9, LeaseLast: 2}))
		must(t, tx.IndexLease([16]byte{1}, p.ID, "g"))
		return nil
	})
	_, before, _ := s.Digest()
	update(t, s, func(tx *Tx) error {
		sp := tx.Savepoint()
		p, _ := tx.PartitionByID(pid)
		appendMsgs(t, tx, p, 200, "c", "a")
		newPartition(t, tx, "q2", "x")
		must(t, tx.UnindexLease([16]byte{1}, pid, "g"))
		must(t, tx.PutGroup(pid, "g", &Group{Next: 3}))
		must(t, tx.AddDeadLetter(&DeadLetter{QueueID: 1, TxID: "a"}))
		must(t, tx.PutSubscription(SubKey("g", SubQueue, "q", ""), &Subscription{Mode: "new"}))
		q, _ := tx.Queue("q")
		must(t, tx.DeleteQueue(q))
		must(t, tx.RollbackTo(sp))
		return nil
	})
	if _, after, _ := s.Digest(); after != before {
		t.Fatal("layout writes not rolled back")
	}
	view(t, s, func(tx *Tx) error {
		if got := scan(t, tx, pid, 0); !slices.Equal(got, []string{"1:a", "2:b"}) {
			t.Fatalf("messages %v", got)
		}
		if pids, _ := tx.LeaseHolders([16]byte{1}); len(pids) != 1 {
			t.Fatal("lease index not restored")
		}
		return nil
	})
}

func TestScanAcrossSegmentsAndGaps(t *testing.T) {
	s := openStore(t)
	var p, other *Partition
	update(t, s, func(tx *Tx) error {
		// Another partition before and after, so that prefix boundaries matter.
		before := newPartition(t, tx, "q", "a")
		appendMsgs(t, tx, before, 1, "x1", "x2")
		p = newPartition(t, tx, "q", "b")
		appendMsgs(t, tx, p, 10, "m1", "m2", "m3") // offsets 1-3
		appendMsgs(t, tx, p, 20, "m4")             // 4
		appendMsgs(t, tx, p, 30, "m5", "m6")       // 5-6
		appendMsgs(t, tx, p, 40, "m7", "m8", "m9") // 7-9
		other = newPartition(t, tx, "q", "c")
		appendMsgs(t, tx, other, 50, "y1")
		return nil
	})
	all := []string{"1:m1", "2:m2", "3:m3", "4:m4", "5:m5", "6:m6", "7:m7", "8:m8", "9:m9"}
	view(t, s, func(tx *Tx) error {
		for from := uint64(0); from <= 10; from++ {
			start := min(int(max(from, 1))-1, len(all))
			if got := scan(t, tx, p.ID, from); !slices.Equal(got, all[start:]) {
				t.Errorf("scan from %d: %v, want %v", from, got, all[start:])
			}
		}
		// Stop early.
		var n int
		tx.Scan(p, 2, func(*StoredMessage) (bool, error) { n++; return n < 3, nil })
		if n != 3 {
			t.Errorf("scan stopped after %d", n)
		}
		// Message fields.
		m, err := tx.MessageAt(p, 5)
		if err != nil || m == nil || m.TxID != "m5" || m.CreatedAt != 30 || m.Offset != 5 || string(m.Payload) != `"m5"` {
			t.Errorf("MessageAt(5) %+v %v", m, err)
		}
		seg5, _, _ := tx.TxID(p, "m5")
		if m.ID != seg5.MessageID() {
			t.Errorf("message id %x, index says %x", m.ID, seg5.MessageID())
		}
		if m, _ := tx.MessageAt(p, 10); m != nil {
			t.Errorf("MessageAt past the end %+v", m)
		}
		return nil
	})
	// Delete the middle segments (offsets 4-6): scans skip the gap.
	update(t, s, func(tx *Tx) error {
		p, _ = tx.PartitionByID(p.ID)
		for _, first := range []uint64{4, 5} {
			if n, err := tx.DeleteSegment(p, first); err != nil || n == 0 {
				t.Fatalf("delete segment %d: %d %v", first, n, err)
			}
		}
		return tx.PutPartition(p)
	})
	gap := []string{"1:m1", "2:m2", "3:m3", "7:m7", "8:m8", "9:m9"}
	view(t, s, func(tx *Tx) error {
		for from, want := range map[uint64][]string{0: gap, 3: gap[2:], 4: gap[3:], 5: gap[3:], 6: gap[3:], 7: gap[3:], 8: gap[4:], 10: nil} {
			if got := scan(t, tx, p.ID, from); !slices.Equal(got, want) {
				t.Errorf("scan from %d over the gap: %v, want %v", from, got, want)
			}
		}
		if m, _ := tx.MessageAt(p, 5); m != nil {
			t.Errorf("deleted message still readable %+v", m)
		}
		if got := scan(t, tx, other.ID, 0); !slices.Equal(got, []string{"1:y1"}) {
			t.Errorf("neighbour partition %v", got)
		}
		return nil
	})
}

func TestScanFromInsideLastSegmentOfLastPartition(t *testing.T) {
	// The seek lands past the end of the bucket: the segment holding the
	// offset must still be found.
	s := openStore(t)
	var p *Partition
	update(t, s, func(tx *Tx) error {
		p = newPartition(t, tx, "q", "p")
		appendMsgs(t, tx, p, 10, "a", "b", "c")
		return nil
	})
	view(t, s, func(tx *Tx) error {
		if got := scan(t, tx, p.ID, 2); !slices.Equal(got, []string{"2:b", "3:c"}) {
			t.Fatalf("got %v", got)
		}
		if got := scan(t, tx, p.ID+1, 0); len(got) != 0 {
			t.Fatalf("unknown partition %v", got)
		}
		return nil
	})
}

func TestSegmentsWalks(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		appendMsgs(t, tx, p, 10, "a", "b")
		appendMsgs(t, tx, p, 20, "c")
		appendMsgs(t, tx, p, 30, "d", "e", "f")
		q := newPartition(t, tx, "q", "q")
		appendMsgs(t, tx, q, 40, "z")
		var fwd, rev []SegmentInfo
		must(t, tx.Segments(p, func(si SegmentInfo) (bool, error) { fwd = append(fwd, si); return true, nil }))
		must(t, tx.SegmentsReverse(p, func(si SegmentInfo) (bool, error) { rev = append(rev, si); return true, nil }))
		if len(fwd) != 3 || fwd[0].First != 1 || fwd[0].Count != 2 || fwd[1].First != 3 || fwd[2].First != 4 ||
			fwd[2].Count != 3 || fwd[2].CreatedAt != 30 {
			t.Fatalf("forward %+v", fwd)
		}
		slices.Reverse(rev)
		if !slices.Equal(fwd, rev) {
			t.Fatalf("reverse %+v", rev)
		}
		var lastQ []SegmentInfo
		must(t, tx.SegmentsReverse(q, func(si SegmentInfo) (bool, error) { lastQ = append(lastQ, si); return true, nil }))
		if len(lastQ) != 1 || lastQ[0].CreatedAt != 40 {
			t.Fatalf("last partition reverse %+v", lastQ)
		}
		if p.Messages != 6 || p.Segments != 3 || p.NextOffset != 7 || p.FirstOffset != 1 || p.LastCreatedAt != 30 {
			t.Fatalf("partition %+v", p)
		}
		return nil
	})
}

func TestDeleteSegmentKeepsNewerTxIDs(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		appendMsgs(t, tx, p, 10, "a", "b", "c") // 1-3
		appendMsgs(t, tx, p, 20, "a", "d")      // 4-5: a re-used
		n, err := tx.DeleteSegment(p, 1)
		if err != nil || n != 3 {
			t.Fatalf("delete %d %v", n, err)
		}
		if ref, ok, err := tx.TxID(p, "a"); err != nil || !ok || ref.Offset != 4 || ref.PushedAt != 20 {
			t.Fatalf("newer occurrence of a lost: %+v %v", ref, ok)
		}
		for _, id := range []string{"b", "c"} {
			if _, ok, err := tx.TxID(p, id); err != nil || ok {
				t.Fatalf("index entry of deleted %s kept", id)
			}
		}
		if ref, ok, err := tx.TxID(p, "d"); err != nil || !ok || ref.Offset != 5 {
			t.Fatalf("d %+v", ref)
		}
		if p.Messages != 2 || p.Segments != 1 || p.FirstOffset != 4 || p.NextOffset != 6 || p.Bytes != uint64(len(`"a"`)+len(`"d"`)) {
			t.Fatalf("partition %+v", p)
		}
		// Deleting a missing segment is a no-op.
		if n, err := tx.DeleteSegment(p, 1); n != 0 || err != nil {
			t.Fatalf("second delete %d %v", n, err)
		}
		// Deleting the last segment empties the partition; offsets are never reused.
		if n, _ := tx.DeleteSegment(p, 4); n != 2 {
			t.Fatalf("delete last %d", n)
		}
		if p.Messages != 0 || p.FirstOffset != 6 || p.NextOffset != 6 || p.Bytes != 0 {
			t.Fatalf("empty partition %+v", p)
		}
		must(t, tx.PutPartition(p)) // DeleteSegment leaves storing p to its caller
		first := appendMsgs(t, tx, p, 30, "e")
		if first != 6 || p.FirstOffset != 6 {
			t.Fatalf("append after emptying: first %d, partition %+v", first, p)
		}
		return nil
	})
}

func TestDeleteSegmentInTheMiddleKeepsFirstOffset(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		appendMsgs(t, tx, p, 10, "a")
		appendMsgs(t, tx, p, 20, "b")
		appendMsgs(t, tx, p, 30, "c")
		tx.DeleteSegment(p, 2)
		if p.FirstOffset != 1 || p.Messages != 2 {
			t.Fatalf("%+v", p)
		}
		tx.DeleteSegment(p, 1)
		if p.FirstOffset != 3 || p.Messages != 1 {
			t.Fatalf("%+v", p)
		}
		return nil
	})
}

func TestQueueAndPartitionIndexes(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		for _, name := range []string{"b", "", "a"} {
			newPartition(t, tx, name, "p")
		}
		var names []string
		must(t, tx.ForEachQueue(func(q *Queue) (bool, error) { names = append(names, q.Name); return true, nil }))
		if !slices.Equal(names, []string{"", "a", "b"}) {
			t.Fatalf("queues %q", names)
		}
		q, _ := tx.Queue("")
		if q == nil || q.Name != "" {
			t.Fatal("queue \"\" not stored")
		}
		if q2, _ := tx.QueueByID(q.ID); q2 == nil || q2.Name != "" {
			t.Fatal("QueueByID(\"\")")
		}
		p, _ := tx.Partition(q.ID, "p")
		if p2, _ := tx.PartitionByUUID(p.UUID); p2 == nil || p2.ID != p.ID {
			t.Fatal("PartitionByUUID")
		}
		if p2, _ := tx.PartitionByUUID([16]byte{0xee}); p2 != nil {
			t.Fatal("unknown uuid resolved")
		}
		// Partitions are walked in name order from a start name.
		qa, _ := tx.Queue("a")
		for _, n := range []string{"z", "", "m"} {
			newPartition(t, tx, "a", n)
		}
		var parts []string
		must(t, tx.ForEachPartition(qa.ID, "", func(p *Partition) (bool, error) { parts = append(parts, p.Name); return true, nil }))
		if !slices.Equal(parts, []string{"", "m", "p", "z"}) {
			t.Fatalf("partitions %q", parts)
		}
		parts = nil
		must(t, tx.ForEachPartition(qa.ID, "n", func(p *Partition) (bool, error) { parts = append(parts, p.Name); return true, nil }))
		if !slices.Equal(parts, []string{"p", "z"}) {
			t.Fatalf("partitions from n %q", parts)
		}
		return nil
	})
}

func TestDigestIgnoresWriteOrder(t *testing.T) {
	a, b := openStore(t), openStore(t)
	update(t, a, func(tx *Tx) error {
		must(t, tx.PutSetting("x", []byte("1")))
		must(t, tx.PutSetting("y", []byte("2")))
		return nil
	})
	update(t, b, func(tx *Tx) error {
		must(t, tx.PutSetting("y", []byte("0")))
		must(t, tx.PutSetting("x", []byte("1")))
		return nil
	})
	update(t, b, func(tx *Tx) error { return tx.PutSetting("y", []byte("2")) })
	_, da, _ := a.Digest()
	_, db, _ := b.Digest()
	if da != db {
		t.Fatal("same content, different digests")
	}
	update(t, b, func(tx *Tx) error { return tx.PutSetting("y", []byte("3")) })
	if _, db2, _ := b.Digest(); db2 == da {
		t.Fatal("different content, same digest")
	}
}

func TestCorruptPartitionRecord(t *testing.T) {
	orig := Partition{ID: 1, QueueID: 2, UUID: [16]byte{3}, Name: "név", CreatedAt: -5, NextOffset: 9, FirstOffset: 4,
		Messages: 5, Bytes: 6, Segments: 2, LastCreatedAt: 8, WindowMark: 7, WindowCount: 3}
	key := key8(orig.QueueID, []byte(orig.Name))
	ref := func(count uint32) []byte {
		return blobRef{File: 1, Pos: 10, Len: 50, CreatedAt: 8, Count: count}.encode()
	}
	withRefs := orig
	withRefs.recentAppend(4, ref(3))
	withRefs.recentAppend(7, ref(2))
	marked := withRefs
	marked.IDsIndexedFrom = 6
	var p Partition
	for _, tc := range []struct {
		name string
		rec  Partition
	}{{"no references", orig}, {"two references", withRefs}, {"IDsIndexedFrom", marked}} {
		if err := p.unmarshal(key, tc.rec.marshal()); err != nil || !reflect.DeepEqual(p, tc.rec) {
			t.Fatalf("%s: partition round trip %+v %v", tc.name, p, err)
		}
		// Schema 4 and 5 records decode to the same partition, with
		// IDsIndexedFrom at the next offset: they did not record it.
		old := tc.rec
		old.IDsIndexedFrom = old.NextOffset
		if err := p.unmarshal(key, tc.rec.marshalUnpacked()); err != nil || !reflect.DeepEqual(p, old) {
			t.Fatalf("%s: schema 4 partition %+v %v", tc.name, p, err)
		}
		if err := p.unmarshal(key, tc.rec.marshalSchema5()); err != nil || !reflect.DeepEqual(p, old) {
			t.Fatalf("%s: schema 5 partition %+v %v", tc.name, p, err)
		}
	}
	full := withRefs.marshalUnpacked()
	packed := withRefs.marshal()
	many := withRefs // as many references as a record holds
	for i := range recentMax - withRefs.recentCount() {
		many.recentAppend(uint64(10+i), ref(1))
	}
	if err := p.unmarshal(key, many.marshal()); err != nil || !reflect.DeepEqual(p, many) {
		t.Fatalf("a full record: %+v %v", p, err)
	}
	nameEnd := partitionFixed + len(orig.Name)
	for _, tc := range []struct {
		name string
		key  []byte
		rec  []byte
	}{
		{"shorter than its fixed fields", key8(2, nil), make([]byte, partitionFixed-1)},
		{"shorter than its name", key, full[:nameEnd-1]},
		{"key shorter than a queue number", []byte{1}, full},
		{"reference cut short", key, full[:len(full)-1]},
		{"reference of another version", key, func() []byte {
			b := bytes.Clone(full)
			b[nameEnd+8] = refVersion + 1
			return b
		}()},
		{"references out of order", key, append(bytes.Clone(full[:nameEnd]), append(full[nameEnd+recentEntry:], full[nameEnd:nameEnd+recentEntry]...)...)},
		{"more references than a record holds", key, append(bytes.Clone(full[:nameEnd]), bytes.Repeat(full[nameEnd:nameEnd+recentEntry], recentMax+1)...)},
		{"schema 5: a marker and no reference", key, append(bytes.Clone(full[:nameEnd]), recentPacked)},
		{"a marker and no IDsIndexedFrom", key, append(bytes.Clone(full[:nameEnd]), sectionMarked)},
		{"IDsIndexedFrom cut short", key, append(bytes.Clone(full[:nameEnd]), sectionMarked, 0x80)},
		{"IDsIndexedFrom past the next offset", key, binary.AppendUvarint(append(bytes.Clone(full[:nameEnd]), sectionMarked), orig.NextOffset+1)},
		{"packed: reference cut short", key, packed[:len(packed)-1]},
		{"packed: references out of order", key, func() []byte {
			q := orig
			q.recentAppend(4, ref(3))
			q.recentAppend(4, ref(2)) // the same first offset twice
			return q.marshal()
		}()},
		{"packed: more references than a record holds", key, func() []byte {
			// A full record, then one more reference, in order, after it.
			b := many.marshal()
			b = binary.AppendVarint(b, 1)     // first offset, one past the last
			b = binary.AppendVarint(b, 0)     // file
			b = binary.AppendUvarint(b, 10)   // position
			b = binary.AppendUvarint(b, 50)   // length
			b = binary.AppendVarint(b, 0)     // time
			return binary.AppendUvarint(b, 1) // count
		}()},
		{"packed: length past 32 bits", key, func() []byte {
			b := append(bytes.Clone(full[:nameEnd]), recentPacked)
			b = binary.AppendVarint(b, -1)     // first offset, from NextOffset
			b = binary.AppendVarint(b, 1)      // file
			b = binary.AppendUvarint(b, 10)    // position
			b = binary.AppendUvarint(b, 1<<32) // length
			b = binary.AppendVarint(b, 0)      // time
			return binary.AppendUvarint(b, 1)  // count
		}()},
	} {
		if err := p.unmarshal(tc.key, tc.rec); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	var g Group
	if err := g.unmarshal(make([]byte, groupSize+1)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%v", err)
	}
	og := Group{Next: 1, LeaseID: [16]byte{2}, LeaseExpiry: 3, LeaseLast: 4, LeaseDelivered: 5, Retry: 6, Consumed: 7, Batches: 8, LastConsumedAt: 9}
	if b := og.marshal(); len(b) != groupSize {
		t.Fatalf("a group without a skip range is %d bytes, want the %d of the records before it", len(b), groupSize)
	}
	if err := g.unmarshal(og.marshal()); err != nil || g != og {
		t.Fatalf("group round trip %+v %v", g, err)
	}
	og.SkipFrom, og.SkipTo = 5, 12
	if err := g.unmarshal(og.marshal()); err != nil || g != og {
		t.Fatalf("group with a skip range round trip %+v %v", g, err)
	}
	for _, skip := range [][2]uint64{{0, 0}, {7, 7}, {9, 3}} {
		b := og.marshal()
		putU64(b[groupSize:], skip[0])
		putU64(b[groupSize+8:], skip[1])
		if err := g.unmarshal(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("a skip range [%d, %d) decoded: %v", skip[0], skip[1], err)
		}
	}
}

func TestGroupPassSkipped(t *testing.T) {
	for _, tc := range []struct {
		name             string
		next             uint64
		wantNext         uint64
		wantMoved, wants bool
	}{
		{"before the range: kept", 3, 3, false, true},
		{"at its start: moved past it", 5, 12, true, false},
		{"inside it: moved past it", 8, 12, true, false},
		{"past it already: dropped", 20, 20, false, false},
	} {
		g := Group{Next: tc.next, SkipFrom: 5, SkipTo: 12}
		moved := g.PassSkipped()
		if moved != tc.wantMoved || g.Next != tc.wantNext || g.HasSkip() != tc.wants {
			t.Errorf("%s: moved %v, next %d, skip [%d, %d)", tc.name, moved, g.Next, g.SkipFrom, g.SkipTo)
		}
	}
	g := Group{Next: 7}
	if g.PassSkipped() || g.Next != 7 {
		t.Errorf("a group with no range moved: %+v", g)
	}
}

func TestGroupPassed(t *testing.T) {
	with := Group{Next: 3, SkipFrom: 5, SkipTo: 12}
	without := Group{Next: 3}
	for _, tc := range []struct {
		off           uint64
		with, without bool
	}{
		{2, true, true},    // behind the position
		{3, false, false},  // the position itself
		{4, false, false},  // between the position and the range
		{5, true, false},   // the range's first offset
		{11, true, false},  // its last
		{12, false, false}, // just past it
	} {
		if got := with.Passed(tc.off); got != tc.with {
			t.Errorf("with a range, Passed(%d) = %v", tc.off, got)
		}
		if got := without.Passed(tc.off); got != tc.without {
			t.Errorf("without a range, Passed(%d) = %v", tc.off, got)
		}
	}
}

// FuzzGroupRecord: any bytes decode to a group or fail with ErrCorrupt, and
// a group that decodes encodes back to the same bytes.
func FuzzGroupRecord(f *testing.F) {
	g := Group{Next: 1, LeaseID: [16]byte{2}, LeaseExpiry: 3, LeaseLast: 4}
	f.Add(g.marshal())
	g.SkipFrom, g.SkipTo = 5, 9
	f.Add(g.marshal())
	f.Add(make([]byte, groupSkipSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		var g Group
		if err := g.unmarshal(b); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if got := g.marshal(); !bytes.Equal(got, b) {
			t.Fatalf("decoded %x to %+v, encoded back %x", b, g, got)
		}
	})
}

func TestGroupLease(t *testing.T) {
	g := Group{LeaseID: [16]byte{1}, LeaseExpiry: 100, LeaseLast: 3, LeaseDelivered: 2}
	if !g.HasLease() || !g.LeaseLive(99) || g.LeaseLive(100) {
		t.Fatal("lease liveness: a lease is over at its expiry")
	}
	g.ClearLease()
	if g.HasLease() || g.LeaseLive(0) || g.LeaseExpiry != 0 || !g.HasBatch() || g.LeaseLast != 3 || g.LeaseDelivered != 2 {
		t.Fatalf("ClearLease must drop the lease and keep the batch: %+v", g)
	}
	g.EndBatch()
	if g.HasBatch() || g.LeaseLast != 0 || g.LeaseDelivered != 0 {
		t.Fatalf("EndBatch must drop the batch: %+v", g)
	}
}

func TestSubKeyUnambiguous(t *testing.T) {
	keys := [][]byte{
		SubKey("ab", SubQueue, "c", ""),
		SubKey("a", SubQueue, "bc", ""),
		SubKey("a", SubPartition, "b", "c"),
		SubKey("a", SubPartition, "bc", ""),
		SubKey("a", SubDiscovery, "", "bc"),
		SubKey("a", SubDiscovery, "bc", ""),
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if bytes.Equal(keys[i], keys[j]) {
				t.Fatalf("keys %d and %d collide", i, j)
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }

// TestScanTxIDsStopsAndReusesItsBuffer: ScanTxIDs stops where fn says, passes
// fn's error on, and reads segments of different sizes through one buffer
// without one segment's bytes showing through another's.
func TestScanTxIDsStopsAndReusesItsBuffer(t *testing.T) {
	s := openStore(t)
	pid := seedPartition(t, s, 10, "a-rather-long-transaction-id", "b-another-long-one")
	update(t, s, func(tx *Tx) error {
		p, err := tx.PartitionByID(pid)
		if err != nil {
			return err
		}
		appendMsgs(t, tx, p, 11, "c")
		appendMsgs(t, tx, p, 12, "d-long-again-and-longer", "e")
		return nil
	})
	view(t, s, func(tx *Tx) error {
		if got := scan(t, tx, pid, 0); !slices.Equal(got, []string{"1:a-rather-long-transaction-id", "2:b-another-long-one", "3:c", "4:d-long-again-and-longer", "5:e"}) {
			t.Fatalf("walked %v", got)
		}
		p, err := tx.PartitionByID(pid)
		if err != nil {
			return err
		}
		var seen []uint64
		must(t, tx.ScanTxIDs(p, 2, func(off uint64, _ []byte) (bool, error) {
			seen = append(seen, off)
			return off < 3, nil
		}))
		if !slices.Equal(seen, []uint64{2, 3}) {
			t.Fatalf("stopped after %v, want 2 and 3", seen)
		}
		stop := errors.New("stop")
		if err := tx.ScanTxIDs(p, 0, func(uint64, []byte) (bool, error) { return true, stop }); !errors.Is(err, stop) {
			t.Fatalf("fn's error came back as %v", err)
		}
		return nil
	})
}

// TestWriteStatsCountsCommitsAndPages: the counters behind
// crown_state_commits_total and crown_state_pages_written_total count
// committed write transactions and the pages they wrote, start at zero on
// open, ignore a transaction that failed, and grow with the leaves a
// transaction dirties (one partition record against records spread over
// the whole bucket).
func TestWriteStatsCountsCommitsAndPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.WriteStats(); got != (WriteStats{}) {
		t.Fatalf("fresh store: %+v, want zero", got)
	}
	const n = 2000
	parts := make([]*Partition, n)
	update(t, s, func(tx *Tx) error {
		for i := range parts {
			parts[i] = newPartition(t, tx, "q", fmt.Sprintf("p%04d", i))
		}
		return nil
	})
	created := s.WriteStats()
	if created.Commits != 1 || created.Pages < 2 {
		t.Fatalf("after one commit: %+v", created)
	}
	if err := s.Update(func(tx *Tx) error {
		appendMsgs(t, tx, parts[0], 1, "lost")
		return errors.New("refused")
	}); err == nil {
		t.Fatal("failed update committed")
	}
	if got := s.WriteStats(); got != created {
		t.Fatalf("a failed update counted: %+v, was %+v", got, created)
	}
	pages := func(fn func(tx *Tx)) uint64 {
		t.Helper()
		before := s.WriteStats()
		update(t, s, func(tx *Tx) error { fn(tx); return nil })
		after := s.WriteStats()
		if after.Commits != before.Commits+1 {
			t.Fatalf("commits %d after %d", after.Commits, before.Commits)
		}
		return after.Pages - before.Pages
	}
	one := pages(func(tx *Tx) { appendMsgs(t, tx, parts[0], 2, "a") })
	spread := pages(func(tx *Tx) {
		for i := 1; i < n; i += n / 100 {
			appendMsgs(t, tx, parts[i], 3, fmt.Sprint("b", i))
		}
	})
	t.Logf("pages written: %d for one record, %d for 100 spread", one, spread)
	if spread <= 2*one {
		t.Fatalf("a transaction over 100 records spread over the bucket wrote %d pages, one over a single record %d", spread, one)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, StoreOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.WriteStats(); got != (WriteStats{}) {
		t.Fatalf("reopened store: %+v, want zero (opening's own writes are not counted)", got)
	}
}
