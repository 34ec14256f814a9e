package httpapi

// Long-poll lines: the order in which the pops of a scope look at the state
// and claim (queen-api.md 4.9). pop.go drives them.

import (
	"slices"
	"sync"
	"time"

	"github.com/crownmq/crown/fsm"
)

// waiters keeps the pops of each scope in a line, by arrival, and gives
// them the turn to look at the state and hand their lease on one at a time,
// so that the pops waiting on a scope are served in arrival order
// (queen-api.md 4.9).
//
// A scope (lineKey) is a pop form with its queue (wildcard), queue and
// partition (specific) or namespace and task (discovery), and the consumer
// group. Pops of other groups do not compete (each group gets every
// message), so they are in other lines and never wait for each other; nor
// are the forms ordered against each other.
//
// A commit that touches a queue wakes every line of the queue and every
// discovery line: all their pops want a look, and the turn goes to the
// earliest of them. The holder looks (CheckPopAs) and either finds nothing,
// passes the turn and parks again in its place, or hands its lease to the
// proposer and passes the turn as soon as the lease is queued
// (raftnode.WithEnqueued), not when it commits: the state machine applies
// leases in the order they were queued, so the earlier pop's lease claims
// first, and the later one's claims what is left (or nothing: that pop
// looks again once its node has applied the claims, still in its place, and
// parks on what it sees, a lease's expiry for one). On a follower the
// turn passes once the relayed pop is written to the leader (forwardPop).
//
// A pop whose lease is queued or relayed (inFlight) gets no turn until it is
// answered: its lease is already ahead of the later ones in the log, and
// holding the line until it commits would put every commit between two
// pops of a scope. The price: a lease claims only what was committed before
// it. When more pops are woken than there are messages, the later ones'
// leases come back empty; if a message commits between such an empty lease
// and the lease of a pop behind it, the pop behind gets it, and the one
// whose lease came back empty waits for the next. A pop that leaves
// (answered, timed out, its client gone, the node draining) leaves its line
// and passes the turn if it held it.
//
// The order is per node. Pops parked on different nodes are in different
// lines, and their leases reach the log in whatever order the nodes send
// them. The leader serves a follower's relayed pops in its own lines, by
// the time they reached it. A follower's new pop asks the leader before it
// looks here (pop, first round), so for as long as this node lags the
// leader it can claim a message before the pops parked here are woken by
// it.
//
// Lock order: mu is a leaf. It is never held while calling out (granting a
// turn is a send on a buffered channel); the parked gauge and the state
// are used outside it. It is taken by the apply goroutine (notify), by the
// pops, and by hand-off callbacks run inside Propose or the HTTP client's
// write loop, none of which holds another lock of this package then.
type waiters struct {
	mu        sync.Mutex
	lines     map[lineKey]*popLine
	byQueue   map[string]map[*popLine]struct{} // wildcard and specific lines
	discovery map[*popLine]struct{}
}

type lineKey struct {
	scope                                    uint8
	queue, partition, namespace, task, group string
}

type popLine struct {
	key   lineKey
	pops  []*waiter // by arrival
	turn  *waiter   // the pop looking now (nil: none)
	round uint64    // the round of looks under way (grant); starts at 1
	// filler is the pop holding back an under-full batch (minPopWaitTime),
	// nil when none: the pops behind it stand aside until it claims.
	filler *waiter
}

type waiter struct {
	line    *popLine // set at join, never changed
	arrival time.Time
	// ch carries the turn. It never holds more than one grant: a pop is
	// granted only while it waits (waiting), and takes the grant before it
	// waits again, or leaves.
	ch chan struct{}
	// Guarded by waiters.mu.
	wants    bool // new, woken or yielding: it wants a look
	waiting  bool // in awaitTurn: the turn may be given to it
	inFlight bool // its lease is queued (or relayed): no turn until it is answered
	yielded  bool // it gave its turn back during the current look (yield)
	grants   uint64
	looked   uint64 // the line's round in which it last had the turn (0: never)
	retry    bool   // its next look continues the last one (again): it keeps its round
}

func newWaiters() *waiters {
	return &waiters{lines: map[lineKey]*popLine{}, byQueue: map[string]map[*popLine]struct{}{},
		discovery: map[*popLine]struct{}{}}
}

// join puts a pop in its scope's line, wanting a look. Pops join nearly in
// order of arrival, so the place is found from the end; pops that arrived
// at the same instant keep the order they joined in.
func (ws *waiters) join(c *fsm.Lease, arrival time.Time) *waiter {
	key := lineKey{scope: c.Scope, group: c.Group}
	switch c.Scope {
	case fsm.ScopeDiscovery:
		key.namespace, key.task = c.Namespace, c.Task
	case fsm.ScopeSpecific:
		key.queue, key.partition = c.Queue, c.Partition
	default:
		key.queue = c.Queue
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := ws.lines[key]
	if l == nil {
		l = &popLine{key: key, round: 1}
		ws.lines[key] = l
		if key.scope == fsm.ScopeDiscovery {
			ws.discovery[l] = struct{}{}
		} else {
			set := ws.byQueue[key.queue]
			if set == nil {
				set = map[*popLine]struct{}{}
				ws.byQueue[key.queue] = set
			}
			set[l] = struct{}{}
		}
	}
	w := &waiter{line: l, arrival: arrival, ch: make(chan struct{}, 1), wants: true}
	i := len(l.pops)
	for i > 0 && arrival.Before(l.pops[i-1].arrival) {
		i--
	}
	l.pops = slices.Insert(l.pops, i, w)
	return w
}

// leave takes a pop out of its line for good, passing the turn on if it
// held it.
func (ws *waiters) leave(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := w.line
	if i := slices.Index(l.pops, w); i >= 0 {
		l.pops = slices.Delete(l.pops, i, i+1)
	}
	if l.turn == w {
		l.turn = nil
	}
	ws.endFill(w)
	if len(l.pops) > 0 {
		ws.grant(l)
		return
	}
	delete(ws.lines, l.key)
	if l.key.scope == fsm.ScopeDiscovery {
		delete(ws.discovery, l)
	} else if set := ws.byQueue[l.key.queue]; set != nil {
		delete(set, l)
		if len(set) == 0 {
			delete(ws.byQueue, l.key.queue)
		}
	}
}

// ready marks a pop as waiting for the turn (wanting it now, with want) and
// gives it the turn if nobody ahead wants it.
func (ws *waiters) ready(w *waiter, want bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.inFlight = false
	if w.line.turn == w {
		return // granted since it yielded: the grant waits in w.ch
	}
	w.waiting = true
	w.wants = w.wants || want
	ws.grant(w.line)
}

// pass ends a pop's look: it gives up the turn, if it still holds it, and
// is no longer in flight (its attempt was answered).
func (ws *waiters) pass(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.inFlight, w.yielded = false, false
	if w.line.turn == w {
		w.line.turn = nil
		ws.endFill(w)
		ws.grant(w.line)
	}
}

// handOff returns the callback by which the pop's lease, once queued for
// the log (or its relayed pop written), passes the turn on. It is called
// at most once per attempt but maybe late, from another goroutine (an
// HTTP trace hook): a call for an earlier turn than the current one does
// nothing.
func (ws *waiters) handOff(w *waiter) func() {
	ws.mu.Lock()
	g := w.grants
	ws.mu.Unlock()
	return func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		if w.line.turn == w && w.grants == g {
			w.inFlight, w.yielded = true, false
			w.line.turn = nil
			ws.endFill(w)
			ws.grant(w.line)
		}
	}
}

// yield gives the turn back, once per look, when the holder found
// something to claim while a pop ahead of it in the line is waiting: one
// woken by a commit during the look, or one parked that has not been woken
// (yet) by what the holder saw: a new pop can read a commit before its
// notify has run, or a lease expired before the parked pops' timers fire.
// Everyone ahead that is not in flight is marked to look again, and the
// holder keeps its place. Once per look, so that a pop ahead that cannot
// see what the holder sees (another principal) costs one look, not a loop.
func (ws *waiters) yield(w *waiter) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := w.line
	if w.yielded || l.turn != w {
		return false
	}
	ahead := l.pops[:slices.Index(l.pops, w)]
	if !slices.ContainsFunc(ahead, func(e *waiter) bool { return e.waiting }) {
		return false
	}
	// They and the holder look again in this round, before the pops
	// behind, whatever they did earlier in it.
	for _, e := range ahead {
		if !e.inFlight {
			e.wants, e.looked = true, l.round-1
		}
	}
	// The holder counts as waiting from now, not from its next awaitTurn:
	// a pop ahead may look and pass the turn before the holder is back,
	// and the turn must then come to the holder, not to a pop behind it.
	// A grant made meanwhile waits in its channel (ready).
	w.yielded, w.wants, w.looked, w.waiting = true, true, l.round-1, true
	l.turn = nil
	ws.grant(l)
	return true
}

// grant gives a free turn to the earliest pop that wants it, waits, and
// has not looked in the line's current round; when every such pop has, a
// new round begins. Rounds keep a busy line fair: commits that keep waking
// the pops ahead (a queue pushed to all the time, on partitions they do not
// wait for) would otherwise give them every turn, and a pop that arrived
// later would wait past its own timeout for its first look. A pop waits at
// most one round of looks, each a read of the state.
func (ws *waiters) grant(l *popLine) {
	if l.turn != nil {
		return
	}
	next := func() *waiter {
		for _, w := range l.pops {
			if w.wants && w.waiting && (w.looked < l.round || w.retry) {
				return w
			}
		}
		return nil
	}
	w := next()
	if w == nil {
		if !slices.ContainsFunc(l.pops, func(e *waiter) bool { return e.wants && e.waiting }) {
			return
		}
		l.round++
		w = next()
	}
	l.turn = w
	w.wants, w.waiting = false, false
	if !w.retry {
		w.looked = l.round
	}
	w.retry = false
	w.grants++
	w.ch <- struct{}{} // never blocks: see waiter.ch
}

// startFill records that w, holding the turn, holds back an under-full
// batch, and gives up the turn for the wait.
func (ws *waiters) startFill(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := w.line
	if l.filler == nil {
		l.filler = w
	}
	if l.turn == w {
		l.turn = nil
		ws.grant(l)
	}
}

// behindFill reports whether a pop ahead of w in its line holds back an
// under-full batch.
func (ws *waiters) behindFill(w *waiter) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := w.line
	return l.filler != nil && l.filler != w && slices.Index(l.pops, l.filler) < slices.Index(l.pops, w)
}

// endFill ends w's fill wait, if it was in one, when its claim is handed on
// (or it leaves): the pops that stood aside look again. Called with mu held.
func (ws *waiters) endFill(w *waiter) {
	if l := w.line; l.filler == w {
		l.filler = nil
		for _, e := range l.pops {
			e.wants = true
		}
	}
}

// again lets w look once more in its current round, before the pops behind
// it: a look again after an empty claim continues the look before it.
func (ws *waiters) again(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.retry = true
}

// wake makes every pop of w's line want a look: w's timer passed a time at
// which something may have become deliverable for the whole scope.
func (ws *waiters) wake(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.wakeLine(w.line)
}

func (ws *waiters) wakeLine(l *popLine) {
	for _, w := range l.pops {
		w.wants = true
	}
	ws.grant(l)
}

// notify runs on the apply goroutine after each commit: it wakes the lines
// the commit may have made something deliverable for.
func (ws *waiters) notify(e *fsm.Events) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if e.All {
		for _, set := range ws.byQueue {
			for l := range set {
				ws.wakeLine(l)
			}
		}
	} else {
		for q := range e.Queues {
			for l := range ws.byQueue[q] {
				ws.wakeLine(l)
			}
		}
	}
	if e.All || len(e.Queues) > 0 {
		for l := range ws.discovery {
			ws.wakeLine(l)
		}
	}
}
