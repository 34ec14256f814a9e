package raftnode

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// leaderAppendStore is the Raft log as Raft writes it: on the leader, an
// entry is written to its own disk while it is being replicated, not before.
//
// hashicorp/raft's leader stores an entry (raft-boltdb: a bbolt commit, two
// fdatasyncs) and only then hands it to the replicators, so a commit costs
// the leader's write plus a follower's, in series. Section 10.2.1 of
// Ongaro's thesis lets the leader write its log in parallel with
// replication, as etcd does, provided the leader's own copy is not counted
// towards a commit before it is durable. hashicorp/raft counts it as soon as
// StoreLogs returns, and cannot be told otherwise, so instead nothing that
// depends on the commit may happen before the leader's copy is durable:
//
//   - the leader applies an entry only once it is durable here
//     (waitDurable, called by the state machine as Raft sees it), so a
//     client is answered, and a linearizable read served, only after a
//     majority holds the entry on disk: the leader and the follower whose
//     acknowledgment made the commit (a follower stores before it answers);
//   - the followers hear of a commit index only up to what the leader holds
//     on disk (clampCommit, applied to every AppendEntries the leader
//     sends), so no node applies an entry that one durable copy and the
//     leader's page cache committed, and that a new leader could overwrite
//     if the leader's machine lost power.
//
// A follower (and a node not yet running Raft: bootstrap, the restore at
// start) writes synchronously, as before: it acknowledges an append only
// once it is durable. Raft calls StoreLogs from its main goroutine only,
// where the state changes too, so the leading check is exact; a leader
// that steps down has its pending writes finished before its first write as
// a follower, and before any DeleteRange touching them.
//
// A write that fails leaves entries counted towards commits that are not on
// this disk: the node cannot go on (fatal), as etcd panics on a failed WAL
// write.
type leaderAppendStore struct {
	store   raft.LogStore
	leading func() bool
	fatal   func(error)

	mu      sync.Mutex // guards the fields below; never held while writing
	changed *sync.Cond // pending shrank, or failed was set
	// pending holds the entries handed to StoreLogs and not yet durable,
	// contiguous from pendingFrom (0: none).
	pending     []*raft.Log
	pendingFrom uint64
	failed      error
	closed      bool
	wake        chan struct{} // tells the writer pending grew; capacity 1
	done        chan struct{} // closed when the writer has returned

	// durableTo is the highest index such that no entry at or below it is
	// waiting to be written (allDurable when nothing is pending), read
	// without the lock on every AppendEntries.
	durableTo atomic.Uint64

	// beforeWrite, when set, runs before each background write: tests hold
	// the leader's disk with it.
	beforeWrite atomic.Pointer[func()]
}

const allDurable = ^uint64(0)

func newLeaderAppendStore(store raft.LogStore, leading func() bool, fatal func(error)) *leaderAppendStore {
	s := &leaderAppendStore{store: store, leading: leading, fatal: fatal,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	s.changed = sync.NewCond(&s.mu)
	s.durableTo.Store(allDurable)
	go s.write()
	return s
}

// StoreLogs writes logs in the background on the leader, synchronously
// otherwise.
func (s *leaderAppendStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	if s.leading() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.failed != nil {
			return s.failed
		}
		if s.closed {
			return errors.New("raft log store closed")
		}
		if len(s.pending) == 0 {
			s.pendingFrom = logs[0].Index
			s.durableTo.Store(logs[0].Index - 1)
		} else if want := s.pendingFrom + uint64(len(s.pending)); logs[0].Index != want {
			// A leader only appends; anything else is a bug here or in Raft.
			return fmt.Errorf("raft log: leader appends index %d after pending %d", logs[0].Index, want-1)
		}
		s.pending = append(s.pending, logs...)
		select {
		case s.wake <- struct{}{}:
		default:
		}
		return nil
	}
	if err := s.drain(0, allDurable); err != nil {
		return err
	}
	return s.store.StoreLogs(logs)
}

// StoreLog is StoreLogs of one entry.
func (s *leaderAppendStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// GetLog serves a pending entry from memory: the replicators read entries
// that may not be on disk yet.
func (s *leaderAppendStore) GetLog(index uint64, out *raft.Log) error {
	s.mu.Lock()
	if n := len(s.pending); n > 0 && index >= s.pendingFrom && index < s.pendingFrom+uint64(n) {
		*out = *s.pending[index-s.pendingFrom]
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	return s.store.GetLog(index, out)
}

// LastIndex counts pending entries.
func (s *leaderAppendStore) LastIndex() (uint64, error) {
	s.mu.Lock()
	if n := len(s.pending); n > 0 {
		last := s.pendingFrom + uint64(n) - 1
		s.mu.Unlock()
		return last, nil
	}
	s.mu.Unlock()
	return s.store.LastIndex()
}

// FirstIndex waits for pending entries when the store may hold none yet.
func (s *leaderAppendStore) FirstIndex() (uint64, error) {
	first, err := s.store.FirstIndex()
	if err != nil || first != 0 {
		return first, err
	}
	if err := s.drain(0, allDurable); err != nil {
		return 0, err
	}
	return s.store.FirstIndex()
}

// DeleteRange waits until no pending entry lies in [min, max]: a follower
// truncating a conflicting suffix must not have it written back afterwards.
func (s *leaderAppendStore) DeleteRange(min, max uint64) error {
	if err := s.drain(min, max); err != nil {
		return err
	}
	return s.store.DeleteRange(min, max)
}

// drain waits until no pending entry lies in [min, max].
func (s *leaderAppendStore) drain(min, max uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.failed == nil && len(s.pending) > 0 &&
		s.pendingFrom <= max && s.pendingFrom+uint64(len(s.pending))-1 >= min {
		s.changed.Wait()
	}
	return s.failed
}

// waitDurable returns once the entry at index is on this node's disk.
func (s *leaderAppendStore) waitDurable(index uint64) error {
	if s.durableTo.Load() >= index {
		return nil
	}
	return s.drain(0, index)
}

// clampCommit lowers a commit index to what this node holds on disk.
func (s *leaderAppendStore) clampCommit(commit uint64) uint64 {
	return min(commit, s.durableTo.Load())
}

// write stores pending entries, all that queued meanwhile in one
// transaction.
func (s *leaderAppendStore) write() {
	defer close(s.done)
	for range s.wake {
		for {
			s.mu.Lock()
			if len(s.pending) == 0 || s.failed != nil {
				s.mu.Unlock()
				break
			}
			batch := s.pending
			s.mu.Unlock()

			if f := s.beforeWrite.Load(); f != nil {
				(*f)()
			}
			err := s.store.StoreLogs(batch)

			if err != nil {
				err = fmt.Errorf("raft log: leader's write of entries %d-%d failed: %w",
					batch[0].Index, batch[len(batch)-1].Index, err)
				// fatal runs before the failure is visible: no waiter
				// learns of it, and nothing depending on these entries
				// acts, before the node is being stopped. Entries
				// appended meanwhile stay pending, not durable.
				s.fatal(err)
				s.mu.Lock()
				s.failed = err
				s.changed.Broadcast()
				s.mu.Unlock()
				break
			}
			s.mu.Lock()
			// Entries appended meanwhile stay pending; the written ones
			// leave the front. A fresh slice, so that the old array's
			// front does not keep written entries (hundreds of KiB
			// each) alive until an append outgrows it.
			rest := s.pending[len(batch):]
			s.pending = append([]*raft.Log(nil), rest...)
			s.pendingFrom += uint64(len(batch))
			if len(s.pending) == 0 {
				s.pendingFrom = 0
				s.durableTo.Store(allDurable)
			} else {
				s.durableTo.Store(s.pendingFrom - 1)
			}
			s.changed.Broadcast()
			s.mu.Unlock()
		}
	}
}

// Close finishes pending writes and stops the writer; the store itself is
// closed by its owner.
func (s *leaderAppendStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return s.failed
	}
	s.closed = true
	s.mu.Unlock()
	close(s.wake)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// clampingTransport is the node's transport with every AppendEntries'
// commit index lowered to what this node's log holds on disk (see
// leaderAppendStore). Only a leader sends AppendEntries.
type clampingTransport struct {
	transportLayer
	log *leaderAppendStore
}

func (t clampingTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	args.LeaderCommitIndex = t.log.clampCommit(args.LeaderCommitIndex)
	return t.Transport.AppendEntries(id, target, args, resp)
}

func (t clampingTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.Transport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return clampingPipeline{AppendPipeline: p, log: t.log}, nil
}

type clampingPipeline struct {
	raft.AppendPipeline
	log *leaderAppendStore
}

func (p clampingPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	args.LeaderCommitIndex = p.log.clampCommit(args.LeaderCommitIndex)
	return p.AppendPipeline.AppendEntries(args, resp)
}
