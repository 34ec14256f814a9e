package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/crownmq/crown/fsm"
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
	q := r.URL.Query()
	p := popRequest{wait: queryBool(q, "wait")}
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
	for {
		var wt *waiter
		if p.wait {
			// Register before checking, so a commit between the check and
			// the wait cannot be missed.
			wt = s.waiters.add(c)
		}
		count := p.wait && !parked && c.Batch > 1
		check, err := s.state.CheckPopAs(c, principalOf(r), time.Now().UnixMicro(), count)
		if err != nil {
			s.waiters.remove(wt)
			writeError(w, &apiError{Status: 500, Code: codeInternal, Message: err.Error()})
			return
		}
		// Checked on every round: a parked pop woken by the switch answers
		// now. A follower's first round asks the leader instead, whose pop
		// reads the switch as the log has it, not as this node last saw it.
		askLeader := first && !s.cluster.IsLeader()
		first = false
		if check.Maintenance && !askLeader {
			s.waiters.remove(wt)
			s.metrics.popEmpty.Inc()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if askLeader || check.Deliverable > 0 || check.NeedsRecord || check.Denied {
			if p.wait && !parked && check.Deliverable > 0 && check.Deliverable < c.Batch && c.Batch > 1 && check.MinPopWait > 0 {
				s.fillWait(ctx, check.MinPopWait, deadline)
			}
			if ctx.Err() != nil {
				s.waiters.remove(wt)
				return // the client left: claim nothing
			}
			until := time.Time{}
			if p.wait {
				until = deadline
			}
			delivered, done := s.attemptPop(w, r, c, check.Encrypted, until)
			if done || delivered {
				s.waiters.remove(wt)
				return
			}
			if askLeader {
				// The leader had nothing for it, and this node looked before
				// it caught up with the leader (a lease it had not applied,
				// say): look again once it has, so that the park below
				// waits for the right timer.
				rctx, cancel := context.WithDeadline(ctx, deadline)
				_ = s.localRead(rctx) // no longer than the pop may wait
				cancel()
				if again, err := s.state.CheckPopAs(c, principalOf(r), time.Now().UnixMicro(), false); err == nil {
					check = again
				}
			}
		}
		now := time.Now()
		// check.Maintenance here: the leader delivered nothing either, so
		// the switch is as this node sees it and the pop answers at once.
		if !p.wait || !now.Before(deadline) || s.draining() || check.Maintenance {
			s.waiters.remove(wt)
			s.metrics.popEmpty.Inc()
			if w.Header().Get(headerIndex) == "" && s.cluster.IsLeader() {
				// The state this answer was read from, for a follower that
				// relays it (forwardPop) to catch up with.
				w.Header().Set(headerIndex, strconv.FormatUint(s.state.AppliedIndex(), 10))
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		until := deadline
		if check.WakeAt > 0 {
			if t := time.UnixMicro(check.WakeAt); t.Before(until) {
				until = t
			}
		}
		s.metrics.parked.add(p.lease.Queue, 1)
		parked = true
		timer := time.NewTimer(max(time.Until(until), 0))
		select {
		case <-wt.ch:
		case <-timer.C:
		case <-ctx.Done():
		case <-s.closing:
		}
		timer.Stop()
		s.metrics.parked.add(p.lease.Queue, -1)
		s.waiters.remove(wt)
		if ctx.Err() != nil {
			return
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
	}
	s.metrics.fillWaits.Inc()
	s.metrics.fillWaitMicros.Add(float64(time.Since(start).Microseconds()))
}

// attemptPop proposes the lease on the leader, or asks the leader to try one
// (wait=false) from a follower. delivered reports a 200 written; done
// reports any other response written (an error).
func (s *Server) attemptPop(w http.ResponseWriter, r *http.Request, c *fsm.Lease, encrypted bool, until time.Time) (delivered, done bool) {
	if !s.cluster.IsLeader() {
		return s.forwardPop(w, r, until)
	}
	if aerr := s.canOpen(c, encrypted); aerr != nil {
		writeError(w, aerr)
		return false, true
	}
	var cmd fsm.Command = c
	if p := principalOf(r); p != "" {
		cmd = &fsm.LeaseAs{Lease: *c, Principal: p}
	}
	// Not commit: a pop refused here for want of leadership must not be
	// relayed as the client sent it (wait=true would long-poll on the
	// leader past this pop's deadline); forwardPop asks for one attempt.
	res, ok, notLeader := s.proposeHere(w, r, cmd, nil, writeError)
	if notLeader {
		return s.forwardPop(w, r, until)
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
	buf := getBuf()
	defer putBuf(buf)
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
func (s *Server) forwardPop(w http.ResponseWriter, r *http.Request, until time.Time) (delivered, done bool) {
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
	leader, aerr := s.leaderURL(lctx)
	if aerr != nil {
		if timedOut(aerr) {
			return false, false
		}
		writeError(w, aerr)
		return false, true
	}
	if leader == "" {
		return false, false // became leader; the next round proposes
	}
	q := r.URL.Query()
	q.Set("wait", "false")
	uri := r.URL.EscapedPath() + "?" + q.Encode()
	resp, aerr := s.fwd.doRetryingUntil(r.Context(), until, r, nil, leader, uri)
	if aerr == errBecameLeader {
		return false, false // the next round proposes here
	}
	if aerr != nil {
		if timedOut(aerr) {
			return false, false
		}
		writeError(w, aerr)
		return false, true
	}
	defer resp.Body.Close()
	// The pop was a write on the leader (a lease, a first contact): reads
	// here after it wait until this node has applied it, as after any
	// relayed write.
	s.fwd.catchUp(r.Context(), resp)
	if resp.StatusCode == http.StatusNoContent {
		return false, false
	}
	b, release, err := readAnswer(resp)
	defer release()
	if err != nil {
		writeError(w, &apiError{Status: 503, Code: codeUnknown, Message: "lost the leader's pop answer: " + err.Error()})
		return false, true
	}
	for _, h := range relayedHeaders {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	writeBody(w, resp.StatusCode, b)
	return resp.StatusCode == http.StatusOK, resp.StatusCode != http.StatusOK
}

// ---- long-poll waiters ----

// waiters parks pops by queue. A commit that touches a queue signals every
// pop parked on it (and every discovery pop, whose scope spans queues); each
// re-checks the state and at most one claims a given partition.
type waiters struct {
	mu        sync.Mutex
	byQueue   map[string]map[*waiter]struct{}
	discovery map[*waiter]struct{}
}

type waiter struct {
	queue string // "" with discovery
	disc  bool
	ch    chan struct{}
}

func newWaiters() *waiters {
	return &waiters{byQueue: map[string]map[*waiter]struct{}{}, discovery: map[*waiter]struct{}{}}
}

func (ws *waiters) add(c *fsm.Lease) *waiter {
	w := &waiter{queue: c.Queue, disc: c.Scope == fsm.ScopeDiscovery, ch: make(chan struct{}, 1)}
	ws.mu.Lock()
	if w.disc {
		ws.discovery[w] = struct{}{}
	} else {
		set := ws.byQueue[w.queue]
		if set == nil {
			set = map[*waiter]struct{}{}
			ws.byQueue[w.queue] = set
		}
		set[w] = struct{}{}
	}
	ws.mu.Unlock()
	return w
}

func (ws *waiters) remove(w *waiter) {
	if w == nil {
		return
	}
	ws.mu.Lock()
	if w.disc {
		delete(ws.discovery, w)
	} else if set := ws.byQueue[w.queue]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(ws.byQueue, w.queue)
		}
	}
	ws.mu.Unlock()
}

func (w *waiter) signal() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// notify runs on the apply goroutine after each commit: it only signals.
func (ws *waiters) notify(e *fsm.Events) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if e.All {
		for _, set := range ws.byQueue {
			for w := range set {
				w.signal()
			}
		}
	} else {
		for q := range e.Queues {
			for w := range ws.byQueue[q] {
				w.signal()
			}
		}
	}
	if e.All || len(e.Queues) > 0 {
		for w := range ws.discovery {
			w.signal()
		}
	}
}
