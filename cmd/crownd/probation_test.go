package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// TestDurableWipedNodeDoesNotElectAStaleOne: README "Durability": an
// acknowledged push survives "as long as a majority's disks survive". Pushes
// are acknowledged while one follower is down, so the leader and the other
// follower alone hold them; then both go down and that follower's data
// directory is lost. The stale follower and the wiped one come back: a
// wiped node votes for anyone (its log is empty), so without its probation
// (raftnode/DESIGN.md) the stale node would be elected and the pushes only
// the leader's disk holds would be cut from the log when it returned. With
// it, no leader is elected until the old leader is back, and every
// acknowledged push is read, once and in order, through the wiped node.
func TestDurableWipedNodeDoesNotElectAStaleOne(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three crownd processes")
	}
	c := tc.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	leader := c.Leader()
	var stale, wiped *tc.Node
	for _, n := range c.Nodes() {
		switch {
		case n == leader:
		case stale == nil:
			stale = n
		default:
			wiped = n
		}
	}
	var acked []int
	push := func(from, to int) {
		t.Helper()
		var items []tc.PushItem
		for v := from; v <= to; v++ {
			items = append(items, tc.PushItem{Queue: "probation", Payload: v})
		}
		if _, err := leader.Client().Retrying(10*time.Second).Push(ctx, items); err != nil {
			t.Fatalf("push %d..%d: %v", from, to, err)
		}
		for v := from; v <= to; v++ {
			acked = append(acked, v)
		}
	}
	push(1, 50)
	if _, err := c.WaitConverged(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	stale.Kill()
	push(51, 100) // on the leader's disk and the wiped node's only

	leader.Kill()
	wiped.Kill()
	if err := os.RemoveAll(wiped.DataDir()); err != nil {
		t.Fatal(err)
	}
	stale.Restart()
	wiped.Restart()
	if n, err := c.WaitLeader(8 * time.Second); err == nil {
		t.Fatalf("%s was elected while %s, the only surviving disk with pushes 51..100, was down", n.ID(), leader.ID())
	}
	if p := probation(t, wiped); !p {
		t.Errorf("/health of the wiped node: raft.probation %v while it waits for a leader, want true", p)
	}

	leader.Restart()
	if _, err := c.WaitLeader(tc.LeaderTimeout); err != nil {
		t.Fatal(err)
	}
	got := durableDrain(t, ctx, wiped, "probation", "audit")
	durableCheckExactlyOnce(t, "read through the wiped node", acked, got)
	if _, err := c.WaitConverged(30 * time.Second); err != nil {
		t.Error(err)
	}
	for deadline := time.Now().Add(5 * time.Second); probation(t, wiped); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("/health of the wiped node: raft.probation still true 5 s after it caught up")
		}
	}
}

// probation reads raft.probation off a node's /health (200 or 503).
func probation(t *testing.T, n *tc.Node) bool {
	t.Helper()
	resp, err := http.Get(n.URL() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Raft struct {
			Probation *bool `json:"probation"`
		} `json:"raft"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || h.Raft.Probation == nil {
		t.Fatalf("/health of %s: %v, raft.probation missing", n.ID(), err)
	}
	return *h.Raft.Probation
}
