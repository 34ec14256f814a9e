package segments

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// fillMigrationFixture writes the state testdata/schema2 holds; the build
// before schema 3 wrote that file with this same function.
func fillMigrationFixture(t *testing.T, s *Store) {
	t.Helper()
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		appendMsgs(t, tx, p, 10, "a", "b", "c") // 1-3
		appendMsgs(t, tx, p, 20, "a", "d")      // 4-5: a re-used
		appendMsgs(t, tx, p, 30, "e")           // 6
		r := newPartition(t, tx, "q", "r")
		appendMsgs(t, tx, r, 15, "a", "x") // 1-2
		if _, err := tx.DeleteSegment(p, 1); err != nil {
			return err
		}
		return tx.PutPartition(p)
	})
}

func lookup(t *testing.T, tx *Tx, p *Partition, txid string) (TxRef, bool) {
	t.Helper()
	ref, ok, err := tx.TxID(p, txid)
	if err != nil {
		t.Fatalf("TxID(%d, %d, %q): %v", p.QueueID, p.ID, txid, err)
	}
	return ref, ok
}

func checkFixtureIndex(t *testing.T, s *Store) {
	t.Helper()
	view(t, s, func(tx *Tx) error {
		// Schema 2 had no tag index either: opening builds it.
		if err := tx.CheckQueueTagIndex(); err != nil {
			t.Error(err)
		}
		q, _ := tx.Queue("q")
		p, _ := tx.Partition(q.ID, "p")
		r, _ := tx.Partition(q.ID, "r")
		for _, c := range []struct {
			part *Partition
			txid string
			off  uint64
			at   int64
		}{{p, "a", 4, 20}, {p, "d", 5, 20}, {p, "e", 6, 30}, {r, "a", 1, 15}, {r, "x", 2, 15}} {
			ref, ok := lookup(t, tx, c.part, c.txid)
			m, err := tx.MessageAt(c.part, c.off)
			if !ok || err != nil || ref.Offset != c.off || ref.PushedAt != c.at || m == nil || m.ID != ref.MessageID() {
				t.Errorf("%s/%s: %+v %v, message %+v %v", c.part.Name, c.txid, ref, ok, m, err)
			}
			if off, ok, err := tx.TxIDOffset(c.part.QueueID, c.part.ID, c.txid); !ok || err != nil || off != c.off {
				t.Errorf("%s/%s: offset %d %v %v, want %d", c.part.Name, c.txid, off, ok, err, c.off)
			}
		}
		for _, gone := range []string{"b", "c", "x"} {
			if _, ok := lookup(t, tx, p, gone); ok {
				t.Errorf("%s resolved on p", gone)
			}
		}
		return nil
	})
}

// A lookup answers from the message's segment: time and id sequence as the
// message has them, the newest occurrence of a re-used id, and an index
// entry that points at no stored message is damage, not a miss.
func TestTxIDReadsTheMessage(t *testing.T) {
	s := openStore(t)
	var p *Partition
	update(t, s, func(tx *Tx) error {
		p = newPartition(t, tx, "q", "p")
		appendMsgs(t, tx, p, 10, "x", "y") // 1-2
		appendMsgs(t, tx, p, 20, "z", "x") // 3-4
		// Looked up in the transaction that wrote it, before its blob
		// reached the file.
		if ref, ok := lookup(t, tx, p, "z"); !ok || ref.Offset != 3 || ref.PushedAt != 20 {
			t.Errorf("z in its own transaction %+v %v", ref, ok)
		}
		return nil
	})
	view(t, s, func(tx *Tx) error {
		for _, c := range []struct {
			txid string
			off  uint64
			at   int64
		}{{"x", 4, 20}, {"y", 2, 10}, {"z", 3, 20}} {
			ref, ok := lookup(t, tx, p, c.txid)
			m, err := tx.MessageAt(p, c.off)
			if !ok || err != nil || ref.Offset != c.off || ref.PushedAt != c.at || m.ID != ref.MessageID() {
				t.Errorf("%s: %+v %v, message %+v %v", c.txid, ref, ok, m, err)
			}
		}
		if _, ok := lookup(t, tx, p, "absent"); ok {
			t.Error("an id never pushed resolved")
		}
		return nil
	})
	update(t, s, func(tx *Tx) error { return tx.putTxID(p.QueueID, p.ID, "ghost", 99) })
	view(t, s, func(tx *Tx) error {
		if _, _, err := tx.TxID(p, "ghost"); !errors.Is(err, ErrCorrupt) {
			t.Errorf("dangling index entry: %v", err)
		}
		return nil
	})
}

// A state file of schema 2 (ids as keys, written by the build before this
// layout) opens with its index rebuilt: the same lookups, and the same
// digest as the state written by this build. The rewrite is chunked; a
// chunk of one key exercises the resumption.
func TestSchema2StateFileIsMigrated(t *testing.T) {
	for _, batch := range []int{1, 4096} {
		dir := t.TempDir()
		copyTree(t, filepath.Join("testdata", "schema2"), dir)
		path := filepath.Join(dir, "state.db")
		s, err := openWithMigrationBatch(path, StoreOptions{NoSync: true, VerifyCache: true}, batch)
		if err != nil {
			t.Fatal(err)
		}
		checkFixtureIndex(t, s)
		fresh := openStore(t)
		fillMigrationFixture(t, fresh)
		checkFixtureIndex(t, fresh)
		_, want, _ := fresh.Digest()
		if _, got, _ := s.Digest(); got != want {
			t.Fatalf("batch %d: migrated state differs from state written by this build", batch)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// Reopening finds schema 3 and leaves the index alone.
		s, err = Open(path, StoreOptions{NoSync: true, VerifyCache: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, got, _ := s.Digest(); got != want {
			t.Fatal("reopened migrated state differs")
		}
		s.Close()
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}

// A snapshot stream of a schema 2 state (from a leader not yet upgraded, or
// kept on disk from before) is received and migrated when opened.
func TestSchema2SnapshotIsMigrated(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "schema2.snap"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "state.db")
	tmp, err := receiveSnapshot(bytes.NewReader(raw), path, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkFixtureIndex(t, s)
}

// Keys are queue, id, partition, id length: ids that are byte prefixes of
// each other, or that end in what looks like a partition number, stay
// apart, and the same id in two partitions of a queue is two entries.
func TestTxIDKeysAreUnambiguous(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		r := newPartition(t, tx, "q", "r")
		o := newPartition(t, tx, "other", "p")
		tricky := "x" + string(be64(p.ID))
		appendMsgs(t, tx, p, 10, "x", "xy")                              // 1-2
		appendMsgs(t, tx, r, 20, tricky, "x", "xy"+string([]byte{0, 2})) // 1-3
		appendMsgs(t, tx, o, 30, "x")                                    // 1
		for _, c := range []struct {
			part *Partition
			txid string
			off  uint64
		}{{p, "x", 1}, {p, "xy", 2}, {r, tricky, 1}, {r, "x", 2}, {r, "xy\x00\x02", 3}, {o, "x", 1}} {
			if ref, ok := lookup(t, tx, c.part, c.txid); !ok || ref.Offset != c.off {
				t.Errorf("%s/%q: %+v %v, want offset %d", c.part.Name, c.txid, ref, ok, c.off)
			}
		}
		for _, c := range []struct {
			part *Partition
			txid string
		}{{p, tricky}, {o, "xy"}, {p, "x" + string(be64(r.ID))}, {p, ""}} {
			if ref, ok := lookup(t, tx, c.part, c.txid); ok {
				t.Errorf("%s/%q resolved to %+v", c.part.Name, c.txid, ref)
			}
		}
		return nil
	})
}
