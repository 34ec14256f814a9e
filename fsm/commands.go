package fsm

import (
	"github.com/crownmq/crown/segments"
)

// Type identifies a command in the log. Values are part of the log format:
// never renumber or reuse one.
type Type uint8

// The command table. Each type has exactly one apply function (registry.go).
const (
	TypeConfigure    Type = 1
	TypePush         Type = 2
	TypeLease        Type = 3
	TypeAck          Type = 4
	TypeExtend       Type = 5
	TypeTransaction  Type = 6
	TypeDeleteQueue  Type = 7
	TypeRegisterNode Type = 8
	TypeRemoveNode   Type = 9
	TypeSweep        Type = 10
	TypeExpireLeases Type = 11
)

// Command is one state change. Every field a rule needs is carried in the
// command: Apply adds only the entry's stamped time and ids derived from the
// state's sequence counter.
type Command interface {
	Type() Type
	// Validate checks limits that a storage write would otherwise trip
	// over. A command that fails it is answered with an ErrorResult and
	// changes nothing, on every node alike.
	Validate() error
}

// QueueMode is the consumer group used when a request names none.
const QueueMode = "__QUEUE_MODE__"

// Configure creates a queue or replaces its whole configuration.
type Configure struct {
	_msgpack  struct{} `msgpack:",as_array"`
	Queue     string
	Namespace string
	Task      string
	Options   segments.Options
}

// PushItem is one message of a push. TxID is always set (the receiving node
// generates one when the client sent none). Payload is the JSON value as
// pushed, or an encryption envelope when Encrypted.
type PushItem struct {
	_msgpack    struct{} `msgpack:",as_array"`
	Queue       string
	Partition   string
	TxID        string
	TraceID     [16]byte
	HasTrace    bool
	ProducerSub string
	Payload     []byte
	Encrypted   bool
}

// Push appends messages to one or more partitions in one atomic step. The
// items for one partition form one segment, in item order.
type Push struct {
	_msgpack struct{} `msgpack:",as_array"`
	Items    []PushItem
}

// Pop scopes.
const (
	ScopeWildcard  uint8 = 1 // every partition of Queue
	ScopeSpecific  uint8 = 2 // Queue/Partition only
	ScopeDiscovery uint8 = 3 // every queue whose tags match Namespace/Task
)

// Subscription modes requested by a pop, consulted on first contact only.
const (
	SubAll       uint8 = 0 // from the beginning (no record is stored)
	SubNew       uint8 = 1 // only messages created at or after the first pop
	SubTimestamp uint8 = 2 // only messages created at or after SubFrom
)

// Lease is a pop: it claims up to MaxPartitions partitions with deliverable
// messages for Group and leases (or, with AutoAck, consumes) up to Batch
// messages across them.
type Lease struct {
	_msgpack      struct{} `msgpack:",as_array"`
	Scope         uint8
	Queue         string
	Partition     string
	Namespace     string
	Task          string
	Group         string
	Batch         uint32
	MaxPartitions uint32
	AutoAck       bool
	LeaseSeconds  int64
	SubMode       uint8
	SubFrom       int64 // unix µs, for SubTimestamp
	// Window rules, stamped from the leader's configuration so that every
	// node evaluates the same rule: WindowBatch promotes a held partition
	// early (QUEEN_HOTLIST_WINDOW_BATCH); SQLWindow selects the pop-time
	// debounce without early promotion (QUEEN_HOTLIST=0).
	WindowBatch uint64
	SQLWindow   bool
}

// Ack statuses.
const (
	AckCompleted uint8 = 1 // "completed" or "success"
	AckFailed    uint8 = 2
	AckRetry     uint8 = 3
	AckDLQ       uint8 = 4
	AckUnknown   uint8 = 5 // StatusText holds what the client sent
)

// AckItem addresses one message by (partition id, transaction id).
type AckItem struct {
	_msgpack    struct{} `msgpack:",as_array"`
	TxID        string
	PartitionID [16]byte
	// PartitionOK is false when the client's partitionId was not a UUID:
	// such an ack is unresolvable, reported per item.
	PartitionOK bool
	LeaseID     [16]byte
	HasLease    bool
	Status      uint8
	// StatusText is what the client sent when Status is AckUnknown (the
	// apply quotes it in the item's error), and empty otherwise: a known
	// status needs no text in the log. Entries of earlier builds carry
	// the text of every status; the apply reads it for AckUnknown only.
	StatusText string
	Error      string
	// At is where the leader knows the message named by TxID is stored in
	// the partition, 0 when it does not (offsets start at 1). Only AckAt
	// writes it to the log; the apply uses it in place of an index lookup
	// when it can prove the two agree (ackat.go).
	At uint64 `msgpack:"-"`
}

// Ack acknowledges items for one consumer group.
type Ack struct {
	_msgpack struct{} `msgpack:",as_array"`
	Group    string
	Items    []AckItem
}

// Extend pushes out the expiry of every live lease with LeaseID.
type Extend struct {
	_msgpack struct{} `msgpack:",as_array"`
	LeaseID  [16]byte
	Seconds  int64
}

// Transaction operation kinds.
const (
	OpPush    uint8 = 1
	OpAck     uint8 = 2
	OpInvalid uint8 = 3 // an operation that cannot run (unknown type, bad item): fails the transaction
)

// TxOp is one operation of a transaction.
type TxOp struct {
	_msgpack struct{} `msgpack:",as_array"`
	Kind     uint8
	Items    []PushItem // OpPush
	Ack      AckItem    // OpAck
	Group    string     // OpAck
	Name     string     // OpInvalid: the type the client sent
}

// Transaction applies pushes and acks atomically: all or none.
type Transaction struct {
	_msgpack struct{} `msgpack:",as_array"`
	Ops      []TxOp
}

// DeleteQueue removes a queue and everything in it.
type DeleteQueue struct {
	_msgpack struct{} `msgpack:",as_array"`
	Queue    string
}

// RegisterNode records a member's addresses in the replicated node registry.
type RegisterNode struct {
	_msgpack struct{} `msgpack:",as_array"`
	ID       string
	RaftAddr string
	HTTPAddr string
}

// RemoveNode drops a member from the node registry.
type RemoveNode struct {
	_msgpack struct{} `msgpack:",as_array"`
	ID       string
}

// Sweep applies a queue's deletion rules (retentionSeconds,
// completedRetentionSeconds, maxWaitTimeSeconds) at the entry's time,
// deleting at most MaxSegments whole segments. The leader decides when to
// sweep; the state decides what goes, so proposing the same sweep twice
// deletes nothing more the second time.
type Sweep struct {
	_msgpack    struct{} `msgpack:",as_array"`
	Queue       string
	MaxSegments uint32
}

// ExpireLeases clears leases that expired more than Grace microseconds
// before the entry's time, at most Max of them. Expired leases are already
// treated as absent by pops; this removes their records so they stop
// counting as processing and their index entries go away. It inspects the
// lease index from the lease id From on (zero: from the oldest), so that
// live leases older than the stale ones cannot hold the same window of
// the index forever; the result says where the next one goes on.
type ExpireLeases struct {
	Grace int64
	Max   uint32
	From  [16]byte // encoded only when set (expire_codec.go)
}

func (*Configure) Type() Type    { return TypeConfigure }
func (*Push) Type() Type         { return TypePush }
func (*Lease) Type() Type        { return TypeLease }
func (*Ack) Type() Type          { return TypeAck }
func (*Extend) Type() Type       { return TypeExtend }
func (*Transaction) Type() Type  { return TypeTransaction }
func (*DeleteQueue) Type() Type  { return TypeDeleteQueue }
func (*RegisterNode) Type() Type { return TypeRegisterNode }
func (*RemoveNode) Type() Type   { return TypeRemoveNode }
func (*Sweep) Type() Type        { return TypeSweep }
func (*ExpireLeases) Type() Type { return TypeExpireLeases }
