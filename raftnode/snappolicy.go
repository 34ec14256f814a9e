package raftnode

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/fsm"
)

// logBytesFSM is the state machine as Raft sees it: the same state machine,
// counting the bytes of the log entries it applies so the node can take a
// snapshot when the log since the last one is large (snapshotOnLogBytes).
//
// Raft's own trigger counts entries, and an entry's size varies a
// thousandfold with load: a group commit of pushes is tens of KiB, a lone
// pop a few dozen bytes. Counting entries, consume traffic snapshotted after
// a few MB of log while a produce burst filled hundreds of MB; a snapshot
// costs the same in either case (it copies the state database), and what
// the log costs, disk and catch-up reads, is its bytes. rqlite triggers on
// its WAL's size for the same reason. Raft's entry count stays as a
// backstop for floods of tiny entries.
//
// The counts are this process's view, not replicated state: after a restart
// the bytes applied before it are not counted again, so the first snapshot
// after a restart may come up to one threshold late.
type logBytesFSM struct {
	*fsm.FSM
	applied atomic.Uint64 // bytes of entries applied since this process started
	covered atomic.Uint64 // of those, the bytes the newest snapshot holds
	// snapshotted is set once a snapshot was persisted or restored since
	// this process started; until then the node's first threshold is
	// staggered (firstSnapshotAt).
	snapshotted atomic.Bool
	sizes       *entrySizes // the newest entries' sizes, for the trailing log's bound
	// durable returns once this node's log holds the entry at an index on
	// disk: a leader applies only what it has written (leaderappend.go).
	durable func(index uint64) error
}

// mustBeDurable waits until the entry at index is on this node's disk. An
// entry whose write failed cannot be applied, nor skipped.
func (c *logBytesFSM) mustBeDurable(index uint64) {
	if err := c.durable(index); err != nil {
		panic(fmt.Errorf("apply entry %d: %w", index, err))
	}
}

func (c *logBytesFSM) Apply(l *raft.Log) any {
	c.mustBeDurable(l.Index)
	c.applied.Add(uint64(len(l.Data)))
	c.sizes.add(l)
	return c.FSM.Apply(l)
}

func (c *logBytesFSM) ApplyBatch(logs []*raft.Log) []any {
	if len(logs) > 0 {
		c.mustBeDurable(logs[len(logs)-1].Index)
	}
	var n uint64
	for _, l := range logs {
		n += uint64(len(l.Data))
	}
	c.applied.Add(n)
	c.sizes.add(logs...)
	return c.FSM.ApplyBatch(logs)
}

// Snapshot runs on Raft's FSM goroutine, between applies, so the count it
// reads is exactly what the snapshot will hold. The count moves to covered
// only once the snapshot is persisted: a failed one leaves the bytes
// pending and the trigger fires again.
func (c *logBytesFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := c.FSM.Snapshot()
	if err != nil {
		return nil, err
	}
	return &countedSnapshot{FSMSnapshot: s, owner: c, upTo: c.applied.Load()}, nil
}

// Restore replaces the state with a snapshot from the leader: every byte
// applied so far is superseded by it.
func (c *logBytesFSM) Restore(rc io.ReadCloser) error {
	if err := c.FSM.Restore(rc); err != nil {
		return err
	}
	c.cover(c.applied.Load())
	c.snapshotted.Store(true)
	return nil
}

// sinceSnapshot is the number of log bytes applied that no persisted or
// restored snapshot holds.
func (c *logBytesFSM) sinceSnapshot() uint64 {
	covered := c.covered.Load()
	applied := c.applied.Load()
	if applied < covered {
		return 0
	}
	return applied - covered
}

// cover records that a snapshot holds the first upTo bytes. Snapshots may
// finish out of order (a user snapshot and Raft's own), so it only grows.
func (c *logBytesFSM) cover(upTo uint64) {
	for {
		old := c.covered.Load()
		if upTo <= old || c.covered.CompareAndSwap(old, upTo) {
			return
		}
	}
}

type countedSnapshot struct {
	raft.FSMSnapshot
	owner *logBytesFSM
	upTo  uint64
}

func (s *countedSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.FSMSnapshot.Persist(sink); err != nil {
		return err
	}
	s.owner.cover(s.upTo)
	s.owner.snapshotted.Store(true)
	return nil
}

// firstSnapshotAt staggers the nodes' snapshots. Every node applies the
// same log, so nodes started together would all reach the threshold at the
// same entry and snapshot at once: each copies its state file, and for a
// second or two every node's disk is busy, commits on all of them slow
// down, and the cluster's latency spikes (a run at half the push rate on
// the test host: p99 172 ms with three simultaneous snapshots, 75-78 ms
// with the same snapshots a few seconds apart). So the node ranked r of n
// voters (by id) takes its first snapshot at (r+1)/n of the threshold and
// then one per threshold, which keeps the nodes a third of a threshold
// apart; a node that restarts lands at a phase of its own, which rarely
// meets another's since a snapshot takes a small part of a threshold's
// traffic.
func firstSnapshotAt(threshold uint64, rank, voters int) uint64 {
	if voters <= 1 || rank < 0 || rank >= voters {
		return threshold
	}
	return threshold / uint64(voters) * uint64(rank+1)
}

// voterRank is this node's position among the voters sorted by id, and
// their number; (-1, 0) when it is not a voter or the configuration cannot
// be read.
func (n *Node) voterRank() (int, int) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return -1, 0
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			ids = append(ids, string(s.ID))
		}
	}
	slices.Sort(ids)
	return slices.Index(ids, n.cfg.NodeID), len(ids)
}

// snapshotOnLogBytes asks Raft for a snapshot whenever the log applied since
// the last one reaches SnapshotLogBytes (the first time, a share of it:
// firstSnapshotAt). It runs on every node: each keeps and compacts its own
// log. After a failure it waits SnapshotInterval before trying again, so a
// full disk is reported, not hammered.
func (n *Node) snapshotOnLogBytes() {
	tick := time.NewTicker(n.cfg.SnapshotLogCheck)
	defer tick.Stop()
	var rec reclaimer
	for {
		select {
		case <-n.stopped:
			return
		case now := <-tick.C:
			n.maybeReclaim(&rec, now)
		}
		n.boundTrailingLog()
		pending := n.counted.sinceSnapshot()
		limit := n.cfg.SnapshotLogBytes
		if !n.counted.snapshotted.Load() {
			rank, voters := n.voterRank()
			limit = firstSnapshotAt(limit, rank, voters)
		}
		if pending < limit {
			continue
		}
		// scripts/bench-targets.sh counts these lines to name the nodes that
		// snapshotted during a latency run: keep the message's start.
		n.log.Info("taking a snapshot: log since the last one over threshold", "bytes", pending, "threshold", limit)
		err := n.raft.Snapshot().Error()
		switch {
		case err == nil:
		case errors.Is(err, raft.ErrNothingNewToSnapshot):
			// The newest snapshot already holds everything applied: count
			// it as held rather than asking again every tick.
			n.counted.cover(n.counted.applied.Load())
		case errors.Is(err, raft.ErrRaftShutdown):
			return
		default:
			n.log.Warn("snapshot failed; retrying later", "err", err, "retry_in", n.cfg.SnapshotInterval)
			select {
			case <-n.stopped:
				return
			case <-time.After(n.cfg.SnapshotInterval):
			}
		}
	}
}

// boundTrailingLog sets how many entries Raft keeps after its next
// snapshot, ours or its own: TrailingLogs, fewer when the newest of them
// add up to more than TrailingLogBytes (trailing.go). Raft reads the
// setting when it compacts, so it is kept current on every check rather
// than only before the snapshots this goroutine asks for.
func (n *Node) boundTrailingLog() {
	want := n.counted.sizes.trailingFor(n.cfg.TrailingLogBytes, n.cfg.TrailingLogs)
	rc := n.raft.ReloadableConfig()
	if rc.TrailingLogs == want {
		return
	}
	rc.TrailingLogs = want
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.log.Warn("cannot bound the trailing log", "trailing_logs", want, "err", err)
	}
}
