package raftnode

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// A log written by a build that synced bbolt's freelist opens with the
// unsynced freelist and back again, entries and free pages intact: the
// switch changes nothing on disk that either build cannot read.
func TestLogStoreOpensAcrossFreelistModes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	data := bytes.Repeat([]byte{7}, 20<<10)
	write := func(s *raftboltdb.BoltStore, from, to uint64) {
		t.Helper()
		var logs []*raft.Log
		for i := from; i <= to; i++ {
			logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: append([]byte{byte(i)}, data...)})
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	check := func(s *raftboltdb.BoltStore, first, last uint64) {
		t.Helper()
		if f, err := s.FirstIndex(); err != nil || f != first {
			t.Fatalf("first index %d, %v; want %d", f, err, first)
		}
		if l, err := s.LastIndex(); err != nil || l != last {
			t.Fatalf("last index %d, %v; want %d", l, err, last)
		}
		for i := first; i <= last; i++ {
			var l raft.Log
			if err := s.GetLog(i, &l); err != nil {
				t.Fatalf("entry %d: %v", i, err)
			}
			if l.Data[0] != byte(i) || len(l.Data) != len(data)+1 {
				t.Fatalf("entry %d holds other bytes", i)
			}
		}
	}

	old, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	write(old, 1, 300)
	if err := old.DeleteRange(1, 200); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := openLogStore(path)
	if err != nil {
		t.Fatal(err)
	}
	check(s, 201, 300)
	// Appending reuses the pages the deletion freed: the rebuilt freelist
	// must not hand out a page that is still in use.
	write(s, 301, 500)
	if err := s.DeleteRange(201, 350); err != nil {
		t.Fatal(err)
	}
	write(s, 501, 600)
	check(s, 351, 600)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	back, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	check(back, 351, 600)
	write(back, 601, 700)
	check(back, 351, 700)
	if err := back.Close(); err != nil {
		t.Fatal(err)
	}
}
