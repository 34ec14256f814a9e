package relay

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// leader is a test leader: an HTTP server whose relay path takes relay
// connections for handler, counting the TCP connections it accepted.
type leader struct {
	srv     *httptest.Server
	conns   atomic.Int32
	closing chan struct{}
	entered sync.WaitGroup
	refuse  atomic.Bool
}

func newLeader(t *testing.T, handler http.Handler) *leader {
	t.Helper()
	l := &leader{closing: make(chan struct{})}
	l.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == Path {
			Upgrade(w, r, ServerConfig{Handler: handler, MaxRequestBytes: 1 << 20,
				Headers: []string{"Content-Type", "X-Crown-Index"}, Closing: l.closing,
				Enter: func() (func(), bool) {
					if l.refuse.Load() {
						return nil, false
					}
					l.entered.Add(1)
					return l.entered.Done, true
				}})
			return
		}
		handler.ServeHTTP(w, r)
	}))
	l.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			l.conns.Add(1)
		}
	}
	l.srv.Start()
	t.Cleanup(l.srv.Close)
	return l
}

func newClient(t *testing.T) *Client {
	c := NewClient(ClientConfig{DialTimeout: time.Second})
	t.Cleanup(c.Close)
	return c
}

func TestRoundTripCarriesRequestAndAnswer(t *testing.T) {
	l := newLeader(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.ContentLength != int64(len(body)) {
			t.Errorf("ContentLength %d, body %d bytes", r.ContentLength, len(body))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Crown-Index", "42")
		w.Header().Set("X-Not-Relayed", "1")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+r.Header.Get("X-Crown-Hops")+" "+string(body))
	}))
	c := newClient(t)
	resp, err := c.Do(bounded(t), l.srv.URL, &Request{Method: "POST", Target: "/api/v1/push?x=%2Fy",
		Fields: []Field{{"X-Crown-Hops", "1"}}, Body: []byte(`{"items":[]}`)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusCreated {
		t.Errorf("status %d, want 201", resp.Status)
	}
	if want := `POST /api/v1/push?x=%2Fy 1 {"items":[]}`; string(resp.Body) != want {
		t.Errorf("body %q, want %q", resp.Body, want)
	}
	want := []Field{{"Content-Type", "application/json"}, {"X-Crown-Index", "42"}}
	if len(resp.Fields) != len(want) || resp.Fields[0] != want[0] || resp.Fields[1] != want[1] {
		t.Errorf("fields %v, want only the configured ones %v", resp.Fields, want)
	}
}

// Requests in flight at once share one connection: each handler waits for
// all of them to arrive, which one request at a time would never see.
func TestConcurrentRequestsShareOneConnection(t *testing.T) {
	const n = 40
	var arrived sync.WaitGroup
	arrived.Add(n)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	l := newLeader(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		select {
		case <-all:
		case <-time.After(10 * time.Second):
			t.Error("the requests were not in flight together")
		}
		io.WriteString(w, r.URL.Query().Get("i"))
	}))
	c := newClient(t)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Do(bounded(t), l.srv.URL, &Request{Method: "GET", Target: "/x?i=" + strconv.Itoa(i)})
			if err != nil {
				t.Error(err)
				return
			}
			if string(resp.Body) != strconv.Itoa(i) {
				t.Errorf("request %d got the answer %q", i, resp.Body)
			}
		}()
	}
	wg.Wait()
	if got := l.conns.Load(); got != 1 {
		t.Errorf("%d connections to the leader, want 1", got)
	}
}

// A caller that stops waiting ends the handler's context on the leader.
func TestCancelReachesTheLeadersHandler(t *testing.T) {
	started, ended := make(chan struct{}), make(chan struct{})
	l := newLeader(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			close(ended)
		case <-time.After(10 * time.Second):
			t.Error("the handler's context did not end")
		}
	}))
	c := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	_, err := c.Do(ctx, l.srv.URL, &Request{Method: "GET", Target: "/wait"})
	var notSent *NotSentError
	if err == nil || errors.As(err, &notSent) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled with the outcome unknown", err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never saw the cancel")
	}
}

func TestTraceHooksSeeTheWrite(t *testing.T) {
	l := newLeader(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	c := newClient(t)
	var connected, headers, wrote atomic.Bool
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		ConnectDone:  func(_, _ string, err error) { connected.Store(err == nil) },
		WroteHeaders: func() { headers.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	})
	resp, err := c.Do(ctx, l.srv.URL, &Request{Method: "GET", Target: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusOK {
		t.Errorf("a handler that writes nothing answered %d, want 200", resp.Status)
	}
	if !connected.Load() || !headers.Load() || !wrote.Load() {
		t.Errorf("hooks: ConnectDone %v, WroteHeaders %v, WroteRequest %v; want all", connected.Load(), headers.Load(), wrote.Load())
	}
}

func TestDialFailureIsNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = newClient(t).Do(bounded(t), "http://"+addr, &Request{Method: "GET", Target: "/"})
	var notSent *NotSentError
	if !errors.As(err, &notSent) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want a NotSentError from the dial", err)
	}
}

// A leader without the relay path (an older version) answers 404: the
// caller forwards over HTTP, and the client does not ask again at once.
func TestLeaderWithoutRelayIsUnsupported(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := newClient(t)
	for range 3 {
		if _, err := c.Do(bounded(t), srv.URL, &Request{Method: "GET", Target: "/"}); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("err %v, want ErrUnsupported", err)
		}
	}
	if got := conns.Load(); got != 1 {
		t.Errorf("%d upgrade attempts, want 1 within RetryUpgrade", got)
	}
}

func TestAbortedAnswerIsLost(t *testing.T) {
	l := newLeader(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	_, err := newClient(t).Do(bounded(t), l.srv.URL, &Request{Method: "POST", Target: "/", Body: []byte("x")})
	if !errors.Is(err, ErrAborted) {
		t.Fatalf("err %v, want ErrAborted", err)
	}
}

// A leader that shuts down answers the requests it read, then takes no new
// connection: the follower forwards over HTTP until it does.
func TestDrainAnswersWhatWasReadThenRefuses(t *testing.T) {
	inHandler, release := make(chan struct{}), make(chan struct{})
	l := newLeader(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(inHandler)
		<-release
		io.WriteString(w, "done")
	}))
	c := newClient(t)
	got := make(chan error, 1)
	go func() {
		resp, err := c.Do(bounded(t), l.srv.URL, &Request{Method: "POST", Target: "/ack", Body: []byte("{}")})
		if err == nil && string(resp.Body) != "done" {
			err = errors.New("answer " + string(resp.Body))
		}
		got <- err
	}()
	<-inHandler
	l.refuse.Store(true)
	close(l.closing)
	close(release)
	if err := <-got; err != nil {
		t.Fatalf("the request read before the drain: %v", err)
	}
	waitFor(t, &l.entered, "the drained connection to end after its answer")
	_, err := c.Do(bounded(t), l.srv.URL, &Request{Method: "GET", Target: "/"})
	var notSent *NotSentError
	if errors.As(err, &notSent) {
		// Sent before the client read the go-away, which the answer may
		// have overtaken: not applied, and the next attempt dials anew.
		_, err = c.Do(bounded(t), l.srv.URL, &Request{Method: "GET", Target: "/"})
	}
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("after the drain: err %v, want ErrUnsupported (forward over HTTP)", err)
	}
}

// fakeLeader accepts one relay connection and hands it to serve.
func fakeLeader(t *testing.T, serve func(br *bufio.Reader, c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if br := acceptUpgrade(t, c); br != nil {
			serve(br, c)
		}
	}()
	return "http://" + ln.Addr().String()
}

// acceptUpgrade answers the follower's upgrade request on c as a leader
// does, returning the reader of the frames that follow (nil, the test
// failed, when the request was not an upgrade).
func acceptUpgrade(t *testing.T, c net.Conn) *bufio.Reader {
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil || req.Header.Get("Upgrade") != Protocol {
		t.Errorf("upgrade request: %v", err)
		return nil
	}
	io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+Protocol+"\r\n\r\n")
	return br
}

func writeFrame(t *testing.T, c net.Conn, f *Frame) {
	t.Helper()
	b, err := AppendFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b); err != nil {
		t.Error(err)
	}
}

// A go-away names the last request the leader read: those after it were
// not applied and may go elsewhere; those before it are still answered.
func TestGoAwayMarksUnreadRequestsNotSent(t *testing.T) {
	read := make(chan uint64, 2)
	url := fakeLeader(t, func(br *bufio.Reader, c net.Conn) {
		var ids []uint64
		for len(ids) < 2 {
			f, _, err := ReadFrame(br, 1<<20, nil)
			if err != nil {
				t.Error(err)
				return
			}
			ids = append(ids, f.ID)
			read <- f.ID
		}
		writeFrame(t, c, &Frame{Kind: KindGoAway, ID: ids[0]})
		writeFrame(t, c, &Frame{Kind: KindResponse, ID: ids[0], Status: 200, Body: []byte("first")})
		io.Copy(io.Discard, br)
	})
	c := newClient(t)
	first := make(chan error, 1)
	go func() {
		resp, err := c.Do(bounded(t), url, &Request{Method: "GET", Target: "/1"})
		if err == nil && string(resp.Body) != "first" {
			err = errors.New("answer " + string(resp.Body))
		}
		first <- err
	}()
	<-read
	_, err := c.Do(bounded(t), url, &Request{Method: "GET", Target: "/2"})
	var notSent *NotSentError
	if !errors.As(err, &notSent) {
		t.Fatalf("request after the go-away: err %v, want a NotSentError", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("request before the go-away: %v", err)
	}
}

// A connection lost after the request was written leaves its outcome
// unknown: it is not a NotSentError.
func TestConnectionLostAfterWriteIsUnknown(t *testing.T) {
	url := fakeLeader(t, func(br *bufio.Reader, c net.Conn) {
		if _, _, err := ReadFrame(br, 1<<20, nil); err != nil {
			t.Error(err)
		}
	})
	_, err := newClient(t).Do(bounded(t), url, &Request{Method: "POST", Target: "/push", Body: []byte("{}")})
	var notSent *NotSentError
	if err == nil || errors.As(err, &notSent) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the lost connection, with the outcome unknown", err)
	}
}

// A leader that sends a frame no leader sends ends the connection.
func TestUnexpectedFrameEndsTheConnection(t *testing.T) {
	url := fakeLeader(t, func(br *bufio.Reader, c net.Conn) {
		f, _, err := ReadFrame(br, 1<<20, nil)
		if err != nil {
			t.Error(err)
			return
		}
		writeFrame(t, c, &Frame{Kind: KindRequest, ID: f.ID, Method: "GET", Target: "/"})
		io.Copy(io.Discard, br)
	})
	_, err := newClient(t).Do(bounded(t), url, &Request{Method: "GET", Target: "/"})
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("err %v, want ErrMalformed", err)
	}
}

// A new leader's connection replaces the old one's, which closes once its
// requests are answered.
func TestNewLeaderClosesTheOldConnectionWhenIdle(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	a, b := newLeader(t, h), newLeader(t, h)
	c := newClient(t)
	for _, l := range []*leader{a, b, a} {
		if _, err := c.Do(bounded(t), l.srv.URL, &Request{Method: "GET", Target: "/"}); err != nil {
			t.Fatal(err)
		}
	}
	if a.conns.Load() != 2 || b.conns.Load() != 1 {
		t.Errorf("connections: a %d, b %d; want 2 and 1", a.conns.Load(), b.conns.Load())
	}
	waitFor(t, &b.entered, "b's connection to close once a led again")
}

// A leader that stops reading (a stopped process) holds the connection's
// writer; callers still return when their contexts end: one waiting for
// its turn with nothing sent, the one cut short mid-write with its outcome
// unknown.
func TestStalledLeaderDoesNotHoldCallers(t *testing.T) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	writing := make(chan struct{})
	url := fakeLeader(t, func(br *bufio.Reader, c net.Conn) {
		br.Peek(1) // the first frame has begun: its sender holds the turn
		close(writing)
		<-done // reads nothing more until the test ends
	})
	c := newClient(t)
	big := make([]byte, 64<<20) // more than the socket buffers hold
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	first := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx1, url, &Request{Method: "POST", Target: "/push", Body: big})
		first <- err
	}()
	select {
	case <-writing:
	case <-time.After(5 * time.Second):
		t.Fatal("the first request's frame did not begin")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	start := time.Now()
	_, err := c.Do(ctx2, url, &Request{Method: "GET", Target: "/pop"})
	var notSent *NotSentError
	if !errors.As(err, &notSent) {
		t.Errorf("the caller waiting for its turn: err %v, want a NotSentError", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the caller waiting for its turn returned after %v", took)
	}
	cancel1() // the first caller gives up mid-write
	select {
	case err := <-first:
		if err == nil || errors.As(err, &notSent) {
			t.Errorf("the caller cut short: err %v, want an error with the outcome unknown", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the caller whose write was stalled did not return when its context ended")
	}
}

// Callers that come while the connection is being dialled share that dial:
// a leader that takes the TCP connection and never answers the upgrade
// (a stopped process) is dialled once, and every caller gets a NotSentError.
func TestCallersShareOneDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			defer c.Close() // held open, never answered
		}
	}()
	c := NewClient(ClientConfig{DialTimeout: time.Second})
	defer c.Close()
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Do(bounded(t), "http://"+ln.Addr().String(), &Request{Method: "GET", Target: "/"})
			var notSent *NotSentError
			if !errors.As(err, &notSent) {
				t.Errorf("err %v, want a NotSentError", err)
			}
		}()
	}
	wg.Wait()
	if got := accepted.Load(); got != 1 {
		t.Errorf("%d dials for callers that came together, want 1", got)
	}
}

// waitFor waits for wg within 10 s, failing the test past that rather than
// hanging until the test binary's timeout.
func waitFor(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10 s for %s", what)
	}
}

// bounded is a caller's context that ends after 10 s, so that a request
// the client never finishes fails its test instead of hanging it.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A writer that breaks closes its connection, whatever write broke it: the
// stream may end inside a frame, so the peer must see the end rather than
// wait for the rest, and later frames are refused as not sent.
func TestBrokenWriterClosesTheConnection(t *testing.T) {
	near, far := net.Pipe() // a write waits for a read: nothing reads far
	defer far.Close()
	w := newFrameWriter(near, 100*time.Millisecond)
	if err := w.send(&Frame{Kind: KindCancel, ID: 1}); err == nil {
		t.Fatal("a cancel to a peer that reads nothing was sent")
	}
	if !w.broken.Load() {
		t.Error("the writer does not report itself broken")
	}
	far.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := far.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the peer's read after the break: %v, want EOF (the connection closed)", err)
	}
	err := w.write(bounded(t), &Frame{Kind: KindRequest, Method: "GET", Target: "/"}, nil)
	var notSent *NotSentError
	if !errors.As(err, &notSent) || !errors.Is(err, errBroken) {
		t.Errorf("a write after the break: %v, want a NotSentError for the broken connection", err)
	}
}

// A leader that reads a request and then nothing (stopped for longer than
// the stall bound) breaks the connection when the caller gives up and its
// cancel cannot be written; the next request goes on a new connection
// rather than being refused on the broken one.
func TestConnectionWhoseWriterBrokeIsReplaced(t *testing.T) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	readFirst := make(chan struct{})
	var dials atomic.Int32
	c := NewClient(ClientConfig{StallTimeout: 200 * time.Millisecond})
	defer c.Close()
	c.dialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		n := dials.Add(1)
		near, far := net.Pipe() // a write waits for the leader's read
		go func() {
			defer far.Close()
			br := acceptUpgrade(t, far)
			for br != nil {
				f, _, err := ReadFrame(br, 1<<20, nil)
				if err != nil {
					return
				}
				if n == 1 {
					close(readFirst)
					<-done // stopped: reads nothing more
					return
				}
				if f.Kind == KindRequest {
					writeFrame(t, far, &Frame{Kind: KindResponse, ID: f.ID, Status: 200, Body: []byte("ok")})
				}
			}
		}()
		return near, nil
	}
	const url = "http://leader.test:6632"
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, url, &Request{Method: "GET", Target: "/pop"})
		first <- err
	}()
	select {
	case <-readFirst:
	case <-time.After(5 * time.Second):
		t.Fatal("the first request did not reach the leader")
	}
	cancel() // the caller leaves; its cancel frame finds the leader stopped
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that left: %v, want its context's error", err)
	}
	// Once the cancel has given up (a request sent meanwhile would flush
	// it, and be cut short itself, with its outcome unknown).
	deadline := time.Now().Add(5 * time.Second)
	for !brokenConn(c, "leader.test:6632") {
		if time.Now().After(deadline) {
			t.Fatal("the cancel to the stopped leader did not break the connection")
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := c.Do(bounded(t), url, &Request{Method: "GET", Target: "/pop"})
	if err != nil {
		t.Fatalf("the request after the connection broke: %v, want it answered on a new connection", err)
	}
	defer resp.Release()
	if string(resp.Body) != "ok" {
		t.Errorf("answer %q, want ok", resp.Body)
	}
	if got := dials.Load(); got != 2 {
		t.Errorf("%d dials, want 2 (the broken connection replaced once)", got)
	}
}

// brokenConn reports whether c's connection to addr has a broken writer.
func brokenConn(c *Client, addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cn := c.conns[addr]
	return cn != nil && cn.w.broken.Load()
}

// cancelAfterWrite ends a context as each write returns, as a caller's
// context may end just after its frame left.
type cancelAfterWrite struct {
	net.Conn
	cancel context.CancelFunc
}

func (c *cancelAfterWrite) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.cancel()
	return n, err
}

// A sender whose context ends once its frame is written leaves the
// connection whole: the next frame goes out on it (the caller hears of its
// context as it waits for the answer, and cancels its request alone).
func TestContextEndingAfterTheWriteKeepsTheConnection(t *testing.T) {
	near, far := net.Pipe()
	defer far.Close()
	frames := make(chan *Frame, 2)
	go func() {
		br := bufio.NewReader(far)
		for {
			f, _, err := ReadFrame(br, 1<<20, nil)
			if err != nil {
				close(frames)
				return
			}
			frames <- f
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	w := newFrameWriter(&cancelAfterWrite{Conn: near, cancel: cancel}, time.Second)
	if err := w.write(ctx, &Frame{Kind: KindRequest, ID: 1, Method: "GET", Target: "/1"}, nil); err != nil {
		t.Fatalf("a frame written whole before its context ended: %v", err)
	}
	if ctx.Err() == nil {
		t.Fatal("the context did not end with the write")
	}
	if err := w.write(bounded(t), &Frame{Kind: KindRequest, ID: 2, Method: "GET", Target: "/2"}, nil); err != nil {
		t.Fatalf("the next frame: %v, want it written on the same connection", err)
	}
	for want := uint64(1); want <= 2; want++ {
		select {
		case f, ok := <-frames:
			if !ok || f.ID != want {
				t.Fatalf("frame %d: got %+v (open %v)", want, f, ok)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("frame %d never arrived", want)
		}
	}
	if w.broken.Load() {
		t.Error("the writer broke")
	}
}
