package relay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/crownmq/crown/httpapi/bufpool"
)

// ServerConfig is the leader's side of the protocol.
type ServerConfig struct {
	// Handler serves each relayed request, as if it had come over HTTP.
	Handler http.Handler
	// MaxRequestBytes bounds a request frame; a longer one ends the
	// connection (a follower reads a body within the same limits before it
	// forwards it, so only a broken peer sends one).
	MaxRequestBytes int
	// Headers names the response headers carried back; the follower copies
	// no others to its client.
	Headers []string
	// Closing, once closed, stops the server reading requests: it sends a
	// go-away frame, answers those it read, and closes the connection.
	Closing <-chan struct{}
	// Enter, when not nil, is called before a connection is taken over;
	// ok false refuses it (503), and leave runs when it ends, so that a
	// shutdown can wait for the answers of the connections it serves.
	Enter  func() (leave func(), ok bool)
	Logger *slog.Logger
}

// Upgrade answers a relay upgrade request and serves the connection until
// it ends. w must be the server's own ResponseWriter (one that can hijack).
func Upgrade(w http.ResponseWriter, r *http.Request, cfg ServerConfig) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), Protocol) {
		http.Error(w, "relay: Upgrade: "+Protocol+" expected", http.StatusUpgradeRequired)
		return
	}
	leave := func() {}
	if cfg.Enter != nil {
		var ok bool
		if leave, ok = cfg.Enter(); !ok {
			// The follower forwards this one over HTTP instead.
			http.Error(w, "relay: shutting down", http.StatusServiceUnavailable)
			return
		}
	}
	defer leave()
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "relay: connection cannot be taken over", http.StatusInternalServerError)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	// The HTTP server's read deadline for the request's headers no longer
	// applies: a relay connection idles between requests.
	_ = conn.SetDeadline(time.Time{})
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + Protocol + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		conn.Close()
		return
	}
	serveConn(conn, brw.Reader, cfg)
}

// serveConn reads request frames and serves each on its own goroutine, as
// net/http serves each connection's requests.
func serveConn(conn net.Conn, br *bufio.Reader, cfg ServerConfig) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "relay", "peer", conn.RemoteAddr().String())
	base, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	w := newFrameWriter(conn, stallTimeout)
	var (
		mu       sync.Mutex
		inflight = map[uint64]context.CancelFunc{}
		wg       sync.WaitGroup
		draining = make(chan struct{})
	)
	if cfg.Closing != nil {
		go func() {
			select {
			case <-cfg.Closing:
				close(draining)
				// Unblocks the read below; frames not read whole by now are
				// never served, and the go-away tells the follower so.
				_ = conn.SetReadDeadline(time.Now())
			case <-base.Done():
			}
		}()
	}
	var (
		last uint64 // the id of the last request read
		err  error
	)
	for {
		// Each request's frame is its own until its handler returns.
		buf := bufpool.Get()
		var f *Frame
		f, *buf, err = ReadFrame(br, cfg.MaxRequestBytes, *buf)
		if err != nil || f.Kind != KindRequest {
			bufpool.Put(buf)
		}
		if err != nil {
			break
		}
		switch f.Kind {
		case KindRequest:
			if f.ID <= last {
				bufpool.Put(buf)
				err = fmt.Errorf("%w: request id %d after %d", ErrMalformed, f.ID, last)
				break
			}
			last = f.ID
			ctx, cancel := context.WithCancel(base)
			mu.Lock()
			inflight[f.ID] = cancel
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				serveOne(ctx, conn, w, f, cfg, log)
				bufpool.Put(buf)
				mu.Lock()
				delete(inflight, f.ID)
				mu.Unlock()
				cancel()
			}()
		case KindCancel:
			mu.Lock()
			if cancel := inflight[f.ID]; cancel != nil {
				cancel()
			}
			mu.Unlock()
		default:
			err = fmt.Errorf("%w: a follower sent a frame of kind %d", ErrMalformed, f.Kind)
		}
		if err != nil {
			break
		}
	}
	select {
	case <-draining:
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if werr := w.send(&Frame{Kind: KindGoAway, ID: last}); werr != nil {
				log.Debug("relay go-away not sent", "error", werr)
			}
			wg.Wait()
			conn.Close()
			return
		}
	default:
	}
	// The follower is gone or broke the protocol: nobody is left to answer.
	if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		log.Warn("relay connection ended", "error", err)
	}
	cancelAll()
	conn.Close() // answers still being written fail at once
	wg.Wait()
}

// serveOne runs the handler on one relayed request and sends its answer.
func serveOne(ctx context.Context, conn net.Conn, w *frameWriter, f *Frame, cfg ServerConfig, log *slog.Logger) {
	out := bufpool.Get()
	defer bufpool.Put(out)
	rw := &responseWriter{header: make(http.Header), body: bytes.NewBuffer(*out)}
	req, err := newRequest(ctx, conn, f)
	if err != nil {
		rw.WriteHeader(http.StatusBadRequest)
		rw.Write([]byte(err.Error()))
	} else {
		func() {
			defer func() {
				if p := recover(); p != nil {
					// The handler aborted its answer (http.ErrAbortHandler,
					// or a panic the handler did not recover): status 0
					// tells the follower the answer is lost.
					log.Warn("relayed request aborted", "target", f.Target, "panic", p)
					rw = &responseWriter{header: make(http.Header), body: new(bytes.Buffer), aborted: true}
				}
			}()
			cfg.Handler.ServeHTTP(rw, req)
		}()
	}
	resp := &Frame{Kind: KindResponse, ID: f.ID, Status: rw.statusCode(), Body: rw.body.Bytes()}
	// The buffer the answer grew into goes back to the pool (after send:
	// the frame is then in the writer's buffer or on the wire).
	defer func() { *out = rw.body.Bytes()[:0] }()
	for _, name := range cfg.Headers {
		for _, v := range rw.header.Values(name) {
			resp.Fields = append(resp.Fields, Field{name, v})
		}
	}
	if err := w.send(resp); err != nil {
		if errors.Is(err, ErrEncode) {
			// An answer that cannot travel (a header too long): the
			// follower must not wait for it forever.
			log.Error("relayed answer cannot be encoded", "target", f.Target, "error", err)
			_ = w.send(&Frame{Kind: KindResponse, ID: f.ID})
			return
		}
		// The connection broke; the reader ends it.
		conn.Close()
	}
}

// newRequest builds the request the handler sees from a request frame.
func newRequest(ctx context.Context, conn net.Conn, f *Frame) (*http.Request, error) {
	u, err := url.ParseRequestURI(f.Target)
	if err != nil {
		return nil, err
	}
	h := make(http.Header, len(f.Fields))
	for _, fl := range f.Fields {
		h.Add(fl.Name, fl.Value)
	}
	r := &http.Request{
		Method: f.Method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: http.NoBody, ContentLength: int64(len(f.Body)),
		Host: conn.LocalAddr().String(), RemoteAddr: conn.RemoteAddr().String(), RequestURI: f.Target,
	}
	if len(f.Body) > 0 {
		r.Body = readCloser{bytes.NewReader(f.Body)}
	}
	return r.WithContext(ctx), nil
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// responseWriter keeps a relayed request's answer in memory: the frame
// carries it whole.
type responseWriter struct {
	header  http.Header
	status  int
	body    *bytes.Buffer
	aborted bool
}

func (w *responseWriter) Header() http.Header { return w.header }

func (w *responseWriter) WriteHeader(code int) {
	if w.status == 0 && !w.aborted {
		w.status = code
	}
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(p)
}

func (w *responseWriter) statusCode() int {
	if w.aborted {
		return 0
	}
	if w.status == 0 {
		return http.StatusOK // a handler that wrote nothing answers 200, as over HTTP
	}
	return w.status
}
