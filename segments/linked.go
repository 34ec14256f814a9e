package segments

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// A linked snapshot keeps the blob files beside its stream instead of inside
// it, so that taking one costs the database and the active file, not the
// whole backlog. Its stream, the manifest, is:
//
//	"CROWNSL1"
//	u32 file count, then per file: u64 number, u64 length, u32 CRC-32C of its bytes
//	u64 database size, database bytes (bbolt's consistent copy)
//	"CROWNEND"
//	u32 CRC-32C of every byte before it
//
// and each file lies in the snapshot's directory under its blob file name:
// a hard link to the live file when the file is sealed, a copy of its
// committed bytes when it is the active one. Only the active file is ever
// written again (appends, and the cut of an uncommitted tail on open, which
// copies instead of cutting a file that has other links: openBlobFile), so
// a link keeps the bytes the snapshot saw. ExpandLinked turns manifest and
// files back into the plain stream WriteTo writes, so a receiver never sees
// the difference.
var linkedMagic = []byte("CROWNSL1")

// maxBlobFileBytes bounds a blob file length a stream may announce.
const maxBlobFileBytes = 1 << 40

// WriteLinked writes the manifest of a linked snapshot to w and places the
// blob files in dir (which must exist). Placed files and dir are fsynced
// before the manifest is written: a snapshot lets Raft drop its log, so
// what it needs must be on disk by the time it counts.
func (r *ReadSnapshot) WriteLinked(w io.Writer, dir string) (int64, error) {
	sums := make([]uint32, len(r.files))
	for i, no := range r.files {
		f, err := r.blobs.handle(no)
		if err != nil {
			return 0, err
		}
		sum, err := placeBlobFile(f, filepath.Join(dir, blobFileName(no)), int64(r.sizes[i]), no == r.active)
		if err != nil {
			return 0, fmt.Errorf("place blob file %d in the snapshot: %w", no, err)
		}
		sums[i] = sum
	}
	if err := SyncDir(dir); err != nil {
		return 0, err
	}
	sum := crc32.New(castagnoli)
	cw := &countingWriter{w: io.MultiWriter(w, sum)}
	var ent [20]byte
	cw.Write(linkedMagic)
	binary.BigEndian.PutUint32(ent[:4], uint32(len(r.files)))
	cw.Write(ent[:4])
	for i, no := range r.files {
		binary.BigEndian.PutUint64(ent[:8], no)
		binary.BigEndian.PutUint64(ent[8:16], r.sizes[i])
		binary.BigEndian.PutUint32(ent[16:20], sums[i])
		cw.Write(ent[:])
	}
	if err := r.writeDatabase(cw); err != nil {
		return cw.n, err
	}
	return writeTrailer(w, cw, sum)
}

// placeBlobFile puts the first n bytes of src at dst, durably, and returns
// their checksum: a hard link when src is sealed (a copy if linking fails,
// say across file systems), a copy when it is the active file.
func placeBlobFile(src *os.File, dst string, n int64, active bool) (uint32, error) {
	sum := crc32.New(castagnoli)
	if got, err := io.Copy(sum, io.NewSectionReader(src, 0, n)); err != nil || got != n {
		return 0, fmt.Errorf("read %d of %d committed bytes: %w", got, n, errors.Join(err, ErrCorrupt))
	}
	if !active {
		if err := os.Link(src.Name(), dst); err == nil {
			// The link shares the live file's pages, which the store
			// writes without fsync unless --fsm-sync is on.
			return sum.Sum32(), syncInChunks(src, n)
		}
	}
	// Whatever holds the name goes first: a copy must never truncate
	// through a name that could be a link to the live file.
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	return sum.Sum32(), writeFileFrom(dst, io.NewSectionReader(src, 0, n), n, true)
}

// IsLinked reports whether a snapshot stream starting with prefix (its first
// eight bytes) is a linked snapshot's manifest.
func IsLinked(prefix []byte) bool { return string(prefix) == string(linkedMagic) }

type linkedEntry struct {
	no, n uint64
	sum   uint32
	f     *os.File
}

// ExpandLinked reads a linked snapshot's manifest from r, with its blob
// files in dir, and returns the plain snapshot stream they make and its
// exact length. The stream is produced as it is read; a damaged manifest or
// file ends it with an error wrapping ErrCorrupt before its checksum, so a
// receiver never accepts it. Closing the reader stops the expansion.
func ExpandLinked(r io.Reader, dir string) (io.ReadCloser, int64, error) {
	msum := crc32.New(castagnoli)
	br := bufio.NewReaderSize(r, 1<<20)
	mr := io.TeeReader(br, msum)
	var hdr [8]byte
	if _, err := io.ReadFull(mr, hdr[:]); err != nil || !IsLinked(hdr[:]) {
		return nil, 0, fmt.Errorf("not a linked snapshot (want %q): %w", linkedMagic, ErrCorrupt)
	}
	if _, err := io.ReadFull(mr, hdr[:4]); err != nil {
		return nil, 0, fmt.Errorf("read file count: %w", errors.Join(err, ErrCorrupt))
	}
	count := binary.BigEndian.Uint32(hdr[:4])
	if count > maxSnapshotFiles {
		return nil, 0, fmt.Errorf("snapshot announces %d blob files: %w", count, ErrCorrupt)
	}
	// magic, database size, file count, end marker, checksum
	size := int64(len(snapMagic) + 8 + 4 + len(snapEnd) + 4)
	// Grown as entries arrive: a damaged count must not allocate.
	files := make([]linkedEntry, 0, min(count, 1024))
	var ent [20]byte
	for range count {
		if _, err := io.ReadFull(mr, ent[:]); err != nil {
			return nil, 0, fmt.Errorf("read file entry: %w", errors.Join(err, ErrCorrupt))
		}
		e := linkedEntry{no: binary.BigEndian.Uint64(ent[:8]), n: binary.BigEndian.Uint64(ent[8:16]), sum: binary.BigEndian.Uint32(ent[16:])}
		if e.n > maxBlobFileBytes {
			return nil, 0, fmt.Errorf("snapshot blob file %d of %d bytes: %w", e.no, e.n, ErrCorrupt)
		}
		files = append(files, e)
		size += 16 + int64(e.n)
	}
	dbSize, err := readU64(mr)
	if err != nil {
		return nil, 0, err
	}
	if dbSize > maxBlobFileBytes {
		return nil, 0, fmt.Errorf("snapshot database of %d bytes: %w", dbSize, ErrCorrupt)
	}
	size += int64(dbSize)
	// Every file is opened now, so that the snapshot's directory may go
	// (a newer snapshot reaps it) while the stream is read.
	for i := range files {
		f, err := os.Open(filepath.Join(dir, blobFileName(files[i].no)))
		if err != nil {
			closeLinked(files)
			return nil, 0, fmt.Errorf("open snapshot blob file %d: %w", files[i].no, errors.Join(err, ErrCorrupt))
		}
		files[i].f = f
	}
	pr, pw := io.Pipe()
	go func() {
		defer closeLinked(files)
		pw.CloseWithError(expandLinked(pw, mr, br, msum.Sum32, dbSize, files))
	}()
	return pr, size, nil
}

func closeLinked(files []linkedEntry) {
	for _, e := range files {
		if e.f != nil {
			e.f.Close()
		}
	}
}

// expandLinked writes the plain stream of a manifest whose header has been
// read: mr continues the manifest (hashed into manifestSum), br reads it
// unhashed (for the trailing checksum).
func expandLinked(w io.Writer, mr, br io.Reader, manifestSum func() uint32, dbSize uint64, files []linkedEntry) error {
	sum := crc32.New(castagnoli)
	cw := &countingWriter{w: io.MultiWriter(w, sum)}
	var hdr [8]byte
	cw.Write(snapMagic)
	binary.BigEndian.PutUint64(hdr[:], dbSize)
	cw.Write(hdr[:])
	if _, err := io.CopyN(cw, mr, int64(dbSize)); err != nil {
		return fmt.Errorf("copy snapshot database: %w", errors.Join(err, ErrCorrupt))
	}
	if _, err := io.ReadFull(mr, hdr[:]); err != nil || string(hdr[:]) != string(snapEnd) {
		return fmt.Errorf("linked snapshot manifest truncated: %w", ErrCorrupt)
	}
	want := manifestSum()
	if _, err := io.ReadFull(br, hdr[:4]); err != nil || binary.BigEndian.Uint32(hdr[:4]) != want {
		return fmt.Errorf("linked snapshot manifest checksum mismatch: %w", ErrCorrupt)
	}
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(files)))
	cw.Write(hdr[:4])
	for _, e := range files {
		binary.BigEndian.PutUint64(hdr[:], e.no)
		cw.Write(hdr[:])
		binary.BigEndian.PutUint64(hdr[:], e.n)
		cw.Write(hdr[:])
		if err := copyLinkedFile(cw, e); err != nil {
			return err
		}
	}
	_, err := writeTrailer(w, cw, sum)
	return err
}

// copyLinkedFile streams a placed blob file, checked against its checksum.
func copyLinkedFile(w io.Writer, e linkedEntry) error {
	sum := crc32.New(castagnoli)
	if _, err := io.Copy(io.MultiWriter(w, sum), io.NewSectionReader(e.f, 0, int64(e.n))); err != nil {
		return fmt.Errorf("copy snapshot blob file %d: %w", e.no, err)
	}
	if st, err := e.f.Stat(); err != nil || st.Size() < int64(e.n) || sum.Sum32() != e.sum {
		return fmt.Errorf("snapshot blob file %d does not hold the %d bytes it was taken with: %w", e.no, e.n, ErrCorrupt)
	}
	return nil
}
