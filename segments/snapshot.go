package segments

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A snapshot stream is the database file followed by the blob files it
// references, each cut at its committed length:
//
//	"CROWNSS2"
//	u64 database size, database bytes (bbolt's consistent copy)
//	u32 file count, then per file: u64 number, u64 length, bytes
//	"CROWNEND"
//	u32 CRC-32C of every byte before it
//
// The checksum is checked before bbolt opens the received file: bbolt trusts
// its pages and can panic on a damaged one.
// Files are copied whole, dead space included, so the references inside the
// database stay valid as they are; space is reclaimed by the receiving node
// as segments go, exactly as on the sender.
var (
	snapMagic = []byte("CROWNSS2")
	snapEnd   = []byte("CROWNEND")
)

// maxSnapshotFiles bounds the file count a stream may announce, so a corrupt
// count cannot make the receiver loop for ever.
const maxSnapshotFiles = 1 << 24

// ReadSnapshot is a consistent read-only view that outlives a callback, for
// streaming a snapshot while writes continue. Close it when done.
type ReadSnapshot struct {
	tx     *bolt.Tx
	blobs  *blobSet
	files  []uint64
	sizes  []uint64
	active uint64 // the file appends went to when the view was taken
	closed bool
}

// BeginSnapshot opens a read transaction for a snapshot. Until Close, no blob
// file it references is removed.
func (s *Store) BeginSnapshot() (*ReadSnapshot, error) {
	s.settle()
	s.blobs.gc.RLock()
	tx, err := s.db.Begin(false)
	if err != nil {
		s.blobs.gc.RUnlock()
		return nil, fmt.Errorf("begin snapshot read: %w", err)
	}
	rs := &ReadSnapshot{tx: tx, blobs: s.blobs}
	if v := tx.Bucket(bucketFiles).Get(filesActive); len(v) == 8 {
		rs.active = u64(v)
	}
	c := tx.Bucket(bucketFiles).Cursor()
	for k, v := c.Seek([]byte{'f'}); k != nil && k[0] == 'f'; k, v = c.Next() {
		r, err := decodeFileRec(v)
		if err != nil || len(k) != 9 {
			rs.Close()
			return nil, fmt.Errorf("snapshot blob file record %x: %w", k, ErrCorrupt)
		}
		rs.files = append(rs.files, u64(k[1:]))
		rs.sizes = append(rs.sizes, r.Len)
	}
	return rs, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// WriteTo streams the snapshot.
func (r *ReadSnapshot) WriteTo(w io.Writer) (int64, error) {
	sum := crc32.New(castagnoli)
	cw := &countingWriter{w: io.MultiWriter(w, sum)}
	var hdr [8]byte
	cw.Write(snapMagic)
	if err := r.writeDatabase(cw); err != nil {
		return cw.n, err
	}
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(r.files)))
	cw.Write(hdr[:4])
	for i, no := range r.files {
		f, err := r.blobs.handle(no)
		if err != nil {
			return cw.n, err
		}
		binary.BigEndian.PutUint64(hdr[:], no)
		cw.Write(hdr[:])
		binary.BigEndian.PutUint64(hdr[:], r.sizes[i])
		cw.Write(hdr[:])
		if cw.err != nil {
			return cw.n, cw.err
		}
		// A section reader ends quietly at the end of the file: a file
		// short of its committed length would leave the stream short.
		if got, err := io.Copy(cw, io.NewSectionReader(f, 0, int64(r.sizes[i]))); err != nil || got != int64(r.sizes[i]) {
			if err == nil {
				err = ErrCorrupt
			}
			return cw.n, fmt.Errorf("stream blob file %d: %d of %d committed bytes: %w", no, got, r.sizes[i], err)
		}
	}
	return writeTrailer(w, cw, sum)
}

// writeDatabase writes the database's size and its consistent copy.
func (r *ReadSnapshot) writeDatabase(cw *countingWriter) error {
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(r.tx.Size()))
	cw.Write(hdr[:])
	if cw.err != nil {
		return cw.err
	}
	n, err := r.tx.WriteTo(cw)
	if err != nil {
		return fmt.Errorf("stream database: %w", err)
	}
	if n != r.tx.Size() {
		return fmt.Errorf("stream database: wrote %d of %d bytes", n, r.tx.Size())
	}
	return nil
}

// writeTrailer ends a stream: the end marker through cw, then the checksum
// of everything before it straight to w.
func writeTrailer(w io.Writer, cw *countingWriter, sum hash.Hash32) (int64, error) {
	cw.Write(snapEnd)
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], sum.Sum32())
	if cw.err == nil {
		n, err := w.Write(b[:])
		cw.n += int64(n)
		cw.err = err
	}
	return cw.n, cw.err
}

// Close ends the read transaction.
func (r *ReadSnapshot) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.tx.Rollback()
	r.blobs.gc.RUnlock()
	return err
}

type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}

// ReceiveSnapshot writes a snapshot stream beside the store at dbPath without
// touching it: the database to the returned path (dbPath + ".restore") and
// the blob files to a new generation directory that the returned database
// names. Everything is fsynced and checked before it returns. Renaming the
// returned file over dbPath (while the store is closed) swaps the whole state
// in at once; until then, opening dbPath removes the new directory again.
func ReceiveSnapshot(r io.Reader, dbPath string) (string, error) {
	return receiveSnapshot(r, dbPath, true)
}

// receiveSnapshot is ReceiveSnapshot, with fsync only when durable.
func receiveSnapshot(r io.Reader, dbPath string, durable bool) (string, error) {
	tmp := dbPath + ".restore"
	gens, err := blobDirs(dbPath)
	if err != nil {
		return "", err
	}
	gen := uint64(1)
	if len(gens) > 0 {
		gen = gens[len(gens)-1] + 1
	}
	dir := blobDir(dbPath, gen)
	sum := crc32.New(castagnoli)
	if err := receive(bufio.NewReaderSize(r, 1<<20), sum, tmp, dir, gen, durable); err != nil {
		os.Remove(tmp)
		os.RemoveAll(dir)
		return "", err
	}
	return tmp, nil
}

func receive(br *bufio.Reader, sum hash.Hash32, tmp, dir string, gen uint64, durable bool) error {
	got, err := receiveFiles(io.TeeReader(br, sum), tmp, dir, durable)
	if err != nil {
		return err
	}
	var want [4]byte
	if _, err := io.ReadFull(br, want[:]); err != nil || binary.BigEndian.Uint32(want[:]) != sum.Sum32() {
		return fmt.Errorf("snapshot stream checksum mismatch: %w", ErrCorrupt)
	}
	if durable {
		if err := SyncDir(dir); err != nil {
			return err
		}
	}
	return adoptReceived(tmp, gen, got, durable)
}

// receiveFiles writes the database and blob files of a stream, through its
// end marker, and returns the length of each file by number.
func receiveFiles(r io.Reader, tmp, dir string, durable bool) (map[uint64]uint64, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil || string(hdr[:]) != string(snapMagic) {
		return nil, fmt.Errorf("not a Crown snapshot stream of this version (want %q): %w", snapMagic, ErrCorrupt)
	}
	size, err := readU64(r)
	if err != nil {
		return nil, err
	}
	if err := writeFileFrom(tmp, r, int64(size), durable); err != nil {
		return nil, fmt.Errorf("receive database: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create blob directory: %w", err)
	}
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return nil, fmt.Errorf("read file count: %w", errors.Join(err, ErrCorrupt))
	}
	count := binary.BigEndian.Uint32(hdr[:4])
	if count > maxSnapshotFiles {
		return nil, fmt.Errorf("snapshot announces %d blob files: %w", count, ErrCorrupt)
	}
	got := map[uint64]uint64{}
	for range count {
		no, err := readU64(r)
		if err != nil {
			return nil, err
		}
		n, err := readU64(r)
		if err != nil {
			return nil, err
		}
		if _, dup := got[no]; dup || n > 1<<40 {
			return nil, fmt.Errorf("snapshot blob file %d (%d bytes): %w", no, n, ErrCorrupt)
		}
		if err := writeFileFrom(filepath.Join(dir, blobFileName(no)), r, int64(n), durable); err != nil {
			return nil, fmt.Errorf("receive blob file %d: %w", no, err)
		}
		got[no] = n
	}
	if _, err := io.ReadFull(r, hdr[:]); err != nil || string(hdr[:]) != string(snapEnd) {
		return nil, fmt.Errorf("snapshot stream truncated: %w", ErrCorrupt)
	}
	return got, nil
}

// adoptReceived checks the received database against the files that came
// with it and points it at their generation.
func adoptReceived(path string, gen uint64, got map[uint64]uint64, durable bool) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, NoSync: !durable})
	if err != nil {
		return fmt.Errorf("open received database: %w", err)
	}
	defer db.Close()
	return db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return fmt.Errorf("bucket %s missing: %w", bucketMeta, ErrCorrupt)
		}
		// Older schemas are upgraded when the store opens them (schema 2's
		// transaction-id index, in another bucket, by txids.go).
		v := meta.Get(metaSchema)
		if len(v) != 8 || u64(v) < 2 || u64(v) > schemaVersion {
			return fmt.Errorf("snapshot schema %x, this build reads 2 to %d: %w", v, schemaVersion, ErrCorrupt)
		}
		for _, name := range storeBuckets {
			if u64(v) == 2 && bytes.Equal(name, bucketTxIDs) {
				name = bucketTxIDsV2
			}
			// A file of an older schema has no derived index yet:
			// opening it builds them (tagindex.go).
			if tx.Bucket(name) == nil && !addedLater(name) && !(derived(name) && u64(v) < schemaTagIndex) {
				return fmt.Errorf("bucket %s missing: %w", name, ErrCorrupt)
			}
		}
		files := tx.Bucket(bucketFiles)
		c := files.Cursor()
		recs := 0
		for k, v := c.Seek([]byte{'f'}); k != nil && k[0] == 'f'; k, v = c.Next() {
			r, err := decodeFileRec(v)
			if err != nil || len(k) != 9 {
				return fmt.Errorf("blob file record %x: %w", k, ErrCorrupt)
			}
			if n, ok := got[u64(k[1:])]; !ok || n != r.Len {
				return fmt.Errorf("blob file %d: %d bytes recorded, not in the stream: %w", u64(k[1:]), r.Len, ErrCorrupt)
			}
			recs++
		}
		if recs != len(got) {
			return fmt.Errorf("stream carries %d blob files, database records %d: %w", len(got), recs, ErrCorrupt)
		}
		return files.Put(filesGen, be64(gen))
	})
}

func readU64(r io.Reader) (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, fmt.Errorf("snapshot stream truncated: %w", errors.Join(err, ErrCorrupt))
	}
	return binary.BigEndian.Uint64(b[:]), nil
}

// writeFileFrom writes exactly n bytes of r to a new file at path, fsynced
// when durable.
func writeFileFrom(path string, r io.Reader, n int64, durable bool) error {
	out, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if durable {
		_, err = copyDurably(out, r, n)
	} else {
		_, err = io.CopyN(out, r, n)
	}
	if err != nil {
		out.Close()
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("stream ended early: %w", ErrCorrupt)
		}
		return err
	}
	return out.Close()
}

// RemoveStore deletes the database at dbPath with all its blob files (a
// state the caller found untrustworthy and will rebuild).
func RemoveStore(dbPath string) error {
	gens, err := blobDirs(dbPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, g := range gens {
		if err := os.RemoveAll(blobDir(dbPath, g)); err != nil {
			return fmt.Errorf("remove blob directory: %w", err)
		}
	}
	if err := os.Remove(dbPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove state database: %w", err)
	}
	return nil
}
