package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi/relay"
	"github.com/crownmq/crown/raftnode"
)

// Headers of the forwarding protocol between nodes.
const (
	// headerIndex carries the Raft index a write was applied at, so the
	// node that relays the answer can wait until it has applied it too
	// (read-your-writes on whichever node the client uses next).
	headerIndex = "X-Crown-Index"
	// headerHops counts forwards, so a request chasing a moving leader
	// cannot loop.
	headerHops = "X-Crown-Hops"
	maxHops    = 2
)

func pathUnescape(s string) (string, error) { return url.PathUnescape(s) }

// forwarder relays requests to the leader: over the leader's relay
// connection (httpapi/relay) when it takes one and the node is configured
// for it, else over pooled keep-alive HTTP connections.
type forwarder struct {
	s      *Server
	client *http.Client
	conns  *relay.Client // nil: --forward-protocol http
}

func newForwarder(s *Server) *forwarder {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     90 * time.Second,
	}
	f := &forwarder{s: s, client: &http.Client{Transport: tr}}
	if s.cfg.ForwardProtocol != ForwardHTTP {
		f.conns = relay.NewClient(relay.ClientConfig{DialTimeout: 2 * time.Second, MaxAnswerBytes: maxAnswerBytes + 1<<20})
	}
	return f
}

// forwardedHeaders are copied from the client's request to the leader.
var forwardedHeaders = []string{"Content-Type", "Accept", "Authorization", "X-OJS-Client-Id", "X-Request-Id", "OJS-Version"}

// leaderURL waits (up to LeaderWait) for a leader other than this node whose
// HTTP address is in the replicated registry.
func (s *Server) leaderURL(ctx context.Context) (string, *apiError) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.LeaderWait)
	defer cancel()
	for {
		id, _, err := s.cluster.WaitLeader(ctx)
		if err != nil {
			return "", noLeader(err)
		}
		if id != s.cfg.NodeID {
			if u := s.nodeURL(id); u != "" {
				return u, nil
			}
		} else if s.cluster.IsLeader() {
			return "", nil
		}
		select {
		case <-ctx.Done():
			return "", noLeader(fmt.Errorf("leader %s has not registered its HTTP address: %w", id, ctx.Err()))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func noLeader(err error) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Code: codeNoLeader,
		Message: "No leader available (election in progress or quorum lost); nothing was applied: " + err.Error()}
}

// nodeURL looks a member's HTTP address up in the node registry.
func (s *Server) nodeURL(id string) string {
	c := &s.nodeAddrs
	c.mu.Lock()
	if c.addrs != nil {
		u := c.addrs[id]
		c.mu.Unlock()
		return u
	}
	gen := c.gen
	c.mu.Unlock()
	nodes, err := s.state.Nodes()
	if err != nil {
		return ""
	}
	addrs := make(map[string]string, len(nodes))
	for _, n := range nodes {
		addrs[n.ID] = n.HTTPAddr
	}
	c.mu.Lock()
	if c.gen == gen { // no change committed since the read began
		c.addrs = addrs
	}
	c.mu.Unlock()
	return addrs[id]
}

// nodeAddrs keeps the node registry's HTTP addresses for nodeURL, which
// every relayed request asks: read from the state each time, the registry
// cost a read transaction and a decode of every node's record, 1.4 % of
// the servers' CPU in a consume run (docs/performance.md, lesson 42). The
// state machine reports every change of the registry after its commit
// (fsm.Events.Nodes, and All after a restore), which drops the copy; a
// copy read while a change committed is not kept (gen).
//
// Lock order: mu is a leaf.
type nodeAddrs struct {
	mu    sync.Mutex
	gen   uint64            // counts the changes reported
	addrs map[string]string // node id -> HTTP address; nil until read
}

// changed drops the copy when an applied batch changed the registry.
func (c *nodeAddrs) changed(e *fsm.Events) {
	if !e.Nodes && !e.All {
		return
	}
	c.mu.Lock()
	c.gen++
	c.addrs = nil
	c.mu.Unlock()
}

// forwardEarly relays a write to the leader before parsing it when this
// node is a follower with a known leader: the leader validates and answers,
// so a forwarded request is parsed once, not twice. It reports whether it
// wrote the response. Without a known leader the request is parsed here
// (bad input still gets its 400) and commit waits for one.
func (s *Server) forwardEarly(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if s.cluster.IsLeader() {
		return false
	}
	id, _ := s.cluster.Leader()
	if id == "" || id == s.cfg.NodeID {
		return false
	}
	leader := s.nodeURL(id)
	if leader == "" {
		return false
	}
	return s.fwd.relay(w, r, body, leader)
}

// receive is the first half of a write handler: it reads the body, relays
// the request to the leader when this node follows a known one, and parses
// it. ok is false when it has written the response.
func receive[C any](s *Server, w http.ResponseWriter, r *http.Request, parse func([]byte) (C, *apiError)) (body []byte, c C, ok bool) {
	body, aerr := readBody(r, s.cfg.Limits.MaxBodyBytes)
	if aerr != nil {
		writeError(w, aerr)
		return nil, c, false
	}
	if s.forwardEarly(w, r, body) {
		return nil, c, false
	}
	if c, aerr = parse(body); aerr != nil {
		writeError(w, aerr)
		return nil, c, false
	}
	return body, c, true
}

// commit applies cmd through Raft and returns its result. On a follower, or
// when leadership moves mid-request, it forwards the original request to
// the leader and relays the leader's answer unchanged; it then returns
// ok=false because the response has been written.
func (s *Server) commit(w http.ResponseWriter, r *http.Request, body []byte, cmd fsm.Command) (any, bool) {
	return s.commitPrepared(w, r, body, cmd, nil, writeError)
}

// commitWith is commit with the error writer of the calling API (the OJS
// endpoints answer in their own error format).
func (s *Server) commitWith(w http.ResponseWriter, r *http.Request, body []byte, cmd fsm.Command,
	writeError func(http.ResponseWriter, *apiError)) (any, bool) {
	return s.commitPrepared(w, r, body, cmd, nil, writeError)
}

// commitPrepared is commitWith with prepare, when not nil, run on this node
// just before it proposes cmd as the leader, and never when the request is
// relayed (the leader it goes to prepares its own). The pushes seal payloads
// there: a follower that parsed a request while no leader was known and then
// won the election itself must seal as any leader does. prepare may run more
// than once if leadership comes and goes; it must be idempotent.
func (s *Server) commitPrepared(w http.ResponseWriter, r *http.Request, body []byte, cmd fsm.Command,
	prepare func() *apiError, writeError func(http.ResponseWriter, *apiError)) (any, bool) {
	refused := false
	for {
		if s.cluster.IsLeader() {
			res, ok, notLeader := s.proposeHere(w, r, cmd, prepare, writeError)
			if !notLeader {
				return res, ok
			}
			refused = true
		}
		target, aerr := s.leaderURL(r.Context())
		if aerr != nil {
			writeError(w, aerr)
			return nil, false
		}
		if target == "" {
			// Still (or again) the leader. After a refusal (a leadership
			// transfer refuses every proposal until it ends) look again a
			// little later rather than spin.
			if refused {
				select {
				case <-time.After(10 * time.Millisecond):
				case <-r.Context().Done():
					writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable,
						Message: "request abandoned: " + r.Context().Err().Error()})
					return nil, false
				}
			}
			continue
		}
		if s.fwd.relayWith(w, r, body, target, writeError) {
			return nil, false
		}
		// This node became the leader while the forward waited: propose here.
	}
}

// proposeHere commits cmd on this node, which believes it leads, and writes
// any refusal. notLeader reports, having written nothing, that the
// proposal was refused without being appended (leadership moved, or a
// transfer is in progress): the caller may send the request elsewhere.
func (s *Server) proposeHere(w http.ResponseWriter, r *http.Request, cmd fsm.Command,
	prepare func() *apiError, writeError func(http.ResponseWriter, *apiError)) (res any, ok, notLeader bool) {
	ctx := r.Context()
	if prepare != nil {
		// The pushes seal here: in order with the configures that turn
		// encryption on (seal_gate.go).
		release, err := s.enterSeal(ctx)
		if errors.Is(err, errSealNotLeader) {
			return nil, false, true
		}
		if err != nil {
			writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, Message: err.Error()})
			return nil, false, false
		}
		defer release()
		ctx = raftnode.WithEnqueued(ctx, release)
		if aerr := prepare(); aerr != nil {
			writeError(w, aerr)
			return nil, false, false
		}
	}
	res, idx, err := s.cluster.Propose(ctx, cmd)
	switch {
	case err == nil:
		if er, ok := res.(*fsm.ErrorResult); ok {
			writeError(w, badRequest(codeInvalidField, "", "%s", er.Err))
			return nil, false, false
		}
		w.Header().Set(headerIndex, strconv.FormatUint(idx, 10))
		return res, true, false
	case errors.Is(err, raftnode.ErrNotLeader):
		return nil, false, true // never appended
	case errors.Is(err, raftnode.ErrUnknownOutcome):
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: codeUnknown,
			Message: "Leadership changed while the request was committing; it may or may not have been applied. Retry: pushes with the same transactionId are deduplicated"})
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, Message: "request abandoned: " + err.Error()})
	default:
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, Message: err.Error()})
	}
	return nil, false, false
}

// relay forwards the request to the leader and copies its answer back. It
// reports false, having written nothing, when this node became the leader
// while waiting for a reachable one: the caller serves the request itself.
func (f *forwarder) relay(w http.ResponseWriter, r *http.Request, body []byte, leader string) bool {
	return f.relayWith(w, r, body, leader, writeError)
}

// relayedHeaders are copied from the leader's answer to the client.
var relayedHeaders = []string{"Content-Type", headerIndex, "Retry-After", "Location", "OJS-Version",
	"X-Request-Id", "X-OJS-Queue-Depth", "X-OJS-Queue-Bound", "X-OJS-Queue-Pressure", "Allow"}

func (f *forwarder) relayWith(w http.ResponseWriter, r *http.Request, body []byte, leader string,
	writeError func(http.ResponseWriter, *apiError)) bool {
	resp, aerr := f.doRetrying(r.Context(), r, body, leader, r.URL.RequestURI())
	if aerr == errBecameLeader {
		return false
	}
	if aerr != nil {
		writeError(w, aerr)
		return true
	}
	defer resp.Body.Close()
	b, release, err := readAnswer(resp)
	defer release()
	if err != nil {
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: codeUnknown,
			Message: "Lost the leader's answer; the request may have been applied. Retry: pushes with the same transactionId are deduplicated"})
		return true
	}
	f.catchUp(r.Context(), resp)
	for _, h := range relayedHeaders {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	writeBody(w, resp.StatusCode, b)
	return true
}

// readAnswer reads a forwarded answer whole before any of it is relayed,
// so that a connection lost midway becomes a clean 503 rather than half a
// 200. The bytes are valid until release is called.
func readAnswer(resp *http.Response) ([]byte, func(), error) {
	body := resp.Body
	if fb, ok := body.(*finishingBody); ok {
		body = fb.ReadCloser
	}
	if rb, ok := body.(*relayBody); ok {
		// Already read whole, and valid until the body is closed.
		return rb.answer.Body, func() {}, nil
	}
	b, release, err := readPooled(resp.Body, resp.ContentLength, maxAnswerBytes+1)
	if err == nil && len(b) > maxAnswerBytes {
		err = fmt.Errorf("answer longer than %d bytes", maxAnswerBytes)
	}
	return b, release, err
}

// maxAnswerBytes only stops a misbehaving peer from exhausting memory: a
// real answer is bounded by the request limits (README, Limits).
const maxAnswerBytes = 1 << 30

// errBecameLeader tells a forwarding caller that this node became the
// leader while it waited: nothing was sent, serve the request here.
var errBecameLeader = &apiError{Status: http.StatusServiceUnavailable, Code: codeNoLeader, notSent: true,
	Message: "Leadership moved to this node while the request waited; nothing was applied, retry"}

// do sends one forwarded request. uri is the path and query to request.
func (f *forwarder) do(ctx context.Context, r *http.Request, body []byte, leader, uri string) (*http.Response, *apiError) {
	hops, _ := strconv.Atoi(r.Header.Get(headerHops))
	if hops >= maxHops {
		return nil, &apiError{Status: http.StatusServiceUnavailable, Code: codeNoLeader,
			Message: "Leadership is moving; the request was not applied, retry"}
	}
	if f.conns != nil {
		if resp, aerr, ok := f.doRelay(ctx, r, body, leader, uri, hops); ok {
			return resp, aerr
		}
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	ctx, cancel := context.WithCancel(ctx)
	// Go's client sends a GET (a forwarded pop, a write) again on a new
	// connection when a reused one broke after the request went out: the
	// leader may have leased for the first, and a second would lease again,
	// or fail to dial and read as "nothing was applied". Once the request
	// has been written, a second connection cancels it instead. Only
	// bodiless GETs are resent that way, so only they watch for a second
	// connection (the forwarded pushes and acks are POSTs with bodies).
	var wrote atomic.Bool
	// sent: the request's headers were written to a connection. Until
	// then a failure of any kind (a dial refused, the attempt abandoned
	// because the leader changed before it was written) applied nothing,
	// and the request may go to the next leader.
	var sent atomic.Bool
	trace := &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }}
	if r.Method == http.MethodGet {
		trace.WroteRequest = func(httptrace.WroteRequestInfo) { wrote.Store(true) }
		trace.GetConn = func(string) {
			if wrote.Load() {
				cancel()
			}
		}
	}
	ctx = httptrace.WithClientTrace(ctx, trace)
	req, err := http.NewRequestWithContext(ctx, r.Method, strings.TrimRight(leader, "/")+uri, rd)
	if err != nil {
		cancel()
		return nil, &apiError{Status: 500, Code: codeInternal, Message: "build forwarded request: " + err.Error()}
	}
	for _, h := range forwardedHeaders {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.Header.Set(headerHops, strconv.Itoa(hops+1))
	resp, err := f.send(ctx, cancel, func() (*http.Response, error) { return f.client.Do(req) })
	if err != nil {
		if !sent.Load() || (isDialError(err) && !wrote.Load()) {
			return nil, notReached(err)
		}
		return nil, forwardLost(err)
	}
	return resp, nil
}

// notReached is the answer to a forward that applied nothing.
func notReached(err error) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Code: codeNoLeader, notSent: true,
		Message: "The leader could not be reached; nothing was applied: " + err.Error()}
}

// forwardLost is the answer to a forward whose outcome is not known.
func forwardLost(err error) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Code: codeNotLeaderForw,
		Message: "Forwarding to the leader failed; the request may have been applied. Retry: pushes with the same transactionId are deduplicated: " + err.Error()}
}

// doRelay forwards over the leader's relay connection. ok is false, with
// nothing sent, when the leader takes none or the request does not fit in a
// frame: the caller forwards over HTTP.
// The request is the one do would send, and its errors mean the same.
func (f *forwarder) doRelay(ctx context.Context, r *http.Request, body []byte, leader, uri string, hops int) (*http.Response, *apiError, bool) {
	req := &relay.Request{Method: r.Method, Target: uri, Body: body, Fields: make([]relay.Field, 0, len(forwardedHeaders)+1)}
	for _, h := range forwardedHeaders {
		if v := r.Header.Get(h); v != "" {
			req.Fields = append(req.Fields, relay.Field{Name: h, Value: v})
		}
	}
	req.Fields = append(req.Fields, relay.Field{Name: headerHops, Value: strconv.Itoa(hops + 1)})
	ctx, cancel := context.WithCancel(ctx)
	resp, err := f.send(ctx, cancel, func() (*http.Response, error) {
		a, err := f.conns.Do(ctx, leader, req)
		if err != nil {
			return nil, err
		}
		return relayedResponse(a), nil
	})
	var notSent *relay.NotSentError
	switch {
	case err == nil:
		return resp, nil, true
	case errors.Is(err, relay.ErrUnsupported), errors.Is(err, relay.ErrEncode):
		// A request the relay's frame cannot carry (a target or header
		// over 64 KiB, which the HTTP server takes up to 1 MiB) was not
		// sent: over HTTP it reaches the leader as the client sent it,
		// rather than failing as if the leader were unreachable.
		return nil, nil, false
	case errors.As(err, &notSent), errors.Is(err, errLeaderChangedUnsent):
		return nil, notReached(err), true
	default:
		return nil, forwardLost(err), true
	}
}

// relayedResponse presents a relay answer as the HTTP answer it stands for.
func relayedResponse(a *relay.Response) *http.Response {
	h := make(http.Header, len(a.Fields))
	for _, fl := range a.Fields {
		h.Add(fl.Name, fl.Value)
	}
	return &http.Response{Status: strconv.Itoa(a.Status) + " " + http.StatusText(a.Status), StatusCode: a.Status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Body: &relayBody{Reader: bytes.NewReader(a.Body), answer: a}, ContentLength: int64(len(a.Body))}
}

// relayBody is a relay answer's body; closing it releases the answer.
type relayBody struct {
	*bytes.Reader
	answer *relay.Response
}

func (b *relayBody) Close() error {
	b.answer.Release()
	return nil
}

// send performs a forwarded request (roundTrip, whose request has context
// ctx), abandoning it when this node's view of
// the leader changes before the answer has been read: a leader that was
// paused (SIGSTOP, a VM stall) or cut off keeps the connection open and
// answers nothing, and the client should hear "unknown outcome, retry"
// once a new leader is known rather than wait for its own timeout. cancel
// cancels ctx; it runs when the answer's body is closed.
//
// The watch starts here, after the leader was resolved: a change in the
// microseconds between the two is not seen, and such a request waits for
// the old leader as it did before this watch existed.
func (f *forwarder) send(ctx context.Context, cancel context.CancelFunc, roundTrip func() (*http.Response, error)) (*http.Response, error) {
	view := f.s.cluster.LeaderView()
	if view.Err() != nil {
		// The leader changed between resolving it and sending: nothing
		// was written, so the caller may go to the next leader. Checked
		// here rather than left to the watch below, whose cancel runs on
		// its own goroutine and could lose the race with the client
		// writing the request, turning "not sent" into "may have been
		// applied".
		cancel()
		return nil, errLeaderChangedUnsent
	}
	var abandoned atomic.Bool
	stop := func() bool { return false }
	// A request whose own effect is a new leader (a transfer) is not
	// watched: the old leader answers once the change has happened, so the
	// change is no reason to give up on that answer.
	if ctx.Value(leaderChangeExpected{}) == nil {
		stop = context.AfterFunc(view, func() {
			abandoned.Store(true)
			cancel()
		})
	}
	finish := sync.OnceFunc(func() { stop(); cancel() })
	resp, err := roundTrip()
	if err != nil {
		finish()
		if abandoned.Load() {
			err = fmt.Errorf("the leader changed while the request waited for its answer: %w", err)
		}
		return nil, err
	}
	resp.Body = &finishingBody{ReadCloser: resp.Body, finish: finish}
	return resp, nil
}

// errLeaderChangedUnsent: the leader changed before the request was sent.
var errLeaderChangedUnsent = errors.New("the leader changed before the request was sent")

// leaderChangeExpected marks, in a request's context, a request whose
// relay must not be abandoned when this node's view of the leader changes,
// because changing the leader is what it asks for.
type leaderChangeExpected struct{}

// expectingLeaderChange returns r marked with leaderChangeExpected.
func expectingLeaderChange(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), leaderChangeExpected{}, true))
}

// finishingBody ends a forwarded request's leader watch when it is closed.
type finishingBody struct {
	io.ReadCloser
	finish func()
}

func (b *finishingBody) Close() error {
	err := b.ReadCloser.Close()
	b.finish()
	return err
}

// isDialError reports a failure to open the connection: the request was
// never written, so sending it again cannot apply it twice.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// doRetrying sends a forwarded request, and while the leader cannot even be
// dialled (it died and this node has not noticed yet) waits for a new one,
// within --leader-wait, then gives up with no_leader: nothing was applied.
func (f *forwarder) doRetrying(ctx context.Context, r *http.Request, body []byte, leader, uri string) (*http.Response, *apiError) {
	return f.doRetryingUntil(ctx, time.Time{}, r, body, leader, uri)
}

// doRetryingUntil is doRetrying that also stops waiting for a leader at
// until (zero: no bound but --leader-wait), for a long-poll pop whose own
// timeout comes first. A request already sent is never cut short: the
// leader may be leasing messages for it.
func (f *forwarder) doRetryingUntil(ctx context.Context, until time.Time, r *http.Request, body []byte, leader, uri string) (*http.Response, *apiError) {
	deadline := time.Now().Add(f.s.cfg.LeaderWait)
	if !until.IsZero() && until.Before(deadline) {
		deadline = until
	}
	for {
		resp, aerr := f.do(ctx, r, body, leader, uri)
		if aerr == nil || !aerr.notSent || !time.Now().Before(deadline) {
			return resp, aerr
		}
		select {
		case <-ctx.Done():
			return nil, aerr
		case <-time.After(50 * time.Millisecond):
		}
		lctx, cancel := context.WithDeadline(ctx, deadline)
		next, lerr := f.s.leaderURL(lctx)
		cancel()
		if lerr != nil {
			return nil, lerr
		}
		if next == "" {
			return nil, errBecameLeader
		}
		leader = next
	}
}

// catchUp remembers the index the leader reported for a write this node
// relays: local reads wait until this node has applied every index it
// relayed (see localRead), so a client that reads here after a write sees
// it, even on a node that is still catching up (a restarted follower the
// leader is backing off from). The write itself is answered at once: the
// follower learns the commit only with the leader's next message, and
// making every write wait for that would add it to every forwarded write.
func (f *forwarder) catchUp(_ context.Context, resp *http.Response) {
	idx, err := strconv.ParseUint(resp.Header.Get(headerIndex), 10, 64)
	if err != nil || idx == 0 {
		return
	}
	for {
		cur := f.s.relayed.Load()
		if idx <= cur || f.s.relayed.CompareAndSwap(cur, idx) {
			break
		}
	}
}

// localRead waits until this node has applied every write it relayed to a
// client, and the last command its Raft log held at start
// (Config.ReadFloor), within --leader-wait; past that the read is refused
// with 503 rather than served stale. The check is two atomic loads: a
// leader makes it before every pop.
func (s *Server) localRead(ctx context.Context) *apiError {
	idx := max(s.relayed.Load(), s.floor.Load())
	if idx == 0 || s.state.AppliedIndex() >= idx {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.LeaderWait)
	defer cancel()
	for {
		idx = max(s.relayed.Load(), s.floorNow())
		wctx, wcancel := ctx, context.CancelFunc(func() {})
		if s.floor.Load() > s.relayed.Load() && s.cfg.ReadFloorNow != nil {
			// The floor's entry may be replaced meanwhile, which applies
			// nothing at its index: look again shortly.
			wctx, wcancel = context.WithTimeout(ctx, floorRecheck)
		}
		err := s.cluster.WaitApplied(wctx, idx)
		wcancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable,
				Message: "This node is still catching up with the leader; retry, or read from another node: " + err.Error()}
		}
	}
}

// floorRecheck is how often a read held by the read floor asks whether it
// has come down.
const floorRecheck = 50 * time.Millisecond

// floorNow is the read floor, lowered first as Config.ReadFloorNow finds.
func (s *Server) floorNow() uint64 {
	f := s.floor.Load()
	if s.cfg.ReadFloorNow == nil || f == 0 || s.state.AppliedIndex() >= f {
		return f
	}
	if lower := s.cfg.ReadFloorNow(f); lower < f && s.floor.CompareAndSwap(f, lower) {
		return lower
	}
	return s.floor.Load()
}

// readBarrier makes a read linearizable when the client asks for it
// (?consistency=linearizable): the leader confirms its leadership and
// reports its commit index, and this node waits until it has applied it.
// Other reads are served from local state (see the README on staleness).
func (s *Server) readBarrier(r *http.Request) *apiError {
	if r.URL.Query().Get("consistency") != "linearizable" {
		return s.localRead(r.Context())
	}
	return s.barrier(r)
}

// barrier waits until this node has applied the leader's confirmed commit
// index: a local read after it is linearizable.
func (s *Server) barrier(r *http.Request) *apiError {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.LeaderWait)
	defer cancel()
	for {
		var idx uint64
		if s.cluster.IsLeader() {
			i, err := s.cluster.ReadIndex()
			if errors.Is(err, raftnode.ErrNotLeader) {
				// Leadership is moving (a transfer, a new term) while this
				// node still reports itself leader: look again shortly,
				// not in a tight loop, within the wait for a leader.
				select {
				case <-ctx.Done():
					return &apiError{Status: 503, Code: codeNoLeader,
						Message: "No leader could confirm a read index within --leader-wait; retry"}
				case <-time.After(10 * time.Millisecond):
				}
				continue
			}
			if err != nil {
				return &apiError{Status: 503, Code: codeUnavailable, Message: err.Error()}
			}
			idx = i
		} else {
			leader, aerr := s.leaderURL(ctx)
			if aerr != nil {
				return aerr
			}
			if leader == "" {
				continue
			}
			i, err := s.fetchReadIndex(ctx, leader)
			if err != nil {
				// A leader that died or stepped down before this node
				// noticed: a read applies nothing, so ask the next one,
				// within the wait for a leader, as a write would.
				select {
				case <-ctx.Done():
					return noLeader(fmt.Errorf("read index from leader: %w", err))
				case <-time.After(20 * time.Millisecond):
				}
				continue
			}
			idx = i
		}
		if err := s.cluster.WaitApplied(ctx, idx); err != nil {
			return &apiError{Status: 503, Code: codeUnavailable, Message: err.Error()}
		}
		return nil
	}
}

func (s *Server) fetchReadIndex(ctx context.Context, leader string) (uint64, error) {
	// A leader frozen or cut off keeps the connection open and answers
	// nothing: give up on it once this node learns of another.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.cluster.LeaderView(), cancel)
	defer stop()
	req, _ := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(leader, "/")+"/internal/v1/read-index", nil)
	resp, err := s.fwd.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("leader answered %d: %s", resp.StatusCode, b)
	}
	var v struct {
		Index uint64 `json:"read_index"`
	}
	if err := jsonUnmarshal(b, &v); err != nil {
		return 0, err
	}
	return v.Index, nil
}

// Forward protocols (Config.ForwardProtocol).
const (
	ForwardRelay = "relay"
	ForwardHTTP  = "http"
)

// relayConns counts the relay connections this node serves as the leader,
// so that a shutdown waits for their answers (WaitRelays) after Drain has
// stopped them reading.
//
// Lock order: mu is a leaf.
type relayConns struct {
	mu      sync.Mutex
	n       int
	closing bool
	idle    chan struct{} // closed when n drops to 0 while closing
}

func (c *relayConns) enter() (func(), bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil, false
	}
	c.n++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.n--
		if c.n == 0 && c.idle != nil {
			close(c.idle)
			c.idle = nil
		}
	}, true
}

// wait refuses new connections and waits for the served ones to end.
func (c *relayConns) wait(ctx context.Context) error {
	c.mu.Lock()
	c.closing = true
	if c.n == 0 {
		c.mu.Unlock()
		return nil
	}
	if c.idle == nil {
		c.idle = make(chan struct{})
	}
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("relay connections still open: %w", ctx.Err())
	}
}

// serveRelay takes over a follower's relay connection (httpapi/relay): its
// requests are served by the same handler as HTTP ones.
func (s *Server) serveRelay(w http.ResponseWriter, r *http.Request) {
	relay.Upgrade(w, r, relay.ServerConfig{
		Handler: http.HandlerFunc(s.serve),
		// A follower reads a body within the limit before it forwards it;
		// the rest is the target and headers.
		MaxRequestBytes: int(s.cfg.Limits.MaxBodyBytes) + 1<<20,
		Headers:         relayedHeaders,
		Closing:         s.closing,
		Enter:           s.relays.enter,
		Logger:          s.log,
	})
}

// WaitRelays waits, after Drain, until the relay connections this node
// serves have sent the answers of the requests they read (each ends
// after its go-away frame), or ctx ends.
func (s *Server) WaitRelays(ctx context.Context) error { return s.relays.wait(ctx) }

// CloseForwarding ends this node's relay connections to a leader.
func (s *Server) CloseForwarding() {
	if s.fwd.conns != nil {
		s.fwd.conns.Close()
	}
}
