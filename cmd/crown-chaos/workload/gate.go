package workload

import (
	"context"
	"sync"
)

// Gate lets the runner quiesce the workload: workers Enter before an
// operation and Leave after it; Pause blocks new entries and waits until
// every worker has left.
type Gate struct {
	mu     sync.Mutex
	resume chan struct{} // non-nil while paused; closed by Resume
	idle   chan struct{} // closed when active drops to 0 during a pause
	active int
	// pausing is closed by Pause, so that a worker in a long sleep can give
	// up and leave early. Only created (lazily) while not paused.
	pausing chan struct{}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Pausing returns a channel that is closed once a pause is requested
// (already closed while paused).
func (g *Gate) Pausing() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resume != nil {
		return closedChan
	}
	if g.pausing == nil {
		g.pausing = make(chan struct{})
	}
	return g.pausing
}

// Enter waits while the gate is paused; it returns false when ctx ends.
func (g *Gate) Enter(ctx context.Context) bool {
	g.mu.Lock()
	for g.resume != nil {
		ch := g.resume
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
		g.mu.Lock()
	}
	g.active++
	g.mu.Unlock()
	if ctx.Err() != nil {
		g.Leave()
		return false
	}
	return true
}

// Leave ends an operation started with Enter.
func (g *Gate) Leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.active--
	if g.active == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// Pause blocks new operations and waits until none is in flight (or ctx
// ends; the gate stays paused either way until Resume).
func (g *Gate) Pause(ctx context.Context) error {
	idle := func() chan struct{} {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.resume == nil {
			g.resume = make(chan struct{})
			if g.pausing != nil {
				close(g.pausing)
				g.pausing = nil
			}
		}
		if g.active == 0 {
			return nil
		}
		if g.idle == nil {
			g.idle = make(chan struct{})
		}
		return g.idle
	}()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Resume lets operations start again.
func (g *Gate) Resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resume != nil {
		close(g.resume)
		g.resume = nil
	}
}
