package httpapi

import (
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
)

// holds reports whether w has been given the turn (and takes the grant).
func holds(w *waiter) bool {
	select {
	case <-w.ch:
		return true
	default:
		return false
	}
}

func lineLease(queue, group string) *fsm.Lease {
	return &fsm.Lease{Scope: fsm.ScopeWildcard, Queue: queue, Group: group}
}

// The turn goes to the earliest arrival among the pops that want it, not to
// the one that joined or asked first.
func TestLinesGiveTheTurnByArrival(t *testing.T) {
	ws := newWaiters()
	t0 := time.Now()
	holder := ws.join(lineLease("q", "g"), t0)
	ws.ready(holder, true)
	if !holds(holder) {
		t.Fatal("a pop alone in its line did not get the turn")
	}
	late := ws.join(lineLease("q", "g"), t0.Add(3*time.Millisecond))
	early := ws.join(lineLease("q", "g"), t0.Add(time.Millisecond))
	other := ws.join(lineLease("q", "other"), t0.Add(2*time.Millisecond))
	ws.ready(late, true)
	ws.ready(early, true)
	ws.ready(other, true)
	if !holds(other) {
		t.Error("a pop of another consumer group waited for the turn of this group's line")
	}
	if holds(late) || holds(early) {
		t.Fatal("the turn was given while the holder still looked")
	}
	ws.handOff(holder)() // its lease is queued
	if !holds(early) || holds(late) {
		t.Fatal("the turn did not go to the earlier arrival")
	}
	ws.pass(early)
	if !holds(late) {
		t.Fatal("the turn did not pass on")
	}
}

// A hand-off callback that comes late (an HTTP trace hook after the answer)
// must not pass a later turn of the same pop.
func TestLinesIgnoreALateHandOff(t *testing.T) {
	ws := newWaiters()
	now := time.Now()
	w := ws.join(lineLease("q", "g"), now)
	next := ws.join(lineLease("q", "g"), now.Add(time.Millisecond))
	ws.ready(w, true)
	if !holds(w) {
		t.Fatal("no turn")
	}
	stale := ws.handOff(w)
	ws.pass(w)
	ws.ready(w, true) // next has not asked: w looks again
	if !holds(w) {
		t.Fatal("no second turn")
	}
	ws.ready(next, true)
	stale()
	if holds(next) {
		t.Fatal("a hand-off of the first turn passed the second one")
	}
	ws.handOff(w)()
	if !holds(next) {
		t.Fatal("the current hand-off did not pass the turn")
	}
}

// A pop that leaves passes the turn it held, and an empty line goes.
func TestLinesLeavePassesTheTurnAndEmptyLinesGo(t *testing.T) {
	ws := newWaiters()
	now := time.Now()
	a := ws.join(lineLease("q", "g"), now)
	b := ws.join(lineLease("q", "g"), now.Add(time.Millisecond))
	ws.ready(a, true)
	ws.ready(b, true)
	if !holds(a) {
		t.Fatal("no turn")
	}
	ws.leave(a)
	if !holds(b) {
		t.Fatal("the turn of a pop that left was not passed on")
	}
	ws.leave(b)
	if len(ws.lines) != 0 || len(ws.byQueue) != 0 || len(ws.discovery) != 0 {
		t.Fatalf("lines left behind: %d lines, %d queues", len(ws.lines), len(ws.byQueue))
	}
}

// parkedThenHolder puts a pop in a line that looked, found nothing and
// parked (not wanting a look), then a later pop that holds the turn.
func parkedThenHolder(t *testing.T, ws *waiters, now time.Time) (parked, holder *waiter) {
	t.Helper()
	parked = ws.join(lineLease("q", "g"), now)
	ws.ready(parked, true)
	if !holds(parked) {
		t.Fatal("no turn")
	}
	ws.pass(parked)
	ws.ready(parked, false) // found nothing: parked, not wanting
	holder = ws.join(lineLease("q", "g"), now.Add(time.Millisecond))
	ws.ready(holder, true)
	if !holds(holder) {
		t.Fatal("a new pop waited behind a parked one nobody woke")
	}
	return parked, holder
}

// A holder that finds something to claim while a pop ahead of it is parked
// and not woken lets it look first, once per look; a pop ahead whose lease
// is already queued does not count.
func TestLinesYieldOncePerLook(t *testing.T) {
	ws := newWaiters()
	now := time.Now()
	parked, fresh := parkedThenHolder(t, ws, now)
	if !ws.yield(fresh) {
		t.Fatal("the new pop did not let the parked one look first")
	}
	if !holds(parked) {
		t.Fatal("the parked pop was not given the turn")
	}
	ws.ready(fresh, false)
	ws.pass(parked)
	ws.ready(parked, false) // it saw nothing to claim (another principal, say)
	if !holds(fresh) {
		t.Fatal("the turn did not come back")
	}
	if ws.yield(fresh) { // the same look goes on: it has not passed the turn since
		t.Fatal("yielded twice in one look")
	}
	ws.handOff(fresh)()
	inFlight := fresh
	late := ws.join(lineLease("q", "g"), now.Add(2*time.Millisecond))
	ws.ready(late, true)
	if !holds(late) {
		t.Fatal("no turn for the late pop")
	}
	ws.mu.Lock()
	parkedWaits := parked.waiting
	ws.mu.Unlock()
	if !parkedWaits || !ws.yield(late) {
		t.Fatal("the late pop did not yield to the parked pop ahead")
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if inFlight.wants {
		t.Error("a pop whose lease is queued was asked to look again")
	}
}

// A pop that yielded keeps its place from the moment it yields, not from
// when it next waits: if the pop it let look first passes the turn before
// the yielder is back in awaitTurn, a pop behind it must not get the turn.
func TestLinesYielderKeepsItsPlaceBeforeItWaitsAgain(t *testing.T) {
	ws := newWaiters()
	now := time.Now()
	parked, yielder := parkedThenHolder(t, ws, now)
	behind := ws.join(lineLease("q", "g"), now.Add(2*time.Millisecond))
	ws.ready(behind, true)
	if !ws.yield(yielder) {
		t.Fatal("the holder did not yield to the parked pop ahead")
	}
	if !holds(parked) {
		t.Fatal("the parked pop was not given the turn")
	}
	ws.pass(parked) // it looks and passes before the yielder waits again
	ws.ready(parked, false)
	if holds(behind) {
		t.Fatal("a later pop got the turn while the pop that yielded had not waited again")
	}
	ws.ready(yielder, true) // back in awaitTurn
	if !holds(yielder) {
		t.Fatal("the pop that yielded did not get the turn back")
	}
	ws.handOff(yielder)()
	if !holds(behind) {
		t.Fatal("the turn did not pass on to the pop behind")
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if yielder.waiting || !yielder.inFlight {
		t.Fatalf("after its hand-off the yielder is waiting=%v inFlight=%v, want false, true", yielder.waiting, yielder.inFlight)
	}
}
