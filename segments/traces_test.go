package segments

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// checkTraces verifies that the trace rows, both indexes and the totals agree.
func checkTraces(t *testing.T, tx *Tx) {
	t.Helper()
	var count, size, names uint64
	c := tx.bucket(bTraces).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		ev := new(TraceEvent)
		if err := unmarshalMsgpack(v, ev); err != nil {
			t.Fatal(err)
		}
		if ev.PartitionID != u64(k) || ev.Offset != u64(k[8:]) || ev.Seq != u64(k[16:]) {
			t.Fatalf("trace %x holds %+v", k, ev)
		}
		if loc := tx.get(bTraceOrder, be64(ev.Seq)); string(loc) != string(key88(ev.PartitionID, ev.Offset)) {
			t.Fatalf("trace %d: order row %x", ev.Seq, loc)
		}
		for _, n := range ev.Names {
			if tx.get(bTraceNames, traceNameKey(n, ev.Seq)) == nil {
				t.Fatalf("trace %d: name %q not indexed", ev.Seq, n)
			}
		}
		count++
		size += uint64(len(v))
		names += uint64(len(ev.Names))
	}
	var n uint64
	oc := tx.bucket(bTraceOrder).Cursor()
	for k, _ := oc.First(); k != nil; k, _ = oc.Next() {
		n++
	}
	if n != count {
		t.Fatalf("%d order rows for %d events", n, count)
	}
	var rows uint64
	if err := tx.ForEachTraceName(func(r TraceNameRef) error {
		rows++
		ev, err := tx.Trace(r.PartitionID, r.Offset, r.Seq)
		if err != nil || ev == nil || !slices.Contains(ev.Names, r.Name) || ev.CreatedAt != r.CreatedAt {
			return fmt.Errorf("name row %+v points at %+v (%v)", r, ev, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rows != names {
		t.Fatalf("%d name rows for %d names", rows, names)
	}
	if gc, gs := tx.TraceTotals(); gc != count || gs != size {
		t.Fatalf("totals %d events %d bytes, stored %d events %d bytes", gc, gs, count, size)
	}
}

// Random additions and deletions, some rolled back by a savepoint, keep the
// rows, the indexes and the totals consistent; deleting a segment or a
// partition deletes the events of its messages and no others.
func TestTracesStayConsistent(t *testing.T) {
	s := openStore(t)
	var p1, p2 *Partition
	update(t, s, func(tx *Tx) error {
		p1, p2 = newPartition(t, tx, "q", "p1"), newPartition(t, tx, "q", "p2")
		for i := range 4 {
			appendMsgs(t, tx, p1, int64(i), fmt.Sprintf("a%d", 2*i), fmt.Sprintf("a%d", 2*i+1))
			appendMsgs(t, tx, p2, int64(i), fmt.Sprintf("b%d", i))
		}
		return nil
	})
	rng := rand.New(rand.NewSource(7))
	seq := uint64(1000)
	words := []string{"x", "y", "z", ""}
	for round := range 200 {
		update(t, s, func(tx *Tx) error {
			sp := tx.Savepoint()
			for range 1 + rng.Intn(4) {
				switch k := rng.Intn(10); {
				case k < 7:
					seq++
					p := []*Partition{p1, p2}[rng.Intn(2)]
					var names []string
					for _, w := range words[:rng.Intn(4)] {
						names = append(names, w+fmt.Sprint(rng.Intn(3)))
					}
					must(t, tx.AddTrace(&TraceEvent{Seq: seq, PartitionID: p.ID, Offset: 1 + uint64(rng.Intn(8)),
						Names: names, Data: []byte(`{}`), CreatedAt: int64(seq)}))
				case k < 9:
					if pid, off, sq, ok, err := tx.OldestTrace(); err != nil || ok {
						must(t, err)
						must(t, tx.DeleteTrace(pid, off, sq))
					}
				default:
					must(t, tx.deleteTraces(p1.ID, uint64(rng.Intn(8)), uint64(rng.Intn(9))))
				}
			}
			if round%5 == 0 {
				must(t, tx.RollbackTo(sp))
			} else {
				tx.Release(sp)
			}
			checkTraces(t, tx)
			return nil
		})
	}
	update(t, s, func(tx *Tx) error {
		for _, p := range []*Partition{p1, p2} {
			for off := uint64(1); off <= 8; off++ {
				seq++
				must(t, tx.AddTrace(&TraceEvent{Seq: seq, PartitionID: p.ID, Offset: off, Names: []string{"n"}, Data: []byte(`1`)}))
			}
		}
		// The segment at offsets 3-4 of p1 goes, with its messages' events.
		stored, err := tx.PartitionByID(p1.ID)
		must(t, err)
		n, err := tx.DeleteSegment(stored, 3)
		must(t, err)
		must(t, tx.PutPartition(stored))
		if n != 2 {
			t.Fatalf("deleted %d messages", n)
		}
		for off := uint64(1); off <= 8; off++ {
			if got := len(tx.MessageTraceSeqs(p1.ID, off)); (got == 0) != (off == 3 || off == 4) {
				t.Fatalf("p1 offset %d holds %d events after its neighbours' segment went", off, got)
			}
		}
		q, err := tx.Queue("q")
		must(t, err)
		must(t, tx.DeleteQueue(q))
		if c, b := tx.TraceTotals(); c != 0 || b != 0 {
			t.Fatalf("after the queue went: %d events, %d bytes", c, b)
		}
		checkTraces(t, tx)
		return nil
	})
}

func TestPushBuffer(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		for i := range 3 {
			must(t, tx.BufferPush(&BufferedPush{Items: []BufferedItem{{Queue: "q", TxID: fmt.Sprint(i), Payload: []byte("12")}}}))
		}
		sp := tx.Savepoint()
		must(t, tx.BufferPush(&BufferedPush{Items: []BufferedItem{{Queue: "q", Payload: []byte("rolled back")}}}))
		must(t, tx.RollbackTo(sp))
		if got := tx.PushBufferTotals(); got != (PushBufferTotals{Requests: 3, Messages: 3, Bytes: 6}) {
			t.Fatalf("totals %+v", got)
		}
		bufs, err := tx.BufferedPushes(2)
		must(t, err)
		if len(bufs) != 2 || bufs[0].Items[0].TxID != "0" || bufs[1].Items[0].TxID != "1" {
			t.Fatalf("first two %+v", bufs)
		}
		must(t, tx.DeleteBufferedPush(bufs[0]))
		must(t, tx.DeleteBufferedPush(bufs[0])) // gone already: nothing more
		all, err := tx.BufferedPushes(0)
		must(t, err)
		if len(all) != 2 || all[0].Seq <= bufs[0].Seq || tx.PushBufferTotals().Messages != 2 {
			t.Fatalf("after one deletion %+v", all)
		}
		return nil
	})
}
