package fsm

import (
	"slices"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

func TestPopDeliversPartitionInOrderAcrossBatches(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2")...)
	m.push(items("q", "p", "m3")...)
	m.push(items("q", "p", "m4", "m5")...)
	var got []string
	for i := 0; i < 3; i++ {
		lr := m.pop(Lease{Queue: "q", Batch: 2})
		got = append(got, txids(lr)...)
		ar := m.ack("", ackAll(lr, AckCompleted)...)
		if !ar.Items[len(ar.Items)-1].LeaseReleased {
			t.Fatalf("batch %d not released: %+v", i, ar.Items)
		}
	}
	if !slices.Equal(got, seq("m", 5)) {
		t.Fatalf("delivered %v", got)
	}
	if r := m.pop(Lease{Queue: "q", Batch: 2}); r.Count() != 0 {
		t.Fatalf("drained partition delivered %v", txids(r))
	}
	g := m.group("q", "p", QueueMode)
	if g.Consumed != 5 || g.Batches != 3 || g.HasLease() || g.LastConsumedAt != m.now.UnixMicro() {
		t.Fatalf("group %+v", g)
	}
}

func TestPopLeaseRecord(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", seq("m", 5)...)...)
	lr := m.pop(Lease{Queue: "q", Batch: 3})
	if lr.LeaseID == ([16]byte{}) || lr.Group != QueueMode || lr.Count() != 3 {
		t.Fatalf("pop %+v", lr)
	}
	g := m.group("q", "p", QueueMode)
	if g.LeaseID != lr.LeaseID || g.LeaseDelivered != 3 || g.LeaseLast != 3 || g.Next != 1 || g.Retry != 0 ||
		g.LeaseExpiry != m.now.Add(60*time.Second).UnixMicro() {
		t.Fatalf("group %+v", g)
	}
	m.view(func(tx *segments.Tx) error {
		pids, groups := tx.LeaseHolders(lr.LeaseID)
		if len(pids) != 1 || groups[0] != QueueMode {
			t.Fatalf("lease index %v %v", pids, groups)
		}
		return nil
	})
}

func TestPopLeasedPartitionNotRedeliveredToSameGroup(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3")...)
	first := m.pop(Lease{Queue: "q", Batch: 2})
	if got := txids(first); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("first pop %v", got)
	}
	if r := m.pop(Lease{Queue: "q", Batch: 10}); r.Count() != 0 {
		t.Fatalf("rest of a leased partition delivered: %v", txids(r))
	}
	m.push(items("q", "p", "m4")...)
	m.advance(59 * time.Second)
	if r := m.pop(Lease{Queue: "q", Batch: 10}); r.Count() != 0 {
		t.Fatalf("new message of a leased partition delivered: %v", txids(r))
	}
	m.advance(time.Second) // exactly at expiry: the lease is over
	again := m.pop(Lease{Queue: "q", Batch: 10})
	if got := txids(again); !slices.Equal(got, []string{"m1", "m2", "m3", "m4"}) {
		t.Fatalf("after expiry %v", got)
	}
	if again.LeaseID == first.LeaseID {
		t.Fatal("redelivery reuses the expired lease id")
	}
	for _, msg := range again.Partitions[0].Messages {
		if msg.RetryCount != 0 {
			t.Fatalf("lease expiry charged the retry counter: %+v", msg)
		}
	}
	if g := m.group("q", "p", QueueMode); g.Retry != 0 || g.LeaseID != again.LeaseID || g.Next != 1 {
		t.Fatalf("group %+v", g)
	}
	// The old lease is remembered as expired, for extensions only: an
	// extension says so and moves nothing.
	if er := m.extend(first.LeaseID, 60); er.Success || er.Error != ErrLeaseExpired {
		t.Fatalf("extension of the superseded lease: %+v", er)
	}
	if g := m.group("q", "p", QueueMode); g.LeaseID != again.LeaseID {
		t.Fatalf("group after extending the superseded lease: %+v", g)
	}
}

func TestPopExpiryRepeatedNeverCharges(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1")...)
	for i := 0; i < 5; i++ {
		lr := m.pop(Lease{Queue: "q", Batch: 1, LeaseSeconds: 1})
		if lr.Count() != 1 || lr.Partitions[0].Messages[0].RetryCount != 0 {
			t.Fatalf("delivery %d: %+v", i, lr)
		}
		m.advance(2 * time.Second)
	}
	if dl := m.deadLetters("q"); len(dl) != 0 {
		t.Fatalf("lease expiry dead-lettered: %+v", dl)
	}
}

func TestPopFanOutAcrossGroups(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2")...)
	a := m.pop(Lease{Queue: "q", Group: "A", Batch: 10})
	b := m.pop(Lease{Queue: "q", Group: "B", Batch: 10})
	qm := m.pop(Lease{Queue: "q", Batch: 10})
	for name, r := range map[string]*LeaseResult{"A": a, "B": b, "queue mode": qm} {
		if got := txids(r); !slices.Equal(got, []string{"m1", "m2"}) {
			t.Fatalf("%s got %v", name, got)
		}
	}
	if a.LeaseID == b.LeaseID || a.Group != "A" || b.Group != "B" {
		t.Fatalf("leases %x %x", a.LeaseID, b.LeaseID)
	}
	// A consumes; B's lease and position are untouched.
	m.ack("A", ackAll(a, AckCompleted)...)
	if ga, gb := m.group("q", "p", "A"), m.group("q", "p", "B"); ga.Next != 3 || ga.HasLease() || gb.Next != 1 || gb.LeaseID != b.LeaseID {
		t.Fatalf("A %+v B %+v", ga, gb)
	}
	m.push(items("q", "p", "m3")...)
	if got := txids(m.pop(Lease{Queue: "q", Group: "A", Batch: 10})); !slices.Equal(got, []string{"m3"}) {
		t.Fatalf("A next %v", got)
	}
	if r := m.pop(Lease{Queue: "q", Group: "B", Batch: 10}); r.Count() != 0 {
		t.Fatalf("B still leased, got %v", txids(r))
	}
}

func TestPopBatchAndMaxPartitions(t *testing.T) {
	m := newMachine(t)
	for _, p := range []string{"a", "b", "c"} {
		m.push(items("q", p, p+"1", p+"2", p+"3")...)
	}
	r := m.pop(Lease{Queue: "q", Batch: 4, MaxPartitions: 3})
	if got := delivered(r); !slices.Equal(got, []string{"a/a1", "a/a2", "a/a3", "b/b1"}) {
		t.Fatalf("batch 4 over 3 partitions: %v", got)
	}
	if len(r.Partitions) != 2 || r.Partitions[0].Delivered != 3 || r.Partitions[1].Delivered != 1 {
		t.Fatalf("partitions %+v", r.Partitions)
	}
	ga, gb := m.group("q", "a", QueueMode), m.group("q", "b", QueueMode)
	if ga.LeaseID != r.LeaseID || gb.LeaseID != r.LeaseID || ga.LeaseDelivered != 3 || gb.LeaseDelivered != 1 || gb.LeaseLast != 1 {
		t.Fatalf("one lease id for every claimed partition: a %+v b %+v", ga, gb)
	}
	// Only c is eligible now; MaxPartitions 1 (and 0, which means 1).
	r2 := m.pop(Lease{Queue: "q", Batch: 10, MaxPartitions: 0})
	if got := delivered(r2); !slices.Equal(got, []string{"c/c1", "c/c2", "c/c3"}) {
		t.Fatalf("second pop %v", got)
	}
}

func TestPopMaxPartitionsStopsBeforeBatch(t *testing.T) {
	m := newMachine(t)
	for _, p := range []string{"a", "b", "c"} {
		m.push(items("q", p, p+"1")...)
	}
	r := m.pop(Lease{Queue: "q", Batch: 100, MaxPartitions: 2})
	if got := delivered(r); !slices.Equal(got, []string{"a/a1", "b/b1"}) {
		t.Fatalf("got %v", got)
	}
}

func TestPopBatchZeroMeansOne(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2")...)
	if got := txids(m.pop(Lease{Queue: "q", Batch: 0})); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("got %v", got)
	}
}

func TestPopSkipsPartitionsWithNothingDeliverable(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "a", "a1")...)
	m.push(items("q", "b", "b1")...)
	r := m.pop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "a", Batch: 1, AutoAck: true})
	if got := delivered(r); !slices.Equal(got, []string{"a/a1"}) {
		t.Fatalf("got %v", got)
	}
	// The wildcard scan meets a first: it is drained, so it is not claimed
	// and does not use up MaxPartitions.
	r = m.pop(Lease{Queue: "q", Batch: 10, MaxPartitions: 1})
	if got := delivered(r); !slices.Equal(got, []string{"b/b1"}) {
		t.Fatalf("got %v", got)
	}
	if len(r.Partitions) != 1 {
		t.Fatalf("empty partition claimed: %+v", r.Partitions)
	}
}

func TestPopSpecificPartition(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "a", "a1", "a2")...)
	m.push(items("q", "b", "b1", "b2")...)
	r := m.pop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "b", Batch: 10, MaxPartitions: 5})
	if got := delivered(r); !slices.Equal(got, []string{"b/b1", "b/b2"}) {
		t.Fatalf("got %v", got)
	}
	if r := m.pop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "b", Batch: 10}); r.Count() != 0 {
		t.Fatalf("leased partition delivered %v", delivered(r))
	}
	if r := m.pop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "nope", Batch: 10}); r.Count() != 0 || m.partition("q", "nope") != nil {
		t.Fatalf("unknown partition: %+v", r)
	}
	if got := delivered(m.pop(Lease{Queue: "q", Batch: 10})); !slices.Equal(got, []string{"a/a1", "a/a2"}) {
		t.Fatalf("wildcard after specific: %v", got)
	}
}

func TestPopUnknownQueue(t *testing.T) {
	m := newMachine(t)
	r := m.pop(Lease{Queue: "nope", Batch: 10})
	if r.Count() != 0 || r.LeaseID != ([16]byte{}) || len(r.Partitions) != 0 {
		t.Fatalf("pop %+v", r)
	}
	if m.queue("nope") != nil {
		t.Fatal("pop created a queue")
	}
}

func TestPopDiscovery(t *testing.T) {
	m := newMachine(t)
	m.push(items("orders.shipped", "p", "os")...)
	m.push(items("orders.billing", "p", "ob")...)
	m.push(items("stock.shipped", "p", "ss")...)
	m.push(items("orders", "p", "o")...)
	cases := []struct {
		ns, task string
		want     []string
	}{
		{"orders", "", []string{"o", "ob", "os"}},
		{"", "shipped", []string{"os", "ss"}},
		{"orders", "shipped", []string{"os"}},
		{"stock", "billing", nil},
		{"order", "", nil}, // exact equality, not prefix
	}
	for i, c := range cases {
		group := string(rune('A' + i))
		r := m.pop(Lease{Scope: ScopeDiscovery, Namespace: c.ns, Task: c.task, Group: group, Batch: 10, MaxPartitions: 10})
		got := txids(r)
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("discovery %q/%q: %v, want %v", c.ns, c.task, got, c.want)
		}
		for _, p := range r.Partitions {
			if g := m.group(p.Queue, p.Partition, group); g == nil || g.LeaseID != r.LeaseID {
				t.Errorf("discovery lease on %s: %+v", p.Queue, g)
			}
		}
	}
}

func TestPopDiscoveryRespectsMaxPartitionsAcrossQueues(t *testing.T) {
	m := newMachine(t)
	m.push(items("n.a", "p", "a")...)
	m.push(items("n.b", "p", "b")...)
	m.push(items("n.c", "p", "c")...)
	r := m.pop(Lease{Scope: ScopeDiscovery, Namespace: "n", Batch: 10, MaxPartitions: 2})
	if len(r.Partitions) != 2 || r.Count() != 2 {
		t.Fatalf("got %v", delivered(r))
	}
	r2 := m.pop(Lease{Scope: ScopeDiscovery, Namespace: "n", Batch: 10, MaxPartitions: 2})
	if r2.Count() != 1 {
		t.Fatalf("second discovery pop %v", delivered(r2))
	}
}

func TestPopAutoAck(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "m1", "m2", "m3")...)
	r := m.pop(Lease{Queue: "q", Batch: 2, AutoAck: true})
	if got := txids(r); !slices.Equal(got, []string{"m1", "m2"}) || r.LeaseID != ([16]byte{}) {
		t.Fatalf("autoAck pop %v lease %x", got, r.LeaseID)
	}
	g := m.group("q", "p", QueueMode)
	if g.HasLease() || g.Next != 3 || g.Consumed != 2 || g.Batches != 1 || g.LastConsumedAt != m.now.UnixMicro() {
		t.Fatalf("group %+v", g)
	}
	// The partition is not leased: the rest is delivered at once.
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10, AutoAck: true})); !slices.Equal(got, []string{"m3"}) {
		t.Fatalf("next autoAck pop %v", got)
	}
	m.advance(time.Hour)
	if r := m.pop(Lease{Queue: "q", Batch: 10}); r.Count() != 0 {
		t.Fatalf("auto-acked messages redelivered: %v", txids(r))
	}
	// An ack for an auto-acknowledged message succeeds and changes nothing.
	ar := m.ack("", ackTx(m.partition("q", "p").UUID, "m1", [16]byte{}, AckCompleted))
	if !ar.Items[0].Success || ar.Items[0].LeaseReleased {
		t.Fatalf("ack %+v", ar.Items[0])
	}
	if g2 := m.group("q", "p", QueueMode); g2.Next != 4 || g2.Consumed != 3 || g2.Batches != 2 {
		t.Fatalf("group %+v", g2)
	}
}

func TestPopLeaseSeconds(t *testing.T) {
	cases := []struct {
		name      string
		configure *segments.Options
		request   int64
		want      time.Duration
	}{
		{"request wins", &segments.Options{LeaseTime: 300}, 30, 30 * time.Second},
		{"queue leaseTime", &segments.Options{LeaseTime: 120}, 0, 120 * time.Second},
		{"negative request ignored", &segments.Options{LeaseTime: 120}, -5, 120 * time.Second},
		{"configure default 300", nil, 0, 300 * time.Second},
		{"push-created 60", &segments.Options{LeaseTime: -1}, 0, 60 * time.Second},
		{"fallback 60", &segments.Options{LeaseTime: 0}, 0, 60 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newMachine(t)
			switch {
			case c.configure == nil:
				m.configure(Configure{Queue: "q", Options: DefaultOptions(segments.OriginConfigure)})
			case c.configure.LeaseTime >= 0:
				o := DefaultOptions(segments.OriginConfigure)
				o.LeaseTime = c.configure.LeaseTime
				m.configure(Configure{Queue: "q", Options: o})
			}
			m.push(items("q", "p", "m1")...)
			r := m.pop(Lease{Queue: "q", Batch: 1, LeaseSeconds: c.request})
			if r.Count() != 1 {
				t.Fatal("nothing delivered")
			}
			if g := m.group("q", "p", QueueMode); g.LeaseExpiry != m.now.Add(c.want).UnixMicro() {
				t.Fatalf("expiry %d, want now+%v", g.LeaseExpiry-m.now.UnixMicro(), c.want)
			}
		})
	}
}

func TestPopLeaseTimeChangeAffectsNewPopsOnly(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "a", "a1")...)
	m.push(items("q", "b", "b1")...)
	m.pop(Lease{Queue: "q", Batch: 1})
	expiry := m.group("q", "a", QueueMode).LeaseExpiry
	o := DefaultOptions(segments.OriginConfigure)
	o.LeaseTime = 10
	m.configure(Configure{Queue: "q", Options: o})
	if g := m.group("q", "a", QueueMode); g.LeaseExpiry != expiry {
		t.Fatal("reconfigure changed an issued lease")
	}
	m.pop(Lease{Queue: "q", Batch: 1})
	if g := m.group("q", "b", QueueMode); g.LeaseExpiry != m.now.Add(10*time.Second).UnixMicro() {
		t.Fatalf("new pop expiry %d", g.LeaseExpiry)
	}
}

func TestPopRoundRobinServesPartitionsInTurn(t *testing.T) {
	m := newMachine(t)
	for _, p := range []string{"a", "b", "c"} {
		m.push(items("q", p, p+"1", p+"2", p+"3")...)
	}
	var got []string
	for i := 0; i < 7; i++ {
		r := m.pop(Lease{Queue: "q", Batch: 1, AutoAck: true})
		got = append(got, delivered(r)...)
	}
	want := []string{"a/a1", "b/b1", "c/c1", "a/a2", "b/b2", "c/c2", "a/a3"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	// Groups keep separate round-robin pointers.
	if got := delivered(m.pop(Lease{Queue: "q", Group: "other", Batch: 1, AutoAck: true})); !slices.Equal(got, []string{"a/a1"}) {
		t.Fatalf("other group %v", got)
	}
}

func TestPopRoundRobinWithLeasesAndAcks(t *testing.T) {
	m := newMachine(t)
	for _, p := range []string{"a", "b"} {
		m.push(items("q", p, p+"1", p+"2")...)
	}
	var got []string
	for i := 0; i < 4; i++ {
		r := m.pop(Lease{Queue: "q", Batch: 1})
		got = append(got, delivered(r)...)
		m.ack("", ackAll(r, AckCompleted)...)
	}
	if want := []string{"a/a1", "b/b1", "a/a2", "b/b2"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestPopRoundRobinIncludesEmptyPartitionName(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "", "e1", "e2")...)
	m.push(items("q", "x", "x1", "x2")...)
	var got []string
	for i := 0; i < 4; i++ {
		got = append(got, delivered(m.pop(Lease{Queue: "q", Batch: 1, AutoAck: true}))...)
	}
	if want := []string{"/e1", "x/x1", "/e2", "x/x2"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}
