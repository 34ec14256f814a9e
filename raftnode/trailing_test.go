package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/fsm"
)

func sizedLogs(sizes ...int) []*raft.Log {
	logs := make([]*raft.Log, len(sizes))
	for i, n := range sizes {
		logs[i] = &raft.Log{Data: make([]byte, n)}
	}
	return logs
}

func TestTrailingForBoundsBytesAndEntries(t *testing.T) {
	for _, c := range []struct {
		name          string
		capacity      uint64
		sizes         []int
		budget, limit uint64
		want          uint64
	}{
		{"the newest entries that fit", 10, []int{100, 100, 100, 100}, 250, 10, 2},
		{"exactly the budget fits", 10, []int{100, 100, 100, 100}, 300, 10, 3},
		{"one at least, however large", 10, []int{100, 1000}, 500, 10, 1},
		{"the entry limit caps a small log", 4, []int{1, 1, 1, 1, 1, 1}, 1 << 20, 4, 4},
		{"everything remembered fits: older sizes unknown, keep the limit", 10, []int{100, 100}, 1000, 10, 10},
		{"nothing remembered yet", 10, nil, 1000, 10, 10},
		{"the ring wrapped: only the newest count", 3, []int{1000, 1000, 1000, 10, 10, 10}, 25, 3, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newEntrySizes(c.capacity)
			s.add(sizedLogs(c.sizes...)...)
			if got := s.trailingFor(c.budget, c.limit); got != c.want {
				t.Fatalf("trailingFor(%d, %d) = %d, want %d", c.budget, c.limit, got, c.want)
			}
		})
	}
}

// After a snapshot a node keeps TrailingLogs entries, but no more than
// TrailingLogBytes of them: large entries (a produce burst's group
// commits) no longer leave thousands of them, gigabytes, in the log.
func TestSnapshotLeavesTrailingLogBoundedInBytes(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig("n1", freeAddr(t), dir, nil)
	cfg.SnapshotLogBytes = 256 << 10
	cfg.SnapshotLogCheck = 10 * time.Millisecond
	cfg.SnapshotThreshold = 1 << 40 // Raft's entry count never fires here
	cfg.TrailingLogs = 1000         // by count, all 40 entries would stay
	cfg.TrailingLogBytes = 64 << 10
	n := startNode(t, cfg)
	waitLeader(t, n)
	payload := bytes.Repeat([]byte("x"), 8<<10)
	for i := range 40 { // 320 KiB: one snapshot
		cmd := &fsm.Push{Items: []fsm.PushItem{{Queue: "q", Partition: "p", TxID: fmt.Sprintf("b%d", i), Payload: payload}}}
		if _, _, err := n.node.Propose(context.Background(), cmd); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a snapshot", func() bool { return snapshotsOnDisk(t, dir) >= 1 })
	waitFor(t, "the log compacted", func() bool {
		first, err := n.node.pieces.FirstIndex()
		return err == nil && first > 1
	})
	snapIdx := newestSnapshotIndex(t, dir)
	first, err := n.node.pieces.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	// By count (1000) nothing would have gone. Raft keeps the newest
	// entries of the whole log, so of those the snapshot holds fewer than
	// 64 KiB remain (entries after it stay, whatever their size).
	var kept uint64
	for i := first; i <= snapIdx; i++ {
		var l raft.Log
		if err := n.node.pieces.GetLog(i, &l); err != nil {
			t.Fatalf("log %d of %d..%d: %v", i, first, snapIdx, err)
		}
		kept += uint64(len(l.Data))
	}
	if kept > 64<<10 {
		t.Fatalf("the log keeps %d..%d of a snapshot at %d: %d bytes, over the 64 KiB bound", first, snapIdx, snapIdx, kept)
	}
	ls := n.node.LogStorage()
	if ls.TrailingLogs < 6 || ls.TrailingLogs > 8 {
		t.Fatalf("Raft keeps %d trailing entries; want the 7 or so newest 8 KiB entries within 64 KiB", ls.TrailingLogs)
	}
	if ls.FirstIndex != first {
		t.Fatalf("LogStorage reports first index %d, the log store %d", ls.FirstIndex, first)
	}
	if ls.FileBytes < 320<<10 {
		t.Fatalf("LogStorage reports a %d-byte log file after 320 KiB of entries", ls.FileBytes)
	}
}

// newestSnapshotIndex reads the index from the names of the snapshots on
// disk (TERM-INDEX-MILLIS, raft's file snapshot store).
func newestSnapshotIndex(t *testing.T, dir string) uint64 {
	t.Helper()
	metas, err := filepath.Glob(filepath.Join(dir, "raft", "snapshots", "*", "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var newest uint64
	for _, m := range metas {
		parts := strings.Split(filepath.Base(filepath.Dir(m)), "-")
		if len(parts) != 3 {
			t.Fatalf("snapshot directory %s: not TERM-INDEX-MILLIS", m)
		}
		idx, err := strconv.ParseUint(parts[1], 10, 64)
		if err != nil {
			t.Fatalf("snapshot directory %s: %v", m, err)
		}
		newest = max(newest, idx)
	}
	if newest == 0 {
		t.Fatal("no snapshot on disk")
	}
	return newest
}
