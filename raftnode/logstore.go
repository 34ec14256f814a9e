package raftnode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/crownmq/crown/segments"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"
)

// The Raft log and stable store's files in <data-dir>/raft.
const (
	// logFile holds the log with entries in pieces (piecelog.go) and
	// Raft's stable keys.
	logFile = "log.db"
	// legacyLogFile is where builds before the piece layout kept the log,
	// one key an entry. A node that opens one moves it into logFile and
	// leaves in its place a note that no bbolt opens (legacyNote), so an
	// older build started on the directory stops at its first step
	// instead of reading a log it would misread.
	legacyLogFile = "raft.db"
	// migratingSuffix marks a logFile being written from a legacy log;
	// only a complete one is renamed to logFile.
	migratingSuffix = ".migrating"
	// migrateBatchBytes bounds the entries a migration reads before it
	// writes them (one bbolt commit).
	migrateBatchBytes = 32 << 20
)

// legacyNote is what stands in raft.db once its log has moved.
var legacyNote = []byte("crown: this node's Raft log moved to log.db, which stores entries in pieces; " +
	"a crownd built before that layout cannot read it and must not run on this data directory.\n")

// openLog opens the node's Raft log and stable store in dir, first moving a
// log an earlier build left in raft.db into log.db.
func openLog(dir string, log *slog.Logger) (*raftboltdb.BoltStore, string, error) {
	path := filepath.Join(dir, logFile)
	legacy := filepath.Join(dir, legacyLogFile)
	state, err := legacyState(legacy)
	if err != nil {
		return nil, "", err
	}
	switch _, err := os.Stat(path); {
	case err == nil:
		if state == legacyLog {
			// Moved, but stopped before the note replaced the old file.
			if err := writeLegacyNote(legacy); err != nil {
				return nil, "", err
			}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, "", fmt.Errorf("raft log: %w", err)
	case state == legacyMoved:
		return nil, "", fmt.Errorf("raft log: %s says the log moved to %s, which is missing", legacy, path)
	case state == legacyLog:
		if err := migrateLegacyLog(legacy, path, log); err != nil {
			return nil, "", err
		}
	}
	store, err := openLogStore(path)
	return store, path, err
}

type legacyLogState int

const (
	legacyAbsent legacyLogState = iota
	legacyLog                   // a bbolt file (or anything but the note)
	legacyMoved                 // the note
)

func legacyState(path string) (legacyLogState, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return legacyAbsent, nil
	}
	if err != nil {
		return 0, fmt.Errorf("raft log: %w", err)
	}
	defer f.Close()
	head := make([]byte, len(legacyNote))
	n, _ := io.ReadFull(f, head) // a shorter file is no note
	if bytes.Equal(head[:n], legacyNote) {
		return legacyMoved, nil
	}
	return legacyLog, nil
}

// migrateLegacyLog writes every entry and stable key of the legacy log into
// a new log file and renames it into place. It can stop anywhere: until the
// rename the legacy log is untouched and the next start begins again; after
// it, the next start only writes the note.
func migrateLegacyLog(legacy, path string, log *slog.Logger) error {
	tmp := path + migratingSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("raft log: remove an unfinished migration: %w", err)
	}
	stable, err := readStableKeys(legacy)
	if err != nil {
		return err
	}
	old, err := openLogStore(legacy)
	if err != nil {
		return err
	}
	store, err := openLogStore(tmp)
	if err != nil {
		old.Close()
		return err
	}
	entries, err := copyLegacyLog(old, store, stable)
	err = errors.Join(err, store.Close(), old.Close())
	if err != nil {
		return fmt.Errorf("raft log: move %s to %s: %w", legacy, path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("raft log: %w", err)
	}
	if err := segments.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("raft log: %w", err)
	}
	log.Info("moved the raft log to the piece layout", "from", legacy, "to", path, "entries", entries, "stable_keys", len(stable))
	return writeLegacyNote(legacy)
}

// readStableKeys reads every key of raft-boltdb's stable-store bucket, so
// that whatever Raft keeps there (term, vote) moves with the log.
func readStableKeys(path string) ([][2][]byte, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("raft log: open %s: %w", path, err)
	}
	defer db.Close()
	var kvs [][2][]byte
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("conf"))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			kvs = append(kvs, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("raft log: read stable keys of %s: %w", path, err)
	}
	return kvs, nil
}

// copyLegacyLog writes the stable keys and every entry of old into store,
// in commits of at most migrateBatchBytes of entries.
func copyLegacyLog(old raft.LogStore, store *raftboltdb.BoltStore, stable [][2][]byte) (uint64, error) {
	for _, kv := range stable {
		if err := store.Set(kv[0], kv[1]); err != nil {
			return 0, err
		}
	}
	first, err := old.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := old.LastIndex()
	if err != nil || first == 0 {
		return 0, err
	}
	pieces := newPieceLog(store)
	var batch []*raft.Log
	size := 0
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		if err := old.GetLog(i, l); err != nil {
			return 0, fmt.Errorf("entry %d: %w", i, err)
		}
		batch = append(batch, l)
		size += len(l.Data)
		if size >= migrateBatchBytes || i == last {
			if err := pieces.StoreLogs(batch); err != nil {
				return 0, err
			}
			batch, size = batch[:0], 0
		}
	}
	return last - first + 1, nil
}

// writeLegacyNote replaces the legacy log with the note, durably.
func writeLegacyNote(legacy string) error {
	tmp := legacy + migratingSuffix
	if err := os.WriteFile(tmp, legacyNote, 0o644); err != nil {
		return fmt.Errorf("raft log: %w", err)
	}
	f, err := os.Open(tmp)
	if err == nil {
		err = errors.Join(f.Sync(), f.Close())
	}
	if err == nil {
		err = os.Rename(tmp, legacy)
	}
	if err == nil {
		err = segments.SyncDir(filepath.Dir(legacy))
	}
	if err != nil {
		return fmt.Errorf("raft log: replace %s with a note: %w", legacy, err)
	}
	return nil
}

// openLogStore opens a raft-boltdb log and stable store file.
func openLogStore(path string) (*raftboltdb.BoltStore, error) {
	if err := segments.CheckBoltLength(path); err != nil {
		return nil, fmt.Errorf("open raft log store: %w", err)
	}
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
