package fsm

import (
	"github.com/crownmq/crown/segments"
)

// Deletion rules, indexes of SweepResult's per-rule counts.
const (
	RuleRetention = iota // retentionSeconds: age only
	RuleCompleted        // completedRetentionSeconds: age and consumed by every group
	RuleMaxWait          // maxWaitTimeSeconds: age only, ignores retentionEnabled and leases
	numRules
)

// RuleNames name the rules in metrics.
var RuleNames = [numRules]string{"retention", "completed_retention", "max_wait"}

// SweepResult reports what one sweep deleted, per rule, and whether its
// budget ran out before the queue was clean (the leader then sweeps again).
type SweepResult struct {
	Segments [numRules]uint64
	Messages [numRules]uint64
	More     bool
}

// sweepCutoffs are the commit-time cutoffs of a queue's rules at now
// (unix µs); 0 means the rule is off.
type sweepCutoffs [numRules]int64

func cutoffsOf(o *segments.Options, now int64) sweepCutoffs {
	var c sweepCutoffs
	if o.RetentionEnabled && o.RetentionSeconds > 0 {
		c[RuleRetention] = now - Micros(o.RetentionSeconds)
	}
	if o.RetentionEnabled && o.CompletedRetentionSeconds > 0 {
		c[RuleCompleted] = now - Micros(o.CompletedRetentionSeconds)
	}
	if o.MaxWaitTimeSeconds > 0 {
		c[RuleMaxWait] = now - Micros(o.MaxWaitTimeSeconds)
	}
	return c
}

// HasRules reports whether any deletion rule is on for the options.
func HasRules(o *Options) bool { return cutoffsOf(o, 0) != sweepCutoffs{} }

// applySweep deletes, partition by partition, the oldest whole segments that
// some rule condemns, stopping at each partition's first survivor (commit
// times and offsets only grow along a partition, so what a rule condemns is
// always a prefix). Consumers positioned inside a deleted range resume at
// the next stored offset; dead letters are never touched.
func applySweep(a *applier, c *Sweep) any {
	res := &SweepResult{}
	q := must1(a.tx.Queue(c.Queue))
	if q == nil {
		return res
	}
	cut := cutoffsOf(&q.Options, a.now)
	if cut == (sweepCutoffs{}) {
		return res
	}
	budget := uint64(c.MaxSegments)
	type endedBatch struct {
		name string
		g    segments.Group
	}
	var ended []endedBatch
	var parts []*segments.Partition
	must(a.tx.ForEachPartition(q.ID, "", func(p *segments.Partition) (bool, error) {
		if p.Messages > 0 {
			parts = append(parts, p)
		}
		return true, nil
	}))
	for _, p := range parts {
		if budget == 0 {
			res.More = true
			break
		}
		slowest, groups := must2(slowestGroup(a.tx, p.ID))
		var doomed []segments.SegmentInfo
		var rules []int
		must(a.tx.Segments(p, func(si segments.SegmentInfo) (bool, error) {
			rule := condemnedBy(cut, si, slowest, groups)
			if rule < 0 {
				return false, nil
			}
			if uint64(len(doomed)) == budget {
				res.More = true
				return false, nil
			}
			doomed = append(doomed, si)
			rules = append(rules, rule)
			return true, nil
		}))
		if len(doomed) == 0 {
			continue
		}
		for i, si := range doomed {
			a.rememberSegment(q, p, si)
			n := must1(a.tx.DeleteSegment(p, si.First))
			res.Segments[rules[i]]++
			res.Messages[rules[i]] += n
		}
		budget -= uint64(len(doomed))
		must(a.tx.PutPartition(p))
		// A batch whose messages are all gone can never be acked: end it,
		// so its group resumes at the next stored offset at once instead
		// of waiting for the lease to expire.
		must(a.tx.ForEachGroup(p.ID, func(name string, g *segments.Group) (bool, error) {
			if g.HasBatch() && g.LeaseLast < p.FirstOffset {
				ended = append(ended, endedBatch{name, *g})
			}
			return true, nil
		}))
		for _, e := range ended {
			a.endBatchLease(&e.g, p.ID, e.name)
			e.g.EndBatch()
			e.g.Retry = 0 // the failures charged were the deleted messages'
			must(a.tx.PutGroup(p.ID, e.name, &e.g))
		}
		ended = ended[:0]
		// Leases over deleted messages may now cover nothing: wake parked
		// pops so they re-evaluate.
		a.events.touch(q.Name)
	}
	return res
}

// ExpireLeasesResult reports how many lease index entries a sweep cleared
// (a superseded lease's included), and the lease id the next sweep should
// inspect from (zero: the inspection reached the end of the index, so the
// next starts over from the oldest).
type ExpireLeasesResult struct {
	Cleared uint64
	More    bool
	Next    [16]byte
}

// applyExpireLeases clears lease records whose expiry is at least Grace in
// the past, inspecting the index from c.From on. Lease ids are
// time-ordered, so the oldest come first.
func applyExpireLeases(a *applier, c *ExpireLeases) any {
	res := &ExpireLeasesResult{}
	cutoff := a.now - c.Grace
	type holder struct {
		lease [16]byte
		pid   uint64
		group string
	}
	var stale []holder
	scanned := 0
	must(a.tx.ForEachLeaseFrom(c.From, func(lease [16]byte, pid uint64, group string, superseded int64) (bool, error) {
		scanned++
		g := must1(a.tx.Group(pid, group))
		if leaseStale(g, lease, superseded, cutoff) {
			stale = append(stale, holder{lease, pid, group})
		}
		// Ids are time-ordered, so when the oldest Max*8 records hold
		// nothing stale the newer ones most likely hold nothing either:
		// More only when this batch found work, or a scan without
		// progress would be proposed again at once, for as long as that
		// many leases stay live.
		if uint32(len(stale)) == c.Max || scanned == int(c.Max)*8 {
			res.More = len(stale) > 0
			res.Next = afterLease(lease)
			return false, nil
		}
		return true, nil
	}))
	for _, h := range stale {
		must(a.tx.UnindexLease(h.lease, h.pid, h.group))
		// Counted whether or not the group still holds it: the runner
		// reads Cleared as progress, and a step that only dropped entries
		// of superseded leases made as much as any.
		res.Cleared++
		g := must1(a.tx.Group(h.pid, h.group))
		if g == nil || g.LeaseID != h.lease {
			continue
		}
		g.ClearLease()
		must(a.tx.PutGroup(h.pid, h.group, g))
		if p := must1(a.tx.PartitionByID(h.pid)); p != nil {
			if q := must1(a.tx.QueueByID(p.QueueID)); q != nil {
				a.events.touch(q.Name)
			}
		}
	}
	return res
}

// afterLease is the smallest lease id above id, where the next lease sweep
// goes on: any entries of id itself not yet inspected wait for the next
// pass over the index, so even one lease with more entries than a window
// cannot hold the sweep in place. The largest id has none: zero, start over.
func afterLease(id [16]byte) [16]byte {
	for i := len(id) - 1; i >= 0; i-- {
		id[i]++
		if id[i] != 0 {
			return id
		}
	}
	return id
}
