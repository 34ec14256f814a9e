package fsm

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/crownmq/crown/segments"
)

// applyAck applies acknowledgements for one group (queen-api.md 4.10): items
// are resolved, then applied per partition in message order whatever order
// the client listed them in, and reported in request order.
func applyAck(a *applier, c *Ack) any {
	s := a.newAckSession(c.Group)
	results := make([]AckItemResult, len(c.Items))
	type pending struct {
		i   int
		ref ackTarget
	}
	todo := make([]pending, 0, len(c.Items))
	for i := range c.Items {
		ref, ok := s.resolve(&c.Items[i])
		if !ok {
			results[i] = AckItemResult{Error: ErrUnresolvable}
			continue
		}
		todo = append(todo, pending{i, ref})
	}
	slices.SortStableFunc(todo, func(x, y pending) int {
		if c := cmp.Compare(x.ref.cur.part.ID, y.ref.cur.part.ID); c != 0 {
			return c
		}
		return cmp.Compare(x.ref.offset, y.ref.offset)
	})
	for _, p := range todo {
		results[p.i] = s.apply(&c.Items[p.i], p.ref, false)
	}
	s.flush()
	s.finishDeletions()
	return &AckResult{Items: results}
}

// finishDeletions completes the OJS deletion of a queue whose last live
// lease this command ended (docs/queues.md).
func (s *ackSession) finishDeletions() {
	var done map[string]bool
	for _, c := range s.order {
		if c.queue.OJS == nil || c.queue.OJS.Deletion == nil || done[c.queue.Name] {
			continue
		}
		if done == nil {
			done = make(map[string]bool)
		}
		done[c.queue.Name] = true
		s.a.maybeFinish(c.queue.Name)
	}
}

// ackSession caches the group state of every partition one command touches,
// so a batch of acks reads and writes each (partition, group) once, and
// remembers which lease each partition held when the command started.
type ackSession struct {
	a     *applier
	group string
	// cycle marks a stream cycle's session, whose dead letters record a
	// retry count of 0 (queen-api.md 3.18: dead-lettered immediately).
	cycle   bool
	cursors map[uint64]*groupCursor
	order   []*groupCursor // first-touch order, for a deterministic flush
}

type groupCursor struct {
	part  *segments.Partition
	queue *segments.Queue
	g     *segments.Group // nil while the group has no state here
	dirty bool
	// leased maps the transaction ids of the live batch to their offsets,
	// read with one scan when the command starts, when the index alone
	// cannot tell (byIndex false): within the batch the first occurrence of
	// a reused id. Nil when byIndex.
	leased map[string]uint64
	// more holds the later occurrences, in order, of the ids the batch
	// carries more than once (a retried push to a queue without
	// deduplication stores its id again), and taken counts the items of
	// this command that named each under the batch's lease (or none): the
	// k-th such item naming an id takes its k-th occurrence (occurrence).
	// Were every item to take the first, a batch acked an item per
	// delivered message would never complete.
	more  map[string][]uint64
	taken map[string]int
	// byIndex: the batch's items are resolved by the index alone, which
	// gives the scan's answers here (ackByIndex).
	byIndex bool
	// batchFrom and batchLast are the live batch's range when the command
	// started, which leased maps.
	batchFrom, batchLast uint64
	// The live lease at the start of the command: an ack carrying this
	// lease id stays valid for the whole command even after an earlier item
	// released it (one charge per delivery, queen-api.md 4.10).
	leaseAtStart [16]byte
	// charged: a failed item of this command charged the retry counter and
	// released the lease; the delivery's other failed items change nothing.
	charged bool
	// released: a failed or retry item of this command released the lease
	// without moving the position.
	released bool
	// runs are the stored runs [first, end) of the partition between
	// runsFrom and runsTo, as storedAt last read them (ackat.go).
	runs             [][2]uint64
	runsFrom, runsTo uint64
}

type ackTarget struct {
	cur    *groupCursor
	offset uint64
}

func (a *applier) newAckSession(group string) *ackSession {
	return &ackSession{a: a, group: group, cursors: make(map[uint64]*groupCursor)}
}

func (s *ackSession) cursor(p *segments.Partition) *groupCursor {
	if c, ok := s.cursors[p.ID]; ok {
		return c
	}
	c := &groupCursor{part: p}
	c.queue = must1(s.a.tx.QueueByID(p.QueueID))
	c.g = must1(s.a.tx.Group(p.ID, s.group))
	if g := c.g; g != nil && g.LeaseLive(s.a.now) {
		c.leaseAtStart = g.LeaseID
		if g.Next <= g.LeaseLast {
			c.batchFrom, c.batchLast = g.Next, g.LeaseLast
			c.byIndex = ackByIndex(p, c.batchFrom)
			if !c.byIndex || s.a.verifyAcks {
				c.scanBatch(s.a.tx, g.LeaseDelivered)
			}
		}
	}
	s.cursors[p.ID] = c
	s.order = append(s.order, c)
	return c
}

// scanBatch maps the transaction ids of the batch the command started with
// to their offsets: a reused id's first occurrence in leased, the later
// ones in more.
func (c *groupCursor) scanBatch(tx *segments.Tx, delivered uint64) {
	c.leased, c.more = make(map[string]uint64, delivered), nil
	must(tx.ScanTxIDs(c.part, c.batchFrom, func(off uint64, txID []byte) (bool, error) {
		if off > c.batchLast {
			return false, nil
		}
		if _, dup := c.leased[string(txID)]; !dup {
			c.leased[string(txID)] = off
		} else {
			if c.more == nil {
				c.more = make(map[string][]uint64)
			}
			c.more[string(txID)] = append(c.more[string(txID)], off)
		}
		return true, nil
	}))
}

// occurrence is the offset the next item of the command naming txID takes
// in the batch, first being the id's first occurrence there: the k-th
// item takes the k-th occurrence, and items past the last occurrence take
// the last (one message acked again). The items are resolved in request
// order, so every node picks the same.
func (c *groupCursor) occurrence(txID string, first uint64) uint64 {
	more := c.more[txID]
	if len(more) == 0 {
		return first
	}
	if c.taken == nil {
		c.taken = make(map[string]int)
	}
	k := c.taken[txID]
	c.taken[txID] = k + 1
	if k == 0 {
		return first
	}
	return more[min(k, len(more))-1]
}

// resolve finds the message an ack names. When a transaction id occurs more
// than once in the partition, the occurrence inside the group's leased batch
// wins, else the newest (queen-api.md 4.12); inside the batch, each item of
// the command naming it takes the next occurrence.
func (s *ackSession) resolve(it *AckItem) (ackTarget, bool) {
	if !it.PartitionOK {
		return ackTarget{}, false
	}
	var p *segments.Partition
	if c := s.cursorByUUID(it.PartitionID); c != nil {
		p = c.part
	} else if p = must1(s.a.tx.PartitionByUUID(it.PartitionID)); p == nil {
		return ackTarget{}, false
	}
	c := s.cursor(p)
	if off, ok := c.leased[it.TxID]; ok && !c.byIndex {
		// An item refused whatever it names (another lease, an unknown
		// status) takes no occurrence from the items after it.
		if (!it.HasLease || it.LeaseID == c.leaseAtStart) && it.Status != AckUnknown {
			off = c.occurrence(it.TxID, off)
		}
		return ackTarget{cur: c, offset: off}, true
	}
	off, ok := s.indexAnswer(c, it)
	if c.byIndex && s.a.verifyAcks {
		scanned, inBatch := c.leased[it.TxID]
		if inBatch && (!ok || scanned != off) {
			must(fmt.Errorf("VerifyAcks: ack of %q in partition %d: the index gives offset %d (found %t), the batch's scan %d",
				it.TxID, p.ID, off, ok, scanned))
		}
	}
	if !ok {
		return ackTarget{}, false
	}
	return ackTarget{cur: c, offset: off}, true
}

// ackByIndex reports whether the acknowledgments of a batch of p starting
// at from are resolved by looking each id up in the index rather than by
// scanning the batch: whenever the index names every message from the batch on, so that
// it gives the scan's answers (segments/idmark.go). A scan reads a blob per
// segment; over many partitions nearly every message is a segment of its
// own, and the lookups took a third of the time there, and no more with
// segments of 100 messages (BenchmarkApplyAck).
func ackByIndex(p *segments.Partition, from uint64) bool {
	return p.IDsIndexed(from)
}

// reload re-reads the partition records the session holds. A push in the
// same transaction may have appended to one of them since it was loaded, and
// a stale record hides the new messages (MessageAt reads through it). If
// that push repeated an id, the index may now name the new message instead
// of one in the batch, so the batch is scanned as the command started with
// it (its messages are as they were: a transaction deletes none).
func (s *ackSession) reload() {
	for _, c := range s.order {
		if p := must1(s.a.tx.PartitionByID(c.part.ID)); p != nil {
			c.part = p
			c.runsFrom, c.runsTo = 0, 0 // the push may have stored more
			if c.byIndex && !ackByIndex(p, c.batchFrom) {
				if c.leased == nil {
					c.scanBatch(s.a.tx, 0)
				}
				c.byIndex = false
			}
		}
	}
}

func (s *ackSession) cursorByUUID(id [16]byte) *groupCursor {
	for _, c := range s.order {
		if c.part.UUID == id {
			return c
		}
	}
	return nil
}

// apply applies one resolved item. inTx selects the transaction variants of
// the statuses (queen-api.md 4.15): retry and unknown statuses are errors
// there, and dlq releases the lease at once.
func (s *ackSession) apply(it *AckItem, t ackTarget, inTx bool) AckItemResult {
	c := t.cur
	r := AckItemResult{Resolved: true, Queue: c.queue.Name, Partition: c.part.Name}
	// resolved: the group's position is past the message, which was
	// consumed, dead-lettered or dropped already.
	resolved := c.g != nil && t.offset < c.g.Next
	if resolved && (it.Status == AckCompleted || it.Status == AckDLQ) {
		// A re-ack (a client retrying after a lost response) is a
		// successful no-op, whatever lease it carries; for dlq it must not
		// write a second dead-letter entry for (message, group).
		r.Success = true
		return r
	}
	if resolved && !it.HasLease && (it.Status == AckFailed || (it.Status == AckRetry && !inTx)) {
		// Without a lease id nothing ties a consumed message to the
		// delivery now holding the partition: an auto-acknowledged message
		// (its pop answered leaseId "") reported failed must change nothing
		// (queen-api.md 4.8), not give back another consumer's batch and
		// charge its retry budget.
		r.Success = true
		return r
	}
	if it.HasLease && (it.LeaseID != c.leaseAtStart || c.leaseAtStart == [16]byte{}) {
		r.Error = ErrInvalidLease
		return r
	}
	if it.HasLease && c.released {
		// A failed or retry item of this command gave the delivery back:
		// the lease no longer holds the partition (queen-api.md 4.10 step
		// 2). The rest of the delivery reported failed or retry changes
		// nothing (one charge per delivery); a completed or dlq item would
		// move the position past the message given back, which would then
		// be neither redelivered nor dead-lettered.
		switch {
		case it.Status == AckRetry && inTx:
			r.Error = "Unknown status: retry"
		case it.Status == AckFailed || it.Status == AckRetry:
			r.Success = true
		default:
			r.Error = ErrInvalidLease
		}
		return r
	}
	now := s.a.now
	switch it.Status {
	case AckCompleted:
		r.LeaseReleased = s.advance(c, t.offset)
	case AckFailed:
		if c.charged {
			// One charge per delivery (queen-api.md 4.10): the rest of the
			// batch finds no live lease and changes nothing. Judging it
			// against the counter just raised would dead-letter it, and
			// move the position past the message that was charged.
			break
		}
		g := c.g
		limit := uint64(max(c.queue.Options.RetryLimit, 0))
		retry := uint64(0)
		if g != nil {
			retry = g.Retry
		}
		if retry < limit {
			// Budget left: charge once per delivery, on the item that ends the live lease.
			if g != nil && g.LeaseLive(now) {
				g.Retry++
				s.release(c)
				r.LeaseReleased = true
				c.charged, c.released = true, true
			}
			break
		}
		if resolved {
			break // a retried exhausted failure: no second dead-letter entry
		}
		o := c.queue.Options
		if o.DeadLetterQueue || o.DLQAfterMaxRetries {
			s.deadLetter(c, t.offset, it.Error)
			r.DLQ = true
		} else {
			r.Dropped = true
		}
		r.LeaseReleased = s.advance(c, t.offset)
	case AckDLQ:
		s.deadLetter(c, t.offset, it.Error)
		r.DLQ = true
		r.LeaseReleased = s.advance(c, t.offset)
		if inTx && c.g != nil && c.g.LeaseLive(now) {
			s.release(c)
			r.LeaseReleased = true
		}
	case AckRetry:
		if inTx {
			r.Error = "Unknown status: retry"
			return r
		}
		if c.g != nil && c.g.LeaseLive(now) {
			s.release(c)
			r.LeaseReleased = true
			c.released = true
		}
	default:
		r.Error = "Unknown status: " + it.StatusText
		return r
	}
	r.Success = true
	return r
}

// state returns the group's state on the cursor's partition, creating it
// (with no position) when absent.
func (s *ackSession) state(c *groupCursor) *segments.Group {
	if c.g == nil {
		c.g = &segments.Group{}
		s.a.touchQueueGroup(c.part.QueueID, s.group, nil)
	}
	return c.g
}

// advance moves the group's position past off (never backwards) and ends
// the batch (and its lease) when the position passes the last delivered
// message, which also resets the retry counter. It reports whether a live
// lease ended (queen-api.md 3.7 leaseReleased): not when a failed ack had
// already released it, nor when it had expired.
func (s *ackSession) advance(c *groupCursor, off uint64) bool {
	g := s.state(c)
	if off+1 > g.Next {
		if g.Next == 0 {
			g.Consumed++ // no position yet: only this message was consumed
		} else {
			g.Consumed += storedBetween(s.a.tx, c.part, g.Next, off+1)
		}
		g.Next = off + 1
		g.LastConsumedAt = s.a.now
		c.dirty = true
	}
	// Past the range an OJS purge left the group to skip (its batch ends
	// before the range, so reaching it also ends the batch below).
	if g.PassSkipped() {
		c.dirty = true
	}
	if g.HasBatch() && g.Next > g.LeaseLast {
		live := g.LeaseLive(s.a.now)
		if g.HasLease() {
			must(s.a.tx.UnindexLease(g.LeaseID, c.part.ID, s.group))
		}
		g.EndBatch()
		g.Retry = 0
		g.Batches++
		c.dirty = true
		s.a.events.touch(c.queue.Name)
		return live
	}
	return false
}

// release ends the group's lease on the partition without moving the position.
func (s *ackSession) release(c *groupCursor) {
	g := c.g
	must(s.a.tx.UnindexLease(g.LeaseID, c.part.ID, s.group))
	g.ClearLease()
	c.dirty = true
	s.a.events.touch(c.queue.Name)
}

// deadLetter copies the message at off into the queue's dead-letter table for the group.
func (s *ackSession) deadLetter(c *groupCursor, off uint64, errText string) {
	m := must1(s.a.tx.MessageAt(c.part, off))
	if m == nil {
		return
	}
	if errText == "" {
		errText = "Retries exhausted"
	}
	retry := uint64(0)
	if c.g != nil && !s.cycle {
		retry = c.g.Retry
	}
	must(s.a.tx.AddDeadLetter(&segments.DeadLetter{
		QueueID: c.queue.ID, PartitionID: c.part.ID, PartitionName: c.part.Name,
		Offset: off, MessageID: m.ID, TxID: m.TxID, TraceID: m.TraceID, HasTrace: m.HasTrace,
		ProducerSub: m.ProducerSub, Payload: m.Payload, Encrypted: m.Encrypted,
		Group: s.group, Error: errText, RetryCount: retry, CreatedAt: m.CreatedAt, FailedAt: s.a.now,
	}))
}

// flush writes back every changed group state.
func (s *ackSession) flush() {
	for _, c := range s.order {
		if c.dirty {
			must(s.a.tx.PutGroup(c.part.ID, s.group, c.g))
		}
	}
}
