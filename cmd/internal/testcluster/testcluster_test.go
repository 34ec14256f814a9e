package testcluster

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func healthOK(t *testing.T, n *Node) Health {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := n.Client().Health(ctx)
	if err != nil {
		t.Fatalf("%s health: %v", n.ID(), err)
	}
	if h.HTTPStatus != 200 || h.Status != "healthy" || h.NodeID != n.ID() {
		t.Fatalf("%s health: %+v", n.ID(), h)
	}
	return h
}

// TestSingleNodeKillRestart: one node starts healthy and leading, survives
// SIGKILL plus restart on the same ports and data directory with its data,
// and the harness tracks the process state throughout.
func TestSingleNodeKillRestart(t *testing.T) {
	key := strings.Repeat("ab", 32)
	c := Start(t, 1, WithEnv("QUEEN_ENCRYPTION_KEY="+key), WithArgs("--leader-wait", "3s"), WithLogLevel("debug"))
	n := c.Node(0)
	if !slices.Contains(n.Args(), "--leader-wait") {
		t.Fatalf("WithArgs not applied: %v", n.Args())
	}
	if b, _ := os.ReadFile(n.LogPath()); !strings.Contains(string(b), "encryption=true") || !strings.Contains(string(b), "level=DEBUG") {
		t.Fatalf("WithEnv/WithLogLevel not applied; log:\n%s", b)
	}
	if h := healthOK(t, n); h.Raft.State != "Leader" || h.Raft.LeaderID != "node1" {
		t.Fatalf("single node is not leader: %+v", h.Raft)
	}
	if l := c.Leader(); l != n {
		t.Fatalf("Leader() = %s", l.ID())
	}
	ctx := context.Background()
	res, err := n.Client().Push(ctx, []PushItem{{Queue: "harness", Partition: "p", Payload: map[string]int{"n": 1}, TransactionID: "tx-1"}})
	if err != nil || res[0].Status != "queued" {
		t.Fatalf("push: %v %+v", err, res)
	}
	before, err := c.WaitConverged(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	n.Kill()
	if n.Running() {
		t.Fatal("Running() after Kill")
	}
	if _, err := n.Client().Health(ctx); err == nil {
		t.Fatal("health answered after Kill")
	}
	n.Restart()
	if !n.Running() {
		t.Fatal("not Running() after Restart")
	}
	if _, err := c.WaitLeader(LeaderTimeout); err != nil {
		t.Fatal(err)
	}
	healthOK(t, n)
	after, err := c.WaitConverged(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if after.AppliedIndex < before.AppliedIndex {
		t.Fatalf("applied index went back from %d to %d", before.AppliedIndex, after.AppliedIndex)
	}
	msgs, err := n.Client().Pop(ctx, "harness", PopParams{Batch: 10})
	if err != nil || len(msgs) != 1 || msgs[0].TransactionID != "tx-1" || msgs[0].ID != res[0].MessageID {
		t.Fatalf("pop after restart: %v %+v", err, msgs)
	}

	// Pause: the process keeps its sockets but answers nothing.
	n.Pause()
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = n.Client().Health(tctx)
	cancel()
	if err == nil {
		t.Fatal("paused node answered")
	}
	n.Resume()
	healthOK(t, n)

	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if n.ExitCode() != 0 {
		t.Fatalf("exit code %d", n.ExitCode())
	}
	b, err := os.ReadFile(n.LogPath())
	if err != nil || len(b) == 0 {
		t.Fatalf("log file: %v (%d bytes)", err, len(b))
	}
}

// TestThreeNodes: a three-node cluster elects a leader, replicates to every
// node, re-elects when the leader is paused, catches the paused node up,
// and grows with AddNode.
func TestThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("three processes")
	}
	c := Start(t, 3)
	leader := c.Leader()
	for i := range 3 {
		h := healthOK(t, c.Node(i))
		if h.Raft.LeaderID != leader.ID() {
			t.Fatalf("%s sees leader %q, want %s", c.Node(i).ID(), h.Raft.LeaderID, leader.ID())
		}
	}
	ctx := context.Background()
	// Pushes through a follower are forwarded to the leader.
	var follower *Node
	for _, n := range c.Nodes() {
		if n != leader {
			follower = n
			break
		}
	}
	for i := range 5 {
		if _, err := follower.Client().Push(ctx, []PushItem{{Queue: "three", Payload: i, TransactionID: fmt.Sprint("t", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	d1, err := c.WaitConverged(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	leader.Pause()
	newLeader, err := c.WaitLeader(LeaderTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if newLeader == leader {
		t.Fatal("paused node still reported as leader")
	}
	if _, err := newLeader.Client().Retrying(10*time.Second).Push(ctx, []PushItem{{Queue: "three", Payload: "after", TransactionID: "t-after"}}); err != nil {
		t.Fatal(err)
	}
	leader.Resume()
	d2, err := c.WaitConverged(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d2.AppliedIndex <= d1.AppliedIndex {
		t.Fatalf("applied index %d not beyond %d", d2.AppliedIndex, d1.AppliedIndex)
	}

	n4 := c.AddNode(t)
	if n4.ID() != "node4" {
		t.Fatalf("AddNode id %s", n4.ID())
	}
	if _, err := c.WaitConverged(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	members, err := n4.Client().Members(ctx)
	if err != nil || len(members) != 4 {
		t.Fatalf("members seen by node4: %v %+v", err, members)
	}
}
