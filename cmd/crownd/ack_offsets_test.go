package main_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// The leader writes into an acknowledgment the offsets of the messages it
// delivered, and every node's state machine then resolves them without a
// lookup in the transaction-id index (fsm.AckAt), whichever nodes the pop
// and the ack went to. An ack naming an id the pop did not deliver still
// resolves, by the index. Read off the nodes' own counters.
func TestAckOffsetsSpareEveryNodeTheIndex(t *testing.T) {
	c := tc.Start(t, 3)
	leader := c.Leader()
	fs := clusterFollowers(c, leader)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var items []tc.PushItem
	for i := range 330 { // three pops of 100, and some left
		items = append(items, tc.PushItem{Queue: "offsets", Partition: fmt.Sprintf("p%d", i%3), Payload: i,
			TransactionID: fmt.Sprintf("o-%03d", i)})
	}
	if _, err := fs[0].Client().Push(ctx, items); err != nil {
		t.Fatal(err)
	}
	before := make([]ackCounters, 3)
	for i, n := range c.Nodes() {
		before[i] = readAckCounters(t, n)
	}
	// Pop through a follower and acknowledge through the other one, then
	// both through the leader, then pop through the leader and acknowledge
	// through a follower.
	routes := [][2]*tc.Node{{fs[0], fs[1]}, {leader, leader}, {leader, fs[0]}}
	acked := 0
	for _, r := range routes {
		msgs, err := r[0].Client().Pop(ctx, "offsets", tc.PopParams{Batch: 100, Partitions: 3})
		if err != nil || len(msgs) == 0 {
			t.Fatalf("pop through %s: %d messages, %v", r[0].ID(), len(msgs), err)
		}
		var acks []tc.Ack
		for _, m := range msgs {
			acks = append(acks, tc.AckFor(m, "completed"))
		}
		res, err := r[1].Client().AckBatch(ctx, "", acks)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range res {
			if !a.Success {
				t.Fatalf("ack %d of %s through %s: %+v", i, acks[i].TransactionID, r[1].ID(), a)
			}
		}
		acked += len(acks)
	}
	// An id of the partition that no pop delivered, with a live lease: it
	// carries no offset, and is looked up (and already consumed: a no-op).
	msgs, err := leader.Client().Pop(ctx, "offsets", tc.PopParams{Batch: 1})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pop: %d messages, %v", len(msgs), err)
	}
	stray := tc.AckFor(msgs[0], "completed")
	stray.TransactionID = "o-000"
	if _, err := fs[1].Client().AckBatch(ctx, "", []tc.Ack{stray}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitConverged(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	for i, n := range c.Nodes() {
		got := readAckCounters(t, n).minus(before[i])
		want := ackCounters{byOffset: float64(acked), byIndex: 1}
		if n == leader {
			want.written = float64(acked)
		}
		if got != want {
			t.Errorf("%s: %+v, want %+v", n.ID(), got, want)
		}
	}
}

type ackCounters struct{ byOffset, byIndex, refused, written float64 }

func (a ackCounters) minus(b ackCounters) ackCounters {
	return ackCounters{a.byOffset - b.byOffset, a.byIndex - b.byIndex, a.refused - b.refused, a.written - b.written}
}

func readAckCounters(t *testing.T, n *tc.Node) ackCounters {
	t.Helper()
	m, err := nodeMetrics(n)
	if err != nil {
		t.Fatal(err)
	}
	value := func(series string) float64 {
		v, ok := m[series]
		if !ok {
			t.Fatalf("%s: no series %s", n.ID(), series)
		}
		return v
	}
	return ackCounters{
		byOffset: value(`crown_ack_resolutions_total{by="offset"}`),
		byIndex:  value(`crown_ack_resolutions_total{by="index"}`),
		refused:  value(`crown_ack_offsets_refused_total`),
		written:  value(`crown_ack_offsets_written_total`),
	}
}
