package raftnode

import (
	"testing"

	"github.com/hashicorp/raft"
)

// The start floor records the terms of the entries past the applied index
// (in runs, a log's terms never decreasing) and tells the entries the log
// still holds from those a leader replaced.
func TestStartFloorTermsOfTheUnappliedTail(t *testing.T) {
	logs := raft.NewInmemStore()
	// Applied up to 3; entries 4-5 of term 2, 6 a barrier of term 3, 7-9
	// commands of term 3, 10 a no-op of term 4.
	var entries []*raft.Log
	add := func(index, term uint64, typ raft.LogType) {
		entries = append(entries, &raft.Log{Index: index, Term: term, Type: typ})
	}
	for i := uint64(1); i <= 5; i++ {
		add(i, 2, raft.LogCommand)
	}
	add(6, 3, raft.LogBarrier)
	for i := uint64(7); i <= 9; i++ {
		add(i, 3, raft.LogCommand)
	}
	add(10, 4, raft.LogNoop)
	if err := logs.StoreLogs(entries); err != nil {
		t.Fatal(err)
	}
	f := readStartFloor(logs, 3)
	if f.index != 9 || !f.known {
		t.Fatalf("floor %d (terms known %v), want 9: the last command", f.index, f.known)
	}
	want := []termRun{{4, 2}, {6, 3}}
	if len(f.runs) != len(want) || f.runs[0] != want[0] || f.runs[1] != want[1] {
		t.Fatalf("runs %v, want %v", f.runs, want)
	}
	for i, term := range map[uint64]uint64{4: 2, 5: 2, 6: 3, 8: 3, 9: 3} {
		if got := f.termAt(i); got != term {
			t.Errorf("term at %d: %d, want %d", i, got, term)
		}
	}
	if f := readStartFloor(logs, 9); f.index != 9 || f.known {
		t.Errorf("a log applied to its last command: floor %d, terms known %v", f.index, f.known)
	}
}
