package segments

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// dirtyPages is how many of f's page-cache pages are dirty or under
// writeback (cachestat, Linux 6.5+); ok is false where the kernel cannot
// tell.
func dirtyPages(t *testing.T, path string) (n uint64, ok bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &st, 0); err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
			return 0, false
		}
		t.Fatal(err)
	}
	return st.Dirty + st.Writeback, true
}

// A store opened with fsync (crownd --fsm-sync) after a session that wrote
// without it and ended in a process crash must leave every byte it holds on
// disk once Open returns: from then on the state machine's marker says the
// files were fsynced, so a machine crash keeps them instead of rebuilding
// them from the snapshot and the log (fsm/DESIGN.md Durability 3). A commit
// fsyncs the state file (bbolt's fdatasync flushes the whole file) and the
// active blob file, but the sealed blob files the earlier session wrote
// were never synced by anything: after a power loss they could come back
// short or zeroed while the state file that references them survives.
//
// README "Durability": "--fsm-sync fsyncs them on every commit too, for
// operators who want both."
func TestSyncedOpenMakesAnUnsyncedSessionsFilesDurable(t *testing.T) {
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil || fs.Type == unix.TMPFS_MAGIC {
		t.Skip("fsync does not clean a tmpfs page (or the file system is unknown)")
	}
	s := openSized(t, filepath.Join(dir, "state.db"), 200)
	var p *Partition
	update(t, s, func(tx *Tx) error { p = newPartition(t, tx, "q", "p"); return nil })
	fill(t, s, p, 20, "unsynced")
	// What a SIGKILL leaves: every write in the page cache, none fsynced
	// (copying writes the image's pages anew, so they are dirty).
	img := modelImage(t, s)
	_, want, err := s.Digest()
	must(t, err)
	entries, err := os.ReadDir(blobDir(img, s.blobs.gen))
	must(t, err)
	if len(entries) < 3 {
		t.Fatalf("20 segments in 200-byte files: %d files", len(entries))
	}
	var files []string
	dirtyBefore := uint64(0)
	for _, e := range entries {
		path := filepath.Join(blobDir(img, s.blobs.gen), e.Name())
		files = append(files, path)
		n, ok := dirtyPages(t, path)
		if !ok {
			t.Skip("cachestat is not supported here")
		}
		dirtyBefore += n
	}
	if dirtyBefore == 0 {
		t.Skip("the kernel wrote the image back before the test could look")
	}

	r, err := Open(img, StoreOptions{BlobFileSize: 200, VerifyCache: true})
	must(t, err)
	defer r.Close()
	if _, got, err := r.Digest(); err != nil || got != want {
		t.Fatalf("reopened digest %s (%v), want %s", got, err, want)
	}
	for _, path := range append(files, img) {
		if n, _ := dirtyPages(t, path); n != 0 {
			t.Errorf("%s: %d pages not on disk after a synced open", filepath.Base(path), n)
		}
	}
}
