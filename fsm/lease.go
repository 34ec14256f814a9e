package fsm

import (
	"fmt"

	"github.com/crownmq/crown/segments"
)

// applyLease is a pop (queen-api.md 4.5): claim partitions that have
// deliverable messages for the group and are not leased by it, and lease (or
// with AutoAck consume) up to Batch messages across at most MaxPartitions of
// them. A partition with nothing deliverable is not claimed.
func applyLease(a *applier, c *Lease) any { return a.lease(c, "", 0) }

// lease is a pop by principal ("" when anonymous): queues with OJS rules
// (docs/queues.md) may be skipped (paused, deleting, max_concurrency
// reached) or refuse the principal (access.consumers). maxBytes, when not
// 0, bounds the bytes the pop claims (LeaseCapped).
func (a *applier) lease(c *Lease, principal string, maxBytes uint64) any {
	res := &LeaseResult{Group: c.Group}
	// Pop maintenance (queen-api.md 3.17) is decided here too, not only by
	// the HTTP layer's check: a pop proposed before the switch was applied
	// is ordered after it by the log and delivers nothing.
	if must1(loadSetting(a.tx, settingPopMaintenance)).On {
		return res
	}
	var single *segments.Queue // the queue of a wildcard or specific pop
	if c.Scope != ScopeDiscovery {
		single = must1(a.tx.Queue(c.Queue))
		if q := single; q != nil && q.OJS != nil && !allowed(q.OJS.Limits.RestrictConsumers, q.OJS.Limits.Consumers, principal) {
			res.Denied = q.Name
			return res
		}
	}
	a.recordFirstContact(c)

	p := popState{c: c, res: res, remaining: max(c.Batch, 1), maxParts: max(c.MaxPartitions, 1), principal: principal,
		budget: byteBudget{capped: maxBytes != 0, left: maxBytes}}
	if c.Scope == ScopeSpecific {
		p.maxParts = 1
	}
	lastClaimed, claimedAny := "", false
	rrFrom := forEachCandidateQueue(a.tx, c, single, func(q *segments.Queue) bool {
		if p.done() {
			return false
		}
		before := p.claimed
		a.popGated(&p, q)
		if p.claimed > before {
			lastClaimed, claimedAny = q.Name, true
		}
		return !p.done()
	})
	a.readClaimed(&p)
	// The smallest name after lastClaimed: the next discovery pop of the
	// group on this scope starts at the queue after it. Unchanged (the
	// same queue served last again), it is not written again.
	if next := lastClaimed + "\x00"; claimedAny && c.Scope == ScopeDiscovery && next != rrFrom {
		must(a.tx.PutDiscoveryFrom(c.Group, c.Namespace, c.Task, next))
	}
	return res
}

// readClaimed fills the claimed partitions' messages on the node answering
// the pop. Payloads alias their blobs, which stay as they are after the
// commit (Tx.Scan).
func (a *applier) readClaimed(p *popState) {
	if len(p.reads) == 0 {
		return
	}
	parts := p.res.Partitions
	must(a.tx.ReadPlanned(&p.plan, func(rng int, sm *segments.StoredMessage) error {
		r := p.reads[rng]
		lp := &parts[r.part]
		if lp.Messages == nil {
			lp.Messages = make([]DeliveredMessage, 0, lp.Delivered)
		}
		lp.Messages = append(lp.Messages, DeliveredMessage{
			ID: sm.ID, TxID: sm.TxID, TraceID: sm.TraceID, HasTrace: sm.HasTrace,
			ProducerSub: sm.ProducerSub, Payload: sm.Payload, Encrypted: sm.Encrypted,
			CreatedAt: sm.CreatedAt, RetryCount: r.retry, Offset: sm.Offset,
		})
		return nil
	}))
	for _, r := range p.reads {
		if lp := &parts[r.part]; uint32(len(lp.Messages)) != lp.Delivered {
			must(fmt.Errorf("partition %s: claimed %d messages, read %d: %w", lp.Partition, lp.Delivered, len(lp.Messages), segments.ErrCorrupt))
		}
	}
}

// popGated pops from q within the limits its OJS rules set: a paused,
// deleting or refusing queue is skipped, and max_concurrency caps how many
// more batches it gives.
func (a *applier) popGated(p *popState, q *segments.Queue) {
	if q.OJS != nil && q.OJS.Gate != 0 {
		ok, room := a.popGate(p, q)
		if !ok {
			return
		}
		if room >= 0 && p.claimed+uint32(room) < p.maxParts {
			// max_concurrency: at most room more batches from this queue.
			saved := p.maxParts
			p.maxParts = p.claimed + uint32(room)
			a.popQueue(p, q)
			p.maxParts = saved
			return
		}
	}
	a.popQueue(p, q)
}

// forEachCandidateQueue walks the queues a pop's scope covers until fn
// returns false: single (nil when it does not exist) for a wildcard or
// specific pop, the queues whose tags match for a discovery pop. A
// discovery pop walks them in the group's round-robin order for its scope:
// from the queue after the one it last claimed from, in name order,
// wrapping around, so that busy queues cannot starve quiet ones
// (queen-api.md 4.5), as forEachPartitionRR does for one queue's
// partitions. The walk reads the tag index from the pointer on and stops
// where the pop is done, so its cost follows the queues it visits, not
// the queues stored. The pop check walks them in the same order, so the
// batch it counts is the one a pop would take. It returns the stored
// pointer the walk started at ("" for other scopes).
func forEachCandidateQueue(tx *segments.Tx, c *Lease, single *segments.Queue, fn func(*segments.Queue) bool) (rrFrom string) {
	if c.Scope != ScopeDiscovery {
		if single != nil {
			fn(single)
		}
		return ""
	}
	rrFrom = tx.DiscoveryFrom(c.Group, c.Namespace, c.Task)
	must(tx.ForEachTaggedQueue(c.Namespace, c.Task, rrFrom, func(q *segments.Queue) (bool, error) {
		return fn(q), nil
	}))
	return rrFrom
}

type popState struct {
	c         *Lease
	res       *LeaseResult
	remaining uint32
	maxParts  uint32
	claimed   uint32
	principal string
	budget    byteBudget

	// What the answering node reads once the pop has claimed: one range of
	// plan per claimed partition, in the order of reads.
	plan  segments.ReadPlan
	reads []claimedRead
}

// claimedRead is a claimed partition whose messages the pop's answer carries.
type claimedRead struct {
	part  int    // index in the result's Partitions
	retry uint64 // the group's retry count there, before this delivery
}

func (p *popState) done() bool { return p.remaining == 0 || p.claimed >= p.maxParts || p.budget.full }

func (a *applier) popQueue(p *popState, q *segments.Queue) {
	c := p.c
	if c.Scope == ScopeSpecific {
		if part := must1(a.tx.Partition(q.ID, c.Partition)); part != nil {
			if a.tryClaim(p, q, part) {
				a.touchQueueGroup(q.ID, c.Group, nil)
			}
		}
		return
	}
	var lastClaimed string
	claimedAny := false
	forEachPartitionRR(a.tx, q.ID, c.Group, func(part *segments.Partition) bool {
		if a.tryClaim(p, q, part) {
			lastClaimed, claimedAny = part.Name, true
		}
		return !p.done()
	})
	if claimedAny {
		// The smallest name after lastClaimed.
		next := lastClaimed + "\x00"
		a.touchQueueGroup(q.ID, c.Group, &next)
	}
}

// forEachPartitionRR walks a queue's partitions in the group's round-robin
// order: from the partition after the one it was last served from, wrapping
// around, so that busy partitions cannot starve quiet ones and a scan finds
// the next ready partition without walking the drained ones behind it. It
// stops when fn returns false.
func forEachPartitionRR(tx *segments.Tx, qid uint64, group string, fn func(*segments.Partition) bool) {
	from := ""
	if qg := must1(tx.QueueGroup(qid, group)); qg != nil {
		from = qg.RRFrom
	}
	more := true
	must(tx.ForEachPartition(qid, from, func(part *segments.Partition) (bool, error) {
		more = fn(part)
		return more, nil
	}))
	if !more || from == "" {
		return
	}
	must(tx.ForEachPartition(qid, "", func(part *segments.Partition) (bool, error) {
		if part.Name >= from {
			return false, nil
		}
		more = fn(part)
		return more, nil
	}))
}

// touchQueueGroup records that the group has state on the queue and, when
// rrFrom is given, where its next wildcard scan starts.
func (a *applier) touchQueueGroup(qid uint64, group string, rrFrom *string) {
	qg := must1(a.tx.QueueGroup(qid, group))
	if qg == nil {
		qg = &segments.QueueGroup{CreatedAt: a.now}
	} else if rrFrom == nil {
		return
	}
	if rrFrom != nil {
		qg.RRFrom = *rrFrom
	}
	must(a.tx.PutQueueGroup(qid, group, qg))
}

// eligibility is what a pop needs to know about one partition for a group:
// where the group would start, whether something is deliverable now, and if
// not, the earliest time something may become deliverable without a new
// push (a lease expiring, a window or delay passing). It only reads.
type eligibility struct {
	g       *segments.Group // nil when the group has no state here
	start   uint64
	visible int64  // messages created at or before this time are visible
	before  uint64 // when non-zero, offsets from here on are held by windowBuffer
	// heldUntil is when the windowBuffer hold on the offsets from before
	// ends: what to wake at when nothing before them is deliverable (the
	// messages between start and before may all have been deleted).
	heldUntil int64
	ok        bool  // worth scanning: not leased, not held, something after start
	wakeAt    int64 // when not ok: unix µs at which to look again, 0 if only a push helps
}

// deliverable counts up to want messages a pop could take from the
// partition now, from e.start, and returns the last of them. It walks
// references only (no message is read). When it stops at a message that is
// still delayed, delayedAt is that message's commit time. Commit times are
// monotone in a partition, so the delayed (or window-held) rest is a
// contiguous tail.
//
// A budget (nil: none) bounds the bytes taken as well (LeaseCapped): the
// walk stops at the first message that does not fit.
func (e *eligibility) deliverable(tx *segments.Tx, part *segments.Partition, want uint32, budget *byteBudget) (n uint32, last uint64, delayedAt int64) {
	must(tx.ScanRangesSized(part, e.start, func(first, end uint64, createdAt int64, msgBytes uint64) (bool, error) {
		if e.before != 0 {
			end = min(end, e.before)
		}
		if first >= end {
			return false, nil
		}
		if createdAt > e.visible {
			delayedAt = createdAt
			return false, nil
		}
		take := min(end-first, uint64(want-n))
		if budget != nil {
			take = budget.fit(take, msgBytes)
			if take == 0 {
				return false, nil
			}
		}
		n += uint32(take)
		last = first + take - 1
		return n < want && (budget == nil || !budget.full), nil
	}))
	return n, last, delayedAt
}

func checkPartition(tx *segments.Tx, q *segments.Queue, part *segments.Partition, c *Lease, now int64) eligibility {
	e := eligibility{g: must1(tx.Group(part.ID, c.Group))}
	if e.g != nil {
		e.start = e.g.Next
	} else {
		e.start = initialPosition(tx, q, part, c.Group)
	}
	if e.start < part.FirstOffset {
		e.start = part.FirstOffset
	}
	if g := e.g; g != nil && g.HasSkip() && e.start < g.SkipTo {
		// An OJS purge removed [SkipFrom, SkipTo) for this group while it
		// held a batch before it; what is still stored there is other
		// groups' live batches. The group finishes its own batch first (a
		// redelivery stops before the range), then goes on after it.
		if e.start >= g.SkipFrom || storedBetween(tx, part, e.start, g.SkipFrom) == 0 {
			e.start = g.SkipTo
		} else {
			e.before = g.SkipFrom
		}
	}
	if part.Messages == 0 || e.start >= part.NextOffset {
		return e
	}
	if e.g != nil && e.g.LeaseLive(now) {
		e.wakeAt = e.g.LeaseExpiry
		return e
	}
	if until, from := windowHeld(part, q.Options.WindowBuffer, now, c); until > 0 {
		if e.start >= from {
			e.wakeAt = until
			return e
		}
		// Only the current burst is held: what an ended burst collected
		// still delivers, up to the held tail.
		if e.before == 0 || from < e.before {
			e.before, e.heldUntil = from, until
		}
	}
	e.visible = now - Micros(q.Options.DelayedProcessing)
	e.ok = true
	return e
}

// tryClaim leases (or consumes) the deliverable head of one partition for
// the pop's group. It reports whether the partition was claimed.
func (a *applier) tryClaim(p *popState, q *segments.Queue, part *segments.Partition) bool {
	c := p.c
	e := checkPartition(a.tx, q, part, c, a.now)
	if !e.ok {
		return false
	}
	g, start := e.g, e.start
	retry := uint64(0)
	if g != nil {
		retry = g.Retry
	}
	// Every node claims by references alone; the node answering the pop
	// reads the claimed messages once every partition is claimed
	// (readClaimed), so that neighbouring segments are read together.
	n, last, _ := e.deliverable(a.tx, part, p.remaining, &p.budget)
	if n == 0 {
		return false
	}

	if g == nil {
		g = &segments.Group{Next: start}
	} else if g.HasLease() {
		// The lease expired (a live one would have kept the partition):
		// an extension of it must still say so (queen-api.md 4.14,
		// "Lease already expired"), so it stays indexed until the sweep.
		must(a.tx.SupersedeLease(g.LeaseID, part.ID, c.Group, g.LeaseExpiry))
	}
	g.EndBatch()
	if g.Next < start {
		g.Next = start
	}
	if c.AutoAck {
		g.Consumed += storedBetween(a.tx, part, g.Next, last+1)
		g.Next = last + 1
		g.Batches++
		g.LastConsumedAt = a.now
		g.Retry = 0
	} else {
		if p.res.LeaseID == ([16]byte{}) {
			p.res.LeaseID = a.newID()
		}
		g.LeaseID = p.res.LeaseID
		g.LeaseExpiry = a.now + Micros(leaseSeconds(c.LeaseSeconds, q.Options.LeaseTime))
		g.LeaseLast = last
		g.LeaseDelivered = uint64(n)
		must(a.tx.IndexLease(g.LeaseID, part.ID, c.Group))
	}
	g.PassSkipped()
	must(a.tx.PutGroup(part.ID, c.Group, g))

	if a.full {
		must1(a.tx.PlanRead(&p.plan, part, start, last))
		p.reads = append(p.reads, claimedRead{part: len(p.res.Partitions), retry: retry})
	}
	p.res.Partitions = append(p.res.Partitions, LeasedPartition{
		Queue: q.Name, Partition: part.Name, PartitionID: part.UUID, Delivered: n,
	})
	p.remaining -= n
	p.claimed++
	return true
}

// QueueLeaseSeconds is the lease a pop that names no leaseSeconds gets from a
// queue whose leaseTime is queue: the views show it, as queen-api.md 3.11
// asks them to show what pops use (a leaseTime of 0 leases for the fallback).
func QueueLeaseSeconds(queue int64) int64 { return leaseSeconds(0, queue) }

// leaseSeconds resolves a pop's lease length: the request's when positive,
// else the queue's, else the fallback.
func leaseSeconds(request, queue int64) int64 {
	switch {
	case request > 0:
		return request
	case queue > 0:
		return queue
	default:
		return FallbackLeaseSeconds
	}
}

// windowHeld reports until when windowBuffer holds a partition at now (0:
// not held) and the first offset it holds. With the hot-list rule a burst is
// held from its first offset until its first push plus the window, or until
// WindowBatch messages have accumulated. With the SQL rule a partition
// written within the window delivers nothing at all.
func windowHeld(p *segments.Partition, windowSeconds, now int64, c *Lease) (until int64, from uint64) {
	if windowSeconds <= 0 {
		return 0, 0
	}
	w := Micros(windowSeconds)
	if c.SQLWindow {
		if p.Messages > 0 && now < p.LastCreatedAt+w {
			return p.LastCreatedAt + w, 0
		}
		return 0, 0
	}
	if p.WindowMark == 0 || now >= p.WindowMark+w {
		return 0, 0
	}
	if c.WindowBatch != 0 && p.WindowCount >= c.WindowBatch {
		return 0, 0
	}
	return p.WindowMark + w, p.WindowFirst
}

// firstContactKey is the subscription record a pop would store on first
// contact, or nil when the pop stores none (queue mode, mode "all").
func firstContactKey(c *Lease) []byte {
	if c.Group == QueueMode || c.SubMode == SubAll {
		return nil
	}
	switch c.Scope {
	case ScopeSpecific:
		return segments.SubKey(c.Group, segments.SubPartition, c.Queue, c.Partition)
	case ScopeDiscovery:
		return segments.SubKey(c.Group, segments.SubDiscovery, c.Namespace, c.Task)
	default:
		return segments.SubKey(c.Group, segments.SubQueue, c.Queue, "")
	}
}

// recordFirstContact stores a named group's subscription start at its first
// pop on a scope, even when the pop delivers nothing (queen-api.md 4.7).
func (a *applier) recordFirstContact(c *Lease) {
	key := firstContactKey(c)
	if key == nil || must1(a.tx.Subscription(key)) != nil {
		return
	}
	s := &segments.Subscription{Mode: "new", Start: a.now, CreatedAt: a.now}
	if c.SubMode == SubTimestamp {
		s.Mode, s.Start = "timestamp", c.SubFrom
	}
	must(a.tx.PutSubscription(key, s))
}

// initialPosition is where a group without state on a partition starts:
// queue mode and groups without a subscription at the oldest stored message;
// others just before their subscription start, the most specific record
// winning (partition, then queue, then discovery tags).
func initialPosition(tx *segments.Tx, q *segments.Queue, p *segments.Partition, group string) uint64 {
	if group == QueueMode {
		return p.FirstOffset
	}
	s := subscriptionFor(tx, q, p.Name, group)
	if s == nil {
		return p.FirstOffset
	}
	return firstAtOrAfter(tx, p, s.Start)
}

func subscriptionFor(tx *segments.Tx, q *segments.Queue, partition, group string) *segments.Subscription {
	keys := [][]byte{
		segments.SubKey(group, segments.SubPartition, q.Name, partition),
		segments.SubKey(group, segments.SubQueue, q.Name, ""),
		segments.SubKey(group, segments.SubDiscovery, q.Namespace, q.Task),
		segments.SubKey(group, segments.SubDiscovery, q.Namespace, ""),
		segments.SubKey(group, segments.SubDiscovery, "", q.Task),
	}
	for _, k := range keys {
		if s := must1(tx.Subscription(k)); s != nil {
			return s
		}
	}
	return nil
}

// firstAtOrAfter is the first offset whose commit time is >= t.
func firstAtOrAfter(tx *segments.Tx, p *segments.Partition, t int64) uint64 {
	if p.Messages == 0 || p.LastCreatedAt < t {
		return p.NextOffset
	}
	pos := p.FirstOffset
	must(tx.SegmentsReverse(p, func(si segments.SegmentInfo) (bool, error) {
		if si.CreatedAt < t {
			pos = si.First + si.Count
			return false, nil
		}
		return true, nil
	}))
	return pos
}

// endBatchLease drops the lease of group's batch on partition pid when
// the batch ends because its messages were deleted (a sweep, a message
// DELETE): a live lease ends as if released; one that had expired stays
// indexed as superseded at its expiry until the lease sweep's grace, so an
// extension of it still answers "Lease already expired" (queen-api.md
// 4.14), as after a re-pop.
func (a *applier) endBatchLease(g *segments.Group, pid uint64, group string) {
	switch {
	case g.LeaseLive(a.now):
		must(a.tx.UnindexLease(g.LeaseID, pid, group))
	case g.HasLease():
		must(a.tx.SupersedeLease(g.LeaseID, pid, group, g.LeaseExpiry))
	}
}
