package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/segments"
)

// machine drives a state machine the way Raft does, one entry per call, with
// a test-controlled clock stamped into each entry as the leader would.
type machine struct {
	t     testing.TB
	f     *FSM
	index uint64
	now   time.Time
	node  string
}

func newMachine(t testing.TB) *machine { return newMachineWith(t, nil) }

// newMachineWith is newMachine with its Config changed by set first.
func newMachineWith(t testing.TB, set func(*Config)) *machine {
	t.Helper()
	// Tests check every cached partition record against the state file;
	// benchmarks measure what a node runs.
	_, bench := t.(*testing.B)
	cfg := Config{Dir: t.TempDir(), NodeID: "n1", VerifyCache: !bench, VerifyAcks: !bench}
	if set != nil {
		set(&cfg)
	}
	f, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &machine{t: t, f: f, now: time.Date(2026, 5, 16, 8, 0, 0, 0, time.UTC), node: "n1"}
}

// entry encodes commands as one log entry at the machine's clock.
func (m *machine) entry(cmds ...Command) *raft.Log {
	m.t.Helper()
	b, err := AppendEntry(nil, &Entry{Stamp: m.now.UnixMicro(), Origin: m.node, Commands: cmds})
	if err != nil {
		m.t.Fatal(err)
	}
	m.index++
	return &raft.Log{Index: m.index, Term: 1, Type: raft.LogCommand, Data: b}
}

// apply applies commands as one entry and returns their results.
func (m *machine) apply(cmds ...Command) []any {
	m.t.Helper()
	r := m.f.ApplyBatch([]*raft.Log{m.entry(cmds...)})[0]
	er, ok := r.(*EntryResult)
	if !ok {
		m.t.Fatalf("entry result %T %+v", r, r)
	}
	return er.Results
}

func (m *machine) advance(d time.Duration) { m.now = m.now.Add(d) }

func (m *machine) push(items ...PushItem) *PushResult {
	m.t.Helper()
	return m.apply(&Push{Items: items})[0].(*PushResult)
}

func (m *machine) pop(l Lease) *LeaseResult {
	m.t.Helper()
	if l.Scope == 0 {
		l.Scope = ScopeWildcard
	}
	if l.Group == "" {
		l.Group = QueueMode
	}
	if l.WindowBatch == 0 {
		l.WindowBatch = 100
	}
	return m.apply(&l)[0].(*LeaseResult)
}

func (m *machine) ack(group string, items ...AckItem) *AckResult {
	m.t.Helper()
	if group == "" {
		group = QueueMode
	}
	return m.apply(&Ack{Group: group, Items: items})[0].(*AckResult)
}

func (m *machine) configure(c Configure) *ConfigureResult {
	m.t.Helper()
	return m.apply(&c)[0].(*ConfigureResult)
}

func (m *machine) extend(lease [16]byte, seconds int64) *ExtendResult {
	m.t.Helper()
	return m.apply(&Extend{LeaseID: lease, Seconds: seconds})[0].(*ExtendResult)
}

func (m *machine) txn(ops ...TxOp) *TransactionResult {
	m.t.Helper()
	return m.apply(&Transaction{Ops: ops})[0].(*TransactionResult)
}

func (m *machine) deleteQueue(name string) *DeleteQueueResult {
	m.t.Helper()
	return m.apply(&DeleteQueue{Queue: name})[0].(*DeleteQueueResult)
}

// catch applies commands as one entry and returns the panic value, if the
// apply panicked (a storage error stops the state machine; bbolt rolled the
// transaction back).
func (m *machine) catch(cmds ...Command) (results []any, panicked any) {
	m.t.Helper()
	l := m.entry(cmds...)
	defer func() {
		if r := recover(); r != nil {
			m.index-- // the entry was not applied
			panicked = r
		}
	}()
	r := m.f.ApplyBatch([]*raft.Log{l})[0]
	if er, ok := r.(*EntryResult); ok {
		return er.Results, nil
	}
	return []any{r}, nil
}

// mustPop pops and fails the test when nothing is delivered.
func (m *machine) mustPop(l Lease) *LeaseResult {
	m.t.Helper()
	r := m.pop(l)
	if r.Count() == 0 {
		m.t.Fatalf("pop %+v delivered nothing", l)
	}
	return r
}

// configureWith configures a queue with the configure defaults changed by edit.
func configureWith(m *machine, queue string, edit func(*segments.Options)) {
	m.t.Helper()
	o := DefaultOptions(segments.OriginConfigure)
	edit(&o)
	m.configure(Configure{Queue: queue, Options: o})
}

// subQueueKey is the key of a (group, queue) subscription record.
func subQueueKey(group, queue string) []byte {
	return segments.SubKey(group, segments.SubQueue, queue, "")
}

// opPush and opAck build transaction operations.
func opPush(items ...PushItem) TxOp { return TxOp{Kind: OpPush, Items: items} }

func opAck(group string, it AckItem) TxOp {
	if group == "" {
		group = QueueMode
	}
	return TxOp{Kind: OpAck, Group: group, Ack: it}
}

// view runs fn in a read transaction and fails the test on error.
func (m *machine) view(fn func(tx *segments.Tx) error) {
	m.t.Helper()
	if err := m.f.View(fn); err != nil {
		m.t.Fatal(err)
	}
}

// queue loads a queue record, nil when absent.
func (m *machine) queue(name string) *segments.Queue {
	m.t.Helper()
	var q *segments.Queue
	m.view(func(tx *segments.Tx) (err error) { q, err = tx.Queue(name); return err })
	return q
}

// partition loads a partition record, nil when the queue or partition is absent.
func (m *machine) partition(queue, name string) *segments.Partition {
	m.t.Helper()
	var p *segments.Partition
	m.view(func(tx *segments.Tx) error {
		q, err := tx.Queue(queue)
		if err != nil || q == nil {
			return err
		}
		p, err = tx.Partition(q.ID, name)
		return err
	})
	return p
}

// group loads a consumer group's state on a partition, nil when it has none.
func (m *machine) group(queue, part, group string) *segments.Group {
	m.t.Helper()
	p := m.partition(queue, part)
	if p == nil {
		return nil
	}
	var g *segments.Group
	m.view(func(tx *segments.Tx) (err error) { g, err = tx.Group(p.ID, group); return err })
	return g
}

// deadLetters lists a queue's dead letters oldest first.
func (m *machine) deadLetters(queue string) []*segments.DeadLetter {
	m.t.Helper()
	q := m.queue(queue)
	if q == nil {
		return nil
	}
	return m.deadLettersByID(q.ID)
}

func (m *machine) deadLettersByID(qid uint64) []*segments.DeadLetter {
	m.t.Helper()
	var out []*segments.DeadLetter
	m.view(func(tx *segments.Tx) error {
		return tx.ForEachDeadLetter(qid, func(d *segments.DeadLetter) (bool, error) {
			out = append([]*segments.DeadLetter{d}, out...)
			return true, nil
		})
	})
	return out
}

// partitions lists a queue's partition names in name order.
func (m *machine) partitions(queue string) []string {
	m.t.Helper()
	q := m.queue(queue)
	if q == nil {
		return nil
	}
	var out []string
	m.view(func(tx *segments.Tx) error {
		return tx.ForEachPartition(q.ID, "", func(p *segments.Partition) (bool, error) {
			out = append(out, p.Name)
			return true, nil
		})
	})
	return out
}

// subscription loads a subscription record.
func (m *machine) subscription(key []byte) *segments.Subscription {
	m.t.Helper()
	var s *segments.Subscription
	m.view(func(tx *segments.Tx) (err error) { s, err = tx.Subscription(key); return err })
	return s
}

func (m *machine) digest() string {
	m.t.Helper()
	_, d, err := m.f.Digest()
	if err != nil {
		m.t.Fatal(err)
	}
	return d
}

// item is a push item with a JSON payload.
func item(queue, partition, tx, payload string) PushItem {
	return PushItem{Queue: queue, Partition: partition, TxID: tx, Payload: []byte(payload)}
}

// delivered lists what a pop delivered as "partition/txid", in response order.
func delivered(r *LeaseResult) []string {
	var out []string
	for _, p := range r.Partitions {
		for _, msg := range p.Messages {
			out = append(out, p.Partition+"/"+msg.TxID)
		}
	}
	return out
}

// txids lists the transaction ids a pop delivered, in response order.
func txids(r *LeaseResult) []string {
	var out []string
	for _, p := range r.Partitions {
		for _, msg := range p.Messages {
			out = append(out, msg.TxID)
		}
	}
	return out
}

// seq names n transaction ids prefix1..prefixN.
func seq(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return out
}

// items builds one push item per transaction id, to one partition.
func items(queue, partition string, txs ...string) []PushItem {
	out := make([]PushItem, len(txs))
	for i, tx := range txs {
		out[i] = item(queue, partition, tx, fmt.Sprintf("%q", tx))
	}
	return out
}

// ackTx builds an ack item addressed by partition id and transaction id.
func ackTx(pid [16]byte, tx string, lease [16]byte, status uint8) AckItem {
	return AckItem{TxID: tx, PartitionID: pid, PartitionOK: true,
		LeaseID: lease, HasLease: lease != [16]byte{}, Status: status}
}

// ackAll builds one ack item per message of a pop, with one status.
func ackAll(r *LeaseResult, status uint8) []AckItem {
	var out []AckItem
	for _, p := range r.Partitions {
		for _, msg := range p.Messages {
			out = append(out, ackOf(p, msg, r.LeaseID, status))
		}
	}
	return out
}

// ackOf builds a completed ack for a delivered message.
func ackOf(lp LeasedPartition, m DeliveredMessage, lease [16]byte, status uint8) AckItem {
	return AckItem{TxID: m.TxID, PartitionID: lp.PartitionID, PartitionOK: true,
		LeaseID: lease, HasLease: lease != [16]byte{}, Status: status}
}

func TestSmokeLifecycle(t *testing.T) {
	m := newMachine(t)
	pr := m.push(item("orders", "p1", "t1", `{"a":1}`), item("orders", "p1", "t2", `2`), item("orders", "p1", "t1", `3`))
	if pr.Items[0].Status != PushQueued || pr.Items[1].Status != PushQueued || pr.Items[2].Status != PushDuplicate {
		t.Fatalf("statuses %+v", pr.Items)
	}
	if pr.Items[2].MessageID != pr.Items[0].MessageID {
		t.Fatalf("duplicate must point at the original")
	}
	lr := m.pop(Lease{Queue: "orders", Batch: 10})
	if lr.Count() != 2 || len(lr.Partitions) != 1 {
		t.Fatalf("pop %+v", lr)
	}
	lp := lr.Partitions[0]
	if string(lp.Messages[0].Payload) != `{"a":1}` || lp.Messages[1].TxID != "t2" {
		t.Fatalf("messages %+v", lp.Messages)
	}
	if again := m.pop(Lease{Queue: "orders", Batch: 10}); again.Count() != 0 {
		t.Fatalf("leased partition delivered again: %+v", again)
	}
	ar := m.ack("", ackOf(lp, lp.Messages[0], lr.LeaseID, AckCompleted), ackOf(lp, lp.Messages[1], lr.LeaseID, AckCompleted))
	if !ar.Items[0].Success || !ar.Items[1].Success || !ar.Items[1].LeaseReleased {
		t.Fatalf("ack %+v", ar.Items)
	}
	if again := m.pop(Lease{Queue: "orders", Batch: 10}); again.Count() != 0 {
		t.Fatalf("completed messages delivered again: %+v", again)
	}
}
