package fsm

import (
	"reflect"
	"strconv"
	"testing"
	"time"
)

// deferAll is a Config that commits the state file only when a read, a
// snapshot or Close needs it: the tests decide where commits happen.
func deferAll(c *Config) {
	c.CommitInterval, c.CommitBatches = time.Hour, 100_000
}

// A pop's look (CheckPopAs) reads the write transaction a deferred commit
// left open: after every batch of a recorded log it answers as the same
// look at a state committed batch by batch does, it commits nothing, and
// the state it leaves is the reference's.
func TestPopChecksReadTheOpenTransaction(t *testing.T) {
	rec := record(t, 33, 300)
	c := newMachineWith(t, deferAll).f
	ref := openFSM(t, t.TempDir(), "n2")
	var looks []*Lease
	for _, q := range genQueues {
		for _, g := range genGroups {
			looks = append(looks,
				&Lease{Scope: ScopeWildcard, Queue: q, Group: g, Batch: 10, MaxPartitions: 2, WindowBatch: 100},
				&Lease{Scope: ScopeSpecific, Queue: q, Partition: "p1", Group: g, Batch: 3, WindowBatch: 100})
		}
	}
	start := c.StateWrites().Commits
	for i, l := range rec.logs {
		c.ApplyBatch(rec.logs[i : i+1])
		ref.ApplyBatch(rec.logs[i : i+1])
		e, err := DecodeEntry(l.Data)
		if err != nil {
			t.Fatal(err)
		}
		// Later than the entry's stamp, so leases and delays have run out
		// for some of the looks.
		now := e.Stamp + int64(i%7)*int64(time.Second/time.Microsecond)
		for _, look := range looks {
			for _, count := range []bool{false, true} {
				got, gerr := c.CheckPop(look, now, count)
				want, werr := ref.CheckPop(look, now, count)
				if !reflect.DeepEqual(got, want) || !sameErr(gerr, werr) {
					t.Fatalf("entry %d, %+v count %v: look in the open transaction %+v %v, committed %+v %v", i+1, look, count, got, gerr, want, werr)
				}
			}
		}
	}
	if w := c.StateWrites(); w.Commits != start+1 {
		t.Fatalf("%d commits over %d batches and their looks, want 1 (StateWrites' own)", w.Commits-start, len(rec.logs))
	}
	if got, want := c.PopLooks(), (PopLooks{OpenTx: uint64(len(rec.logs) * len(looks) * 2)}); got != want {
		t.Fatalf("looks counted %+v, want %+v", got, want)
	}
	if _, d := digestOf(t, c); d != rec.digests[len(rec.logs)-1] {
		t.Fatal("the looks changed the state: final digest differs")
	}
}

func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}

// A look that reads more than checkInOpenTx partitions inside the open
// transaction gives up and reads a committed view, which answers whole: the
// one free partition past the bound is found, and a scope with none free
// gets the time its first lease runs out.
func TestLongPopCheckReadsACommittedView(t *testing.T) {
	const parts = checkInOpenTx + 72
	m := newMachineWith(t, deferAll)
	m.push(benchItems("q", parts, parts, "t")...)
	free := "p99" // last in name order: a wildcard look reads every other first
	for i := range parts {
		if name := "p" + strconv.Itoa(i); name != free {
			if r := m.pop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: name, Batch: 1, LeaseSeconds: 30}); r.Count() != 1 {
				t.Fatalf("lease of %s: %+v", name, r)
			}
		}
	}
	look := &Lease{Scope: ScopeWildcard, Queue: "q", Group: QueueMode, Batch: 1, WindowBatch: 100}
	commits := func() uint64 { return m.f.StateWrites().Commits }

	before := commits()
	m.push(benchItems("other", 1, 1, "o")...) // opens a transaction
	pc, err := m.f.CheckPop(look, m.now.UnixMicro(), false)
	if err != nil || pc.Deliverable != 1 {
		t.Fatalf("look past the bound: %+v %v, want the free partition's message", pc, err)
	}
	m.push(benchItems("other", 1, 1, "o2")...)
	if n := commits() - before; n != 2 {
		t.Fatalf("%d commits, want 2: the long look's committed view and StateWrites'", n)
	}

	if r := m.pop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: free, Batch: 1, LeaseSeconds: 30}); r.Count() != 1 {
		t.Fatalf("lease of %s: %+v", free, r)
	}
	pc, err = m.f.CheckPop(look, m.now.UnixMicro(), false)
	if err != nil || pc.Deliverable != 0 || pc.WakeAt != m.now.Add(30*time.Second).UnixMicro() {
		t.Fatalf("look with every partition leased: %+v %v, want nothing and the leases' expiry", pc, err)
	}

	if got, want := m.f.PopLooks(), (PopLooks{GaveUp: 2}); got != want {
		t.Fatalf("looks counted %+v, want %+v: two gave up", got, want)
	}
	// A short look stays in the open transaction; with none open, a look
	// reads a view, as a discovery pop's always does.
	before = commits()
	m.push(benchItems("other", 1, 1, "o3")...)
	if pc, err := m.f.CheckPop(&Lease{Scope: ScopeWildcard, Queue: "other", Group: QueueMode, Batch: 1, WindowBatch: 100}, m.now.UnixMicro(), false); err != nil || pc.Deliverable != 1 {
		t.Fatalf("short look: %+v %v", pc, err)
	}
	m.push(benchItems("other", 1, 1, "o4")...)
	if n := commits() - before; n != 1 {
		t.Fatalf("%d commits, want StateWrites' alone", n)
	}
	other := &Lease{Scope: ScopeWildcard, Queue: "other", Group: QueueMode, Batch: 1, WindowBatch: 100}
	m.f.CheckPop(other, m.now.UnixMicro(), false) // StateWrites committed: nothing open
	m.f.CheckPop(&Lease{Scope: ScopeDiscovery, Group: QueueMode, Batch: 1, WindowBatch: 100}, m.now.UnixMicro(), false)
	if got, want := m.f.PopLooks(), (PopLooks{OpenTx: 1, View: 2, GaveUp: 2}); got != want {
		t.Fatalf("looks counted %+v, want %+v", got, want)
	}
}
