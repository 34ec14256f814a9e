package fsm

import (
	"slices"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

func TestDelayedProcessingHidesYoungMessages(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DelayedProcessing = 10 })
	m.push(items("q", "p", "m1")...)
	if r := m.pop(Lease{Queue: "q", Batch: 10}); r.Count() != 0 {
		t.Fatalf("delivered at once: %v", txids(r))
	}
	m.advance(9*time.Second + 999*time.Millisecond)
	if r := m.pop(Lease{Queue: "q", Batch: 10}); r.Count() != 0 {
		t.Fatalf("delivered before the delay: %v", txids(r))
	}
	if g := m.group("q", "p", QueueMode); g != nil {
		t.Fatalf("an empty pop left state: %+v", g)
	}
	m.advance(time.Millisecond)
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("at createdAt+delay: %v", got)
	}
}

func TestDelayedProcessingCutsContiguousTail(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DelayedProcessing = 10 })
	m.push(items("q", "p", "old1", "old2")...)
	m.advance(5 * time.Second)
	m.push(items("q", "p", "new1")...)
	m.advance(7 * time.Second) // old: 12 s, new: 7 s
	r := m.pop(Lease{Queue: "q", Batch: 10})
	if got := txids(r); !slices.Equal(got, []string{"old1", "old2"}) {
		t.Fatalf("delivered %v", got)
	}
	if g := m.group("q", "p", QueueMode); g.LeaseLast != 2 || g.LeaseDelivered != 2 {
		t.Fatalf("lease %+v", g)
	}
	m.ack("", ackAll(r, AckCompleted)...)
	if r := m.pop(Lease{Queue: "q", Batch: 10}); r.Count() != 0 {
		t.Fatalf("young tail delivered: %v", txids(r))
	}
	m.advance(3 * time.Second)
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"new1"}) {
		t.Fatalf("tail after its delay: %v", got)
	}
}

func TestDelayedProcessingReconfigure(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	m.advance(30 * time.Second)
	configureWith(m, "q", func(o *segments.Options) { o.DelayedProcessing = 60 })
	if r := m.pop(Lease{Queue: "q", Batch: 10}); r.Count() != 0 {
		t.Fatalf("raising the delay did not hide: %v", txids(r))
	}
	configureWith(m, "q", func(o *segments.Options) { o.DelayedProcessing = 20 })
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("lowering the delay did not expose: %v", got)
	}
}

func TestDelayedProcessingOtherPartitionsStillDeliver(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DelayedProcessing = 10 })
	m.push(items("q", "old", "o1")...)
	m.advance(10 * time.Second)
	m.push(items("q", "a-young", "y1")...) // scanned first, not visible
	r := m.pop(Lease{Queue: "q", Batch: 10, MaxPartitions: 1})
	if got := delivered(r); !slices.Equal(got, []string{"old/o1"}) {
		t.Fatalf("delivered %v", got)
	}
}

func TestWindowBufferHotListHoldsUntilFirstPushPlusWindow(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.WindowBuffer = 2 })
	m.push(items("q", "p", "m1", "m2", "m3")...)
	if r := m.pop(Lease{Queue: "q", Batch: 4}); r.Count() != 0 {
		t.Fatalf("delivered inside the window: %v", txids(r))
	}
	m.advance(time.Second)
	m.push(items("q", "p", "m4")...) // same burst: does not move the mark
	m.advance(999 * time.Millisecond)
	if r := m.pop(Lease{Queue: "q", Batch: 10}); r.Count() != 0 {
		t.Fatalf("delivered before first push + window: %v", txids(r))
	}
	m.advance(time.Millisecond)
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"m1", "m2", "m3", "m4"}) {
		t.Fatalf("at first push + window: %v", got)
	}
}

func TestWindowBufferSpecExample(t *testing.T) {
	// queen-api.md 4.6: push 3 with W = 2, pop at once: nothing; 2.5 s
	// later with batch 4: the 3 messages.
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.WindowBuffer = 2 })
	m.push(items("q", "p", "m1", "m2", "m3")...)
	if r := m.pop(Lease{Queue: "q", Batch: 4}); r.Count() != 0 {
		t.Fatalf("got %v", txids(r))
	}
	m.advance(2500 * time.Millisecond)
	if got := txids(m.pop(Lease{Queue: "q", Batch: 4})); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("got %v", got)
	}
}

func TestWindowBufferHotListReleasesEarlyAtWindowBatch(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.WindowBuffer = 60 })
	m.push(items("q", "p", seq("a", 60)...)...)
	m.advance(time.Second)
	m.push(items("q", "p", seq("b", 39)...)...)
	if r := m.pop(Lease{Queue: "q", Batch: 500}); r.Count() != 0 {
		t.Fatalf("99 messages released early: %d", r.Count())
	}
	m.push(items("q", "p", "c1")...)
	r := m.pop(Lease{Queue: "q", Batch: 500})
	if r.Count() != 100 {
		t.Fatalf("100 accumulated messages delivered %d", r.Count())
	}
	// The rule counts with the batch the pop was stamped with.
	m2 := newMachine(t)
	configureWith(m2, "q", func(o *segments.Options) { o.WindowBuffer = 60 })
	m2.push(items("q", "p", seq("a", 5)...)...)
	if r := m2.pop(Lease{Queue: "q", Batch: 10, WindowBatch: 6}); r.Count() != 0 {
		t.Fatalf("released below WindowBatch: %d", r.Count())
	}
	if r := m2.pop(Lease{Queue: "q", Batch: 10, WindowBatch: 5}); r.Count() != 5 {
		t.Fatalf("not released at WindowBatch: %d", r.Count())
	}
}

func TestWindowBufferSQLRuleStarvesContinuousWriter(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.WindowBuffer = 2 })
	for i := 0; i < 200; i++ { // 100 s of writes every 500 ms, 200 messages
		m.push(item("q", "p", seq("m", 200)[i], `0`))
		m.advance(250 * time.Millisecond)
		if r := m.pop(Lease{Queue: "q", Batch: 1000, SQLWindow: true}); r.Count() != 0 {
			t.Fatalf("SQL window delivered to a continuously written partition at write %d", i)
		}
		m.advance(250 * time.Millisecond)
	}
	// Quiet for less than the window: still held; then released.
	m.advance(1499 * time.Millisecond)
	if r := m.pop(Lease{Queue: "q", Batch: 1000, SQLWindow: true}); r.Count() != 0 {
		t.Fatal("released before a full quiet window")
	}
	m.advance(time.Millisecond)
	if r := m.pop(Lease{Queue: "q", Batch: 1000, SQLWindow: true}); r.Count() != 200 {
		t.Fatalf("after a quiet window: %d", r.Count())
	}
}

func TestWindowBufferHotListDeliversContinuousWriterAtMarkPlusWindow(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.WindowBuffer = 2 })
	m.push(items("q", "p", "m1")...)
	m.advance(time.Second)
	m.push(items("q", "p", "m2")...)
	m.advance(time.Second) // first mark + window; the writer is still writing
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("hot-list at mark+window: %v", got)
	}
	// The SQL rule on the same history holds the partition.
	m2 := newMachine(t)
	configureWith(m2, "q", func(o *segments.Options) { o.WindowBuffer = 2 })
	m2.push(items("q", "p", "m1")...)
	m2.advance(time.Second)
	m2.push(items("q", "p", "m2")...)
	m2.advance(time.Second)
	if r := m2.pop(Lease{Queue: "q", Batch: 10, SQLWindow: true}); r.Count() != 0 {
		t.Fatalf("SQL rule delivered %v", txids(r))
	}
}

func TestWindowBufferIsPerPartition(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.WindowBuffer = 5 })
	m.push(items("q", "old", "o1")...)
	m.advance(5 * time.Second)
	m.push(items("q", "a-new", "n1")...)
	if got := delivered(m.pop(Lease{Queue: "q", Batch: 10, MaxPartitions: 5})); !slices.Equal(got, []string{"old/o1"}) {
		t.Fatalf("got %v", got)
	}
	if got := delivered(m.pop(Lease{Queue: "q", Batch: 10, MaxPartitions: 5, SQLWindow: true})); len(got) != 0 {
		t.Fatalf("SQL rule: got %v", got)
	}
}

func TestWindowBufferZeroNeverHolds(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10, SQLWindow: true})); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("got %v", got)
	}
}

func TestSubscriptionNewSeesOnlyMessagesFromFirstPop(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "old")...)
	m.advance(time.Minute)
	first := m.now
	r := m.pop(Lease{Queue: "q", Group: "G", SubMode: SubNew, Batch: 10})
	if r.Count() != 0 {
		t.Fatalf("new-mode first pop delivered %v", txids(r))
	}
	s := m.subscription(subQueueKey("G", "q"))
	if s == nil || s.Mode != "new" || s.Start != first.UnixMicro() || s.CreatedAt != first.UnixMicro() {
		t.Fatalf("subscription %+v", s)
	}
	m.push(items("q", "p", "same-instant")...) // createdAt == S: delivered
	m.advance(time.Second)
	m.push(items("q", "p", "later")...)
	m.push(items("q", "p2", "other-partition")...)
	// Later pops ask for "all": ignored after first contact.
	r = m.pop(Lease{Queue: "q", Group: "G", Batch: 10, MaxPartitions: 5})
	got := delivered(r)
	if want := []string{"p/same-instant", "p/later", "p2/other-partition"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Queue mode and other groups still see everything.
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"old", "same-instant", "later"}) {
		t.Fatalf("queue mode %v", got)
	}
}

func TestSubscriptionRecordedOnEmptyQueue(t *testing.T) {
	m := newMachine(t)
	// The group first polls a queue that does not exist yet.
	m.pop(Lease{Queue: "q", Group: "G", SubMode: SubNew, Batch: 10})
	if s := m.subscription(subQueueKey("G", "q")); s == nil || s.Start != m.now.UnixMicro() {
		t.Fatalf("no record after an empty first contact: %+v", s)
	}
	m.advance(time.Second)
	m.push(items("q", "p", "woke-it")...)
	if got := txids(m.pop(Lease{Queue: "q", Group: "G", Batch: 10})); !slices.Equal(got, []string{"woke-it"}) {
		t.Fatalf("the message that woke the group: %v", got)
	}
}

func TestSubscriptionLaterModeIgnored(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m0")...)
	m.advance(time.Minute)
	m.pop(Lease{Queue: "q", Group: "G", SubMode: SubNew, Batch: 10})
	s := m.subscription(subQueueKey("G", "q"))
	m.advance(time.Minute)
	r := m.pop(Lease{Queue: "q", Group: "G", SubMode: SubTimestamp, SubFrom: 0, Batch: 10})
	if r.Count() != 0 {
		t.Fatalf("second contact replayed: %v", txids(r))
	}
	if s2 := m.subscription(subQueueKey("G", "q")); *s2 != *s {
		t.Fatalf("record rewritten: %+v -> %+v", s, s2)
	}
}

func TestSubscriptionTimestampReplaysFromInstant(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	m.advance(10 * time.Second)
	from := m.now
	m.push(items("q", "p", "m2")...)
	m.advance(10 * time.Second)
	m.push(items("q", "p", "m3")...)
	m.advance(time.Hour)
	r := m.pop(Lease{Queue: "q", Group: "G", SubMode: SubTimestamp, SubFrom: from.UnixMicro(), Batch: 10})
	if got := txids(r); !slices.Equal(got, []string{"m2", "m3"}) {
		t.Fatalf("got %v", got)
	}
	s := m.subscription(subQueueKey("G", "q"))
	if s == nil || s.Mode != "timestamp" || s.Start != from.UnixMicro() {
		t.Fatalf("record %+v", s)
	}
	// One microsecond later excludes m2.
	r = m.pop(Lease{Queue: "q", Group: "H", SubMode: SubTimestamp, SubFrom: from.UnixMicro() + 1, Batch: 10})
	if got := txids(r); !slices.Equal(got, []string{"m3"}) {
		t.Fatalf("got %v", got)
	}
}

func TestSubscriptionTimestampInFuture(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	from := m.now.Add(time.Hour)
	if r := m.pop(Lease{Queue: "q", Group: "G", SubMode: SubTimestamp, SubFrom: from.UnixMicro(), Batch: 10}); r.Count() != 0 {
		t.Fatalf("got %v", txids(r))
	}
	m.advance(30 * time.Minute)
	m.push(items("q", "p", "m2")...)
	if r := m.pop(Lease{Queue: "q", Group: "G", Batch: 10}); r.Count() != 0 {
		t.Fatalf("before the instant: %v", txids(r))
	}
	m.advance(30 * time.Minute)
	m.push(items("q", "p", "m3")...)
	if got := txids(m.pop(Lease{Queue: "q", Group: "G", Batch: 10})); !slices.Equal(got, []string{"m3"}) {
		t.Fatalf("got %v", got)
	}
}

func TestSubscriptionAllLeavesNoRecord(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "a", "a1")...)
	r := m.pop(Lease{Queue: "q", Group: "G", SubMode: SubAll, Batch: 10, AutoAck: true})
	if got := txids(r); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("all-mode %v", got)
	}
	if s := m.subscription(subQueueKey("G", "q")); s != nil {
		t.Fatalf("all-mode stored %+v", s)
	}
	// A later "new" pop is still a first contact for partitions G has not read.
	m.advance(time.Second)
	m.push(items("q", "b", "b-old")...)
	m.advance(time.Second)
	m.pop(Lease{Queue: "q", Group: "G", SubMode: SubNew, Batch: 10})
	m.push(items("q", "a", "a2")...)
	m.push(items("q", "b", "b-new")...)
	got := delivered(m.pop(Lease{Queue: "q", Group: "G", Batch: 10, MaxPartitions: 5}))
	slices.Sort(got)
	if want := []string{"a/a2", "b/b-new"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestSubscriptionQueueModeIgnored(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "old")...)
	m.advance(time.Minute)
	r := m.pop(Lease{Queue: "q", SubMode: SubNew, Batch: 10})
	if got := txids(r); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("queue mode %v", got)
	}
	if s := m.subscription(subQueueKey(QueueMode, "q")); s != nil {
		t.Fatalf("queue mode stored %+v", s)
	}
}

func TestSubscriptionNewPartitionCreatedLaterDeliversAll(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "old")...)
	m.advance(time.Minute)
	m.pop(Lease{Queue: "q", Group: "G", SubMode: SubNew, Batch: 10})
	m.advance(time.Minute)
	m.push(items("q", "fresh", "f1", "f2")...)
	if got := delivered(m.pop(Lease{Queue: "q", Group: "G", Batch: 10, MaxPartitions: 5})); !slices.Equal(got, []string{"fresh/f1", "fresh/f2"}) {
		t.Fatalf("got %v", got)
	}
}

func TestSubscriptionSpecificScope(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "a", "a-old")...)
	m.push(items("q", "b", "b-old")...)
	m.advance(time.Minute)
	m.pop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "a", Group: "G", SubMode: SubNew, Batch: 10})
	if s := m.subscription(segments.SubKey("G", segments.SubPartition, "q", "a")); s == nil || s.Mode != "new" {
		t.Fatalf("partition record %+v", s)
	}
	if s := m.subscription(subQueueKey("G", "q")); s != nil {
		t.Fatalf("specific pop stored a queue record %+v", s)
	}
	m.push(items("q", "a", "a-new")...)
	// Partition a starts at S; b has no record in scope and starts at the beginning.
	got := delivered(m.pop(Lease{Queue: "q", Group: "G", Batch: 10, MaxPartitions: 5}))
	if want := []string{"a/a-new", "b/b-old"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestSubscriptionDiscoveryScope(t *testing.T) {
	m := newMachine(t)
	m.push(items("orders.x", "p", "x-old")...)
	m.push(items("orders.w", "p", "w-old")...)
	m.advance(time.Minute)
	m.pop(Lease{Scope: ScopeDiscovery, Namespace: "orders", Group: "G", SubMode: SubNew, Batch: 10})
	if s := m.subscription(segments.SubKey("G", segments.SubDiscovery, "orders", "")); s == nil {
		t.Fatal("no discovery record")
	}
	m.push(items("orders.x", "p", "x-new")...)
	m.push(items("orders.y", "p", "y-new")...)
	got := txids(m.pop(Lease{Scope: ScopeDiscovery, Namespace: "orders", Group: "G", Batch: 10, MaxPartitions: 5}))
	if want := []string{"x-new", "y-new"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// The discovery record also applies to a wildcard pop on a matching
	// queue: w's old message stays behind the start point.
	m.push(items("orders.w", "p", "w-new")...)
	if got := txids(m.pop(Lease{Queue: "orders.w", Group: "G", Batch: 10})); !slices.Equal(got, []string{"w-new"}) {
		t.Fatalf("wildcard pop on a discovered queue: %v", got)
	}
}
