// Package bufpool keeps the byte buffers of the HTTP layer's hot paths for
// reuse: the answers it encodes, the bodies it reads, and the frames a
// follower and the leader exchange over a relay connection (httpapi/relay).
// One pool for all of them, so a buffer one path gave back serves the next.
package bufpool

import "sync"

// initial is a new buffer's capacity: most answers and bodies fit.
const initial = 16 << 10

// maxKept keeps rare huge buffers (a 16 MiB push) from being held.
const maxKept = 4 << 20

var pool = sync.Pool{New: func() any { b := make([]byte, 0, initial); return &b }}

// Get returns an empty buffer.
func Get() *[]byte { return pool.Get().(*[]byte) }

// Put gives b back; neither it nor anything sliced from it may be used after.
func Put(b *[]byte) {
	if cap(*b) > maxKept {
		return
	}
	*b = (*b)[:0]
	pool.Put(b)
}
