package raftnode

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// OnLeadership tells a new watcher the current state first, on the
// goroutine that delivers every later change, so the watcher's last call
// always matches the node's leadership. crownd used to register its timers
// and then start them itself when IsLeader was true: a loss delivered in
// between was then overwritten by that stale "leader", and the timers ran
// on a follower until the next change.
func TestOnLeadershipTellsTheCurrentStateInOrderWithChanges(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := waitLeader(t, nodes...)
	type watcher struct {
		mu    sync.Mutex
		calls []bool
	}
	watch := func(n *testNode) *watcher {
		w := &watcher{}
		n.node.OnLeadership(func(isLeader bool) {
			w.mu.Lock()
			w.calls = append(w.calls, isLeader)
			w.mu.Unlock()
		})
		return w
	}
	last := func(w *watcher) (bool, int) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.calls) == 0 {
			return false, 0
		}
		return w.calls[len(w.calls)-1], len(w.calls)
	}
	ws := map[*testNode]*watcher{}
	for _, n := range nodes {
		ws[n] = watch(n)
		// Registration returns once the current state was delivered: the
		// first call. (A notification of the election just before, still
		// queued, may follow it with the same state.)
		ws[n].mu.Lock()
		calls := slices.Clone(ws[n].calls)
		ws[n].mu.Unlock()
		if len(calls) == 0 || calls[0] != (n == leader) {
			t.Fatalf("%s: calls %v right after registering; want the first to be %v", n.id, calls, n == leader)
		}
	}
	if err := leader.node.TransferLeadership(""); err != nil {
		t.Fatal(err)
	}
	next := waitLeader(t, nodes...)
	deadline := time.Now().Add(5 * time.Second)
	for _, n := range nodes {
		for {
			got, _ := last(ws[n])
			if got == n.node.IsLeader() && got == (n == next) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: watcher says leader=%v, node says %v (new leader %s)", n.id, got, n.node.IsLeader(), next.id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
