package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/crownmq/crown/segments"
)

// sampleCommands holds one fully populated command of every type.
func sampleCommands() map[Type]Command {
	opts := custom()
	push := PushItem{Queue: "orders.eu", Partition: "p-1", TxID: "tx-1", TraceID: [16]byte{1, 2, 3}, HasTrace: true,
		ProducerSub: "alice", Payload: []byte(`{"a":[1,2,3]}`), Encrypted: true}
	ack := AckItem{TxID: "tx-1", PartitionID: [16]byte{9, 8, 7}, PartitionOK: true, LeaseID: [16]byte{4, 5},
		HasLease: true, Status: AckUnknown, StatusText: "whatever", Error: "boom"}
	samples := map[Type]Command{
		TypeConfigure: &Configure{Queue: "orders.eu", Namespace: "orders", Task: "eu", Options: opts},
		TypePush:      &Push{Items: []PushItem{push, {Queue: "", Partition: "", TxID: "t2", Payload: []byte("null")}}},
		TypeLease: &Lease{Scope: ScopeDiscovery, Queue: "q", Partition: "p", Namespace: "ns", Task: "tk", Group: "g",
			Batch: 17, MaxPartitions: 3, AutoAck: true, LeaseSeconds: 42, SubMode: SubTimestamp, SubFrom: 1778918400000000,
			WindowBatch: 100, SQLWindow: true},
		TypeAck: &Ack{Group: "billing", Items: []AckItem{ack, {TxID: "x", Status: AckCompleted}}},
		TypeAckPacked: &AckPacked{Ack{Group: "billing", Items: []AckItem{ack, {TxID: "x", Status: AckCompleted},
			ack, {TxID: "y", PartitionID: [16]byte{9, 8, 7}, PartitionOK: true, Status: AckFailed, Error: "no"}}}},
		TypeAckAt: &AckAt{Ack{Group: "billing", Items: []AckItem{
			{TxID: "a", PartitionID: [16]byte{9, 8, 7}, PartitionOK: true, LeaseID: [16]byte{4, 5}, HasLease: true,
				Status: AckCompleted, At: 1_000_017},
			ack, {TxID: "b", PartitionID: [16]byte{9, 8, 7}, PartitionOK: true, LeaseID: [16]byte{4, 5}, HasLease: true,
				Status: AckCompleted, At: 1_000_018}}}},
		TypeExtend: &Extend{LeaseID: [16]byte{0xff, 1}, Seconds: 90},
		TypeTransaction: &Transaction{Ops: []TxOp{
			{Kind: OpPush, Items: []PushItem{push}},
			{Kind: OpAck, Ack: ack, Group: "g"},
			{Kind: OpInvalid, Name: "publish"},
		}},
		TypeDeleteQueue:        &DeleteQueue{Queue: "orders.eu"},
		TypeRegisterNode:       &RegisterNode{ID: "n1", RaftAddr: "10.0.0.1:7000", HTTPAddr: "10.0.0.1:6632"},
		TypeRemoveNode:         &RemoveNode{ID: "n1"},
		TypeSweep:              &Sweep{Queue: "orders.eu", MaxSegments: 500},
		TypeExpireLeases:       &ExpireLeases{Grace: 5_000_000, Max: 1000},
		TypeDeleteMessage:      &DeleteMessage{Partition: [16]byte{9, 8, 7}, TxID: "tx-1"},
		TypeForgetDeletedTxIDs: &ForgetDeletedTxIDs{Max: 1000},
		TypeLeaseCapped: &LeaseCapped{Lease: Lease{Scope: ScopeSpecific, Queue: "q", Partition: "p", Group: "g",
			Batch: 100, MaxPartitions: 1, LeaseSeconds: 30, WindowBatch: 100}, Principal: "alice", MaxBytes: 16 << 20},
	}
	for ty, c := range ojsSampleCommands(opts, push) {
		samples[ty] = c
	}
	for ty, c := range groupsSampleCommands() {
		samples[ty] = c
	}
	for ty, c := range systemSampleCommands() {
		samples[ty] = c
	}
	for ty, c := range streamsSampleCommands(push, ack) {
		samples[ty] = c
	}
	return samples
}

func TestCodecRoundTripEveryCommandType(t *testing.T) {
	samples := sampleCommands()
	for ty := Type(0); ty < 255; ty++ {
		if _, ok := lookup(ty); ok {
			if _, ok := samples[ty]; !ok {
				t.Errorf("command type %d (%s) has no sample: add one", ty, TypeName(ty))
			}
		}
	}
	for ty, c := range samples {
		if c.Type() != ty {
			t.Fatalf("sample for %d has type %d", ty, c.Type())
		}
		e := &Entry{Stamp: 1778918400123456, Origin: "node-7", Commands: []Command{c}}
		b, err := AppendEntry(nil, e)
		if err != nil {
			t.Fatalf("%s: %v", TypeName(ty), err)
		}
		if b[0] != EntryVersion {
			t.Fatalf("version byte %d", b[0])
		}
		got, err := DecodeEntry(b)
		if err != nil {
			t.Fatalf("%s: decode: %v", TypeName(ty), err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", TypeName(ty), got.Commands[0], c)
		}
	}
	// All of them in one entry, after a prefix.
	var all []Command
	for ty := Type(1); ty < 255; ty++ {
		if c, ok := samples[ty]; ok {
			all = append(all, c)
		}
	}
	e := &Entry{Stamp: -1, Origin: "", Commands: all}
	b, err := AppendEntry([]byte("prefix"), e)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("prefix")) {
		t.Fatal("AppendEntry dropped the prefix")
	}
	got, err := DecodeEntry(b[len("prefix"):])
	if err != nil || !reflect.DeepEqual(got, e) {
		t.Fatalf("multi-command round trip: %v\n%+v", err, got)
	}
}

func TestCodecEmptyEntry(t *testing.T) {
	b, err := AppendEntry(nil, &Entry{Stamp: 5, Origin: "n"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeEntry(b)
	if err != nil || got.Stamp != 5 || got.Origin != "n" || len(got.Commands) != 0 {
		t.Fatalf("%+v %v", got, err)
	}
}

// rawEntry encodes an entry frame by hand: version, header and commands as
// (type, raw body) pairs.
func rawEntry(t *testing.T, version byte, cmds ...[2]any) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteByte(version)
	enc := msgpack.NewEncoder(&buf)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(enc.EncodeArrayLen(3))
	must(enc.EncodeInt(1778918400000000))
	must(enc.EncodeString("n1"))
	must(enc.EncodeArrayLen(len(cmds)))
	for _, c := range cmds {
		must(enc.EncodeArrayLen(2))
		must(enc.EncodeUint(uint64(c[0].(Type))))
		must(enc.Encode(c[1]))
	}
	return buf.Bytes()
}

func TestCodecDecodeRejects(t *testing.T) {
	good, err := AppendEntry(nil, &Entry{Stamp: 1, Origin: "n", Commands: []Command{&DeleteQueue{Queue: "q"}}})
	if err != nil {
		t.Fatal(err)
	}
	wrongVersion := append([]byte{EntryVersion + 1}, good[1:]...)
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"version only", []byte{EntryVersion}, ErrMalformed},
		{"wrong version", wrongVersion, ErrUnknownType},
		{"version zero", append([]byte{0}, good[1:]...), ErrUnknownType},
		{"unknown command type", rawEntry(t, EntryVersion, [2]any{Type(200), []any{"x"}}), ErrUnknownType},
		{"command type zero", rawEntry(t, EntryVersion, [2]any{Type(0), []any{}}), ErrUnknownType},
		{"trailing bytes", append(bytes.Clone(good), 0xc0), ErrMalformed},
		{"truncated", good[:len(good)-2], ErrMalformed},
		{"header not an array", append([]byte{EntryVersion}, 0xc0), ErrMalformed},
		{"header of 2", []byte{EntryVersion, 0x92, 0x01, 0xa1, 'n'}, ErrMalformed},
		{"huge command count", []byte{EntryVersion, 0x93, 0x01, 0xa1, 'n', 0xdd, 0xff, 0xff, 0xff, 0xff}, ErrMalformed},
		{"command frame of 3", []byte{EntryVersion, 0x93, 0x01, 0xa1, 'n', 0x91, 0x93, 0x07, 0x91, 0xa1, 'q'}, ErrMalformed},
	}
	for _, c := range cases {
		e, err := DecodeEntry(c.b)
		if !errors.Is(err, c.want) || e != nil {
			t.Errorf("%s: %v (entry %+v), want %v", c.name, err, e, c.want)
		}
	}
}

func TestCodecMalformedBody(t *testing.T) {
	// The second command's body is a string where a Push array belongs; the
	// other commands of the entry still decode.
	b := rawEntry(t, EntryVersion,
		[2]any{TypeDeleteQueue, []any{"q"}},
		[2]any{TypePush, "not a push"},
		[2]any{TypeRemoveNode, []any{"n9"}},
	)
	e, err := DecodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Commands) != 3 {
		t.Fatalf("commands %+v", e.Commands)
	}
	m, ok := e.Commands[1].(*Malformed)
	if !ok || m.Of != TypePush || m.Type() != TypePush || m.Err == "" {
		t.Fatalf("command 1 %T %+v", e.Commands[1], e.Commands[1])
	}
	if dq, ok := e.Commands[0].(*DeleteQueue); !ok || dq.Queue != "q" {
		t.Fatalf("command 0 %+v", e.Commands[0])
	}
}

func TestApplyMalformedChangesNothing(t *testing.T) {
	// A machine applying [malformed push] ends where one applying an empty
	// entry at the same index and stamp ends.
	a, b := newMachine(t), newMachine(t)
	for _, m := range []*machine{a, b} {
		m.push(items("q", "p", "m1")...)
	}
	raw := rawEntry(t, EntryVersion,
		[2]any{TypePush, "not a push"},
		[2]any{TypeLease, []any{"too", "short", true}},
		[2]any{TypeAck, 42},
	)
	a.index++
	res := a.f.ApplyBatch([]*raft.Log{{Index: a.index, Type: raft.LogCommand, Data: raw}})[0]
	er, ok := res.(*EntryResult)
	if !ok || len(er.Results) != 3 {
		t.Fatalf("result %T %+v", res, res)
	}
	for i, r := range er.Results {
		if e, ok := r.(*ErrorResult); !ok || e.Err == "" {
			t.Fatalf("command %d: %T %+v", i, r, r)
		}
	}
	b.index++
	b.f.ApplyBatch([]*raft.Log{{Index: b.index, Type: raft.LogCommand, Data: rawEntry(t, EntryVersion)}})
	if a.digest() != b.digest() {
		t.Fatal("a malformed command changed the state")
	}
}

func TestApplyUndecodableEntryChangesNothing(t *testing.T) {
	a, b := newMachine(t), newMachine(t)
	for _, m := range []*machine{a, b} {
		m.push(items("q", "p", "m1")...)
	}
	a.index++
	res := a.f.ApplyBatch([]*raft.Log{{Index: a.index, Type: raft.LogCommand, Data: []byte{EntryVersion, 0xc1}}})[0]
	if e, ok := res.(*ErrorResult); !ok || e.Err == "" {
		t.Fatalf("result %T %+v", res, res)
	}
	b.index++
	b.f.ApplyBatch([]*raft.Log{{Index: b.index, Type: raft.LogNoop}})
	if a.digest() != b.digest() || a.f.AppliedIndex() != a.index {
		t.Fatal("an undecodable entry changed more than the applied index")
	}
}

func TestApplyUnknownCommandTypeStops(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	before := m.digest()
	m.index++
	l := &raft.Log{Index: m.index, Type: raft.LogCommand, Data: rawEntry(t, EntryVersion, [2]any{Type(200), []any{}})}
	func() {
		defer func() {
			r := recover()
			if r == nil {
				t.Fatal("an entry of an unknown command type was applied")
			}
			if err, ok := r.(error); !ok || !errors.Is(err, ErrUnknownType) {
				t.Fatalf("panic %v", r)
			}
		}()
		m.f.ApplyBatch([]*raft.Log{l})
	}()
	m.index--
	if m.digest() != before || m.f.AppliedIndex() != m.index {
		t.Fatal("the refused entry changed the state")
	}
}

func TestAppendEntryRejectsUnregisteredType(t *testing.T) {
	_, err := AppendEntry(nil, &Entry{Commands: []Command{&Malformed{Of: 200}}})
	if !errors.Is(err, ErrUnknownType) {
		t.Fatalf("err %v", err)
	}
}

func TestTypeName(t *testing.T) {
	if TypeName(TypePush) != "push" || TypeName(200) != "unknown(200)" {
		t.Fatalf("%s %s", TypeName(TypePush), TypeName(200))
	}
}

func TestEncodeCommandMatchesEntryBody(t *testing.T) {
	c := sampleCommands()[TypeLease]
	body, err := EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := AppendEntry(nil, &Entry{Commands: []Command{c}})
	if !bytes.HasSuffix(b, body) {
		t.Fatal("EncodeCommand differs from the body written in an entry")
	}
	var back Lease
	if err := msgpack.Unmarshal(body, &back); err != nil || !reflect.DeepEqual(&back, c) {
		t.Fatalf("%v %+v", err, back)
	}
}

// Options travel inside Configure: make sure every field survives.
func TestCodecOptionsEveryField(t *testing.T) {
	o := custom()
	b, err := msgpack.Marshal(&Configure{Queue: "q", Options: o})
	if err != nil {
		t.Fatal(err)
	}
	var c Configure
	if err := msgpack.Unmarshal(b, &c); err != nil || c.Options != o {
		t.Fatalf("%v %+v", err, c.Options)
	}
	if reflect.TypeOf(segments.Options{}).NumField() != 17 {
		t.Fatalf("Options has %d fields: extend custom()", reflect.TypeOf(segments.Options{}).NumField())
	}
}

// FrameCommand sizes a push's buffer from encodedSizeHint so that it is
// allocated once: the hint must bound the encoding, whatever the lengths of
// the fields (msgpack's headers grow with them), and not overshoot by more
// than the per-field allowance.
func TestPushSizeHintBoundsEncoding(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct {
		name  string
		items []PushItem
	}{
		{"empty", nil},
		{"one tiny", []PushItem{{Queue: "q", Partition: "p", TxID: "t", Payload: []byte("1")}}},
		{"traced and signed", []PushItem{{Queue: "q", Partition: "p", TxID: "t", HasTrace: true, TraceID: [16]byte{1}, ProducerSub: "alice", Payload: []byte(`{}`)}}},
		{"names past str8", []PushItem{{Queue: long(255), Partition: long(300), TxID: long(255), ProducerSub: long(70000), Payload: make([]byte, 70000)}}},
		{"hundred of 256 bytes", benchItems("q", 8, 100, "tx-")},
		{"many small", benchItems("orders", 10000, 1000, "")},
	}
	for _, c := range cases {
		for _, cmd := range []interface {
			Command
			sizeHinter
		}{&Push{Items: c.items}, &PushAs{Principal: "svc-" + long(40), Items: c.items}} {
			framed, err := FrameCommand(nil, cmd)
			if err != nil {
				t.Fatalf("%s %T: %v", c.name, cmd, err)
			}
			bound := frameOverhead + cmd.encodedSizeHint()
			if len(framed) > bound {
				t.Errorf("%s %T: encodes to %d bytes, hint bounds %d: FrameCommand regrows", c.name, cmd, len(framed), bound)
			}
			if slack := bound - len(framed); slack > 64+40*len(c.items) {
				t.Errorf("%s %T: hint %d bytes over the encoding of %d", c.name, cmd, slack, len(framed))
			}
			// The framed command still decodes to what was encoded.
			e, err := DecodeEntry(AppendFramedEntry(nil, 1, "n1", [][]byte{framed}))
			if err != nil || len(e.Commands) != 1 {
				t.Fatalf("%s %T: decode: %v", c.name, cmd, err)
			}
		}
	}
}
