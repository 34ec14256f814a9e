package segments

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// imageOnLog copies the state (database and every blob directory beside
// it) each time the store logs a message starting with prefix: a process
// crash right after that point, with every write in the page cache.
type imageOnLog struct {
	t      *testing.T
	path   string
	prefix string
	images *[]string
}

func (h imageOnLog) Enabled(context.Context, slog.Level) bool { return true }
func (h imageOnLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h imageOnLog) WithGroup(string) slog.Handler            { return h }
func (h imageOnLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, h.prefix) {
		return nil
	}
	dst := filepath.Join(h.t.TempDir(), "state.db")
	b, err := os.ReadFile(h.path)
	must(h.t, err)
	must(h.t, os.WriteFile(dst, b, 0o600))
	gens, err := blobDirs(h.path)
	must(h.t, err)
	for _, g := range gens {
		copyTree(h.t, blobDir(h.path, g), blobDir(dst, g))
	}
	*h.images = append(*h.images, dst)
	return nil
}

// A schema 2 migration interrupted by a crash after any of its batches
// starts over on the next open and ends in the same state as one that ran
// through: the same lookups and the digest of the state this build writes.
//
// segments/DESIGN.md: "the index is rebuilt into the new bucket in
// transactions of 65,536 entries, and the old bucket dropped and schema 3
// recorded in the last one, so an interrupted migration starts over".
func TestInterruptedSchema2MigrationStartsOver(t *testing.T) {
	fresh := openStore(t)
	fillMigrationFixture(t, fresh)
	_, want, err := fresh.Digest()
	must(t, err)

	dir := t.TempDir()
	copyTree(t, filepath.Join("testdata", "schema2"), dir)
	path := filepath.Join(dir, "state.db")
	var images []string
	log := slog.New(imageOnLog{t: t, path: path, prefix: "rebuilding the transaction-id index", images: &images})
	s, err := openWithMigrationBatch(path, StoreOptions{NoSync: true, VerifyCache: true, Logger: log}, 1)
	must(t, err)
	must(t, s.Close())
	// An image after each committed batch but the last (which records the
	// new schema).
	if len(images) < 3 {
		t.Fatalf("a one-entry batch migration logged %d batches", len(images))
	}
	for i, img := range images {
		for round := range 2 { // interrupted, then reopened as migrated
			r, err := openWithMigrationBatch(img, StoreOptions{NoSync: true, VerifyCache: true}, 2)
			if err != nil {
				t.Fatalf("crash after batch %d, open %d: %v", i, round, err)
			}
			checkFixtureIndex(t, r)
			if _, got, err := r.Digest(); err != nil || got != want {
				r.Close()
				t.Fatalf("crash after batch %d, open %d: digest %s (%v), want %s", i, round, got, err, want)
			}
			checkAccounting(t, r)
			must(t, r.Close())
		}
	}
}

// A blob file shorter on disk than its committed length (damage the store
// did not make) must fail the snapshot that streams it, as the linked
// snapshot does: a stream short of a file's bytes is one no receiver
// accepts, and Raft drops its log once the snapshot counts.
//
// segments/DESIGN.md: "Snapshots carry the database and the live files:
// bbolt's consistent copy, then each file the snapshot's view records,
// cut at its recorded length".
func TestSnapshotOfAShortBlobFileFails(t *testing.T) {
	s, _ := rolledStore(t, 12)
	sealed := filepath.Join(s.blobs.dir, blobFileName(s.blobs.active-1))
	st, err := os.Stat(sealed)
	must(t, err)
	if st.Size() < 2 {
		t.Fatalf("sealed file of %d bytes", st.Size())
	}
	must(t, os.Truncate(sealed, st.Size()/2))
	rs, err := s.BeginSnapshot()
	must(t, err)
	defer rs.Close()
	var buf bytes.Buffer
	if _, err := rs.WriteTo(&buf); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("snapshot of a short blob file: %v, want ErrCorrupt", err)
	}
}
