package segments

import (
	"bytes"
	"fmt"
)

// A discovery pointer is a group's round-robin position across the queues a
// discovery pop covers (queen-api.md 4.5): the queue name the group's next
// pop with that namespace and task starts at, the queues before it coming
// last. It is to queues what QueueGroup.RRFrom is to one queue's partitions.
// The key is the group, namespace and task, each length-prefixed, so no name
// can run into the next and a group's pointers are one prefix; the value is
// the name itself. It names a queue, it does not refer to one, so deleting a
// queue leaves it alone: the walk starts at the first name after it.

// discoveryKey builds the key of a group's pointer for one scope.
func discoveryKey(group, namespace, task string) []byte {
	k := appendName(make([]byte, 0, 3+len(group)+len(namespace)+len(task)), group)
	k = appendName(k, namespace)
	return appendName(k, task)
}

// parseDiscoveryKey takes a key built by discoveryKey apart.
func parseDiscoveryKey(k []byte) (group, namespace, task string, err error) {
	rest, group, err := cutName(k)
	if err == nil {
		rest, namespace, err = cutName(rest)
	}
	if err == nil {
		rest, task, err = cutName(rest)
	}
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d trailing bytes", len(rest))
	}
	if err != nil {
		return "", "", "", fmt.Errorf("discovery pointer key %x: %v: %w", k, err, ErrCorrupt)
	}
	return group, namespace, task, nil
}

// DiscoveryFrom is the queue name where the group's next discovery pop with
// this namespace and task starts, "" (the first queue) when it has none.
func (t *Tx) DiscoveryFrom(group, namespace, task string) string {
	return string(t.get(bDiscoveryRR, discoveryKey(group, namespace, task)))
}

// PutDiscoveryFrom records where the group's next discovery pop with this
// namespace and task starts.
func (t *Tx) PutDiscoveryFrom(group, namespace, task, from string) error {
	return t.put(bDiscoveryRR, discoveryKey(group, namespace, task), []byte(from))
}

// ForEachDiscoveryFrom walks the group's discovery pointers in key order
// until fn returns false.
func (t *Tx) ForEachDiscoveryFrom(group string, fn func(namespace, task, from string) (bool, error)) error {
	prefix := appendName(nil, group)
	c := t.bucket(bDiscoveryRR).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		_, ns, task, err := parseDiscoveryKey(k)
		if err != nil {
			return err
		}
		if more, err := fn(ns, task, string(v)); err != nil || !more {
			return err
		}
	}
	return nil
}

// DeleteDiscoveryFrom forgets every discovery pointer of the group.
func (t *Tx) DeleteDiscoveryFrom(group string) error {
	return t.deletePrefix(bDiscoveryRR, appendName(nil, group))
}
