package fsm

import (
	"fmt"

	"github.com/crownmq/crown/segments"
)

// TypeDeleteMessage removes one message (queen-api.md 3.12).
const TypeDeleteMessage Type = 37

// DeleteMessage removes the message with TxID (its newest occurrence) from
// the partition with the UUID Partition, for every consumer group. Dead
// letters of it are kept, as retention keeps them.
type DeleteMessage struct {
	_msgpack  struct{} `msgpack:",as_array"`
	Partition [16]byte
	TxID      string
}

func (*DeleteMessage) Type() Type { return TypeDeleteMessage }

// Validate checks the command's limits.
func (c *DeleteMessage) Validate() error { return checkNames("transactionId", c.TxID) }

// DeleteMessageResult answers a DeleteMessage.
type DeleteMessageResult struct {
	Found bool // the message was stored, and is now deleted
}

// applyDeleteMessage cuts the message out of its segment (segments.DeleteMessage):
// its offset becomes a gap that pops skip, and an ack naming it no longer
// resolves. A group whose live batch ended with it would otherwise hold its
// lease until expiry even after acking everything left (a batch ends when the
// position passes its last message, which nothing can ack now), so its batch
// ends at the last message still stored in it, or at once when none is.
func applyDeleteMessage(a *applier, c *DeleteMessage) any {
	p, off, ok := a.messageAt(c.Partition, c.TxID)
	if !ok {
		return &DeleteMessageResult{}
	}
	q := must1(a.tx.QueueByID(p.QueueID))
	if q == nil {
		must(fmt.Errorf("partition %d of queue %d, which is not stored: %w", p.ID, p.QueueID, segments.ErrCorrupt))
	}
	// The id stays a duplicate for the rest of its dedup window.
	if ref, ok := must2(a.tx.TxRefAt(p, off)); ok {
		if until := a.dedupUntil(q, ref.PushedAt); until != 0 {
			must(a.tx.RememberDeletedTxID(q.ID, p.ID, c.TxID, ref, until))
		}
	}
	if !must1(a.tx.DeleteMessage(p, off)) {
		must(fmt.Errorf("partition %d: transaction id %q indexed at offset %d, which holds no message: %w",
			p.ID, c.TxID, off, segments.ErrCorrupt))
	}
	must(a.tx.PutPartition(p))
	type batch struct {
		name string
		g    segments.Group
	}
	var cut []batch
	must(a.tx.ForEachGroup(p.ID, func(name string, g *segments.Group) (bool, error) {
		if g.HasBatch() && g.Next <= off && off <= g.LeaseLast {
			cut = append(cut, batch{name, *g})
		}
		return true, nil
	}))
	ended := false
	for i := range cut {
		g := &cut[i].g
		// Delivered and not to be acked: the status view counts a batch's
		// acked messages as delivered minus those left in it.
		g.LeaseDelivered -= min(g.LeaseDelivered, 1)
		if g.LeaseLast != off {
			must(a.tx.PutGroup(p.ID, cut[i].name, g))
			continue
		}
		var last uint64 // the batch's last stored offset; 0: none is left
		must(a.tx.ScanRanges(p, g.Next, func(first, end uint64, _ int64) (bool, error) {
			if first >= off {
				return false, nil
			}
			last = min(end, off) - 1
			return true, nil
		}))
		if last != 0 {
			g.LeaseLast = last
		} else {
			a.endBatchLease(g, p.ID, cut[i].name)
			// Nothing of the batch is left to ack: it ends as a completed
			// one would, and the next batch starts with no failures charged.
			if g.Next >= off {
				g.Batches++
			}
			g.EndBatch()
			g.Retry = 0
			ended = true
		}
		must(a.tx.PutGroup(p.ID, cut[i].name, g))
	}
	if ended {
		// The partition is free for these groups again: wake parked pops.
		a.events.touch(q.Name)
	}
	return &DeleteMessageResult{Found: true}
}
