package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"time"

	"github.com/crownmq/crown/httpapi/bufpool"
)

// ErrUnsupported reports a leader that did not take the upgrade (an older
// version, or one shutting down): nothing was sent, forward over HTTP.
var ErrUnsupported = errors.New("relay: the leader does not take relay connections")

// NotSentError reports a request that no handler of the leader saw: it may
// be sent to another leader without being applied twice.
type NotSentError struct{ Err error }

func (e *NotSentError) Error() string { return "relay: request not sent: " + e.Err.Error() }
func (e *NotSentError) Unwrap() error { return e.Err }

// ErrAborted reports a leader whose handler aborted the answer: the request
// may have been applied.
var ErrAborted = errors.New("relay: the leader aborted its answer")

// ClientConfig is the follower's side of the protocol.
type ClientConfig struct {
	// DialTimeout bounds the dial and the upgrade (default 2 s).
	DialTimeout time.Duration
	// MaxAnswerBytes bounds an answer frame; a longer one ends the
	// connection (default 1 GiB: only a broken peer sends one).
	MaxAnswerBytes int
	// RetryUpgrade is how long a leader that refused the upgrade is not
	// asked again (default 10 s).
	RetryUpgrade time.Duration
	// StallTimeout bounds the write of a frame no caller waits on (a
	// cancel): a leader that reads nothing for this long loses the
	// connection (default 30 s).
	StallTimeout time.Duration
}

// Request is one request to forward.
type Request struct {
	Method string
	Target string // path and query
	Fields []Field
	Body   []byte
}

// Response is the leader's answer. Body is valid until Release.
type Response struct {
	Status int
	Fields []Field
	Body   []byte
	buf    *[]byte
}

// Release returns the answer's memory for reuse; Body must not be used
// after it.
func (r *Response) Release() {
	if r.buf != nil {
		bufpool.Put(r.buf)
		r.buf, r.Body = nil, nil
	}
}

// Client keeps one relay connection to each leader it forwards to.
//
// Lock order: Client.mu before conn.mu; neither is held while writing.
type Client struct {
	cfg     ClientConfig
	mu      sync.Mutex
	conns   map[string]*conn     // by host:port
	dialing map[string]*dial     // by host:port
	refused map[string]time.Time // host:port → when to ask again
	closed  bool
	// dialContext opens the TCP connection (a net.Dialer's; tests put
	// their own here).
	dialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewClient returns a client with no connections yet.
func NewClient(cfg ClientConfig) *Client {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.MaxAnswerBytes <= 0 {
		cfg.MaxAnswerBytes = 1 << 30
	}
	if cfg.RetryUpgrade <= 0 {
		cfg.RetryUpgrade = 10 * time.Second
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = stallTimeout
	}
	return &Client{cfg: cfg, conns: map[string]*conn{}, dialing: map[string]*dial{}, refused: map[string]time.Time{},
		dialContext: (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext}
}

// Do forwards req to the leader at base (http://host:port) and waits for
// its answer or ctx. The httptrace hooks in ctx see the connection's dial
// (ConnectDone) and the request's write (WroteHeaders, WroteRequest), as
// over HTTP. Errors: ErrUnsupported (forward over HTTP instead), a
// NotSentError, or any other error: the request may have been applied.
func (c *Client) Do(ctx context.Context, base string, req *Request) (*Response, error) {
	for tries := 1; ; tries++ {
		cn, err := c.conn(ctx, base)
		if err != nil {
			return nil, err
		}
		resp, err := cn.roundTrip(ctx, req)
		if (errors.Is(err, errRetired) || errors.Is(err, errBroken)) && tries < 2 {
			// Taken out of use between conn and the write (broken, the
			// leader going away, or replaced): nothing was sent on it.
			continue
		}
		return resp, err
	}
}

// errRetired refuses a request on a connection taken out of use.
var errRetired = errors.New("relay: the connection was taken out of use")

// Close ends every connection; requests waiting on them fail.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[string]*conn{}
	c.mu.Unlock()
	for _, cn := range conns {
		cn.fail(net.ErrClosed)
	}
}

// conn returns the connection to the leader at base, dialling it if there
// is none. Callers that come while it is being dialled wait for that one
// dial (within their own contexts): a leader that cannot be reached costs
// them one dial timeout together, not one each.
func (c *Client) conn(ctx context.Context, base string) (*conn, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, ErrUnsupported
	}
	addr := u.Host
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, &NotSentError{net.ErrClosed}
	}
	if cn := c.conns[addr]; cn != nil && cn.usable() {
		c.mu.Unlock()
		return cn, nil
	}
	if until, ok := c.refused[addr]; ok {
		if time.Now().Before(until) {
			c.mu.Unlock()
			return nil, ErrUnsupported
		}
		delete(c.refused, addr)
	}
	d := c.dialing[addr]
	if d == nil {
		d = &dial{done: make(chan struct{})}
		c.dialing[addr] = d
		go c.dial(addr, d)
	}
	c.mu.Unlock()
	select {
	case <-d.done:
	case <-ctx.Done():
		return nil, &NotSentError{fmt.Errorf("waiting for the relay connection: %w", ctx.Err())}
	}
	if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.ConnectDone != nil && !errors.Is(d.err, ErrUnsupported) {
		trace.ConnectDone("tcp", addr, d.err)
	}
	return d.cn, d.err
}

// dial is one dial in progress; its result is set before done is closed.
type dial struct {
	done chan struct{}
	cn   *conn
	err  error
}

// dial opens the connection to addr for d's waiters and keeps it.
func (c *Client) dial(addr string, d *dial) {
	cn, err := c.open(addr)
	c.mu.Lock()
	delete(c.dialing, addr)
	switch {
	case c.closed:
		if cn != nil {
			cn.fail(net.ErrClosed)
		}
		cn, err = nil, &NotSentError{net.ErrClosed}
	case errors.Is(err, ErrUnsupported):
		c.refused[addr] = time.Now().Add(c.cfg.RetryUpgrade)
	case err == nil:
		// A new leader: the connections to earlier ones serve what they
		// carry and are closed when idle.
		for a, old := range c.conns {
			if a != addr {
				old.closeWhenIdle()
				delete(c.conns, a)
			}
		}
		c.conns[addr] = cn
	}
	d.cn, d.err = cn, err
	c.mu.Unlock()
	close(d.done)
}

// open dials and upgrades a connection to addr within DialTimeout.
func (c *Client) open(addr string) (*conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.DialTimeout)
	defer cancel()
	nc, err := c.dialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &NotSentError{err}
	}
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	_, err = nc.Write([]byte("GET " + Path + " HTTP/1.1\r\nHost: " + addr +
		"\r\nConnection: Upgrade\r\nUpgrade: " + Protocol + "\r\n\r\n"))
	br := bufio.NewReaderSize(nc, bufferSize)
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(br, nil)
	}
	if err != nil {
		nc.Close()
		return nil, &NotSentError{fmt.Errorf("relay upgrade: %w", err)}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		nc.Close()
		return nil, fmt.Errorf("%w (%s)", ErrUnsupported, resp.Status)
	}
	_ = nc.SetDeadline(time.Time{})
	cn := &conn{nc: nc, w: newFrameWriter(nc, c.cfg.StallTimeout), pending: map[uint64]*call{}}
	go cn.read(br, c.cfg.MaxAnswerBytes)
	return cn, nil
}

// conn is one relay connection.
type conn struct {
	nc net.Conn
	w  *frameWriter

	mu      sync.Mutex
	next    uint64 // the last id given out
	pending map[uint64]*call
	err     error // set once: no new requests (broken, or the leader went away)
	idle    bool  // close once nothing is pending
}

type call struct {
	done chan struct{}
	resp *Response
	err  error
}

func (cn *conn) usable() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.err == nil && !cn.idle && !cn.w.broken.Load()
}

// roundTrip sends one request and waits for its answer.
func (cn *conn) roundTrip(ctx context.Context, req *Request) (*Response, error) {
	cl := &call{done: make(chan struct{})}
	f := &Frame{Kind: KindRequest, Method: req.Method, Target: req.Target, Fields: req.Fields, Body: req.Body}
	err := cn.w.write(ctx, f, func() error {
		// Under the writer's lock: ids reach the leader in increasing
		// order, and the call is known before its answer can come.
		cn.mu.Lock()
		defer cn.mu.Unlock()
		if cn.err != nil || cn.idle {
			return errRetired
		}
		cn.next++
		f.ID = cn.next
		cn.pending[f.ID] = cl
		return nil
	})
	var notSent *NotSentError
	switch {
	case errors.As(err, &notSent):
		return nil, err
	case errors.Is(err, ErrEncode):
		cn.forget(f.ID)
		return nil, &NotSentError{err}
	case err != nil:
		// Broken while writing: every request waiting on the connection,
		// this one too, may have been applied. This caller hears its own
		// write's error (its context's end, say), whichever failure of
		// the connection the others hear.
		err = fmt.Errorf("relay connection lost: %w", err)
		cn.fail(err)
		return nil, err
	}
	if trace := httptrace.ContextClientTrace(ctx); trace != nil && err == nil {
		if trace.WroteHeaders != nil {
			trace.WroteHeaders()
		}
		if trace.WroteRequest != nil {
			trace.WroteRequest(httptrace.WroteRequestInfo{})
		}
	}
	select {
	case <-cl.done:
	case <-ctx.Done():
		if cn.forget(f.ID) {
			// The leader's handler stops waiting too (a pop stops leasing
			// for a client that left). Sent aside: a writer stuck behind a
			// stalled leader must not hold the caller.
			go cn.w.send(&Frame{Kind: KindCancel, ID: f.ID})
			return nil, fmt.Errorf("relay: %w", ctx.Err())
		}
		<-cl.done // answered meanwhile
	}
	return cl.resp, cl.err
}

// forget drops a request's call, reporting whether it was still waiting.
func (cn *conn) forget(id uint64) bool {
	cn.mu.Lock()
	_, ok := cn.pending[id]
	delete(cn.pending, id)
	idleNow := ok && cn.idle && len(cn.pending) == 0
	cn.mu.Unlock()
	if idleNow {
		cn.fail(net.ErrClosed)
	}
	return ok
}

// read dispatches answers until the connection ends.
func (cn *conn) read(br *bufio.Reader, max int) {
	var err error
	for {
		var f *Frame
		// Answers are handed to their callers, so each gets its own
		// buffer, which Response.Release returns.
		buf := bufpool.Get()
		f, *buf, err = ReadFrame(br, max, *buf)
		if err != nil {
			bufpool.Put(buf)
			break
		}
		switch f.Kind {
		case KindResponse:
			cn.mu.Lock()
			cl := cn.pending[f.ID]
			delete(cn.pending, f.ID)
			idleNow := cn.idle && len(cn.pending) == 0
			cn.mu.Unlock()
			if cl == nil || f.Status == 0 {
				bufpool.Put(buf)
			}
			if cl != nil {
				if f.Status == 0 {
					cl.err = ErrAborted
				} else {
					cl.resp = &Response{Status: f.Status, Fields: f.Fields, Body: f.Body, buf: buf}
				}
				close(cl.done)
			}
			if idleNow {
				cn.fail(net.ErrClosed)
				return
			}
			continue
		case KindGoAway:
			bufpool.Put(buf)
			cn.goAway(f.ID)
			continue
		default:
			bufpool.Put(buf)
			err = fmt.Errorf("%w: the leader sent a frame of kind %d", ErrMalformed, f.Kind)
		}
		break
	}
	cn.fail(fmt.Errorf("relay connection lost: %w", err))
}

// goAway fails the requests the leader did not read as not sent, and takes
// the connection out of use.
func (cn *conn) goAway(last uint64) {
	cn.mu.Lock()
	if cn.err == nil {
		cn.err = errors.New("the leader is shutting down")
	}
	var gone []*call
	for id, cl := range cn.pending {
		if id > last {
			gone = append(gone, cl)
			delete(cn.pending, id)
		}
	}
	cn.mu.Unlock()
	for _, cl := range gone {
		cl.err = &NotSentError{errors.New("the leader stopped reading before this request")}
		close(cl.done)
	}
}

// fail ends the connection: requests still waiting may have been applied.
func (cn *conn) fail(err error) {
	cn.mu.Lock()
	if cn.err == nil {
		cn.err = err
	}
	pending := cn.pending
	cn.pending = map[uint64]*call{}
	cn.mu.Unlock()
	// Closing also ends a write blocked on a peer that reads nothing;
	// later requests are refused by cn.err before they write.
	cn.nc.Close()
	for _, cl := range pending {
		cl.err = err
		close(cl.done)
	}
}

// closeWhenIdle stops new requests and closes the connection once the
// ones it carries are answered.
func (cn *conn) closeWhenIdle() {
	cn.mu.Lock()
	cn.idle = true
	empty := len(cn.pending) == 0
	cn.mu.Unlock()
	if empty {
		cn.fail(net.ErrClosed)
	}
}
