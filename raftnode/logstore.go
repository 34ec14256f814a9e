package raftnode

import (
	"fmt"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"
)

// openLogStore opens the Raft log and stable store.
func openLogStore(path string) (*raftboltdb.BoltStore, error) {
	s, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: logStoreBoltOptions()})
	if err != nil {
		return nil, fmt.Errorf("open raft log store %s: %w", path, err)
	}
	return s, nil
}

// logStoreBoltOptions keeps bbolt's freelist out of the file.
//
// Every snapshot deletes the entries it covers from the front of the log,
// and bbolt puts their pages on its freelist. By default the freelist is
// written, and fsynced, by every commit: with group-commit entries of tens of
// KiB, one truncation frees tens of thousands of pages, and each append then
// rewrites a freelist of hundreds of KiB until the pages are reused. Consul
// offers the same switch for the same reason. The freelist is derived data:
// bbolt rebuilds it on open by walking the tree. The map freelist allocates a
// run of contiguous pages (an entry's overflow pages) without scanning the
// whole list.
func logStoreBoltOptions() *bolt.Options {
	return &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType}
}
