package httpapi_test

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crownmq/crown/httpapi"
)

// The forwarding tests of forward_edges_test.go script a leader of the
// version before relay connections (the follower forwards over HTTP);
// these script one that takes them, as a Crown leader does.

// newRelayFollowerStack starts a stack whose HTTP layer follows a scripted
// leader that serves handler over relay connections.
func newRelayFollowerStack(t *testing.T, handler http.HandlerFunc, opts ...stackOption) (*stack, *followerView) {
	t.Helper()
	s, view, _ := followLeader(t, asRelayLeader(handler), opts...)
	return s, view
}

// A forwarded push reaches the leader's handler with the client's body and
// headers and the hop count, and the leader's answer comes back unchanged.
func TestRelayForwardCarriesRequestAndAnswer(t *testing.T) {
	var saw atomic.Value
	s, _ := newRelayFollowerStack(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		saw.Store(r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type") + " " + r.Header.Get("X-Crown-Hops") + " " + string(body))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Crown-Index", "7")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `[{"index":0,"status":"queued","transactionId":"fwd-1"}]`)
	})
	r := s.post("/api/v1/push", forwardPush)
	if r.Status != http.StatusCreated || string(r.Raw) != `[{"index":0,"status":"queued","transactionId":"fwd-1"}]` {
		t.Fatalf("relayed push answered %d %s, want the leader's 201 and body", r.Status, r.Raw)
	}
	if want := "POST /api/v1/push application/json 1 " + forwardPush; saw.Load() != want {
		t.Fatalf("the leader saw %q, want %q", saw.Load(), want)
	}
}

// README "What happens during a failover": a request forwarded to a leader
// that then froze is given up once the follower learns of the change of
// leader: forwarding_failed. Over a relay connection as over HTTP.
func TestRelayForwardFrozenLeaderIsForwardingFailed(t *testing.T) {
	testFrozenLeaderIsForwardingFailed(t, newRelayFollowerStack)
}

// An answer the leader aborted may follow an applied write: forwarding_failed,
// never no_leader ("nothing was applied").
func TestRelayForwardAbortedAnswerIsForwardingFailed(t *testing.T) {
	s, _ := newRelayFollowerStack(t, func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler)
	})
	r := s.post("/api/v1/push", forwardPush)
	if r.Status != http.StatusServiceUnavailable || asObj(t, r.Body)["code"] != "forwarding_failed" {
		t.Fatalf("push whose answer the leader aborted: %d %s, want 503 forwarding_failed", r.Status, r.Raw)
	}
}

// As TestFollowerPassesTheTurnOnceTheRelayedPopIsWritten, over a relay
// connection: the line's turn passes once the pop's frame is written.
func TestRelayFollowerPassesTheTurnOnceThePopIsWritten(t *testing.T) {
	testPassesTheTurnOnceThePopIsWritten(t, newRelayFollowerStack)
}

// A leader whose relay connection cannot even be opened (its process is
// gone) applied nothing: the follower waits for a leader within
// --leader-wait and answers no_leader, never forwarding_failed ("may have
// been applied").
func TestRelayForwardToAnUnreachableLeaderIsNoLeader(t *testing.T) {
	var got atomic.Int32
	s, _, leader := followLeader(t, asRelayLeader(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
	})), func(c *httpapi.Config) { c.LeaderWait = 300 * time.Millisecond })
	leader.Close() // its port now refuses connections
	r := s.post("/api/v1/push", forwardPush)
	if r.Status != http.StatusServiceUnavailable || asObj(t, r.Body)["code"] != "no_leader" {
		t.Fatalf("push to an unreachable leader: %d %s, want 503 no_leader", r.Status, r.Raw)
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("the leader's handler ran %d times", n)
	}
}
