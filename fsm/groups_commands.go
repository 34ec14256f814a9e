package fsm

import (
	"fmt"
)

// Consumer-group administration (queen-api.md 3.15 and 4.20).
const (
	TypeDeleteGroup         Type = 25
	TypeRewriteSubscription Type = 26
	TypeSeek                Type = 27
	TypeSeekPartition       Type = 28
)

// DeleteGroup removes a consumer group's positions, leases and retry
// counters on every queue, or on Queue alone when OneQueue is set. With
// DeleteMetadata it also removes the group's subscription records (on one
// queue: those naming the queue), so the group's next pop is a first contact.
// Dead letters are kept.
type DeleteGroup struct {
	_msgpack       struct{} `msgpack:",as_array"`
	Group          string
	OneQueue       bool
	Queue          string
	DeleteMetadata bool
}

// RewriteSubscription sets the start time of every subscription record of
// Group. Only partitions where the group has no position yet are affected.
type RewriteSubscription struct {
	_msgpack struct{} `msgpack:",as_array"`
	Group    string
	Start    int64 // unix µs
}

// Seek moves Group's position on every partition of Queue where it has state,
// releasing any lease there: to the end of the partition (ToEnd), or to just
// after the last message created at or before Timestamp.
type Seek struct {
	_msgpack  struct{} `msgpack:",as_array"`
	Group     string
	Queue     string
	ToEnd     bool
	Timestamp int64 // unix µs; ignored with ToEnd
}

// SeekPartition moves Group to the end of one partition, releasing any lease
// there; the group gets state on the partition if it had none.
type SeekPartition struct {
	_msgpack  struct{} `msgpack:",as_array"`
	Group     string
	Queue     string
	Partition string
}

func (*DeleteGroup) Type() Type         { return TypeDeleteGroup }
func (*RewriteSubscription) Type() Type { return TypeRewriteSubscription }
func (*Seek) Type() Type                { return TypeSeek }
func (*SeekPartition) Type() Type       { return TypeSeekPartition }

// Validate checks the command's limits.
func (c *DeleteGroup) Validate() error {
	if !c.OneQueue && c.Queue != "" {
		return fmt.Errorf("group deletion on every queue names queue %q", c.Queue)
	}
	return checkNames("consumerGroup", c.Group, "queue", c.Queue)
}

// Validate checks the command's limits.
func (c *RewriteSubscription) Validate() error { return checkNames("consumerGroup", c.Group) }

// Validate checks the command's limits.
func (c *Seek) Validate() error {
	if c.ToEnd && c.Timestamp != 0 {
		return fmt.Errorf("seek gives both toEnd and a timestamp")
	}
	return checkNames("consumerGroup", c.Group, "queue", c.Queue)
}

// Validate checks the command's limits.
func (c *SeekPartition) Validate() error {
	return checkNames("consumerGroup", c.Group, "queue", c.Queue, "partition", c.Partition)
}

// DeleteGroupResult answers a DeleteGroup.
type DeleteGroupResult struct {
	Partitions    uint64 // partitions where the group's state was removed
	Subscriptions uint64 // subscription records removed
}

// RewriteSubscriptionResult answers a RewriteSubscription.
type RewriteSubscriptionResult struct {
	Updated uint64 // subscription records rewritten
}

// SeekResult answers a Seek.
type SeekResult struct {
	Partitions uint64 // partitions whose position was set
}

// SeekPartitionResult answers a SeekPartition.
type SeekPartitionResult struct {
	Found bool // the queue and partition exist
	// MovedTo is the commit time of the partition's newest message, where
	// the position now is; 0 when the partition never held one.
	MovedTo int64
}
