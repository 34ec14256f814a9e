package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"time"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi/bufpool"
	"github.com/crownmq/crown/raftnode"
)

// maxPopTimeout bounds a long-poll; larger timeouts are clamped.
const maxPopTimeout = time.Hour

type popRequest struct {
	lease   fsm.Lease
	wait    bool
	timeout time.Duration
}

func queryBool(q url.Values, k string) bool {
	v := q.Get(k)
	return v == "true" || v == "1"
}

// queryInt reads an integer parameter; missing or unparsable values take
// the default (queen-api.md 1.2: pops have no 4xx for bad values).
func queryInt(q url.Values, k string, def int64) int64 {
	v, err := strconv.ParseInt(q.Get(k), 10, 64)
	if err != nil {
		return def
	}
	return v
}

// parsePop reads the parameters shared by the three pop forms (queen-api.md 3.6).
func (s *Server) parsePop(r *http.Request, scope uint8) (popRequest, *apiError, bool) {
	var p popRequest
	// A group dropped for a bad escape would pop in queue mode.
	q, aerr := queryFilters(r, "consumerGroup", "namespace", "task", "subscriptionMode", "subscriptionFrom")
	if aerr != nil {
		return p, aerr, false
	}
	p.wait = queryBool(q, "wait")
	l := &p.lease
	l.Scope = scope
	l.WindowBatch = s.cfg.WindowBatch
	l.SQLWindow = !s.cfg.Hotlist
	batch := queryInt(q, "batch", 1)
	l.Batch = uint32(min(max(batch, 1), int64(s.cfg.Limits.MaxPopBatch)))
	parts := queryInt(q, "partitions", 1)
	l.MaxPartitions = uint32(min(max(parts, 1), 10000))
	l.AutoAck = queryBool(q, "autoAck")
	l.LeaseSeconds = max(queryInt(q, "leaseSeconds", 0), 0)
	timeout := queryInt(q, "timeout", s.cfg.DefaultPopTimeout.Milliseconds())
	if timeout < 0 {
		timeout = s.cfg.DefaultPopTimeout.Milliseconds()
	}
	// Clamped well below the int64 nanosecond range of time.Duration.
	timeout = min(timeout, maxPopTimeout.Milliseconds())
	p.timeout = time.Duration(timeout) * time.Millisecond
	l.Group = q.Get("consumerGroup")
	if l.Group == "" {
		l.Group = fsm.QueueMode
	}
	switch q.Get("subscriptionMode") {
	case "new", "new-only":
		l.SubMode = fsm.SubNew
	}
	if from := q.Get("subscriptionFrom"); from == "now" {
		l.SubMode = fsm.SubNew
	} else if t, ok := parseTime(from); ok {
		l.SubMode, l.SubFrom = fsm.SubTimestamp, t.UnixMicro()
	}
	switch scope {
	case fsm.ScopeDiscovery:
		l.Namespace, l.Task = q.Get("namespace"), q.Get("task")
		if l.Namespace == "" && l.Task == "" {
			return p, badRequest(codeMissingField, "namespace", "namespace or task is required"), false
		}
	default:
		l.Queue = pathVar(r, "queue")
		if scope == fsm.ScopeSpecific {
			l.Partition = pathVar(r, "partition")
		}
	}
	// A name over the limit is refused (queen-api.md 1.2), not answered
	// "empty": a consumer group of that name would never be told.
	if aerr := checkPathNames("queue", l.Queue, "partition", l.Partition, "namespace", l.Namespace,
		"task", l.Task, "consumerGroup", l.Group); aerr != nil {
		return p, aerr, false
	}
	return p, nil, true
}

func (s *Server) popHandler(scope uint8) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		arrival := time.Now()
		p, aerr, ok := s.parsePop(r, scope)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		if !ok {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		s.pop(w, r, &p, arrival)
	}
}

// pop serves a pop: it proposes a lease when the local state says something
// is deliverable (or a first contact must be recorded), and otherwise parks
// until a commit on this node may have made something deliverable, a
// timer (lease expiry, delay, window) passes, or the deadline.
//
// Every pop, long-poll or not, takes its place in its scope's line at
// arrival and looks at the state only in its turn (waiters, below), so the
// pops waiting on a scope are served in arrival order (queen-api.md 4.9).
// A pop that arrives while nobody ahead of it in its line wants to look
// gets the turn at once and proceeds as it would alone. One that arrives
// while pops ahead of it are woken and not yet served waits for them: it
// arrived later, and letting it claim first is exactly the race the line
// is there to prevent. Its wait is their looks and hand-offs to the
// proposer (tens of microseconds each), never their commits, and a
// long-poll waits no longer than its own timeout. While one ahead holds
// back an under-full batch (minPopWaitTime), those behind it stand aside
// (behindFill): a long-poll until that pop claims, a wait=false pop
// answering empty at once. One that finds something to claim while pops ahead of it are still parked lets
// them look first, once (waiters.yield): what it saw is about to wake them
// (a commit whose notify has not run yet, a lease expired before their
// timer fired), and they arrived first.
func (s *Server) pop(w http.ResponseWriter, r *http.Request, p *popRequest, arrival time.Time) {
	ctx := r.Context()
	deadline := arrival.Add(p.timeout)
	c := &p.lease
	// parked: the pop has waited on an empty scope. minPopWaitTime is for
	// a queue that already has messages; a pop woken from the long-poll
	// park claims at once (queue-options.md, minPopWaitTime).
	parked := false
	// A follower's state may lag the leader's. Its first attempt therefore
	// asks the leader without consulting the local state, so a pop sees
	// every push answered before it started, whichever node took the push
	// (queen-api.md 3.5). Later attempts, after a wake-up, use the local
	// state as a hint: it has caught up with whatever woke it.
	first := true
	if s.cluster.IsLeader() {
		// A leader looks at its local state first: it must hold every
		// write this node answered, a restart's replay included.
		if aerr := s.localRead(ctx); aerr != nil {
			writeError(w, aerr)
			return
		}
		// And every write an earlier leader answered: a new leader
		// applies those only once an entry of its own term commits, and
		// a look before that would answer 204 over a message a push was
		// told is queued (queen-api.md 3.5). Once a term.
		if aerr := s.popCatchUp(ctx); aerr != nil {
			writeError(w, aerr)
			return
		}
	}
	wt := s.waiters.join(c, arrival)
	defer s.waiters.leave(wt)
	// park: the last look found nothing, and the pop waits to be woken
	// (until wakeAt, when a timer may make something deliverable) rather
	// than for a turn it asked for.
	park, wakeAt := false, int64(0)
	// A long-poll answers at its deadline whether or not its turn came; a
	// pop with wait=false waits only for the looks ahead of it.
	var until time.Time
	if p.wait {
		until = deadline
	}
	// retried: the previous round was the one immediate look again allowed
	// after a claim that came back empty (below).
	retried := false
	// filled: the pop has held back an under-full batch once; a look again
	// after an empty claim does not wait a second time.
	filled := false
	for {
		switch s.awaitTurn(ctx, wt, park, wakeAt, until) {
		case turnGone:
			return // the client left: claim nothing
		case turnOver:
			s.answerEmpty(w)
			return
		}
		if s.waiters.behindFill(wt) {
			// A pop ahead holds back an under-full batch: the messages are
			// its to claim first. A pop that must answer at once answers
			// empty; a long-poll waits for that pop's claim, which wakes it.
			s.waiters.pass(wt)
			if !p.wait {
				s.answerEmpty(w)
				return
			}
			park, wakeAt, parked = true, 0, true
			continue
		}
		count := p.wait && !parked && !filled && c.Batch > 1
		check, err := s.state.CheckPopAs(c, principalOf(r), time.Now().UnixMicro(), count)
		if err != nil {
			writeError(w, &apiError{Status: 500, Code: codeInternal, Message: err.Error()})
			return
		}
		// Checked on every round: a parked pop woken by the switch answers
		// now. A follower's first round asks the leader instead, whose pop
		// reads the switch as the log has it, not as this node last saw it.
		askLeader := first && !s.cluster.IsLeader()
		first = false
		if check.Maintenance && !askLeader {
			s.metrics.popEmpty.Inc()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if askLeader || check.Deliverable > 0 || check.NeedsRecord || check.Denied {
			if check.Deliverable > 0 && !askLeader && s.waiters.yield(wt) {
				park, wakeAt = false, 0
				continue // a pop ahead of this one looks first; this one keeps its place
			}
			if p.wait && !parked && !filled && !s.draining() && check.Deliverable > 0 && check.Deliverable < c.Batch && c.Batch > 1 && check.MinPopWait > 0 {
				// The pops behind this one arrived later, so they must not
				// claim the messages it holds back for (queen-api.md 4.9):
				// while it waits they stand aside (behindFill), a pop with
				// wait=false answering empty at once, and its claim wakes
				// them. It gives up the turn meanwhile, so they do not wait
				// for the turn itself.
				filled = true
				s.waiters.startFill(wt)
				s.fillWait(ctx, check.MinPopWait, deadline)
				// Then it claims whatever is there, even at its deadline (the
				// fill wait is capped by it): the pops behind stand aside, so
				// the turn comes after the looks already under way.
				if s.awaitTurn(ctx, wt, false, 0, time.Time{}) != turnHeld {
					return
				}
			}
			if ctx.Err() != nil {
				return // the client left: claim nothing
			}
			delivered, done := s.attemptPop(w, r, c, check.Encrypted, until, s.waiters.handOff(wt))
			s.waiters.pass(wt)
			if done || delivered {
				return
			}
			// The claim came back empty: the look before it is stale. A pop
			// ahead took the messages (its lease's expiry is now a time to
			// look again), this node asked the leader before catching up
			// with it (a lease it had not applied), or it became the leader
			// while relaying. Look again once this node has applied what
			// the claim saw, so the park below waits for the right timer,
			// and claim again at once, once, if that look finds something.
			// A pop with wait=false answers empty now: nothing to wait for.
			if !p.wait {
				s.answerEmpty(w)
				return
			}
			if !s.cluster.IsLeader() {
				rctx, cancel := context.WithDeadline(ctx, deadline)
				_ = s.localRead(rctx) // no longer than the pop may wait
				cancel()
			}
			if again, err := s.state.CheckPopAs(c, principalOf(r), time.Now().UnixMicro(), false); err == nil {
				check = again
				if check.Deliverable > 0 && !retried && time.Now().Before(deadline) && !s.draining() {
					retried, park, wakeAt = true, false, 0
					s.waiters.again(wt)
					continue
				}
			}
		} else {
			s.waiters.pass(wt)
		}
		// check.Maintenance here: the leader delivered nothing either, so
		// the switch is as this node sees it and the pop answers at once.
		if !p.wait || !time.Now().Before(deadline) || s.draining() || check.Maintenance {
			s.answerEmpty(w)
			return
		}
		park, wakeAt, parked, retried = true, check.WakeAt, true, false
	}
}

// popCatchUp is catchUpTerm for a pop on the leader, within --leader-wait.
// A node that lost leadership meanwhile goes on: its first round asks the
// leader.
func (s *Server) popCatchUp(ctx context.Context) *apiError {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.LeaderWait)
	defer cancel()
	err := s.catchUpTerm(ctx)
	if err == nil || errors.Is(err, errSealNotLeader) {
		return nil
	}
	return &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable,
		Message: "This node has just become the leader and is applying what earlier leaders committed; retry: " + err.Error()}
}

// answerEmpty answers a pop that delivered nothing.
func (s *Server) answerEmpty(w http.ResponseWriter) {
	s.metrics.popEmpty.Inc()
	if w.Header().Get(headerIndex) == "" && s.cluster.IsLeader() {
		// The state this answer was read from, for a follower that
		// relays it (forwardPop) to catch up with.
		w.Header().Set(headerIndex, strconv.FormatUint(s.state.AppliedIndex(), 10))
	}
	w.WriteHeader(http.StatusNoContent)
}

type turnOutcome uint8

const (
	turnHeld turnOutcome = iota // the pop may look
	turnGone                    // the client left
	turnOver                    // the deadline passed or the node drains: answer 204
)

// awaitTurn waits until wt holds its line's turn. A pop that wants to look
// now (a new one, one that yielded, one looking again after an empty claim) asks for the
// turn; a parked one (park) waits until a commit wakes its line or, at
// wakeAt (Unix µs, 0: never), a timer may have made something deliverable,
// which wakes its line too: the pops parked with it read the same state and
// would all wake then. A long-poll (until set) or a parked pop stops
// waiting when the node drains; every wait stops at until (zero: none) and
// when the client leaves.
func (s *Server) awaitTurn(ctx context.Context, wt *waiter, park bool, wakeAt int64, until time.Time) turnOutcome {
	s.waiters.ready(wt, !park)
	// A turn already granted wins over a deadline already past: a select
	// with both ready picks at random, and a long-poll whose timeout was
	// over before its look (timeout=0) would answer 204 over messages it
	// could take. Only a pop that finds nothing waits (queen-api.md 4.9).
	select {
	case <-wt.ch:
		return turnHeld
	default:
	}
	var wake, over <-chan time.Time
	if park && wakeAt > 0 && (until.IsZero() || time.UnixMicro(wakeAt).Before(until)) {
		t := time.NewTimer(max(time.Until(time.UnixMicro(wakeAt)), 0))
		defer t.Stop()
		wake = t.C
	}
	if !until.IsZero() {
		t := time.NewTimer(max(time.Until(until), 0))
		defer t.Stop()
		over = t.C
	}
	var closing <-chan struct{}
	if park || !until.IsZero() {
		closing = s.closing
	}
	if park {
		queue := wt.line.key.queue
		s.metrics.parked.add(queue, 1)
		defer s.metrics.parked.add(queue, -1)
	}
	for {
		select {
		case <-wt.ch:
			return turnHeld
		case <-wake:
			wake = nil
			s.waiters.wake(wt)
		case <-over:
			return turnOver
		case <-closing:
			return turnOver
		case <-ctx.Done():
			return turnGone
		}
	}
}

func (s *Server) draining() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// fillWait holds an under-full batch back for up to minPopWaitTime (capped
// by the request's deadline) so more messages can join it (queue-options.md,
// minPopWaitTime). It holds no lease and no storage resources.
func (s *Server) fillWait(ctx context.Context, ms int64, deadline time.Time) {
	d := min(time.Duration(ms)*time.Millisecond, time.Until(deadline))
	if d <= 0 {
		return
	}
	start := time.Now()
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	case <-s.closing: // the node drains: claim what is there now
		t.Stop()
	}
	s.metrics.fillWaits.Inc()
	s.metrics.fillWaitMicros.Add(float64(time.Since(start).Microseconds()))
}

// attemptPop proposes the lease on the leader, or asks the leader to try one
// (wait=false) from a follower. delivered reports a 200 written; done
// reports any other response written (an error). handedOff is called once
// the lease has its place: queued for the log here (the state machine
// applies leases in that order), or the relayed pop written to the leader.
func (s *Server) attemptPop(w http.ResponseWriter, r *http.Request, c *fsm.Lease, encrypted bool, until time.Time,
	handedOff func()) (delivered, done bool) {
	if !s.cluster.IsLeader() {
		delivered, done, leaderNow := s.forwardPop(w, r, until, handedOff)
		if !leaderNow {
			return delivered, done
		}
		// Nothing was sent: this node became the leader meanwhile, and
		// proposes here. Answering now would answer an empty queue, and a
		// pop with wait=false has no later round.
	}
	if aerr := s.canOpen(c, encrypted); aerr != nil {
		writeError(w, aerr)
		return false, true
	}
	// Bounded in bytes too: the answer is built in memory here (fsm.LeaseCapped).
	cmd := &fsm.LeaseCapped{Lease: *c, Principal: principalOf(r), MaxBytes: s.cfg.PopMaxBytes}
	// Not commit: a pop refused here for want of leadership must not be
	// relayed as the client sent it (wait=true would long-poll on the
	// leader past this pop's deadline); forwardPop asks for one attempt.
	rq := r.WithContext(raftnode.WithEnqueued(r.Context(), handedOff))
	res, ok, notLeader := s.proposeHere(w, rq, cmd, nil, writeError)
	if notLeader && s.cluster.IsLeader() {
		// Refused while still the leader: a leadership transfer refuses
		// every proposal until it ends. Claiming nothing would answer an
		// empty queue (queen-api.md 3.5); wait for the transfer as a
		// write does (commitPrepared), then lease here or on the new leader.
		wait := time.Now().Add(s.cfg.LeaderWait)
		if !until.IsZero() && until.Before(wait) {
			wait = until
		}
		for notLeader && s.cluster.IsLeader() {
			if !time.Now().Before(wait) {
				if !until.IsZero() {
					return false, false // the long-poll's deadline: it answers 204
				}
				writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: codeNoLeader,
					Message: "Leadership is being transferred; nothing was leased, retry"})
				return false, true
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-r.Context().Done():
				return false, true // the client left: nothing was leased
			}
			res, ok, notLeader = s.proposeHere(w, rq, cmd, nil, writeError)
		}
	}
	if notLeader {
		delivered, done, _ := s.forwardPop(w, r, until, handedOff)
		return delivered, done
	}
	if !ok {
		return false, true
	}
	lr := res.(*fsm.LeaseResult)
	if lr.Denied != "" {
		writeRefusal(w, r, &fsm.Refusal{Code: fsm.RefuseDeniedConsumer, Queue: lr.Denied})
		return false, true
	}
	if lr.Count() == 0 {
		return false, false
	}
	s.delivered.remember(lr)
	buf := bufpool.Get()
	defer bufpool.Put(buf)
	var aerr *apiError
	if *buf, aerr = s.appendPop(*buf, lr); aerr != nil {
		s.giveBack(r.Context(), lr, aerr)
		writeError(w, aerr)
		return false, true
	}
	writeRawJSON(w, http.StatusOK, *buf)
	return true, false
}

// canOpen refuses, before anything is leased, a pop naming a queue with
// encryptionEnabled (encrypted, from the pop check's own view) on a node
// that has no key to open its messages, as a push to it is refused:
// leasing first would hide the batch from every consumer until the lease
// expired (and consume it, with autoAck).
func (s *Server) canOpen(c *fsm.Lease, encrypted bool) *apiError {
	if s.cfg.Key.Enabled() || c.Queue == "" || !encrypted {
		return nil
	}
	return badRequest(codeEncryption, "queue", "queue %q has encryptionEnabled and this node has no QUEEN_ENCRYPTION_KEY; nothing was leased", c.Queue)
}

// giveBack releases the lease of a pop whose answer could not be built (a
// message this node cannot decrypt: no key, or another key than the one
// that sealed it), so the batch is delivered again at once and uncharged
// (a retry ack, queen-api.md 4.10) rather than after the lease expires. An
// autoAck pop holds no lease: its messages are consumed, and aerr says so.
func (s *Server) giveBack(ctx context.Context, lr *fsm.LeaseResult, aerr *apiError) {
	if lr.LeaseID == ([16]byte{}) {
		aerr.Message += "; the pop had autoAck, so these messages are consumed"
		return
	}
	release := &fsm.Ack{Group: lr.Group}
	for _, lp := range lr.Partitions {
		if len(lp.Messages) == 0 {
			continue
		}
		release.Items = append(release.Items, fsm.AckItem{TxID: lp.Messages[0].TxID, PartitionID: lp.PartitionID,
			PartitionOK: true, LeaseID: lr.LeaseID, HasLease: true, Status: fsm.AckRetry})
	}
	if _, _, err := s.cluster.Propose(ctx, release); err != nil {
		aerr.Message += "; releasing the lease failed (" + err.Error() + "), so the messages return when it expires"
		return
	}
	aerr.Message += "; the lease was released, so the messages can be delivered again at once"
}

// forwardPop asks the leader for one immediate pop attempt and relays its
// answer but a 204. A long-poll gives until, its deadline: waiting for a
// leader stops there, and the pop then answers 204 as its timeout says
// (queen-api.md 1.6), since nothing was leased.
//
// handedOff is called once the request is written to the leader, or before
// any wait for a leader (none known, or its address not registered yet) or
// after a failed dial, so that the pops behind this one in its line are not
// held up for a whole election. The relayed pops of a line therefore reach
// the leader's connections in their order, each written before the next
// starts; the leader serves each connection on its own goroutine, so its
// lines see them in that order nearly always, not always.
//
// leaderNow reports that nothing was sent because this node became the
// leader while it waited for one: the caller proposes the pop itself.
func (s *Server) forwardPop(w http.ResponseWriter, r *http.Request, until time.Time, handedOff func()) (delivered, done, leaderNow bool) {
	lctx := r.Context()
	if !until.IsZero() {
		var cancel context.CancelFunc
		lctx, cancel = context.WithDeadline(lctx, until)
		defer cancel()
	}
	timedOut := func(aerr *apiError) bool {
		return !until.IsZero() && !time.Now().Before(until) && r.Context().Err() == nil &&
			(aerr.notSent || aerr.Code == codeNoLeader)
	}
	var (
		leader string
		aerr   *apiError
	)
	if id, _ := s.cluster.Leader(); id != "" && id != s.cfg.NodeID {
		leader = s.nodeURL(id) // leaderURL's answer when it need not wait
	}
	if leader == "" {
		handedOff()
		leader, aerr = s.leaderURL(lctx)
	}
	if aerr != nil {
		if timedOut(aerr) {
			return false, false, false
		}
		writeError(w, aerr)
		return false, true, false
	}
	if leader == "" {
		return false, false, true
	}
	q := r.URL.Query()
	q.Set("wait", "false")
	uri := r.URL.EscapedPath() + "?" + q.Encode()
	trace := &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { handedOff() },
		ConnectDone: func(_, _ string, err error) {
			if err != nil {
				handedOff() // doRetryingUntil waits for a reachable leader
			}
		},
	}
	resp, aerr := s.fwd.doRetryingUntil(httptrace.WithClientTrace(r.Context(), trace), until, r, nil, leader, uri)
	if aerr == errBecameLeader {
		return false, false, true
	}
	if aerr != nil {
		if timedOut(aerr) {
			return false, false, false
		}
		writeError(w, aerr)
		return false, true, false
	}
	defer resp.Body.Close()
	// The pop was a write on the leader (a lease, a first contact): reads
	// here after it wait until this node has applied it, as after any
	// relayed write.
	s.fwd.catchUp(r.Context(), resp)
	if resp.StatusCode == http.StatusNoContent {
		return false, false, false
	}
	b, release, err := readAnswer(resp)
	defer release()
	if err != nil {
		writeError(w, &apiError{Status: 503, Code: codeUnknown, Message: "lost the leader's pop answer: " + err.Error()})
		return false, true, false
	}
	for _, h := range relayedHeaders {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	writeBody(w, resp.StatusCode, b)
	return resp.StatusCode == http.StatusOK, resp.StatusCode != http.StatusOK, false
}
