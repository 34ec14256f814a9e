package segments

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Segment blobs live in append-only files beside the bbolt file, and the
// segments bucket holds only a fixed-size reference to each (blobRef). A
// B+tree leaf then carries 33 bytes per segment instead of the messages: bbolt
// rewrites and re-reads a modified leaf whole, which with payloads inside
// made each node write about three bytes of state file per payload byte and
// keep the whole file mapped (docs/performance.md, lesson 10). Payload bytes
// are now written once, read with pread, and never mapped.
//
// The files are physical layout, like bbolt's pages: which file and offset a
// blob landed in depends on the node's history (a node restored from a
// snapshot has different files), so the digest hashes the blob bytes a
// reference resolves to, never the reference, and the accounting bucket
// `files` is left out of it. Nothing in Apply may depend on a reference.
//
// Crash safety rests on one rule: the blobs of a transaction are written to
// the file before the bbolt transaction that references them commits, and
// the file length bbolt records is the length after them. Bytes past the
// recorded length (a transaction that crashed or rolled back after writing)
// are overwritten by the next write and cut off when the store opens.

// blobRef is the value of a segments-bucket key.
//
//	u8  version (refVersion)
//	u64 file number
//	u64 offset in the file
//	u32 blob length
//	i64 createdAt (copied from the blob header: header walks read no file)
//	u32 message count (likewise)
type blobRef struct {
	File      uint64
	Pos       int64
	Len       uint32
	CreatedAt int64
	Count     uint32
}

const (
	refVersion = 2
	refSize    = 1 + 8 + 8 + 4 + 8 + 4
)

func (r blobRef) encode() []byte { return r.appendTo(make([]byte, 0, refSize)) }

func (r blobRef) appendTo(b []byte) []byte {
	b = append(b, refVersion)
	b = binary.BigEndian.AppendUint64(b, r.File)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Pos))
	b = binary.BigEndian.AppendUint32(b, r.Len)
	b = binary.BigEndian.AppendUint64(b, uint64(r.CreatedAt))
	return binary.BigEndian.AppendUint32(b, r.Count)
}

func decodeRef(b []byte) (blobRef, error) {
	if len(b) != refSize || b[0] != refVersion {
		return blobRef{}, fmt.Errorf("segment reference of %d bytes: %w", len(b), ErrCorrupt)
	}
	r := refFields(b)
	if r.Pos < 0 {
		return blobRef{}, fmt.Errorf("segment reference offset %d: %w", r.Pos, ErrCorrupt)
	}
	return r, nil
}

// refFields reads the fields of an encoded reference without checking it:
// for references checked when they were read (decodeRef, checkRecent).
func refFields(b []byte) blobRef {
	return blobRef{
		File:      binary.BigEndian.Uint64(b[1:]),
		Pos:       int64(binary.BigEndian.Uint64(b[9:])),
		Len:       binary.BigEndian.Uint32(b[17:]),
		CreatedAt: int64(binary.BigEndian.Uint64(b[21:])),
		Count:     binary.BigEndian.Uint32(b[29:]),
	}
}

// Keys of the files bucket (physical layout, outside the digest).
var (
	filesGen    = []byte("g") // generation of the blob directory this file uses
	filesActive = []byte("a") // number of the file appends go to
)

// fileKey is 'f' + number; its value is fileRec.
func fileKey(no uint64) []byte { return append([]byte{'f'}, be64(no)...) }

// fileRec accounts for one blob file: its committed length and how many of
// those bytes live segments still reference. A file whose live count drops
// to zero (and that no longer takes appends) is removed.
type fileRec struct{ Len, Live uint64 }

func (r fileRec) encode() []byte {
	b := make([]byte, 16)
	putU64(b, r.Len)
	putU64(b[8:], r.Live)
	return b
}

func decodeFileRec(b []byte) (fileRec, error) {
	if len(b) != 16 {
		return fileRec{}, fmt.Errorf("blob file record of %d bytes: %w", len(b), ErrCorrupt)
	}
	return fileRec{Len: u64(b), Live: u64(b[8:])}, nil
}

// DefaultBlobFileSize is where appends move to a new file. Space is
// reclaimed a whole file at a time, once nothing in it is referenced.
const DefaultBlobFileSize = 64 << 20

// blobDir names the directory of generation gen beside the database file.
// A restore writes its blobs into a new generation and the database it
// swaps in names it, so the swap stays one rename.
func blobDir(dbPath string, gen uint64) string {
	return fmt.Sprintf("%s.blobs-%d", dbPath, gen)
}

// blobDirs lists the generations present beside dbPath.
func blobDirs(dbPath string) ([]uint64, error) {
	entries, err := os.ReadDir(filepath.Dir(dbPath))
	if err != nil {
		return nil, fmt.Errorf("list blob directories: %w", err)
	}
	prefix := filepath.Base(dbPath) + ".blobs-"
	var gens []uint64
	for _, e := range entries {
		if g, ok := strings.CutPrefix(e.Name(), prefix); ok && e.IsDir() {
			if n, err := strconv.ParseUint(g, 10, 64); err == nil {
				gens = append(gens, n)
			}
		}
	}
	slices.Sort(gens)
	return gens, nil
}

func blobFileName(no uint64) string { return fmt.Sprintf("%016x.seg", no) }

// blobSet is the open blob files of a store.
//
// Lock order: gc before mu. Read transactions hold gc.RLock for their whole
// life (taken before bbolt's read transaction begins), so a file they may
// reference is never unlinked under them: the writer unlinks dead files only
// while it holds gc exclusively, which it only tries for (TryLock) after a
// commit and retries after later commits. mu guards the handle map.
type blobSet struct {
	dir      string
	gen      uint64
	sync     bool
	fileSize int64
	log      *slog.Logger

	gc sync.RWMutex

	// reads counts preads of blob bytes: how a change to the read paths is
	// seen in tests and benchmarks.
	reads atomic.Uint64

	mu    sync.RWMutex
	files map[uint64]*os.File

	// Touched only by the writer (bbolt runs one write transaction at a time).
	active    uint64
	activeLen int64
	dead      []uint64
	// pendingHint sizes the next appending transaction's buffer: the most
	// the recent ones appended, a maximum that loses a sixteenth with every
	// transaction that appends less. (The last one's size alone was often
	// short: group commits vary by half from one to the next, and a buffer
	// outgrown is copied into one twice its size; a follower allocated 2.4
	// bytes a byte appended.) That buffer is fresh each time and never
	// pooled: payloads scanned in a transaction alias it and are used after
	// the commit (Tx.Scan).
	pendingHint int
}

// blobMark is what a savepoint rollback restores of a blobTx.
type blobMark struct {
	pending int
	live    uint64
}

// blobTx is a write transaction's view of the active file: what it appended
// is held in pending until the commit writes it at base.
type blobTx struct {
	active  uint64
	base    int64
	pending []byte
	// hint sizes pending when the first segment is appended (pending stays
	// nil in a transaction that appends nothing, such as a pop or an ack).
	hint int
	// live is the active file's live bytes with this transaction's appends
	// and frees in it: kept here and written once by flush, not read and
	// rewritten for every segment (over 10,000 partitions nearly every
	// message is a segment of its own).
	live uint64
	// liveAtBegin is live as begin found it: only begin and flush write
	// the active file's record, so flush knows without reading it again
	// whether there is anything to write.
	liveAtBegin uint64
	marks       []blobMark // state at each open savepoint
	freed       []uint64   // files whose record this transaction removed (maybe rolled back)
	created     *os.File   // the file a rollover opened, registered on commit
}

func (s *blobSet) handle(no uint64) (*os.File, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.files == nil {
		// A snapshot that outlived its store (fsm's Restore closes the
		// replaced store without waiting for it).
		return nil, ErrClosed
	}
	if f := s.files[no]; f != nil {
		return f, nil
	}
	return nil, fmt.Errorf("blob file %d is not open: %w", no, ErrCorrupt)
}

// openFiles lists the open blob files. One may be closed as soon as this
// returns (a dead file being removed); callers only use it through calls
// that fail cleanly on a closed file.
func (s *blobSet) openFiles() []*os.File {
	s.mu.RLock()
	defer s.mu.RUnlock()
	fs := make([]*os.File, 0, len(s.files))
	for _, f := range s.files {
		fs = append(fs, f)
	}
	return fs
}

// read returns the blob ref points to, in a fresh buffer.
func (s *blobSet) read(ref blobRef) ([]byte, error) {
	return s.readPrefix(ref, int(ref.Len))
}

// readPrefix returns the first n bytes (at most the whole) of the blob ref
// points to, in a fresh buffer.
func (s *blobSet) readPrefix(ref blobRef, n int) ([]byte, error) {
	buf := make([]byte, min(n, int(ref.Len))) // never pooled: see Tx.Scan
	if err := s.readInto(ref, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// readInto fills buf with the first len(buf) bytes of the blob ref points to.
func (s *blobSet) readInto(ref blobRef, buf []byte) error {
	f, err := s.handle(ref.File)
	if err != nil {
		return err
	}
	s.reads.Add(1)
	if _, err := f.ReadAt(buf, ref.Pos); err != nil {
		if errors.Is(err, io.EOF) {
			err = ErrCorrupt
		}
		return fmt.Errorf("read blob file %d at %d+%d: %w", ref.File, ref.Pos, ref.Len, err)
	}
	return nil
}

// collect unlinks the files found dead by earlier commits, if no read
// transaction is open; otherwise it leaves them for a later commit (or, at
// close, for the next open, which removes files no record names). It never
// waits: a long snapshot stream must not stall the apply loop or shutdown.
// A failed unlink is logged and retried: the commit that freed the file
// stands, and the file is only wasted space until it goes.
func (s *blobSet) collect() {
	if len(s.dead) == 0 || !s.gc.TryLock() {
		return
	}
	defer s.gc.Unlock()
	var retry []uint64
	for _, no := range s.dead {
		s.mu.Lock()
		f := s.files[no]
		delete(s.files, no)
		s.mu.Unlock()
		if f != nil {
			f.Close()
		}
		if err := os.Remove(filepath.Join(s.dir, blobFileName(no))); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("cannot remove an unreferenced blob file yet; retrying after later commits", "file", no, "error", err)
			retry = append(retry, no)
		}
	}
	s.dead = append(s.dead[:0], retry...)
}

func (s *blobSet) close() error {
	s.collect()
	var err error
	s.mu.Lock()
	defer s.mu.Unlock()
	// Written without fsync while open: a clean close must leave them on
	// disk, since after one the state is trusted across a machine crash.
	for no, f := range s.files {
		if serr := f.Sync(); serr != nil && err == nil {
			err = fmt.Errorf("sync blob file %d: %w", no, serr)
		}
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close blob file %d: %w", no, cerr)
		}
	}
	s.files = nil
	// And their names: files created or removed by rollovers while open were
	// not made durable in the directory either.
	if derr := SyncDir(s.dir); derr != nil && err == nil {
		err = fmt.Errorf("sync blob directory: %w", derr)
	}
	return err
}

// begin starts a write transaction's blob state. When the active file is
// full, or holds at least seal bytes (seal > 0, Store.SealActive), it moves
// appends to a new one; the file is created now but only registered if the
// transaction commits.
func (s *blobSet) begin(t *Tx, seal int64) error {
	t.w = &blobTx{active: s.active, base: s.activeLen, hint: s.pendingHint}
	old, err := t.fileRec(s.active)
	if err != nil {
		return err
	}
	if s.activeLen < s.fileSize && (seal <= 0 || s.activeLen < seal) {
		t.w.live, t.w.liveAtBegin = old.Live, old.Live
		return nil
	}
	if old.Live == 0 {
		if err := t.dropFile(s.active); err != nil {
			return err
		}
	}
	no := s.active + 1
	// A new file under a fresh name: whatever held the name (a file an
	// aborted rollover failed to remove) goes first, since truncating
	// through a name could reach a file a snapshot links (linked.go).
	path := filepath.Join(s.dir, blobFileName(no))
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale blob file %d: %w", no, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create blob file %d: %w", no, err)
	}
	if s.sync {
		if err := SyncDir(s.dir); err != nil {
			f.Close()
			return err
		}
	}
	t.w.created, t.w.active, t.w.base = f, no, 0
	if err := t.put(bFiles, fileKey(no), fileRec{}.encode()); err != nil {
		return err
	}
	return t.put(bFiles, filesActive, be64(no))
}

// flush writes the transaction's blobs at the committed end of the active
// file and records the new length, before bbolt commits. It returns the
// files this transaction left unreferenced (their records are gone).
func (s *blobSet) flush(t *Tx) (dead []uint64, err error) {
	w := t.w
	if len(w.pending) > 0 {
		f := w.created
		if f == nil {
			if f, err = s.handle(w.active); err != nil {
				return nil, fmt.Errorf("active blob file: %w", err)
			}
		}
		if _, err := f.WriteAt(w.pending, w.base); err != nil {
			return nil, fmt.Errorf("write blob file %d: %w", w.active, err)
		}
		if s.sync {
			if err := f.Sync(); err != nil {
				return nil, fmt.Errorf("sync blob file %d: %w", w.active, err)
			}
		}
	}
	if len(w.pending) > 0 || w.live != w.liveAtBegin {
		r := fileRec{Len: uint64(w.base) + uint64(len(w.pending)), Live: w.live}
		if err := t.put(bFiles, fileKey(w.active), r.encode()); err != nil {
			return nil, err
		}
	}
	// A savepoint rollback may have restored a record dropped earlier.
	for _, no := range w.freed {
		if t.get(bFiles, fileKey(no)) == nil && !slices.Contains(dead, no) {
			dead = append(dead, no)
		}
	}
	return dead, nil
}

// commit adopts a committed transaction's blob state and removes the files
// it left unreferenced once no reader can still see them.
func (s *blobSet) commit(w *blobTx, dead []uint64) {
	if w.created != nil {
		s.mu.Lock()
		s.files[w.active] = w.created
		s.mu.Unlock()
	}
	s.active, s.activeLen = w.active, w.base+int64(len(w.pending))
	if len(w.pending) > 0 {
		s.pendingHint = max(len(w.pending), s.pendingHint-s.pendingHint/16)
	}
	s.dead = append(s.dead, dead...)
	s.collect()
}

// abort forgets a transaction that did not commit. Bytes it may have written
// lie past the committed length and are overwritten by the next flush.
func (s *blobSet) abort(w *blobTx) {
	if w != nil && w.created != nil {
		w.created.Close()
		os.Remove(w.created.Name())
	}
}

// ---- the transaction's side ----

func (t *Tx) fileRec(no uint64) (fileRec, error) {
	v := t.get(bFiles, fileKey(no))
	if v == nil {
		return fileRec{}, fmt.Errorf("blob file %d has no record: %w", no, ErrCorrupt)
	}
	return decodeFileRec(v)
}

// dropFile removes a file's record; the file goes after the commit.
func (t *Tx) dropFile(no uint64) error {
	t.w.freed = append(t.w.freed, no)
	return t.del(bFiles, fileKey(no))
}

// appendSegmentBlob encodes a segment at the end of the transaction's
// pending appends and accounts for it as live.
func (t *Tx) appendSegmentBlob(createdAt int64, baseSeq uint64, msgs []Message) (blobRef, error) {
	w := t.w
	size := segmentSize(msgs)
	if w.pending == nil {
		// A quarter over the recent transactions' most (blobSet.pendingHint):
		// a buffer grown by one byte past its size is copied whole.
		w.pending = make([]byte, 0, max(w.hint+w.hint/4, size))
	}
	start := len(w.pending)
	w.pending = EncodeSegment(slices.Grow(w.pending, size), createdAt, baseSeq, msgs)
	ref := blobRef{File: w.active, Pos: w.base + int64(start), Len: uint32(len(w.pending) - start),
		CreatedAt: createdAt, Count: uint32(len(msgs))}
	w.live += uint64(ref.Len)
	return ref, nil
}

// freeBlob accounts for a segment blob that is no longer referenced. A file
// left with nothing live is dropped unless appends still go to it.
func (t *Tx) freeBlob(ref blobRef) error {
	if ref.File == t.w.active {
		if t.w.live < uint64(ref.Len) {
			return fmt.Errorf("blob file %d: freeing %d of %d live bytes: %w", ref.File, ref.Len, t.w.live, ErrCorrupt)
		}
		t.w.live -= uint64(ref.Len)
		return nil
	}
	r, err := t.fileRec(ref.File)
	if err != nil {
		return err
	}
	if r.Live < uint64(ref.Len) {
		return fmt.Errorf("blob file %d: freeing %d of %d live bytes: %w", ref.File, ref.Len, r.Live, ErrCorrupt)
	}
	r.Live -= uint64(ref.Len)
	if r.Live == 0 && ref.File != t.w.active {
		return t.dropFile(ref.File)
	}
	return t.put(bFiles, fileKey(ref.File), r.encode())
}

// segmentBlob resolves a segments-bucket value to its reference and blob.
// The blob aliases this transaction's pending appends or a fresh buffer.
func (t *Tx) segmentBlob(v []byte) (blobRef, []byte, error) {
	ref, err := decodeRef(v)
	if err != nil {
		return blobRef{}, nil, err
	}
	blob, err := t.blobPrefix(ref, int(ref.Len))
	return ref, blob, err
}

// scratchBlob is the blob ref points to: the transaction's pending appends
// or, read from its file, the transaction's scratch buffer, which the next
// call overwrites.
func (t *Tx) scratchBlob(ref blobRef) ([]byte, error) {
	if b, ok, err := t.pendingBlob(ref, int(ref.Len)); ok {
		return b, err
	}
	if cap(t.scratch) < int(ref.Len) {
		t.scratch = make([]byte, ref.Len)
	}
	t.scratch = t.scratch[:ref.Len]
	if err := t.store.blobs.readInto(ref, t.scratch); err != nil {
		return nil, err
	}
	return t.scratch, nil
}

// segmentHeader reads only the fixed header of the segment ref points to.
func (t *Tx) segmentHeader(ref blobRef) (SegmentHeader, error) {
	b, err := t.blobPrefix(ref, segmentHeader)
	if err != nil {
		return SegmentHeader{}, err
	}
	return DecodeSegmentHeader(b)
}

// blobPrefix is the first n bytes (at most all) of the blob ref points to:
// from this transaction's pending appends, or read from its file.
func (t *Tx) blobPrefix(ref blobRef, n int) ([]byte, error) {
	if b, ok, err := t.pendingBlob(ref, n); ok {
		return b, err
	}
	return t.store.blobs.readPrefix(ref, n)
}

// pendingBlob is the first n bytes (at most all) of the blob ref points to
// when this transaction appended it (ok), aliasing the pending appends.
func (t *Tx) pendingBlob(ref blobRef, n int) (b []byte, ok bool, err error) {
	w := t.w
	if w == nil || ref.File != w.active || ref.Pos < w.base {
		return nil, false, nil
	}
	off := ref.Pos - w.base
	if off+int64(ref.Len) > int64(len(w.pending)) {
		return nil, true, fmt.Errorf("segment reference past the pending appends: %w", ErrCorrupt)
	}
	end := off + int64(min(n, int(ref.Len)))
	return w.pending[off:end:end], true, nil
}

// SyncDir fsyncs a directory, making the names created or renamed in it
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s for sync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
