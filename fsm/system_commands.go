package fsm

import (
	"fmt"

	"github.com/crownmq/crown/segments"
)

// Traces and the system maintenance switches (queen-api.md 3.16, 3.17).
const (
	TypeAddTrace          Type = 30
	TypeSetMaintenance    Type = 31
	TypeSetPopMaintenance Type = 32
)

// Bounds on traces. The HTTP layer refuses requests over the per-event
// limits with a 400; the bounds on what is kept are stamped into each
// AddTrace, so every node evicts the same events whatever build proposed it.
const (
	TraceMaxDataBytes  = 64 << 10 // one event's data, as JSON
	TraceMaxNames      = 10       // names on one event
	TraceMaxPerMessage = 100      // events kept per message: the oldest goes first
	TraceMaxTotal      = 100_000  // events kept in the cluster: the oldest goes first
	TraceMaxTotalBytes = 64 << 20 // their stored size
)

// Bounds on the push-maintenance buffer: what one push request may carry
// (README "Limits"), so the command that switches the mode off, which
// drains the whole buffer, costs at most what one maximal push costs.
const (
	PushBufferMaxMessages = 10_000
	PushBufferMaxBytes    = 16 << 20 // payload bytes
)

// AddTrace attaches a trace event to the message (PartitionID, TxID): the
// newest message holding the transaction id in the partition.
type AddTrace struct {
	_msgpack    struct{} `msgpack:",as_array"`
	PartitionID [16]byte
	TxID        string
	Group       string
	Worker      string
	EventType   string
	Names       []string // distinct, non-empty
	Data        []byte   // a JSON value
	// What is kept, stamped by the proposer (TraceMax*).
	MaxPerMessage uint32
	MaxTotal      uint32
	MaxBytes      uint64
}

// SetMaintenance switches push maintenance. On, pushes are buffered (up to
// the bounds carried here); off, the buffer is drained into the queues in
// the same command, in the order the pushes were accepted.
type SetMaintenance struct {
	_msgpack    struct{} `msgpack:",as_array"`
	Enabled     bool
	MaxMessages uint32
	MaxBytes    uint64
}

// SetPopMaintenance switches pop maintenance: while on, pops deliver nothing.
type SetPopMaintenance struct {
	_msgpack struct{} `msgpack:",as_array"`
	Enabled  bool
}

func (*AddTrace) Type() Type          { return TypeAddTrace }
func (*SetMaintenance) Type() Type    { return TypeSetMaintenance }
func (*SetPopMaintenance) Type() Type { return TypeSetPopMaintenance }

// Validate checks the command's limits.
func (c *AddTrace) Validate() error {
	if err := checkNames("transactionId", c.TxID, "consumerGroup", c.Group, "workerId", c.Worker,
		"eventType", c.EventType); err != nil {
		return err
	}
	if len(c.Names) > TraceMaxNames {
		return fmt.Errorf("trace event has %d names; the limit is %d", len(c.Names), TraceMaxNames)
	}
	for i, n := range c.Names {
		if n == "" {
			return fmt.Errorf("trace name %d is empty", i)
		}
		if err := checkNames("traceNames", n); err != nil {
			return err
		}
		for _, m := range c.Names[:i] {
			if m == n {
				return fmt.Errorf("trace name %q is repeated", n)
			}
		}
	}
	if len(c.Data) == 0 || len(c.Data) > TraceMaxDataBytes {
		return fmt.Errorf("trace data is %d bytes; it must hold 1 to %d", len(c.Data), TraceMaxDataBytes)
	}
	if c.MaxPerMessage == 0 || c.MaxTotal == 0 || c.MaxBytes == 0 {
		return fmt.Errorf("trace bounds %d per message, %d in total, %d bytes leave no room for an event",
			c.MaxPerMessage, c.MaxTotal, c.MaxBytes)
	}
	return nil
}

// Validate checks the command's limits.
func (c *SetMaintenance) Validate() error {
	if c.Enabled && (c.MaxMessages == 0 || c.MaxBytes == 0) {
		return fmt.Errorf("push maintenance with a buffer of %d messages and %d bytes", c.MaxMessages, c.MaxBytes)
	}
	return nil
}

// Validate checks the command's limits.
func (c *SetPopMaintenance) Validate() error { return nil }

// Push item outcomes in push maintenance, beside PushQueued and PushDuplicate.
const (
	// PushBuffered: the request was accepted into the buffer; it is pushed
	// when push maintenance is switched off.
	PushBuffered uint8 = 3
	// PushBufferFull: the buffer had no room for the request; nothing of it
	// was kept.
	PushBufferFull uint8 = 4
)

// Buffered reports a push answered by push maintenance (every item then has
// PushBuffered or every item PushBufferFull).
func (r *PushResult) Buffered() bool {
	return len(r.Items) > 0 && (r.Items[0].Status == PushBuffered || r.Items[0].Status == PushBufferFull)
}

// AddTraceResult answers an AddTrace.
type AddTraceResult struct {
	Found   bool     // the message exists; nothing was stored otherwise
	ID      [16]byte // the event's id
	Evicted uint32   // older events removed to stay within the bounds
}

// PushBufferTotals describes the push-maintenance buffer.
type PushBufferTotals = segments.PushBufferTotals

// DrainStats counts what switching push maintenance off pushed.
type DrainStats struct {
	Requests   uint64 // buffered requests pushed, in the order they were accepted
	Queued     uint64 // messages stored
	Duplicates uint64 // messages dropped as duplicates (dedup window, at drain time)
	// Refused counts messages of requests that a queue's OJS rules (paused,
	// full, access) refused at drain time: they were dropped.
	Refused uint64
}

// MaintenanceResult answers SetMaintenance and SetPopMaintenance with the
// state after the command.
type MaintenanceResult struct {
	Switches SystemSwitches
	Drained  DrainStats
}
