package fsm

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

func TestDeleteQueueRemovesEverything(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 0 })
	m.push(items("q", "a", "a1", "a2")...)
	m.push(items("q", "b", "b1")...)
	m.push(items("keep", "a", "k1")...)
	m.pop(Lease{Queue: "q", Group: "G", SubMode: SubNew, Batch: 10})
	r := m.mustPop(Lease{Queue: "q", Batch: 1, MaxPartitions: 2})
	m.ack("", ackAll(r, AckFailed)...) // a dead letter
	leased := m.mustPop(Lease{Queue: "q", Batch: 10, MaxPartitions: 2})
	q := m.queue("q")
	pa, pb := m.partition("q", "a"), m.partition("q", "b")
	if len(m.deadLetters("q")) != 1 {
		t.Fatal("setup: no dead letter")
	}

	if res := m.deleteQueue("q"); !res.Existed {
		t.Fatalf("delete %+v", res)
	}
	if m.queue("q") != nil {
		t.Fatal("queue record kept")
	}
	m.view(func(tx *segments.Tx) error {
		if q2, _ := tx.QueueByID(q.ID); q2 != nil {
			t.Error("queue id index kept")
		}
		for _, p := range []*segments.Partition{pa, pb} {
			if p2, _ := tx.PartitionByUUID(p.UUID); p2 != nil {
				t.Errorf("partition %s kept (by uuid)", p.Name)
			}
			if p2, _ := tx.PartitionByID(p.ID); p2 != nil {
				t.Errorf("partition %s kept (by id)", p.Name)
			}
			if g, _ := tx.Group(p.ID, QueueMode); g != nil {
				t.Errorf("group state on %s kept", p.Name)
			}
			// The record that held the newest references is gone (above);
			// nothing may be left in the segments bucket either.
			n := 0
			tx.Scan(&segments.Partition{ID: p.ID, QueueID: p.QueueID}, 0, func(*segments.StoredMessage) (bool, error) { n++; return true, nil })
			if n != 0 {
				t.Errorf("%d messages of %s kept", n, p.Name)
			}
			for _, tid := range []string{"a1", "a2", "b1"} {
				if _, ok, err := tx.TxID(p, tid); err != nil || ok {
					t.Errorf("transaction id %s kept on %s", tid, p.Name)
				}
			}
		}
		if pids, _ := tx.LeaseHolders(leased.LeaseID); len(pids) != 0 {
			t.Error("lease index kept")
		}
		for _, g := range []string{QueueMode, "G"} {
			if qg, _ := tx.QueueGroup(q.ID, g); qg != nil {
				t.Errorf("queue-group record of %s kept", g)
			}
		}
		return nil
	})
	if dl := m.deadLettersByID(q.ID); len(dl) != 0 {
		t.Fatalf("dead letters kept: %+v", dl)
	}
	// Subscription records are kept.
	if s := m.subscription(subQueueKey("G", "q")); s == nil {
		t.Fatal("subscription record deleted")
	}
	// Other queues are untouched.
	if got := txids(m.pop(Lease{Queue: "keep", Batch: 10})); !slices.Equal(got, []string{"k1"}) {
		t.Fatalf("other queue %v", got)
	}
	// Acks and extends on the deleted queue find nothing.
	if ar := m.ack("", ackAll(leased, AckCompleted)...); ar.Items[0].Error != ErrUnresolvable {
		t.Fatalf("ack on a deleted queue %+v", ar.Items[0])
	}
	if er := m.extend(leased.LeaseID, 60); er.Error != ErrLeaseNotFound {
		t.Fatalf("extend on a deleted queue %+v", er)
	}
	if res := m.deleteQueue("q"); res.Existed {
		t.Fatal("second delete reports existed")
	}
}

func TestDeleteQueueRecreateKeepsOldSubscription(t *testing.T) {
	m := newMachine(t)
	m.push(items("q", "p", "old")...)
	m.advance(time.Minute)
	m.pop(Lease{Queue: "q", Group: "G", SubMode: SubNew, Batch: 10})
	old := m.queue("q")
	m.deleteQueue("q")
	m.advance(time.Minute)
	m.push(items("q", "p", "n1", "n2")...)
	q := m.queue("q")
	if q.ID == old.ID || q.UUID == old.UUID {
		t.Fatal("re-created queue reuses the old identity")
	}
	// The old new-mode group reads the new queue from its old start time:
	// everything in it.
	if got := txids(m.pop(Lease{Queue: "q", Group: "G", Batch: 10})); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Fatalf("got %v", got)
	}
	// Dedup starts from scratch in the new queue.
	if r := m.push(items("q", "p", "old")...); r.Items[0].Status != PushQueued {
		t.Fatalf("dedup survived the delete: %+v", r.Items[0])
	}
}

func TestDeleteUnknownQueue(t *testing.T) {
	m := newMachine(t)
	if res := m.deleteQueue("nope"); res.Existed {
		t.Fatalf("delete %+v", res)
	}
}

func TestNodeRegistry(t *testing.T) {
	m := newMachine(t)
	m.apply(&RegisterNode{ID: "n1", RaftAddr: "r1", HTTPAddr: "h1"}, &RegisterNode{ID: "n2", RaftAddr: "r2", HTTPAddr: "h2"})
	m.apply(&RegisterNode{ID: "n1", RaftAddr: "r1b", HTTPAddr: "h1b"})
	m.apply(&RemoveNode{ID: "n2"}, &RemoveNode{ID: "unknown"})
	var nodes []segments.Node
	m.view(func(tx *segments.Tx) (err error) { nodes, err = tx.Nodes(); return err })
	if len(nodes) != 1 || nodes[0] != (segments.Node{ID: "n1", RaftAddr: "r1b", HTTPAddr: "h1b"}) {
		t.Fatalf("nodes %+v", nodes)
	}
}

func TestEmptyQueueName(t *testing.T) {
	// The empty string is a valid queue name (queen-api.md 4.1).
	m := newMachine(t)
	res, p := m.catch(&Push{Items: items("", "p", "m1")})
	if p != nil {
		t.Fatalf("push to queue \"\" panicked: %v", p)
	}
	if pr, ok := res[0].(*PushResult); !ok || pr.Items[0].Status != PushQueued {
		t.Fatalf("push %+v", res[0])
	}
	if q := m.queue(""); q == nil || q.Namespace != "" || q.Task != "" {
		t.Fatalf("queue %+v", q)
	}
	m.configure(Configure{Queue: "", Namespace: "ns", Options: DefaultOptions(segments.OriginConfigure)})
	if got := txids(m.pop(Lease{Queue: "", Batch: 10})); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("pop %v", got)
	}
	if got := m.pop(Lease{Scope: ScopeDiscovery, Namespace: "ns", Group: "G", Batch: 10}); got.Count() != 1 {
		t.Fatalf("discovery %v", delivered(got))
	}
	if res := m.deleteQueue(""); !res.Existed || m.queue("") != nil {
		t.Fatalf("delete %+v", res)
	}
}

func TestOversizedNamesRejectedWithoutPanic(t *testing.T) {
	long := strings.Repeat("x", 40000)
	cmds := map[string]Command{
		"push queue":        &Push{Items: items(long, "p", "m")},
		"push partition":    &Push{Items: items("q", long, "m")},
		"push txid":         &Push{Items: items("q", "p", long)},
		"configure":         &Configure{Queue: long},
		"pop group":         &Lease{Scope: ScopeWildcard, Queue: "q", Group: long, Batch: 1, SubMode: SubNew},
		"ack group":         &Ack{Group: long, Items: []AckItem{{TxID: "m", PartitionOK: true, Status: AckCompleted}}},
		"transaction push":  &Transaction{Ops: []TxOp{opPush(items("q", long, "m")...)}},
		"transaction group": &Transaction{Ops: []TxOp{{Kind: OpAck, Group: long, Ack: AckItem{TxID: "m"}}}},
		"delete queue":      &DeleteQueue{Queue: long},
		"register node":     &RegisterNode{ID: long},
	}
	for name, c := range cmds {
		m := newMachine(t)
		m.push(items("q", "p", "seed")...)
		res, p := m.catch(c)
		if p != nil {
			t.Errorf("%s: apply panicked (every replica would stop at this entry): %v", name, p)
			continue
		}
		if _, ok := res[0].(*ErrorResult); !ok {
			t.Errorf("%s: result %T %+v, want *ErrorResult", name, res[0], res[0])
		}
		m2 := newMachine(t)
		m2.push(items("q", "p", "seed")...)
		m2.apply()
		if m.digest() != m2.digest() {
			t.Errorf("%s: a rejected command changed state", name)
		}
	}
}

func TestMultiPartitionPushInOneCommand(t *testing.T) {
	// One push (and one entry with several pushes) writes several segments
	// in one bbolt transaction: each must keep its own bytes.
	m := newMachine(t)
	m.push(item("q", "p1", "t1", `"a"`), item("q", "p2", "t2", `"b"`), item("q", "p1", "t3", `"c"`))
	m.apply(&Push{Items: items("q", "p3", "x1")}, &Push{Items: items("q", "p4", "y1", "y2")}, &Push{Items: items("q", "p3", "x2")})
	tr := m.txn(opPush(item("q", "p5", "z1", `1`)), opPush(item("q", "p6", "w1", `2`)))
	if !tr.Success {
		t.Fatalf("transaction %+v", tr)
	}
	r := m.pop(Lease{Queue: "q", Batch: 100, MaxPartitions: 10})
	got := delivered(r)
	want := []string{"p1/t1", "p1/t3", "p2/t2", "p3/x1", "p3/x2", "p4/y1", "p4/y2", "p5/z1", "p6/w1"}
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	if string(r.Partitions[0].Messages[0].Payload) != `"a"` || string(r.Partitions[1].Messages[0].Payload) != `"b"` {
		t.Fatalf("payloads %s %s", r.Partitions[0].Messages[0].Payload, r.Partitions[1].Messages[0].Payload)
	}
}

func TestCountersAreReplicatedState(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetryLimit = 0 })
	m.push(items("q", "p", "a", "b", "a")...)
	r := m.mustPop(Lease{Queue: "q", Batch: 10})
	lp := r.Partitions[0]
	m.ack("", ackOf(lp, lp.Messages[0], r.LeaseID, AckCompleted), ackOf(lp, lp.Messages[1], r.LeaseID, AckFailed),
		ackTx(lp.PartitionID, "nope", [16]byte{}, AckCompleted))
	m.txn()
	m.catch(&Push{Items: items(strings.Repeat("x", 300), "p", "z")}) // rejected: not counted
	c, err := m.f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	want := Counters{PushRequests: 1, PushMessages: 2, PopRequests: 1, PopMessages: 2, AckRequests: 1,
		AckMessages: 3, AckSuccess: 1, AckFailed: 1, Transactions: 1, DLQ: 1}
	if c != want {
		t.Fatalf("counters %+v, want %+v", c, want)
	}
}
