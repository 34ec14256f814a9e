package segments

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// linkedOf takes a linked snapshot of s into a new directory and returns
// its manifest and the directory.
func linkedOf(t *testing.T, s *Store) ([]byte, string) {
	t.Helper()
	dir := t.TempDir()
	rs, err := s.BeginSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var b bytes.Buffer
	n, err := rs.WriteLinked(&b, dir)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(b.Len()) {
		t.Fatalf("WriteLinked reported %d bytes, wrote %d", n, b.Len())
	}
	return b.Bytes(), dir
}

// expand returns the plain stream of a linked snapshot, or the error that
// ended it.
func expand(manifest []byte, dir string) ([]byte, int64, error) {
	rc, size, err := ExpandLinked(bytes.NewReader(manifest), dir)
	if err != nil {
		return nil, 0, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return b, size, err
}

func TestLinkedSnapshotExpandsToThePlainStream(t *testing.T) {
	s, p := rolledStore(t, 30)
	plain := snapshotOf(t, s)
	manifest, dir := linkedOf(t, s)
	if !IsLinked(manifest[:8]) || IsLinked(plain[:8]) {
		t.Fatal("IsLinked does not tell the two streams apart")
	}

	// Sealed files are links to the live ones; the active one is a copy.
	for _, name := range blobFiles(t, s) {
		live, err := os.Stat(filepath.Join(s.blobs.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		placed, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if linked := os.SameFile(live, placed); linked == (name == blobFileName(s.blobs.active)) {
			t.Errorf("%s: linked %v, active file %s", name, linked, blobFileName(s.blobs.active))
		}
	}

	got, size, err := expand(manifest, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, plain) || size != int64(len(plain)) {
		t.Fatalf("expanded stream: %d bytes (announced %d), plain stream %d bytes, equal %v",
			len(got), size, len(plain), bytes.Equal(got, plain))
	}

	// The live store goes on: appends to the active file, retention that
	// unlinks sealed files. The snapshot still expands to what it saw, and
	// restores into a store with the same digest.
	_, before, _ := s.Digest()
	fill(t, s, p, 30, "n")
	update(t, s, func(tx *Tx) error {
		for range 40 {
			if _, err := tx.DeleteSegment(p, p.FirstOffset); err != nil {
				return err
			}
		}
		return tx.PutPartition(p)
	})
	if got, _, err = expand(manifest, dir); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("after the live store moved on: equal %v, error %v", bytes.Equal(got, plain), err)
	}
	// A newer snapshot may reap this one's directory while it is read.
	rc, _, err := ExpandLinked(bytes.NewReader(manifest), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("read after the directory went: equal %v, error %v", bytes.Equal(got, plain), err)
	}
	r := restoreInto(t, got, filepath.Join(t.TempDir(), "restored.db"), 200)
	if _, after, _ := r.Digest(); after != before {
		t.Fatal("restored state differs from the state the snapshot was taken of")
	}
}

func TestLinkedSnapshotDamageEndsTheStream(t *testing.T) {
	s, _ := rolledStore(t, 12)
	manifest, dir := linkedOf(t, s)
	files, err := os.ReadDir(dir)
	if err != nil || len(files) < 2 {
		t.Fatalf("placed files %v, %v", files, err)
	}
	last := filepath.Join(dir, files[len(files)-1].Name())

	// A flipped byte in the manifest's database.
	bad := bytes.Clone(manifest)
	bad[len(bad)-20] ^= 1
	if _, _, err := expand(bad, dir); !errors.Is(err, ErrCorrupt) {
		t.Errorf("damaged manifest: %v", err)
	}
	// A manifest cut short.
	if _, _, err := expand(manifest[:len(manifest)-3], dir); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short manifest: %v", err)
	}
	// A placed file changed, then missing. The file is a copy (the active
	// one) or a link to the live store's: break the link first so the
	// live store is not what the test damages.
	b, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(last)
	b[0] ^= 1
	if err := os.WriteFile(last, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := expand(manifest, dir); !errors.Is(err, ErrCorrupt) {
		t.Errorf("damaged file: %v", err)
	}
	// What the expansion produced up to a failure is never a stream a
	// receiver accepts.
	rc, _, err := ExpandLinked(bytes.NewReader(manifest), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := ReceiveSnapshot(rc, filepath.Join(t.TempDir(), "x.db")); err == nil {
		t.Error("a receiver accepted a stream whose blob file was damaged")
	}
	// A missing file fails the expansion before any byte.
	os.Remove(last)
	if _, _, err := ExpandLinked(bytes.NewReader(manifest), dir); !errors.Is(err, ErrCorrupt) {
		t.Errorf("missing file: %v", err)
	}
}

// A machine crash can roll the state file back to before a snapshot that
// linked its active file as sealed; opening it cuts that file to the older
// length. The cut must not reach the snapshot's copy.
func TestOpenLeavesALinkedFileWhole(t *testing.T) {
	path, s, p := filledStore(t, 3)
	_, before, _ := s.Digest()
	// Bytes past the committed length, as a later state would have
	// written them, and a snapshot's link to the file.
	active := closeWithTail(t, s)
	link := filepath.Join(t.TempDir(), "linked.seg")
	if err := os.Link(active, link); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	want, err := os.ReadFile(link)
	if err != nil {
		t.Fatal(err)
	}

	s = openSized(t, path, 0)
	if _, after, _ := s.Digest(); after != before {
		t.Fatal("state changed by uncommitted blob bytes")
	}
	fill(t, s, p, 2, "b")
	checkAccounting(t, s)
	if got, err := os.ReadFile(link); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the linked copy changed (%d bytes, was %d): %v", len(got), len(want), err)
	}
	live, _ := os.Stat(active)
	linked, _ := os.Stat(link)
	if os.SameFile(live, linked) {
		t.Fatal("the store still writes the linked file")
	}
	view(t, s, func(tx *Tx) error {
		if got := scan(t, tx, p.ID, 0); len(got) != 5 {
			t.Fatalf("scan: %v", got)
		}
		return nil
	})
}

// FuzzExpandLinked feeds damaged manifests (flipped and cut bytes of a real
// one, and anything the fuzzer makes) to the expansion: it must fail
// cleanly or produce a stream, and a receiver accepts only an intact one.
func FuzzExpandLinked(f *testing.F) {
	s, err := Open(filepath.Join(f.TempDir(), "state.db"), StoreOptions{NoSync: true, VerifyCache: true, BlobFileSize: 200})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(func(tx *Tx) error {
		p := &Partition{QueueID: 1, Name: "p"}
		if err := tx.CreatePartition(p); err != nil {
			return err
		}
		for i := range 6 {
			if _, err := tx.AppendSegment(p, int64(i), uint64(i), []Message{{TxID: fmt.Sprint(i), Payload: bytes.Repeat([]byte{'x'}, 90)}}, false); err != nil {
				return err
			}
		}
		return tx.PutPartition(p)
	}); err != nil {
		f.Fatal(err)
	}
	dir := f.TempDir()
	rs, err := s.BeginSnapshot()
	if err != nil {
		f.Fatal(err)
	}
	var manifest bytes.Buffer
	if _, err := rs.WriteLinked(&manifest, dir); err != nil {
		f.Fatal(err)
	}
	var plain bytes.Buffer
	if _, err := rs.WriteTo(&plain); err != nil {
		f.Fatal(err)
	}
	rs.Close()
	f.Add(manifest.Bytes())
	f.Add(manifest.Bytes()[:40])
	f.Add([]byte("CROWNSL1\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rc, size, err := ExpandLinked(bytes.NewReader(b), dir)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not marked corrupt: %v", err)
			}
			return
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("stream ended by an error not marked corrupt: %v", err)
			}
			return
		}
		if int64(len(got)) != size {
			t.Fatalf("expanded %d bytes, announced %d", len(got), size)
		}
		if bytes.Equal(b, manifest.Bytes()) && !bytes.Equal(got, plain.Bytes()) {
			t.Fatal("the intact manifest expanded to another stream")
		}
	})
}

// A rollover creates its new file under a fresh name: a file already under
// that name (left by a rollover whose removal failed) is unlinked, not
// truncated, so a snapshot's link to it keeps its bytes.
func TestRolloverNeverTruncatesThroughAName(t *testing.T) {
	s, p := rolledStore(t, 1)
	next := filepath.Join(s.blobs.dir, blobFileName(s.blobs.active+1))
	want := []byte("bytes a snapshot holds")
	if err := os.WriteFile(next, want, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "linked.seg")
	if err := os.Link(next, link); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	fill(t, s, p, 10, "n") // 200-byte files: rolls over past next
	checkAccounting(t, s)
	if got, err := os.ReadFile(link); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the linked file changed to %q: %v", got, err)
	}
}

func TestSealActiveMakesALinkedSnapshotCopyNothing(t *testing.T) {
	s := openSized(t, filepath.Join(t.TempDir(), "state.db"), 1<<20)
	var p *Partition
	update(t, s, func(tx *Tx) error { p = newPartition(t, tx, "q", "p"); return nil })
	fill(t, s, p, 30, "m") // 30 segments in one file, far below its size
	sealed := s.blobs.active
	_, before, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}

	// Below the threshold nothing moves, and nothing is committed.
	committed := func() int {
		var id int
		view(t, s, func(tx *Tx) error { id = tx.tx.ID(); return nil })
		return id
	}
	txid := committed()
	if err := s.SealActive(s.blobs.activeLen + 1); err != nil {
		t.Fatal(err)
	}
	if s.blobs.active != sealed || committed() != txid {
		t.Fatalf("SealActive below its threshold moved appends to file %d (was %d), transaction %d (was %d)",
			s.blobs.active, sealed, committed(), txid)
	}
	if err := s.SealActive(s.blobs.activeLen); err != nil {
		t.Fatal(err)
	}
	if s.blobs.active == sealed || s.blobs.activeLen != 0 {
		t.Fatalf("after SealActive: active file %d of %d bytes, want a new empty one after %d",
			s.blobs.active, s.blobs.activeLen, sealed)
	}
	if _, after, err := s.Digest(); err != nil || after != before {
		t.Fatalf("sealing changed the digest (%v)", err)
	}
	checkAccounting(t, s)

	// The snapshot links the file that holds every payload and copies an
	// empty one; it expands to the plain stream and restores the same state.
	plain := snapshotOf(t, s)
	manifest, dir := linkedOf(t, s)
	live, err := os.Stat(filepath.Join(s.blobs.dir, blobFileName(sealed)))
	if err != nil {
		t.Fatal(err)
	}
	placed, err := os.Stat(filepath.Join(dir, blobFileName(sealed)))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(live, placed) {
		t.Error("the sealed file was copied, not linked")
	}
	if st, err := os.Stat(filepath.Join(dir, blobFileName(s.blobs.active))); err != nil || st.Size() != 0 {
		t.Errorf("the new active file in the snapshot: %v, %v; want an empty copy", st, err)
	}
	got, _, err := expand(manifest, dir)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("expanded stream equal %v, error %v", bytes.Equal(got, plain), err)
	}
	r := restoreInto(t, got, filepath.Join(t.TempDir(), "restored.db"), 1<<20)
	if _, after, _ := r.Digest(); after != before {
		t.Fatal("restored state differs from the state the snapshot was taken of")
	}

	// Appends go on in the new file and every message still reads.
	fill(t, s, p, 3, "n")
	view(t, s, func(tx *Tx) error {
		if got := scan(t, tx, p.ID, 1); len(got) != 33 || got[32] != "33:n002" {
			t.Fatalf("scan after sealing: %d messages, last %q", len(got), got[len(got)-1])
		}
		return nil
	})
	checkAccounting(t, s)
}
