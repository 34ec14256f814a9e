package main_test

// Membership changes that cannot commit at once: what the answer says, and
// that repeating the request finishes the change.

import (
	"context"
	"errors"
	"net/http"
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
	followers := clusterFollowers(c, leader)
	removed, down = followers[0], followers[1]
	down.Kill()
	err = leader.Client().RemoveMember(ctx, removed.ID())
	return leader, removed, down, err
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
