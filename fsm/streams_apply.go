package fsm

import (
	"fmt"

	"github.com/crownmq/crown/segments"
)

// Stream cycle failures.
const (
	ErrStreamQueryNotFound     = "query not found"
	ErrStreamPartitionNotFound = "partition not found"
	// ErrStreamPushMaintenance fails a cycle that pushes while push
	// maintenance is on; the HTTP layer answers it with a 503
	// maintenance_mode (README: stream cycles that push are refused).
	ErrStreamPushMaintenance = "push maintenance mode is on: stream cycles that push are refused until it is switched off; retry then"
)

func applyStreamRegister(a *applier, c *StreamRegister) any {
	q := must1(a.tx.StreamQueryByName(c.Name))
	if q == nil {
		q = &segments.StreamQuery{ID: a.newID(), Name: c.Name, Source: c.Source, Sink: c.Sink,
			ConfigHash: c.ConfigHash, CreatedAt: a.now, UpdatedAt: a.now}
		must(a.tx.PutStreamQuery(q))
		return &StreamRegisterResult{QueryID: q.ID, Name: q.Name, ConfigHash: q.ConfigHash, Fresh: true}
	}
	res := &StreamRegisterResult{QueryID: q.ID, Name: q.Name, ConfigHash: q.ConfigHash}
	if !c.Reset {
		switch {
		case q.ConfigHash != c.ConfigHash:
			res.Conflict = fmt.Sprintf("config_hash mismatch: query %q is registered with %q, the request has %q; "+
				"register with reset: true to replace it and delete the query's state", q.Name, q.ConfigHash, c.ConfigHash)
		case q.Source != c.Source:
			// The state rows belong to the source's partitions: another
			// source makes them meaningless, as another hash does.
			res.Conflict = fmt.Sprintf("source_queue mismatch: query %q reads %q, the request names %q; "+
				"register with reset: true to replace it and delete the query's state", q.Name, q.Source, c.Source)
		case q.Sink != c.Sink:
			// The sink is a record of where the query writes (cycles name
			// their own queues): following it changes no state.
			q.Sink, q.UpdatedAt = c.Sink, a.now
			must(a.tx.PutStreamQuery(q))
		}
		return res
	}
	res.Removed = must1(a.tx.ClearStreamState(q.ID))
	q.Source, q.Sink, q.ConfigHash, q.UpdatedAt = c.Source, c.Sink, c.ConfigHash, a.now
	must(a.tx.PutStreamQuery(q))
	res.ConfigHash, res.Reset = q.ConfigHash, true
	return res
}

// applyStreamCycle runs a cycle under a savepoint, as atomicTransaction
// does: if any step fails, every write it made (state, messages, ids,
// dead letters, group state) is rolled back and the other commands of the
// batch are unaffected.
func applyStreamCycle(a *applier, c *StreamCycle) any {
	var res *StreamCycleResult
	a.atomically(func() (bool, *Refusal) {
		res = a.streamCycle(c)
		return res.Success, res.Refused
	})
	return res
}

func (a *applier) streamCycle(c *StreamCycle) *StreamCycleResult {
	res := &StreamCycleResult{}
	q := must1(a.tx.StreamQuery(c.QueryID))
	if q == nil {
		res.Error = ErrStreamQueryNotFound
		return res
	}
	p := must1(a.tx.PartitionByUUID(c.PartitionID))
	if p == nil {
		res.Error = ErrStreamPartitionNotFound
		return res
	}
	src := must1(a.tx.QueueByID(p.QueueID))
	if src == nil {
		res.Error = ErrStreamPartitionNotFound
		return res
	}
	res.Queue = src.Name
	// State is kept per partition of the source queue only: that is what
	// lets a queue's deletion, or a reset, find every row of it.
	if src.Name != q.Source {
		res.Error = fmt.Sprintf("partition_id names a partition of queue %q, not of the query's source queue %q", src.Name, q.Source)
		return res
	}

	for i := range c.Ops {
		op := &c.Ops[i]
		if op.Kind == StateDelete {
			must(a.tx.DeleteStreamState(q.ID, p.UUID, op.Key))
			continue
		}
		must(a.tx.PutStreamState(q.ID, p.UUID, op.Key, &segments.StreamRow{
			UpdatedAt: a.now, HasWindowEnd: op.HasWindowEnd, WindowEnd: op.WindowEnd, Value: op.Value,
		}))
	}
	res.StateOps = len(c.Ops)

	if len(c.Items) > 0 {
		// During push maintenance the pushes could be neither stored (they
		// would overtake the buffered ones) nor buffered (the cycle would no
		// longer be atomic), as for transactions (system_apply.go).
		if must1(loadSetting(a.tx, settingPushMaintenance)).On {
			res.Error = ErrStreamPushMaintenance
			return res
		}
		prs, _, ref := a.pushAs(c.Items, c.Principal)
		if ref != nil {
			res.Refused = ref
			res.Error = RefusalText(ref)
			return res
		}
		res.Push = prs
	}

	if c.HasAck {
		ar, errText := a.streamAck(c)
		if errText != "" {
			res.Error = "ack failed: " + errText
			return res
		}
		res.Ack = ar
	}
	res.Success = true
	return res
}

// streamAck applies a cycle's ack (queen-api.md 3.18) with the ack session
// of plain acks. The session starts after the cycle's pushes, which may have
// appended to the source partition. completed moves the position (the lease
// ends when it passes the batch, or at once with ReleaseLease); failed and
// dlq dead-letter the message at once, whatever the retry budget, and end
// the lease, as a transaction's dlq does.
func (a *applier) streamAck(c *StreamCycle) (*StreamAckResult, string) {
	it := c.Ack
	it.PartitionID, it.PartitionOK = c.PartitionID, true
	switch it.Status {
	case AckCompleted:
	case AckFailed, AckDLQ:
		it.Status = AckDLQ
	case AckRetry:
		return nil, "Unknown status: retry"
	default:
		return nil, "Unknown status: " + it.StatusText
	}
	s := a.newAckSession(c.Group)
	s.cycle = true
	t, ok := s.resolve(&it)
	if !ok {
		return nil, ErrUnresolvable
	}
	// The lease is a cycle's fence against a stale worker (3.18: a lease
	// that is not live fails the whole cycle), so it is checked first, even
	// for a message already consumed, which a plain ack accepts under any
	// lease: a worker whose lease expired must not write state or push.
	if it.HasLease && (it.LeaseID != t.cur.leaseAtStart || t.cur.leaseAtStart == [16]byte{}) {
		return nil, ErrInvalidLease
	}
	r := s.apply(&it, t, true)
	if !r.Success {
		return nil, r.Error
	}
	out := &StreamAckResult{LeaseReleased: r.LeaseReleased, DLQ: r.DLQ}
	ends := it.Status == AckDLQ || (c.ReleaseLease && it.Status == AckCompleted)
	if g := t.cur.g; ends && g != nil && g.LeaseLive(a.now) && (!it.HasLease || g.LeaseID == it.LeaseID) {
		// Only the lease the ack was made under (or, without a lease id,
		// whichever is live) ends: a re-ack of a consumed message must not
		// take another consumer's lease away. A dlq ends it whatever
		// release_lease says (3.18); the apply above already did unless
		// the message was consumed before, which makes the dead-letter a
		// no-op but not the lease's end.
		s.release(t.cur)
		out.LeaseReleased = true
	}
	s.flush()
	s.finishDeletions()
	return out, ""
}
