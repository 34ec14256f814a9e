package raftnode

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// DESIGN.md "Stores and transport": "on start the node restores the newest
// snapshot itself **only** when the state file is behind it (a new or
// discarded file)".
//
// A snapshot's index is the last entry Raft's state machine goroutine saw,
// and that includes barriers (Raft hands them to no state machine): the
// HTTP layer takes one per leadership term, and a read index one right after
// an election. A snapshot taken just after a barrier is at the barrier's
// index, above the state file's applied index (the last command) although
// the file holds everything the snapshot does. Such a node replaced its
// whole state file with the snapshot's copy on every start until the next
// command.
func TestRestartDoesNotRestoreASnapshotTheStateFileHolds(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	cfg := fastConfig("n1", addr, dir, nil)
	n := startNode(t, cfg)
	snapshotAfterPushes(t, n, 5)
	if err := n.node.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := n.node.Snapshot(); err != nil {
		t.Fatal(err)
	}
	applied := n.fsm.AppliedIndex()
	_, want, err := n.fsm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	n.stop()
	db := filepath.Join(dir, "state", "fsm.db")
	inode := func() uint64 {
		st, err := os.Stat(db)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	before := inode()
	n = startNode(t, cfg)
	waitLeader(t, n)
	if got := inode(); got != before {
		t.Errorf("the state file (applied %d, holding the newest snapshot's state) was replaced on start by a restore", applied)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.node.WaitApplied(ctx, applied); err != nil {
		t.Fatal(err)
	}
	if _, got, _ := n.fsm.Digest(); got != want {
		t.Fatal("state after restart differs")
	}
}
