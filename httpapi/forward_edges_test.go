package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi"
	"github.com/crownmq/crown/httpapi/relay"
	"github.com/crownmq/crown/raftnode"
)

// followerView makes the HTTP layer see its node as a follower of the
// leader "ghost" (whose HTTP address is registered in the replicated
// registry) once follow is called: the stand-in for that leader is an
// httptest server the test scripts.
type followerView struct {
	httpapi.Cluster
	following atomic.Bool
	// loseOnLease makes the next pop's proposal find leadership gone: it
	// answers ErrNotLeader (nothing appended) and the node follows "ghost".
	loseOnLease atomic.Bool
	mu          sync.Mutex
	view        context.Context
	change      context.CancelFunc
}

func (c *followerView) IsLeader() bool { return !c.following.Load() && c.Cluster.IsLeader() }

func (c *followerView) Leader() (string, string) {
	if c.following.Load() {
		return "ghost", "127.0.0.1:1"
	}
	return c.Cluster.Leader()
}

func (c *followerView) WaitLeader(ctx context.Context) (string, string, error) {
	if c.following.Load() {
		return "ghost", "127.0.0.1:1", nil
	}
	return c.Cluster.WaitLeader(ctx)
}

func (c *followerView) Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error) {
	if c.following.Load() {
		return nil, 0, raftnode.ErrNotLeader
	}
	if _, lease := cmd.(*fsm.LeaseCapped); lease && c.loseOnLease.CompareAndSwap(true, false) {
		c.following.Store(true)
		return nil, 0, raftnode.ErrNotLeader
	}
	return c.Cluster.Propose(ctx, cmd)
}

func (c *followerView) LeaderView() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view == nil {
		c.view, c.change = context.WithCancel(context.Background())
	}
	return c.view
}

// leaderChanged ends the current leader view, as a new leader being learned would.
func (c *followerView) leaderChanged() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.change != nil {
		c.change()
	}
	c.view, c.change = context.WithCancel(context.Background())
}

// newFollowerStack starts a stack whose HTTP layer follows the scripted
// leader served by handler.
func newFollowerStack(t *testing.T, handler http.HandlerFunc, opts ...stackOption) (*stack, *followerView) {
	s, view, _ := newFollowerStackServer(t, handler, opts...)
	return s, view
}

// newFollowerStackServer is newFollowerStack also returning the scripted leader.
func newFollowerStackServer(t *testing.T, handler http.HandlerFunc, opts ...stackOption) (*stack, *followerView, *httptest.Server) {
	t.Helper()
	return followLeader(t, asOldLeader(handler), opts...)
}

// followLeader starts a stack whose HTTP layer follows the leader served
// by leader.
func followLeader(t *testing.T, leader http.Handler, opts ...stackOption) (*stack, *followerView, *httptest.Server) {
	t.Helper()
	var view *followerView
	s := newStackWrapped(t, func(c httpapi.Cluster) httpapi.Cluster {
		view = &followerView{Cluster: c}
		return view
	}, opts...)
	return s, view, followGhostAt(t, s, view, httptest.NewServer(leader))
}

// followGhost registers the scripted leader served by handler as "ghost"
// and makes view follow it.
func followGhost(t *testing.T, s *stack, view *followerView, handler http.Handler) *httptest.Server {
	t.Helper()
	return followGhostAt(t, s, view, httptest.NewServer(asOldLeader(handler)))
}

// asOldLeader serves handler as a leader of a version before relay
// connections: its upgrade gets 404 and followers forward over HTTP, so the
// handler sees only forwarded requests, as plain HTTP requests.
func asOldLeader(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == relay.Path {
			http.NotFound(w, r)
			return
		}
		handler.ServeHTTP(w, r)
	})
}

// asRelayLeader serves handler over followers' relay connections, as a
// Crown leader does.
func asRelayLeader(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == relay.Path {
			relay.Upgrade(w, r, relay.ServerConfig{Handler: handler, MaxRequestBytes: 32 << 20,
				Headers: []string{"Content-Type", "X-Crown-Index"}})
			return
		}
		t := "a follower forwarded over HTTP to a leader that takes relay connections: " + r.URL.RequestURI()
		http.Error(w, t, http.StatusTeapot)
	})
}

// followGhostAt registers leader as "ghost" and makes view follow it.
func followGhostAt(t *testing.T, s *stack, view *followerView, leader *httptest.Server) *httptest.Server {
	t.Helper()
	t.Cleanup(leader.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := s.Node.Propose(ctx, &fsm.RegisterNode{ID: "ghost", RaftAddr: "127.0.0.1:1", HTTPAddr: leader.URL}); err != nil {
		t.Fatal(err)
	}
	view.following.Store(true)
	return leader
}

// leaderStandIn answers like a Crown leader with an empty queue: a pop
// with wait=true long-polls for its timeout, then 204.
func leaderStandIn(uris chan<- string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		select {
		case uris <- r.URL.RequestURI():
		default:
		}
		q := r.URL.Query()
		if q.Get("wait") == "true" {
			ms, _ := strconv.Atoi(q.Get("timeout"))
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

const forwardPush = `{"items":[{"queue":"fwd","partition":"p","payload":{"n":1},"transactionId":"fwd-1"}]}`

// README "What happens during a failover": "a request that had already been
// handed to the old leader when it died may or may not have committed: the
// client gets `503 {"code":"unknown_outcome"}` (or `forwarding_failed`)";
// "then it fails with `503 {"code":"no_leader"}`, and nothing was applied"
// is only for a request no leader received.
//
// The leader reads the whole forwarded push and then its connection breaks
// (the process died) before it answers: the follower must say the outcome
// is unknown, never no_leader.
func TestForwardConnectionLostAfterSendIsForwardingFailed(t *testing.T) {
	var got atomic.Int32
	s, _ := newFollowerStack(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		got.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	})
	r := s.post("/api/v1/push", forwardPush)
	if got.Load() != 1 {
		t.Fatalf("the leader received %d forwarded requests, want 1", got.Load())
	}
	if r.Status != http.StatusServiceUnavailable || asObj(t, r.Body)["code"] != "forwarding_failed" {
		t.Fatalf("push whose forwarded request was received and then lost: %d %s, want 503 forwarding_failed", r.Status, r.Raw)
	}
}

// README "What happens during a failover": "a request a follower forwarded
// to a leader that then froze or was cut off (its connection stays open,
// nothing answers) is given up as soon as that follower learns of the change
// of leader, and answered `503 {"code":"forwarding_failed"}`".
func TestForwardFrozenLeaderIsForwardingFailed(t *testing.T) {
	testFrozenLeaderIsForwardingFailed(t, newFollowerStack)
}

// followerStack starts a stack following a scripted leader served by
// handler (newFollowerStack over HTTP, newRelayFollowerStack over a relay
// connection).
type followerStack func(t *testing.T, handler http.HandlerFunc, opts ...stackOption) (*stack, *followerView)

func testFrozenLeaderIsForwardingFailed(t *testing.T, follow followerStack) {
	release := make(chan struct{})
	var got atomic.Int32
	s, view := follow(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
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

// queen-api.md 5: "**Pops are writes.** A pop changes lease state and must
// go through the log"; README "What happens during a failover": "a request
// that had already been handed to the old leader when it died may or may
// not have committed: the client gets `503 {"code":"unknown_outcome"}` (or
// `forwarding_failed`)", while `503 {"code":"no_leader"}` means "nothing
// was applied".
//
// A follower forwards a pop (a GET) to the leader over a kept-alive
// connection; the leader reads it (and may lease messages for it) and dies
// before answering. Go's HTTP client would resend a GET whose reused
// connection broke after it was written; the request was sent, so the
// answer must be forwarding_failed (it may have applied), never no_leader
// ("nothing was applied") from the resend's failed dial, and a reachable
// leader must never get the pop twice.
func TestForwardPopLostAfterSendIsNotNoLeader(t *testing.T) {
	var pops atomic.Int32
	var leader *httptest.Server
	s, _, srv := newFollowerStackServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		if r.Method == http.MethodPost { // the warm-up push: answered, the connection kept alive
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"ok":true}`)
			return
		}
		pops.Add(1)
		// The leader dies: no new connection is accepted, this one breaks.
		leader.Listener.Close()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}, func(c *httpapi.Config) { c.LeaderWait = 500 * time.Millisecond })
	leader = srv
	if r := s.post("/api/v1/push", forwardPush); r.Status != http.StatusOK {
		t.Fatalf("warm-up push: %d %s", r.Status, r.Raw)
	}
	r := s.do(http.MethodGet, "/api/v1/pop/queue/fwd?batch=1&wait=false", nil)
	if n := pops.Load(); n != 1 {
		t.Errorf("the leader received the forwarded pop %d times, want once", n)
	}
	code := ""
	if o, ok := r.Body.(map[string]any); ok {
		code, _ = o["code"].(string)
	}
	if r.Status != http.StatusServiceUnavailable || (code != "forwarding_failed" && code != "unknown_outcome") {
		t.Fatalf("pop the leader received before its connection broke: %d %s, want 503 forwarding_failed "+
			"or unknown_outcome (the leader may have leased messages for it)", r.Status, r.Raw)
	}
}

// queen-api.md 1.6: "a long-poll pop MUST answer (204) when its `timeout`
// elapses, not later"; README "What happens during a failover": "parked
// long-polls stay parked on their node and wake once the new leader
// commits"; pop.go forwardPop: "asks the leader for one immediate pop
// attempt".
//
// A parked long-poll on the leader wakes (a push arrived) and proposes its
// lease just as leadership moves: Propose answers ErrNotLeader. The pop must
// then ask the new leader for one immediate attempt and stay parked here
// under its own deadline, not relay the client's request (wait=true and the
// full timeout) to long-poll there for a whole timeout more.
func TestForwardPopAfterLostLeadershipKeepsItsTimeout(t *testing.T) {
	uris := make(chan string, 4)
	s, view := newFollowerStack(t, leaderStandIn(uris))
	view.following.Store(false) // lead for now; the first pop proposal loses leadership
	view.loseOnLease.Store(true)
	go func() {
		time.Sleep(600 * time.Millisecond)
		s.post("/api/v1/push", forwardPush) // wakes the parked pop
	}()
	const timeout = 1000 * time.Millisecond
	start := time.Now()
	r := s.do(http.MethodGet, "/api/v1/pop/queue/fwd?batch=1&wait=true&timeout=1000", nil)
	took := time.Since(start)
	forwarded := ""
	select {
	case forwarded = <-uris:
	default:
	}
	if view.loseOnLease.Load() {
		t.Fatal("staging failed: the pop never proposed a lease")
	}
	if took > timeout+400*time.Millisecond {
		t.Fatalf("long-poll pop with timeout=1000 answered %d after %v (forwarded to the new leader as %q): "+
			"later than its timeout", r.Status, took.Round(time.Millisecond), forwarded)
	}
}

// staleOnce makes the next LeaderView a view that has already ended, as
// when the leader changes between a follower resolving the leader and
// sending to it.
type staleOnce struct {
	*followerView
	stale atomic.Bool
}

func (c *staleOnce) LeaderView() context.Context {
	if c.stale.CompareAndSwap(true, false) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}
	return c.followerView.LeaderView()
}

// A forwarded push abandoned because the leader changed before anything of
// it was written applied nothing: the follower sends it to the leader it
// learns next instead of answering "may have been applied". CI once saw the
// follower answer 503 forwarding_failed for a push sent right after the
// leader's SIGKILL, the dead leader's successor being elected meanwhile.
// The follower must see the ended view before it starts writing: when only
// the watch's cancel (on its own goroutine) caught it, 21 runs in 300 under
// -race wrote the request first and had to answer "may have been applied".
func TestForwardAbandonedBeforeWritingGoesToTheNextLeader(t *testing.T) {
	var got atomic.Int32
	var view *staleOnce
	s := newStackWrapped(t, func(c httpapi.Cluster) httpapi.Cluster {
		view = &staleOnce{followerView: &followerView{Cluster: c}}
		return view
	})
	followGhost(t, s, view.followerView, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		got.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `[{"status":"queued","transaction_id":"after-change"}]`)
	}))
	view.stale.Store(true)
	r := s.post("/api/v1/push", `{"items":[{"queue":"q","payload":1,"transactionId":"after-change"}]}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("push through the follower: %d %s, want the next leader's 201", r.Status, r.Raw)
	}
	if n := got.Load(); n != 1 {
		t.Fatalf("the leader received the push %d times, want once", n)
	}
}

// refusingReadIndex stays leader but refuses every read index, as a leader
// does while it hands leadership over.
type refusingReadIndex struct{ httpapi.Cluster }

func (refusingReadIndex) ReadIndex() (uint64, error) {
	return 0, fmt.Errorf("%w: leadership transfer in progress", raftnode.ErrNotLeader)
}

// A linearizable read on a leader whose read index is refused (leadership
// is moving) waits for a leader within --leader-wait, then answers 503
// no_leader. It used to retry in a tight loop that never looked at the
// clock or the client: a transfer that did not finish held the request,
// and a core, for good.
func TestLinearizableReadWhileLeadershipMovesGivesUpAtLeaderWait(t *testing.T) {
	s := newStackWrapped(t, func(c httpapi.Cluster) httpapi.Cluster { return refusingReadIndex{c} },
		func(c *httpapi.Config) { c.LeaderWait = 300 * time.Millisecond })
	start := time.Now()
	r := s.do(http.MethodGet, "/api/v1/resources/queues?consistency=linearizable", nil)
	if r.Status != http.StatusServiceUnavailable || asObj(t, r.Body)["code"] != "no_leader" {
		t.Fatalf("linearizable read while the read index is refused: %d %s, want 503 no_leader", r.Status, r.Raw)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("gave up after %v, before --leader-wait (300ms)", took)
	}
}
