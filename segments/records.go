package segments

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// ErrCorrupt reports a stored value that does not decode. It means the file
// was damaged or written by an incompatible version; callers treat it as fatal.
var ErrCorrupt = errors.New("segments: corrupt record")

// ErrClosed is returned by reads of a store that has been closed.
var ErrClosed = errors.New("segments: store closed")

// Queue origins: how a queue was born decides its lease default.
const (
	OriginPush      uint8 = 1 // implicit creation by a Queen push
	OriginConfigure uint8 = 2 // Queen POST /api/v1/configure
	OriginOJS       uint8 = 3 // OJS queue-admin API
)

// Options are the fifteen Queen queue options plus the four legacy keys that
// clients send and expect echoed. Values are fully resolved (no "unset").
type Options struct {
	LeaseTime                 int64 `msgpack:"lease"`
	RetryLimit                int64 `msgpack:"retry"`
	DeadLetterQueue           bool  `msgpack:"dlq"`
	DLQAfterMaxRetries        bool  `msgpack:"dlq_max"`
	DelayedProcessing         int64 `msgpack:"delay"`
	WindowBuffer              int64 `msgpack:"window"`
	RetentionEnabled          bool  `msgpack:"ret_on"`
	RetentionSeconds          int64 `msgpack:"ret_s"`
	CompletedRetentionSeconds int64 `msgpack:"ret_done_s"`
	MaxWaitTimeSeconds        int64 `msgpack:"max_wait"`
	MinPopWaitTime            int64 `msgpack:"min_pop_wait"`
	EncryptionEnabled         bool  `msgpack:"enc"`
	DedupWindowSeconds        int64 `msgpack:"dedup"`
	Priority                  int64 `msgpack:"priority"`
	MaxSize                   int64 `msgpack:"max_size"`
	RetryDelay                int64 `msgpack:"retry_delay"`
	TTL                       int64 `msgpack:"ttl"`
}

// Queue is one queue's record. Encoded as a msgpack map so that later fields
// (the OJS view) can be added without a migration.
type Queue struct {
	ID        uint64   `msgpack:"id"`
	UUID      [16]byte `msgpack:"uuid"`
	Name      string   `msgpack:"name"`
	Namespace string   `msgpack:"ns"`
	Task      string   `msgpack:"task"`
	CreatedAt int64    `msgpack:"created"`
	Origin    uint8    `msgpack:"origin"`
	Options   Options  `msgpack:"opts"`
	// Base is the Queen layer under the OJS policy layers (origin defaults or
	// the last /configure); nil while no layer applies, Options then being
	// the base. OJS is the OJS view's state (ojs.go); nil for a queue the
	// OJS features never touched. Both are omitted when nil, so records of
	// plain Queen queues encode exactly as before.
	Base *Options  `msgpack:"base,omitempty"`
	OJS  *OJSState `msgpack:"ojs,omitempty"`
	// Named marks (with fsm's Present bits) the options shared with the OJS
	// view that the last Queen /configure named: they sit in the top layer
	// beside the OJS overrides, so no policy beats them. Omitted when zero.
	Named uint32 `msgpack:"named,omitempty"`
	// ConfiguredAt is when a Queen /configure last changed the queue (unix
	// µs; 0 if never): the OJS view's updated_at moves with it.
	ConfiguredAt int64 `msgpack:"configured,omitempty"`
}

// Partition is one ordered lane of a queue. Offsets start at 1; an offset
// is never reused, so a cursor can always be compared with any stored offset.
type Partition struct {
	ID            uint64
	QueueID       uint64
	UUID          [16]byte
	Name          string
	CreatedAt     int64  // unix µs
	NextOffset    uint64 // offset the next pushed message gets
	FirstOffset   uint64 // oldest stored offset; == NextOffset when empty
	Messages      uint64 // messages stored
	Bytes         uint64 // payload bytes stored
	Segments      uint64 // segments stored
	LastCreatedAt int64  // createdAt of the newest message ever pushed
	WindowMark    int64  // start of the current windowBuffer burst, 0 if none
	WindowCount   uint64 // messages pushed since WindowMark
	WindowFirst   uint64 // first offset of the current burst
	// IDsIndexedFrom is an offset from which every stored message is the
	// occurrence of its transaction id that the index names, so that an
	// acknowledgment of a message there can be resolved by the index alone
	// (idmark.go). An append that may repeat an id moves it to NextOffset;
	// it never moves back. Not hashed by the digest: it decides how an
	// acknowledgment finds a message, never which one it finds.
	IDsIndexedFrom uint64
	// recent holds the references of the newest segments, which live in
	// this record until they move to the segments bucket (recent.go).
	recent []byte
}

const partitionFixed = 8 + 8 + 16 + 8*10

// partitionFieldsEnd is where the record b stored under key k ends its own
// fields and name, and its segment references begin.
func partitionFieldsEnd(k, b []byte) (int, error) {
	if len(k) < 8 || len(b) < partitionFixed+len(k)-8 {
		return 0, fmt.Errorf("partition record of %d bytes under a key of %d: %w", len(b), len(k), ErrCorrupt)
	}
	return partitionFixed + len(k) - 8, nil
}

// unmarshal decodes the record v stored under key k.
func (p *Partition) unmarshal(k, b []byte) error {
	if len(k) >= 8 && len(b) > 0 && b[0] == recordCompact {
		return p.unmarshalCompact(k, b)
	}
	end, err := partitionFieldsEnd(k, b)
	if err != nil {
		return err
	}
	p.ID, p.QueueID = u64(b), u64(b[8:])
	if p.QueueID != u64(k) || !bytes.Equal(b[partitionFixed:end], k[8:]) {
		return fmt.Errorf("partition record under %x names another queue or partition: %w", k, ErrCorrupt)
	}
	copy(p.UUID[:], b[16:32])
	f := b[32:]
	p.CreatedAt = int64(u64(f))
	p.NextOffset = u64(f[8:])
	p.FirstOffset = u64(f[16:])
	p.Messages = u64(f[24:])
	p.Bytes = u64(f[32:])
	p.Segments = u64(f[40:])
	p.LastCreatedAt = int64(u64(f[48:]))
	p.WindowMark = int64(u64(f[56:]))
	p.WindowCount = u64(f[64:])
	p.WindowFirst = u64(f[72:])
	p.Name = string(b[partitionFixed:end])
	// Records written before schema 6 carry no IDsIndexedFrom: every message
	// they hold may repeat an id (idmark.go).
	p.IDsIndexedFrom = p.NextOffset
	p.recent = nil
	rest := b[end:]
	switch {
	case len(rest) == 0:
		return nil
	case rest[0] == sectionMarked:
		if err := p.unpackSection(rest); err != nil {
			return err
		}
	case rest[0] == recentPacked:
		if err := p.unpackRecent(rest); err != nil {
			return err
		}
	default:
		// Schema 4: the references as they are in memory. A copy: bbolt's
		// value is only valid until the next write, and references
		// flushed from it are handed to bbolt.
		p.recent = bytes.Clone(rest)
	}
	return checkRecent(p.ID, p.recent)
}

// Group is the state of one consumer group on one partition.
type Group struct {
	// Next is the first offset the group has not consumed: everything before
	// it is consumed. It never moves backwards except by an explicit seek.
	Next uint64
	// The lease, present when LeaseID is non-zero. A lease whose expiry is not
	// after the current command time is treated as absent.
	LeaseID     [16]byte
	LeaseExpiry int64 // unix µs
	// The current batch: the last offset delivered by the latest pop and how
	// many it delivered (LeaseLast 0: none). It outlives the lease record,
	// so a batch completed by acks after its lease expired or was cleared
	// still resets the retry counter.
	LeaseLast      uint64
	LeaseDelivered uint64
	Retry          uint64 // charged failures of the current batch
	Consumed       uint64 // totalConsumed
	Batches        uint64 // batchesConsumed
	LastConsumedAt int64  // unix µs, 0 if never
	// SkipFrom and SkipTo (0, 0: none) are offsets an OJS purge removed
	// for this group while it held a live batch ending before SkipFrom:
	// [SkipFrom, SkipTo) may still hold other groups' live batches, kept
	// for their redelivery, which this group must not read. Once its
	// position reaches SkipFrom it moves to SkipTo (PassSkipped).
	SkipFrom, SkipTo uint64
}

const (
	groupSize = 8 + 16 + 8*7
	// groupSkipSize is a record with a skip range. Only such records carry
	// it, so the state of a cluster that never purged beside a live batch
	// keeps the bytes (and digests) of the records before it.
	groupSkipSize = groupSize + 16
)

// HasSkip reports whether an OJS purge left the group a range to skip.
func (g *Group) HasSkip() bool { return g.SkipTo != 0 }

// Passed reports whether the group is done with offset off: its position
// is past it, or a purge removed it for the group (it lies in the skip
// range). Every count of a backlog and every message status reads a message
// as consumed by the group on this rule.
func (g *Group) Passed(off uint64) bool {
	return off < g.Next || g.HasSkip() && off >= g.SkipFrom && off < g.SkipTo
}

// PassSkipped moves the position over the skip range once it has reached
// the range, and drops the range; it reports whether the position moved.
func (g *Group) PassSkipped() bool {
	if !g.HasSkip() || g.Next < g.SkipFrom {
		return false
	}
	moved := g.Next < g.SkipTo
	g.Next = max(g.Next, g.SkipTo)
	g.SkipFrom, g.SkipTo = 0, 0
	return moved
}

// HasLease reports whether a lease record is present (live or expired).
func (g *Group) HasLease() bool { return g.LeaseID != [16]byte{} }

// LeaseLive reports whether the lease is present and not expired at now.
func (g *Group) LeaseLive(now int64) bool { return g.HasLease() && g.LeaseExpiry > now }

// HasBatch reports whether a delivered batch is outstanding.
func (g *Group) HasBatch() bool { return g.LeaseLast != 0 }

// ClearLease drops the lease (id and expiry) and keeps the batch.
func (g *Group) ClearLease() {
	g.LeaseID = [16]byte{}
	g.LeaseExpiry = 0
}

// EndBatch drops the lease and the batch.
func (g *Group) EndBatch() {
	g.ClearLease()
	g.LeaseLast, g.LeaseDelivered = 0, 0
}

func (g *Group) marshal() []byte {
	size := groupSize
	if g.HasSkip() {
		size = groupSkipSize
	}
	b := make([]byte, size)
	putU64(b, g.Next)
	copy(b[8:24], g.LeaseID[:])
	o := 24
	for _, v := range []uint64{uint64(g.LeaseExpiry), g.LeaseLast, g.LeaseDelivered, g.Retry,
		g.Consumed, g.Batches, uint64(g.LastConsumedAt)} {
		putU64(b[o:], v)
		o += 8
	}
	if g.HasSkip() {
		putU64(b[groupSize:], g.SkipFrom)
		putU64(b[groupSize+8:], g.SkipTo)
	}
	return b
}

func (g *Group) unmarshal(b []byte) error {
	if len(b) != groupSize && len(b) != groupSkipSize {
		return fmt.Errorf("group record of %d bytes: %w", len(b), ErrCorrupt)
	}
	g.Next = u64(b)
	copy(g.LeaseID[:], b[8:24])
	g.LeaseExpiry = int64(u64(b[24:]))
	g.LeaseLast = u64(b[32:])
	g.LeaseDelivered = u64(b[40:])
	g.Retry = u64(b[48:])
	g.Consumed = u64(b[56:])
	g.Batches = u64(b[64:])
	g.LastConsumedAt = int64(u64(b[72:]))
	g.SkipFrom, g.SkipTo = 0, 0
	if len(b) == groupSkipSize {
		g.SkipFrom, g.SkipTo = u64(b[groupSize:]), u64(b[groupSize+8:])
		if g.SkipTo == 0 || g.SkipFrom >= g.SkipTo {
			return fmt.Errorf("group record skips [%d, %d): %w", g.SkipFrom, g.SkipTo, ErrCorrupt)
		}
	}
	return nil
}

// QueueGroup is what a group keeps per queue: the partition name its next
// wildcard scan starts at (a round-robin pointer, so that busy partitions
// cannot starve quiet ones), and when it first touched the queue.
type QueueGroup struct {
	RRFrom    string
	CreatedAt int64
}

func (q *QueueGroup) marshal() []byte {
	b := make([]byte, 8, 8+len(q.RRFrom))
	putU64(b, uint64(q.CreatedAt))
	return append(b, q.RRFrom...)
}

func (q *QueueGroup) unmarshal(b []byte) error {
	if len(b) < 8 {
		return fmt.Errorf("queue-group record of %d bytes: %w", len(b), ErrCorrupt)
	}
	q.CreatedAt, q.RRFrom = int64(u64(b)), string(b[8:])
	return nil
}

// DeadLetter is a copy of a message dead-lettered for one group.
type DeadLetter struct {
	Seq           uint64   `msgpack:"seq"`
	QueueID       uint64   `msgpack:"qid"`
	PartitionID   uint64   `msgpack:"pid"`
	PartitionName string   `msgpack:"part"`
	Offset        uint64   `msgpack:"off"`
	MessageID     [16]byte `msgpack:"mid"`
	TxID          string   `msgpack:"tx"`
	TraceID       [16]byte `msgpack:"trace"`
	HasTrace      bool     `msgpack:"has_trace"`
	ProducerSub   string   `msgpack:"sub"`
	Payload       []byte   `msgpack:"payload"`
	Encrypted     bool     `msgpack:"enc"`
	Group         string   `msgpack:"group"`
	Error         string   `msgpack:"err"`
	RetryCount    uint64   `msgpack:"retries"`
	CreatedAt     int64    `msgpack:"created"`
	FailedAt      int64    `msgpack:"failed"`
}

// Subscription kinds: the scope a subscription record applies to.
const (
	SubQueue     byte = 'q' // (group, queue)
	SubPartition byte = 'p' // (group, queue, partition)
	SubDiscovery byte = 'd' // (group, namespace, task)
)

// Subscription fixes where a named group starts on partitions where it has no
// position yet: just before Start (messages with createdAt >= Start deliver).
type Subscription struct {
	Mode      string `msgpack:"mode"` // "new" or "timestamp"
	Start     int64  `msgpack:"start"`
	CreatedAt int64  `msgpack:"created"`
}

// Node is a cluster member's addresses, replicated so that every node can
// forward to every other.
type Node struct {
	ID       string `msgpack:"id"`
	RaftAddr string `msgpack:"raft"`
	HTTPAddr string `msgpack:"http"`
}

func marshalMsgpack(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		// Only fixed struct types are marshalled here; failure is a programming error.
		panic(fmt.Sprintf("segments: msgpack marshal %T: %v", v, err))
	}
	return b
}

func unmarshalMsgpack(b []byte, v any) error {
	if err := msgpack.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%T: %v: %w", v, err, ErrCorrupt)
	}
	return nil
}

// appendName appends a length-prefixed string, so that composite keys stay
// unambiguous whatever bytes a name contains.
func appendName(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
