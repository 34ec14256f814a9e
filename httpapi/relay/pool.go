package relay

import "sync"

// Frame buffers are pooled: a follower relaying pops reads an answer of
// about 58 KiB for each, and the leader builds one, which otherwise were
// two allocations of that size a relayed pop.
var bufPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooled keeps rare huge frames (a 16 MiB push) from being held.
const maxPooled = 1 << 20

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > maxPooled {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}
