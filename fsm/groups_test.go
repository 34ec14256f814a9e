package fsm

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// Consumer-group administration (queen-api.md 3.15, 4.20).

func (m *machine) deleteGroup(c DeleteGroup) *DeleteGroupResult {
	m.t.Helper()
	return m.apply(&c)[0].(*DeleteGroupResult)
}

func (m *machine) seekGroup(c Seek) *SeekResult {
	m.t.Helper()
	return m.apply(&c)[0].(*SeekResult)
}

func (m *machine) seekPartition(c SeekPartition) *SeekPartitionResult {
	m.t.Helper()
	return m.apply(&c)[0].(*SeekPartitionResult)
}

func (m *machine) rewriteSubscription(group string, start time.Time) *RewriteSubscriptionResult {
	m.t.Helper()
	return m.apply(&RewriteSubscription{Group: group, Start: start.UnixMicro()})[0].(*RewriteSubscriptionResult)
}

// leaseHoldersOf lists the lease index entries of a lease id.
func (m *machine) leaseHoldersOf(lease [16]byte) []string {
	m.t.Helper()
	var out []string
	m.view(func(tx *segments.Tx) error {
		_, groups := tx.LeaseHolders(lease)
		out = groups
		return nil
	})
	return out
}

// queueGroup loads a group's per-queue record.
func (m *machine) queueGroup(queue, group string) *segments.QueueGroup {
	m.t.Helper()
	q := m.queue(queue)
	var qg *segments.QueueGroup
	m.view(func(tx *segments.Tx) (err error) { qg, err = tx.QueueGroup(q.ID, group); return err })
	return qg
}

// drainGroup pops everything deliverable for a group on one partition (specific
// form, autoAck) and returns the transaction ids.
func (m *machine) drainGroup(queue, partition, group string) []string {
	m.t.Helper()
	return txids(m.pop(Lease{Scope: ScopeSpecific, Queue: queue, Partition: partition, Group: group,
		Batch: 100, AutoAck: true}))
}

func TestGroupsDeleteWithAndWithoutMetadata(t *testing.T) {
	for _, withMeta := range []bool{false, true} {
		m := newMachine(t)
		m.push(item("q", "p1", "m0", "0"))
		m.advance(time.Second)
		// First contact in "new" mode: the record starts after m0.
		if r := m.pop(Lease{Queue: "q", Group: "g", SubMode: SubNew, Batch: 10}); r.Count() != 0 {
			t.Fatalf("first contact delivered %v", txids(r))
		}
		m.advance(time.Second)
		m.push(item("q", "p1", "m1", "1"), item("q", "p1", "m2", "2"), item("q", "p2", "n1", "1"))
		r := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 10, MaxPartitions: 2})
		// p1 consumed (m2 dead-lettered); p2 still leased.
		m.ack("g", ackTx(r.Partitions[0].PartitionID, "m1", r.LeaseID, AckCompleted))
		m.ack("g", ackTx(r.Partitions[0].PartitionID, "m2", r.LeaseID, AckDLQ))
		dlq := len(m.deadLetters("q"))
		if m.leaseHoldersOf(r.LeaseID) == nil {
			t.Fatal("no live lease before the deletion")
		}
		res := m.deleteGroup(DeleteGroup{Group: "g", DeleteMetadata: withMeta})
		want := DeleteGroupResult{Partitions: 2}
		if withMeta {
			want.Subscriptions = 1
		}
		if *res != want {
			t.Fatalf("meta %v: result %+v, want %+v", withMeta, *res, want)
		}
		if m.group("q", "p1", "g") != nil || m.group("q", "p2", "g") != nil || m.queueGroup("q", "g") != nil {
			t.Fatalf("meta %v: group state survived", withMeta)
		}
		if h := m.leaseHoldersOf(r.LeaseID); len(h) != 0 {
			t.Fatalf("meta %v: lease index kept %v", withMeta, h)
		}
		if got := len(m.deadLetters("q")); got != dlq || dlq == 0 {
			t.Fatalf("meta %v: dead letters %d, had %d", withMeta, got, dlq)
		}
		if sub := m.subscription(subQueueKey("g", "q")); (sub == nil) != withMeta {
			t.Fatalf("meta %v: subscription record %+v", withMeta, sub)
		}
		// The next pop asks for everything: without metadata the old
		// start still applies (m0 predates it); with it, the pop is a
		// first contact and "all" starts at the beginning.
		got := strings.Join(m.drainGroup("q", "p1", "g"), ",")
		if wantIDs := map[bool]string{false: "m1,m2", true: "m0,m1,m2"}[withMeta]; got != wantIDs {
			t.Fatalf("meta %v: after deletion g got %q, want %q", withMeta, got, wantIDs)
		}
		if withMeta && m.subscription(subQueueKey("g", "q")) != nil {
			t.Fatal("a mode-all first contact stored a record")
		}
	}
}

func TestGroupsDeleteOneQueue(t *testing.T) {
	m := newMachine(t)
	m.configure(Configure{Queue: "a", Namespace: "ns", Options: DefaultOptions(segments.OriginConfigure)})
	m.push(item("a", "p", "a1", "1"), item("b", "p", "b1", "1"), item("gone", "p", "c1", "1"))
	for _, q := range []string{"a", "b", "gone"} {
		m.mustPop(Lease{Queue: q, Group: "g", SubMode: SubTimestamp, SubFrom: 1, AutoAck: true})
	}
	m.pop(Lease{Scope: ScopeDiscovery, Namespace: "ns", Group: "g", SubMode: SubNew})
	m.pop(Lease{Scope: ScopeSpecific, Queue: "a", Partition: "x", Group: "g", SubMode: SubNew})
	m.deleteQueue("gone")

	res := m.deleteGroup(DeleteGroup{Group: "g", OneQueue: true, Queue: "a", DeleteMetadata: true})
	if *res != (DeleteGroupResult{Partitions: 1, Subscriptions: 2}) {
		t.Fatalf("result %+v", *res)
	}
	if m.group("a", "p", "g") != nil || m.group("b", "p", "g") == nil {
		t.Fatal("deletion on a must touch a only")
	}
	if m.subscription(subQueueKey("g", "a")) != nil ||
		m.subscription(segments.SubKey("g", segments.SubPartition, "a", "x")) != nil {
		t.Fatal("a's records survived")
	}
	if m.subscription(subQueueKey("g", "b")) == nil ||
		m.subscription(segments.SubKey("g", segments.SubDiscovery, "ns", "")) == nil {
		t.Fatal("records of other scopes were deleted")
	}
	// A deleted queue keeps its records (4.20); deleting the group on it
	// by name removes them.
	res = m.deleteGroup(DeleteGroup{Group: "g", OneQueue: true, Queue: "gone", DeleteMetadata: true})
	if *res != (DeleteGroupResult{Subscriptions: 1}) || m.subscription(subQueueKey("g", "gone")) != nil {
		t.Fatalf("unknown queue: %+v", *res)
	}
	if res := m.deleteGroup(DeleteGroup{Group: "nobody", DeleteMetadata: true}); *res != (DeleteGroupResult{}) {
		t.Fatalf("unknown group: %+v", *res)
	}
}

func TestGroupsRewriteSubscriptionOnlyUnreadPartitions(t *testing.T) {
	m := newMachine(t)
	t0 := m.now
	m.push(item("q", "a", "a0", "0"), item("q", "b", "b0", "0"))
	m.advance(10 * time.Second)
	if r := m.pop(Lease{Queue: "q", Group: "g", SubMode: SubNew}); r.Count() != 0 {
		t.Fatalf("first contact delivered %v", txids(r))
	}
	m.advance(time.Second)
	m.push(item("q", "a", "a1", "1"))
	if got := m.drainGroup("q", "a", "g"); !reflect.DeepEqual(got, []string{"a1"}) {
		t.Fatalf("g on a: %v", got)
	}
	if r := m.rewriteSubscription("g", t0.Add(-time.Minute)); r.Updated != 1 {
		t.Fatalf("rewrite %+v", r)
	}
	if s := m.subscription(subQueueKey("g", "q")); s.Start != t0.Add(-time.Minute).UnixMicro() || s.Mode != "new" {
		t.Fatalf("record %+v", s)
	}
	// a has a position: a0 stays behind it. b has none: the new start applies.
	if got := m.drainGroup("q", "a", "g"); len(got) != 0 {
		t.Fatalf("rewrite moved a's position: %v", got)
	}
	if got := m.drainGroup("q", "b", "g"); !reflect.DeepEqual(got, []string{"b0"}) {
		t.Fatalf("g on b: %v", got)
	}
	if r := m.rewriteSubscription("nobody", t0); r.Updated != 0 {
		t.Fatalf("unknown group: %+v", r)
	}
}

func TestGroupsSeekToEndReleasesLease(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 3 })
	m.push(items("q", "p1", "m1", "m2", "m3")...)
	m.push(items("q", "p2", "n1")...)
	l := Lease{Scope: ScopeSpecific, Queue: "q", Partition: "p1", Group: "g", Batch: 2}
	r := m.mustPop(l)
	m.ack("g", ackAll(r, AckFailed)[0]) // charges the retry budget, releases
	r = m.mustPop(l)
	if g := m.group("q", "p1", "g"); g.Retry != 1 || !g.LeaseLive(m.now.UnixMicro()) {
		t.Fatalf("before the seek: %+v", g)
	}
	res := m.seekGroup(Seek{Group: "g", Queue: "q", ToEnd: true})
	if res.Partitions != 1 {
		t.Fatalf("seek %+v: only p1 has state", res)
	}
	p1 := m.partition("q", "p1")
	g := m.group("q", "p1", "g")
	if g.Next != p1.NextOffset || g.HasLease() || g.HasBatch() || g.Retry != 1 {
		t.Fatalf("after the seek: %+v (next offset %d)", g, p1.NextOffset)
	}
	if h := m.leaseHoldersOf(r.LeaseID); len(h) != 0 {
		t.Fatalf("lease index kept %v", h)
	}
	if m.group("q", "p2", "g") != nil {
		t.Fatal("seek created state where the group had none")
	}
	// A late failure under the released lease is refused: no charge.
	if ar := m.ack("g", ackAll(r, AckFailed)[0]); ar.Items[0].Error != ErrInvalidLease {
		t.Fatalf("late ack: %+v", ar.Items[0])
	}
	if g := m.group("q", "p1", "g"); g.Next != p1.NextOffset || g.Retry != 1 {
		t.Fatalf("late ack moved the group: %+v", g)
	}
	m.push(items("q", "p1", "m4")...)
	if got := m.drainGroup("q", "p1", "g"); !reflect.DeepEqual(got, []string{"m4"}) {
		t.Fatalf("after seek to end: %v", got)
	}
	if got := m.drainGroup("q", "p2", "g"); !reflect.DeepEqual(got, []string{"n1"}) {
		t.Fatalf("untouched partition: %v", got)
	}
	if res := m.seekGroup(Seek{Group: "g", Queue: "missing", ToEnd: true}); *res != (SeekResult{}) {
		t.Fatalf("unknown queue: %+v", res)
	}
	if res := m.seekGroup(Seek{Group: "nobody", Queue: "q", ToEnd: true}); *res != (SeekResult{}) {
		t.Fatalf("unknown group: %+v", res)
	}
}

func TestGroupsSeekTimestamp(t *testing.T) {
	m := newMachine(t)
	m.push(item("q", "p", "m0", "0"))
	m.advance(10 * time.Second)
	// A "new" group: m0 predates its subscription.
	m.pop(Lease{Queue: "q", Group: "g", SubMode: SubNew})
	t1 := m.now
	m.push(item("q", "p", "m1", "1"))
	m.advance(10 * time.Second)
	t2 := m.now
	m.push(item("q", "p", "m2", "2"))
	m.advance(10 * time.Second)
	m.push(item("q", "p", "m3", "3"))
	if got := m.drainGroup("q", "p", "g"); strings.Join(got, ",") != "m1,m2,m3" {
		t.Fatalf("g: %v", got)
	}
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{t2, "m3"},                                       // resumes after the last message at or before T
		{t2.Add(-time.Microsecond), "m2,m3"},             // the first message after T is m2
		{t1.Add(time.Hour), ""},                          // later than every message
		{t1.Add(-time.Hour), "m0,m1,m2,m3"},              // before the first message, not "unset"
		{time.Unix(0, 0).Add(-time.Hour), "m0,m1,m2,m3"}, // negative times are times too
	} {
		// Rewind and lease m0: the seek must release the live lease.
		m.seekGroup(Seek{Group: "g", Queue: "q", Timestamp: t1.Add(-time.Hour).UnixMicro()})
		lr := m.mustPop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "p", Group: "g", Batch: 1})
		res := m.seekGroup(Seek{Group: "g", Queue: "q", Timestamp: c.at.UnixMicro()})
		if res.Partitions != 1 {
			t.Fatalf("seek to %v: %+v", c.at, res)
		}
		if len(m.leaseHoldersOf(lr.LeaseID)) != 0 || m.group("q", "p", "g").HasLease() {
			t.Fatalf("seek to %v kept the lease", c.at)
		}
		if strings.HasPrefix(c.want, "m0") {
			// m0 is after the new position: the released lease's ack is refused.
			if ar := m.ack("g", ackAll(lr, AckCompleted)...); ar.Items[0].Error != ErrInvalidLease {
				t.Fatalf("ack under the released lease: %+v", ar.Items[0])
			}
		}
		if got := strings.Join(m.drainGroup("q", "p", "g"), ","); got != c.want {
			t.Errorf("seek to %v: delivered %q, want %q", c.at, got, c.want)
		}
	}
}

func TestGroupsSeekTimestampAfterRetention(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.RetentionSeconds = true, 60 })
	m.push(item("q", "p", "old", "0"))
	m.advance(2 * time.Minute)
	m.push(item("q", "p", "new", "1"))
	if got := m.drainGroup("q", "p", "g"); len(got) != 2 {
		t.Fatalf("g: %v", got)
	}
	m.apply(&Sweep{Queue: "q", MaxSegments: 10})
	// The message at or before T is gone: the oldest retained one follows.
	m.seekGroup(Seek{Group: "g", Queue: "q", Timestamp: m.now.Add(-time.Minute).UnixMicro()})
	if got := m.drainGroup("q", "p", "g"); !reflect.DeepEqual(got, []string{"new"}) {
		t.Fatalf("after retention: %v", got)
	}
}

func TestGroupsSeekPartition(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2")...)
	m.advance(time.Second)
	m.push(items("q", "p", "m3")...)
	last := m.now.UnixMicro()
	m.advance(time.Second)
	r := m.mustPop(Lease{Queue: "q", Group: "g", Batch: 1})
	res := m.seekPartition(SeekPartition{Group: "g", Queue: "q", Partition: "p"})
	if *res != (SeekPartitionResult{Found: true, MovedTo: last}) {
		t.Fatalf("seek %+v, want moved to %d", *res, last)
	}
	if g := m.group("q", "p", "g"); g.HasLease() || g.Next != m.partition("q", "p").NextOffset {
		t.Fatalf("state %+v", g)
	}
	if len(m.leaseHoldersOf(r.LeaseID)) != 0 {
		t.Fatal("lease index kept")
	}
	// A group without state on the partition gets state at its end.
	if res := m.seekPartition(SeekPartition{Group: "fresh", Queue: "q", Partition: "p"}); !res.Found {
		t.Fatalf("fresh group: %+v", res)
	}
	if m.queueGroup("q", "fresh") == nil {
		t.Fatal("fresh group unknown to the queue")
	}
	m.push(items("q", "p", "m4")...)
	for _, g := range []string{"g", "fresh"} {
		if got := m.drainGroup("q", "p", g); !reflect.DeepEqual(got, []string{"m4"}) {
			t.Errorf("%s after the seek: %v", g, got)
		}
	}
	for _, c := range []SeekPartition{{Group: "g", Queue: "q", Partition: "nope"}, {Group: "g", Queue: "nope", Partition: "p"}} {
		if res := m.seekPartition(c); *res != (SeekPartitionResult{}) {
			t.Errorf("%+v: %+v", c, res)
		}
	}
}

func TestGroupsValidate(t *testing.T) {
	m := newMachine(t)
	long := strings.Repeat("x", MaxNameBytes+1)
	for _, c := range []Command{
		&DeleteGroup{Group: "g", Queue: "q"}, // a queue without OneQueue
		&DeleteGroup{Group: long},
		&Seek{Group: "g", Queue: "q", ToEnd: true, Timestamp: 5},
		&Seek{Group: "g", Queue: long, ToEnd: true},
		&SeekPartition{Group: "g", Queue: "q", Partition: long},
		&RewriteSubscription{Group: long},
	} {
		if _, ok := m.apply(c)[0].(*ErrorResult); !ok {
			t.Errorf("%T %+v was applied", c, c)
		}
	}
}

func TestGroupsViews(t *testing.T) {
	m := newMachine(t)
	t0 := m.now
	m.push(item("orders", "a", "a1", "1"), item("orders", "a", "a2", "2"), item("orders", "b", "b1", "1"))
	m.push(item("stock", "s", "s1", "1"))
	m.advance(time.Second)
	// billing consumes a1 and leases b1; queue mode drains orders/a;
	// "idle" only subscribed to stock.
	r := m.mustPop(Lease{Scope: ScopeSpecific, Queue: "orders", Partition: "a", Group: "billing", Batch: 1})
	m.ack("billing", ackAll(r, AckCompleted)...)
	m.mustPop(Lease{Scope: ScopeSpecific, Queue: "orders", Partition: "b", Group: "billing", Batch: 1})
	m.drainGroup("orders", "a", QueueMode)
	m.pop(Lease{Queue: "stock", Group: "idle", SubMode: SubNew})
	m.advance(10 * time.Minute)
	now := m.now.UnixMicro()

	rows, err := m.f.ConsumerGroups(now)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.Group+"/"+r.Queue)
	}
	if strings.Join(got, " ") != "__QUEUE_MODE__/orders billing/orders idle/stock" {
		t.Fatalf("rows %v", got)
	}
	qm, billing, idle := rows[0], rows[1], rows[2]
	lag := int64((10*time.Minute + time.Second) / time.Second)
	if billing.Members != 2 || billing.PartitionsWithLag != 2 || billing.MaxTimeLag != lag ||
		billing.State != GroupLagging || billing.Subscription != nil {
		t.Errorf("billing %+v", billing)
	}
	if qm.Members != 1 || qm.PartitionsWithLag != 0 || qm.MaxTimeLag != 0 || qm.State != GroupStable {
		t.Errorf("queue mode %+v", qm)
	}
	if idle.Members != 0 || idle.State != GroupDead || idle.Subscription == nil || idle.Subscription.Mode != "new" ||
		idle.Subscription.Start != t0.Add(time.Second).UnixMicro() {
		t.Errorf("idle %+v %+v", idle, idle.Subscription)
	}

	detail, err := m.f.ConsumerGroup("billing", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(detail) != 1 || detail[0].Queue != "orders" || len(detail[0].Partitions) != 2 {
		t.Fatalf("detail %+v", detail)
	}
	a, b := detail[0].Partitions[0], detail[0].Partitions[1]
	if a.Partition != "a" || a.Consumed != 1 || a.OffsetLag != 1 || a.TimeLag != lag || a.LeaseActive ||
		a.LastConsumedAt != t0.Add(time.Second).UnixMicro() || a.OldestUnconsumed != t0.UnixMicro() {
		t.Errorf("partition a %+v", a)
	}
	// The lease (60 s) expired during the ten minutes.
	if b.Partition != "b" || b.Consumed != 0 || b.OffsetLag != 1 || b.LeaseActive || b.LastConsumedAt != 0 {
		t.Errorf("partition b %+v", b)
	}
	if d, err := m.f.ConsumerGroup("idle", now); err != nil || len(d) != 1 || d[0].Queue != "stock" || len(d[0].Partitions) != 0 {
		t.Errorf("idle detail %+v %v", d, err)
	}
	if d, err := m.f.ConsumerGroup("nobody", now); err != nil || d != nil {
		t.Errorf("unknown group %+v %v", d, err)
	}

	// A live lease shows; a fresher backlog lags less.
	m.push(item("orders", "c", "c1", "1"))
	m.advance(time.Minute)
	m.mustPop(Lease{Scope: ScopeSpecific, Queue: "orders", Partition: "c", Group: "billing", Batch: 1})
	now = m.now.UnixMicro()
	detail, _ = m.f.ConsumerGroup("billing", now)
	if c := detail[0].Partitions[2]; c.Partition != "c" || !c.LeaseActive || c.TimeLag != 60 {
		t.Errorf("partition c %+v", c)
	}
	lagging, err := m.f.LaggingPartitions(0, now)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, l := range lagging {
		got = append(got, l.Group+"/"+l.Queue+"/"+l.Partition)
	}
	if strings.Join(got, " ") != "billing/orders/a billing/orders/b billing/orders/c" {
		t.Fatalf("lagging %v", got)
	}
	if lagging[0].TimeLag != lag+60 || lagging[0].OffsetLag != 1 {
		t.Errorf("most lagging %+v", lagging[0])
	}
	if l, _ := m.f.LaggingPartitions(120, now); len(l) != 2 {
		t.Errorf("minLag 120 s: %d partitions, want 2", len(l))
	}
	if l, _ := m.f.LaggingPartitions(3600, now); len(l) != 0 {
		t.Errorf("minLag 1 h: %+v", l)
	}
}

// groupsCommand is a random group-administration command for the
// determinism log.
func (g *generator) groupsCommand() Command {
	group := genGroups[g.pick(len(genGroups))]
	q := genQueues[g.pick(len(genQueues))]
	switch g.pick(5) {
	case 0:
		c := &DeleteGroup{Group: group, DeleteMetadata: g.pick(2) == 0}
		if g.pick(2) == 0 {
			c.OneQueue, c.Queue = true, q
		}
		return c
	case 1:
		return &RewriteSubscription{Group: group, Start: g.m.now.Add(-time.Duration(g.pick(120)) * time.Second).UnixMicro()}
	case 2:
		return &SeekPartition{Group: group, Queue: q, Partition: genPartitions[g.pick(len(genPartitions))]}
	default:
		c := &Seek{Group: group, Queue: q, ToEnd: g.pick(2) == 0}
		if !c.ToEnd {
			c.Timestamp = g.m.now.Add(-time.Duration(g.pick(120)) * time.Second).UnixMicro()
		}
		return c
	}
}

// groupsSampleCommands holds one command of each group-administration type
// with every field set, for the codec round trip (a Seek with both ToEnd and
// a timestamp fails Validate, but the codec must carry both fields).
func groupsSampleCommands() map[Type]Command {
	return map[Type]Command{
		TypeDeleteGroup:         &DeleteGroup{Group: "billing", OneQueue: true, Queue: "orders.eu", DeleteMetadata: true},
		TypeRewriteSubscription: &RewriteSubscription{Group: "billing", Start: 1777593600000000},
		TypeSeek:                &Seek{Group: "billing", Queue: "orders.eu", ToEnd: true, Timestamp: 1778918400000000},
		TypeSeekPartition:       &SeekPartition{Group: "billing", Queue: "orders.eu", Partition: "p-1"},
	}
}
