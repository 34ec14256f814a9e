package fsm

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// Tests of the browsing, resource and status views (views_messages.go,
// views_resources.go, views_status.go).

// list runs ListMessages over the last hour up to the end of the machine's
// current minute, with the query's other fields.
func (m *machine) list(q MessageQuery) *MessageList {
	m.t.Helper()
	if q.From == 0 && q.Before == 0 {
		q.From = m.now.Add(-time.Hour).UnixMicro()
		q.Before = m.now.Truncate(time.Minute).Add(time.Minute).UnixMicro()
	}
	if q.Limit == 0 {
		q.Limit = 200
	}
	l, err := m.f.ListMessages(q, m.now.UnixMicro())
	if err != nil {
		m.t.Fatal(err)
	}
	return l
}

// listed renders a page as "txid:status" in order.
func listed(l *MessageList) string {
	var out []string
	for _, s := range l.Messages {
		out = append(out, s.TxID+":"+s.Status)
	}
	return strings.Join(out, " ")
}

func listedTx(l *MessageList) string {
	var out []string
	for _, s := range l.Messages {
		out = append(out, s.TxID)
	}
	return strings.Join(out, " ")
}

func wantListed(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s:\n got  %q\n want %q", what, got, want)
	}
}

func TestBrowseQueueModeStatuses(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", seq("t", 5)...)...)
	m.advance(time.Second)
	lr := m.mustPop(Lease{Queue: "q", Batch: 2})
	lp := lr.Partitions[0]
	m.ack("", ackOf(lp, lp.Messages[0], lr.LeaseID, AckCompleted))

	l := m.list(MessageQuery{Queue: "q"})
	wantListed(t, "all", listed(l), "t5:pending t4:pending t3:pending t2:processing t1:completed")
	if l.Mode != (BrowseMode{HasQueueMode: true}) || l.Mode.Type() != "queue" {
		t.Errorf("mode %+v %s", l.Mode, l.Mode.Type())
	}
	proc := l.Messages[3]
	wantExpiry := m.now.Add(60 * time.Second).UnixMicro() // popped at the current time
	if proc.LeaseExpiresAt != wantExpiry || proc.QueueStatus != StatusProcessing || proc.Queue != "q" ||
		proc.Partition != "p" || proc.Namespace != "q" || proc.Task != "" || proc.PartUUID != lp.PartitionID {
		t.Errorf("processing message %+v (want expiry %d)", proc, wantExpiry)
	}
	if l.Messages[0].LeaseExpiresAt != 0 || l.Messages[4].LeaseExpiresAt != 0 {
		t.Errorf("lease expiry on a message the lease does not hold: %+v", l.Messages)
	}
	if lr.Partitions[0].Messages[1].ID != proc.ID {
		t.Errorf("id %x, want the delivered id %x", proc.ID, lr.Partitions[0].Messages[1].ID)
	}
	for status, want := range map[string]string{StatusCompleted: "t1", StatusProcessing: "t2",
		StatusPending: "t5 t4 t3", StatusDeadLetter: ""} {
		wantListed(t, "status "+status, listedTx(m.list(MessageQuery{Queue: "q", Status: status})), want)
	}

	// The lease expires: its message is pending again.
	m.advance(2 * time.Minute)
	wantListed(t, "after expiry", listed(m.list(MessageQuery{Queue: "q"})),
		"t5:pending t4:pending t3:pending t2:pending t1:completed")
	wantListed(t, "processing after expiry", listedTx(m.list(MessageQuery{Queue: "q", Status: StatusProcessing})), "")
	wantListed(t, "pending after expiry", listedTx(m.list(MessageQuery{Queue: "q", Status: StatusPending})), "t5 t4 t3 t2")
}

func TestBrowseNamedGroupsAndHybrid(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "a", "b", "c")...)
	// Group A consumes everything, group B the first message only.
	ra := m.mustPop(Lease{Queue: "q", Batch: 10, Group: "A"})
	m.ack("A", ackAll(ra, AckCompleted)...)
	rb := m.mustPop(Lease{Queue: "q", Batch: 1, Group: "B"})
	m.ack("B", ackAll(rb, AckCompleted)...)

	l := m.list(MessageQuery{Queue: "q"})
	wantListed(t, "bus", listed(l), "c:pending b:pending a:completed")
	if l.Mode != (BrowseMode{BusGroups: 2}) || l.Mode.Type() != "bus" {
		t.Errorf("mode %+v %s", l.Mode, l.Mode.Type())
	}
	if s := l.Messages[1]; s.ConsumedBy != 1 || s.TotalGroups != 2 || s.QueueStatus != StatusPending {
		t.Errorf("b: %+v", s)
	}
	if s := l.Messages[2]; s.ConsumedBy != 2 || s.TotalGroups != 2 {
		t.Errorf("a: %+v", s)
	}
	wantListed(t, "completed (bus)", listedTx(m.list(MessageQuery{Queue: "q", Status: StatusCompleted})), "a")
	wantListed(t, "pending (bus)", listedTx(m.list(MessageQuery{Queue: "q", Status: StatusPending})), "c b")

	// Once queue mode reads the partition, its cursor decides.
	m.mustPop(Lease{Queue: "q", Batch: 1})
	l = m.list(MessageQuery{Queue: "q"})
	wantListed(t, "hybrid", listed(l), "c:pending b:pending a:processing")
	if l.Mode != (BrowseMode{HasQueueMode: true, BusGroups: 2}) || l.Mode.Type() != "hybrid" {
		t.Errorf("mode %+v %s", l.Mode, l.Mode.Type())
	}
	if got := (BrowseMode{}).Type(); got != "none" {
		t.Errorf("empty mode type %q", got)
	}
}

func TestBrowseDeadLetterStatus(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 0 })
	m.push(items("q", "p", "ok", "poison", "later")...)
	m.advance(time.Second)
	r := m.mustPop(Lease{Queue: "q", Batch: 2, Group: "billing"})
	lp := r.Partitions[0]
	m.ack("billing", ackOf(lp, lp.Messages[0], r.LeaseID, AckCompleted))
	it := ackOf(lp, lp.Messages[1], r.LeaseID, AckFailed)
	it.Error = "schema mismatch"
	if ar := m.ack("billing", it); !ar.Items[0].DLQ {
		t.Fatalf("not dead-lettered: %+v", ar.Items[0])
	}

	l := m.list(MessageQuery{Queue: "q"})
	wantListed(t, "all", listed(l), "later:pending poison:dead_letter ok:completed")
	if l.Messages[1].QueueStatus != StatusPending {
		t.Errorf("queue status of a message dead-lettered for a named group: %q", l.Messages[1].QueueStatus)
	}
	wantListed(t, "dead_letter", listed(m.list(MessageQuery{Queue: "q", Status: StatusDeadLetter})), "poison:dead_letter")
	wantListed(t, "completed", listedTx(m.list(MessageQuery{Queue: "q", Status: StatusCompleted})), "ok")
	wantListed(t, "pending", listedTx(m.list(MessageQuery{Queue: "q", Status: StatusPending})), "later")
	// Dead-lettered before the window: not loaded, and not in it anyway.
	old := m.list(MessageQuery{Queue: "q", Status: StatusDeadLetter, From: m.now.Add(time.Hour).UnixMicro(),
		Before: m.now.Add(2 * time.Hour).UnixMicro()})
	wantListed(t, "dead_letter outside the window", listedTx(old), "")

	d, err := m.f.Message(lp.PartitionID, "poison", m.now.UnixMicro())
	if err != nil || d == nil {
		t.Fatalf("message: %v %v", d, err)
	}
	if d.Status != StatusDeadLetter || !d.HasDeadLetter || d.Error != "schema mismatch" || d.RetryCount != 0 ||
		string(d.Payload) != `"poison"` || d.Options.RetryLimit != 0 {
		t.Errorf("detail %+v", d)
	}
	if len(d.Groups) != 1 || d.Groups[0] != (GroupOnMessage{Name: "billing", Consumed: true}) {
		t.Errorf("groups %+v", d.Groups)
	}
	if d.Mode != (BrowseMode{BusGroups: 1, ConsumedBy: 1}) {
		t.Errorf("mode %+v", d.Mode)
	}
}

func TestBrowseNewestFirstAndPagination(t *testing.T) {
	m := newMachine(t)
	var want []string
	for i := range 6 {
		// One push over three partitions: the same commit time, so the
		// order within it is the id order, across partitions.
		m.push(item("q", "a", fmt.Sprintf("a%d", i), "1"), item("q", "b", fmt.Sprintf("b%d", i), "1"),
			item("q", "c", fmt.Sprintf("c%d", i), "1"))
		want = append([]string{fmt.Sprintf("a%d b%d c%d", i, i, i)}, want...)
		m.advance(time.Second)
	}
	// Reverse each push's group: newest first is c, b, a within a push.
	var all []string
	for _, g := range want {
		f := strings.Fields(g)
		all = append(all, f[2], f[1], f[0])
	}
	l := m.list(MessageQuery{Queue: "q"})
	wantListed(t, "newest first", listedTx(l), strings.Join(all, " "))
	for i := 1; i < len(l.Messages); i++ {
		a, b := l.Messages[i-1], l.Messages[i]
		if a.CreatedAt < b.CreatedAt || (a.CreatedAt == b.CreatedAt && string(a.ID[:]) <= string(b.ID[:])) {
			t.Fatalf("not newest first at %d: %+v then %+v", i, a, b)
		}
	}
	var paged []string
	for off := 0; off < len(all)+4; off += 4 {
		paged = append(paged, strings.Fields(listedTx(m.list(MessageQuery{Queue: "q", Offset: off, Limit: 4})))...)
	}
	wantListed(t, "pages", strings.Join(paged, " "), strings.Join(all, " "))
	wantListed(t, "one partition", listedTx(m.list(MessageQuery{Queue: "q", Partition: "b", Offset: 1, Limit: 2})), "b4 b3")
	wantListed(t, "past the end", listedTx(m.list(MessageQuery{Queue: "q", Offset: 100})), "")
	// Caps: an oversized limit is clamped.
	if n := len(m.list(MessageQuery{Queue: "q", Limit: 1 << 30}).Messages); n != len(all) {
		t.Errorf("clamped limit listed %d, want %d", n, len(all))
	}
}

func TestBrowseTimeFilters(t *testing.T) {
	m := newMachine(t)
	t0 := m.now
	// 40 commits, one a minute, to one partition: many segments, some in
	// the partition record and some in the bucket.
	for i := range 40 {
		m.push(item("q", "p", fmt.Sprintf("m%02d", i), "1"))
		m.push(item("other", "p", fmt.Sprintf("o%02d", i), "1"))
		m.advance(time.Minute)
	}
	window := func(from, before time.Duration) string {
		return listedTx(m.list(MessageQuery{Queue: "q", From: t0.Add(from).UnixMicro(), Before: t0.Add(before).UnixMicro()}))
	}
	wantListed(t, "minutes 10..12", window(10*time.Minute, 13*time.Minute), "m12 m11 m10")
	wantListed(t, "before the first", window(-time.Hour, 0), "")
	wantListed(t, "exactly the first", window(0, time.Microsecond), "m00")
	wantListed(t, "after the last", window(40*time.Minute, 2*time.Hour), "")
	if got := window(30*time.Minute, time.Hour); got != "m39 m38 m37 m36 m35 m34 m33 m32 m31 m30" {
		t.Errorf("last ten: %q", got)
	}
	// A status filter and a window together: queue mode consumed m00..m19.
	for range 20 {
		r := m.mustPop(Lease{Queue: "q", Batch: 1})
		m.ack("", ackAll(r, AckCompleted)...)
	}
	q := MessageQuery{Queue: "q", Status: StatusCompleted, From: t0.Add(15 * time.Minute).UnixMicro(),
		Before: t0.Add(25 * time.Minute).UnixMicro()}
	wantListed(t, "completed in window", listedTx(m.list(q)), "m19 m18 m17 m16 m15")
	q.Status = StatusPending
	wantListed(t, "pending in window", listedTx(m.list(q)), "m24 m23 m22 m21 m20")
	// Tag filters select queues.
	q = MessageQuery{Namespace: "other", From: t0.Add(39 * time.Minute).UnixMicro(), Before: math.MaxInt64}
	wantListed(t, "namespace", listedTx(m.list(q)), "o39")
	q.Namespace = "nothing"
	wantListed(t, "unknown namespace", listedTx(m.list(q)), "")
}

func TestBrowseMessageDetail(t *testing.T) {
	m := newMachine(t)
	pr := m.push(item("orders.eu", "p", "t1", `{"n":1}`), item("orders.eu", "p", "t2", `2`))
	m.pop(Lease{Queue: "orders.eu", Batch: 1, Group: "g"})
	r := m.mustPop(Lease{Queue: "orders.eu", Batch: 1})
	pid := r.Partitions[0].PartitionID
	d, err := m.f.Message(pid, "t1", m.now.UnixMicro())
	if err != nil || d == nil {
		t.Fatalf("message: %v %v", d, err)
	}
	if d.ID != pr.Items[0].MessageID || d.Status != StatusProcessing || d.Namespace != "orders" || d.Task != "eu" ||
		string(d.Payload) != `{"n":1}` || d.HasDeadLetter || d.LeaseExpiresAt != m.now.Add(60*time.Second).UnixMicro() {
		t.Errorf("detail %+v", d)
	}
	exp := m.now.Add(60 * time.Second).UnixMicro()
	want := []GroupOnMessage{{Name: QueueMode, LeaseExpiresAt: exp}, {Name: "g", LeaseExpiresAt: exp}}
	if fmt.Sprint(d.Groups) != fmt.Sprint(want) {
		t.Errorf("groups %+v, want %+v", d.Groups, want)
	}
	if d.Mode != (BrowseMode{HasQueueMode: true, BusGroups: 1}) {
		t.Errorf("mode %+v", d.Mode)
	}
	for _, c := range []struct {
		pid [16]byte
		tx  string
	}{{pid, "nope"}, {[16]byte{1}, "t1"}} {
		if d, err := m.f.Message(c.pid, c.tx, m.now.UnixMicro()); err != nil || d != nil {
			t.Errorf("unknown message %x/%s: %+v %v", c.pid, c.tx, d, err)
		}
	}
}

func TestBrowseQueueMessages(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 0 })
	m.push(items("q", "p1", "a", "b")...)
	m.advance(time.Second)
	m.push(items("q", "p2", "c")...)
	r := m.mustPop(Lease{Queue: "q", Partition: "p1", Scope: ScopeSpecific, Batch: 1, Group: "g"})
	m.ack("g", ackTx(r.Partitions[0].PartitionID, "a", r.LeaseID, AckFailed)) // dead-lettered for g
	r = m.mustPop(Lease{Queue: "q", Partition: "p1", Scope: ScopeSpecific, Batch: 1})
	m.ack("", ackAll(r, AckCompleted)...)
	out, ok, err := m.f.QueueMessages("q", 50, 0, m.now.UnixMicro())
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	var got []string
	for _, s := range out {
		got = append(got, s.Partition+"/"+s.TxID+":"+s.Status)
	}
	// Queue-mode cursor only: a's dead letter (for g) does not show.
	wantListed(t, "queue messages", strings.Join(got, " "), "p2/c:pending p1/b:pending p1/a:completed")
	if out, _, _ := m.f.QueueMessages("q", 1, 1, m.now.UnixMicro()); len(out) != 1 || out[0].TxID != "b" {
		t.Errorf("page 2 of 1: %+v", out)
	}
	if _, ok, err := m.f.QueueMessages("nope", 50, 0, m.now.UnixMicro()); ok || err != nil {
		t.Errorf("unknown queue: %v %v", ok, err)
	}
}

func TestBrowseTagsAndOverview(t *testing.T) {
	m := newMachine(t)
	m.push(items("orders.shipped", "p1", "a", "b")...)
	m.push(items("orders.shipped", "p2", "c")...)
	m.push(items("orders", "p", "d")...)
	m.push(items("billing.shipped", "p", "e", "f", "g")...)
	m.advance(10 * time.Second)
	// Queue mode reads orders.shipped/p1: a completed, b processing.
	r := m.mustPop(Lease{Queue: "orders.shipped", Partition: "p1", Scope: ScopeSpecific, Batch: 2})
	lp := r.Partitions[0]
	m.ack("", ackOf(lp, lp.Messages[0], r.LeaseID, AckCompleted))
	it := ackOf(lp, lp.Messages[1], r.LeaseID, AckFailed)
	m.ack("", it)
	m.advance(5 * time.Second)

	ns, ts, err := m.f.Tags(m.now.UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%+v | %+v", ns, ts)
	want := "[{Name:billing Queues:1 Partitions:1 Stats:{Total:3 Pending:3 Processing:0 Completed:0 DeadLetter:0}} " +
		"{Name:orders Queues:2 Partitions:3 Stats:{Total:4 Pending:3 Processing:0 Completed:1 DeadLetter:0}}] | " +
		"[{Name:shipped Queues:2 Partitions:3 Stats:{Total:6 Pending:5 Processing:0 Completed:1 DeadLetter:0}}]"
	if got != want {
		t.Errorf("tags\n got  %s\n want %s", got, want)
	}

	o, err := m.f.Overview(m.now.UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
	if o.Queues != 3 || o.Partitions != 4 || o.Namespaces != 2 || o.Tasks != 1 ||
		o.Stats != (MessageStats{Total: 7, Pending: 6, Completed: 1}) || o.Counters.AckFailed != 1 {
		t.Errorf("overview %+v", o)
	}
	// Only p1 has a reader: one unconsumed message (b), pushed 15 s ago.
	if o.OffsetLag != (LagStats{Avg: 1, Median: 1, Min: 1, Max: 1}) || o.TimeLag != (LagStats{Avg: 15, Median: 15, Min: 15, Max: 15}) {
		t.Errorf("lag offset %+v time %+v", o.OffsetLag, o.TimeLag)
	}
	// 7 messages committed 15 s ago, within the 60 s window.
	if o.IngestedPerSecond != 7.0/ThroughputWindow {
		t.Errorf("ingested/s %v", o.IngestedPerSecond)
	}
	m.advance(time.Minute)
	if o, _ := m.f.Overview(m.now.UnixMicro()); o.IngestedPerSecond != 0 {
		t.Errorf("ingested/s a minute later %v", o.IngestedPerSecond)
	}
	if got := lagStats([]int64{9, 1, 4, 2}); got != (LagStats{Avg: 4, Median: 2, Min: 1, Max: 9}) {
		t.Errorf("lagStats %+v", got)
	}
}

func TestBrowseStatusAndAnalytics(t *testing.T) {
	m := newMachine(t) // 08:00:00
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 0 })
	m.push(items("q", "p", "a", "b")...)
	m.advance(90 * time.Second) // 08:01:30
	m.push(items("q", "p", "c")...)
	m.push(items("x", "p", "z")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 2, Group: "g"})
	lp := r.Partitions[0]
	it := ackOf(lp, lp.Messages[0], r.LeaseID, AckFailed)
	it.Error = "boom"
	m.ack("g", it)
	m.mustPop(Lease{Queue: "q", Batch: 10})
	m.advance(30 * time.Second) // 08:02:00

	b, ok := NewBuckets(m.now.Add(-5*time.Minute).UnixMicro(), m.now.UnixMicro(), time.Minute.Microseconds())
	if !ok || b.Count != 6 || b.Start != time.Date(2026, 5, 16, 7, 57, 0, 0, time.UTC).UnixMicro() {
		t.Fatalf("buckets %+v", b)
	}
	st, err := m.f.Status(Scope{Queue: "q"}, b, m.now.UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
	var pts []string
	for _, p := range st.Points {
		pts = append(pts, fmt.Sprintf("%s:%d/%d", time.UnixMicro(p.Start).UTC().Format("15:04"), p.Ingested, p.DLQ))
	}
	wantListed(t, "points", strings.Join(pts, " "), "08:02:0/0 08:01:1/1 08:00:2/0 07:59:0/0 07:58:0/0 07:57:0/0")
	if len(st.Queues) != 1 || st.Queues[0].Queue.Name != "q" || st.Queues[0].Partitions != 1 || st.Queues[0].TotalConsumed != 1 {
		t.Errorf("queues %+v", st.Queues)
	}
	if st.Stats != (MessageStats{Total: 3, Processing: 3, DeadLetter: 1}) {
		t.Errorf("stats %+v", st.Stats)
	}
	// g's lease delivered 2 and dead-lettering the first moved its cursor
	// past it (one acked); queue mode's lease holds all 3.
	if st.Leases != (LeaseSummary{Active: 2, PartitionsWithLeases: 1, TotalBatchSize: 5, TotalAcked: 1}) {
		t.Errorf("leases %+v", st.Leases)
	}
	if st.DLQ.Total != 1 || st.DLQ.AffectedPartitions != 1 || fmt.Sprint(st.DLQ.TopErrors) != "[{boom 1}]" {
		t.Errorf("dlq %+v", st.DLQ)
	}
	if c := st.Counters; c.PushRequests != 3 || c.PushMessages != 4 || c.AckFailed != 1 || c.PopRequests != 2 {
		t.Errorf("counters %+v", c)
	}

	counts, err := m.f.CreatedPerBucket(Scope{}, b)
	if err != nil || fmt.Sprint(counts) != "[0 0 0 2 2 0]" {
		t.Errorf("created per bucket %v %v", counts, err)
	}
	counts, _ = m.f.CreatedPerBucket(Scope{Namespace: "x"}, b)
	if fmt.Sprint(counts) != "[0 0 0 0 1 0]" {
		t.Errorf("created per bucket in namespace x %v", counts)
	}
	if _, ok := NewBuckets(0, int64(MaxBuckets)*60_000_000, 60_000_000); ok {
		t.Errorf("a range of more than MaxBuckets buckets accepted")
	}

	qs, err := m.f.StatusQueues("", "", 1, 0, m.now.UnixMicro())
	if err != nil || len(qs) != 1 || qs[0].Queue.Name != "x" {
		t.Errorf("status queues page 1: %+v %v", qs, err)
	}
	if qs, _ := m.f.StatusQueues("", "", 10, 1, m.now.UnixMicro()); len(qs) != 1 || qs[0].Queue.Name != "q" ||
		qs[0].Stats.Total != 3 {
		t.Errorf("status queues page 2: %+v", qs)
	}
}

func TestLastSegmentBefore(t *testing.T) {
	m := newMachine(t)
	t0 := m.now
	for i := range 50 {
		m.push(items("q", "p", fmt.Sprintf("m%d", i))...)
		m.advance(time.Second)
	}
	p := m.partition("q", "p")
	m.view(func(tx *segments.Tx) error {
		for _, c := range []struct {
			maxOff uint64
			before time.Duration
			first  uint64 // 0: none
		}{
			{math.MaxUint64, time.Hour, 50}, {math.MaxUint64, 0, 0}, {math.MaxUint64, time.Microsecond, 1},
			{math.MaxUint64, 20 * time.Second, 20}, {10, time.Hour, 10}, {10, 5*time.Second + time.Microsecond, 6}, {10, 5 * time.Second, 5},
			{0, time.Hour, 0},
		} {
			s, ok, err := tx.LastSegmentBefore(p, c.maxOff, t0.Add(c.before).UnixMicro())
			if err != nil {
				return err
			}
			if got := map[bool]uint64{true: s.First}[ok]; got != c.first {
				t.Errorf("LastSegmentBefore(%d, +%s) = %d (ok %v), want %d", c.maxOff, c.before, s.First, ok, c.first)
			}
		}
		return nil
	})
}

// The commit walk of the status and analytics views reads commitChunk
// segment references per read transaction and resumes below the last one:
// a partition with more segments than a chunk is counted exactly once.
func TestCommitWalkAcrossChunks(t *testing.T) {
	m := newMachine(t)
	const n = commitChunk*2 + 17
	cmds := make([]Command, 0, n)
	for i := 0; i < n; i++ {
		cmds = append(cmds, &Push{Items: items("q", "p", fmt.Sprintf("a%d", i))})
	}
	m.apply(cmds...) // one segment per push, all at one instant
	if segs := m.partition("q", "p").Segments; segs != n {
		t.Fatalf("%d segments, want %d: the walk would not cross a chunk", segs, n)
	}
	m.advance(time.Minute)
	m.push(items("q", "p", "late1", "late2")...)
	b, ok := NewBuckets(m.now.Add(-time.Hour).UnixMicro(), m.now.UnixMicro(), time.Minute.Microseconds())
	if !ok {
		t.Fatal("buckets")
	}
	counts := must1(m.f.CreatedPerBucket(Scope{Queue: "q"}, b))
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total != n+2 || counts[len(counts)-1] != 2 || counts[len(counts)-2] != n {
		t.Fatalf("total %d, last buckets %v, want %d then 2", total, counts[len(counts)-2:], n)
	}
	st := must1(m.f.Status(Scope{Queue: "q"}, b, m.now.UnixMicro()))
	if st.Points[0].Ingested != 2 || st.Points[1].Ingested != n {
		t.Fatalf("status series %+v", st.Points[:2])
	}
}
