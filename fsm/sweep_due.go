package fsm

import (
	"github.com/crownmq/crown/segments"
)

// Read-only checks the leader's timers run before proposing a sweep
// (maintenance/DESIGN.md, "An idle cluster's log stays still"). Each
// answers whether the command, applied at a time at or after now, would
// change the state; a timer proposes the command only when it would, so an
// idle cluster appends no entries.
//
// Each check reads the same records its apply reads, in the same order,
// with the same predicates, and evaluates them at max(now, the state's
// time): an entry stamped now applies at that time (applyEntry), and a new
// leader's clock may be behind the state's. Each relies on one
// monotonicity: for a fixed state, a later time condemns a superset of
// what an earlier time condemns (cutoffs only grow, leases only expire), so
// "not due" at now means "changes nothing" when applied at now or at any
// earlier time (a clock stepped back between the check and the stamp),
// and what becomes due later is found by the next tick's check.
// sweep_due_test.go compares every check with whether applying the command
// changed the state's digest.

// SweepDue reports whether a Sweep of queue (with a valid budget) would
// delete a segment: whether some partition holding messages has a first
// segment that a rule condemns. applySweep stops each partition at its
// first survivor, so a partition whose first segment survives contributes
// nothing, and a sweep that deletes nothing writes nothing.
//
// Monotonicity: every cutoff is now minus a fixed age, so a later time
// condemns more; the completed rule's other condition (at or before the
// slowest group's position) does not depend on time.
func (f *FSM) SweepDue(queue string, now int64) (due bool, err error) {
	if (&Sweep{Queue: queue, MaxSegments: 1}).Validate() != nil {
		return false, nil // refused at apply: changes nothing
	}
	err = f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		due, err = sweepDue(tx, queue, max(now, tx.Now()))
		return err
	})
	return due, err
}

func sweepDue(tx *segments.Tx, queue string, now int64) (bool, error) {
	q, err := tx.Queue(queue)
	if err != nil || q == nil {
		return false, err
	}
	cut := cutoffsOf(&q.Options, now)
	if cut == (sweepCutoffs{}) {
		return false, nil
	}
	due := false
	err = tx.ForEachPartition(q.ID, "", func(p *segments.Partition) (bool, error) {
		if p.Messages == 0 {
			return true, nil // applySweep skips it
		}
		var first segments.SegmentInfo
		found := false
		if err := tx.Segments(p, func(si segments.SegmentInfo) (bool, error) {
			first, found = si, true
			return false, nil
		}); err != nil {
			return false, err
		}
		if !found {
			return true, nil
		}
		slowest, groups, err := slowestGroup(tx, p.ID)
		if err != nil {
			return false, err
		}
		rule := condemnedBy(cut, first, slowest, groups)
		if rule >= 0 {
			due = true
			return false, nil
		}
		return true, nil
	})
	return due, err
}

// slowestGroup is the lowest position of partition pid's groups and how
// many it has: the completed rule deletes only what every group has read,
// and nothing of a partition no group has read.
func slowestGroup(tx *segments.Tx, pid uint64) (slowest uint64, groups int, err error) {
	err = tx.ForEachGroup(pid, func(_ string, g *segments.Group) (bool, error) {
		if groups == 0 || g.Next < slowest {
			slowest = g.Next
		}
		groups++
		return true, nil
	})
	return slowest, groups, err
}

// condemnedBy is the rule a Sweep deletes si by at the cutoffs cut, -1 for
// none; slowest and groups are slowestGroup's for si's partition. applySweep
// and SweepDue both decide with it.
func condemnedBy(cut sweepCutoffs, si segments.SegmentInfo, slowest uint64, groups int) int {
	switch {
	case cut[RuleMaxWait] != 0 && si.CreatedAt < cut[RuleMaxWait]:
		return RuleMaxWait
	case cut[RuleRetention] != 0 && si.CreatedAt < cut[RuleRetention]:
		return RuleRetention
	case cut[RuleCompleted] != 0 && si.CreatedAt < cut[RuleCompleted] && groups > 0 && si.First+si.Count <= slowest:
		return RuleCompleted
	}
	return -1
}

// LeasesDue reports whether an ExpireLeases{Grace: grace, Max: batch,
// From: from} would clear or unindex a lease record: whether, among the
// index entries the command inspects (batch*8 from from on), one is stale
// at now - grace. It stops at the first stale entry; applyExpireLeases
// stops at batch stale ones or batch*8 inspected, so it inspects at least
// as many. When none is due, next is where the following window starts
// (the command's own ExpireLeasesResult.Next), so the leader's timer moves
// over the index without proposing anything.
//
// Monotonicity: a lease's staleness compares its expiry (or the expiry of
// a superseded lease) with now - grace, which only grows; a record whose
// holder no longer has it is stale at any time. The entries inspected do
// not depend on time.
func (f *FSM) LeasesDue(now, grace int64, batch uint32, from [16]byte) (due bool, next [16]byte, err error) {
	if (&ExpireLeases{Grace: grace, Max: batch, From: from}).Validate() != nil {
		return false, [16]byte{}, nil
	}
	err = f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		cutoff := max(now, tx.Now()) - grace
		scanned := 0
		return tx.ForEachLeaseFrom(from, func(lease [16]byte, pid uint64, group string, superseded int64) (bool, error) {
			scanned++
			g, err := tx.Group(pid, group)
			if err != nil {
				return false, err
			}
			if leaseStale(g, lease, superseded, cutoff) {
				due = true
				return false, nil
			}
			if scanned == int(batch)*8 {
				next = afterLease(lease)
				return false, nil
			}
			return true, nil
		})
	})
	return due, next, err
}

// leaseStale is applyExpireLeases's (and LeasesDue's) test of one lease
// index entry: its holder no longer has it (a lease another pop superseded
// is kept for the same grace as one that expired in place, SupersedeLease),
// or the holder's lease expired at or before the cutoff.
func leaseStale(g *segments.Group, lease [16]byte, superseded, cutoff int64) bool {
	gone := g == nil || (g.LeaseID != lease && (superseded == 0 || superseded <= cutoff))
	return gone || (g.LeaseID == lease && g.LeaseExpiry <= cutoff)
}

// OJSSweepDue reports whether an OJSSweep of queue (with a valid budget)
// would change anything: finish the queue's deletion (no live lease left)
// or its graceful drain (depth 0; never for default), or prune a dead
// letter (the oldest is older than max_age, or there are more than
// max_count). This is applyOJSSweep's own sequence: maybeFinish, then
// pruning, which removes something exactly when one of those holds.
//
// Monotonicity: leases only expire as time passes, so a deletion that can
// finish at now can finish later; the depth and the dead-letter count do
// not depend on time; the max_age cutoff only grows.
func (f *FSM) OJSSweepDue(queue string, now int64) (due bool, err error) {
	if (&OJSSweep{Queue: queue, MaxDLQ: 1}).Validate() != nil {
		return false, nil
	}
	err = f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		due, err = ojsSweepDue(tx, queue, max(now, tx.Now()))
		return err
	})
	return due, err
}

// ojsSweepDue may panic on a storage error (drainDone's reads use must);
// OJSSweepDue recovers.
func ojsSweepDue(tx *segments.Tx, queue string, now int64) (bool, error) {
	q, err := tx.Queue(queue)
	if err != nil || q == nil || q.OJS == nil {
		return false, err
	}
	if drainDone(tx, q, now) {
		return true, nil
	}
	l := q.OJS.Limits
	if l.DLQMaxAge > 0 {
		cutoff := now - l.DLQMaxAge
		old := false
		if err := tx.ForEachDeadLetterOldest(q.ID, func(d *segments.DeadLetter) (bool, error) {
			old = d.FailedAt < cutoff
			return false, nil
		}); err != nil {
			return false, err
		}
		if old {
			return true, nil
		}
	}
	if l.DLQMaxCount > 0 && tx.DeadLetterCount(q.ID) > uint64(l.DLQMaxCount) {
		return true, nil
	}
	return false, nil
}
