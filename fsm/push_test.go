package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

func TestPushDuplicateInsideWindowSamePartition(t *testing.T) {
	m := newMachine(t)
	first := m.push(item("q", "p", "tx", `1`))
	m.advance(10 * time.Minute)
	again := m.push(item("q", "p", "tx", `2`))
	if first.Items[0].Status != PushQueued {
		t.Fatalf("first push %+v", first.Items[0])
	}
	if again.Items[0].Status != PushDuplicate || again.Items[0].MessageID != first.Items[0].MessageID {
		t.Fatalf("second push %+v, want duplicate of %x", again.Items[0], first.Items[0].MessageID)
	}
	if again.Items[0].PartitionID != first.Items[0].PartitionID {
		t.Fatalf("duplicate reports another partition")
	}
	if p := m.partition("q", "p"); p.Messages != 1 {
		t.Fatalf("duplicate stored: %d messages", p.Messages)
	}
	lr := m.pop(Lease{Queue: "q", Batch: 10})
	if lr.Count() != 1 || string(lr.Partitions[0].Messages[0].Payload) != `1` {
		t.Fatalf("pop %+v", lr)
	}
}

func TestPushSameTxIDOtherPartitionIsNotDuplicate(t *testing.T) {
	m := newMachine(t)
	a := m.push(item("q", "p1", "tx", `1`))
	b := m.push(item("q", "p2", "tx", `2`))
	c := m.push(item("other", "p1", "tx", `3`))
	for _, r := range []*PushResult{a, b, c} {
		if r.Items[0].Status != PushQueued {
			t.Fatalf("status %+v", r.Items[0])
		}
	}
	if a.Items[0].MessageID == b.Items[0].MessageID || a.Items[0].PartitionID == b.Items[0].PartitionID {
		t.Fatalf("distinct partitions share ids: %+v %+v", a.Items[0], b.Items[0])
	}
	if a.Items[0].PartitionID == c.Items[0].PartitionID {
		t.Fatalf("same partition name in two queues shares a partition id")
	}
}

func TestPushDuplicateInsideOneRequest(t *testing.T) {
	m := newMachine(t)
	r := m.push(item("q", "p", "a", `1`), item("q", "p", "b", `2`), item("q", "p", "a", `3`), item("q", "p", "a", `4`))
	want := []uint8{PushQueued, PushQueued, PushDuplicate, PushDuplicate}
	for i, w := range want {
		if r.Items[i].Status != w {
			t.Fatalf("item %d status %d, want %d", i, r.Items[i].Status, w)
		}
	}
	if r.Items[2].MessageID != r.Items[0].MessageID || r.Items[3].MessageID != r.Items[0].MessageID {
		t.Fatalf("in-request duplicates must point at the first item: %+v", r.Items)
	}
	lr := m.pop(Lease{Queue: "q", Batch: 10})
	if got := txids(lr); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("stored %v", got)
	}
	if string(lr.Partitions[0].Messages[0].Payload) != `1` {
		t.Fatalf("the first copy must be the stored one, got %s", lr.Partitions[0].Messages[0].Payload)
	}
}

func TestPushDedupWindowZeroStoresEveryCopy(t *testing.T) {
	m := newMachine(t)
	o := DefaultOptions(segments.OriginConfigure)
	o.DedupWindowSeconds = 0
	m.configure(Configure{Queue: "q", Options: o})
	r1 := m.push(item("q", "p", "tx", `1`), item("q", "p", "tx", `2`))
	r2 := m.push(item("q", "p", "tx", `3`))
	ids := map[[16]byte]bool{}
	for _, it := range append(r1.Items, r2.Items...) {
		if it.Status != PushQueued {
			t.Fatalf("status %+v", it)
		}
		ids[it.MessageID] = true
	}
	if len(ids) != 3 {
		t.Fatalf("message ids not distinct: %d", len(ids))
	}
	lr := m.pop(Lease{Queue: "q", Batch: 10})
	var payloads []string
	for _, msg := range lr.Partitions[0].Messages {
		payloads = append(payloads, string(msg.Payload))
	}
	if !slices.Equal(payloads, []string{"1", "2", "3"}) {
		t.Fatalf("stored %v", payloads)
	}
}

func TestPushAfterDedupWindowStoresNewMessage(t *testing.T) {
	m := newMachine(t)
	o := DefaultOptions(segments.OriginConfigure)
	o.DedupWindowSeconds = 60
	m.configure(Configure{Queue: "q", Options: o})
	first := m.push(item("q", "p", "tx", `1`))
	m.advance(60 * time.Second)
	edge := m.push(item("q", "p", "tx", `2`))
	if edge.Items[0].Status != PushDuplicate {
		t.Fatalf("at exactly the window end: %+v, want duplicate", edge.Items[0])
	}
	m.advance(time.Second)
	late := m.push(item("q", "p", "tx", `3`))
	if late.Items[0].Status != PushQueued || late.Items[0].MessageID == first.Items[0].MessageID {
		t.Fatalf("after the window: %+v", late.Items[0])
	}
	// The new occurrence now holds the id: a retry inside its window is a
	// duplicate of it.
	retry := m.push(item("q", "p", "tx", `4`))
	if retry.Items[0].Status != PushDuplicate || retry.Items[0].MessageID != late.Items[0].MessageID {
		t.Fatalf("retry %+v, want duplicate of the newest occurrence", retry.Items[0])
	}
	if p := m.partition("q", "p"); p.Messages != 2 {
		t.Fatalf("%d messages stored, want 2", p.Messages)
	}
}

func TestPushDefaultDedupWindowIsAnHour(t *testing.T) {
	m := newMachine(t)
	m.push(item("q", "p", "tx", `1`))
	m.advance(59 * time.Minute)
	if r := m.push(item("q", "p", "tx", `1`)); r.Items[0].Status != PushDuplicate {
		t.Fatalf("inside the default window: %+v", r.Items[0])
	}
	m.advance(2 * time.Minute)
	if r := m.push(item("q", "p", "tx", `1`)); r.Items[0].Status != PushQueued {
		t.Fatalf("after the default window: %+v", r.Items[0])
	}
}

func TestPushImplicitQueueCreation(t *testing.T) {
	cases := []struct{ name, ns, task string }{
		{"orders.shipped.eu", "orders", "shipped"},
		{"orders.shipped", "orders", "shipped"},
		{"orders", "orders", ""},
		{".x", "", "x"},
		{"a..b", "a", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newMachine(t)
			m.push(item(c.name, "p", "tx", `1`))
			q := m.queue(c.name)
			if q == nil {
				t.Fatal("queue not created")
			}
			if q.Namespace != c.ns || q.Task != c.task {
				t.Fatalf("tags %q/%q, want %q/%q", q.Namespace, q.Task, c.ns, c.task)
			}
			if q.Origin != segments.OriginPush {
				t.Fatalf("origin %d", q.Origin)
			}
			want := DefaultOptions(segments.OriginConfigure)
			want.LeaseTime = 60
			if q.Options != want {
				t.Fatalf("options %+v, want %+v", q.Options, want)
			}
		})
	}
}

func TestPushDoesNotChangeExistingQueue(t *testing.T) {
	m := newMachine(t)
	o := DefaultOptions(segments.OriginConfigure)
	o.RetryLimit = 9
	m.configure(Configure{Queue: "orders.shipped", Namespace: "ns", Task: "tk", Options: o})
	before := m.queue("orders.shipped")
	m.push(item("orders.shipped", "p", "tx", `1`))
	after := m.queue("orders.shipped")
	if after.Namespace != "ns" || after.Task != "tk" || after.Options != o || after.ID != before.ID || after.UUID != before.UUID {
		t.Fatalf("push changed the queue: %+v", after)
	}
}

func TestPushMessageIDsIncreaseWithinPartition(t *testing.T) {
	m := newMachine(t)
	var ids [][16]byte
	for i := 0; i < 5; i++ {
		r := m.push(items("q", "p", seq(string(rune('a'+i)), 3)...)...)
		for _, it := range r.Items {
			ids = append(ids, it.MessageID)
		}
		if i%2 == 0 {
			m.advance(time.Millisecond)
		} // else the same instant: the sequence orders them
		m.push(item("q", "other", seq("o", 5)[i], `0`))
	}
	for i := 1; i < len(ids); i++ {
		if bytes.Compare(ids[i-1][:], ids[i][:]) >= 0 {
			t.Fatalf("id %d (%x) not after id %d (%x)", i, ids[i], i-1, ids[i-1])
		}
	}
	lr := m.pop(Lease{Queue: "q", Partition: "p", Scope: ScopeSpecific, Batch: 100})
	if lr.Count() != 15 {
		t.Fatalf("delivered %d", lr.Count())
	}
	for i, msg := range lr.Partitions[0].Messages {
		if msg.ID != ids[i] {
			t.Fatalf("delivered message %d has id %x, push reported %x", i, msg.ID, ids[i])
		}
	}
}

func TestPushItemsDeliveredInItemOrder(t *testing.T) {
	m := newMachine(t)
	txs := []string{"z", "a", "m", "b", "y"}
	m.push(items("q", "p", txs...)...)
	m.push(items("q", "p", "c", "x")...)
	lr := m.pop(Lease{Queue: "q", Batch: 100})
	if got := txids(lr); !slices.Equal(got, []string{"z", "a", "m", "b", "y", "c", "x"}) {
		t.Fatalf("order %v", got)
	}
	for i := 1; i < len(lr.Partitions[0].Messages); i++ {
		if lr.Partitions[0].Messages[i].CreatedAt < lr.Partitions[0].Messages[i-1].CreatedAt {
			t.Fatal("createdAt decreases")
		}
	}
}

func TestPushEmptyPartitionNameIsDistinct(t *testing.T) {
	m := newMachine(t)
	a := m.push(item("q", "", "tx", `1`))
	b := m.push(item("q", "Default", "tx", `2`))
	if a.Items[0].Status != PushQueued || b.Items[0].Status != PushQueued {
		t.Fatalf("statuses %+v %+v", a.Items[0], b.Items[0])
	}
	if a.Items[0].PartitionID == b.Items[0].PartitionID {
		t.Fatal(`"" and "Default" share a partition`)
	}
	if got := m.partitions("q"); !slices.Equal(got, []string{"", "Default"}) {
		t.Fatalf("partitions %q", got)
	}
	lr := m.pop(Lease{Queue: "q", Partition: "", Scope: ScopeSpecific, Batch: 10})
	if got := delivered(lr); !slices.Equal(got, []string{"/tx"}) || string(lr.Partitions[0].Messages[0].Payload) != `1` {
		t.Fatalf("pop of \"\" delivered %v", got)
	}
}

func TestPushStoresMessageFields(t *testing.T) {
	m := newMachine(t)
	trace := [16]byte{1, 2, 3}
	r := m.push(PushItem{Queue: "q", Partition: "p", TxID: "tx", TraceID: trace, HasTrace: true,
		ProducerSub: "alice", Payload: []byte(`{"k":"v"}`), Encrypted: true})
	lr := m.pop(Lease{Queue: "q", Batch: 1})
	got := lr.Partitions[0].Messages[0]
	if got.ID != r.Items[0].MessageID || got.TxID != "tx" || got.TraceID != trace || !got.HasTrace ||
		got.ProducerSub != "alice" || string(got.Payload) != `{"k":"v"}` || !got.Encrypted ||
		got.CreatedAt != m.now.UnixMicro() || got.RetryCount != 0 {
		t.Fatalf("delivered %+v", got)
	}
	if lr.Partitions[0].PartitionID != r.Items[0].PartitionID || lr.Partitions[0].Queue != "q" {
		t.Fatalf("partition %+v", lr.Partitions[0])
	}
}

func TestPushCreatedAtIsMonotonicUnderClockSkew(t *testing.T) {
	m := newMachine(t)
	m.push(item("q", "p", "a", `1`))
	t1 := m.now
	m.advance(-time.Minute) // a new leader with a slower clock
	m.push(item("q", "p", "b", `2`))
	lr := m.pop(Lease{Queue: "q", Batch: 10})
	msgs := lr.Partitions[0].Messages
	if msgs[1].CreatedAt < msgs[0].CreatedAt || msgs[1].CreatedAt != t1.UnixMicro() {
		t.Fatalf("createdAt went backwards: %d then %d", msgs[0].CreatedAt, msgs[1].CreatedAt)
	}
	if bytes.Compare(msgs[0].ID[:], msgs[1].ID[:]) >= 0 {
		t.Fatal("ids not increasing")
	}
}

func TestPushDuplicateAcrossRequestsOfOneEntry(t *testing.T) {
	// Group commit: two requests racing on the same key land in one entry;
	// exactly one is queued, the other is a duplicate with the winner's id.
	m := newMachine(t)
	res := m.apply(&Push{Items: items("q", "p", "k")}, &Push{Items: items("q", "p", "k", "other")})
	a, b := res[0].(*PushResult), res[1].(*PushResult)
	if a.Items[0].Status != PushQueued || b.Items[0].Status != PushDuplicate || b.Items[0].MessageID != a.Items[0].MessageID {
		t.Fatalf("results %+v %+v", a.Items, b.Items)
	}
	if b.Items[1].Status != PushQueued {
		t.Fatalf("other item %+v", b.Items[1])
	}
	if p := m.partition("q", "p"); p.Messages != 2 {
		t.Fatalf("%d messages", p.Messages)
	}
}

// One request over more partitions than pushWith finds by a scan (it
// switches to a map after eight), in two queues sharing partition names,
// revisiting each partition after the switch: every item reaches its own
// partition, in item order, and an id repeated there is a duplicate of the
// first item of its partition only.
func TestPushRequestOverManyPartitions(t *testing.T) {
	m := newMachine(t)
	const parts = 20
	var req []PushItem
	for round := 0; round < 2; round++ {
		for i := 0; i < parts; i++ {
			p := fmt.Sprintf("p%d", (i*7+round*3)%parts) // another order each round
			req = append(req, item("q", p, fmt.Sprintf("%s-%d", p, round), fmt.Sprintf(`"q%d"`, round)))
			if i%3 == 0 {
				req = append(req, item("r", p, fmt.Sprintf("%s-%d", p, round), fmt.Sprintf(`"r%d"`, round)))
			}
		}
	}
	// Repeats of ids stored earlier in this request: a duplicate in their
	// own partition (one found before the switch, one after), new elsewhere.
	first, late := req[0], req[len(req)-1]
	req = append(req, item(first.Queue, first.Partition, first.TxID, `"dup"`),
		item(late.Queue, late.Partition, late.TxID, `"dup"`),
		item(first.Queue, "elsewhere", first.TxID, `"new"`))
	res := m.push(req...)

	ids := map[[2]string][16]byte{} // (queue, partition) -> its partition id
	for i, it := range req {
		got := res.Items[i]
		k := [2]string{it.Queue, it.Partition}
		if id, ok := ids[k]; ok && id != got.PartitionID {
			t.Fatalf("item %d (%s/%s) reported partition %x, earlier items %x", i, it.Queue, it.Partition, got.PartitionID, id)
		}
		ids[k] = got.PartitionID
		want := uint8(PushQueued)
		if i >= len(req)-3 && i < len(req)-1 {
			want = PushDuplicate
		}
		if got.Status != want {
			t.Fatalf("item %d (%s/%s %s) status %d, want %d", i, it.Queue, it.Partition, it.TxID, got.Status, want)
		}
	}
	seen := map[[16]byte]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("two (queue, partition) pairs share partition id %x", id)
		}
		seen[id] = true
	}
	for k := range ids {
		var want []string
		for i, it := range req[:len(req)-3] {
			if it.Queue == k[0] && it.Partition == k[1] && res.Items[i].Status == PushQueued {
				want = append(want, it.TxID)
			}
		}
		if k[1] == "elsewhere" {
			want = []string{first.TxID}
		}
		lr := m.pop(Lease{Queue: k[0], Partition: k[1], Scope: ScopeSpecific, Batch: 100})
		if got := txids(lr); !slices.Equal(got, want) {
			t.Fatalf("%s/%s delivered %v, want %v", k[0], k[1], got, want)
		}
		if p := m.partition(k[0], k[1]); p.Messages != uint64(len(want)) {
			t.Fatalf("%s/%s holds %d messages, want %d", k[0], k[1], p.Messages, len(want))
		}
	}
}
