package fsm

import (
	"reflect"
	"testing"
	"time"
)

func (m *machine) deleteMessage(pid [16]byte, txid string) *DeleteMessageResult {
	m.t.Helper()
	return m.apply(&DeleteMessage{Partition: pid, TxID: txid})[0].(*DeleteMessageResult)
}

// TestDeleteMessageForEveryGroup deletes messages from the middle of one
// segment, inside a group's live batch and outside it: no group receives
// them, an ack of one does not resolve, the batch still ends when what is
// left of it is acked, and the message's traces and detail are gone.
func TestDeleteMessageForEveryGroup(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", seq("m", 6)...)...)
	pid := m.partition("q", "p").UUID
	m.trace(AddTrace{PartitionID: pid, TxID: "m2", EventType: "seen"})
	r := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 3})
	if got := txids(r); !reflect.DeepEqual(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("popped %v", got)
	}

	for _, tx := range []string{"m2", "m6"} {
		if res := m.deleteMessage(pid, tx); !res.Found {
			t.Fatalf("delete %s: %+v", tx, res)
		}
	}
	for _, c := range []DeleteMessage{{Partition: pid, TxID: "m2"}, {Partition: pid, TxID: "never"}, {Partition: [16]byte{9}, TxID: "m1"}} {
		if res := m.deleteMessage(c.Partition, c.TxID); res.Found {
			t.Errorf("delete %+v found a message", c)
		}
	}
	m.checkPartitionRecord("q", "p")
	if got := m.stored("q", "p"); !reflect.DeepEqual(got, []string{"m1", "m3", "m4", "m5"}) {
		t.Fatalf("stored %v", got)
	}
	if d := must1(m.f.Message(pid, "m2", m.now.UnixMicro())); d != nil {
		t.Fatalf("deleted message detail %+v", d)
	}
	if tr := must1(m.f.MessageTraces(pid, "m2")); len(tr) != 0 {
		t.Fatalf("deleted message keeps traces %+v", tr)
	}
	if c, _ := m.traceTotals(); c != 0 {
		t.Fatalf("%d trace events counted after the deletion", c)
	}

	res := m.ack("g", ackTx(pid, "m1", r.LeaseID, AckCompleted), ackTx(pid, "m2", r.LeaseID, AckCompleted),
		ackTx(pid, "m3", r.LeaseID, AckCompleted))
	if it := res.Items[1]; it.Resolved || it.Success {
		t.Errorf("ack of the deleted message %+v", it)
	}
	if it := res.Items[2]; !it.Success || !it.LeaseReleased {
		t.Errorf("ack of the batch's last message %+v", it)
	}
	if g := m.group("q", "p", "g"); g.HasLease() || g.HasBatch() {
		t.Fatalf("batch left %+v", g)
	}
	if got := m.drainGroup("q", "p", "g"); !reflect.DeepEqual(got, []string{"m4", "m5"}) {
		t.Errorf("g then receives %v", got)
	}
	if got := m.drainGroup("q", "p", "other"); !reflect.DeepEqual(got, []string{"m1", "m3", "m4", "m5"}) {
		t.Errorf("another group receives %v", got)
	}
	// The transaction id is free again, as in Queen, where the row is gone.
	if pr := m.push(item("q", "p", "m2", `"again"`)); pr.Items[0].Status != PushQueued {
		t.Fatalf("push of a deleted id: %+v", pr.Items[0])
	}
}

// TestDeleteMessageEndingABatch deletes the last message of a live batch:
// the batch then ends with the message before it, or at once when nothing of
// it is left, instead of holding the lease until it expires.
func TestDeleteMessageEndingABatch(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", seq("m", 4)...)...)
	pid := m.partition("q", "p").UUID
	r := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 2})
	m.deleteMessage(pid, "m2")
	if g := m.group("q", "p", "g"); !g.LeaseLive(m.now.UnixMicro()) || g.LeaseLast != g.Next {
		t.Fatalf("after deleting the batch's last: %+v", g)
	}
	if it := m.ack("g", ackTx(pid, "m1", r.LeaseID, AckCompleted)).Items[0]; !it.Success || !it.LeaseReleased {
		t.Fatalf("ack of what is left %+v", it)
	}
	if len(m.leaseHoldersOf(r.LeaseID)) != 0 {
		t.Fatal("lease index kept")
	}

	r = m.mustPop(Lease{Queue: "q", Group: "g", Batch: 1})
	if got := txids(r); !reflect.DeepEqual(got, []string{"m3"}) {
		t.Fatalf("popped %v", got)
	}
	m.deleteMessage(pid, "m3")
	g := m.group("q", "p", "g")
	if g.HasLease() || g.HasBatch() || len(m.leaseHoldersOf(r.LeaseID)) != 0 {
		t.Fatalf("a batch with nothing left is kept: %+v", g)
	}
	m.advance(time.Millisecond)
	if got := txids(m.mustPop(Lease{Queue: "q", Group: "g", Batch: 5})); !reflect.DeepEqual(got, []string{"m4"}) {
		t.Fatalf("next pop %v", got)
	}
	m.checkPartitionRecord("q", "p")
}

// TestDeleteMessageEveryOneLeavesAnEmptyPartition deletes every message of
// a partition pushed in several segments, and a later push is delivered.
func TestDeleteMessageEveryOneLeavesAnEmptyPartition(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "a1", "a2", "a3")...)
	m.push(items("q", "p", "b1")...)
	m.push(items("q", "p", "c1", "c2")...)
	pid := m.partition("q", "p").UUID
	for _, tx := range []string{"a2", "c1", "a1", "b1", "c2", "a3"} {
		if !m.deleteMessage(pid, tx).Found {
			t.Fatalf("delete %s", tx)
		}
		m.checkPartitionRecord("q", "p")
	}
	if p := m.partition("q", "p"); p.Messages != 0 || p.Bytes != 0 || p.Segments != 0 || p.FirstOffset != p.NextOffset {
		t.Fatalf("empty partition %+v", p)
	}
	m.push(items("q", "p", "d1")...)
	if got := m.drainGroup("q", "p", "g"); !reflect.DeepEqual(got, []string{"d1"}) {
		t.Fatalf("after emptying: %v", got)
	}
}

// deleteMessage is a deletion for the determinism log: mostly of a message
// some pop delivered (often inside a live batch), sometimes of one never
// pushed.
func (g *generator) deleteMessage() Command {
	if len(g.popped) == 0 || g.pick(5) == 0 {
		return &DeleteMessage{Partition: [16]byte{byte(g.pick(3))}, TxID: g.txid()}
	}
	r := g.popped[g.pick(len(g.popped))]
	p := r.Partitions[g.pick(len(r.Partitions))]
	return &DeleteMessage{Partition: p.PartitionID, TxID: p.Messages[g.pick(len(p.Messages))].TxID}
}

func TestDeleteMessageValidate(t *testing.T) {
	long := string(make([]byte, MaxNameBytes+1))
	if err := (&DeleteMessage{TxID: long}).Validate(); err == nil {
		t.Fatal("long transaction id accepted")
	}
	if err := (&DeleteMessage{TxID: "ok"}).Validate(); err != nil {
		t.Fatal(err)
	}
}
