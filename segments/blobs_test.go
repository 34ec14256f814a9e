package segments

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func openSized(t *testing.T, path string, fileSize int64) *Store {
	t.Helper()
	s, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true, BlobFileSize: fileSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// blobFiles lists the blob files on disk, by number.
func blobFiles(t *testing.T, s *Store) []string {
	t.Helper()
	entries, err := os.ReadDir(s.blobs.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// checkAccounting asserts the files bucket agrees with the references: each
// file's live bytes are the sum of the blobs referencing it, its length is
// what is on disk, and every referenced file has a record.
func checkAccounting(t *testing.T, s *Store) {
	t.Helper()
	view(t, s, func(tx *Tx) error {
		live := map[uint64]uint64{}
		count := func(v []byte) {
			ref, err := decodeRef(v)
			if err != nil {
				t.Fatal(err)
			}
			live[ref.File] += uint64(ref.Len)
		}
		c := tx.bucket(bSegments).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			refs, err := entryRefs(u64(k), u64(k[8:]), v)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(refs); i += recentEntry {
				count(refs[i+8 : i+recentEntry])
			}
		}
		pc := tx.bucket(bParts).Cursor()
		for k, v := pc.First(); k != nil; k, v = pc.Next() {
			var p Partition
			if err := p.unmarshal(k, v); err != nil {
				t.Fatal(err)
			}
			for i := range p.recentCount() {
				_, ref := p.recentAt(i)
				count(ref)
			}
		}
		fc := tx.bucket(bFiles).Cursor()
		recs := map[uint64]fileRec{}
		for k, v := fc.Seek([]byte{'f'}); k != nil && k[0] == 'f'; k, v = fc.Next() {
			r, err := decodeFileRec(v)
			if err != nil {
				t.Fatal(err)
			}
			recs[u64(k[1:])] = r
		}
		for no, n := range live {
			r, ok := recs[no]
			if !ok {
				t.Fatalf("file %d referenced but has no record", no)
			}
			if r.Live != n {
				t.Fatalf("file %d: %d live bytes recorded, %d referenced", no, r.Live, n)
			}
		}
		for no, r := range recs {
			if live[no] == 0 && r.Live != 0 {
				t.Fatalf("file %d: %d live bytes recorded, none referenced", no, r.Live)
			}
			st, err := os.Stat(filepath.Join(s.blobs.dir, blobFileName(no)))
			if err != nil {
				t.Fatalf("file %d: %v", no, err)
			}
			if uint64(st.Size()) != r.Len {
				t.Fatalf("file %d: %d bytes on disk, %d recorded", no, st.Size(), r.Len)
			}
		}
		return nil
	})
}

// fill appends n one-message segments to p, one transaction each.
func fill(t *testing.T, s *Store, p *Partition, n int, tag string) {
	t.Helper()
	for i := range n {
		update(t, s, func(tx *Tx) error {
			appendMsgs(t, tx, p, int64(100+i), fmt.Sprintf("%s%03d", tag, i))
			return nil
		})
	}
}

// filledStore opens a store at a new path, not closed at cleanup (the test
// closes and reopens it), with n one-message segments in partition q/p.
func filledStore(t *testing.T, n int) (string, *Store, *Partition) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	var p *Partition
	update(t, s, func(tx *Tx) error { p = newPartition(t, tx, "q", "p"); return nil })
	fill(t, s, p, n, "a")
	return path, s, p
}

// snapshotOf streams a snapshot of s.
func snapshotOf(t testing.TB, s *Store) []byte {
	t.Helper()
	rs, err := s.BeginSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var b bytes.Buffer
	if _, err := rs.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// rolledStore opens a store of 200-byte blob files with n one-message
// segments in partition q/p: a file every few segments.
func rolledStore(t *testing.T, n int) (*Store, *Partition) {
	t.Helper()
	s := openSized(t, filepath.Join(t.TempDir(), "state.db"), 200)
	var p *Partition
	update(t, s, func(tx *Tx) error { p = newPartition(t, tx, "q", "p"); return nil })
	fill(t, s, p, n, "m")
	return s, p
}

func TestBlobFilesRollOverAndAreReclaimed(t *testing.T) {
	s, p := rolledStore(t, 40)
	files := blobFiles(t, s)
	if len(files) < 5 {
		t.Fatalf("40 segments in 200-byte files made only %d files: %v", len(files), files)
	}
	checkAccounting(t, s)

	// Retention removes the oldest half: the files holding only those go.
	update(t, s, func(tx *Tx) error {
		for range 20 {
			if _, err := tx.DeleteSegment(p, p.FirstOffset); err != nil {
				return err
			}
		}
		return tx.PutPartition(p)
	})
	checkAccounting(t, s)
	after := blobFiles(t, s)
	if len(after) >= len(files) || after[len(after)-1] != files[len(files)-1] {
		t.Fatalf("files before %v, after deleting half %v", files, after)
	}
	view(t, s, func(tx *Tx) error {
		got := scan(t, tx, p.ID, 0)
		if len(got) != 20 || got[0] != "21:m020" {
			t.Fatalf("scan after retention: %v", got)
		}
		return nil
	})

	// Deleting the partition frees everything but the file appends go to.
	update(t, s, func(tx *Tx) error { return tx.deletePartitionData(p) })
	checkAccounting(t, s)
	if got := blobFiles(t, s); len(got) != 1 {
		t.Fatalf("after deleting every segment: %v", got)
	}
}

func TestDeadBlobFileOutlivesOpenReaders(t *testing.T) {
	s := openSized(t, filepath.Join(t.TempDir(), "state.db"), 1) // a file per segment
	var p *Partition
	update(t, s, func(tx *Tx) error { p = newPartition(t, tx, "q", "p"); return nil })
	fill(t, s, p, 6, "m")
	first := blobFiles(t, s)[0]

	rs, err := s.BeginSnapshot() // an open reader that still sees segment 1
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx *Tx) error {
		if _, err := tx.DeleteSegment(p, p.FirstOffset); err != nil {
			return err
		}
		return tx.PutPartition(p)
	})
	if !slices.Contains(blobFiles(t, s), first) {
		t.Fatalf("file %s removed while a reader could still reference it", first)
	}
	var buf bytes.Buffer
	if _, err := rs.WriteTo(&buf); err != nil {
		t.Fatalf("snapshot taken before the delete: %v", err)
	}
	rs.Close()
	fill(t, s, p, 1, "n") // the next commit collects it
	if slices.Contains(blobFiles(t, s), first) {
		t.Fatalf("dead file %s still there after the reader closed and a commit", first)
	}
	checkAccounting(t, s)
}

func TestSavepointRollbackDropsPendingBlobs(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		appendMsgs(t, tx, p, 10, "a")
		sp := tx.Savepoint()
		saved := *p
		appendMsgs(t, tx, p, 10, "b")
		if err := tx.RollbackTo(sp); err != nil {
			return err
		}
		*p = saved
		sp = tx.Savepoint()
		appendMsgs(t, tx, p, 10, "c")
		tx.Release(sp)
		if got := scan(t, tx, p.ID, 0); !slices.Equal(got, []string{"1:a", "2:c"}) {
			t.Fatalf("inside the transaction: %v", got)
		}
		return nil
	})
	checkAccounting(t, s)
	view(t, s, func(tx *Tx) error {
		if got := scan(t, tx, 1, 0); !slices.Equal(got, []string{"1:a", "2:c"}) {
			t.Fatalf("after commit: %v", got)
		}
		return nil
	})
}

func TestFailedUpdateWritesNoBlob(t *testing.T) {
	s := openStore(t)
	var p *Partition
	update(t, s, func(tx *Tx) error { p = newPartition(t, tx, "q", "p"); return nil })
	fill(t, s, p, 1, "a")
	boom := errors.New("boom")
	if err := s.Update(func(tx *Tx) error {
		appendMsgs(t, tx, p, 10, "lost")
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	checkAccounting(t, s)
	fill(t, s, p, 1, "b")
	checkAccounting(t, s)
}

// A crash between writing a transaction's blobs and bbolt's commit leaves
// bytes past the recorded length: opening cuts them off, and the state reads
// as committed.
// restoreInto receives a snapshot stream at target, swaps it in and opens
// the store.
func restoreInto(t *testing.T, stream []byte, target string, fileSize int64) *Store {
	t.Helper()
	tmp, err := ReceiveSnapshot(bytes.NewReader(stream), target)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, target); err != nil {
		t.Fatal(err)
	}
	return openSized(t, target, fileSize)
}

// closeWithTail closes s and appends bytes no commit recorded to its
// active file, as a transaction that never committed leaves them; it
// returns the file's path.
func closeWithTail(t *testing.T, s *Store) string {
	t.Helper()
	active := filepath.Join(s.blobs.dir, blobFileName(s.blobs.active))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(active, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte{0xee}, 1000)); err != nil {
		t.Fatal(err)
	}
	return active
}

func TestOpenCutsUncommittedBlobBytes(t *testing.T) {
	path, s, p := filledStore(t, 3)
	_, before, _ := s.Digest()
	closeWithTail(t, s)

	s = openSized(t, path, 0)
	if _, after, _ := s.Digest(); after != before {
		t.Fatal("state changed by uncommitted blob bytes")
	}
	checkAccounting(t, s)
	fill(t, s, p, 2, "b")
	checkAccounting(t, s)
	view(t, s, func(tx *Tx) error {
		if got := scan(t, tx, p.ID, 0); len(got) != 5 {
			t.Fatalf("scan: %v", got)
		}
		return nil
	})
}

func TestOpenRemovesUnreferencedBlobs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := s.blobs.dir
	s.Close()
	stale := blobDir(path, 99) // an interrupted restore's generation
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, blobFileName(7)) // unlinked too late by a crash
	if err := os.WriteFile(orphan, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = openSized(t, path, 0)
	for _, p := range []string{stale, orphan} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s not removed: %v", p, err)
		}
	}
}

func TestMissingBlobFileIsCorrupt(t *testing.T) {
	path, s, _ := filledStore(t, 1)
	active := filepath.Join(s.blobs.dir, blobFileName(s.blobs.active))
	s.Close()
	if err := os.Truncate(active, 3); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true}); !errors.Is(err, ErrCorrupt) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("open with a short blob file: %v", err)
	}
}

// The digest is logical: stores with the same content in differently cut
// files agree, and a store restored from a snapshot agrees with its source.
func TestDigestAndSnapshotIgnoreFileLayout(t *testing.T) {
	dir := t.TempDir()
	small := openSized(t, filepath.Join(dir, "small.db"), 100)
	large := openSized(t, filepath.Join(dir, "large.db"), 0)
	for _, s := range []*Store{small, large} {
		var p *Partition
		update(t, s, func(tx *Tx) error { p = newPartition(t, tx, "q", "p"); return nil })
		fill(t, s, p, 12, "m")
		update(t, s, func(tx *Tx) error {
			for range 3 {
				if _, err := tx.DeleteSegment(p, p.FirstOffset); err != nil {
					return err
				}
			}
			if _, err := tx.TruncateSegment(p, p.FirstOffset+1, 0); err != nil {
				return err
			}
			if err := tx.PutPartition(p); err != nil {
				return err
			}
			return tx.SetApplied(42)
		})
	}
	_, ds, _ := small.Digest()
	_, dl, _ := large.Digest()
	if ds != dl {
		t.Fatal("same content in different blob files, different digests")
	}

	stream := snapshotOf(t, small)
	target := filepath.Join(t.TempDir(), "restored.db")
	old := openSized(t, target, 0) // a node with state of its own
	fill(t, old, func() *Partition {
		var p *Partition
		update(t, old, func(tx *Tx) error { p = newPartition(t, tx, "other", "x"); return nil })
		return p
	}(), 2, "o")
	old.Close()
	restored := restoreInto(t, stream, target, 100)
	applied, dr, err := restored.Digest()
	if err != nil || dr != ds || applied != 42 {
		t.Fatalf("restored: applied %d, err %v, same digest %v", applied, err, dr == ds)
	}
	checkAccounting(t, restored)
	if gens, _ := blobDirs(target); len(gens) != 1 {
		t.Fatalf("generations left beside the restored store: %v", gens)
	}
	// The restored store goes on: appends, deletes, reclaiming.
	update(t, restored, func(tx *Tx) error {
		p, err := tx.Partition(1, "p")
		if err != nil || p == nil {
			t.Fatalf("partition: %v %v", p, err)
		}
		appendMsgs(t, tx, p, 500, "after")
		_, err = tx.DeleteSegment(p, p.FirstOffset)
		if err == nil {
			err = tx.PutPartition(p)
		}
		return err
	})
	checkAccounting(t, restored)
}

func TestReceiveSnapshotRejectsDamage(t *testing.T) {
	s := openStore(t)
	var p *Partition
	update(t, s, func(tx *Tx) error { p = newPartition(t, tx, "q", "p"); return nil })
	fill(t, s, p, 3, "m")
	good := snapshotOf(t, s)
	cases := map[string][]byte{
		"garbage":        []byte("not a snapshot at all"),
		"empty":          nil,
		"cut in the db":  good[:len(snapMagic)+100],
		"cut in a file":  good[:len(good)-len(snapEnd)-5],
		"no end marker":  good[:len(good)-len(snapEnd)],
		"bad end marker": append(slices.Clone(good[:len(good)-len(snapEnd)]), "CROWNBAD"...),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(dir, "state.db")
			if _, err := ReceiveSnapshot(bytes.NewReader(b), target); err == nil {
				t.Fatal("damaged stream accepted")
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("a failed receive left %d entries behind", len(entries))
			}
		})
	}
}

func FuzzReceiveSnapshot(f *testing.F) {
	dir := f.TempDir()
	s, err := Open(filepath.Join(dir, "seed.db"), StoreOptions{NoSync: true, VerifyCache: true, BlobFileSize: 64})
	if err != nil {
		f.Fatal(err)
	}
	if err := s.Update(func(tx *Tx) error {
		q := &Queue{Name: "q", UUID: [16]byte{1}}
		if err := tx.CreateQueue(q); err != nil {
			return err
		}
		p := &Partition{QueueID: q.ID, Name: "p", UUID: [16]byte{2}}
		if err := tx.CreatePartition(p); err != nil {
			return err
		}
		for i := range 3 {
			if _, err := tx.AppendSegment(p, int64(i), uint64(i+1), []Message{{TxID: "t", Payload: []byte(`"x"`)}}, false); err != nil {
				return err
			}
		}
		return tx.PutPartition(p)
	}); err != nil {
		f.Fatal(err)
	}
	stream := snapshotOf(f, s)
	s.Close()
	f.Add(stream)
	f.Add([]byte("CROWNSS2"))
	f.Fuzz(func(t *testing.T, b []byte) {
		target := filepath.Join(t.TempDir(), "state.db")
		// Without fsync: this tests the parsing, and fsync would make each
		// input cost milliseconds.
		tmp, err := receiveSnapshot(bytes.NewReader(b), target, false)
		if err != nil {
			return
		}
		if err := os.Rename(tmp, target); err != nil {
			t.Fatal(err)
		}
		// Whatever was accepted opens, or fails to open with an error.
		st, err := Open(target, StoreOptions{NoSync: true, VerifyCache: true})
		if err != nil {
			return
		}
		defer st.Close()
		st.Digest()
	})
}

// TestReceiveSnapshotRejectsFileCounts: a stream announcing more blob files
// than the bound is refused before any is created, and one that ends before
// the files it announced leaves neither database nor files behind.
func TestReceiveSnapshotRejectsFileCounts(t *testing.T) {
	stream := func(count uint32, files int) []byte {
		b := append([]byte{}, snapMagic...)
		b = binary.BigEndian.AppendUint64(b, 3)
		b = append(b, "abc"...)
		b = binary.BigEndian.AppendUint32(b, count)
		for i := range files {
			b = binary.BigEndian.AppendUint64(b, uint64(i+1))
			b = binary.BigEndian.AppendUint64(b, 0)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"over the bound", stream(maxSnapshotFiles+1, 2)},
		{"the largest count", stream(0xffffffff, 2)},
		{"ends before its files", stream(5, 3)},
	} {
		dir := t.TempDir()
		target := filepath.Join(dir, "state.db")
		_, err := receiveSnapshot(bytes.NewReader(tc.b), target, false)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", tc.name, err)
		}
		left, _ := filepath.Glob(filepath.Join(dir, "*"))
		if len(left) != 0 {
			t.Errorf("%s: left %v", tc.name, left)
		}
	}
}

func TestRefRoundTripAndRejects(t *testing.T) {
	r := blobRef{File: 3, Pos: 1 << 33, Len: 99, CreatedAt: -5, Count: 7}
	got, err := decodeRef(r.encode())
	if err != nil || got != r {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, b := range [][]byte{nil, r.encode()[:refSize-1], append([]byte{1}, r.encode()[1:]...)} {
		if _, err := decodeRef(b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%x: %v", b, err)
		}
	}
}

// With fsync on (crownd --fsm-sync), blobs, new files and their directory
// are synced on every commit; the state reads back the same after reopening.
func TestSyncedStoreRollsOverAndReopens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, StoreOptions{BlobFileSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	var p *Partition
	update(t, s, func(tx *Tx) error { p = newPartition(t, tx, "q", "p"); return nil })
	fill(t, s, p, 8, "s")
	if n := len(blobFiles(t, s)); n < 3 {
		t.Fatalf("8 segments in 100-byte files: %d files", n)
	}
	_, before, _ := s.Digest()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openSized(t, path, 100)
	if _, after, _ := s.Digest(); after != before {
		t.Fatal("state differs after reopening")
	}
	checkAccounting(t, s)
}

// The active file's live bytes are kept by the transaction and written
// once: a blob appended and freed in the same transaction, and a free a
// savepoint rolls back, must leave the record what the references say.
func TestActiveFileLiveBytesWithinATransaction(t *testing.T) {
	s := openStore(t)
	var p Partition
	update(t, s, func(tx *Tx) error {
		p = *newPartition(t, tx, "q", "p")
		for _, id := range []string{"a", "b", "c"} {
			appendMsgs(t, tx, &p, 10, id)
		}
		return nil
	})
	checkAccounting(t, s)
	update(t, s, func(tx *Tx) error {
		d := appendMsgs(t, tx, &p, 11, "d")
		if n, err := tx.DeleteSegment(&p, d); err != nil || n != 1 {
			t.Fatalf("delete the segment appended here: %d, %v", n, err)
		}
		must(t, tx.PutPartition(&p))
		sp := tx.Savepoint()
		if n, err := tx.DeleteSegment(&p, 1); err != nil || n != 1 {
			t.Fatalf("delete a committed segment: %d, %v", n, err)
		}
		must(t, tx.PutPartition(&p))
		must(t, tx.RollbackTo(sp))
		stored, err := tx.PartitionByID(p.ID)
		if err != nil {
			t.Fatal(err)
		}
		p = *stored
		if n, err := tx.DeleteSegment(&p, 2); err != nil || n != 1 {
			t.Fatalf("delete b: %d, %v", n, err)
		}
		return tx.PutPartition(&p)
	})
	checkAccounting(t, s)
	wantScan(t, s, p.ID, "1:a 3:c")
	// A transaction that only frees (retention) still records it.
	update(t, s, func(tx *Tx) error {
		if n, err := tx.DeleteSegment(&p, 3); err != nil || n != 1 {
			t.Fatalf("delete c: %d, %v", n, err)
		}
		return tx.PutPartition(&p)
	})
	checkAccounting(t, s)
	wantScan(t, s, p.ID, "1:a")
}

// TestScannedPayloadsOutliveTheirTransaction holds Scan's promise that a
// payload may be kept after its transaction: payloads scanned from a
// transaction's own pending appends and from the file must read the same
// after later transactions append to the same file, roll a savepoint back
// over bytes appended after them, and commit.
func TestScannedPayloadsOutliveTheirTransaction(t *testing.T) {
	s := openStore(t)
	kept := map[string][]byte{}
	keep := func(tx *Tx, pid uint64, from string) {
		p, err := tx.PartitionByID(pid)
		if err != nil || p == nil {
			t.Fatalf("partition %d: %v", pid, err)
		}
		must(t, tx.Scan(p, 0, func(sm *StoredMessage) (bool, error) {
			kept[from+"/"+sm.TxID] = sm.Payload
			return true, nil
		}))
	}
	var pid uint64
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		pid = p.ID
		appendMsgs(t, tx, p, 10, "a", "b")
		sp := tx.Savepoint()
		appendMsgs(t, tx, p, 11, "dropped-one", "dropped-two")
		must(t, tx.RollbackTo(sp))
		appendMsgs(t, tx, p, 12, "c")
		// After the last append, so that the payloads alias the buffer
		// the commit writes, not one the buffer outgrew.
		keep(tx, pid, "pending")
		return nil
	})
	view(t, s, func(tx *Tx) error { keep(tx, pid, "file"); return nil })
	for round := range 20 {
		update(t, s, func(tx *Tx) error {
			p, err := tx.PartitionByID(pid)
			if err != nil {
				return err
			}
			appendMsgs(t, tx, p, int64(20+round), fmt.Sprintf("later-%d-a-long-id", round), fmt.Sprintf("later-%d-b", round))
			if round%3 == 0 {
				sp := tx.Savepoint()
				appendMsgs(t, tx, p, int64(20+round), "rolled-back")
				return tx.RollbackTo(sp)
			}
			return nil
		})
	}
	if len(kept) != 6 {
		t.Fatalf("kept %d payloads, want a, b and c from the pending appends and from the file: %v", len(kept), kept)
	}
	for key, payload := range kept {
		id := key[strings.IndexByte(key, '/')+1:]
		if want := fmt.Sprintf("%q", id); string(payload) != want {
			t.Errorf("payload of %s read %q after later transactions, want %q", id, payload, want)
		}
	}
}

// blobSet.pendingHint: an appending transaction's buffer is sized from the
// most the recent transactions appended, so group commits that vary by
// half from one to the next append into the buffer they started with
// instead of outgrowing it (a buffer outgrown is copied into one twice its
// size). Sized from the last transaction alone, the third one here (6
// segments after 4) outgrew its buffer.
func TestPendingBufferSizedFromRecentTransactions(t *testing.T) {
	_, s, p := filledStore(t, 1)
	defer s.Close()
	payload := bytes.Repeat([]byte("x"), 4000)
	for i, n := range []int{8, 4, 6, 5, 8, 4, 4, 7, 8, 5, 6, 8} {
		update(t, s, func(tx *Tx) error {
			var startCap int
			for j := range n {
				stored, err := tx.PartitionByID(p.ID)
				if err != nil {
					return err
				}
				*p = *stored
				seq, err := tx.ReserveIDs(1)
				if err != nil {
					return err
				}
				msg := []Message{{TxID: fmt.Sprintf("t%d-%d", i, j), Payload: payload}}
				if _, err := tx.AppendSegment(p, int64(1000+i), seq, msg, false); err != nil {
					return err
				}
				if err := tx.PutPartition(p); err != nil {
					return err
				}
				if j == 0 {
					startCap = cap(tx.w.pending)
				}
			}
			if i > 0 && cap(tx.w.pending) != startCap {
				t.Errorf("transaction %d (%d segments): the pending buffer grew from %d to %d bytes for %d appended",
					i, n, startCap, cap(tx.w.pending), len(tx.w.pending))
			}
			return nil
		})
	}
	checkAccounting(t, s)
}
