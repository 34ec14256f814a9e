package segments

import (
	"fmt"
)

// SubScope is a subscription record's key taken apart: the group, the kind of
// scope, and the scope's names (queue and partition, or namespace and task;
// B is empty for SubQueue).
type SubScope struct {
	Group string
	Kind  byte
	A, B  string
}

// Key is the record key the scope is stored under.
func (s SubScope) Key() []byte { return SubKey(s.Group, s.Kind, s.A, s.B) }

// ParseSubKey decodes a key built by SubKey. Administration needs to know
// which queue a record names (deleting a group's metadata on one queue,
// listing a group's subscription per queue), and the key is the only place
// that says so.
func ParseSubKey(k []byte) (SubScope, error) {
	var s SubScope
	rest, group, err := cutName(k)
	if err != nil || len(rest) == 0 {
		return s, fmt.Errorf("subscription key %x: %w", k, ErrCorrupt)
	}
	s.Group, s.Kind = group, rest[0]
	if rest, s.A, err = cutName(rest[1:]); err != nil {
		return s, fmt.Errorf("subscription key %x: %w", k, ErrCorrupt)
	}
	if s.Kind != SubQueue {
		if rest, s.B, err = cutName(rest); err != nil {
			return s, fmt.Errorf("subscription key %x: %w", k, ErrCorrupt)
		}
	}
	if len(rest) != 0 {
		return s, fmt.Errorf("subscription key %x: %d trailing bytes: %w", k, len(rest), ErrCorrupt)
	}
	return s, nil
}

// cutName reads one length-prefixed name (appendName) off the front of b.
func cutName(b []byte) (rest []byte, name string, err error) {
	field, rest, err := readBytes(b)
	return rest, string(field), err
}

// ForEachSubscriptionRecord walks every subscription record of every group,
// in key order, until fn returns false.
func (t *Tx) ForEachSubscriptionRecord(fn func(scope SubScope, s *Subscription) (bool, error)) error {
	return forEachRecord(t, bSubs, nil, nil, func(k []byte, s *Subscription) (bool, error) {
		scope, err := ParseSubKey(k)
		if err != nil {
			return false, err
		}
		return fn(scope, s)
	})
}

// DeleteGroupState removes a group's state on a partition together with its
// lease index entry, which would otherwise outlive the state it points at.
// It reports whether there was any state.
func (t *Tx) DeleteGroupState(pid uint64, group string) (bool, error) {
	g, err := t.Group(pid, group)
	if err != nil || g == nil {
		return false, err
	}
	if g.HasLease() {
		if err := t.UnindexLease(g.LeaseID, pid, group); err != nil {
			return false, err
		}
	}
	return true, t.DeleteGroup(pid, group)
}
