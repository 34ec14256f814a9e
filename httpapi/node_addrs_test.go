package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
)

// A follower keeps the registry's addresses between requests, and a change
// of the leader's registered address (a restart with a new one) reaches the
// very next relayed request: the copy is dropped when the change commits.
func TestRelayFollowsARegisteredAddressChange(t *testing.T) {
	var first, second atomic.Int64
	answer := func(n *atomic.Int64) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`[{"index":0,"status":"queued","transactionId":"fwd-1"}]`))
		}
	}
	s, _ := newFollowerStack(t, answer(&first))
	for range 3 {
		if r := s.post("/api/v1/push", forwardPush); r.Status != http.StatusOK {
			t.Fatalf("push: %d %s", r.Status, r.Raw)
		}
	}
	moved := httptest.NewServer(asOldLeader(answer(&second)))
	t.Cleanup(moved.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := s.Node.Propose(ctx, &fsm.RegisterNode{ID: "ghost", RaftAddr: "127.0.0.1:1", HTTPAddr: moved.URL}); err != nil {
		t.Fatal(err)
	}
	if r := s.post("/api/v1/push", forwardPush); r.Status != http.StatusOK {
		t.Fatalf("push after the move: %d %s", r.Status, r.Raw)
	}
	if first.Load() != 3 || second.Load() != 1 {
		t.Fatalf("the old address received %d pushes and the new one %d, want 3 and 1", first.Load(), second.Load())
	}
}

// A node outside the Raft configuration cannot register: a removed node
// still running, before it notices its removal, registered through the
// leader it knew and put itself back in the registry the removal had just
// cleaned. A member re-registering (new addresses) still can.
func TestRegisterRefusesANodeOutsideTheConfiguration(t *testing.T) {
	s := newStack(t)
	r := s.post("/internal/v1/register", obj{"id": "ghost", "raft_addr": "127.0.0.1:1", "http_addr": "http://127.0.0.1:1"})
	wantErrorAnyText(t, "registering a node outside the configuration", r, http.StatusConflict, "conflict", "")
	members, err := s.Node.Members()
	if err != nil || len(members) != 1 {
		t.Fatalf("members %+v, %v", members, err)
	}
	// KeepRegistered, quiet for 15 s after its own registration, does not
	// put the old address back before the check below.
	r = s.post("/internal/v1/register", obj{"id": "node1", "raft_addr": members[0].Address, "http_addr": "http://127.0.0.1:2"})
	if r.Status != http.StatusOK {
		t.Fatalf("a member's registration: %d %s", r.Status, r.Raw)
	}
	nodes, err := s.State.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || nodes[0].ID != "node1" || nodes[0].HTTPAddr != "http://127.0.0.1:2" {
		t.Fatalf("registry %+v, want node1 alone at its new HTTP address", nodes)
	}
}
