package relay

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

// bufferSize is the read and write buffer of a connection: a pop of 100
// messages of 256 bytes answers about 58 KiB, so a few answers of one entry
// fit one write.
const bufferSize = 64 << 10

// stallTimeout bounds a write that has no caller's context to end it (an
// answer, a cancel): a peer that reads nothing for this long (a stopped
// process) loses the connection, and the requests it carried are failed
// with their outcome unknown.
const stallTimeout = 30 * time.Second

// frameWriter writes whole frames to a connection from any goroutine. A
// writer flushes only when no other frame is waiting for its turn, so the
// frames of senders that arrive together (the answers of one Raft entry)
// leave in one write, and the last of them flushes.
//
// A sender waits for its turn within its context, and a context that ends
// while its frame is being written breaks the connection (the frame is cut
// short on the wire): a peer that stopped reading holds the writer, not
// every caller behind it.
type frameWriter struct {
	conn    net.Conn
	waiting atomic.Int32
	turn    chan struct{} // holds a token while a sender writes
	// Under turn:
	bw   *bufio.Writer
	head []byte // scratch for frame heads
	err  error  // sticky: the connection is broken
}

func newFrameWriter(c net.Conn) *frameWriter {
	return &frameWriter{conn: c, turn: make(chan struct{}, 1), bw: bufio.NewWriterSize(c, bufferSize)}
}

// write sends f (nil: only flush what waits in the buffer). prepare, when not nil, runs in f's turn before f is
// encoded (it may set f.ID: frames leave in the order prepare sees them);
// its error stops the write. Errors: a NotSentError when nothing of f was
// written (ctx ended before its turn, the connection was already broken,
// or prepare refused), an ErrEncode error when f cannot be encoded (nothing
// written either), and any other error when the connection broke while f
// was written: whether the peer got it is not known.
func (w *frameWriter) write(ctx context.Context, f *Frame, prepare func() error) error {
	w.waiting.Add(1)
	select {
	case w.turn <- struct{}{}:
		w.waiting.Add(-1)
	case <-ctx.Done():
		if w.waiting.Add(-1) == 0 {
			// The sender in turn may have left the buffer for this one
			// to flush.
			go w.send(nil)
		}
		return &NotSentError{ctx.Err()}
	}
	defer func() { <-w.turn }()
	if w.err != nil {
		return &NotSentError{w.err}
	}
	var err error
	if prepare != nil {
		if perr := prepare(); perr != nil {
			err = &NotSentError{perr}
		}
	}
	// The writes below can block on a peer that reads nothing: ctx ending
	// meanwhile fails them through the connection's deadline.
	stop := context.AfterFunc(ctx, func() { _ = w.conn.SetWriteDeadline(time.Unix(1, 0)) })
	if err == nil && f != nil {
		var head []byte
		if head, err = appendHead(w.head[:0], f); err == nil {
			w.head = head
			if _, err = w.bw.Write(head); err == nil && (f.Kind == KindRequest || f.Kind == KindResponse) {
				_, err = w.bw.Write(f.Body)
			}
			if err != nil {
				w.err = err
			}
		}
	}
	// Whoever is last flushes, even a sender whose frame was not written:
	// frames before it may be waiting in the buffer.
	if w.err == nil && w.waiting.Load() == 0 {
		if ferr := w.bw.Flush(); ferr != nil {
			w.err = ferr
			if err == nil {
				err = ferr
			}
		}
	}
	if !stop() && w.err == nil {
		// The deadline was set: no later write can succeed.
		w.err = fmt.Errorf("relay: write abandoned: %w", ctx.Err())
		if err == nil {
			err = w.err
		}
	}
	return err
}

// send writes f, which no caller waits on (an answer, a cancel, a
// go-away, or nil to flush), within stallTimeout.
func (w *frameWriter) send(f *Frame) error {
	ctx, cancel := context.WithTimeout(context.Background(), stallTimeout)
	defer cancel()
	return w.write(ctx, f, nil)
}
