package fsm

import "github.com/crownmq/crown/segments"

// Results are returned by Apply to the node that proposed the command (they
// are never stored). Times are unix microseconds; ids are raw UUID bytes.

// ConfigureResult answers a Configure.
type ConfigureResult struct {
	Queue segments.Queue
}

// Push item outcomes.
const (
	PushQueued    uint8 = 1
	PushDuplicate uint8 = 2
)

// PushItemResult is the outcome of one push item.
type PushItemResult struct {
	Status      uint8
	MessageID   [16]byte
	PartitionID [16]byte
}

// PushResult answers a Push, one item per input item, in input order.
type PushResult struct {
	Items []PushItemResult
	// Refused is set when nothing was stored because of an OJS rule.
	Refused *Refusal
	// Pressure is set when the push left a bounded queue at 80 % or more
	// of a bound (ojs-queues.md 7.1): the fullest such queue.
	Pressure *Pressure
}

// Pressure is how full a push left a bounded queue.
type Pressure struct {
	Queue     string
	Depth     int64 // the queue's depth (or size) after the push
	Bound     int64
	BoundType string
}

// Ratio is Depth over Bound.
func (p *Pressure) Ratio() float64 { return float64(p.Depth) / float64(p.Bound) }

// DeliveredMessage is one message handed out by a pop.
type DeliveredMessage struct {
	ID          [16]byte
	TxID        string
	TraceID     [16]byte
	HasTrace    bool
	ProducerSub string
	Payload     []byte
	Encrypted   bool
	CreatedAt   int64
	RetryCount  uint64
	// Offset is where the message is stored in its partition, which an
	// acknowledgment proposed here can carry (AckAt).
	Offset uint64
}

// LeasedPartition is what one claimed partition contributed to a pop.
type LeasedPartition struct {
	Queue       string
	Partition   string
	PartitionID [16]byte
	// Delivered counts the messages claimed; Messages holds them only on the
	// node that proposed the pop.
	Delivered uint32
	Messages  []DeliveredMessage
}

// LeaseResult answers a pop. LeaseID is zero with AutoAck or when nothing
// was claimed.
type LeaseResult struct {
	LeaseID    [16]byte
	Group      string
	Partitions []LeasedPartition
	// Denied names the queue whose access.consumers list refused the
	// principal; nothing was claimed.
	Denied string
}

// Count is the number of messages delivered.
func (r *LeaseResult) Count() int {
	n := 0
	for i := range r.Partitions {
		n += int(r.Partitions[i].Delivered)
	}
	return n
}

// Ack errors reported per item.
const (
	ErrUnresolvable = "unresolvable"
	ErrInvalidLease = "Invalid or expired lease"
)

// AckItemResult is the outcome of one ack item. Error is "" on success.
type AckItemResult struct {
	Success       bool
	Error         string
	Queue         string
	Partition     string
	Resolved      bool // Queue and Partition are meaningful
	LeaseReleased bool
	DLQ           bool
	Dropped       bool
}

// AckResult answers an Ack, one item per input item, in input order.
type AckResult struct {
	Items []AckItemResult
}

// Extend errors.
const (
	ErrLeaseNotFound = "Lease not found"
	ErrLeaseExpired  = "Lease already expired"
)

// ExtendResult answers an Extend.
type ExtendResult struct {
	Success   bool
	Error     string
	ExpiresAt int64
}

// TxOpResult is the outcome of one transaction operation (one per push item).
type TxOpResult struct {
	Kind        uint8
	Success     bool
	Error       string
	TxID        string
	DLQ         bool
	Status      uint8 // push: PushQueued or PushDuplicate
	MessageID   [16]byte
	PartitionID [16]byte
	Queue       string
}

// TransactionResult answers a Transaction. On failure nothing was applied and
// Results runs up to and including the failing operation.
type TransactionResult struct {
	Success bool
	Error   string
	Results []TxOpResult
	Refused *Refusal // a push refused by an OJS rule failed the transaction
}

// DeleteQueueResult answers a DeleteQueue.
type DeleteQueueResult struct {
	Existed bool
	// Refused is set when the queue may not be deleted (the OJS queue
	// "default", which always exists); nothing changed.
	Refused *Refusal
}

// Ack reports applied.
type OK struct{}

// ErrorResult is returned for a command that could not be decoded. It is
// deterministic (every node fails the same bytes the same way) and changes
// nothing.
type ErrorResult struct {
	Err string
}

// Push refusals (OJS features enforced on every push).
const (
	RefuseFull     uint8 = 1 // capacity: 429 QUEUE_FULL
	RefuseDraining uint8 = 2 // graceful drain: 409 queue_draining
	RefuseDeleting uint8 = 3 // deletion in progress: 409 queue_deleting
	RefuseDenied   uint8 = 4 // not in access.producers: 403
	// RefuseProtected answers a Queen delete of the queue "default": 409
	// queue_protected, as its OJS delete.
	RefuseProtected uint8 = 5
	// RefuseDeniedConsumer answers a pop whose principal is not in
	// access.consumers: 403. Pops report it in LeaseResult.Denied; the code
	// is never stored.
	RefuseDeniedConsumer uint8 = 6
)

// Refusal says why a push stored nothing.
type Refusal struct {
	Code      uint8
	Queue     string
	Depth     int64 // capacity: the queue's depth (or size) before the push
	Bound     int64 // capacity: the bound that would be crossed
	BoundType string
}

// OJSError is a refused OJS administration command, in the terms of the OJS
// error body (ojs-queues.md 0.5).
type OJSError struct {
	Status  int
	Code    string
	Type    string
	Message string
	Field   string
	State   string // details.current_state
	Depth   int64  // details.depth (queue_not_empty)
	// details.counts (queue_not_empty): the non-terminal counts of the
	// queue, as in the Queue object.
	Available int64
	Active    int64
}

// OJSResult answers the OJS administration commands.
type OJSResult struct {
	Err   *OJSError
	Queue *QueueInfo // the queue after the command; as it was last when Deleted
	// Config is the effective configuration of Queue as the command left it,
	// for the Queue object of the answer: a later command of the same entry
	// may delete the queue (a pending deletion may finish) before the
	// handler reads it back.
	Config   *EffectiveConfig
	Policy   *Policy
	Changed  bool
	Created  bool
	Deleted  bool // a deletion completed
	Pending  bool // a deletion waits for active leases
	Affected uint64
	Unbound  uint64
}

// OJSSweepResult reports one OJS sweep.
type OJSSweepResult struct {
	Finished bool   // a deletion or drain completed
	Pruned   uint64 // dead letters removed
	More     bool
}
