package raftnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// DESIGN.md "Stores and transport": on start the node restores the newest
// snapshot when the state file is behind it, and the file counts as behind
// only when the log holds an entry the state machine applies between the
// file's applied index and the snapshot's. That look reads this node's own
// log, which may hold entries no leader committed: a deposed leader's
// barriers, say, that the new leader's entries replace.
//
// Node B led term T1 and appended barriers after index k, its state file's
// applied index, that no other node received. A leader of a later term
// committed commands at those indices, snapshotted at S and compacted its
// log, so it sent B that snapshot (InstallSnapshot): B stored it and was
// SIGKILLed before its state machine restored it. B's log then holds only
// barriers between k and S, of term T1, while the snapshot (term T2) holds
// commands there. Raft starts applying after S, so unless the node restores
// the snapshot its state never gets those commands: it diverges from every
// other replica for good.
func TestRestartRestoresASnapshotWhoseEntriesTheLogHoldsOnlyAsStaleOnes(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig("n1", freeAddr(t), dir, nil)
	n := startNode(t, cfg)
	waitLeader(t, n)
	for i := range 3 {
		if _, _, err := n.node.Propose(context.Background(), push("q", fmt.Sprintf("k%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	k := n.fsm.AppliedIndex()
	n.stop()

	// B: this node as it was at k.
	bdir := filepath.Join(t.TempDir(), "b")
	copyTreeAsCrashed(t, dir, bdir)

	// The cluster goes on in a later term: commands after k, a snapshot at
	// the last of them.
	n = startNode(t, cfg)
	waitLeader(t, n)
	var s uint64
	for i := range 3 {
		_, idx, err := n.node.Propose(context.Background(), push("q", fmt.Sprintf("s%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		s = idx
	}
	if err := n.node.Snapshot(); err != nil {
		t.Fatal(err)
	}
	_, want, err := n.fsm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	n.stop()
	snaps, err := raft.NewFileSnapshotStore(filepath.Join(dir, "raft"), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("snapshots: %v %v", list, err)
	}
	snap := list[0]
	if snap.Index != s {
		t.Fatalf("snapshot at index %d, want the last command's %d", snap.Index, s)
	}

	// B's own log: barriers of its term T1 from k+1 to S.
	store, err := openLogStore(filepath.Join(bdir, "raft", logFile))
	if err != nil {
		t.Fatal(err)
	}
	pieces := newPieceLog(store)
	var last raft.Log
	if err := pieces.GetLog(k, &last); err != nil {
		t.Fatal(err)
	}
	if last.Term >= snap.Term {
		t.Fatalf("B's term %d is not older than the snapshot's %d", last.Term, snap.Term)
	}
	var stale []*raft.Log
	for i := k + 1; i <= s; i++ {
		stale = append(stale, &raft.Log{Index: i, Term: last.Term, Type: raft.LogBarrier})
	}
	if err := pieces.StoreLogs(stale); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	// The snapshot B stored from the leader's InstallSnapshot.
	if err := os.CopyFS(filepath.Join(bdir, "raft", "snapshots", snap.ID), os.DirFS(filepath.Join(dir, "raft", "snapshots", snap.ID))); err != nil {
		t.Fatal(err)
	}

	b := startNode(t, fastConfig("n1", freeAddr(t), bdir, nil))
	if got := b.fsm.AppliedIndex(); got < s {
		t.Fatalf("B started with its state at index %d under a snapshot of index %d whose commands its log holds only as stale barriers: not restored, and Raft applies only after %d", got, s, s)
	}
	if _, got, err := b.fsm.Digest(); err != nil || got != want {
		t.Fatalf("B's state after start differs from the snapshot's (%v)", err)
	}
}
