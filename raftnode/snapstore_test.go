package raftnode

import (
	"bytes"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/segments"
)

// A stream longer than a few sync chunks, written in pieces that straddle
// the chunk boundaries, reads back byte for byte; closing twice (the state
// machine's Persist, then Raft) and cancelling after closing are no errors.
func TestSinkSyncsInChunksAndClosesOnce(t *testing.T) {
	base := t.TempDir()
	store, err := newLinkingStore(base, 2, newHCLog(slog.New(slog.DiscardHandler), "test"))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := store.Create(raft.SnapshotVersionMax, 10, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 2*segments.SyncChunk+segments.SyncChunk/2+3)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	for rest := want; len(rest) > 0; {
		n := min(len(rest), 1+rng.IntN(segments.SyncChunk/3))
		if got, err := sink.Write(rest[:n]); err != nil || got != n {
			t.Fatalf("write %d: %d, %v", n, got, err)
		}
		rest = rest[n:]
	}
	if ls := sink.(*linkingSink); ls.unsynced >= segments.SyncChunk {
		t.Fatalf("%d bytes written since the last sync", ls.unsynced)
	}
	for i := 0; i < 2; i++ {
		if err := sink.Close(); err != nil {
			t.Fatalf("close %d: %v", i+1, err)
		}
	}
	if err := sink.Cancel(); err != nil {
		t.Fatalf("cancel after close: %v", err)
	}
	_, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes (want %d), equal %v: %v", len(got), len(want), bytes.Equal(got, want), err)
	}
}
