package fsm

import (
	"bytes"
	"fmt"
	"testing"
)

// capped applies a LeaseCapped of maxBytes over the queue-mode wildcard pop l.
func (m *machine) capped(l Lease, maxBytes uint64) *LeaseResult {
	m.t.Helper()
	if l.Scope == 0 {
		l.Scope = ScopeWildcard
	}
	if l.Group == "" {
		l.Group = QueueMode
	}
	l.WindowBatch = 100
	return m.apply(&LeaseCapped{Lease: l, MaxBytes: maxBytes})[0].(*LeaseResult)
}

// A pop bounded in bytes (consuming, so that no lease holds a partition
// between the pops) takes messages while they fit, at least one, and
// stops at the first that does not: also across partitions, and within a
// segment that holds several messages (each costs an even share of it).
func TestLeaseCappedStopsAtItsBytes(t *testing.T) {
	m := newMachine(t)
	big := bytes.Repeat([]byte("x"), 1000)
	// Five one-message segments in p1, five in p2.
	for i := range 10 {
		m.push(PushItem{Queue: "q", Partition: fmt.Sprintf("p%d", 1+i/5), TxID: fmt.Sprintf("m%d", i),
			Payload: append([]byte(`"`), append(big, '"')...)})
	}
	// A segment is its payload and some overhead: 2,500 bytes hold two.
	r := m.capped(Lease{Queue: "q", Batch: 100, MaxPartitions: 2, AutoAck: true}, 2500)
	if r.Count() != 2 || len(r.Partitions) != 1 {
		t.Fatalf("capped at 2,500 bytes: %d messages over %d partitions, want 2 from one partition (the second partition not walked once full)", r.Count(), len(r.Partitions))
	}
	// At least one, however small the cap.
	r = m.capped(Lease{Queue: "q", Batch: 100, MaxPartitions: 2, AutoAck: true}, 1)
	if r.Count() != 1 {
		t.Fatalf("capped at 1 byte: %d messages, want 1", r.Count())
	}
	// A cap over everything: the batch and partitions bound it as before.
	r = m.capped(Lease{Queue: "q", Batch: 100, MaxPartitions: 2, AutoAck: true}, 1<<30)
	if r.Count() != 7 {
		t.Fatalf("capped at 1 GiB: %d messages, want the 7 left", r.Count())
	}

	// Ten messages in one segment: each costs a tenth of it.
	m.push(func() []PushItem {
		items := make([]PushItem, 10)
		for i := range items {
			items[i] = PushItem{Queue: "g", Partition: "p", TxID: fmt.Sprintf("g%d", i), Payload: append([]byte(`"`), append(big, '"')...)}
		}
		return items
	}()...)
	r = m.capped(Lease{Queue: "g", Batch: 100, AutoAck: true}, 3500)
	if r.Count() != 3 {
		t.Fatalf("capped at 3,500 bytes over one segment of ten 1,000-byte messages: %d, want 3", r.Count())
	}
	for _, p := range r.Partitions {
		if len(p.Messages) != int(p.Delivered) {
			t.Fatalf("partition %s: delivered %d, carried %d", p.Partition, p.Delivered, len(p.Messages))
		}
	}
}
