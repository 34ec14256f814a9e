package main_test

// Membership changes that cannot commit at once: what the answer says, and
// that repeating the request finishes the change.

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// removeWithoutQuorum removes a live follower of a three-node cluster while
// the other follower is down: the new configuration (leader and the down
// follower) needs the down node to commit, so the leader appends the change,
// loses its quorum and steps down. It returns the leader, the removed node,
// the down node and the answer's error.
func removeWithoutQuorum(t *testing.T, ctx context.Context, c *tc.Cluster) (leader, removed, down *tc.Node, err error) {
	t.Helper()
	leader, werr := c.WaitLeader(20 * time.Second)
	if werr != nil {
		t.Fatal(werr)
	}
	// Every member registered first: the registry entry the removal
	// leaves behind is what a repeat must finish (a node that registered
	// only after its removal used to stand in for it).
	clusterWaitMembers(t, ctx, c.Nodes(), 3, "")
	followers := clusterFollowers(c, leader)
	removed, down = followers[0], followers[1]
	down.Kill()
	// Forced: without, the leader refuses a change that would stop the
	// cluster (TestClusterChangeThatWouldStopTheClusterIsRefused).
	_, err = leader.Client().Do(ctx, "DELETE", "/api/v1/cluster/members/"+removed.ID()+"?force=true", nil, nil)
	return leader, removed, down, err
}

// docs/deployments.md: a membership change whose new configuration's
// majority does not answer is refused with 409 conflict, naming the
// members down, and changes nothing (it used to be appended, the leader
// stepped down and the cluster stopped until the down member returned).
func TestClusterChangeThatWouldStopTheClusterIsRefused(t *testing.T) {
	c := tc.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader, werr := c.WaitLeader(20 * time.Second)
	if werr != nil {
		t.Fatal(werr)
	}
	// Every member registered, so that the leader can ask each one.
	clusterWaitMembers(t, ctx, c.Nodes(), 3, "")
	followers := clusterFollowers(c, leader)
	live, down := followers[0], followers[1]
	down.Kill()
	var he *tc.HTTPError
	// Through the live follower, as an operator's crownctl may go.
	err := live.Client().RemoveMember(ctx, live.ID())
	if !errors.As(err, &he) || he.Status != http.StatusConflict || !strings.Contains(he.Message, down.ID()) {
		t.Fatalf("removing the live %s with %s down: %v, want 409 conflict naming %s", live.ID(), down.ID(), err, down.ID())
	}
	err = leader.Client().AddMember(ctx, "node9", "127.0.0.1:1", "")
	if !errors.As(err, &he) || he.Status != http.StatusConflict {
		t.Fatalf("adding a voter with %s down: %v, want 409 conflict", down.ID(), err)
	}
	// Nothing changed, and the cluster still commits.
	clusterWaitMembers(t, ctx, []*tc.Node{leader, live}, 3, "node9")
	if _, err := live.Client().Push(ctx, []tc.PushItem{{Queue: "still", Payload: 1, TransactionID: "up"}}); err != nil {
		t.Fatalf("push after the refused changes: %v", err)
	}
	// Removing the member that is down keeps a majority up: allowed.
	if err := leader.Client().RemoveMember(ctx, down.ID()); err != nil {
		t.Fatalf("removing the down %s: %v", down.ID(), err)
	}
	clusterWaitMembers(t, ctx, []*tc.Node{leader, live}, 2, down.ID())
}

// TestClusterRemoveThatLosesTheQuorumIsAnUnknownOutcome: a removal whose
// configuration change was appended but whose leader lost its quorum before
// it committed takes effect once the down member returns, so the answer is
// 503 unknown_outcome (README "Errors": it may have applied), not
// unavailable (nothing done).
func TestClusterRemoveThatLosesTheQuorumIsAnUnknownOutcome(t *testing.T) {
	c := tc.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, removed, down, err := removeWithoutQuorum(t, ctx, c)
	var he *tc.HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusServiceUnavailable || he.Code != "unknown_outcome" {
		t.Fatalf("removing %s with %s down: %v, want 503 unknown_outcome", removed.ID(), down.ID(), err)
	}
	// It did apply: with the down node back, the change commits.
	down.Restart()
	others := []*tc.Node{}
	for _, n := range c.Nodes() {
		if n != removed {
			others = append(others, n)
		}
	}
	clusterWaitMembers(t, ctx, others, 2, removed.ID())
}

// TestClusterRemoveRepeatedAfterAnUnknownOutcomeFinishes: the removal above
// left the Raft configuration when its change committed, but its node
// registry write never happened. Repeating the request, as an unknown
// outcome invites, finishes it: 200 and the registry no longer lists the
// node, where it answered 404 and left the registry entry for good.
func TestClusterRemoveRepeatedAfterAnUnknownOutcomeFinishes(t *testing.T) {
	c := tc.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, removed, down, err := removeWithoutQuorum(t, ctx, c)
	if err == nil {
		t.Fatalf("removing %s with %s down succeeded", removed.ID(), down.ID())
	}
	down.Restart()
	var others []*tc.Node
	for _, n := range c.Nodes() {
		if n != removed {
			others = append(others, n)
		}
	}
	clusterWaitMembers(t, ctx, others, 2, removed.ID())
	if err := others[0].Client().Retrying(20*time.Second).RemoveMember(ctx, removed.ID()); err != nil {
		t.Fatalf("repeating the removal of %s: %v", removed.ID(), err)
	}
	for _, n := range others {
		var st struct {
			Nodes []struct {
				ID string `json:"id"`
			} `json:"nodes"`
		}
		if _, err := n.Client().Retrying(20*time.Second).Do(ctx, "GET", "/api/v1/system/shared-state?consistency=linearizable", nil, &st); err != nil {
			t.Fatal(err)
		}
		for _, r := range st.Nodes {
			if r.ID == removed.ID() {
				t.Errorf("%s's node registry still lists the removed %s: %+v", n.ID(), removed.ID(), st.Nodes)
			}
		}
	}
	// Once both are done, the id is unknown: 404, as before.
	err = others[1].Client().RemoveMember(ctx, removed.ID())
	var he *tc.HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusNotFound {
		t.Fatalf("removing %s a third time: %v, want 404", removed.ID(), err)
	}
}

// TestClusterMembershipRefusalsAre409: a change the Raft configuration
// refuses whatever the timing (another member's Raft address, a transfer
// to the leader itself or in a one-node cluster, removing the last voter)
// answers 409 conflict, not 503, which says "retry" (README "Errors"), and
// changes nothing: the last voter refused its own removal stays in the node
// registry, where it had already been taken out.
func TestClusterMembershipRefusalsAre409(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want409 := func(what string, err error) {
		t.Helper()
		var he *tc.HTTPError
		if !errors.As(err, &he) || he.Status != http.StatusConflict || he.Code != "conflict" {
			t.Errorf("%s: %v, want 409 conflict", what, err)
		}
	}
	one := tc.Start(t, 1)
	n := one.Node(0)
	cl := n.Client()
	registered := func() bool {
		var st struct {
			Nodes []struct {
				ID string `json:"id"`
			} `json:"nodes"`
		}
		if _, err := cl.Do(ctx, "GET", "/api/v1/system/shared-state?consistency=linearizable", nil, &st); err != nil {
			t.Fatal(err)
		}
		return len(st.Nodes) == 1 && st.Nodes[0].ID == n.ID()
	}
	for deadline := time.Now().Add(10 * time.Second); !registered(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never registered", n.ID())
		}
	}
	want409("removing the last voter", cl.RemoveMember(ctx, n.ID()))
	_, err := cl.Do(ctx, "POST", "/api/v1/cluster/transfer-leadership", map[string]any{}, nil)
	want409("transfer in a one-node cluster", err)
	if !registered() {
		t.Errorf("%s is out of the node registry after its refused removal", n.ID())
	}

	three := tc.Start(t, 3)
	leader, err := three.WaitLeader(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	follower := clusterFollowers(three, leader)[0]
	// Through a follower, as an operator would: the leader's answer comes back.
	fc := follower.Client()
	want409("adding node9 at a member's Raft address", fc.AddMember(ctx, "node9", leader.RaftAddr(), "http://127.0.0.1:1"))
	_, err = fc.Do(ctx, "POST", "/api/v1/cluster/transfer-leadership", map[string]any{"id": leader.ID()}, nil)
	want409("transfer to the leader itself", err)
	members, err := leader.Client().Members(ctx)
	if err != nil || len(members) != 3 {
		t.Fatalf("members after the refusals: %+v (%v), want the three", members, err)
	}
	if now, err := three.WaitLeader(20 * time.Second); err != nil || now != leader {
		t.Errorf("leader after the refusals: %v (%v), want %s", now, err, leader.ID())
	}
}

// TestClusterJoinRefusesAMembersIDAtAnotherAddress: a process started with
// --join and the id of a live member (a copied command line, a typo) asked
// the cluster to move that member's Raft address to itself, and got it: the
// real member was cut off from the log and the registry's address for it
// flapped between the two. The join (POST /internal/v1/join, what --join
// sends) now answers 409 and changes nothing; moving a member stays the
// operator's explicit `crownctl cluster add`.
func TestClusterJoinRefusesAMembersIDAtAnotherAddress(t *testing.T) {
	c := tc.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader, err := c.WaitLeader(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	victim := clusterFollowers(c, leader)[0]
	// Running members have registered their HTTP addresses.
	clusterWaitMembers(t, ctx, c.Nodes(), 3, "")
	for _, via := range c.Nodes() {
		_, err := via.Client().Do(ctx, "POST", "/internal/v1/join", map[string]string{
			"id": victim.ID(), "raft_addr": "127.0.0.1:1", "http_addr": "http://127.0.0.1:1"}, nil)
		var he *tc.HTTPError
		if !errors.As(err, &he) || he.Status != http.StatusConflict || he.Code != "conflict" {
			t.Errorf("join as %s through %s: %v, want 409 conflict", victim.ID(), via.ID(), err)
		}
	}
	members, err := leader.Client().Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.ID == victim.ID() && m.RaftAddr != victim.RaftAddr() {
			t.Errorf("%s's Raft address is now %s, want %s", m.ID, m.RaftAddr, victim.RaftAddr())
		}
	}
	// Joining again as the member it is, at its own address, is harmless.
	if _, err := victim.Client().Do(ctx, "POST", "/internal/v1/join", map[string]string{
		"id": victim.ID(), "raft_addr": victim.RaftAddr(), "http_addr": victim.URL()}, nil); err != nil {
		t.Errorf("join as itself: %v", err)
	}
}

// TestClusterJoinMovesAMemberThatNeverRan: the refusal above is for a
// member that runs. A member added by hand at an address its process does
// not use (`crownctl cluster add` with a mistyped port) never answers, and
// the process's own --join still moves it to the address it advertises, as
// it always did.
func TestClusterJoinMovesAMemberThatNeverRan(t *testing.T) {
	c := tc.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader, err := c.WaitLeader(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cl := leader.Client().Retrying(20 * time.Second)
	// A port that answers nothing, and an HTTP address that answers nothing.
	if err := cl.AddMember(ctx, "node9", "127.0.0.1:1", "http://127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Do(ctx, "POST", "/internal/v1/join", map[string]string{
		"id": "node9", "raft_addr": "127.0.0.1:2", "http_addr": "http://127.0.0.1:2"}, nil); err != nil {
		t.Fatalf("join as node9 at its own address: %v", err)
	}
	members, err := cl.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	moved := false
	for _, m := range members {
		moved = moved || (m.ID == "node9" && m.RaftAddr == "127.0.0.1:2")
	}
	if !moved {
		t.Errorf("members after the join: %+v, want node9 at 127.0.0.1:2", members)
	}
	if err := cl.RemoveMember(ctx, "node9"); err != nil {
		t.Fatal(err)
	}
}

// docs/deployments.md: "A removed node restarted on its old data does not
// add itself back, --join or not ... and, started with --join, logs a
// warning saying so". It used to wait in silence for a leader that never
// calls.
func TestClusterRemovedNodeRestartedWithJoinSaysItIsOutside(t *testing.T) {
	c := tc.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	three := c.Nodes()
	n4 := c.AddNode(t)
	clusterWaitMembers(t, ctx, append(three, n4), 4, "")
	if err := three[0].Client().Retrying(20*time.Second).RemoveMember(ctx, n4.ID()); err != nil {
		t.Fatalf("remove %s: %v", n4.ID(), err)
	}
	clusterWaitMembers(t, ctx, three, 3, n4.ID())
	// The removed node learns of its removal before it is stopped.
	deadline := time.Now().Add(20 * time.Second)
	for {
		members, err := n4.Client().Members(ctx)
		inside := err != nil
		for _, m := range members {
			inside = inside || m.ID == n4.ID()
		}
		if !inside {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still lists itself 20 s after its removal: %+v (%v)", n4.ID(), members, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := n4.Stop(); err != nil {
		t.Fatal(err)
	}
	n4.Restart() // the same command line, --join included
	const warning = "this node is not a voter in the cluster configuration its data holds"
	for deadline = time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		log, err := n4.CurrentLog()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(log, warning) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s restarted after its removal logged no warning within 10 s:\n%s", n4.ID(), log)
		}
	}
	// And it stays out: the others still list three voters.
	time.Sleep(2 * time.Second)
	clusterWaitMembers(t, ctx, three, 3, n4.ID())
	if err := n4.Stop(); err != nil {
		t.Error(err)
	}
}
