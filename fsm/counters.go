package fsm

import "github.com/crownmq/crown/segments"

// Counters are cluster-wide lifetime counters kept in the replicated state,
// so every node reports the same values (Queen's scope="cluster" families).
type Counters struct {
	PushRequests uint64
	PushMessages uint64
	PopRequests  uint64
	PopMessages  uint64
	AckRequests  uint64
	AckMessages  uint64
	AckSuccess   uint64
	AckFailed    uint64
	Transactions uint64
	DLQ          uint64
}

const numCounters = 10

func (c *Counters) fields() [numCounters]*uint64 {
	return [numCounters]*uint64{&c.PushRequests, &c.PushMessages, &c.PopRequests, &c.PopMessages,
		&c.AckRequests, &c.AckMessages, &c.AckSuccess, &c.AckFailed, &c.Transactions, &c.DLQ}
}

func loadCounters(tx *segments.Tx) Counters {
	var c Counters
	for i, v := range tx.Counters(numCounters) {
		*c.fields()[i] = v
	}
	return c
}

func (c *Counters) store(tx *segments.Tx) error {
	vals := make([]uint64, numCounters)
	for i, p := range c.fields() {
		vals[i] = *p
	}
	return tx.PutCounters(vals)
}

// count adds one applied command and its result.
func (c *Counters) count(cmd Command, result any) {
	switch r := result.(type) {
	case *PushResult:
		c.PushRequests++
		for _, it := range r.Items {
			if it.Status == PushQueued {
				c.PushMessages++
			}
		}
	case *LeaseResult:
		c.PopRequests++
		c.PopMessages += uint64(r.Count())
	case *AckResult:
		c.AckRequests++
		c.AckMessages += uint64(len(r.Items))
		var items []AckItem
		switch a := cmd.(type) {
		case *Ack:
			items = a.Items
		case *AckPacked:
			items = a.Items
		case *AckAt:
			items = a.Items
		}
		for i, it := range r.Items {
			if it.DLQ {
				c.DLQ++
			}
			if !it.Success {
				continue
			}
			if s := items[i].Status; s == AckFailed || s == AckDLQ {
				c.AckFailed++
			} else {
				c.AckSuccess++
			}
		}
	case *MaintenanceResult:
		c.PushMessages += r.Drained.Queued // buffered pushes stored at last
	case *TransactionResult:
		c.Transactions++
		if !r.Success {
			return
		}
		for _, op := range r.Results {
			if op.Kind == OpPush && op.Status == PushQueued {
				c.PushMessages++
			}
			if op.DLQ {
				c.DLQ++
			}
		}
	case *StreamCycleResult:
		// A cycle's messages and ack count as any others do.
		if !r.Success {
			return
		}
		for _, it := range r.Push {
			if it.Status == PushQueued {
				c.PushMessages++
			}
		}
		if r.Ack != nil {
			c.AckMessages++
			if r.Ack.DLQ {
				c.DLQ++
				c.AckFailed++
			} else {
				c.AckSuccess++
			}
		}
	}
}
