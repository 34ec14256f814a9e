package fsm

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// decodeOne frames c alone in an entry and decodes it back.
func decodeOne(t *testing.T, c Command) (Command, int) {
	t.Helper()
	b, err := AppendEntry(nil, &Entry{Stamp: 1, Origin: "n1", Commands: []Command{c}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := DecodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	return e.Commands[0], len(b)
}

// An acknowledgment of a popped batch names one partition and one lease:
// packed, it is written once, and the items decode as they were.
func TestAckPackedBatchOfOnePop(t *testing.T) {
	pid, lease := [16]byte{1, 2, 3, 4}, [16]byte{5, 6, 7, 8}
	ack := Ack{Group: "g"}
	for i := range 100 {
		ack.Items = append(ack.Items, AckItem{TxID: fmt.Sprintf("r1-3-%06d", i), PartitionID: pid, PartitionOK: true,
			LeaseID: lease, HasLease: true, Status: AckCompleted})
	}
	plain, plainLen := decodeOne(t, &ack)
	packed, packedLen := decodeOne(t, &AckPacked{ack})
	if !reflect.DeepEqual(plain.(*Ack).Items, ack.Items) {
		t.Fatal("plain acknowledgments changed in the round trip")
	}
	p, ok := packed.(*AckPacked)
	if !ok {
		t.Fatalf("decoded %T, want *AckPacked", packed)
	}
	if p.Group != ack.Group || !reflect.DeepEqual(p.Items, ack.Items) {
		t.Fatalf("packed acknowledgments changed in the round trip: %+v", p.Items[:2])
	}
	// 17 bytes an item against 54 (an 11-byte id); the table's one pair is 39.
	if packedLen*10 > plainLen*4 {
		t.Fatalf("packed entry %d bytes, plain %d: want at most 40 %%", packedLen, plainLen)
	}
}

// Items of several partitions and leases, without a lease, with an
// unparsable partition id, failed with an error text and an unknown status
// text: each decodes to what it was, in its place.
func TestAckPackedMixedPairs(t *testing.T) {
	a, b := [16]byte{1}, [16]byte{2}
	l1, l2 := [16]byte{9}, [16]byte{8}
	items := []AckItem{
		{TxID: "t1", PartitionID: a, PartitionOK: true, LeaseID: l1, HasLease: true, Status: AckCompleted},
		{TxID: "t2", PartitionID: b, PartitionOK: true, LeaseID: l2, HasLease: true, Status: AckFailed, Error: "boom"},
		{TxID: "t3", PartitionID: a, PartitionOK: true, LeaseID: l1, HasLease: true, Status: AckCompleted},
		{TxID: "t4", PartitionID: a, PartitionOK: true, Status: AckCompleted},
		{TxID: "t5", Status: AckUnknown, StatusText: "whatever"},
		{TxID: "t6", PartitionID: b, PartitionOK: true, LeaseID: l2, HasLease: true, Status: AckDLQ},
		{TxID: "t7", PartitionID: a, PartitionOK: true, Status: AckCompleted},
	}
	got, _ := decodeOne(t, &AckPacked{Ack{Group: "g", Items: items}})
	if !reflect.DeepEqual(got.(*AckPacked).Items, items) {
		t.Fatalf("got %+v\nwant %+v", got.(*AckPacked).Items, items)
	}
	// Four distinct pairs, each written once.
	var raw []any
	body, err := msgpack.Marshal(&AckPacked{Ack{Group: "g", Items: items}})
	if err != nil {
		t.Fatal(err)
	}
	if err := msgpack.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	if n := len(raw[1].([]any)); n != 4 {
		t.Fatalf("table of %d pairs, want 4", n)
	}
}

// A reference past the table makes the command malformed (answered with an
// error, nothing applied), not a panic or a zero partition.
func TestAckPackedRejectsReferencePastTable(t *testing.T) {
	body, err := msgpack.Marshal([]any{"g",
		[]any{[]any{make([]byte, 16), true, []byte(nil), false}},
		[]any{[]any{"t1", 1, AckCompleted, "", ""}}})
	if err != nil {
		t.Fatal(err)
	}
	var c AckPacked
	if err := decodeBody(&c, body); err == nil {
		t.Fatalf("decoded a reference to pair 1 of 1: %+v", c.Items)
	}
}

// Applying a packed acknowledgment is applying the Ack it holds: two
// machines given the same pushes and pops, one acknowledging plainly and
// the other packed, answer alike and hold the same state.
func TestAckPackedAppliesAsAck(t *testing.T) {
	var digests, answers []string
	for _, packed := range []bool{false, true} {
		m := newMachine(t)
		m.push(items("q", "p1", seq("a", 6)...)...)
		m.push(items("q", "p2", seq("b", 4)...)...)
		r1 := m.pop(Lease{Queue: "q", Partition: "p1", Scope: ScopeSpecific, Batch: 6})
		r2 := m.pop(Lease{Queue: "q", Partition: "p2", Scope: ScopeSpecific, Batch: 4})
		acks := append(ackAll(r1, AckCompleted)[:4], ackAll(r2, AckFailed)...)
		acks = append(acks, AckItem{TxID: "nope", PartitionID: r1.Partitions[0].PartitionID, PartitionOK: true, Status: AckCompleted})
		var cmd Command = &Ack{Group: QueueMode, Items: acks}
		if packed {
			cmd = &AckPacked{Ack{Group: QueueMode, Items: acks}}
		}
		res := m.apply(cmd)[0].(*AckResult)
		answers = append(answers, fmt.Sprintf("%+v", res.Items))
		digests = append(digests, m.digest())
	}
	if answers[0] != answers[1] {
		t.Errorf("answers differ:\nplain  %s\npacked %s", answers[0], answers[1])
	}
	if digests[0] != digests[1] {
		t.Errorf("state differs: plain %s, packed %s", digests[0], digests[1])
	}
}
