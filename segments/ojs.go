package segments

import (
	"bytes"
)

// The OJS view of a queue (docs/queues.md): its state, policy binding,
// overrides and the resolved OJS-only limits the hot paths enforce. The
// Queen options stay in Queue.Options, the single place push, pop, ack and
// the sweeps read; the state machine recomputes them whenever a layer
// changes.

// OJS queue states.
const (
	OJSActive   uint8 = 0
	OJSPaused   uint8 = 1
	OJSDraining uint8 = 2 // a graceful drain, or a deletion in progress when Deletion is set
)

// Gate bits: which OJS checks the push and pop paths must run for a queue.
// A queue whose Gate is zero costs one field check.
const (
	GateState       uint8 = 1 << iota // not active (paused, draining, deleting)
	GateAccess                        // a producers or consumers list other than ["*"]
	GateCapacity                      // max_depth or max_size_bytes set
	GateConcurrency                   // max_concurrency set
)

// Delete strategies.
const (
	DeleteReject  uint8 = 1
	DeletePurge   uint8 = 2
	DeleteMove    uint8 = 3
	DeleteDiscard uint8 = 4
)

// Duration is an ISO 8601 duration as submitted, with its length.
type Duration struct {
	Text   string `msgpack:"t"`
	Micros int64  `msgpack:"us"`
}

// QueueConfig is a partial OJS configuration document: a nil field is not
// set (inherited from the layer below).
type QueueConfig struct {
	MaxDepth          *int64    `msgpack:"max_depth,omitempty"`
	MaxSizeBytes      *int64    `msgpack:"max_size,omitempty"`
	VisibilityTimeout *int64    `msgpack:"vis,omitempty"`
	MaxConcurrency    *int64    `msgpack:"max_conc,omitempty"`
	CompletedTTL      *Duration `msgpack:"completed_ttl,omitempty"`
	FailedTTL         *Duration `msgpack:"failed_ttl,omitempty"`
	CancelledTTL      *Duration `msgpack:"cancelled_ttl,omitempty"`
	DLQEnabled        *bool     `msgpack:"dlq,omitempty"`
	DLQMaxAge         *Duration `msgpack:"dlq_max_age,omitempty"`
	DLQMaxCount       *int64    `msgpack:"dlq_max_count,omitempty"`
	Producers         *[]string `msgpack:"producers,omitempty"`
	Consumers         *[]string `msgpack:"consumers,omitempty"`
}

// Limits are the resolved OJS-only values the hot paths and sweeps enforce.
type Limits struct {
	MaxDepth          int64    `msgpack:"max_depth"`
	MaxSizeBytes      int64    `msgpack:"max_size"`
	MaxConcurrency    int64    `msgpack:"max_conc"`
	RestrictProducers bool     `msgpack:"rp"`
	Producers         []string `msgpack:"producers"`
	RestrictConsumers bool     `msgpack:"rc"`
	Consumers         []string `msgpack:"consumers"`
	DLQMaxAge         int64    `msgpack:"dlq_age"` // µs, 0: no pruning by age
	DLQMaxCount       int64    `msgpack:"dlq_count"`
}

// Deletion is a deletion in progress: the queue drains until its last live
// lease ends, then the strategy runs.
type Deletion struct {
	Strategy  uint8  `msgpack:"strategy"`
	Target    string `msgpack:"target"`
	StartedAt int64  `msgpack:"started"`
}

// OJSState is the OJS part of a queue record.
type OJSState struct {
	State         uint8       `msgpack:"state"`
	Explicit      bool        `msgpack:"explicit"`
	UpdatedAt     int64       `msgpack:"updated"`
	PausedAt      int64       `msgpack:"paused_at"`
	DrainingSince int64       `msgpack:"drain_at"`
	Policy        string      `msgpack:"policy"`
	Overrides     QueueConfig `msgpack:"over"`
	Deletion      *Deletion   `msgpack:"del,omitempty"`
	Limits        Limits      `msgpack:"limits"`
	Gate          uint8       `msgpack:"gate"`
	Overflow      uint64      `msgpack:"overflow"` // pushes refused for capacity
}

// Policy is a named OJS queue policy, or the _default policy.
type Policy struct {
	Name      string      `msgpack:"name"`
	Match     string      `msgpack:"match"`
	Priority  int64       `msgpack:"prio"`
	Config    QueueConfig `msgpack:"config"`
	CreatedAt int64       `msgpack:"created"`
	UpdatedAt int64       `msgpack:"updated"`
}

// QueueEvent is one replicated queue event (queue.created, queue.paused, …).
type QueueEvent struct {
	Seq      uint64   `msgpack:"seq"`
	ID       [16]byte `msgpack:"id"`
	Type     string   `msgpack:"type"`
	Queue    string   `msgpack:"queue"`
	Time     int64    `msgpack:"time"`
	Reason   string   `msgpack:"reason,omitempty"`
	Strategy string   `msgpack:"strategy,omitempty"`
	Target   string   `msgpack:"target,omitempty"`
	Policy   string   `msgpack:"policy,omitempty"`
	Count    int64    `msgpack:"count,omitempty"`
	Fields   []string `msgpack:"fields,omitempty"`
}

// ---- policies ----

// Policy loads a policy by name, or nil.
func (t *Tx) Policy(name string) (*Policy, error) {
	v := t.get(bPolicies, nameKey(name))
	if v == nil {
		return nil, nil
	}
	p := new(Policy)
	return p, unmarshalMsgpack(v, p)
}

// PutPolicy stores a policy.
func (t *Tx) PutPolicy(p *Policy) error {
	return t.put(bPolicies, nameKey(p.Name), marshalMsgpack(p))
}

// DeletePolicy removes a policy.
func (t *Tx) DeletePolicy(name string) error { return t.del(bPolicies, nameKey(name)) }

// HasPolicies reports whether any policy (the _default one included) is stored.
func (t *Tx) HasPolicies() bool {
	k, _ := t.bucket(bPolicies).Cursor().First()
	return k != nil
}

// ForEachPolicy walks the policies in name-byte order.
func (t *Tx) ForEachPolicy(fn func(*Policy) (bool, error)) error {
	return forEachRecord(t, bPolicies, nil, nil, func(_ []byte, p *Policy) (bool, error) { return fn(p) })
}

// ---- queue events ----

// AddQueueEvent numbers and stores an event and prunes the oldest beyond
// keep. Numbers are contiguous, so the event to drop is always seq-keep.
func (t *Tx) AddQueueEvent(e *QueueEvent, keep uint64) error {
	seq, err := t.nextMeta(metaEventSeq)
	if err != nil {
		return err
	}
	e.Seq = seq
	e.ID = MessageID(e.Time, seq) // the number is recoverable from the id (EventSeq)
	if err := t.put(bQEvents, be64(seq), marshalMsgpack(e)); err != nil {
		return err
	}
	if keep > 0 && seq > keep {
		if old := be64(seq - keep); t.get(bQEvents, old) != nil {
			return t.del(bQEvents, old)
		}
	}
	return nil
}

// EventSeq recovers an event's number from its id.
func EventSeq(id [16]byte) uint64 {
	return uint64(id[7])<<62 | (u64(id[8:]) & (1<<62 - 1))
}

// ForEachQueueEvent walks events with a number above after, oldest first.
func (t *Tx) ForEachQueueEvent(after uint64, fn func(*QueueEvent) (bool, error)) error {
	return forEachRecord(t, bQEvents, be64(after+1), nil, func(_ []byte, e *QueueEvent) (bool, error) { return fn(e) })
}

// ---- dead letters ----

// DeadLetterCount counts a queue's dead letters.
func (t *Tx) DeadLetterCount(qid uint64) uint64 {
	prefix := be64(qid)
	c := t.bucket(bDLQ).Cursor()
	var n uint64
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		n++
	}
	return n
}

// ForEachDeadLetterOldest walks a queue's dead letters oldest first.
func (t *Tx) ForEachDeadLetterOldest(qid uint64, fn func(*DeadLetter) (bool, error)) error {
	prefix := be64(qid)
	return forEachRecord(t, bDLQ, prefix, prefix, func(_ []byte, d *DeadLetter) (bool, error) { return fn(d) })
}

// DeleteDeadLetter removes one dead letter.
func (t *Tx) DeleteDeadLetter(qid, seq uint64) error { return t.del(bDLQ, key88(qid, seq)) }

// DeleteDeadLetters removes every dead letter of a queue and returns how many.
func (t *Tx) DeleteDeadLetters(qid uint64) (uint64, error) {
	n := t.DeadLetterCount(qid)
	return n, t.deletePrefix(bDLQ, be64(qid))
}

// QueueCount counts the stored queues.
func (t *Tx) QueueCount() uint64 {
	var n uint64
	c := t.bucket(bQueues).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		n++
	}
	return n
}
