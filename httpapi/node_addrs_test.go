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
