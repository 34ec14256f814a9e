package fsm

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/crownmq/crown/segments"
)

// ackAt is the acknowledgment of a delivered message carrying the offset
// the pop delivered it from, as the leader writes it.
func ackAt(lp LeasedPartition, m DeliveredMessage, lease [16]byte, status uint8) AckItem {
	it := ackOf(lp, m, lease, status)
	it.At = m.Offset
	return it
}

// Offsets survive the round trip item by item, a batch's offsets take about
// a byte each, and a command without any takes one byte more than packed.
func TestAckAtRoundTrip(t *testing.T) {
	pid, lease := [16]byte{1, 2, 3}, [16]byte{4, 5}
	var ack Ack
	ack.Group = "g"
	for i := range 100 {
		ack.Items = append(ack.Items, AckItem{TxID: fmt.Sprintf("r1-3-%06d", i), PartitionID: pid, PartitionOK: true,
			LeaseID: lease, HasLease: true, Status: AckCompleted, At: 700_001 + uint64(i)})
	}
	ack.Items[7].At = 0 // an item the leader knows nothing of
	ack.Items[8].At = 5 // far below the others
	got, atLen := decodeOne(t, &AckAt{ack})
	if a, ok := got.(*AckAt); !ok || a.Group != "g" || !reflect.DeepEqual(a.Items, ack.Items) {
		t.Fatalf("decoded %T %+v", got, got)
	}
	plain := ack
	plain.Items = append([]AckItem(nil), ack.Items...)
	for i := range plain.Items {
		plain.Items[i].At = 0
	}
	_, packedLen := decodeOne(t, &AckPacked{plain})
	// 98 offsets about 700,000 past the base take 5 bytes each.
	if atLen > packedLen+5*len(ack.Items)+8 {
		t.Fatalf("with offsets %d bytes, packed %d", atLen, packedLen)
	}
	none, noneLen := decodeOne(t, &AckAt{plain})
	if noneLen != packedLen+1 || !reflect.DeepEqual(none.(*AckAt).Items, plain.Items) {
		t.Fatalf("without offsets: %d bytes against packed %d, items %+v", noneLen, packedLen, none.(*AckAt).Items[:2])
	}
	// A batch's offsets are neighbours: a byte each.
	for i := range ack.Items {
		ack.Items[i].At = 700_001 + uint64(i)
	}
	if _, n := decodeOne(t, &AckAt{ack}); n > packedLen+len(ack.Items)+8 {
		t.Fatalf("neighbouring offsets: %d bytes, packed %d", n, packedLen)
	}
	// The largest offset an entry holds round-trips; one past it is refused.
	ack.Items[0].At = math.MaxInt64
	if got, _ := decodeOne(t, &AckAt{ack}); !reflect.DeepEqual(got.(*AckAt).Items, ack.Items) {
		t.Fatal("offset 2^63-1 changed in the round trip")
	}
	ack.Items[0].At = math.MaxInt64 + 1
	if _, err := AppendEntry(nil, &Entry{Stamp: 1, Origin: "n1", Commands: []Command{&AckAt{ack}}}); err == nil {
		t.Fatal("offset 2^63 encoded")
	}
}

// An offsets table of the wrong length, a base of 0 or an offset past
// 2^64-1 is refused, naming what is wrong.
func TestAckAtRejectsBadOffsets(t *testing.T) {
	head := func(enc *msgpack.Encoder) {
		// One item: [group, [pair], [item], offsets...]
		enc.EncodeArrayLen(4)
		enc.EncodeString("g")
		enc.EncodeArrayLen(1)
		enc.EncodeArrayLen(4)
		encodeAckAddress(enc, make([]byte, 16), true, nil, false)
		enc.EncodeArrayLen(1)
		enc.EncodeArrayLen(5)
		enc.EncodeString("t")
		enc.EncodeUint(0)
		encodeAckOutcome(enc, &AckItem{Status: AckCompleted})
	}
	for _, tc := range []struct {
		name    string
		offsets []uint64
		want    string
	}{
		{"one entry short", []uint64{1}, "acknowledgment offsets"},
		{"one entry long", []uint64{1, 1, 1}, "acknowledgment offsets"},
		{"base zero", []uint64{0, 1}, "base offset"},
		{"past the last offset", []uint64{math.MaxInt64, 2}, "acknowledgment offset"},
		{"base past 2^63-1", []uint64{math.MaxInt64 + 1, 1}, "base offset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			enc := msgpack.NewEncoder(&buf)
			head(enc)
			enc.EncodeArrayLen(len(tc.offsets))
			for _, o := range tc.offsets {
				enc.EncodeUint(o)
			}
			var c AckAt
			err := msgpack.Unmarshal(buf.Bytes(), &c)
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// A batch acknowledged with the offsets of its pop is resolved without a
// single index lookup, and ends as the same acknowledgments without them.
func TestAckAtResolvesWithoutLookups(t *testing.T) {
	m, w := newMachine(t), newMachine(t)
	for _, x := range []*machine{m, w} {
		for c := range 4 {
			x.push(benchItems("q", 8, 96, fmt.Sprintf("c%d-", c))...)
		}
	}
	r, rw := m.mustPop(Lease{Queue: "q", Batch: 100}), w.mustPop(Lease{Queue: "q", Batch: 100})
	var items []AckItem
	for _, lp := range r.Partitions {
		for _, dm := range lp.Messages {
			if dm.Offset == 0 {
				t.Fatalf("message %s delivered without its offset", dm.TxID)
			}
			items = append(items, ackAt(lp, dm, r.LeaseID, AckCompleted))
		}
	}
	before := m.f.AckResolutions()
	got := m.apply(&AckAt{Ack{Group: QueueMode, Items: items}})[0].(*AckResult)
	d := diffResolutions(before, m.f.AckResolutions())
	if d.ByOffset != uint64(len(items)) || d.ByIndex != 0 {
		t.Fatalf("%d items resolved %+v, want all by their offsets", len(items), d)
	}
	want := w.ack("", ackAll(rw, AckCompleted)...)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("with offsets %+v\nwithout %+v", got, want)
	}
	if m.digest() != w.digest() {
		t.Fatal("states differ")
	}
}

func diffResolutions(a, b AckResolutions) AckResolutions {
	return AckResolutions{ByOffset: b.ByOffset - a.ByOffset, ByIndex: b.ByIndex - a.ByIndex, Refused: b.Refused - a.Refused}
}

// Random histories of pushes (ids repeating, within and past the dedup
// window, or on a queue without deduplication), pops, acknowledgments of
// old and new deliveries, deletions by id and retention sweeps, applied to
// two machines: one acknowledges with the offsets the pops delivered (as
// the leader remembers them, however long ago), the other without. Every
// result and the final state must be the same. The first machine runs with
// VerifyAcks, which looks every offset it takes up in the index and stops
// at the first disagreement; the test counts offsets taken and refused, so
// that it cannot pass without both.
func TestAckAtGivesTheIndexAnswers(t *testing.T) {
	for seed := range 6 {
		dedup := int64(5)
		if seed%3 == 2 {
			dedup = 0
		}
		t.Run(fmt.Sprintf("seed=%d/dedup=%d", seed, dedup), func(t *testing.T) {
			m, w := newMachine(t), newMachine(t)
			rng := rand.New(rand.NewPCG(uint64(seed), 42))
			both := func(cmd, witness Command) any {
				t.Helper()
				got, want := m.apply(cmd)[0], w.apply(witness)[0]
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: with offsets %+v\nwithout %+v", TypeName(cmd.Type()), got, want)
				}
				return got
			}
			advance := func(d time.Duration) { m.advance(d); w.advance(d) }
			configure := Configure{Queue: "q", Options: DefaultOptions(segments.OriginConfigure)}
			configure.Options.DedupWindowSeconds = dedup
			configure.Options.RetryLimit = 2
			configure.Options.LeaseTime = 10
			configure.Options.RetentionSeconds = 20
			both(&configure, &configure)
			parts := []string{"p0", "p1", "p2"}
			id := func() string { return fmt.Sprintf("t%d", rng.IntN(120)) }
			statuses := []uint8{AckCompleted, AckCompleted, AckCompleted, AckFailed, AckRetry, AckDLQ}
			var delivered []*LeaseResult // every pop that delivered: the leader's memory
			before := m.f.AckResolutions()
			for range 2000 {
				switch op := rng.IntN(20); {
				case op < 6:
					var its []PushItem
					for range 1 + rng.IntN(4) {
						its = append(its, item("q", parts[rng.IntN(len(parts))], id(), `"x"`))
					}
					both(&Push{Items: its}, &Push{Items: its})
				case op < 8:
					advance(time.Duration(rng.IntN(2500)) * time.Millisecond)
				case op < 12:
					l := &Lease{Scope: ScopeWildcard, Queue: "q", Group: QueueMode, Batch: uint32(1 + rng.IntN(8)),
						MaxPartitions: uint32(1 + rng.IntN(3))}
					if r := both(l, l).(*LeaseResult); r.Count() > 0 {
						delivered = append(delivered, r)
					}
				case op < 18 && len(delivered) > 0:
					// Mostly the newest deliveries, sometimes one long gone.
					r := delivered[len(delivered)-1-min(rng.IntN(3), len(delivered)-1)]
					if rng.IntN(5) == 0 {
						r = delivered[rng.IntN(len(delivered))]
					}
					var its []AckItem
					for _, lp := range r.Partitions {
						for _, dm := range lp.Messages {
							if rng.IntN(10) < 8 {
								its = append(its, ackAt(lp, dm, r.LeaseID, statuses[rng.IntN(len(statuses))]))
							}
						}
						if rng.IntN(4) == 0 { // an id the leader did not deliver: no offset
							its = append(its, ackOf(lp, DeliveredMessage{TxID: id()}, r.LeaseID, AckCompleted))
						}
					}
					plain := append([]AckItem(nil), its...)
					for i := range plain {
						plain[i].At = 0
					}
					both(&AckAt{Ack{Group: QueueMode, Items: its}}, &AckPacked{Ack{Group: QueueMode, Items: plain}})
				case op < 19:
					if p := m.partition("q", parts[rng.IntN(len(parts))]); p != nil {
						c := &DeleteMessage{Partition: p.UUID, TxID: id()}
						both(c, c)
					}
				default:
					c := &Sweep{Queue: "q", MaxSegments: 100}
					both(c, c)
				}
			}
			if m.digest() != w.digest() {
				t.Fatal("states differ")
			}
			d := diffResolutions(before, m.f.AckResolutions())
			t.Logf("acknowledgments resolved by their offsets %d, by the index %d (of which %d refused an offset)",
				d.ByOffset, d.ByIndex, d.Refused)
			switch {
			case dedup > 0 && (d.ByOffset == 0 || d.Refused == 0):
				t.Fatal("want offsets both taken and refused")
			case dedup == 0 && d.ByOffset != 0:
				// Every push may repeat an id, so no offset is provably
				// the index's answer.
				t.Fatal("a queue without deduplication took an offset")
			}
		})
	}
}

// An offset that is not where the item's id is stored (a leader that
// remembered wrong) is taken when stored and indexed: VerifyAcks is what
// catches it, and it stops the apply before anything changes.
func TestAckAtWrongOffsetStopsVerifyAcks(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "a", "b", "c")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 3})
	lp := r.Partitions[0]
	it := ackAt(lp, lp.Messages[0], r.LeaseID, AckCompleted)
	it.At = lp.Messages[2].Offset // c's offset, named "a"
	before := m.digest()
	_, panicked := m.catch(&AckAt{Ack{Group: QueueMode, Items: []AckItem{it}}})
	if panicked == nil || !bytes.Contains([]byte(fmt.Sprint(panicked)), []byte("VerifyAcks")) {
		t.Fatalf("apply of a wrong offset: panic %v, want VerifyAcks to stop it", panicked)
	}
	if m.digest() != before {
		t.Fatal("the stopped apply changed the state")
	}
}

// storedAt answers as reading the message would, whatever order it is
// asked in: across gaps that deletions cut, before the first message, past
// the last, and far enough apart that it reads its runs again.
func TestStoredAtAcrossGaps(t *testing.T) {
	m := newMachine(t)
	for c := range 600 {
		m.push(items("q", "p", fmt.Sprintf("a%d-0", c), fmt.Sprintf("a%d-1", c), fmt.Sprintf("a%d-2", c))...)
	}
	p := m.partition("q", "p")
	rng := rand.New(rand.NewPCG(7, 7))
	for range 300 {
		m.apply(&DeleteMessage{Partition: p.UUID, TxID: fmt.Sprintf("a%d-%d", rng.IntN(600), rng.IntN(3))})
	}
	m.apply(&DeleteMessage{Partition: p.UUID, TxID: "a0-0"}) // the first offset
	m.view(func(tx *segments.Tx) error {
		part := must1(tx.PartitionByUUID(p.UUID))
		c := &groupCursor{part: part}
		orders := [][]uint64{nil, nil, nil}
		for off := uint64(0); off <= 1805; off++ {
			orders[0] = append(orders[0], off)
			orders[1] = append(orders[1], 1805-off)
		}
		for range 2000 {
			orders[2] = append(orders[2], uint64(rng.IntN(1810)))
		}
		gaps := 0
		for _, order := range orders {
			for _, off := range order {
				want := off > 0 && must1(tx.MessageAt(part, off)) != nil
				if !want {
					gaps++
				}
				if got := c.storedAt(tx, off); got != want {
					t.Fatalf("storedAt(%d) = %t, reading it finds a message: %t", off, got, want)
				}
			}
		}
		if gaps < 100 {
			t.Fatalf("only %d answers were gaps", gaps)
		}
		return nil
	})
}
