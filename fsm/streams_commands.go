package fsm

import (
	"fmt"
	"math"
)

// Streams (queen-api.md 3.18): queries register by name, then commit one
// source partition's state changes, sink pushes and source ack atomically.
const (
	TypeStreamRegister Type = 35
	TypeStreamCycle    Type = 36
)

// Limits of the streams commands. The HTTP layer refuses larger requests
// with a 400; Validate checks again so that no command can fail a storage
// write (a state key is part of a bbolt key, which bbolt caps at 32 KiB).
const (
	// MaxStateKeyBytes bounds one state key.
	MaxStateKeyBytes = 1024
	// MaxStateValueBytes bounds one state value: every write of a row
	// rewrites its whole bbolt leaf.
	MaxStateValueBytes = 256 << 10
	// MaxStateOps bounds the state operations of one cycle and the keys
	// one state read names.
	MaxStateOps = 10000
	// MaxStateRows and MaxStateReadBytes bound one state read's answer: a
	// read that matches more fails and asks for narrower filters rather
	// than truncate silently.
	MaxStateRows      = 10000
	MaxStateReadBytes = 16 << 20
)

// StreamRegister registers a query (idempotent). An existing query keeps
// its id; with Reset its state is deleted and its hash and source replaced.
type StreamRegister struct {
	_msgpack   struct{} `msgpack:",as_array"`
	Name       string
	Source     string
	Sink       string
	ConfigHash string
	Reset      bool
}

// State operation kinds.
const (
	StateUpsert uint8 = 1
	StateDelete uint8 = 2
)

// StateOp is one state change of a cycle. WindowEnd is the value's numeric
// windowEnd member, extracted by the proposer so that reads filter on it
// without parsing values.
type StateOp struct {
	_msgpack     struct{} `msgpack:",as_array"`
	Kind         uint8
	Key          string
	Value        []byte // upsert: the JSON value
	HasWindowEnd bool
	WindowEnd    float64
}

// StreamCycle commits, for one partition of a query's source queue, state
// changes, pushes and an optional ack, all or nothing. The ack names its
// message in PartitionID; Ack.PartitionID is ignored.
type StreamCycle struct {
	_msgpack     struct{} `msgpack:",as_array"`
	QueryID      [16]byte
	PartitionID  [16]byte
	Group        string
	Ops          []StateOp
	Items        []PushItem
	HasAck       bool
	Ack          AckItem
	ReleaseLease bool
	// Principal, when set, is checked against the pushed queues'
	// access.producers, as TransactionAs does.
	Principal string
}

func (*StreamRegister) Type() Type { return TypeStreamRegister }
func (*StreamCycle) Type() Type    { return TypeStreamCycle }

// Validate checks the command's limits.
func (c *StreamRegister) Validate() error {
	if c.Name == "" || c.Source == "" || c.ConfigHash == "" {
		return fmt.Errorf("stream query registration needs a name, a source queue and a config hash")
	}
	return checkNames("name", c.Name, "source_queue", c.Source, "sink_queue", c.Sink, "config_hash", c.ConfigHash)
}

// Validate checks the command's limits.
func (c *StreamCycle) Validate() error {
	if err := checkNames("consumer_group", c.Group, "ack.transactionId", c.Ack.TxID, "principal", c.Principal); err != nil {
		return err
	}
	if len(c.Ops) > MaxStateOps {
		return fmt.Errorf("cycle holds %d state operations; the limit is %d", len(c.Ops), MaxStateOps)
	}
	for i := range c.Ops {
		op := &c.Ops[i]
		switch {
		case op.Kind != StateUpsert && op.Kind != StateDelete:
			return fmt.Errorf("state operation %d: kind %d unknown", i, op.Kind)
		case len(op.Key) > MaxStateKeyBytes:
			return fmt.Errorf("state operation %d: key is %d bytes; the limit is %d", i, len(op.Key), MaxStateKeyBytes)
		case len(op.Value) > MaxStateValueBytes:
			return fmt.Errorf("state operation %d: value is %d bytes; the limit is %d", i, len(op.Value), MaxStateValueBytes)
		case op.Kind == StateUpsert && len(op.Value) == 0:
			return fmt.Errorf("state operation %d: upsert without a value", i)
		case math.IsNaN(op.WindowEnd) || math.IsInf(op.WindowEnd, 0):
			return fmt.Errorf("state operation %d: windowEnd is not a finite number", i)
		}
	}
	if err := checkItems(c.Items); err != nil {
		return fmt.Errorf("push_items: %w", err)
	}
	return nil
}

// StreamRegisterResult answers a StreamRegister.
type StreamRegisterResult struct {
	QueryID [16]byte
	Name    string
	// ConfigHash is the hash registered after the command.
	ConfigHash string
	Fresh      bool // created by this command
	Reset      bool // an existing query's state was deleted
	Removed    uint64
	// Conflict, when set, says why nothing changed: the query exists with
	// another hash or source and the command did not ask for a reset.
	Conflict string
}

// StreamAckResult is the outcome of a cycle's ack.
type StreamAckResult struct {
	LeaseReleased bool
	DLQ           bool
}

// StreamCycleResult answers a StreamCycle. On failure nothing was applied.
type StreamCycleResult struct {
	Success bool
	Error   string
	// Queue is the source queue, once the partition resolved.
	Queue    string
	StateOps int
	Push     []PushItemResult
	Ack      *StreamAckResult // nil without an ack
	Refused  *Refusal         // a push refused by an OJS rule failed the cycle
}
