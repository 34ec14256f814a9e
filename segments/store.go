package segments

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Store is the state machine's bbolt database and the blob files beside it.
type Store struct {
	db        *bolt.DB
	path      string
	blobs     *blobSet
	writeback *writeback // nil unless StoreOptions.Writeback is set
	// parts caches decoded partition records for write transactions
	// (partcache.go); verifyCache checks every hit against the bucket.
	parts       *partCache
	verifyCache bool
	// queues caches decoded queue records for every transaction, each hit
	// checked against the stored bytes (queuecache.go).
	queues *queueCache
	// commits counts the write transactions update committed, and
	// pagesAtOpen is bbolt's count of pages written once the store had
	// opened (WriteStats).
	commits     atomic.Uint64
	pagesAtOpen int64
	// open is the write transaction UpdateDeferred left open (nil when
	// none); openMu serialises every use of it and guards it, openUses and
	// openTimer. Lock order: openMu before blobSet.gc and bbolt's locks
	// (DESIGN.md). deferred is set at Open.
	openMu    sync.Mutex
	open      *Tx
	openUses  int
	openTimer *time.Timer
	deferred  DeferOptions
}

// WriteStats counts what a store's write transactions wrote since it opened.
type WriteStats struct {
	// Commits is the write transactions committed: applied batches and seals.
	Commits uint64
	// Pages is the pages bbolt wrote for them, a meta page each included.
	// bbolt writes every dirty page with a pwrite of its own, so
	// Pages/Commits is what a transaction costs the state file
	// (docs/performance.md lesson 46).
	Pages uint64
}

// Plus is w and o together (a node's stores across snapshot installs).
func (w WriteStats) Plus(o WriteStats) WriteStats {
	return WriteStats{Commits: w.Commits + o.Commits, Pages: w.Pages + o.Pages}
}

// WriteStats reports the store's write transactions since it opened.
func (s *Store) WriteStats() WriteStats {
	s.settle()
	return WriteStats{Commits: s.commits.Load(), Pages: uint64(pagesWritten(s.db) - s.pagesAtOpen)}
}

// pagesWritten is bbolt's count of the pages db's transactions wrote.
func pagesWritten(db *bolt.DB) int64 {
	st := db.Stats()
	return st.TxStats.GetWrite()
}

// StoreOptions tune how the database file is opened.
type StoreOptions struct {
	// NoSync skips fsync on commit. The Raft log is the durable record, so the
	// state machine may run without it; see fsm/DESIGN.md for the recovery
	// argument.
	NoSync bool
	// MmapSize is the initial memory map size. Sizing it above the file keeps a
	// long snapshot read from blocking writers (bbolt remaps under a lock that
	// open read transactions hold).
	MmapSize int
	// BlobFileSize is the size at which segment blobs move on to a new file
	// (DefaultBlobFileSize when zero).
	BlobFileSize int64
	// Writeback, when positive and NoSync is set, has the kernel start
	// writing the store's dirty pages this often (writeback.go), so they
	// reach the disk in small pieces instead of the kernel's bursts. Linux
	// only; ignored elsewhere.
	Writeback time.Duration
	// VerifyCache compares every partition record a write transaction takes
	// from the store's cache with the record in the bucket, and fails the
	// load when they differ. For tests: it costs the read the cache saves.
	VerifyCache bool
	// Defer bounds how long UpdateDeferred keeps a write transaction open.
	Defer DeferOptions
	// Logger receives what the store does outside a transaction's result:
	// a blob file it could not remove yet (it retries). Nil discards.
	Logger *slog.Logger
}

// Open opens or creates the database at path and its blob files, and makes
// sure every bucket exists.
func Open(path string, o StoreOptions) (*Store, error) {
	return openWithMigrationBatch(path, o, 65536)
}

// openWithMigrationBatch is Open, rebuilding a schema 2 transaction-id index
// batch entries per transaction (tests make it small).
func openWithMigrationBatch(path string, o StoreOptions, batch int) (*Store, error) {
	if err := CheckBoltLength(path); err != nil {
		return nil, fmt.Errorf("open state database: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:         5 * time.Second,
		NoSync:          o.NoSync,
		NoFreelistSync:  true,
		FreelistType:    bolt.FreelistMapType,
		InitialMmapSize: o.MmapSize,
	})
	if err != nil {
		return nil, fmt.Errorf("open state database %s: %w", path, err)
	}
	gens, err := blobDirs(path)
	if err != nil {
		db.Close()
		return nil, err
	}
	migrate := false
	tagged := -1     // queues the tag index was built for on open; -1: not built
	rebuilt := false // built for a file that should have had it (damaged)
	err = db.Update(func(tx *bolt.Tx) error {
		lacksIndex := false
		for _, name := range derivedBuckets {
			lacksIndex = lacksIndex || tx.Bucket(name) == nil
		}
		for _, name := range storeBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		v := bytes.Clone(meta.Get(metaSchema))
		if len(v) == 8 && u64(v) >= 2 && (u64(v) < schemaTagIndex || lacksIndex) {
			// Files before schema 9 have no tag index (tagindex.go): it
			// is built here, and schema 9 recorded in the same
			// transaction (below; for schema 2, at the end of its
			// migration), so a crash before then leaves the old schema,
			// whose next open builds the index again. A later file
			// without it (damaged: only derived data is missing) gets it
			// rebuilt too, rather than an empty index that would hide
			// its queues from discovery pops and listings.
			n, err := rebuildQueueTagIndex(tx)
			if err != nil {
				return err
			}
			tagged, rebuilt = n, u64(v) >= schemaTagIndex
		}
		if v == nil {
			if err := meta.Put(metaSchema, be64(schemaVersion)); err != nil {
				return err
			}
		} else if len(v) == 8 && u64(v) == 2 {
			migrate = true
		} else if len(v) == 8 && u64(v) >= 3 && u64(v) < schemaVersion {
			// Schema 3 is schema 4 with no reference in any partition
			// record, schema 4 is schema 5 with every record's references
			// unpacked, schema 5 is schema 6 without IDsIndexedFrom in
			// the records, schema 6 is schema 7 with every reference
			// in the segments bucket a single one, and schema 7 is schema
			// 8 with every partition record in its fixed-width form; this
			// build reads all five and writes a record in its compact form
			// when it next writes it (partpack.go, recentpack.go,
			// idmark.go), and references moved to the bucket as blocks
			// (refblock.go). Recording 8 keeps older builds, which would
			// misread such a record or block, from opening the file.
			// Schema 8 is schema 9 without the tag index, built above;
			// recording 9 keeps older builds, which would not maintain
			// it, from opening the file and leaving it stale.
			if err := meta.Put(metaSchema, be64(schemaVersion)); err != nil {
				return err
			}
		} else if len(v) != 8 || u64(v) != schemaVersion {
			return fmt.Errorf("state database schema %x, this build reads 2 to %d", v, schemaVersion)
		}
		files := tx.Bucket(bucketFiles)
		if files.Get(filesGen) != nil {
			return nil
		}
		// A new database: a blob generation no directory uses yet.
		gen := uint64(1)
		if len(gens) > 0 {
			gen = gens[len(gens)-1] + 1
		}
		if err := files.Put(filesGen, be64(gen)); err != nil {
			return err
		}
		if err := files.Put(filesActive, be64(1)); err != nil {
			return err
		}
		return files.Put(fileKey(1), fileRec{}.encode())
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("initialise state database %s: %w", path, err)
	}
	blobs, err := openBlobs(db, path, gens, o)
	if err != nil {
		db.Close()
		return nil, err
	}
	s := &Store{db: db, path: path, blobs: blobs, parts: newPartCache(partCacheMax), verifyCache: o.VerifyCache,
		queues: newQueueCache(queueCacheMax), deferred: o.Defer}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case rebuilt:
		log.Warn("rebuilt the queue tag index, missing from the state file", "state", path, "queues", tagged)
	case tagged >= 0:
		log.Info("built the queue tag index of an older state file", "state", path, "queues", tagged)
	}
	if migrate {
		if err := s.migrateTxIDs(log.With("state", path), batch); err != nil {
			s.Close()
			return nil, err
		}
	}
	if o.NoSync && o.Writeback > 0 && writebackSupported {
		if s.writeback, err = startWritebackLoop(s, o.Writeback, startWriteback); err != nil {
			s.Close()
			return nil, fmt.Errorf("start writeback: %w", err)
		}
	}
	s.pagesAtOpen = pagesWritten(db)
	return s, nil
}

// openBlobs opens the blob files the database names, cuts each back to its
// committed length, and removes what no committed state references: other
// generations' directories (an interrupted restore, a discarded state) and
// files of this one without a record (removed after a commit that a crash
// interrupted before the unlink).
func openBlobs(db *bolt.DB, path string, gens []uint64, o StoreOptions) (*blobSet, error) {
	s := &blobSet{sync: !o.NoSync, fileSize: o.BlobFileSize, files: map[uint64]*os.File{}, log: o.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.fileSize <= 0 {
		s.fileSize = DefaultBlobFileSize
	}
	recs := map[uint64]fileRec{}
	err := db.View(func(tx *bolt.Tx) error {
		files := tx.Bucket(bucketFiles)
		if v := files.Get(filesGen); len(v) == 8 {
			s.gen = u64(v)
		}
		if v := files.Get(filesActive); len(v) == 8 {
			s.active = u64(v)
		}
		c := files.Cursor()
		for k, v := c.Seek([]byte{'f'}); k != nil && k[0] == 'f'; k, v = c.Next() {
			if len(k) != 9 {
				return fmt.Errorf("blob file key %x: %w", k, ErrCorrupt)
			}
			r, err := decodeFileRec(v)
			if err != nil {
				return err
			}
			recs[u64(k[1:])] = r
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read blob file records: %w", err)
	}
	if s.gen == 0 || s.active == 0 {
		return nil, fmt.Errorf("blob file records missing: %w", ErrCorrupt)
	}
	if _, ok := recs[s.active]; !ok {
		return nil, fmt.Errorf("active blob file %d has no record: %w", s.active, ErrCorrupt)
	}
	s.dir = blobDir(path, s.gen)
	for _, g := range gens {
		if g != s.gen {
			if err := os.RemoveAll(blobDir(path, g)); err != nil {
				return nil, fmt.Errorf("remove stale blob directory: %w", err)
			}
		}
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("create blob directory: %w", err)
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list blob files: %w", err)
	}
	for _, e := range entries {
		no, named := parseBlobFileName(e.Name())
		if _, ok := recs[no]; ok && named {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			return nil, fmt.Errorf("remove unreferenced blob file: %w", err)
		}
	}
	for no, r := range recs {
		f, err := openBlobFile(filepath.Join(s.dir, blobFileName(no)), int64(r.Len))
		if err != nil {
			s.close()
			return nil, fmt.Errorf("blob file %d: %w", no, err)
		}
		s.files[no] = f
		// A store that fsyncs may be opened on files an earlier session
		// wrote without it and left by a process crash: commits sync
		// only the active file (and bbolt's the whole state file), so
		// the sealed ones would otherwise stay in the page cache while
		// the caller records that this state is on disk.
		if s.sync {
			if err := f.Sync(); err != nil {
				s.close()
				return nil, fmt.Errorf("sync blob file %d: %w", no, err)
			}
		}
	}
	if s.sync { // the directory and files created above
		for _, d := range []string{s.dir, filepath.Dir(s.dir)} {
			if err := SyncDir(d); err != nil {
				s.close()
				return nil, err
			}
		}
	}
	s.activeLen = int64(recs[s.active].Len)
	return s, nil
}

// openBlobFile opens a blob file whose committed length is size, creating it
// when size is 0, and cuts off bytes written past it by a transaction that
// never committed.
func openBlobFile(path string, size int64) (*os.File, error) {
	flags := os.O_RDWR
	if size == 0 {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && st.Size() < size {
		err = fmt.Errorf("%s: %d bytes on disk, %d committed: %w", path, st.Size(), size, ErrCorrupt)
	}
	if err == nil && st.Size() > size {
		if shared(st) {
			// A snapshot links this file (linked.go) and may hold bytes
			// past what this state committed (a state file rolled back by
			// a machine crash): leave its copy whole, continue on a private
			// one.
			f.Close()
			return unshareBlobFile(path, size)
		}
		err = f.Truncate(size)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// unshareBlobFile replaces the file at path by a private copy of its first
// size bytes (fsynced, then renamed over it), leaving the other names of
// the old file with all of its bytes, and opens the copy.
func unshareBlobFile(path string, size int64) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	tmp := path + ".unshare"
	err = writeFileFrom(tmp, io.NewSectionReader(src, 0, size), size, true)
	src.Close()
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = SyncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("unshare blob file: %w", err)
	}
	return os.OpenFile(path, os.O_RDWR, 0o600)
}

// Close flushes the file to disk and closes it.
func (s *Store) Close() error {
	s.settle()
	s.writeback.close()
	berr := s.blobs.close()
	if err := s.db.Sync(); err != nil {
		s.db.Close()
		return fmt.Errorf("sync state database: %w", err)
	}
	if err := s.db.Close(); err != nil {
		return err
	}
	return berr
}

// Path is the database file's path.
func (s *Store) Path() string { return s.path }

// Sync forces the database file to disk (blob files are synced by the
// commits that write them when the store syncs at all).
func (s *Store) Sync() error {
	s.settle()
	return s.db.Sync()
}

// Update runs fn in a write transaction, committed when fn returns nil. The
// blobs fn appended are written to their file first, so a committed
// reference never points past what the file holds.
func (s *Store) Update(fn func(*Tx) error) error { return s.update(0, fn) }

// SealActive moves appends to a new blob file if the active one holds at
// least min committed bytes. A linked snapshot hard-links sealed files and
// copies the active one (linked.go), so sealing it first makes a snapshot
// cost the indexes alone instead of up to a whole file of payloads. Which
// file holds a blob is physical, like a page's place (DESIGN.md): this
// changes only the files bucket, which no apply reads and the digest skips,
// so a node may do it whenever it likes, outside the log.
func (s *Store) SealActive(min int64) error {
	err := s.update(max(min, 1), func(t *Tx) error {
		if t.w.created == nil {
			return errNothingToSeal // below min: no commit at all
		}
		return nil
	})
	if errors.Is(err, errNothingToSeal) {
		return nil
	}
	return err
}

var errNothingToSeal = errors.New("the active blob file is below the size to seal")

func (s *Store) update(seal int64, fn func(*Tx) error) error {
	s.settle()
	t, err := s.begin(seal)
	if err != nil {
		return err
	}
	if err := s.run(t, fn, false); err != nil {
		s.abort(t)
		return err
	}
	return s.commit(t)
}

// run calls fn on t and rolls t back if fn panics, so that a recovered
// panic leaves neither bbolt's writer lock held nor half a batch to commit;
// open says t is the open transaction (openMu held), which it then forgets.
func (s *Store) run(t *Tx, fn func(*Tx) error, open bool) error {
	ok := false
	defer func() {
		if !ok {
			if open {
				s.closeOpen()
			}
			s.abort(t)
		}
	}()
	err := fn(t)
	ok = true
	return err
}

// begin starts a write transaction.
func (s *Store) begin(seal int64) (*Tx, error) {
	btx, err := s.db.Begin(true)
	if err != nil {
		return nil, fmt.Errorf("begin write: %w", err)
	}
	t := newTx(btx, s)
	if err := s.blobs.begin(t, seal); err != nil {
		btx.Rollback()
		s.blobs.abort(t.w)
		return nil, err
	}
	return t, nil
}

// commit writes what t kept back and commits it; on failure t is rolled
// back.
func (s *Store) commit(t *Tx) error {
	dead, err := s.prepareCommit(t)
	if err != nil {
		s.abort(t)
		return err
	}
	if err := t.tx.Commit(); err != nil {
		s.abort(t)
		return fmt.Errorf("commit: %w", err)
	}
	s.commits.Add(1)
	s.parts.commit(t.notes)
	s.blobs.commit(t.w, dead)
	return nil
}

// abort rolls t back and drops its blobs.
func (s *Store) abort(t *Tx) {
	t.tx.Rollback()
	s.blobs.abort(t.w)
}

// DeferOptions bounds how long UpdateDeferred keeps a write transaction
// open: until Uses calls have written to it, or Linger has passed since it
// began, whichever comes first.
type DeferOptions struct {
	Uses   int
	Linger time.Duration
}

// ErrUnchanged, returned by an UpdateDeferred function, says it wrote
// nothing: the open transaction stays as it was.
var ErrUnchanged = errors.New("segments: nothing written")

// UpdateDeferred runs fn in the write transaction it left open before, or
// in a new one, and commits it only once DeferOptions' bound is reached or
// another use of the store needs the state on disk (settle).
//
// Why: over many partitions nearly every message rewrites its partition's
// record, a bbolt Put (a search from the root) at each commit, and the
// leaves holding them are rewritten page by page: a fifth of the servers'
// CPU (docs/performance.md lessons 46-52). A transaction open across many
// batches writes each record and each leaf once however many batches
// changed it. The Raft log, fsynced before any apply, is what makes an
// applied batch durable, so the commit only decides how far a restart
// replays (fsm/DESIGN.md, Durability).
//
// An error from fn other than ErrUnchanged rolls back every batch the
// transaction held: the caller must stop applying (the state machine
// panics), since the state file no longer holds what it answered.
func (s *Store) UpdateDeferred(fn func(*Tx) error) error {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	t := s.open
	if t == nil {
		var err error
		if t, err = s.begin(0); err != nil {
			return err
		}
		s.open, s.openUses = t, 0
		if s.deferred.Linger > 0 {
			s.openTimer = time.AfterFunc(s.deferred.Linger, s.settle)
		}
	}
	if err := s.run(t, fn, true); err != nil {
		if errors.Is(err, ErrUnchanged) && s.openUses > 0 {
			return err
		}
		// An error, or nothing written to a new transaction: nothing to keep.
		s.closeOpen()
		s.abort(t)
		return err
	}
	s.openUses++
	if s.openUses >= s.deferred.Uses {
		return s.commitOpen()
	}
	return nil
}

// closeOpen forgets the open transaction; openMu is held.
func (s *Store) closeOpen() {
	if s.openTimer != nil {
		s.openTimer.Stop()
		s.openTimer = nil
	}
	s.open, s.openUses = nil, 0
}

// commitOpen commits the open transaction, if any; openMu is held.
func (s *Store) commitOpen() error {
	t := s.open
	if t == nil {
		return nil
	}
	s.closeOpen()
	return s.commit(t)
}

// settle commits the transaction UpdateDeferred left open, so that what
// begins next sees every batch applied. A failed commit panics: the
// batches it held were answered, and the state file cannot hold them.
func (s *Store) settle() {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	if err := s.commitOpen(); err != nil {
		panic(fmt.Errorf("segments: deferred commit failed, state machine stopped: %w", err))
	}
}

// prepareCommit writes what the write transaction t kept back until its end
// (pending partition records, then the blobs, whose files it records) and
// returns the blob files it left without a live byte.
func (s *Store) prepareCommit(t *Tx) (dead []uint64, err error) {
	if t.failed != nil {
		return nil, t.failed
	}
	if err := t.flushParts(); err != nil {
		return nil, err
	}
	return s.blobs.flush(t)
}

// View runs fn in a read transaction, after committing the transaction
// UpdateDeferred left open.
func (s *Store) View(fn func(*Tx) error) error {
	s.settle()
	return s.view(fn)
}

// view runs fn in a read transaction of what is committed.
func (s *Store) view(fn func(*Tx) error) error {
	s.blobs.gc.RLock()
	defer s.blobs.gc.RUnlock()
	return s.db.View(func(btx *bolt.Tx) error { return fn(newTx(btx, s)) })
}

// ViewLatest runs fn on the state as the last write left it: in the write
// transaction UpdateDeferred left open, if there is one (holding it, so no
// write runs meanwhile), else in a read transaction, which then sees every
// write made before the call. fn must only read, and briefly; a walk over
// partitions (ForEachPartition) first writes the transaction's pending
// partition records to their bucket, which changes where they are, not
// what they hold.
//
// Why: the leader reads the pushed queues' encryption switch before every
// push, and a pop looks for something to claim before it proposes; a View
// would commit the open transaction each time, undoing what deferring its
// commit saves.
func (s *Store) ViewLatest(fn func(*Tx) error) error {
	s.openMu.Lock()
	if t := s.open; t != nil {
		defer s.openMu.Unlock()
		return fn(t)
	}
	s.openMu.Unlock()
	// Nothing was open: every write made before the call is committed, and
	// one that opens a transaction meanwhile is not the caller's to see.
	return s.view(fn)
}

// Digest hashes the logical content of every bucket, in a fixed order, with
// length-prefixed keys and values; a segment contributes the blob its
// reference resolves to, wherever the reference is kept. Two stores with
// the same digest hold the same state, however their files are laid out.
func (s *Store) Digest() (applied uint64, digest string, err error) {
	err = s.View(func(t *Tx) error {
		applied = t.Applied()
		h := sha256.New()
		var lb [binary.MaxVarintLen64]byte
		var fields []byte
		write := func(b []byte) {
			n := binary.PutUvarint(lb[:], uint64(len(b)))
			h.Write(lb[:n])
			h.Write(b)
		}
		for _, name := range allBuckets {
			write(name)
			if bytes.Equal(name, bucketSegments) {
				if err := t.digestSegments(write); err != nil {
					return err
				}
				continue
			}
			c := t.tx.Bucket(name).Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				write(k)
				if bytes.Equal(name, bucketParts) {
					// Its fields in one form whatever form it is stored
					// in, without the references it holds:
					// digestSegments hashes them with the bucket's.
					var p Partition
					if err := p.unmarshal(k, v); err != nil {
						return err
					}
					v = p.appendSchema7Fields(fields[:0])
					fields = v
				}
				write(v)
			}
		}
		digest = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	return applied, digest, err
}

// digestSegments hashes every segment as its key in the segments bucket
// and the blob its reference resolves to, in key order, whether the
// reference is in the bucket or still in its partition's record (recent.go):
// where a reference is kept is layout, like the file its blob is in.
func (t *Tx) digestSegments(write func([]byte)) error {
	emit := func(k, ref []byte) error {
		if len(k) != 16 {
			return fmt.Errorf("segment key %x: %w", k, ErrCorrupt)
		}
		_, blob, err := t.segmentBlob(ref)
		if err != nil {
			return fmt.Errorf("segment %x: %w", k, err)
		}
		write(k)
		write(blob)
		return nil
	}
	// A bucket entry, a block or a single reference, is hashed as the
	// segments it holds (refblock.go), each under its own key.
	emitEntry := func(k, v []byte) error {
		if len(k) != 16 {
			return fmt.Errorf("segment key %x: %w", k, ErrCorrupt)
		}
		pid := u64(k)
		refs, err := entryRefs(pid, u64(k[8:]), v)
		if err != nil {
			return err
		}
		for i := 0; i < len(refs); i += recentEntry {
			if err := emit(key88(pid, u64(refs[i:])), refs[i+8:i+recentEntry]); err != nil {
				return err
			}
		}
		return nil
	}
	// A merge by partition number: the bucket's references of a partition
	// are older than those in its record.
	sc := t.bucket(bSegments).Cursor()
	k, v := sc.First()
	pc := t.bucket(bPartIDs).Cursor()
	for pk, pv := pc.First(); pk != nil; pk, pv = pc.Next() {
		pid := u64(pk)
		for ; k != nil && (len(k) < 8 || u64(k) <= pid); k, v = sc.Next() {
			if err := emitEntry(k, v); err != nil {
				return err
			}
		}
		p, err := t.partitionAt(pv)
		if err != nil || p == nil {
			return fmt.Errorf("partition %d indexed but not stored (%v): %w", pid, err, ErrCorrupt)
		}
		for i := range p.recentCount() {
			first, ref := p.recentAt(i)
			if err := emit(key88(pid, first), ref); err != nil {
				return err
			}
		}
	}
	for ; k != nil; k, v = sc.Next() {
		if err := emitEntry(k, v); err != nil {
			return err
		}
	}
	return nil
}

// Tx is a transaction over the layout. Every write goes through put and del,
// which is what lets a savepoint undo a failed command without aborting the
// other commands sharing the bbolt transaction.
type Tx struct {
	tx      *bolt.Tx
	store   *Store
	w       *blobTx // nil in a read transaction
	buckets [len(bucketOrder)]*bolt.Bucket
	// cursors serve get: bbolt's Get makes a cursor per call and grows its
	// stack level by level, which was 5 % of a node's CPU pushing over
	// 10,000 partitions; Seek restarts from the root, so one per bucket
	// serves every lookup of the transaction, writes in between included.
	cursors [len(bucketOrder)]*bolt.Cursor
	undo    []undoRec
	depth   int
	// parts is this transaction's overlay on the store's partition cache:
	// for each partition key it wrote, a copy of the record it stored, or a
	// note that the record is unknown (deleted, rolled back; partcache.go).
	parts map[string]*partNote
	// notes holds the same notes in the order they were made, which the
	// cache's commit and flushParts walk; pending says some may be pending,
	// and flushing is flushParts' reused list.
	notes    []*partNote
	pending  bool
	flushing []*partNote
	// partBlock and noteBlock are the blocks loads and notes are carved
	// from (newPart, newNote).
	partBlock []Partition
	noteBlock []partNote
	// failed is an error met where none could be returned (Savepoint):
	// the transaction must not commit.
	failed error
	// keyBuf and slab spare an allocation per small row on hot paths
	// (scratchKey8, value, encodedValue).
	keyBuf []byte
	slab   []byte
	// scratch holds the blob a ScanTxIDs step reads from a file, reused
	// from segment to segment (Scan's blobs are never reused: they are
	// handed out).
	scratch []byte
	// goneKnown and goneAny cache whether any deleted transaction id is
	// remembered (dedup.go): every deduplicated push that misses the index
	// asks, and the memory is usually empty.
	goneKnown, goneAny bool
}

type undoRec struct {
	b       int
	key     []byte
	old     []byte
	existed bool
}

// Bucket indexes for the per-transaction handle cache.
const (
	bMeta = iota
	bQueues
	bQueueIDs
	bParts
	bPartIDs
	bPartUUIDs
	bSegments
	bGroups
	bQueueGroup
	bTxIDs
	bLeases
	bDLQ
	bSubs
	bNodes
	bSettings
	bPolicies
	bQEvents
	bFiles
	bTraces
	bTraceNames
	bTraceOrder
	bPushBuffer
	bStreamQueries
	bStreamNames
	bStreamSources
	bStreamState
	bTxGone
	bTxGoneAt
	bDiscoveryRR
	bQueueNS
	bQueueTask
	bQueueTags
)

var bucketOrder = [...][]byte{
	bMeta: bucketMeta, bQueues: bucketQueues, bQueueIDs: bucketQueueIDs, bParts: bucketParts,
	bPartIDs: bucketPartIDs, bPartUUIDs: bucketPartUUIDs, bSegments: bucketSegments,
	bGroups: bucketGroups, bQueueGroup: bucketQueueGroup, bTxIDs: bucketTxIDs, bLeases: bucketLeases,
	bDLQ: bucketDLQ, bSubs: bucketSubs, bNodes: bucketNodes, bSettings: bucketSettings,
	bPolicies: bucketPolicies, bQEvents: bucketQEvents, bFiles: bucketFiles,
	bTraces: bucketTraces, bTraceNames: bucketTraceNames, bTraceOrder: bucketTraceOrder,
	bPushBuffer: bucketPushBuffer,
	// Streams (streams.go).
	bStreamQueries: bucketStreamQueries, bStreamNames: bucketStreamNames,
	bStreamSources: bucketStreamSources, bStreamState: bucketStreamState,
	// Deduplication of deleted messages (dedup.go).
	bTxGone: bucketTxGone, bTxGoneAt: bucketTxGoneAt,
	// Round robin across the queues of discovery pops (discovery.go).
	bDiscoveryRR: bucketDiscoveryRR,
	// The queue tag index, derived from the queue records (tagindex.go).
	bQueueNS: bucketQueueNS, bQueueTask: bucketQueueTask, bQueueTags: bucketQueueTags,
}

func newTx(btx *bolt.Tx, s *Store) *Tx {
	return &Tx{tx: btx, store: s}
}

// Writable reports whether t is a write transaction: a read inside one
// (ViewLatest) holds off every write until it ends.
func (t *Tx) Writable() bool { return t.w != nil }

// bucket opens bucket b on first use: a transaction touches a few of the
// store's buckets, and opening one is a search of the root.
func (t *Tx) bucket(b int) *bolt.Bucket {
	if bk := t.buckets[b]; bk != nil {
		return bk
	}
	bk := t.tx.Bucket(bucketOrder[b])
	if bk == nil {
		panic(fmt.Sprintf("segments: bucket %s missing from an opened store", bucketOrder[b]))
	}
	if t.tx.Writable() && (b == bSegments || b == bDLQ || b == bTxIDs) {
		// Append-mostly buckets: fill pages fully instead of splitting in half.
		bk.FillPercent = 0.9
	}
	t.buckets[b] = bk
	return bk
}

// scratchKey8 is key8 built in the transaction's one scratch buffer, valid
// until the next call: for get, put and del only, since bbolt keeps no key
// it looks up and copies a key it stores (as record does).
func (t *Tx) scratchKey8(id uint64, suffix string) []byte {
	k := append(t.keyBuf[:0], 0, 0, 0, 0, 0, 0, 0, 0)
	putU64(k, id)
	k = append(k, suffix...)
	t.keyBuf = k
	return k
}

// slabBlock is the size of the blocks small values are carved from.
const slabBlock = 8 << 10

// value returns n zeroed bytes for a value to store. bbolt keeps a stored
// value's slice until the commit, so it must not be reused; small ones are
// carved from a shared block instead of allocated one by one.
func (t *Tx) value(n int) []byte {
	if n > slabBlock/16 {
		return make([]byte, n)
	}
	start := t.slabRoom(n)
	t.slab = t.slab[:start+n]
	return t.slabCut(start)
}

// encodedValue is value for an encoding whose length is known only once
// written: enc appends it to the block, which has room bytes free (an
// encoding longer than that only makes append move the block).
func (t *Tx) encodedValue(room int, enc func([]byte) []byte) []byte {
	start := t.slabRoom(room)
	t.slab = enc(t.slab)
	return t.slabCut(start)
}

// slabRoom starts a new block unless the slab has n bytes free, and returns
// where the next value starts.
func (t *Tx) slabRoom(n int) int {
	if len(t.slab)+n > cap(t.slab) {
		t.slab = make([]byte, 0, slabBlock)
	}
	return len(t.slab)
}

// slabCut is the slab from start to its end as one value, capped so that
// nothing carved later reaches into it.
func (t *Tx) slabCut(start int) []byte { return t.slab[start:len(t.slab):len(t.slab)] }

func (t *Tx) get(b int, key []byte) []byte {
	// What bbolt's Get answers: the value stored under exactly key, nil if
	// none (top-level buckets hold no nested buckets).
	if k, v := t.cursor(b).Seek(key); bytes.Equal(k, key) {
		return v
	}
	return nil
}

// cursor is the transaction's cursor over bucket b, for lookups by Seek.
func (t *Tx) cursor(b int) *bolt.Cursor {
	c := t.cursors[b]
	if c == nil {
		c = t.bucket(b).Cursor()
		t.cursors[b] = c
	}
	return c
}

func (t *Tx) put(b int, key, val []byte) error {
	if t.depth > 0 {
		t.record(b, key)
	}
	if b == bParts {
		t.notePartition(key, nil) // PutPartition and CreatePartition then note the record
	}
	if err := t.bucket(b).Put(key, val); err != nil {
		return fmt.Errorf("put %s: %w", bucketOrder[b], err)
	}
	return nil
}

func (t *Tx) del(b int, key []byte) error {
	if t.depth > 0 {
		t.record(b, key)
	}
	if b == bParts {
		t.notePartition(key, nil)
	}
	if err := t.bucket(b).Delete(key); err != nil {
		return fmt.Errorf("delete %s: %w", bucketOrder[b], err)
	}
	return nil
}

func (t *Tx) record(b int, key []byte) {
	// A cursor, not Get: bbolt's Get answers nil for an empty value written
	// earlier in the same transaction, which would turn "restore the empty
	// value" into "delete the key".
	k, old := t.cursor(b).Seek(key)
	r := undoRec{b: b, key: bytes.Clone(key), existed: bytes.Equal(k, key)}
	if r.existed {
		r.old = bytes.Clone(old)
	}
	t.undo = append(t.undo, r)
}

// Savepoint starts recording undo information; RollbackTo(sp) restores every
// key written since, Release(sp) keeps the writes. Savepoints nest.
func (t *Tx) Savepoint() int {
	// A rollback restores the values the bucket held, so it must hold
	// them. Savepoint has no error to return: a failed flush fails the
	// transaction at its end instead (update), so nothing built on the
	// stale values commits.
	if err := t.flushParts(); err != nil && t.failed == nil {
		t.failed = err
	}
	t.depth++
	if t.w != nil {
		t.w.marks = append(t.w.marks, blobMark{pending: len(t.w.pending), live: t.w.live})
	}
	return len(t.undo)
}

// RollbackTo undoes every write since the savepoint and ends it.
func (t *Tx) RollbackTo(sp int) error {
	for i := len(t.undo) - 1; i >= sp; i-- {
		r := t.undo[i]
		var err error
		if r.existed {
			err = t.bucket(r.b).Put(r.key, r.old)
		} else {
			err = t.bucket(r.b).Delete(r.key)
		}
		if err != nil {
			return fmt.Errorf("roll back %s: %w", bucketOrder[r.b], err)
		}
		if r.b == bParts {
			t.notePartition(r.key, nil)
		}
	}
	t.undo = t.undo[:sp]
	t.depth--
	if t.w != nil {
		// The blobs appended since are unreferenced now: drop them.
		top := len(t.w.marks) - 1
		t.w.pending = t.w.pending[:t.w.marks[top].pending]
		t.w.live = t.w.marks[top].live
		t.w.marks = t.w.marks[:top]
	}
	return nil
}

// Release ends the savepoint and keeps its writes.
func (t *Tx) Release(sp int) {
	if t.w != nil {
		t.w.marks = t.w.marks[:len(t.w.marks)-1]
	}
	t.depth--
	if t.depth == 0 {
		t.undo = t.undo[:0]
	}
}

// ---- meta ----

func (t *Tx) metaU64(k []byte) uint64 {
	if v := t.get(bMeta, k); len(v) == 8 {
		return u64(v)
	}
	return 0
}

func (t *Tx) putMetaU64(k []byte, v uint64) error { return t.put(bMeta, k, be64(v)) }

// Applied is the last Raft index whose effects this store holds.
func (t *Tx) Applied() uint64 { return t.metaU64(metaApplied) }

// SetApplied records the last applied Raft index in this transaction.
func (t *Tx) SetApplied(i uint64) error { return t.putMetaU64(metaApplied, i) }

// Now is the state machine's time high-water mark (unix µs).
func (t *Tx) Now() int64 { return int64(t.metaU64(metaNow)) }

// SetNow records the time high-water mark.
func (t *Tx) SetNow(now int64) error { return t.putMetaU64(metaNow, uint64(now)) }

// ReserveIDs reserves n consecutive sequence numbers and returns the first.
func (t *Tx) ReserveIDs(n uint64) (uint64, error) {
	first := t.metaU64(metaIDSeq) + 1
	return first, t.putMetaU64(metaIDSeq, first+n-1)
}

// Counters reads the cluster-wide lifetime counters (their meaning belongs to
// the caller; they are replicated state, so identical on every node).
func (t *Tx) Counters(n int) []uint64 {
	out := make([]uint64, n)
	v := t.get(bMeta, metaCounters)
	for i := 0; i < n && (i+1)*8 <= len(v); i++ {
		out[i] = u64(v[i*8:])
	}
	return out
}

// PutCounters stores the lifetime counters.
func (t *Tx) PutCounters(c []uint64) error {
	v := make([]byte, 8*len(c))
	for i, x := range c {
		putU64(v[i*8:], x)
	}
	return t.put(bMeta, metaCounters, v)
}

func (t *Tx) nextMeta(k []byte) (uint64, error) {
	v := t.metaU64(k) + 1
	return v, t.putMetaU64(k, v)
}

// ---- queues ----

// Queue loads a queue by name.
func (t *Tx) Queue(name string) (*Queue, error) {
	key := nameKey(name)
	v := t.get(bQueues, key)
	if v == nil {
		return nil, nil
	}
	return t.loadQueue(key, v)
}

// QueueByID loads a queue by its number.
func (t *Tx) QueueByID(qid uint64) (*Queue, error) {
	key := t.get(bQueueIDs, be64(qid))
	if key == nil {
		return nil, nil
	}
	return t.Queue(string(key[1:]))
}

// CreateQueue assigns q a number and stores it. q.UUID must be set.
func (t *Tx) CreateQueue(q *Queue) error {
	id, err := t.nextMeta(metaQueueSeq)
	if err != nil {
		return err
	}
	q.ID = id
	if err := t.put(bQueueIDs, be64(id), nameKey(q.Name)); err != nil {
		return err
	}
	return t.PutQueue(q)
}

// PutQueue stores a queue's record, and moves it in the tag index when its
// namespace or task changed.
func (t *Tx) PutQueue(q *Queue) error {
	key := nameKey(q.Name)
	if err := t.indexTags(q.Name, t.get(bQueues, key), q.Namespace, q.Task); err != nil {
		return err
	}
	return t.put(bQueues, key, marshalMsgpack(q))
}

// ForEachQueue calls fn for every queue in name order until fn returns false.
func (t *Tx) ForEachQueue(fn func(*Queue) (bool, error)) error {
	return forEachValue(t, bQueues, nil, nil, func(k, v []byte) (bool, error) {
		q, err := t.loadQueue(k, v)
		if err != nil {
			return false, err
		}
		return fn(q)
	})
}

// ForEachQueueName calls fn with the name of every queue whose name starts
// with prefix, in name order, until fn returns false, without decoding the
// records (a listing page decodes only the queues it shows).
func (t *Tx) ForEachQueueName(prefix string, fn func(name string) bool) {
	p := nameKey(prefix)
	c := t.bucket(bQueues).Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		if !fn(string(k[1:])) {
			return
		}
	}
}

// forEachRecord walks the msgpack records of bucket b in key order, from
// seek (the first key when nil) while keys start with prefix, decoding each
// into a new T, until fn returns false or an error. k is valid only during
// the call.
func forEachRecord[T any](t *Tx, b int, seek, prefix []byte, fn func(k []byte, r *T) (bool, error)) error {
	return forEachValue(t, b, seek, prefix, func(k, v []byte) (bool, error) {
		r := new(T)
		if err := unmarshalMsgpack(v, r); err != nil {
			return false, err
		}
		return fn(k, r)
	})
}

// forEachValue walks bucket b's keys and values in key order, from seek
// (the first key when nil) while keys start with prefix, until fn returns
// false or an error. k and v are valid only during the call.
func forEachValue(t *Tx, b int, seek, prefix []byte, fn func(k, v []byte) (bool, error)) error {
	c := t.bucket(b).Cursor()
	k, v := c.First()
	if seek != nil {
		k, v = c.Seek(seek)
	}
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if more, err := fn(k, v); err != nil || !more {
			return err
		}
	}
	return nil
}

// ---- partitions ----

// Partition loads a queue's partition by name.
func (t *Tx) Partition(qid uint64, name string) (*Partition, error) {
	return t.partitionAt(t.scratchKey8(qid, name))
}

func (t *Tx) partitionAt(key []byte) (*Partition, error) {
	p, ok, fill, err := t.partitionCached(key)
	if ok || err != nil {
		return p, err
	}
	v := t.get(bParts, key)
	if v == nil {
		return nil, nil
	}
	p = new(Partition)
	if err := p.unmarshal(key, v); err != nil {
		return nil, err
	}
	if fill {
		t.store.parts.add(string(key), p) // a copy: p is the caller's
	}
	return p, nil
}

// PartitionByID loads a partition by its number.
func (t *Tx) PartitionByID(pid uint64) (*Partition, error) {
	k := t.get(bPartIDs, be64(pid))
	if k == nil {
		return nil, nil
	}
	return t.partitionAt(k)
}

// PartitionByUUID loads a partition by its public id.
func (t *Tx) PartitionByUUID(id [16]byte) (*Partition, error) {
	pid := t.get(bPartUUIDs, id[:])
	if len(pid) != 8 {
		return nil, nil
	}
	return t.PartitionByID(u64(pid))
}

// CreatePartition assigns p a number, sets its offsets and stores it with its indexes.
func (t *Tx) CreatePartition(p *Partition) error {
	id, err := t.nextMeta(metaPartSeq)
	if err != nil {
		return err
	}
	p.ID, p.NextOffset, p.FirstOffset = id, 1, 1
	key := key8(p.QueueID, []byte(p.Name))
	if err := t.put(bPartIDs, be64(id), key); err != nil {
		return err
	}
	if err := t.put(bPartUUIDs, p.UUID[:], be64(id)); err != nil {
		return err
	}
	if err := t.put(bParts, key, p.marshal()); err != nil {
		return err
	}
	t.notePartition(key, p)
	return nil
}

// PutPartition stores an existing partition's record.
func (t *Tx) PutPartition(p *Partition) error {
	key := t.scratchKey8(p.QueueID, p.Name)
	if t.deferPart(key, p) {
		return nil
	}
	if err := t.put(bParts, key, p.marshal()); err != nil {
		return err
	}
	t.notePartition(key, p)
	return nil
}

// ForEachPartition calls fn for the queue's partitions in name order,
// starting at the first name >= from, until fn returns false.
func (t *Tx) ForEachPartition(qid uint64, from string, fn func(*Partition) (bool, error)) error {
	if err := t.flushParts(); err != nil {
		return err
	}
	prefix := be64(qid)
	c := t.bucket(bParts).Cursor()
	for k, v := c.Seek(key8(qid, []byte(from))); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		p := new(Partition)
		if err := p.unmarshal(k, v); err != nil {
			return err
		}
		if more, err := fn(p); err != nil || !more {
			return err
		}
	}
	return nil
}

// ---- segments and messages ----

// AppendSegment stores msgs as one segment at p's next offset, indexes their
// transaction ids at pushedAt, and advances p (the caller stores p). It
// returns the first offset. The blob goes to the blob file, its reference
// into p's record, which moves it to the segments bucket later (recent.go).
// idsNew says that the caller looked every message's id up in p's index in
// this transaction and found none, and that no two of msgs share an id;
// when false, p.IDsIndexedFrom moves past msgs (idmark.go).
func (t *Tx) AppendSegment(p *Partition, createdAt int64, baseSeq uint64, msgs []Message, idsNew bool) (uint64, error) {
	first := p.NextOffset
	ref, err := t.appendSegmentBlob(createdAt, baseSeq, msgs)
	if err != nil {
		return 0, err
	}
	if err := t.addSegmentRef(p, first, ref.encode()); err != nil {
		return 0, err
	}
	var bytesIn uint64
	for i := range msgs {
		if err := t.putTxID(p.QueueID, p.ID, msgs[i].TxID, first+uint64(i)); err != nil {
			return 0, err
		}
		bytesIn += uint64(len(msgs[i].Payload))
	}
	if p.Messages == 0 {
		p.FirstOffset = first
	}
	p.NextOffset += uint64(len(msgs))
	if !idsNew {
		p.IDsIndexedFrom = p.NextOffset
	}
	p.Messages += uint64(len(msgs))
	p.Bytes += bytesIn
	p.Segments++
	p.LastCreatedAt = createdAt
	return first, nil
}

// SegmentInfo describes one stored segment.
type SegmentInfo struct {
	First     uint64 // first offset
	Count     uint64
	CreatedAt int64
	Bytes     uint64 // size of the stored blob
}

// Scan walks the partition's messages from offset `from` onwards, in order,
// calling fn with each message and its segment's header. fn returns false
// to stop. Offsets deleted by retention are skipped silently.
//
// The message's Payload aliases its segment's blob, and a blob's bytes are
// never written again once appended: a read gets a buffer of its own, and
// a transaction's pending appends are a buffer no later transaction
// touches (a savepoint rollback drops only bytes appended after it). So a
// payload stays valid after the transaction ends, and a pop hands it to
// the HTTP layer without a copy; it must not be modified.
func (t *Tx) Scan(p *Partition, from uint64, fn func(*StoredMessage) (bool, error)) error {
	var sm StoredMessage
	return t.walkSegments(p, from, func(first uint64, ref blobRef) (bool, error) {
		blob, err := t.blobPrefix(ref, int(ref.Len))
		if err != nil {
			return false, fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
		}
		_, more, err := eachMessage(blob, first, from, math.MaxUint64, &sm, fn)
		if err != nil {
			return false, fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
		}
		return more, nil
	})
}

// eachMessage decodes the segment blob whose first offset is first and
// calls fn with each of its messages at offsets from to last (inclusive), in
// order, in sm. It returns how many it passed to fn and whether fn asked for
// more.
func eachMessage(blob []byte, first, from, last uint64, sm *StoredMessage, fn func(*StoredMessage) (bool, error)) (n uint64, more bool, err error) {
	var r SegmentReader
	if err := r.reset(blob); err != nil {
		return 0, false, err
	}
	for {
		idx, ok, err := r.Next(&sm.Message)
		if err != nil || !ok {
			return n, err == nil, err
		}
		off := first + uint64(idx)
		if off > last {
			return n, true, nil // messages are in offset order: the rest is past last too
		}
		if off < from {
			continue
		}
		sm.Offset = off
		sm.CreatedAt = r.Header.CreatedAt
		sm.ID = MessageID(r.Header.CreatedAt, r.Header.BaseSeq+uint64(idx))
		n++
		if more, err := fn(sm); err != nil || !more {
			return n, false, err
		}
	}
}

// ScanTxIDs walks the transaction ids of the partition's messages from
// offset `from` onwards, in order, until fn returns false: Scan for a caller
// that needs nothing else (an ack resolving the ids of a leased batch, on
// every node). txID aliases a buffer the transaction reuses for the next
// segment: it is valid only during the call.
func (t *Tx) ScanTxIDs(p *Partition, from uint64, fn func(off uint64, txID []byte) (bool, error)) error {
	var r SegmentReader
	return t.walkSegments(p, from, func(first uint64, ref blobRef) (bool, error) {
		blob, err := t.scratchBlob(ref)
		if err == nil {
			err = r.reset(blob)
		}
		if err != nil {
			return false, fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
		}
		for {
			idx, txID, ok, err := r.NextTxID()
			if err != nil {
				return false, fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
			}
			if !ok {
				return true, nil
			}
			if off := first + uint64(idx); off >= from {
				if more, err := fn(off, txID); err != nil || !more {
					return false, err
				}
			}
		}
	})
}

// ScanRanges walks the partition's stored offsets from `from` onwards as runs
// [first, end) of one commit time, oldest first, until fn returns false. It
// reads no blob: it is the walk for deciding what a pop can take, which
// needs offsets and times but not the messages.
func (t *Tx) ScanRanges(p *Partition, from uint64, fn func(first, end uint64, createdAt int64) (bool, error)) error {
	return t.walkSegments(p, from, func(first uint64, ref blobRef) (bool, error) {
		return fn(max(first, from), first+uint64(ref.Count), ref.CreatedAt)
	})
}

// ScanRangesSized is ScanRanges also giving each run's stored bytes a
// message: its segment's length divided among the segment's messages,
// rounded up (a pop bounded in bytes counts with it, still reading no blob).
func (t *Tx) ScanRangesSized(p *Partition, from uint64, fn func(first, end uint64, createdAt int64, msgBytes uint64) (bool, error)) error {
	return t.walkSegments(p, from, func(first uint64, ref blobRef) (bool, error) {
		per := uint64(ref.Len)
		if ref.Count > 1 {
			per = (per + uint64(ref.Count) - 1) / uint64(ref.Count)
		}
		return fn(max(first, from), first+uint64(ref.Count), ref.CreatedAt, per)
	})
}

// MessageAt reads one message, or nil when the offset is not stored.
func (t *Tx) MessageAt(p *Partition, off uint64) (*StoredMessage, error) {
	var out *StoredMessage
	err := t.Scan(p, off, func(sm *StoredMessage) (bool, error) {
		if sm.Offset == off {
			c := *sm
			c.TxID = sm.TxID
			c.Payload = bytes.Clone(sm.Payload)
			out = &c
		}
		return false, nil
	})
	return out, err
}

// Segments walks the partition's segment headers oldest first until fn
// returns false.
func (t *Tx) Segments(p *Partition, fn func(SegmentInfo) (bool, error)) error {
	return t.walkSegments(p, 0, func(first uint64, ref blobRef) (bool, error) {
		return fn(ref.info(first))
	})
}

// SegmentsReverse walks the partition's segment headers newest first.
func (t *Tx) SegmentsReverse(p *Partition, fn func(SegmentInfo) (bool, error)) error {
	return t.SegmentsReverseFrom(p, ^uint64(0), fn)
}

func (r blobRef) info(first uint64) SegmentInfo {
	return SegmentInfo{First: first, Count: uint64(r.Count), CreatedAt: r.CreatedAt, Bytes: uint64(r.Len)}
}

// DeleteSegment removes one whole segment and its transaction-id index
// entries (only those still pointing into it), updating p (the caller stores
// p). It returns the number of messages removed.
func (t *Tx) DeleteSegment(p *Partition, first uint64) (uint64, error) {
	v, err := t.segmentRef(p, first)
	if v == nil {
		return 0, err
	}
	ref, blob, err := t.segmentBlob(v)
	if err != nil {
		return 0, fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
	}
	r, err := NewSegmentReader(blob)
	if err != nil {
		return 0, fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
	}
	var (
		m       Message
		txs     []string
		payload uint64
	)
	for {
		_, ok, err := r.Next(&m)
		if err != nil {
			return 0, fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
		}
		if !ok {
			break
		}
		txs = append(txs, m.TxID)
		payload += uint64(len(m.Payload))
	}
	count := uint64(r.Header.Count)
	// A message's trace events go with it (traces.go).
	if err := t.deleteTraces(p.ID, first, first+count); err != nil {
		return 0, err
	}
	for _, tx := range txs {
		if err := t.delTxIDIfAt(p.QueueID, p.ID, tx, first, first+count); err != nil {
			return 0, err
		}
	}
	if err := t.deleteSegmentRef(p, first); err != nil {
		return 0, err
	}
	if err := t.freeBlob(ref); err != nil {
		return 0, err
	}
	p.Messages -= count
	p.Bytes -= payload
	p.Segments--
	if p.Messages == 0 {
		p.FirstOffset = p.NextOffset
	} else if first == p.FirstOffset {
		// The next segment's first offset is the new oldest.
		err := t.walkSegments(p, first, func(next uint64, _ blobRef) (bool, error) {
			p.FirstOffset = next
			return false, nil
		})
		if err != nil {
			return 0, err
		}
	}
	return count, nil
}

// ---- consumer groups ----

// Group loads a group's state on a partition, or nil when it has none.
func (t *Tx) Group(pid uint64, group string) (*Group, error) {
	v := t.get(bGroups, t.scratchKey8(pid, group))
	if v == nil {
		return nil, nil
	}
	g := new(Group)
	return g, g.unmarshal(v)
}

// PutGroup stores a group's state on a partition.
func (t *Tx) PutGroup(pid uint64, group string, g *Group) error {
	return t.put(bGroups, t.scratchKey8(pid, group), g.marshal())
}

// DeleteGroup removes a group's state on a partition.
func (t *Tx) DeleteGroup(pid uint64, group string) error {
	return t.del(bGroups, t.scratchKey8(pid, group))
}

// ForEachGroup calls fn for every group with state on the partition, in name order.
func (t *Tx) ForEachGroup(pid uint64, fn func(name string, g *Group) (bool, error)) error {
	prefix := be64(pid)
	c := t.bucket(bGroups).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		g := new(Group)
		if err := g.unmarshal(v); err != nil {
			return err
		}
		if more, err := fn(string(k[8:]), g); err != nil || !more {
			return err
		}
	}
	return nil
}

// QueueGroup loads what a group keeps per queue.
func (t *Tx) QueueGroup(qid uint64, group string) (*QueueGroup, error) {
	v := t.get(bQueueGroup, t.scratchKey8(qid, group))
	if v == nil {
		return nil, nil
	}
	qg := new(QueueGroup)
	return qg, qg.unmarshal(v)
}

// PutQueueGroup stores what a group keeps per queue.
func (t *Tx) PutQueueGroup(qid uint64, group string, qg *QueueGroup) error {
	return t.put(bQueueGroup, t.scratchKey8(qid, group), qg.marshal())
}

// ForEachQueueGroup calls fn for every group that has touched the queue.
func (t *Tx) ForEachQueueGroup(qid uint64, fn func(group string, qg *QueueGroup) (bool, error)) error {
	prefix := be64(qid)
	c := t.bucket(bQueueGroup).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		qg := new(QueueGroup)
		if err := qg.unmarshal(v); err != nil {
			return err
		}
		if more, err := fn(string(k[8:]), qg); err != nil || !more {
			return err
		}
	}
	return nil
}

// DeleteQueueGroup forgets a group's per-queue record.
func (t *Tx) DeleteQueueGroup(qid uint64, group string) error {
	return t.del(bQueueGroup, key8(qid, []byte(group)))
}

// ---- lease index ----

func leaseKey(lease [16]byte, pid uint64, group string) []byte {
	k := make([]byte, 0, 24+len(group))
	k = append(k, lease[:]...)
	k = binary.BigEndian.AppendUint64(k, pid)
	return append(k, group...)
}

// IndexLease records that (pid, group) holds lease.
func (t *Tx) IndexLease(lease [16]byte, pid uint64, group string) error {
	return t.put(bLeases, leaseKey(lease, pid, group), []byte{1})
}

// SupersedeLease keeps lease indexed after (pid, group) was leased again
// once it had expired at expiry (unix µs): an extension of it still finds
// it, expired rather than unknown, until a sweep drops it.
func (t *Tx) SupersedeLease(lease [16]byte, pid uint64, group string, expiry int64) error {
	return t.put(bLeases, leaseKey(lease, pid, group), be64(uint64(expiry)))
}

// UnindexLease forgets that (pid, group) holds lease.
func (t *Tx) UnindexLease(lease [16]byte, pid uint64, group string) error {
	return t.del(bLeases, leaseKey(lease, pid, group))
}

// LeaseHolders lists the (partition, group) pairs indexed under lease.
func (t *Tx) LeaseHolders(lease [16]byte) (pids []uint64, groups []string) {
	c := t.bucket(bLeases).Cursor()
	for k, _ := c.Seek(lease[:]); k != nil && bytes.HasPrefix(k, lease[:]); k, _ = c.Next() {
		pids = append(pids, u64(k[16:]))
		groups = append(groups, string(k[24:]))
	}
	return pids, groups
}

// ForEachLease walks the lease index in lease-id order (oldest lease first:
// ids are time-ordered). superseded is the expiry of a lease kept by
// SupersedeLease, 0 for one its holder still has.
func (t *Tx) ForEachLease(fn func(lease [16]byte, pid uint64, group string, superseded int64) (bool, error)) error {
	return t.ForEachLeaseFrom([16]byte{}, fn)
}

// ForEachLeaseFrom is ForEachLease from the first entry of lease id from
// (or the first after it) on.
func (t *Tx) ForEachLeaseFrom(from [16]byte, fn func(lease [16]byte, pid uint64, group string, superseded int64) (bool, error)) error {
	c := t.bucket(bLeases).Cursor()
	for k, v := c.Seek(from[:]); k != nil; k, v = c.Next() {
		if len(k) < 24 {
			return fmt.Errorf("lease index key of %d bytes: %w", len(k), ErrCorrupt)
		}
		var id [16]byte
		copy(id[:], k)
		var superseded int64
		if len(v) == 8 {
			superseded = int64(u64(v))
		}
		if more, err := fn(id, u64(k[16:]), string(k[24:]), superseded); err != nil || !more {
			return err
		}
	}
	return nil
}

// ---- dead letters ----

// AddDeadLetter numbers and stores a dead-letter entry.
func (t *Tx) AddDeadLetter(d *DeadLetter) error {
	seq, err := t.nextMeta(metaDLQSeq)
	if err != nil {
		return err
	}
	d.Seq = seq
	return t.put(bDLQ, key88(d.QueueID, seq), marshalMsgpack(d))
}

// ForEachDeadLetter walks a queue's dead letters newest first.
func (t *Tx) ForEachDeadLetter(qid uint64, fn func(*DeadLetter) (bool, error)) error {
	return forEachDeadLetterNewest(t, qid, fn)
}

// forEachDeadLetterNewest walks a queue's dead-letter rows newest first (by
// sequence, so by failure time: both grow together), decoding each into a
// new T: the whole entry, or a summary whose missing fields (the payload)
// are skipped rather than copied.
func forEachDeadLetterNewest[T any](t *Tx, qid uint64, fn func(*T) (bool, error)) error {
	prefix := be64(qid)
	c := t.bucket(bDLQ).Cursor()
	k, v := c.Seek(key88(qid, ^uint64(0)))
	if k == nil || !bytes.HasPrefix(k, prefix) {
		k, v = c.Prev()
	}
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Prev() {
		d := new(T)
		if err := unmarshalMsgpack(v, d); err != nil {
			return fmt.Errorf("dead letter %d of queue %d: %w", u64(k[8:]), qid, err)
		}
		if more, err := fn(d); err != nil || !more {
			return err
		}
	}
	return nil
}

// ---- subscriptions ----

// SubKey builds the key of a subscription record.
func SubKey(group string, kind byte, a, b string) []byte {
	k := appendName(nil, group)
	k = append(k, kind)
	k = appendName(k, a)
	if kind != SubQueue {
		k = appendName(k, b)
	}
	return k
}

// Subscription loads a subscription record.
func (t *Tx) Subscription(key []byte) (*Subscription, error) {
	v := t.get(bSubs, key)
	if v == nil {
		return nil, nil
	}
	s := new(Subscription)
	return s, unmarshalMsgpack(v, s)
}

// PutSubscription stores a subscription record.
func (t *Tx) PutSubscription(key []byte, s *Subscription) error {
	return t.put(bSubs, key, marshalMsgpack(s))
}

// ForEachSubscription walks every subscription record of a group.
func (t *Tx) ForEachSubscription(group string, fn func(key []byte, s *Subscription) (bool, error)) error {
	prefix := appendName(nil, group)
	return forEachRecord(t, bSubs, prefix, prefix, func(k []byte, s *Subscription) (bool, error) {
		return fn(bytes.Clone(k), s)
	})
}

// DeleteSubscription removes a subscription record.
func (t *Tx) DeleteSubscription(key []byte) error { return t.del(bSubs, key) }

// ---- nodes and settings ----

// PutNode registers a cluster member's addresses.
func (t *Tx) PutNode(n *Node) error { return t.put(bNodes, nameKey(n.ID), marshalMsgpack(n)) }

// DeleteNode forgets a cluster member.
func (t *Tx) DeleteNode(id string) error { return t.del(bNodes, nameKey(id)) }

// Nodes lists the registered members in id order.
func (t *Tx) Nodes() ([]Node, error) {
	var out []Node
	c := t.bucket(bNodes).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var n Node
		if err := unmarshalMsgpack(v, &n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// Setting reads a cluster-wide setting.
func (t *Tx) Setting(name string) []byte { return bytes.Clone(t.get(bSettings, []byte(name))) }

// PutSetting writes a cluster-wide setting.
func (t *Tx) PutSetting(name string, v []byte) error { return t.put(bSettings, []byte(name), v) }

// DeleteSetting removes a cluster-wide setting.
func (t *Tx) DeleteSetting(name string) error { return t.del(bSettings, []byte(name)) }

// ---- bulk deletion ----

// DeletePrefix removes every key with the prefix from a bucket (by index).
func (t *Tx) deletePrefix(b int, prefix []byte) error {
	c := t.bucket(b).Cursor()
	var keys [][]byte
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := t.del(b, k); err != nil {
			return err
		}
	}
	return nil
}

// deletePartitionData removes a partition, its segments, group states and
// lease index entries. Its transaction ids are keyed by queue, not
// partition, so DeleteQueue removes them with the queue's.
func (t *Tx) deletePartitionData(p *Partition) error {
	err := t.ForEachGroup(p.ID, func(name string, g *Group) (bool, error) {
		if g.HasLease() {
			return true, t.UnindexLease(g.LeaseID, p.ID, name)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if err := t.deleteTraces(p.ID, 0, ^uint64(0)); err != nil {
		return err
	}
	prefix := be64(p.ID)
	err = t.walkSegments(p, 0, func(_ uint64, ref blobRef) (bool, error) {
		return true, t.freeBlob(ref)
	})
	if err != nil {
		return err
	}
	for _, b := range []int{bSegments, bGroups} {
		if err := t.deletePrefix(b, prefix); err != nil {
			return err
		}
	}
	if err := t.del(bPartUUIDs, p.UUID[:]); err != nil {
		return err
	}
	if err := t.del(bPartIDs, prefix); err != nil {
		return err
	}
	return t.del(bParts, key8(p.QueueID, []byte(p.Name)))
}

// DeleteQueue removes a queue with all its partitions, consumer state, dead
// letters and the memory of its deleted transaction ids. Subscription
// records are kept (they are keyed by name).
func (t *Tx) DeleteQueue(q *Queue) error {
	var parts []*Partition
	if err := t.ForEachPartition(q.ID, "", func(p *Partition) (bool, error) {
		parts = append(parts, p)
		return true, nil
	}); err != nil {
		return err
	}
	for _, p := range parts {
		if err := t.deletePartitionData(p); err != nil {
			return err
		}
	}
	for _, b := range []int{bDLQ, bQueueGroup, bTxIDs} {
		if err := t.deletePrefix(b, be64(q.ID)); err != nil {
			return err
		}
	}
	if err := t.forgetQueueTxIDs(q.ID); err != nil {
		return err
	}
	if err := t.deleteStreamStateOf(q.Name); err != nil {
		return err
	}
	if err := t.del(bQueueIDs, be64(q.ID)); err != nil {
		return err
	}
	// The index entries are those of the stored tags, which a caller's
	// copy of the record may no longer hold.
	key := nameKey(q.Name)
	if v := t.get(bQueues, key); v != nil {
		tg, err := decodeTags(v)
		if err != nil {
			return fmt.Errorf("queue %q: %w", q.Name, err)
		}
		if err := t.unindexTags(q.Name, tg); err != nil {
			return err
		}
	}
	return t.del(bQueues, key)
}
