package segments

import (
	"os"
	"sync"
	"time"
)

// writeback has the kernel start writing the store's dirty pages every
// interval, without waiting for it (startWriteback). A store that does not
// fsync leaves its writes to the kernel, which flushes pages once they are
// 30 s old, every 5 s: on the test host 40-120 MB at a time. Every Raft log
// fsync on the same disk then queued behind that burst (push latency maxima
// of 265-406 ms at 16,000 msg/s; 57-70 ms with this every 100 ms,
// docs/performance.md lesson 20). More often costs throughput: a page the
// state file rewrites is written each time (crownd's default, 250 ms, is
// the measured middle). It is I/O scheduling only: what
// is on disk when is still the kernel's business, and recovery never relies
// on it (fsm/DESIGN.md).
type writeback struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// startWritebackLoop kicks the state database and every open blob file
// each interval; kick is startWriteback outside tests.
func startWritebackLoop(s *Store, interval time.Duration, kick func(*os.File) error) (*writeback, error) {
	db, err := os.Open(s.path) // a handle of our own: bbolt does not export its file
	if err != nil {
		return nil, err
	}
	w := &writeback{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer db.Close()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			// Errors are ignored: this only schedules what the kernel
			// would write later anyway. A blob file the writer closes
			// meanwhile fails cleanly (startWriteback holds the
			// descriptor for the call).
			kick(db)
			for _, f := range s.blobs.openFiles() {
				kick(f)
			}
		}
	}()
	return w, nil
}

func (w *writeback) close() {
	if w == nil {
		return
	}
	w.once.Do(func() { close(w.stop) })
	<-w.done
}
