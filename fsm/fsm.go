// Package fsm is Crown's deterministic state machine: the table of command
// types, their apply functions, ApplyBatch over one bbolt transaction,
// snapshots and restore, and read views for the HTTP layer. It reads no
// clock, no randomness and no environment; see DESIGN.md.
package fsm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time" // Config durations only: nothing here reads the clock

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/segments"
)

// Config configures a state machine.
type Config struct {
	// Dir holds the state database (fsm.db) and its marker file.
	Dir string
	// NodeID is this node's Raft id: entries it proposed get full results.
	NodeID string
	Logger *slog.Logger
	// Sync fsyncs the state database on every commit. Off by default: the
	// Raft log is fsynced and is the durable record (DESIGN.md, "Durability").
	Sync bool
	// Writeback, when positive and Sync is off, has the kernel start
	// writing the state's dirty pages this often (segments.StoreOptions).
	Writeback time.Duration
	// BootID identifies the running kernel boot; see DESIGN.md. Empty
	// disables the crash check (the file is then always trusted).
	BootID string
	// VerifyCache checks every partition record served from the store's
	// cache against the state file (segments.StoreOptions.VerifyCache); a
	// difference fails the apply. For tests.
	VerifyCache bool
	// VerifyAcks resolves every acknowledgment that the index resolves
	// (ackByIndex) also by scanning its batch, and every one resolved by
	// the offset the leader wrote (AckAt) also by the index, and fails the
	// apply when the two differ. For tests (crownd --verify-acks).
	VerifyAcks bool
	// CommitInterval keeps one write transaction of the state file open
	// across applied batches for up to this long, or until CommitBatches
	// batches wrote to it (256 when zero), and commits it then or as soon
	// as anything reads the state (segments.Store.UpdateDeferred;
	// DESIGN.md, "Deferred commits"). Zero commits every batch.
	CommitInterval time.Duration
	CommitBatches  int
}

// FSM implements raft.FSM and raft.BatchingFSM.
//
// Lock order: mu, then bbolt's own locks (taken inside a transaction), then
// obsMu. Apply runs on Raft's single FSM goroutine, so writes never race each
// other; mu only keeps readers off the store while Restore swaps the file.
type FSM struct {
	cfg Config
	log *slog.Logger

	mu    sync.RWMutex
	store *segments.Store
	// lost is why store is nil after a restore that replaced the state
	// file but could not open it (swapIn): every later use fails with it.
	lost error
	// retiring counts stores replaced by Restore that are still closing
	// (swapIn); Close waits for them.
	retiring sync.WaitGroup
	// writesBefore sums the WriteStats of the stores Restore replaced, so
	// StateWrites only grows.
	writesBefore segments.WriteStats

	applied atomic.Uint64
	// appliedCh is closed and replaced after every commit, so waiters for
	// an index sleep until something was applied instead of polling.
	appliedMu sync.Mutex
	appliedCh chan struct{}

	obsMu     sync.Mutex
	observers []func(*Events)

	// acks counts how this node's applies resolved acknowledgments by
	// transaction id (AckResolutions); it is not part of the state.
	acks ackResolutions
	// looks counts how pops' looks read the state (PopLooks).
	looks popLooks
}

// ackResolutions counts acknowledgments resolved by transaction id.
type ackResolutions struct {
	byOffset, byIndex, refused atomic.Uint64
}

// AckResolutions counts, since this node started, the acknowledgments its
// applies resolved by transaction id (AckAt).
type AckResolutions struct {
	// ByOffset took the offset the leader wrote into the item.
	ByOffset uint64
	// ByIndex looked the id up in the transaction-id index; Refused of them
	// carried an offset that could not be proven the index's answer.
	ByIndex, Refused uint64
}

// StateWrites counts the state file's write transactions and the pages
// they wrote since this node started, across snapshot installs. Not state:
// two nodes applying the same log may write different pages.
func (f *FSM) StateWrites() segments.WriteStats {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return f.writesBefore
	}
	return f.writesBefore.Plus(f.store.WriteStats())
}

// AckResolutions reports how this node's applies have resolved
// acknowledgments (the items of a live batch whose ids may repeat are
// resolved by reading the batch instead, and counted in none).
func (f *FSM) AckResolutions() AckResolutions {
	return AckResolutions{ByOffset: f.acks.byOffset.Load(), ByIndex: f.acks.byIndex.Load(), Refused: f.acks.refused.Load()}
}

const (
	dbFile     = "fsm.db"
	markerFile = "fsm.state"
)

// marker records whether the state database was closed cleanly, under
// which boot it was last opened, and whether that session fsynced it.
type marker struct {
	BootID string `json:"boot_id"`
	Clean  bool   `json:"clean"`
	Synced bool   `json:"synced,omitempty"`
}

// Open opens (or creates) the state machine in cfg.Dir.
func Open(cfg Config) (*FSM, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	f := &FSM{cfg: cfg, log: cfg.Logger.With("component", "fsm"), appliedCh: make(chan struct{})}
	if err := f.checkCrash(); err != nil {
		return nil, err
	}
	// Unclean and unsynced before the store opens: opening may write (a
	// schema migration rewrites much of the file, without fsync unless
	// --fsm-sync), and the files an unsynced session left after a process
	// crash are still only in the page cache until a syncing Open has
	// fsynced them. A machine crash meanwhile must not leave a marker
	// saying the file is whole.
	if err := f.writeMarker(false, false); err != nil {
		return nil, err
	}
	st, err := segments.Open(f.dbPath(), f.storeOptions())
	if err != nil {
		return nil, err
	}
	f.store = st
	if cfg.Sync {
		// A syncing Open returns with everything on disk.
		if err := f.writeMarker(false, true); err != nil {
			st.Close()
			return nil, err
		}
	}
	if err := st.View(func(tx *segments.Tx) error {
		f.applied.Store(tx.Applied())
		return nil
	}); err != nil {
		st.Close()
		return nil, err
	}
	f.log.Info("state machine open", "applied_index", f.applied.Load(), "sync", cfg.Sync)
	return f, nil
}

func (f *FSM) dbPath() string { return filepath.Join(f.cfg.Dir, dbFile) }

func (f *FSM) storeOptions() segments.StoreOptions {
	return segments.StoreOptions{NoSync: !f.cfg.Sync, MmapSize: 1 << 30, Writeback: f.cfg.Writeback,
		VerifyCache: f.cfg.VerifyCache, Logger: f.log, Defer: f.cfg.deferOptions()}
}

// deferOptions turns CommitInterval and CommitBatches into the store's.
func (c *Config) deferOptions() segments.DeferOptions {
	if c.CommitInterval <= 0 {
		return segments.DeferOptions{}
	}
	n := c.CommitBatches
	if n <= 0 {
		n = DefaultCommitBatches
	}
	return segments.DeferOptions{Uses: n, Linger: c.CommitInterval}
}

// DefaultCommitBatches bounds a deferred transaction's batches when
// Config.CommitBatches is zero: it bounds the memory an open transaction
// holds (its dirty pages and its blobs) when batches come faster than the
// interval.
const DefaultCommitBatches = 256

// checkCrash discards a state database that may be torn: one written without
// fsync whose last session ended in a machine crash (the boot id changed and
// no clean close was recorded). Raft rebuilds it from the latest snapshot and
// the log. A process crash (SIGKILL) leaves the page cache intact, so the
// file is kept and Raft replays from its recorded applied index. What counts
// is whether the last session synced (the marker says), not whether this
// one will: turning --fsm-sync on after a power loss must not keep a file
// written without it.
func (f *FSM) checkCrash() error {
	if f.cfg.BootID == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(f.cfg.Dir, markerFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read state marker: %w", err)
	}
	var m marker
	if err := json.Unmarshal(b, &m); err != nil {
		return f.discard("state marker unreadable; setting the state database aside to rebuild it from snapshot and log", "error", err)
	}
	if !m.Clean && m.BootID != f.cfg.BootID && !m.Synced {
		return f.discard("machine restarted while the state database was open without fsync; setting it aside to rebuild it from snapshot and log",
			"previous_boot", m.BootID, "boot", f.cfg.BootID)
	}
	return nil
}

// discard sets a state database that may be torn aside (the state
// directory renamed to DiscardedDir), for raftnode to rebuild the state
// from the newest snapshot and the log. Moved, not removed: raftnode's
// checks that the snapshot and the log the rebuild needs are there come
// after this, and should they fail the node stops with the old database
// still on disk, the operator's way back. raftnode drops it
// (DropDiscarded) once the rebuild has what it needs. The move costs
// little space: the segment files are mostly hard-linked by the
// snapshots the rebuild restores.
func (f *FSM) discard(why string, args ...any) error {
	aside := f.DiscardedDir()
	if _, err := os.Stat(aside); err == nil {
		// An earlier start set a database aside and stopped before its
		// rebuild had what it needs: that copy is the one to keep, and
		// this directory holds only what the failed start made.
		f.log.Warn(why+"; keeping the copy an earlier start set aside", append(args, "kept", aside)...)
		return f.removeStore()
	}
	if err := os.Rename(f.cfg.Dir, aside); err != nil {
		// The state directory may be a mount point of its own, which
		// cannot be renamed: removed as before, with no way back.
		f.log.Warn(why+"; it cannot be set aside, so it is removed", append(args, "error", err)...)
		return f.removeStore()
	}
	f.log.Warn(why, append(args, "moved_to", aside)...)
	if err := os.MkdirAll(f.cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	return segments.SyncDir(filepath.Dir(f.cfg.Dir))
}

// removeStore deletes the state database and its segment files, for a
// state discard cannot set aside.
func (f *FSM) removeStore() error {
	if err := segments.RemoveStore(f.dbPath()); err != nil {
		return fmt.Errorf("discard state database: %w", err)
	}
	return nil
}

// DiscardedDir is where a state database that may be torn is set aside
// (discard).
func (f *FSM) DiscardedDir() string { return filepath.Clean(f.cfg.Dir) + ".discarded" }

// DropDiscarded removes the state database discard set aside, if any: the
// node calls it once the state's rebuild has the snapshot and log it needs.
func (f *FSM) DropDiscarded() error {
	aside := f.DiscardedDir()
	if _, err := os.Stat(aside); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.RemoveAll(aside); err != nil {
		return fmt.Errorf("remove the state database set aside: %w", err)
	}
	f.log.Info("removed the state database set aside; the state is rebuilt from snapshot and log", "dir", aside)
	return nil
}

func (f *FSM) writeMarker(clean, synced bool) error {
	b, _ := json.Marshal(marker{BootID: f.cfg.BootID, Clean: clean, Synced: synced})
	p := filepath.Join(f.cfg.Dir, markerFile)
	if err := writeFileSync(p+".tmp", b); err != nil {
		return fmt.Errorf("write state marker: %w", err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("write state marker: %w", err)
	}
	return segments.SyncDir(f.cfg.Dir)
}

// Close syncs and closes the state database and records a clean close. It
// first waits for stores a restore replaced to finish closing: their last
// readers are Raft snapshots, which end when Raft shuts down, before this.
func (f *FSM) Close() error {
	f.retiring.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.store == nil {
		return nil
	}
	err := f.store.Close()
	f.store = nil
	if err != nil {
		return err
	}
	return f.writeMarker(true, f.cfg.Sync)
}

// AppliedIndex is the last Raft index whose effects the state holds.
func (f *FSM) AppliedIndex() uint64 { return f.applied.Load() }

func (f *FSM) setApplied(i uint64) {
	f.applied.Store(i)
	f.appliedMu.Lock()
	close(f.appliedCh)
	f.appliedCh = make(chan struct{})
	f.appliedMu.Unlock()
}

// WaitApplied blocks until the state holds index, or ctx ends.
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	for {
		f.appliedMu.Lock()
		ch := f.appliedCh
		f.appliedMu.Unlock()
		if f.applied.Load() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for index %d (applied %d): %w", index, f.applied.Load(), ctx.Err())
		}
	}
}

// Subscribe registers fn to be called after every applied batch (its
// state-file commit may be deferred: a view commits it first), on the
// apply goroutine: it must not block.
func (f *FSM) Subscribe(fn func(*Events)) {
	f.obsMu.Lock()
	f.observers = append(f.observers, fn)
	f.obsMu.Unlock()
}

func (f *FSM) notify(e *Events) {
	f.obsMu.Lock()
	obs := f.observers
	f.obsMu.Unlock()
	for _, fn := range obs {
		fn(e)
	}
}

// EntryResult is what Apply returns for one log entry: one result per command.
type EntryResult struct {
	Index   uint64
	Results []any
}

// Apply applies one log entry.
func (f *FSM) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch applies committed entries in the state file's write
// transaction, recording the last applied index in the same transaction,
// which it commits at once or, with Config.CommitInterval, later
// (segments.Store.UpdateDeferred). Entries at or below the stored index
// were applied before a restart and are skipped.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	results := make([]any, len(logs))
	events := &Events{}
	err := f.updateDeferred(func(tx *segments.Tx) error {
		applied := tx.Applied()
		first := applied
		now := tx.Now()
		counters := loadCounters(tx)
		for i, l := range logs {
			if l.Index <= applied {
				continue
			}
			if l.Type == raft.LogCommand {
				results[i] = f.applyEntry(tx, l, &now, events, &counters)
			}
			applied = l.Index
		}
		if applied == first {
			return segments.ErrUnchanged // nothing new: the open transaction stays as it was
		}
		must(tx.SetNow(now))
		must(counters.store(tx))
		return tx.SetApplied(applied)
	})
	if errors.Is(err, segments.ErrUnchanged) {
		return results
	}
	if err != nil {
		panic(fmt.Errorf("fsm: commit of entries %d..%d failed, state machine stopped: %w",
			logs[0].Index, logs[len(logs)-1].Index, err))
	}
	last := logs[len(logs)-1].Index
	f.setApplied(last)
	events.Index = last
	f.notify(events)
	return results
}

// onStore runs fn through one of the store's transaction methods
// (UpdateDeferred, View, ViewLatest) with the store pinned against Restore.
func (f *FSM) onStore(method func(*segments.Store, func(*segments.Tx) error) error, fn func(tx *segments.Tx) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return f.closedErr()
	}
	return method(f.store, fn)
}

// updateDeferred applies in the write transaction the last batch left open
// (Config.CommitInterval).
func (f *FSM) updateDeferred(fn func(tx *segments.Tx) error) error {
	return f.onStore((*segments.Store).UpdateDeferred, fn)
}

// closedErr says why there is no store; f.mu must be held.
func (f *FSM) closedErr() error {
	if f.lost != nil {
		return fmt.Errorf("state machine has no state: %w; restart the node to restore it from its snapshot and log", f.lost)
	}
	return errors.New("state machine closed")
}

func (f *FSM) applyEntry(tx *segments.Tx, l *raft.Log, now *int64, events *Events, counters *Counters) any {
	e, err := DecodeEntry(l.Data)
	if errors.Is(err, ErrUnknownType) {
		panic(fmt.Errorf("fsm: entry %d: %w: upgrade this node before it applies the log", l.Index, err))
	}
	if err != nil {
		// Every node fails the same bytes the same way; nothing changes.
		f.log.Error("malformed log entry ignored", "index", l.Index, "error", err)
		return &ErrorResult{Err: err.Error()}
	}
	if e.Stamp > *now {
		*now = e.Stamp
	}
	a := &applier{tx: tx, now: *now, index: l.Index, full: e.Origin == f.cfg.NodeID, events: events, verifyAcks: f.cfg.VerifyAcks,
		acks: &f.acks}
	out := &EntryResult{Index: l.Index, Results: make([]any, len(e.Commands))}
	for j, c := range e.Commands {
		if err := c.Validate(); err != nil {
			out.Results[j] = &ErrorResult{Err: err.Error()}
			continue
		}
		r := registry[c.Type()].apply(a, c)
		counters.count(c, r)
		out.Results[j] = r
	}
	return out
}

// View runs fn on a consistent read-only view of the state.
func (f *FSM) View(fn func(tx *segments.Tx) error) error {
	return f.onStore((*segments.Store).View, fn)
}

// viewLatest is View for a short read on a hot path: it reads the state as
// applied without committing a deferred transaction (segments.ViewLatest).
func (f *FSM) viewLatest(fn func(tx *segments.Tx) error) error {
	return f.onStore((*segments.Store).ViewLatest, fn)
}

// Digest hashes the state's logical content (see segments.Store.Digest).
func (f *FSM) Digest() (applied uint64, digest string, err error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return 0, "", f.closedErr()
	}
	return f.store.Digest()
}

// Snapshot captures a consistent read view; Persist streams it while
// applies continue.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return nil, f.closedErr()
	}
	// Raft calls Snapshot between applies, so sealing here moves no write
	// another transaction is making; a linked snapshot then copies an empty
	// active file instead of up to 64 MiB of payloads.
	if err := f.store.SealActive(sealBeforeSnapshot); err != nil {
		return nil, fmt.Errorf("seal the active blob file before a snapshot: %w", err)
	}
	rs, err := f.store.BeginSnapshot()
	if err != nil {
		return nil, err
	}
	return &snapshot{rs: rs, log: f.log}, nil
}

// sealBeforeSnapshot is the least an active blob file must hold for a
// snapshot to seal it first: below it, copying is cheaper than a new file.
const sealBeforeSnapshot = 1 << 20

type snapshot struct {
	rs  *segments.ReadSnapshot
	log *slog.Logger
}

// LinkingSink is a snapshot sink with a directory of its own beside the
// stream (raftnode's snapshot store). Persist then writes a linked snapshot:
// the database and a manifest in the stream, the segment files in the
// directory, hard-linked where they are sealed (segments/linked.go), so a
// snapshot costs the indexes and the active file, not every payload.
type LinkingSink interface {
	raft.SnapshotSink
	LinkDir() string
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	var (
		n   int64
		err error
	)
	if ls, ok := sink.(LinkingSink); ok {
		n, err = s.rs.WriteLinked(sink, ls.LinkDir())
	} else {
		n, err = s.rs.WriteTo(sink)
	}
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("stream snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("close snapshot sink: %w", err)
	}
	s.log.Info("snapshot persisted", "id", sink.ID(), "bytes", n)
	return nil
}

func (s *snapshot) Release() { s.rs.Close() }

// ExpandSnapshot returns the stream Restore reads from a stored snapshot
// whose extra files (a LinkingSink's directory) are in dir: a linked
// snapshot is expanded, with its exact length; any other stream is returned
// as it is, with size -1. Closing the result closes rc.
func ExpandSnapshot(rc io.ReadCloser, dir string) (io.ReadCloser, int64, error) {
	br := bufio.NewReader(rc)
	head, err := br.Peek(8)
	if err != nil || !segments.IsLinked(head) {
		// Not linked (or too short to tell): Restore judges it.
		return readCloser{br, rc}, -1, nil
	}
	ex, size, err := segments.ExpandLinked(br, dir)
	if err != nil {
		rc.Close()
		return nil, 0, fmt.Errorf("expand linked snapshot: %w", err)
	}
	return readCloser{ex, closers{ex, rc}}, size, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

type closers []io.Closer

func (cs closers) Close() error {
	var err error
	for _, c := range cs {
		err = errors.Join(err, c.Close())
	}
	return err
}

// Restore replaces the whole state with a snapshot stream: it is written
// beside the current state (a side database file and a new blob directory),
// fsynced and verified, then swapped in atomically by renaming the database
// file. On any failure the current state stays.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	tmp, err := segments.ReceiveSnapshot(rc, f.dbPath())
	if err != nil {
		return fmt.Errorf("receive snapshot: %w", err)
	}
	applied, err := f.swapIn(tmp)
	if err != nil {
		return err
	}
	f.log.Info("state restored from snapshot", "applied_index", applied)
	f.notify(&Events{Index: applied, All: true, Nodes: true})
	return nil
}

func (f *FSM) swapIn(tmp string) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Rename before letting the current store go: if the rename fails, the
	// current state stays whole and in use. After it, the current store
	// still reads its file through its open descriptors.
	if err := os.Rename(tmp, f.dbPath()); err != nil {
		return 0, fmt.Errorf("swap in snapshot: %w", err)
	}
	if old := f.store; old != nil {
		f.store = nil
		f.writesBefore = f.writesBefore.Plus(old.WriteStats())
		// Closing a store waits for its bbolt readers (its blob files
		// close first: a snapshot still streaming from them fails with
		// segments.ErrClosed, DESIGN.md), and one of them may be a
		// snapshot Raft has not released: Raft installs a leader's snapshot
		// on its main loop, and its snapshot goroutine, holding an
		// FSMSnapshot, may be waiting on that loop. So the old store closes
		// on its own goroutine once its readers are done.
		f.retiring.Go(func() {
			if err := old.Close(); err != nil {
				f.log.Warn("closing the state replaced by a snapshot", "error", err)
			}
		})
	}
	// From here the file at dbPath is the snapshot's, so serving the old
	// store would answer from a state the node no longer has on disk. If
	// the new one cannot be opened, the state machine stops: applies fail
	// loudly (ApplyBatch panics with lost), and a restart restores it.
	if err := segments.SyncDir(f.cfg.Dir); err != nil {
		// Harmless beyond a warning: if the rename is lost to a machine
		// crash, the state found at start is older than the newest
		// snapshot, and the node restores it then (raftnode.restoreIfBehind).
		f.log.Warn("syncing the state directory after a restore", "error", err)
	}
	st, err := segments.Open(f.dbPath(), f.storeOptions())
	if err != nil {
		f.lost = fmt.Errorf("reopen restored state: %w", err)
		return 0, f.lost
	}
	f.store, f.lost = st, nil
	var applied uint64
	if err := st.View(func(tx *segments.Tx) error { applied = tx.Applied(); return nil }); err != nil {
		return 0, err
	}
	f.setApplied(applied)
	return applied, nil
}

// writeFileSync writes b to a new file at path and fsyncs it (the state
// marker, renamed into place after).
func writeFileSync(path string, b []byte) error {
	out, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := out.Write(b); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// SnapshotHeld measures the segment files only the snapshots in dirs
// (newest first) still hold: what reaping or retaking them would free
// (raftnode's reclaim).
func (f *FSM) SnapshotHeld(dirs []string) (segments.SnapshotHeld, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return segments.SnapshotHeld{}, f.closedErr()
	}
	return f.store.SnapshotHeld(dirs)
}
