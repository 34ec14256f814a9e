package fsm

import (
	"fmt"

	"github.com/crownmq/crown/segments"
)

// Deduplication outlives a deleted message (queen-api.md 4.13: inside the
// window a repeated id is a duplicate). A retention or maxWait sweep and a
// message DELETE remember each id they delete whose dedup window is still
// open (segments/dedup.go); a push consults that memory when the id is not
// stored; ForgetDeletedTxIDs, proposed by the leader's sweep timer, drops
// what expired. An OJS purge forgets on purpose: OJS frees a purged job's
// unique key (ojs-queues.md 6.7).

// TypeForgetDeletedTxIDs drops remembered deletions whose window closed.
const TypeForgetDeletedTxIDs Type = 38

// ForgetDeletedTxIDs drops up to Max remembered deletions of transaction ids
// whose dedup window closed at or before the entry's time.
type ForgetDeletedTxIDs struct {
	_msgpack struct{} `msgpack:",as_array"`
	Max      uint32
}

func (*ForgetDeletedTxIDs) Type() Type { return TypeForgetDeletedTxIDs }

// Validate checks the command's limits.
func (c *ForgetDeletedTxIDs) Validate() error {
	if c.Max == 0 {
		return fmt.Errorf("forgetting deleted transaction ids with a budget of 0")
	}
	return nil
}

// ForgetDeletedTxIDsResult answers a ForgetDeletedTxIDs.
type ForgetDeletedTxIDsResult struct {
	Forgot uint64
	More   bool
}

func applyForgetDeletedTxIDs(a *applier, c *ForgetDeletedTxIDs) any {
	n, more := must2(a.tx.ForgetDeletedTxIDs(a.now, int(c.Max)))
	return &ForgetDeletedTxIDsResult{Forgot: uint64(n), More: more}
}

// dedupUntil is when q's dedup window closes for a message pushed at
// pushedAt, or 0 when it is already closed (or deduplication is off). A
// push is a duplicate while pushedAt >= now - window (push.go), so the
// window's last instant, pushedAt + window, is inside it and the window is
// closed from the microsecond after: that is the time returned, as the
// memory is kept while its time is after now and forgotten once it is not
// (segments.ForgetDeletedTxIDs).
func (a *applier) dedupUntil(q *segments.Queue, pushedAt int64) int64 {
	w := q.Options.DedupWindowSeconds
	if w <= 0 {
		return 0
	}
	if until := pushedAt + Micros(w) + 1; until > a.now {
		return until
	}
	return 0
}

// rememberSegment remembers the ids of p's segment starting at si.First
// before a sweep deletes it, when q's dedup window still covers it.
func (a *applier) rememberSegment(q *segments.Queue, p *segments.Partition, si segments.SegmentInfo) {
	until := a.dedupUntil(q, si.CreatedAt)
	if until == 0 {
		return
	}
	must(a.tx.IndexedTxIDs(p, si.First, func(txid string, ref segments.TxRef) error {
		return a.tx.RememberDeletedTxID(q.ID, p.ID, txid, ref, until)
	}))
}

// DeletedTxIDsDue reports whether a remembered deletion's window closed at
// or before now, or before the state's time when that is later (an entry
// stamped now applies at it): the leader's sweep timer then proposes
// ForgetDeletedTxIDs.
func (f *FSM) DeletedTxIDsDue(now int64) (bool, error) {
	var due bool
	err := f.View(func(tx *segments.Tx) error {
		var err error
		due, err = tx.DeletedTxIDsDue(max(now, tx.Now()))
		return err
	})
	return due, err
}
