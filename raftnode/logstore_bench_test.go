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
