package segments

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// Files made durable in chunks hold exactly what was written, whatever the
// length's remainder modulo the chunk.
func TestDurableCopyAndChunkedSync(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, SyncChunk - 1, SyncChunk, 2*SyncChunk + 12345} {
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(rng.Uint32())
		}
		dir := t.TempDir()
		path := filepath.Join(dir, "copy")
		if err := writeFileFrom(path, bytes.NewReader(want), int64(n), true); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("n=%d: read back %d bytes, equal %v: %v", n, len(got), bytes.Equal(got, want), err)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("dirty"), int64(n)); err != nil {
			t.Fatal(err)
		}
		if err := syncInChunks(f, int64(n)+5); err != nil {
			t.Fatalf("n=%d: sync in chunks: %v", n, err)
		}
		f.Close()
		// A source shorter than announced is a corrupt stream, not a short file.
		if err := writeFileFrom(filepath.Join(dir, "short"), bytes.NewReader(want), int64(n)+1, true); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("n=%d: a short source gave %v, want ErrCorrupt", n, err)
		}
	}
}
