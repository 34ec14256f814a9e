package relay

import (
	"bufio"
	"context"
	"errors"
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

// errBroken refuses a frame on a connection whose writer broke earlier:
// nothing of the frame was written, and the connection is closed.
var errBroken = errors.New("relay: the connection broke")

// frameWriter writes whole frames to a connection from any goroutine. A
// writer flushes only when no other frame is waiting for its turn, so the
// frames of senders that arrive together (the answers of one Raft entry)
// leave in one write, and the last of them flushes.
//
// A sender waits for its turn within its context, and a context that ends
// while its frame is being written cuts the write short through the
// connection's deadline, which breaks the connection (the frame ends early
// on the wire): a peer that stopped reading holds the writer, not every
// caller behind it. A context that ends once the writes have returned
// leaves the connection as it was.
//
// A writer that breaks, whichever write broke it, closes the connection:
// the stream may end inside a frame, so nothing more can be written on it,
// and the readers at both ends must learn that from the close. Left open,
// the peer would wait for the rest of the frame, and the follower would
// keep a connection that refuses every request.
type frameWriter struct {
	conn    net.Conn
	stall   time.Duration // bounds send (stallTimeout)
	waiting atomic.Int32
	broken  atomic.Bool   // set with err, once the connection is closed
	turn    chan struct{} // holds a token while a sender writes
	// deadlineSet is sent to once a sender's context has set the write
	// deadline; at most one sender's is pending, as it holds the turn.
	deadlineSet chan struct{}
	// Under turn:
	bw   *bufio.Writer
	head []byte // scratch for frame heads
	err  error  // sticky: the connection is broken
}

func newFrameWriter(c net.Conn, stall time.Duration) *frameWriter {
	return &frameWriter{conn: c, stall: stall, turn: make(chan struct{}, 1), deadlineSet: make(chan struct{}, 1),
		bw: bufio.NewWriterSize(c, bufferSize)}
}

// breakWith records the first error that broke the connection and closes
// it (under turn).
func (w *frameWriter) breakWith(err error) {
	if w.err == nil {
		w.err = err
		w.conn.Close()
		w.broken.Store(true)
	}
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
		return &NotSentError{fmt.Errorf("%w: %w", errBroken, w.err)}
	}
	var err error
	if prepare != nil {
		if perr := prepare(); perr != nil {
			err = &NotSentError{perr}
		}
	}
	// The writes below can block on a peer that reads nothing: ctx ending
	// meanwhile fails them through the connection's deadline.
	stop := context.AfterFunc(ctx, func() {
		_ = w.conn.SetWriteDeadline(time.Unix(1, 0))
		w.deadlineSet <- struct{}{}
	})
	if err == nil && f != nil {
		var head []byte
		if head, err = appendHead(w.head[:0], f); err == nil {
			w.head = head
			if _, err = w.bw.Write(head); err == nil && (f.Kind == KindRequest || f.Kind == KindResponse) {
				_, err = w.bw.Write(f.Body)
			}
			if err != nil {
				w.breakWith(err)
			}
		}
	}
	// Whoever is last flushes, even a sender whose frame was not written:
	// frames before it may be waiting in the buffer.
	if w.err == nil && w.waiting.Load() == 0 {
		if ferr := w.bw.Flush(); ferr != nil {
			w.breakWith(ferr)
			if err == nil {
				err = ferr
			}
		}
	}
	if !stop() {
		// ctx ended while this sender had its turn: wait until its
		// deadline is set, so that it cannot fall on a later write.
		<-w.deadlineSet
		if w.err == nil {
			// No write was cut short (one that was broke the writer):
			// the stream is whole, and the connection stays in use. The
			// caller learns of its context's end as it waits for the
			// answer, and a request cancels on its own.
			_ = w.conn.SetWriteDeadline(time.Time{})
		}
	}
	return err
}

// send writes f, which no caller waits on (an answer, a cancel, a
// go-away, or nil to flush), within the writer's stall bound.
func (w *frameWriter) send(f *Frame) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.stall)
	defer cancel()
	return w.write(ctx, f, nil)
}
