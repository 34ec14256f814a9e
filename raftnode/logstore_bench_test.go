package raftnode

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"
)

// BenchmarkLogStoreAppend measures one fsynced append of a group-commit
// sized entry to a log in its steady state: TrailingLogs entries kept and the
// snapshot's worth before them just deleted, so bbolt's freelist holds every
// page those entries used. "synced" is raft-boltdb's default (the freelist is
// written on every commit), "unsynced" the options openLogStore uses.
func BenchmarkLogStoreAppend(b *testing.B) {
	const entry = 32 << 10
	for _, c := range []struct {
		name string
		opts *bolt.Options
	}{
		{"freelist=synced", nil},
		{"freelist=unsynced", logStoreBoltOptions()},
	} {
		b.Run(c.name, func(b *testing.B) {
			store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(b.TempDir(), "raft.db"), BoltOptions: c.opts})
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			data := bytes.Repeat([]byte{0xa5}, entry)
			next := uint64(1)
			appendN := func(n int) {
				logs := make([]*raft.Log, n)
				for i := range logs {
					logs[i] = &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: data}
					next++
				}
				if err := store.StoreLogs(logs); err != nil {
					b.Fatal(err)
				}
			}
			for range 8192 / 64 {
				appendN(64)
			}
			if err := store.DeleteRange(1, 4096); err != nil {
				b.Fatal(err)
			}
			w0 := writeBytes()
			b.SetBytes(entry)
			b.ResetTimer()
			for range b.N {
				appendN(1)
			}
			b.StopTimer()
			if w0 >= 0 {
				b.ReportMetric(float64(writeBytes()-w0)/float64(b.N), "written-B/op")
			}
		})
	}
}

// BenchmarkLogStoreRound measures what one group commit of 160 KiB costs
// the log stored as one entry (what the proposer does) and as several:
// bbolt never leaves fewer than two keys in a leaf nor splits one of four
// or fewer, so every append rewrites the log's last leaf with two to four
// earlier entries in it, and written-B/op falls as the entries get smaller
// (1.3 MB as one entry, 0.37 MB as ten). Splitting was measured end to end
// and not kept: docs/performance.md, lesson 34.
func BenchmarkLogStoreRound(b *testing.B) {
	const round = 160 << 10
	for _, k := range []int{1, 2, 5, 10} {
		b.Run(fmt.Sprintf("entries=%d", k), func(b *testing.B) {
			store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(b.TempDir(), "raft.db"), BoltOptions: logStoreBoltOptions()})
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			data := bytes.Repeat([]byte{0xa5}, round/k)
			next := uint64(1)
			appendRound := func() {
				logs := make([]*raft.Log, k)
				for i := range logs {
					logs[i] = &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: data}
					next++
				}
				if err := store.StoreLogs(logs); err != nil {
					b.Fatal(err)
				}
			}
			for range 64 {
				appendRound()
			}
			w0 := writeBytes()
			b.SetBytes(round)
			b.ResetTimer()
			for range b.N {
				appendRound()
			}
			b.StopTimer()
			if w0 >= 0 {
				b.ReportMetric(float64(writeBytes()-w0)/float64(b.N), "written-B/op")
			}
		})
	}
}

// writeBytes is what this process has caused to be written to storage so
// far (Linux /proc/self/io), or -1 where that is not available.
func writeBytes() int64 {
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("write_bytes: ")); ok {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				panic(fmt.Sprintf("parse /proc/self/io: %v", err))
			}
			return n
		}
	}
	return -1
}
