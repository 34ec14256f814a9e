package raftnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/segments"
)

// Reclaiming the space of dead segment files on a quiet node.
//
// A snapshot hard-links the sealed segment files (segments/linked.go), so a
// file that retention, acknowledgment or a deletion empties keeps its space
// until no kept snapshot links it, that is after two more snapshots. Raft
// snapshots after log (SnapshotLogBytes), which a quiet cluster does not
// write: one that went idle after deleting a large queue kept that space
// for as long as it stayed idle. So every ReclaimCheck a node that applied
// less than reclaimQuietBytes of log since the last check, and whose
// snapshots hold at least ReclaimBytes of dead files, takes a snapshot
// when its newest one holds some of them, then removes every snapshot but
// the newest. It then keeps one snapshot rather than two until the next.
//
// A busy node is left to the log-bytes trigger: a snapshot copies the state
// file and costs the commits around it (snappolicy.go), and a consumer
// draining a backlog empties files continuously.
const reclaimQuietBytes = 1 << 20

// reclaimer is the reclaim check's own state, kept by snapshotOnLogBytes.
type reclaimer struct {
	next    time.Time // zero until the first tick sets the node's phase
	applied uint64    // the node's applied log bytes at the last check
}

// maybeReclaim runs the check when it is due.
func (n *Node) maybeReclaim(r *reclaimer, now time.Time) {
	if n.cfg.ReclaimBytes == 0 {
		return
	}
	if r.next.IsZero() {
		// A deletion makes every node's snapshots hold its files at the
		// same entry, and nodes started together checked at the same
		// moments: each copied its state file for the reclaim's snapshot
		// within milliseconds of the others. The first check comes at
		// the node's share of the interval, as firstSnapshotAt staggers
		// the log-bytes trigger.
		rank, voters := n.voterRank()
		r.next = now.Add(time.Duration(firstSnapshotAt(uint64(n.cfg.ReclaimCheck), rank, voters)))
		return
	}
	if now.Before(r.next) {
		return
	}
	r.next = now.Add(n.cfg.ReclaimCheck)
	applied := n.counted.applied.Load()
	quiet := applied-r.applied < reclaimQuietBytes
	r.applied = applied
	if !quiet {
		return
	}
	if err := n.reclaim(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
		n.log.Warn("cannot reclaim the space snapshots hold; trying again later", "error", err, "retry_in", n.cfg.ReclaimCheck)
	}
}

// reclaim frees the dead segment files the snapshots hold, if they are
// ReclaimBytes or more.
func (n *Node) reclaim() error {
	held, err := n.snapshotHeld()
	if err != nil {
		return err
	}
	if held.Total() < int64(n.cfg.ReclaimBytes) {
		return nil
	}
	if held.Newest > 0 {
		// A file dies in an apply, after the snapshot that links it, so
		// there is always something new to snapshot here; should there
		// not be, the older snapshots are still removed below.
		if err := n.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	if err := n.snaps.removeOlder(); err != nil {
		return err
	}
	after, err := n.snapshotHeld()
	if err != nil {
		return err
	}
	// Nothing freed (a newest snapshot with nothing new to take after
	// it) would say so every check: not worth an info line each time.
	lvl := slog.LevelInfo
	if after.Total() >= held.Total() {
		lvl = slog.LevelDebug
	}
	n.log.Log(context.Background(), lvl, "took back the space of segment files only snapshots held",
		"bytes", held.Total()-after.Total(), "still_held", after.Total())
	return nil
}

// snapshotHeld measures the dead segment files this node's snapshots hold.
func (n *Node) snapshotHeld() (segments.SnapshotHeld, error) {
	list, err := n.snaps.List()
	if err != nil {
		return segments.SnapshotHeld{}, fmt.Errorf("list snapshots: %w", err)
	}
	dirs := make([]string, len(list))
	for i, m := range list {
		dirs[i] = filepath.Join(n.snaps.dir, m.ID)
	}
	return n.fsm.SnapshotHeld(dirs)
}

// removeOlder removes every snapshot older than the newest readable one.
// Only snapshots the listing names are removed: one that finishes
// meanwhile is newer than the listing's newest, and stays with it.
func (s *linkingStore) removeOlder() error {
	list, err := s.List()
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	for _, m := range list[min(1, len(list)):] {
		if err := os.RemoveAll(filepath.Join(s.dir, m.ID)); err != nil {
			return fmt.Errorf("remove snapshot %s: %w", m.ID, err)
		}
	}
	return nil
}
