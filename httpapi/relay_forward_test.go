package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
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
func newRelayFollowerStack(t *testing.T, handler http.HandlerFunc) (*stack, *followerView) {
	t.Helper()
	var view *followerView
	s := newStackWrapped(t, func(c httpapi.Cluster) httpapi.Cluster {
		view = &followerView{Cluster: c}
		return view
	})
	followGhostAt(t, s, view, httptest.NewServer(asRelayLeader(handler)))
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
	release := make(chan struct{})
	var got atomic.Int32
	s, view := newRelayFollowerStack(t, func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for got.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		view.leaderChanged()
	}()
	start := time.Now()
	r := s.post("/api/v1/push", forwardPush)
	if r.Status != http.StatusServiceUnavailable || asObj(t, r.Body)["code"] != "forwarding_failed" || time.Since(start) > 4*time.Second {
		t.Fatalf("push held by a frozen leader: %d %s after %v, want 503 forwarding_failed once the leader changed",
			r.Status, r.Raw, time.Since(start))
	}
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
	arrived := make(chan struct{}, 2)
	second := make(chan struct{})
	var requests atomic.Int32
	var overlapped atomic.Bool
	s, _ := newRelayFollowerStack(t, func(w http.ResponseWriter, r *http.Request) {
		n := requests.Add(1)
		arrived <- struct{}{}
		switch n {
		case 1:
			select {
			case <-second:
				overlapped.Store(true)
			case <-time.After(5 * time.Second):
			}
		case 2:
			close(second)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	answers := make(chan popAnswer, 2)
	s.startPop(context.Background(), 0, "/api/v1/pop/queue/relay?batch=1", answers)
	<-arrived
	s.startPop(context.Background(), 1, "/api/v1/pop/queue/relay?batch=1", answers)
	for range 2 {
		if a := nextAnswer(t, answers, "the relayed pops"); a.err != nil || a.status != http.StatusNoContent {
			t.Fatalf("pop %d answered %d (%v), want the leader's 204", a.who, a.status, a.err)
		}
	}
	if !overlapped.Load() {
		t.Error("the second pop was relayed only after the leader answered the first")
	}
}
