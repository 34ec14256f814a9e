package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// The lease sweep inspects a window of Max*8 index entries, oldest lease
// id first. Live leases older than the stale ones (long leases, or leases
// kept alive by extensions) used to fill that window on every tick, so the
// stale records behind them were never cleared and extensions of them
// answered "expired" for as long as the old leases lived. Each sweep now
// starts where the previous one stopped, and the leader's check moves over
// a window with nothing stale without proposing anything.
func TestLeaseSweepMovesPastLiveLeasesOlderThanTheStaleOnes(t *testing.T) {
	m := newMachine(t)
	for i := range 10 { // ten hour-long leases, the oldest ids
		p := fmt.Sprintf("held-%d", i)
		m.push(items("q", p, "h"+p)...)
		m.mustPop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: p, Group: "g", Batch: 1, MaxPartitions: 1, LeaseSeconds: 3600})
	}
	m.push(items("q", "short", "s")...)
	short := m.mustPop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "short", Group: "g", Batch: 1, MaxPartitions: 1, LeaseSeconds: 10})
	grace := (5 * time.Minute).Microseconds()
	m.advance(10*time.Second + 5*time.Minute + time.Second)
	now := m.now.UnixMicro()

	// From the start, one entry a window of 8: only hour-long leases.
	due, next, err := m.f.LeasesDue(now, grace, 1, [16]byte{})
	if err != nil || due || next == ([16]byte{}) {
		t.Fatalf("check of the first window: due %v, next %x (%v); want not due and a place to go on from", due, next, err)
	}
	r := m.apply(&ExpireLeases{Grace: grace, Max: 1})[0].(*ExpireLeasesResult)
	if r.Cleared != 0 || r.Next != next {
		t.Fatalf("sweep of the first window %+v, want nothing cleared and Next %x as the check said", r, next)
	}
	// The next window holds the stale lease: due, and cleared.
	if due, _, err := m.f.LeasesDue(now, grace, 1, next); err != nil || !due {
		t.Fatalf("check of the second window: due %v (%v), want due", due, err)
	}
	r = m.apply(&ExpireLeases{Grace: grace, Max: 1, From: next})[0].(*ExpireLeasesResult)
	if r.Cleared != 1 {
		t.Fatalf("sweep of the second window %+v, want the stale lease cleared", r)
	}
	if len(m.leaseHoldersOf(short.LeaseID)) != 0 {
		t.Fatal("the stale lease is still indexed")
	}
	if n := m.leaseEntries(); n != 10 {
		t.Fatalf("%d lease index entries left, want the ten live ones", n)
	}
	// At the end of the index the next sweep starts over.
	if r.Next != ([16]byte{}) {
		if r = m.apply(&ExpireLeases{Grace: grace, Max: 1, From: r.Next})[0].(*ExpireLeasesResult); r.Next != ([16]byte{}) {
			t.Fatalf("a sweep that reached the end says go on from %x", r.Next)
		}
	}
}

func TestAfterLease(t *testing.T) {
	for _, c := range []struct{ in, want [16]byte }{
		{[16]byte{}, [16]byte{15: 1}},
		{[16]byte{14: 1, 15: 0xff}, [16]byte{14: 2}},
		{[16]byte{0: 0xff, 1: 0xff, 2: 0xff, 3: 0xff, 4: 0xff, 5: 0xff, 6: 0xff, 7: 0xff, 8: 0xff, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff}, [16]byte{}},
	} {
		if got := afterLease(c.in); got != c.want {
			t.Errorf("afterLease(%x) = %x, want %x", c.in, got, c.want)
		}
	}
}

// Entries logged before ExpireLeases had From hold two elements; they read
// as a sweep from the start of the index.
func TestExpireLeasesOfTwoElementsDecodes(t *testing.T) {
	old := struct {
		_msgpack struct{} `msgpack:",as_array"`
		Grace    int64
		Max      uint32
	}{Grace: 300e6, Max: 1000}
	b, err := msgpack.Marshal(&old)
	if err != nil {
		t.Fatal(err)
	}
	var c ExpireLeases
	if err := msgpack.Unmarshal(b, &c); err != nil || c.Grace != 300e6 || c.Max != 1000 || c.From != ([16]byte{}) {
		t.Fatalf("decoded %+v (%v), want Grace 300e6, Max 1000, From zero", c, err)
	}
}

// Both forms round-trip, and a sweep from the start is written in the old
// form, which builds before From read.
func TestExpireLeasesCodec(t *testing.T) {
	for _, c := range []ExpireLeases{{Grace: 1, Max: 2}, {Grace: -5, Max: 1000, From: [16]byte{0: 1, 15: 9}}} {
		b, err := msgpack.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		var back ExpireLeases
		if err := msgpack.Unmarshal(b, &back); err != nil || back != c {
			t.Fatalf("round trip of %+v: %+v (%v)", c, back, err)
		}
		if c.From == ([16]byte{}) {
			old := struct {
				_msgpack struct{} `msgpack:",as_array"`
				Grace    int64
				Max      uint32
			}{}
			if err := msgpack.Unmarshal(b, &old); err != nil || old.Grace != c.Grace || old.Max != c.Max {
				t.Fatalf("the old form does not read a sweep from the start: %+v (%v)", old, err)
			}
		}
	}
	for _, bad := range [][]byte{{0x91, 0x01}, {0x93, 0x01, 0x02, 0xc4, 0x02, 0x00, 0x00}, {0x93, 0x01, 0x02, 0xc6, 0xff, 0xff, 0xff, 0xff}} {
		var c ExpireLeases
		if err := msgpack.Unmarshal(bad, &c); err == nil {
			t.Errorf("decoded % x as %+v", bad, c)
		}
	}
}
