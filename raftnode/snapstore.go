package raftnode

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/segments"
)

// linkingStore is raft's file snapshot store with room beside each
// snapshot's stream for files the state machine keeps there
// (fsm.LinkingSink): the state machine hard-links its sealed segment files
// into a new snapshot's directory instead of copying them into the stream,
// and Open expands them back into one self-contained stream, so Raft, a
// node receiving InstallSnapshot and a restore on start read what they
// always read. Snapshots received from a leader arrive as that plain stream
// and are kept as they are.
type linkingStore struct {
	*raft.FileSnapshotStore
	dir string // the file store's directory of snapshot directories
}

func newLinkingStore(base string, retain int, logger hclog.Logger) (*linkingStore, error) {
	fs, err := raft.NewFileSnapshotStoreWithLogger(base, retain, logger)
	if err != nil {
		return nil, err
	}
	s := &linkingStore{FileSnapshotStore: fs, dir: filepath.Join(base, "snapshots")}
	// A snapshot interrupted by a crash leaves its "<id>.tmp" directory,
	// which the file store skips but never removes; its links would keep
	// dead segment files on disk for good. None is in progress yet.
	tmps, err := filepath.Glob(filepath.Join(s.dir, "*.tmp"))
	if err != nil {
		return nil, err
	}
	for _, t := range tmps {
		if err := os.RemoveAll(t); err != nil {
			return nil, fmt.Errorf("remove interrupted snapshot: %w", err)
		}
	}
	if err := s.removeUnreadable(logger); err != nil {
		return nil, err
	}
	return s, nil
}

// removeUnreadable removes the snapshots whose metadata does not read and
// that are older than the newest readable one. The file store skips them
// (a warning each time it lists) but never reaps them, and their links
// kept dead segment files on disk for good; Raft can use neither them nor
// anything older than the snapshot it restores from. One newer than every
// readable snapshot stays, for an operator to look at: the node may need
// it (checkLogStart says so).
func (s *linkingStore) removeUnreadable(logger hclog.Logger) error {
	list, err := s.List()
	if err != nil || len(list) == 0 {
		return err
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	newest := list[0]
	readable := make(map[string]bool, len(list))
	for _, m := range list {
		readable[m.ID] = true
	}
	for _, e := range entries {
		var term, index, ms uint64
		if !e.IsDir() || readable[e.Name()] {
			continue
		}
		// The file store names a snapshot term-index-milliseconds.
		if n, _ := fmt.Sscanf(e.Name(), "%d-%d-%d", &term, &index, &ms); n != 3 || fmt.Sprintf("%d-%d-%d", term, index, ms) != e.Name() {
			continue
		}
		if term > newest.Term || (term == newest.Term && index >= newest.Index) {
			continue
		}
		logger.Warn("removing a snapshot whose metadata does not read, older than the newest readable one",
			"snapshot", e.Name(), "newest", newest.ID)
		if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			return fmt.Errorf("remove unreadable snapshot %s: %w", e.Name(), err)
		}
	}
	return nil
}

// Create starts a snapshot. The file store writes it into "<id>.tmp" and
// renames that directory to "<id>" when the sink closes, so what is placed
// in it moves with the stream, and a cancelled snapshot takes it along.
func (s *linkingStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.dir, sink.ID()+".tmp")
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		sink.Cancel()
		return nil, fmt.Errorf("snapshot directory %s not where the file store keeps it: %v", dir, err)
	}
	state, err := os.Open(filepath.Join(dir, "state.bin")) // the file store's stream file
	if err != nil {
		sink.Cancel()
		return nil, fmt.Errorf("snapshot stream file: %w", err)
	}
	return &linkingSink{SnapshotSink: sink, dir: dir, state: state}, nil
}

// Open returns a snapshot's stream, expanded when it is linked; the size in
// the returned metadata is then the expanded stream's, since InstallSnapshot
// sends exactly that many bytes.
func (s *linkingStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.FileSnapshotStore.Open(id)
	if err != nil {
		return nil, nil, err
	}
	stream, size, err := fsm.ExpandSnapshot(rc, filepath.Join(s.dir, id))
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	if size >= 0 {
		m := *meta
		m.Size = size
		meta = &m
	}
	return meta, stream, nil
}

// linkingSink also makes the stream durable as it goes: the file store
// fsyncs it only when it closes, and a snapshot's 100 MB flushed in one
// piece stalls every Raft log fsync queued behind it on the same disk
// (segments.SyncChunk). state is a second handle on the stream's file,
// for those fsyncs; the file store's own is not exported.
type linkingSink struct {
	raft.SnapshotSink
	dir      string
	state    *os.File
	unsynced int
}

func (s *linkingSink) LinkDir() string { return s.dir }

func (s *linkingSink) Write(p []byte) (int, error) {
	n, err := s.SnapshotSink.Write(p)
	if s.unsynced += n; err == nil && s.unsynced >= segments.SyncChunk {
		// What the file store still buffers (its bufio.Writer) waits for
		// the next chunk or for Close.
		s.unsynced = 0
		err = s.state.Sync()
	}
	return n, err
}

// Close and Cancel may both be called, and Close twice (the state
// machine's Persist closes the sink, then Raft does); the file store's own
// are idempotent, so these are too.
func (s *linkingSink) Close() error {
	return errors.Join(s.SnapshotSink.Close(), s.closeState())
}

func (s *linkingSink) Cancel() error {
	return errors.Join(s.SnapshotSink.Cancel(), s.closeState())
}

func (s *linkingSink) closeState() error {
	if s.state == nil {
		return nil
	}
	err := s.state.Close()
	s.state = nil
	return err
}
