package fsm

import (
	"fmt"
)

// MaxNameBytes bounds queue, partition, consumer-group, namespace, task and
// transaction-id strings (Queen's storage limit). The HTTP layer refuses
// longer values with a 400; the state machine checks again so that no
// command, however it was built, can fail inside a storage write.
const MaxNameBytes = 255

// NameError reports a name over MaxNameBytes.
type NameError struct {
	Field string
	Len   int
}

func (e *NameError) Error() string {
	return fmt.Sprintf("%s is %d bytes long; the limit is %d", e.Field, e.Len, MaxNameBytes)
}

func checkNames(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if len(fields[i+1]) > MaxNameBytes {
			return &NameError{Field: fields[i], Len: len(fields[i+1])}
		}
	}
	return nil
}

func checkItems(items []PushItem) error {
	for i := range items {
		it := &items[i]
		if err := checkNames("queue", it.Queue, "partition", it.Partition, "transactionId", it.TxID,
			"producerSub", it.ProducerSub); err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
	}
	return nil
}

// Validate checks the command's limits.
func (c *Configure) Validate() error {
	return checkNames("queue", c.Queue, "namespace", c.Namespace, "task", c.Task)
}

// Validate checks the command's limits.
func (c *Push) Validate() error { return checkItems(c.Items) }

// Validate checks the command's limits.
func (c *Lease) Validate() error {
	if c.Scope < ScopeWildcard || c.Scope > ScopeDiscovery {
		return fmt.Errorf("pop scope %d unknown", c.Scope)
	}
	return checkNames("queue", c.Queue, "partition", c.Partition, "namespace", c.Namespace,
		"task", c.Task, "consumerGroup", c.Group)
}

// Validate checks the command's limits.
func (c *Ack) Validate() error {
	if err := checkNames("consumerGroup", c.Group); err != nil {
		return err
	}
	for i := range c.Items {
		if err := checkNames("transactionId", c.Items[i].TxID); err != nil {
			return fmt.Errorf("acknowledgment %d: %w", i, err)
		}
	}
	return nil
}

// Validate checks the command's limits.
func (c *Extend) Validate() error { return nil }

// Validate checks the command's limits.
func (c *Transaction) Validate() error {
	for i := range c.Ops {
		op := &c.Ops[i]
		if err := checkItems(op.Items); err != nil {
			return fmt.Errorf("operation %d: %w", i, err)
		}
		if err := checkNames("consumerGroup", op.Group, "transactionId", op.Ack.TxID); err != nil {
			return fmt.Errorf("operation %d: %w", i, err)
		}
	}
	return nil
}

// Validate checks the command's limits.
func (c *DeleteQueue) Validate() error { return checkNames("queue", c.Queue) }

// Validate checks the command's limits.
func (c *RegisterNode) Validate() error {
	if c.ID == "" {
		return fmt.Errorf("node id is empty")
	}
	return checkNames("node id", c.ID)
}

// Validate checks the command's limits.
func (c *RemoveNode) Validate() error { return checkNames("node id", c.ID) }

// Validate never passes: a malformed command is reported, not applied.
func (m *Malformed) Validate() error {
	return fmt.Errorf("%s command did not decode: %s", TypeName(m.Of), m.Err)
}

// Validate checks the command's limits.
func (c *Sweep) Validate() error {
	if c.MaxSegments == 0 {
		return fmt.Errorf("sweep of %q with a zero segment budget", c.Queue)
	}
	return checkNames("queue", c.Queue)
}

// Validate checks the command's limits.
func (c *ExpireLeases) Validate() error {
	if c.Max == 0 || c.Grace < 0 {
		return fmt.Errorf("lease sweep with budget %d and grace %d", c.Max, c.Grace)
	}
	return nil
}
