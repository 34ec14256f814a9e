package raftnode

import (
	"sort"

	"github.com/hashicorp/raft"
)

// startFloor is the last command the log held when the node started, and
// the terms of the entries from the state machine's applied index up to it
// then: every write this node acknowledged before a restart is among those
// entries, and local reads wait until it is applied (httpapi's
// Config.ReadFloor). The log may also end in entries no leader committed (a
// leader that crashed with its last proposals unreplicated), which the next
// leader replaces; their index may then not be reached until the cluster
// commits that many more commands, which an idle cluster never does. The
// terms tell a replaced entry from the one the log held: a committed entry
// is never replaced, so every acknowledged write lies below the first one
// that was (FloorNow).
type startFloor struct {
	index uint64
	// runs are the terms of the entries after the applied index, in runs
	// of one term (a log's terms never decrease): run i covers indices
	// from runs[i].first to the next run's first, the last one to index.
	runs []termRun
	// known: every term was read, so a difference means a replacement.
	known bool
}

type termRun struct{ first, term uint64 }

// readStartFloor reads the floor from logs before Raft runs, so that no
// entry can be replaced while it is read.
func readStartFloor(logs raft.LogStore, applied uint64) startFloor {
	last, err := logs.LastIndex()
	if err != nil {
		return startFloor{index: applied}
	}
	f := startFloor{index: applied}
	for i := last; i > applied; i-- {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil || l.Type == raft.LogCommand {
			f.index = i
			break
		}
	}
	if f.index == applied {
		return f
	}
	term := func(i uint64) (uint64, bool) {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return 0, false
		}
		return l.Term, true
	}
	for i := applied + 1; i <= f.index; {
		t, ok := term(i)
		if !ok {
			return f
		}
		// The run of t ends before the first later index of a later term.
		n := int(f.index - i + 1)
		failed := false
		end := sort.Search(n, func(k int) bool {
			u, ok := term(i + uint64(k))
			failed = failed || !ok
			return !ok || u != t
		})
		if failed {
			return f
		}
		f.runs = append(f.runs, termRun{first: i, term: t})
		i += uint64(end)
	}
	f.known = true
	return f
}

// termAt is the term the entry at i had at start; i must be past the
// applied index then and at most index.
func (f *startFloor) termAt(i uint64) uint64 {
	k := sort.Search(len(f.runs), func(k int) bool { return f.runs[k].first > i })
	return f.runs[k-1].term
}

// StartFloor is the index of the last command in this node's log when it
// started (or its state machine's applied index if that was later): local
// reads wait until it is applied, so a write this node acknowledged before
// a restart is seen after it, although its state-file commit may have been
// deferred (fsm/DESIGN.md, "Deferred commits").
func (n *Node) StartFloor() uint64 { return n.floor.index }

// FloorNow is the index local reads must still wait for in place of floor
// (StartFloor, or a value FloorNow returned): the same, unless a leader has
// since replaced the entry at it, which was then never committed nor
// acknowledged. Then it is the last command below the first entry replaced
// (entries below that are those the log held at start), or what the state
// machine has applied if that is later.
func (n *Node) FloorNow(floor uint64) uint64 {
	f := &n.floor
	applied := n.fsm.AppliedIndex()
	if floor > f.index || !f.known || applied >= floor {
		return floor
	}
	for i := floor; i > applied; i-- {
		var l raft.Log
		if n.logs.GetLog(i, &l) == nil && l.Term == f.termAt(i) {
			return n.lastCommandAtOrBelow(i)
		}
	}
	return applied
}
