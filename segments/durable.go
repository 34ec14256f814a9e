package segments

import (
	"io"
	"os"
)

// SyncChunk is how much a snapshot writes before it waits for those bytes
// to reach the disk. The Raft log fsyncs on the same disk for every entry;
// a snapshot that wrote its 100 MB and then fsynced them once put one
// 100 MB flush ahead of every log fsync behind it, and each request waiting
// on the log stalled for as long. In chunks, a log fsync waits for at most
// about one chunk. Measured (docs/performance.md, lesson 19): push p99 at
// half rate with a snapshot every few seconds 176-310 ms with one flush,
// 86-138 ms in 4 MiB chunks, 82-109 ms in 1 MiB chunks; pausing after each
// chunk for as long as its fsync took measured no better.
const SyncChunk = 1 << 20

// copyDurably copies n bytes of r to f, fsyncing every SyncChunk bytes and
// at the end (an empty copy included).
func copyDurably(f *os.File, r io.Reader, n int64) (int64, error) {
	var done int64
	for done < n {
		got, err := io.CopyN(f, r, min(SyncChunk, n-done))
		done += got
		if err != nil {
			return done, err
		}
		if done < n {
			if err := f.Sync(); err != nil {
				return done, err
			}
		}
	}
	return done, f.Sync()
}

// syncInChunks makes the first n bytes of f durable, writing back at most
// SyncChunk of its dirty pages at a time where the platform allows
// (syncRange), then fsyncs it: a sealed segment file written in the last
// half minute is still mostly dirty, and linking it into a snapshot must not
// flush 64 MiB in one piece.
func syncInChunks(f *os.File, n int64) error {
	for off := int64(0); off < n; off += SyncChunk {
		if err := syncRange(f, off, min(SyncChunk, n-off)); err != nil {
			return err
		}
	}
	return f.Sync()
}
