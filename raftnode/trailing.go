package raftnode

import (
	"sync"

	"github.com/hashicorp/raft"
)

// entrySizes remembers the sizes of the newest applied entries, so that the
// log a snapshot leaves behind can be bounded in bytes as well as in
// entries (trailingFor).
//
// Raft keeps TrailingLogs entries after each snapshot, a count; an entry's
// size follows load (a group commit of pushes is tens to hundreds of KiB, a
// lone pop a few dozen bytes), so 16,384 entries of a produce burst are
// over a gigabyte of log on every node, and bbolt's file never gives its
// pages back. The sizes are this process's view: the state machine sees
// the command entries, not Raft's no-ops and barriers, which are a few
// bytes each, so the count errs towards fewer bytes kept.
type entrySizes struct {
	mu    sync.Mutex // held briefly by Raft's FSM goroutine and the snapshot trigger
	sizes []uint32   // ring of the newest len(sizes) entries' sizes
	next  int        // where the next size goes
	n     int        // sizes held, up to len(sizes)
}

func newEntrySizes(capacity uint64) *entrySizes {
	// The ring never needs to hold more than TrailingLogs entries: Raft
	// would keep no more than that anyway. A million entries bound its
	// memory (4 MiB) for a node configured to keep more.
	return &entrySizes{sizes: make([]uint32, max(1, min(capacity, 1<<20)))}
}

func (s *entrySizes) add(logs ...*raft.Log) {
	s.mu.Lock()
	for _, l := range logs {
		s.sizes[s.next] = uint32(min(len(l.Data), 1<<32-1))
		s.next = (s.next + 1) % len(s.sizes)
		s.n = min(s.n+1, len(s.sizes))
	}
	s.mu.Unlock()
}

// trailingFor is how many of the newest entries to keep after a snapshot:
// the most whose sizes add up to no more than budget (at least one), and
// at most limit. When every entry it remembers fits in the budget it knows
// nothing of older ones (the node restarted, or the log is young), so it
// keeps limit and leaves the bytes unbounded until it has seen enough.
func (s *entrySizes) trailingFor(budget, limit uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var total uint64
	i := s.next
	for k := 0; k < s.n && uint64(k) < limit; k++ {
		i = (i - 1 + len(s.sizes)) % len(s.sizes)
		total += uint64(s.sizes[i])
		if total > budget {
			return max(1, uint64(k))
		}
	}
	return limit
}
