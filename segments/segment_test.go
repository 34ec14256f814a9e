package segments

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func sampleMessages() []Message {
	return []Message{
		{TxID: "tx-1", Payload: []byte(`{"a":1}`)},
		{TxID: "", Payload: nil},
		{TxID: "tx-3", TraceID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, HasTrace: true,
			ProducerSub: "alice", Payload: []byte("envelope"), Encrypted: true},
		{TxID: strings.Repeat("x", 300), ProducerSub: "b", Payload: bytes.Repeat([]byte{0xff}, 70000)},
		{TxID: "tx-5", HasTrace: true, Payload: []byte("null")},
	}
}

// readAll decodes every message of a blob.
func readAll(t *testing.T, b []byte) (SegmentHeader, []Message) {
	t.Helper()
	r, err := NewSegmentReader(b)
	if err != nil {
		t.Fatal(err)
	}
	var out []Message
	for {
		var m Message
		idx, ok, err := r.Next(&m)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if int(idx) != len(out) {
			t.Fatalf("index %d, want %d", idx, len(out))
		}
		m.Payload = bytes.Clone(m.Payload)
		out = append(out, m)
	}
	return r.Header, out
}

// normalize makes nil and empty payloads compare equal.
func normalize(ms []Message) []Message {
	out := make([]Message, len(ms))
	for i, m := range ms {
		if len(m.Payload) == 0 {
			m.Payload = []byte{}
		}
		out[i] = m
	}
	return out
}

func TestSegmentRoundTrip(t *testing.T) {
	msgs := sampleMessages()
	b := EncodeSegment(nil, 1778918400123456, 42, msgs)
	h, got := readAll(t, b)
	if h != (SegmentHeader{CreatedAt: 1778918400123456, BaseSeq: 42, Count: uint32(len(msgs))}) {
		t.Fatalf("header %+v", h)
	}
	if !reflect.DeepEqual(normalize(got), normalize(msgs)) {
		t.Fatalf("messages differ:\n got %+v\nwant %+v", got, msgs)
	}
	dh, err := DecodeSegmentHeader(b)
	if err != nil || dh != h {
		t.Fatalf("DecodeSegmentHeader %+v %v", dh, err)
	}
}

func TestSegmentEmpty(t *testing.T) {
	b := EncodeSegment(nil, 7, 1, nil)
	h, got := readAll(t, b)
	if h.Count != 0 || len(got) != 0 || len(b) != segmentHeader {
		t.Fatalf("header %+v, %d messages, %d bytes", h, len(got), len(b))
	}
}

func TestEncodeSegmentAppends(t *testing.T) {
	prefix := []byte("prefix")
	small := make([]byte, len(prefix), len(prefix)+1) // forces a reallocation
	copy(small, prefix)
	for _, dst := range [][]byte{prefix, small, append(make([]byte, 0, 1<<20), prefix...)} {
		b := EncodeSegment(dst, 5, 6, sampleMessages())
		if !bytes.HasPrefix(b, prefix) {
			t.Fatal("prefix lost")
		}
		_, got := readAll(t, b[len(prefix):])
		if !reflect.DeepEqual(normalize(got), normalize(sampleMessages())) {
			t.Fatal("messages differ")
		}
	}
}

func TestSegmentReaderRejectsCorruption(t *testing.T) {
	good := EncodeSegment(nil, 5, 6, []Message{{TxID: "a", Payload: []byte("xyz")}, {TxID: "b", Payload: []byte("1")}})
	withCount := func(n uint32) []byte {
		b := bytes.Clone(good)
		binary.BigEndian.PutUint32(b[17:], n)
		return b
	}
	badFlags := bytes.Clone(good)
	badFlags[segmentHeader] = 0x80
	hugeLen := append(bytes.Clone(good[:segmentHeader]), 0, 0xff, 0xff, 0xff, 0xff, 0x0f)
	cases := map[string][]byte{
		"empty":             nil,
		"short header":      good[:segmentHeader-1],
		"wrong version":     append([]byte{2}, good[1:]...),
		"truncated message": good[:len(good)-1],
		"trailing bytes":    append(bytes.Clone(good), 0),
		"count too high":    withCount(3),
		"count too low":     withCount(1),
		"count huge":        withCount(1 << 31),
		"unknown flags":     badFlags,
		"length overflow":   hugeLen,
		"truncated trace":   append(bytes.Clone(good[:segmentHeader]), flagTrace, 0, 1, 2),
	}
	for name, b := range cases {
		r, err := NewSegmentReader(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s: header error %v", name, err)
			}
			continue
		}
		ids, _ := NewSegmentReader(b)
		var m Message
		for i := 0; ; i++ {
			_, ok, err := r.Next(&m)
			if _, _, _, idErr := ids.NextTxID(); (idErr == nil) != (err == nil) {
				t.Errorf("%s: NextTxID error %v where Next's is %v", name, idErr, err)
			}
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Errorf("%s: error %v", name, err)
				}
				break
			}
			if !ok {
				t.Errorf("%s: decoded without error", name)
				break
			}
		}
	}
}

func TestMessageIDOrdering(t *testing.T) {
	ids := [][16]byte{
		MessageID(1_000_000, 1),
		MessageID(1_000_000, 2),
		MessageID(1_000_999, 3), // same millisecond: the sequence orders
		MessageID(1_001_000, 4),
		MessageID(1_001_000, 1<<62-1),
		MessageID(1_001_000, 1<<62), // the sequence crosses into rand_a
		MessageID(1_001_000, 1<<63),
		MessageID(2_000_000_000_000_000, 5),
	}
	for i := 1; i < len(ids); i++ {
		if bytes.Compare(ids[i-1][:], ids[i][:]) >= 0 {
			t.Fatalf("id %d %x not after %x", i, ids[i], ids[i-1])
		}
	}
	for _, id := range ids {
		if id[6]>>4 != 7 || id[8]>>6 != 2 {
			t.Fatalf("%x is not a UUIDv7 (version %d, variant %b)", id, id[6]>>4, id[8]>>6)
		}
	}
	a := MessageID(1778918400123456, 99)
	ms := uint64(1778918400123)
	if got := uint64(a[0])<<40 | uint64(a[1])<<32 | uint64(a[2])<<24 | uint64(a[3])<<16 | uint64(a[4])<<8 | uint64(a[5]); got != ms {
		t.Fatalf("timestamp %d, want %d", got, ms)
	}
	if MessageID(5, 1) == MessageID(5, 2) || MessageID(5000, 7) == MessageID(6000, 7) {
		t.Fatal("ids collide")
	}
	if (TxRef{PushedAt: 1778918400123456, Seq: 99}).MessageID() != a {
		t.Fatal("TxRef.MessageID differs")
	}
}

func FuzzSegmentReader(f *testing.F) {
	f.Add(EncodeSegment(nil, 1778918400000000, 1, sampleMessages()[:3]))
	f.Add(EncodeSegment(nil, 0, 0, nil))
	f.Add([]byte{segmentVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewSegmentReader(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("header error %v", err)
			}
			return
		}
		ids, _ := NewSegmentReader(b) // NextTxID walks in step with Next
		var msgs []Message
		for {
			var m Message
			idx, ok, err := r.Next(&m)
			idIdx, id, idOK, idErr := ids.NextTxID()
			if idIdx != idx || idOK != ok || (idErr == nil) != (err == nil) || (ok && string(id) != m.TxID) {
				t.Fatalf("NextTxID gave %d %q %v %v where Next gave %d %q %v %v", idIdx, id, idOK, idErr, idx, m.TxID, ok, err)
			}
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v", err)
				}
				return
			}
			if !ok {
				break
			}
			if int(idx) != len(msgs) {
				t.Fatalf("index %d after %d messages", idx, len(msgs))
			}
			m.Payload = bytes.Clone(m.Payload)
			msgs = append(msgs, m)
		}
		if uint32(len(msgs)) != r.Header.Count {
			t.Fatalf("%d messages, header says %d", len(msgs), r.Header.Count)
		}
		// A blob that decodes re-encodes to the same messages.
		b2 := EncodeSegment(nil, r.Header.CreatedAt, r.Header.BaseSeq, msgs)
		r2, err := NewSegmentReader(b2)
		if err != nil || r2.Header != r.Header {
			t.Fatalf("re-encoded header %+v %v", r2, err)
		}
		for i := range msgs {
			var m Message
			if _, ok, err := r2.Next(&m); !ok || err != nil {
				t.Fatalf("re-encoded message %d: %v", i, err)
			}
			if !reflect.DeepEqual(normalize([]Message{m}), normalize([]Message{msgs[i]})) {
				t.Fatalf("message %d: %+v, want %+v", i, m, msgs[i])
			}
		}
	})
}
