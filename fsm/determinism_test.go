package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/segments"
)

// recording is a command log produced by driving a reference machine the way
// clients would (acks and extends use what earlier pops returned), with the
// reference's digest and results after every entry.
type recording struct {
	logs    []*raft.Log
	digests []string
	results []any
	ref     *machine
}

// generator drives a reference machine with seeded random traffic.
type generator struct {
	t      *testing.T
	rng    *rand.Rand
	m      *machine
	rec    *recording
	popped []*LeaseResult // outstanding deliveries, for acks
	leases [][16]byte
	txSeq  int
	// rollbacks allows transactions that fail and roll back.
	rollbacks bool
}

var (
	genQueues     = []string{"orders.eu", "orders.us", "stock", ""}
	genPartitions = []string{"p0", "p1", "p2", "", "Default"}
	genGroups     = []string{QueueMode, "g1", "g2"}
)

// record generates a log of entries whose transactions always commit.
func record(t *testing.T, seed uint64, entries int) *recording {
	t.Helper()
	return recordLog(t, seed, entries, true)
}

func recordLog(t *testing.T, seed uint64, entries int, rollbacks bool) *recording {
	t.Helper()
	g := &generator{t: t, rng: newRand(seed), m: newMachine(t), rollbacks: rollbacks}
	g.rec = &recording{ref: g.m}
	for len(g.rec.logs) < entries {
		g.step()
	}
	return g.rec
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func (g *generator) pick(n int) int { return g.rng.IntN(n) }

func (g *generator) commit(cmds ...Command) []any {
	g.t.Helper()
	l := g.m.entry(cmds...)
	r := g.m.f.ApplyBatch([]*raft.Log{l})[0]
	g.rec.logs = append(g.rec.logs, l)
	g.rec.digests = append(g.rec.digests, g.m.digest())
	// The digest leaves the tag index out: check it after every entry,
	// transactions rolled back included.
	checkTagIndex(g.t, g.m.f)
	g.rec.results = append(g.rec.results, r)
	er, ok := r.(*EntryResult)
	if !ok {
		g.t.Fatalf("entry %d: result %T %+v", l.Index, r, r)
	}
	return er.Results
}

func (g *generator) txid() string {
	if g.pick(4) == 0 {
		return fmt.Sprintf("dup%d", g.pick(6)) // repeats: duplicates and reuse
	}
	g.txSeq++
	return fmt.Sprintf("tx%d", g.txSeq)
}

func (g *generator) pushItems() []PushItem {
	n := 1 + g.pick(4)
	out := make([]PushItem, n)
	q := genQueues[g.pick(len(genQueues))]
	for i := range out {
		p := genPartitions[g.pick(len(genPartitions))]
		if g.pick(3) == 0 {
			q = genQueues[g.pick(len(genQueues))]
		}
		out[i] = PushItem{Queue: q, Partition: p, TxID: g.txid(), Payload: []byte(fmt.Sprintf(`{"n":%d}`, g.pick(1000))),
			HasTrace: g.pick(2) == 0, TraceID: [16]byte{byte(g.pick(256))}, ProducerSub: []string{"", "alice"}[g.pick(2)]}
	}
	return out
}

func (g *generator) lease() *Lease {
	l := &Lease{
		Scope: ScopeWildcard, Queue: genQueues[g.pick(len(genQueues))],
		Group: genGroups[g.pick(len(genGroups))], Batch: uint32(g.pick(6)), MaxPartitions: uint32(g.pick(4)),
		AutoAck: g.pick(6) == 0, LeaseSeconds: []int64{0, 0, 1, 5, 30}[g.pick(5)],
		SubMode: uint8(g.pick(3)), SubFrom: g.m.now.Add(-time.Duration(g.pick(120)) * time.Second).UnixMicro(),
		WindowBatch: []uint64{100, 3}[g.pick(2)], SQLWindow: g.pick(4) == 0,
	}
	switch g.pick(5) {
	case 0:
		l.Scope, l.Partition = ScopeSpecific, genPartitions[g.pick(len(genPartitions))]
	case 1:
		l.Scope, l.Queue = ScopeDiscovery, ""
		l.Namespace = []string{"orders", "stock", ""}[g.pick(3)]
		l.Task = []string{"eu", "", "us"}[g.pick(3)]
		if l.Namespace == "" && l.Task == "" {
			l.Namespace = "orders"
		}
	}
	return l
}

// pop is a lease, a third of the time bounded in bytes (about one to ten
// of the generator's messages).
func (g *generator) pop() Command {
	l := g.lease()
	if g.pick(3) != 0 {
		return l
	}
	return &LeaseCapped{Lease: *l, MaxBytes: []uint64{1, 60, 200, 600}[g.pick(4)]}
}

func (g *generator) ackItem() (string, AckItem, bool) {
	if len(g.popped) == 0 {
		return "", AckItem{}, false
	}
	r := g.popped[g.pick(len(g.popped))]
	p := r.Partitions[g.pick(len(r.Partitions))]
	msg := p.Messages[g.pick(len(p.Messages))]
	it := AckItem{TxID: msg.TxID, PartitionID: p.PartitionID, PartitionOK: true, Status: uint8(1 + g.pick(5))}
	if it.Status == AckUnknown {
		it.StatusText = "weird"
	}
	if g.pick(4) != 0 {
		it.LeaseID, it.HasLease = r.LeaseID, r.LeaseID != [16]byte{}
	}
	switch g.pick(12) {
	case 0:
		it.PartitionOK = false
	case 1:
		it.TxID = "never-pushed"
	case 2:
		it.Error = "handler failed"
	}
	return r.Group, it, true
}

func (g *generator) options() segments.Options {
	o := DefaultOptions(segments.OriginConfigure)
	o.LeaseTime = []int64{0, 1, 10, 60, 300}[g.pick(5)]
	o.RetryLimit = int64(g.pick(4))
	o.DeadLetterQueue, o.DLQAfterMaxRetries = g.pick(2) == 0, g.pick(2) == 0
	o.DelayedProcessing = []int64{0, 0, 2, 10}[g.pick(4)]
	o.WindowBuffer = []int64{0, 0, 0, 1, 3}[g.pick(5)]
	o.DedupWindowSeconds = []int64{0, 5, 3600}[g.pick(3)]
	o.MinPopWaitTime = int64(g.pick(70000))
	switch g.pick(4) {
	case 0:
		o.RetentionEnabled, o.RetentionSeconds = true, int64(5+g.pick(60))
	case 1:
		o.RetentionEnabled, o.CompletedRetentionSeconds = true, int64(5+g.pick(60))
	case 2:
		o.MaxWaitTimeSeconds = int64(10 + g.pick(100))
	}
	return o
}

func (g *generator) step() {
	switch k := g.pick(100); {
	case k < 10: // clock, sometimes backwards (a leader with a slower clock)
		if g.pick(5) == 0 {
			g.m.advance(-time.Duration(g.pick(3000)) * time.Millisecond)
		} else {
			g.m.advance(time.Duration(g.pick(20000)) * time.Millisecond)
		}
	case k < 35:
		g.commit(&Push{Items: g.pushItems()})
	case k < 38: // group commit: several requests in one entry
		g.commit(&Push{Items: g.pushItems()}, g.lease(), &Push{Items: g.pushItems()})
	case k < 60:
		r := g.commit(g.pop())[0].(*LeaseResult)
		if r.Count() > 0 {
			g.popped = append(g.popped, r)
			if r.LeaseID != ([16]byte{}) {
				g.leases = append(g.leases, r.LeaseID)
			}
		}
	case k < 80:
		var items []AckItem
		group := ""
		for i := 0; i < 1+g.pick(4); i++ {
			gr, it, ok := g.ackItem()
			if !ok {
				return
			}
			if i == 0 {
				group = gr
			}
			items = append(items, it)
		}
		g.commit(&Ack{Group: group, Items: items})
	case k < 85:
		if len(g.leases) == 0 {
			return
		}
		g.commit(&Extend{LeaseID: g.leases[g.pick(len(g.leases))], Seconds: int64(g.pick(90))})
	case k < 92:
		var ops []TxOp
		for i := 0; i < 1+g.pick(3); i++ {
			if !g.rollbacks {
				ops = append(ops, TxOp{Kind: OpPush, Items: g.pushItems()})
				continue
			}
			switch g.pick(7) {
			case 0:
				ops = append(ops, TxOp{Kind: OpInvalid, Name: "bogus"})
			case 1, 2, 3:
				ops = append(ops, TxOp{Kind: OpPush, Items: g.pushItems()})
			default:
				if gr, it, ok := g.ackItem(); ok {
					ops = append(ops, TxOp{Kind: OpAck, Group: gr, Ack: it})
				}
			}
		}
		g.commit(&Transaction{Ops: ops})
	case k < 94: // leader housekeeping, group administration (groups_test.go), message deletion and OJS administration (ojs_determinism_test.go)
		switch g.pick(6) {
		case 0:
			g.commit(&Sweep{Queue: genQueues[g.pick(len(genQueues))], MaxSegments: uint32(1 + g.pick(5))})
		case 1:
			g.commit(&ExpireLeases{Grace: int64(g.pick(30)) * 1e6, Max: uint32(1 + g.pick(4))})
		case 2:
			g.commit(g.groupsCommand())
		case 3:
			g.commit(g.deleteMessage(), &ForgetDeletedTxIDs{Max: uint32(1 + g.pick(3))})
		default:
			g.commit(g.ojsCommand())
		}
	case k < 98:
		q := genQueues[g.pick(len(genQueues))]
		g.commit(&Configure{Queue: q, Namespace: []string{"orders", "stock", ""}[g.pick(3)], Task: []string{"eu", ""}[g.pick(2)], Options: g.options()})
	default:
		g.commit(&DeleteQueue{Queue: genQueues[g.pick(len(genQueues))]})
		g.popped, g.leases = nil, nil
	}
}

// openFSM opens a fresh state machine as node id.
func openFSM(t *testing.T, dir, id string) *FSM {
	t.Helper()
	f, err := Open(Config{Dir: dir, NodeID: id, VerifyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func digestOf(t *testing.T, f *FSM) (uint64, string) {
	t.Helper()
	i, d, err := f.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return i, d
}

func TestDeterminismSameLogSameState(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		rec := recordLog(t, seed, 600, true) // one entry per batch: rollbacks are fine
		a := openFSM(t, t.TempDir(), "n1")
		b := openFSM(t, t.TempDir(), "n2") // not the proposer: results carry no payloads
		for i, l := range rec.logs {
			ra := a.ApplyBatch([]*raft.Log{l})[0]
			rb := b.ApplyBatch([]*raft.Log{l})[0]
			_, da := digestOf(t, a)
			_, db := digestOf(t, b)
			if da != db || da != rec.digests[i] {
				t.Fatalf("seed %d: entry %d: digests diverge", seed, l.Index)
			}
			if !reflect.DeepEqual(ra, rec.results[i]) {
				t.Fatalf("seed %d: entry %d: result differs from the reference:\n%+v\n%+v", seed, l.Index, ra, rec.results[i])
			}
			if _, ok := rb.(*EntryResult); !ok {
				t.Fatalf("seed %d: entry %d: follower result %T", seed, l.Index, rb)
			}
		}
		if a.AppliedIndex() != uint64(len(rec.logs)) {
			t.Fatalf("applied index %d", a.AppliedIndex())
		}
	}
}

func TestDeterminismBatchedApplyMatchesOneByOne(t *testing.T) {
	for _, seed := range []uint64{7, 8, 13} {
		rec := record(t, seed, 400)
		checkBatched(t, rec, seed, 9)
		checkBatched(t, rec, seed, len(rec.logs))
	}
}

// checkBatched applies rec's log in batches of 1..maxBatch entries (one
// bbolt transaction each) and compares results and digests with the
// one-entry-at-a-time reference.
func checkBatched(t *testing.T, rec *recording, seed uint64, maxBatch int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, uint64(maxBatch)))
	c := openFSM(t, t.TempDir(), "n1")
	for i := 0; i < len(rec.logs); {
		n := min(1+rng.IntN(maxBatch), len(rec.logs)-i)
		res := c.ApplyBatch(rec.logs[i : i+n])
		if len(res) != n {
			t.Fatalf("%d results for %d entries", len(res), n)
		}
		for j := range res {
			if !reflect.DeepEqual(res[j], rec.results[i+j]) {
				t.Fatalf("seed %d: entry %d: batched result differs:\n%+v\n%+v", seed, i+j+1, res[j], rec.results[i+j])
			}
		}
		i += n
		if idx, d := digestOf(t, c); idx != uint64(i) || d != rec.digests[i-1] {
			t.Fatalf("seed %d: batch ending at entry %d (%d entries): index %d, digest differs: %v", seed, i, n, idx, d != rec.digests[i-1])
		}
	}
}

// bufferSink is a raft.SnapshotSink writing into memory.
type bufferSink struct {
	bytes.Buffer
	closed, canceled bool
}

func (s *bufferSink) ID() string    { return "test-snapshot" }
func (s *bufferSink) Close() error  { s.closed = true; return nil }
func (s *bufferSink) Cancel() error { s.canceled = true; return nil }

// snapshotBytes takes a snapshot of f and returns the stream it persists.
func snapshotBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	sink := &bufferSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// snapshotAfter is the snapshot stream of a fresh machine that applied the
// recording's first n entries, as a leader would send it.
func snapshotAfter(t *testing.T, rec *recording, n int) []byte {
	t.Helper()
	src := openFSM(t, t.TempDir(), "leader")
	src.ApplyBatch(rec.logs[:n])
	return snapshotBytes(t, src)
}

func TestDeterminismSnapshotRestore(t *testing.T) {
	rec := record(t, 11, 500)
	half := 237
	d := openFSM(t, t.TempDir(), "n1")
	d.ApplyBatch(rec.logs[:half])
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Applies go on while the snapshot streams: it must still hold the
	// state at the moment it was taken.
	d.ApplyBatch(rec.logs[half : half+10])
	sink := &bufferSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if !sink.closed || sink.canceled || sink.Len() == 0 {
		t.Fatalf("sink closed %v canceled %v, %d bytes", sink.closed, sink.canceled, sink.Len())
	}

	var events []*Events
	e := openFSM(t, t.TempDir(), "n3")
	e.Subscribe(func(ev *Events) { events = append(events, ev) })
	e.ApplyBatch(rec.logs[:5]) // state to be replaced
	if err := e.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if idx, dg := digestOf(t, e); idx != uint64(half) || dg != rec.digests[half-1] || e.AppliedIndex() != uint64(half) {
		t.Fatalf("restored index %d (%d), digest matches %v", idx, e.AppliedIndex(), dg == rec.digests[half-1])
	}
	if last := events[len(events)-1]; !last.All || last.Index != uint64(half) {
		t.Fatalf("restore event %+v", last)
	}
	checkTagIndex(t, e)
	for i := half; i < len(rec.logs); i++ {
		e.ApplyBatch(rec.logs[i : i+1])
		if _, dg := digestOf(t, e); dg != rec.digests[i] {
			t.Fatalf("entry %d after restore: digest differs", i+1)
		}
	}
	checkTagIndex(t, e)
	// A stream that is not a state database is refused and the state stays.
	if err := e.Restore(io.NopCloser(bytes.NewReader([]byte("not a database")))); err == nil {
		t.Fatal("garbage snapshot restored")
	}
	if idx, dg := digestOf(t, e); idx != uint64(len(rec.logs)) || dg != rec.digests[len(rec.logs)-1] {
		t.Fatal("state changed by a refused restore")
	}
}

func TestDeterminismReplaySkipsAppliedEntries(t *testing.T) {
	rec := record(t, 5, 200)
	f := rec.ref.f
	_, before := digestOf(t, f)
	res := f.ApplyBatch(rec.logs[50:120])
	for i, r := range res {
		if r != nil {
			t.Fatalf("replayed entry %d returned %T", 51+i, r)
		}
	}
	if a := f.AppliedIndex(); a != 200 {
		t.Fatalf("applied index moved to %d", a)
	}
	if _, after := digestOf(t, f); after != before {
		t.Fatal("replay changed the state")
	}
	// A batch straddling the applied index applies only the new entries.
	more := record(t, 5, 210)
	res = f.ApplyBatch(more.logs[195:210])
	for i, r := range res {
		if (r == nil) != (i < 5) {
			t.Fatalf("entry %d: result %v", 196+i, r)
		}
	}
	if _, d := digestOf(t, f); d != more.digests[209] {
		t.Fatal("straddling batch diverged")
	}
}

func TestDeterminismReopenKeepsState(t *testing.T) {
	rec := record(t, 9, 300)
	dir := t.TempDir()
	f, err := Open(Config{Dir: dir, NodeID: "n1", BootID: "boot-1"})
	if err != nil {
		t.Fatal(err)
	}
	f.ApplyBatch(rec.logs[:150])
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	g := openFSM(t, dir, "n1")
	if idx, d := digestOf(t, g); idx != 150 || g.AppliedIndex() != 150 || d != rec.digests[149] {
		t.Fatalf("reopened at %d/%d, digest matches %v", idx, g.AppliedIndex(), d == rec.digests[149])
	}
	// Raft replays from its own log: the already applied part is skipped.
	g.ApplyBatch(rec.logs)
	if _, d := digestOf(t, g); d != rec.digests[len(rec.logs)-1] {
		t.Fatal("replay after reopen diverged")
	}
}

func TestReopenCrashCheck(t *testing.T) {
	rec := record(t, 13, 50)
	dir := t.TempDir()
	open := func(boot string) *FSM {
		f, err := Open(Config{Dir: dir, NodeID: "n1", BootID: boot})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// crash closes the database without recording a clean close.
	crash := func(f *FSM) {
		if err := f.store.Close(); err != nil {
			t.Fatal(err)
		}
		f.store = nil
	}
	f := open("boot-1")
	f.ApplyBatch(rec.logs)
	crash(f)
	// A process crash (same boot): the page cache survived, the file is kept.
	g := open("boot-1")
	if g.AppliedIndex() != 50 {
		t.Fatalf("process crash lost state: applied %d", g.AppliedIndex())
	}
	if _, d := digestOf(t, g); d != rec.digests[49] {
		t.Fatal("state differs after a process crash")
	}
	crash(g)
	// A machine crash (new boot, no clean close): the unsynced file may be
	// torn and is discarded; Raft rebuilds it from snapshot and log.
	h := open("boot-2")
	if h.AppliedIndex() != 0 {
		t.Fatalf("unsynced state kept across a machine crash: applied %d", h.AppliedIndex())
	}
	h.ApplyBatch(rec.logs)
	if _, d := digestOf(t, h); d != rec.digests[49] {
		t.Fatal("rebuilt state differs")
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	// After a clean close a new boot keeps the file.
	k := open("boot-3")
	defer k.Close()
	if k.AppliedIndex() != 50 {
		t.Fatalf("clean close not honoured: applied %d", k.AppliedIndex())
	}
}

func TestMonotonicTimeAcrossEntries(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "a")...)
	t0 := m.now
	m.advance(-time.Hour)
	m.push(items("q", "p", "b")...)
	var now int64
	m.view(func(tx *segments.Tx) error { now = tx.Now(); return nil })
	if now != t0.UnixMicro() {
		t.Fatalf("time high-water mark %d, want %d", now, t0.UnixMicro())
	}
	// Leases are measured from the high-water mark, not the stale stamp.
	m.pop(Lease{Queue: "q", Batch: 1})
	if g := m.group("q", "p", QueueMode); g.LeaseExpiry != t0.Add(time.Minute).UnixMicro() {
		t.Fatalf("lease expiry %d", g.LeaseExpiry)
	}
}

func TestApplyNonCommandEntries(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "a")...)
	before := m.digest()
	m.index++
	res := m.f.ApplyBatch([]*raft.Log{{Index: m.index, Type: raft.LogNoop}, {Index: m.index + 1, Type: raft.LogConfiguration}})
	m.index++
	if res[0] != nil || res[1] != nil || m.f.AppliedIndex() != m.index {
		t.Fatalf("results %v, applied %d", res, m.f.AppliedIndex())
	}
	if m.digest() == before {
		t.Fatal("applied index not recorded")
	}
	if got := txids(m.pop(Lease{Queue: "q", Batch: 1})); len(got) != 1 {
		t.Fatalf("state lost: %v", got)
	}
}

// CheckPop is what a long-poll handler consults before proposing a pop: it
// must agree with what the pop would do at the same time, or parked pops
// spin (deliverable, but the pop gets nothing) or sleep through messages.
func TestCheckPopAgreesWithPop(t *testing.T) {
	for _, seed := range []uint64{3, 4, 5} {
		rec := record(t, seed, 800)
		f := openFSM(t, t.TempDir(), "n1")
		checked := 0
		for i, l := range rec.logs {
			e, err := DecodeEntry(l.Data)
			if err != nil {
				t.Fatal(err)
			}
			if len(e.Commands) == 1 {
				if c, ok := e.Commands[0].(*Lease); ok {
					var now int64
					f.View(func(tx *segments.Tx) error { now = max(tx.Now(), e.Stamp); return nil })
					pc, err := f.CheckPop(c, now, true)
					if err != nil {
						t.Fatal(err)
					}
					got := rec.results[i].(*EntryResult).Results[0].(*LeaseResult).Count()
					// A first contact stores its start point before it reads:
					// the handler proposes such a pop anyway (NeedsRecord).
					if pc.NeedsRecord {
						f.ApplyBatch([]*raft.Log{l})
						continue
					}
					if (pc.Deliverable > 0) != (got > 0) {
						t.Fatalf("seed %d entry %d: CheckPop says %d deliverable, the pop delivered %d (%+v)", seed, l.Index, pc.Deliverable, got, c)
					}
					checked++
				}
			}
			f.ApplyBatch([]*raft.Log{l})
		}
		if checked < 100 {
			t.Fatalf("only %d pops checked", checked)
		}
	}
}

// Raft may install a leader's snapshot while its own snapshot goroutine
// still holds an FSMSnapshot of this machine, and that goroutine then waits
// on Raft's main loop, which waits on this Restore: Restore must not wait
// for the held snapshot's readers (a three-node chaos run deadlocked a
// follower this way). The held snapshot stays usable or fails cleanly.
func TestRestoreWhileOwnSnapshotIsHeld(t *testing.T) {
	rec := record(t, 13, 300)
	leader := snapshotAfter(t, rec, 200)

	f := openFSM(t, t.TempDir(), "n2")
	f.ApplyBatch(rec.logs[:120])
	held, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release() // a failure below must not leave f.Close waiting on it
	done := make(chan error, 1)
	go func() { done <- f.Restore(io.NopCloser(bytes.NewReader(leader))) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		held.Release() // lets the blocked Restore finish, so the test ends
		<-done
		t.Fatal("Restore waited for a snapshot Raft had not released")
	}
	if idx, dg := digestOf(t, f); idx != 200 || dg != rec.digests[199] {
		t.Fatalf("restored index %d, digest matches %v", idx, dg == rec.digests[199])
	}
	// The held snapshot still streams the state it was taken at (or fails
	// with an error), and releasing it lets the old file go.
	own := &bufferSink{}
	if err := held.Persist(own); err == nil {
		g := openFSM(t, t.TempDir(), "n3")
		if err := g.Restore(io.NopCloser(bytes.NewReader(own.Bytes()))); err != nil {
			t.Fatal(err)
		}
		if idx, dg := digestOf(t, g); idx != 120 || dg != rec.digests[119] {
			t.Fatalf("held snapshot holds index %d, digest matches %v", idx, dg == rec.digests[119])
		}
	} else if !own.canceled {
		t.Fatalf("failed snapshot %v left its sink open", err)
	} else {
		t.Logf("the held snapshot failed cleanly: %v", err)
	}
	held.Release()
	for i := 200; i < len(rec.logs); i++ {
		f.ApplyBatch(rec.logs[i : i+1])
	}
	if _, dg := digestOf(t, f); dg != rec.digests[len(rec.logs)-1] {
		t.Fatal("applies after the restore diverge")
	}
}

// StateWrites (crown_state_commits_total, crown_state_pages_written_total)
// counts every applied batch's commit and its pages, and keeps what the
// stores a restore replaced wrote: a counter never goes back.
func TestStateWritesCountAcrossRestore(t *testing.T) {
	rec := record(t, 17, 150)
	stream := snapshotAfter(t, rec, 100)

	f := openFSM(t, t.TempDir(), "n2")
	for i := 0; i < 50; i++ {
		f.ApplyBatch(rec.logs[i : i+1])
	}
	before := f.StateWrites()
	if before.Commits < 50 || before.Pages < 2*before.Commits {
		t.Fatalf("after 50 batches: %+v", before)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
		t.Fatal(err)
	}
	restored := f.StateWrites()
	if restored.Commits < before.Commits || restored.Pages < before.Pages {
		t.Fatalf("a restore took the counters back: %+v after %+v", restored, before)
	}
	for i := 100; i < len(rec.logs); i++ {
		f.ApplyBatch(rec.logs[i : i+1])
	}
	after := f.StateWrites()
	if after.Commits < restored.Commits+50 || after.Pages <= restored.Pages {
		t.Fatalf("50 batches after the restore: %+v, was %+v", after, restored)
	}
}

// A snapshot first seals an active blob file holding at least a megabyte,
// so a linked snapshot copies an empty file instead of those payloads, and
// leaves a smaller one alone.
func TestSnapshotSealsTheActiveBlobFile(t *testing.T) {
	m := newMachine(t)
	blobFiles := func() int {
		names, err := filepath.Glob(filepath.Join(m.f.cfg.Dir, "*.blobs-*", "*"))
		if err != nil {
			t.Fatal(err)
		}
		return len(names)
	}
	m.push(benchItems("q", 1, 100, "small-")...) // about 25 KB
	snap, err := m.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if n := blobFiles(); n != 1 {
		t.Fatalf("after a snapshot of 25 KB of payloads: %d blob files, want the one", n)
	}
	for i := range 50 {
		m.push(benchItems("q", 4, 100, fmt.Sprintf("big-%d-", i))...)
	}
	_, before, err := m.f.Digest()
	if err != nil {
		t.Fatal(err)
	}
	snap, err = m.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if n := blobFiles(); n != 2 {
		t.Fatalf("after a snapshot of 1.3 MB of payloads: %d blob files, want a sealed one and a new one", n)
	}
	if _, after, err := m.f.Digest(); err != nil || after != before {
		t.Fatalf("sealing changed the digest (%v)", err)
	}
	if r := m.push(benchItems("q", 4, 10, "after-")...); len(r.Items) != 10 {
		t.Fatalf("push after sealing: %+v", r)
	}
}

// A restore whose swap cannot even start (the rename fails) leaves the
// current state whole and in use.
func TestRestoreRenameFailureKeepsState(t *testing.T) {
	rec := record(t, 17, 150)
	f := openFSM(t, t.TempDir(), "n1")
	f.ApplyBatch(rec.logs[:100])
	if _, err := f.swapIn(filepath.Join(t.TempDir(), "no-such-snapshot")); err == nil {
		t.Fatal("swapIn of a missing file succeeded")
	}
	if idx, dg := digestOf(t, f); idx != 100 || dg != rec.digests[99] {
		t.Fatalf("after a failed swap: index %d, digest matches %v", idx, dg == rec.digests[99])
	}
	f.ApplyBatch(rec.logs[100:])
	if _, dg := digestOf(t, f); dg != rec.digests[len(rec.logs)-1] {
		t.Fatal("applies after a failed swap diverge")
	}
}

// A restore that replaced the state file but cannot open it stops the state
// machine with that reason instead of a nil store: applies panic with it
// (ApplyBatch's loud stop), snapshots and reads return it.
func TestRestoreUnopenableStateStopsLoudly(t *testing.T) {
	rec := record(t, 19, 40)
	f := openFSM(t, t.TempDir(), "n1")
	f.ApplyBatch(rec.logs[:20])
	bad := filepath.Join(f.cfg.Dir, "not-a-database")
	if err := os.WriteFile(bad, []byte("this is not a bbolt file"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := f.swapIn(bad)
	if err == nil || !strings.Contains(err.Error(), "reopen restored state") {
		t.Fatalf("swapIn of an unopenable file: %v", err)
	}
	const why = "state machine has no state: reopen restored state"
	if _, err := f.Snapshot(); err == nil || !strings.Contains(err.Error(), why) {
		t.Fatalf("Snapshot: %v", err)
	}
	if err := f.View(func(*segments.Tx) error { return nil }); err == nil || !strings.Contains(err.Error(), why) {
		t.Fatalf("View: %v", err)
	}
	func() {
		defer func() {
			r := recover()
			if r == nil || !strings.Contains(fmt.Sprint(r), why) {
				t.Fatalf("ApplyBatch after the failed restore: panic %v", r)
			}
		}()
		f.ApplyBatch(rec.logs[20:21])
	}()
}

// A syncing session records its state as synced only once its Open has
// made the files on disk whole: until then they may be what an unsynced
// session left in the page cache when its process was killed. Here the
// syncing Open fails on a file that is garbage (what a machine crash can
// leave of unsynced pages): the marker must not call it synced, so the
// next boot discards it and rebuilds instead of failing on it for good.
func TestSyncedMarkerOnlyAfterASyncingOpen(t *testing.T) {
	rec := record(t, 17, 20)
	dir := t.TempDir()
	open := func(boot string, sync bool) (*FSM, error) {
		return Open(Config{Dir: dir, NodeID: "n1", BootID: boot, Sync: sync})
	}
	f, err := open("boot-1", false)
	if err != nil {
		t.Fatal(err)
	}
	f.ApplyBatch(rec.logs)
	if err := f.store.Close(); err != nil { // a process crash
		t.Fatal(err)
	}
	f.store = nil
	if err := os.WriteFile(filepath.Join(dir, dbFile), bytes.Repeat([]byte{0xAB}, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	if g, err := open("boot-1", true); err == nil {
		g.Close()
		t.Fatal("opened a garbage state file")
	}
	b, err := os.ReadFile(filepath.Join(dir, markerFile))
	if err != nil {
		t.Fatal(err)
	}
	var m marker
	if err := json.Unmarshal(b, &m); err != nil || m.Synced || m.Clean {
		t.Fatalf("marker after a failed syncing open: %s (%v), want neither clean nor synced", b, err)
	}
	h, err := open("boot-2", true) // the machine restarted
	if err != nil {
		t.Fatalf("a new boot could not discard the unsynced file: %v", err)
	}
	defer h.Close()
	if h.AppliedIndex() != 0 {
		t.Fatalf("applied %d, want a discarded, rebuilt state", h.AppliedIndex())
	}
	b, _ = os.ReadFile(filepath.Join(dir, markerFile))
	if json.Unmarshal(b, &m) != nil || !m.Synced {
		t.Fatalf("marker after a syncing open: %s, want synced", b)
	}
}

// With the state file's transaction kept open across batches (Config.
// CommitInterval), every result is the reference's, the state read between
// batches (a View commits the open transaction first) is the reference's,
// and so is the state a snapshot taken inside an open transaction carries.
func TestDeterminismDeferredCommits(t *testing.T) {
	for _, seed := range []uint64{5, 21} {
		rec := record(t, seed, 400)
		rng := rand.New(rand.NewPCG(seed, 99))
		// An hour: only the batch count and reads commit, so the test decides where.
		c, err := Open(Config{Dir: t.TempDir(), NodeID: "n1", VerifyCache: true, CommitInterval: time.Hour, CommitBatches: 5})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		var stream []byte
		at, batches := 0, 0
		for i := 0; i < len(rec.logs); {
			n := min(1+rng.IntN(6), len(rec.logs)-i)
			res := c.ApplyBatch(rec.logs[i : i+n])
			for j := range res {
				if !reflect.DeepEqual(res[j], rec.results[i+j]) {
					t.Fatalf("seed %d: entry %d: result with deferred commits differs:\n%+v\n%+v", seed, i+j+1, res[j], rec.results[i+j])
				}
			}
			i += n
			batches++
			switch {
			case stream == nil && i >= len(rec.logs)/2:
				stream, at = snapshotBytes(t, c), i
			case rng.IntN(8) == 0:
				if idx, d := digestOf(t, c); idx != uint64(i) || d != rec.digests[i-1] {
					t.Fatalf("seed %d: read after entry %d: index %d, digest differs: %v", seed, i, idx, d != rec.digests[i-1])
				}
			}
		}
		if w := c.StateWrites(); w.Commits >= uint64(batches) {
			t.Fatalf("seed %d: %d commits for %d batches: nothing was deferred", seed, w.Commits, batches)
		}
		if _, d := digestOf(t, c); d != rec.digests[len(rec.logs)-1] {
			t.Fatalf("seed %d: final digest differs", seed)
		}
		r := openFSM(t, t.TempDir(), "n2")
		if err := r.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
			t.Fatal(err)
		}
		if idx, d := digestOf(t, r); idx != uint64(at) || d != rec.digests[at-1] {
			t.Fatalf("seed %d: the snapshot taken inside an open transaction restores to %d, digest differs: %v", seed, idx, d != rec.digests[at-1])
		}
	}
}

// checkTagIndex fails the test unless f's queue tag index is what a rebuild
// from its queue records makes of it.
func checkTagIndex(t testing.TB, f *FSM) {
	t.Helper()
	if err := f.View(func(tx *segments.Tx) error { return tx.CheckQueueTagIndex() }); err != nil {
		t.Fatal(err)
	}
}
