package fsm

import (
	"bytes"
	"fmt"
	"net/http"
	"sort"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/crownmq/crown/segments"
)

// Apply functions of the OJS administration commands, and the OJS checks
// the push and pop paths call for gated queues (docs/queues.md).

// StateName is a queue's OJS state as shown on the wire.
func StateName(q *segments.Queue) string {
	if q.OJS == nil {
		return "active"
	}
	switch q.OJS.State {
	case segments.OJSPaused:
		return "paused"
	case segments.OJSDraining:
		return "draining"
	}
	return "active"
}

// StrategyName names a delete strategy.
func StrategyName(s uint8) string {
	switch s {
	case segments.DeleteReject:
		return "reject"
	case segments.DeletePurge:
		return "purge"
	case segments.DeleteMove:
		return "move"
	case segments.DeleteDiscard:
		return "discard"
	}
	return ""
}

func ojsErr(status int, code, typ, format string, args ...any) *OJSResult {
	return &OJSResult{Err: &OJSError{Status: status, Code: code, Type: typ, Message: fmt.Sprintf(format, args...)}}
}

// queueLimit refuses a queue's creation when the cluster holds max queues
// already (ojs-queues.md 0.4; 0: no bound), implicit creations included.
func (a *applier) queueLimit(max uint32) *OJSResult {
	if max > 0 && a.tx.QueueCount() >= uint64(max) {
		return ojsErr(http.StatusUnprocessableEntity, "validation_error", "queue_limit_reached",
			"the cluster already has %d queues, the limit", max)
	}
	return nil
}

// fieldErr is ojsErr naming the field at fault (details.field).
func fieldErr(field string, status int, code, typ, format string, args ...any) *OJSResult {
	r := ojsErr(status, code, typ, format, args...)
	r.Err.Field = field
	return r
}

func notFound(name string) *OJSResult {
	return ojsErr(http.StatusNotFound, "not_found", "queue_not_found", "queue %s does not exist", name)
}

func conflict(typ string, q *segments.Queue, format string, args ...any) *OJSResult {
	r := ojsErr(http.StatusConflict, "conflict", typ, format, args...)
	if q != nil {
		r.Err.State = StateName(q)
	}
	return r
}

func deleting(q *segments.Queue) bool { return q.OJS != nil && q.OJS.Deletion != nil }

func gracefulDrain(q *segments.Queue) bool {
	return q.OJS != nil && q.OJS.State == segments.OJSDraining && q.OJS.Deletion == nil
}

func copyQueue(q *segments.Queue) *QueueInfo { c := *q; return &c }

// event records a replicated queue event.
func (a *applier) event(e segments.QueueEvent) {
	e.Time = a.now
	must(a.tx.AddQueueEvent(&e, MaxQueueEvents))
}

// OJS lifetime counters, kept in the settings bucket.
const (
	ojsCreated = iota
	ojsDeleted
	ojsOverflow
	numOJSCounters
)

const ojsCountersKey = "ojs_counters"

func (a *applier) countOJS(i int) {
	v := a.tx.Setting(ojsCountersKey)
	if len(v) < numOJSCounters*8 {
		nv := make([]byte, numOJSCounters*8)
		copy(nv, v)
		v = nv
	}
	o := i * 8
	n := uint64(0)
	for j := 0; j < 8; j++ {
		n = n<<8 | uint64(v[o+j])
	}
	n++
	for j := 7; j >= 0; j-- {
		v[o+j] = byte(n)
		n >>= 8
	}
	must(a.tx.PutSetting(ojsCountersKey, v))
}

// ensureOJS gives a queue an OJS state (implicit, active) when it has none.
func ensureOJS(q *segments.Queue) {
	if q.OJS == nil {
		q.OJS = &segments.OJSState{}
	}
}

// newQueue builds (without storing) a queue born with origin, binding a
// policy as bind says. It returns nil and an error result for an unknown
// named policy.
func (a *applier) newQueue(name string, origin uint8, bind uint8, policy string) (*segments.Queue, *OJSResult) {
	q := &segments.Queue{Name: name, CreatedAt: a.now, Origin: origin}
	switch origin {
	case segments.OriginOJS:
		q.Options = DefaultOptionsOJS()
	default:
		q.Options = DefaultOptions(origin)
	}
	if origin != segments.OriginConfigure {
		q.Namespace, q.Task = DeriveTags(name)
	}
	if origin == segments.OriginPush && !a.tx.HasPolicies() {
		return q, nil // the plain Queen case: nothing to bind, nothing to resolve
	}
	var pol string
	switch bind {
	case BindAuto:
		if p := choosePolicy(a.tx, name); p != nil {
			pol = p.Name
		}
	case BindNamed:
		if p := must1(a.tx.Policy(policy)); p == nil || policy == DefaultPolicyName {
			return nil, fieldErr("policy", http.StatusUnprocessableEntity, "validation_error", "unknown_policy",
				"policy %s does not exist", policy)
		}
		pol = policy
	}
	if origin == segments.OriginOJS || pol != "" || must1(a.tx.Policy(DefaultPolicyName)) != nil {
		b := q.Options
		q.Base = &b
		q.OJS = &segments.OJSState{Policy: pol, UpdatedAt: a.now}
		resolve(a.tx, q)
	}
	return q, nil
}

// store creates a queue built by newQueue and records its creation.
func (a *applier) store(q *segments.Queue) {
	q.UUID = a.newID()
	must(a.tx.CreateQueue(q))
	a.countOJS(ojsCreated)
	a.event(segments.QueueEvent{Type: "queue.created", Queue: q.Name, Policy: policyOf(q)})
}

func policyOf(q *segments.Queue) string {
	if q.OJS == nil {
		return ""
	}
	return q.OJS.Policy
}

// ---- configure with presence ----

func applyConfigureSet(a *applier, c *ConfigureSet) any {
	opts := c.Configure.Options
	ClampOptions(&opts)
	q := must1(a.tx.Queue(c.Configure.Queue))
	created := false
	if q == nil {
		nq, _ := a.newQueue(c.Configure.Queue, segments.OriginConfigure, BindAuto, "")
		q, created = nq, true
	}
	q.Namespace, q.Task = c.Configure.Namespace, c.Configure.Task
	// The options the request names beat every policy, now and after any
	// later policy edit (docs/queues.md, layer 4); kept as the bits of
	// Named beside the base rather than as OJS overrides, whose ranges and
	// single dead-letter switch cannot say every Queen value (a lease over
	// 12 hours, retention off, the two dead-letter flags apart).
	q.Named = c.Present & presentShared
	q.ConfiguredAt = a.now
	if q.OJS == nil && q.Base == nil && !a.tx.HasPolicies() {
		q.Options = opts
	} else {
		b := opts
		q.Base = &b
		ensureOJS(q)
		// A configure replaces the shared options whole, OJS overrides of
		// them included.
		ov := &q.OJS.Overrides
		ov.VisibilityTimeout, ov.DLQEnabled, ov.CompletedTTL = nil, nil, nil
		q.OJS.UpdatedAt = a.now
		resolve(a.tx, q)
	}
	if created {
		a.store(q)
	} else {
		must(a.tx.PutQueue(q))
		// Every queue shows in the OJS view, and its configuration moved.
		a.event(segments.QueueEvent{Type: "queue.config_updated", Queue: q.Name, Reason: "configure"})
	}
	a.events.touch(q.Name)
	return &ConfigureResult{Queue: *q}
}

// ---- create ----

func applyOJSCreateQueue(a *applier, c *OJSCreateQueue) any {
	if q := must1(a.tx.Queue(c.Name)); q != nil {
		if deleting(q) {
			return conflict("queue_deleting", q, "queue %s is being deleted", c.Name)
		}
		return conflict("queue_exists", q, "queue %s already exists; use PATCH to change it", c.Name)
	}
	if er := a.queueLimit(c.MaxQueues); er != nil {
		return er
	}
	q, er := a.newQueue(c.Name, segments.OriginOJS, c.Bind, c.Policy)
	if er != nil {
		return er
	}
	q.OJS.Explicit = true
	q.OJS.Overrides = QueueConfig{}
	mergeConfig(&q.OJS.Overrides, &c.Config)
	if c.Paused {
		q.OJS.State, q.OJS.PausedAt = segments.OJSPaused, a.now
	}
	resolve(a.tx, q)
	a.store(q)
	if c.Paused {
		a.event(segments.QueueEvent{Type: "queue.paused", Queue: q.Name})
	}
	return a.queueResult(q, OJSResult{Created: true, Changed: true})
}

// ---- update ----

func configBytes(c *QueueConfig) []byte {
	b, err := msgpack.Marshal(c)
	must(err)
	return b
}

// changedFields lists the dotted paths whose override differs.
func changedFields(before, after *QueueConfig) []string {
	var out []string
	for i, path := range FieldPaths {
		var x, y QueueConfig
		mergeConfig(&x, before)
		mergeConfig(&y, after)
		keep := FieldsAll &^ (uint32(1) << i)
		unsetFields(&x, keep)
		unsetFields(&y, keep)
		if !bytes.Equal(configBytes(&x), configBytes(&y)) {
			out = append(out, path)
		}
	}
	return out
}

func applyOJSUpdateQueue(a *applier, c *OJSUpdateQueue) any {
	q := must1(a.tx.Queue(c.Name))
	if q == nil {
		return notFound(c.Name)
	}
	if deleting(q) {
		return conflict("queue_deleting", q, "queue %s is being deleted", c.Name)
	}
	ensureOJS(q)
	s := q.OJS
	// Every check before any change.
	newState := s.State
	switch c.State {
	case ToActive:
		newState = segments.OJSActive
	case ToPaused:
		if s.State == segments.OJSDraining {
			return conflict("invalid_state_transition", q, "queue %s is draining; it cannot be paused (set state active to cancel the drain)", c.Name)
		}
		newState = segments.OJSPaused
	case ToDraining:
		if c.Name == DefaultQueue && s.State != segments.OJSDraining {
			// A graceful drain ends in deletion, and default always exists.
			return conflict("queue_protected", q, "queue default cannot be drained: it always exists")
		}
		if s.State == segments.OJSPaused {
			return conflict("invalid_state_transition", q, "queue %s is paused; resume it before draining", c.Name)
		}
		newState = segments.OJSDraining
	}
	newPolicy := s.Policy
	switch c.Bind {
	case BindNone:
		newPolicy = ""
	case BindNamed:
		if p := must1(a.tx.Policy(c.Policy)); p == nil || c.Policy == DefaultPolicyName {
			return fieldErr("policy", http.StatusUnprocessableEntity, "validation_error", "unknown_policy", "policy %s does not exist", c.Policy)
		}
		newPolicy = c.Policy
	}
	shownBefore := Overrides(q)
	before := s.Overrides
	var after QueueConfig
	if !c.Replace {
		mergeConfig(&after, &before)
		unsetFields(&after, c.Unset)
	}
	mergeConfig(&after, &c.Set)
	fields := changedFields(&before, &after)
	// An override set or removed here replaces the value a /configure
	// named for the same option, which shares the layer.
	named := q.Named &^ namedBy(&c.Set, c.Unset)
	if c.Replace {
		named = 0
	}
	stateChanged := newState != s.State
	policyChanged := newPolicy != s.Policy
	if len(fields) == 0 && !stateChanged && !policyChanged && named == q.Named {
		return a.queueResult(q, OJSResult{})
	}
	s.Overrides = after
	dropNamed(q, q.Named&^named)
	q.Named = named
	// The event lists what the overrides show changed, options a
	// /configure named included.
	shownAfter := Overrides(q)
	fields = changedFields(&shownBefore, &shownAfter)
	s.Policy = newPolicy
	if stateChanged {
		s.State = newState
		s.PausedAt, s.DrainingSince = 0, 0
		switch newState {
		case segments.OJSPaused:
			s.PausedAt = a.now
		case segments.OJSDraining:
			s.DrainingSince = a.now
		}
	}
	s.UpdatedAt = a.now
	resolve(a.tx, q)
	must(a.tx.PutQueue(q))
	a.events.touch(q.Name)
	if policyChanged {
		fields = append(fields, "policy")
	}
	if len(fields) > 0 {
		a.event(segments.QueueEvent{Type: "queue.config_updated", Queue: q.Name, Fields: fields, Policy: newPolicy})
	}
	if stateChanged {
		typ := map[uint8]string{segments.OJSActive: "queue.resumed", segments.OJSPaused: "queue.paused", segments.OJSDraining: "queue.draining"}[newState]
		a.event(segments.QueueEvent{Type: typ, Queue: q.Name})
	}
	return a.queueResult(q, OJSResult{Changed: true})
}

// ---- pause / resume ----

func applyOJSSetState(a *applier, c *OJSSetState) any {
	q := must1(a.tx.Queue(c.Name))
	if q != nil && c.EnsureOnly {
		return a.queueResult(q, OJSResult{})
	}
	if q == nil {
		if c.Strict && !c.EnsureOnly {
			return notFound(c.Name)
		}
		if er := a.queueLimit(c.MaxQueues); er != nil {
			return er
		}
		nq, er := a.newQueue(c.Name, segments.OriginOJS, BindAuto, "")
		if er != nil {
			return er
		}
		if c.Pause && !c.EnsureOnly {
			nq.OJS.State, nq.OJS.PausedAt = segments.OJSPaused, a.now
			resolve(a.tx, nq)
		}
		a.store(nq)
		if c.Pause && !c.EnsureOnly {
			a.event(segments.QueueEvent{Type: "queue.paused", Queue: nq.Name, Reason: c.Reason})
		}
		return a.queueResult(nq, OJSResult{Created: true, Changed: true})
	}
	if deleting(q) {
		return conflict("queue_deleting", q, "queue %s is being deleted", c.Name)
	}
	if gracefulDrain(q) {
		return conflict("queue_draining", q, "queue %s is draining", c.Name)
	}
	ensureOJS(q)
	s := q.OJS
	if c.Pause == (s.State == segments.OJSPaused) {
		return a.queueResult(q, OJSResult{}) // idempotent: keeps paused_at
	}
	typ := "queue.resumed"
	if c.Pause {
		s.State, s.PausedAt = segments.OJSPaused, a.now
		typ = "queue.paused"
	} else {
		s.State, s.PausedAt = segments.OJSActive, 0
	}
	s.UpdatedAt = a.now
	setGate(s)
	must(a.tx.PutQueue(q))
	a.events.touch(q.Name)
	a.event(segments.QueueEvent{Type: typ, Queue: q.Name, Reason: c.Reason})
	return a.queueResult(q, OJSResult{Changed: true})
}

// ---- counts ----

// QueueDepth is a queue's unconsumed backlog: messages and payload bytes
// (bytes only when withBytes).
func queueDepth(tx *segments.Tx, q *segments.Queue, withBytes bool) (depth, size uint64) {
	must(tx.ForEachPartition(q.ID, "", func(p *segments.Partition) (bool, error) {
		depth += partitionBacklog(tx, p)
		if withBytes {
			size += partitionBacklogBytes(tx, p)
		}
		return true, nil
	}))
	return depth, size
}

// liveLeases counts the queue's leased batches that are live at now, and
// returns the earliest expiry among them.
func liveLeases(tx *segments.Tx, q *segments.Queue, now int64) (n int64, next int64) {
	must(tx.ForEachPartition(q.ID, "", func(p *segments.Partition) (bool, error) {
		must(tx.ForEachGroup(p.ID, func(_ string, g *segments.Group) (bool, error) {
			if g.LeaseLive(now) {
				n++
				if next == 0 || g.LeaseExpiry < next {
					next = g.LeaseExpiry
				}
			}
			return true, nil
		}))
		return true, nil
	}))
	return n, next
}

func allowed(restrict bool, list []string, principal string) bool {
	if !restrict {
		return true
	}
	for _, s := range list {
		if s == principal && principal != "" {
			return true
		}
	}
	return false
}

// ---- push-side checks ----

// checkIntake applies the state and access rules to a push into q.
func checkIntake(q *segments.Queue, principal string) *Refusal {
	s := q.OJS
	if s.Deletion != nil {
		return &Refusal{Code: RefuseDeleting, Queue: q.Name}
	}
	if s.State == segments.OJSDraining {
		return &Refusal{Code: RefuseDraining, Queue: q.Name}
	}
	if !allowed(s.Limits.RestrictProducers, s.Limits.Producers, principal) {
		return &Refusal{Code: RefuseDenied, Queue: q.Name}
	}
	return nil
}

// checkCapacity refuses a push that would take q's backlog past a bound.
// A queue created by this push has no backlog yet.
func (a *applier) checkCapacity(q *segments.Queue, n, size uint64) *Refusal {
	r, _ := a.capacityFill(q, n, size)
	return r
}

// recordOverflow counts a capacity refusal on the queue (after the push's
// writes were rolled back) and records a queue.full event.
func (a *applier) recordOverflow(r *Refusal) {
	if r.Code != RefuseFull {
		return
	}
	a.countOJS(ojsOverflow)
	q := must1(a.tx.Queue(r.Queue))
	if q != nil && q.OJS != nil {
		q.OJS.Overflow++
		must(a.tx.PutQueue(q))
	}
	a.event(segments.QueueEvent{Type: "queue.full", Queue: r.Queue, Count: r.Depth, Reason: r.BoundType})
}

func applyPushAs(a *applier, c *PushAs) any {
	if br := a.bufferIfMaintenance(c.Items, c.Principal); br != nil {
		return br // push maintenance (system_apply.go)
	}
	res, pressure, ref := a.pushAs(c.Items, c.Principal)
	if ref != nil {
		a.recordOverflow(ref)
		return &PushResult{Items: make([]PushItemResult, len(c.Items)), Refused: ref}
	}
	return &PushResult{Items: res, Pressure: pressure}
}

// ---- pop-side checks ----

// popGate applies the OJS rules to a pop on q: it reports whether the pop
// may take from q and, when max_concurrency applies, how many more batches.
func (a *applier) popGate(p *popState, q *segments.Queue) (ok bool, room int64) {
	s := q.OJS
	if s.State == segments.OJSPaused || s.Deletion != nil {
		return false, 0 // paused: skipped; deleting: nothing left to deliver
	}
	if !allowed(s.Limits.RestrictConsumers, s.Limits.Consumers, p.principal) {
		if p.c.Scope != ScopeDiscovery && p.res.Denied == "" {
			p.res.Denied = q.Name
		}
		return false, 0
	}
	room = -1
	if s.Limits.MaxConcurrency > 0 {
		n, _ := liveLeases(a.tx, q, a.now)
		room = s.Limits.MaxConcurrency - n
		if room <= 0 {
			return false, 0
		}
	}
	return true, room
}

func applyLeaseAs(a *applier, c *LeaseAs) any { return a.lease(&c.Lease, c.Principal, 0) }

// ---- delete ----

func applyOJSDeleteQueue(a *applier, c *OJSDeleteQueue) any {
	q := must1(a.tx.Queue(c.Name))
	if q == nil {
		return notFound(c.Name)
	}
	if c.Name == DefaultQueue {
		return conflict("queue_protected", q, "queue default cannot be deleted")
	}
	if deleting(q) {
		d := q.OJS.Deletion
		if d.Strategy != c.Strategy || d.Target != c.Target {
			return conflict("queue_deleting", q, "queue %s is already being deleted with strategy %s", c.Name, StrategyName(d.Strategy))
		}
		depth, _ := queueDepth(a.tx, q, false)
		return a.queueResult(q, OJSResult{Pending: true, Affected: depth})
	}
	depth, _ := queueDepth(a.tx, q, false)
	if c.Strategy == segments.DeleteReject && depth > 0 {
		r := conflict("queue_not_empty", q, "queue %s still holds %d messages", c.Name, depth)
		v := ojsView(a.tx, q, a.now)
		r.Err.Depth, r.Err.Available, r.Err.Active = int64(depth), int64(v.Available), int64(v.Active)
		return r
	}
	if c.Strategy == segments.DeleteMove {
		if c.Target == c.Name {
			return fieldErr("target_queue", http.StatusUnprocessableEntity, "validation_error", "invalid_target", "target_queue must differ from the queue")
		}
		t := must1(a.tx.Queue(c.Target))
		if t == nil {
			if c.Strict {
				return ojsErr(http.StatusNotFound, "not_found", "queue_not_found",
					"target queue %s does not exist (strict mode creates no queue implicitly)", c.Target)
			}
			// The move would create the target: check the queue limit and the
			// capacity it would have (its policy layers) before any change.
			if er := a.queueLimit(c.MaxQueues); er != nil {
				return er
			}
			nq, er := a.newQueue(c.Target, segments.OriginOJS, BindAuto, "")
			if er != nil {
				return er
			}
			t = nq
		} else if deleting(t) {
			return conflict("queue_deleting", t, "target queue %s is being deleted", c.Target)
		} else if gracefulDrain(t) {
			return conflict("queue_draining", t, "target queue %s is draining", c.Target)
		}
		if t.OJS != nil && t.OJS.Gate&segments.GateCapacity != 0 {
			_, size := queueDepth(a.tx, q, t.OJS.Limits.MaxSizeBytes > 0)
			if r := a.checkCapacity(t, depth, size); r != nil {
				r := conflict("target_queue_full", t, "moving %d messages would exceed the capacity of queue %s", depth, c.Target)
				if t.ID == 0 {
					r.Err.State = "" // the target does not exist yet
				}
				return r
			}
		}
	}
	if n, _ := liveLeases(a.tx, q, a.now); n > 0 {
		// The jobs outside live leases are handled now (ojs-queues.md 6.5):
		// removed, or moved into the target (created now). The leased
		// batches are left to finish; the last one to settle completes
		// the deletion with what is left (maybeFinish).
		var affected uint64
		if c.Strategy == segments.DeleteMove {
			affected = a.moveBacklog(q, c.Target, true)
		} else {
			affected = a.purgeIdle(q)
		}
		ensureOJS(q)
		s := q.OJS
		if s.State != segments.OJSDraining {
			s.State, s.DrainingSince, s.PausedAt = segments.OJSDraining, a.now, 0
		}
		s.Deletion = &segments.Deletion{Strategy: c.Strategy, Target: c.Target, StartedAt: a.now}
		s.UpdatedAt = a.now
		setGate(s)
		must(a.tx.PutQueue(q))
		a.events.touch(q.Name)
		a.event(segments.QueueEvent{Type: "queue.draining", Queue: q.Name, Reason: "deleting", Strategy: StrategyName(c.Strategy), Target: c.Target, Count: int64(affected)})
		// A settle applied right after this command (the same entry) may
		// finish the deletion before the handler reads the queue back.
		return a.queueResult(q, OJSResult{Pending: true, Affected: affected, Changed: true})
	}
	n := a.finishDeletion(q, c.Strategy, c.Target)
	last := copyQueue(q)
	if last.OJS != nil {
		s := *last.OJS
		s.UpdatedAt = a.now // the deletion is a state change
		last.OJS = &s
	}
	e := effective(a.tx, q)
	return &OJSResult{Deleted: true, Affected: n, Changed: true, Queue: last, Config: &e}
}

// finishDeletion runs a strategy and removes the queue. It returns the
// number of messages moved or removed.
func (a *applier) finishDeletion(q *segments.Queue, strategy uint8, target string) uint64 {
	var n uint64
	if strategy == segments.DeleteMove {
		n = a.moveBacklog(q, target, false)
	} else {
		n, _ = queueDepth(a.tx, q, false)
	}
	must(a.tx.DeleteQueue(q))
	a.countOJS(ojsDeleted)
	a.events.touch(q.Name)
	a.event(segments.QueueEvent{Type: "queue.deleted", Queue: q.Name, Strategy: StrategyName(strategy), Target: target, Count: int64(n)})
	return n
}

// moveBacklog appends the unconsumed messages of every partition of q to
// the partition of the same name in target (created implicitly), in order,
// as new messages of the target (transaction ids, trace ids, producer subs
// and payloads are kept; message ids are re-issued). With idleOnly, only
// the messages idleOf calls idle move, and they leave q's backlog as
// purgeBacklog removes them; the live leased batches stay.
func (a *applier) moveBacklog(q *segments.Queue, target string, idleOnly bool) uint64 {
	tq := must1(a.tx.Queue(target))
	if tq == nil {
		// Created here without the queue limit's check: the request that
		// started the move checked it, and a target deleted while the move
		// waited for its active jobs is recreated in the step that deletes
		// the source, so the count does not grow.
		nq, _ := a.newQueue(target, segments.OriginOJS, BindAuto, "")
		a.store(nq)
		tq = nq
	}
	parts := partitionsOf(a.tx, q.ID)
	var moved uint64
	const chunk = 1000
	for _, p := range parts {
		if p.Messages == 0 {
			continue
		}
		idle := idleBacklog{from: slowest(a.tx, p)}
		if idleOnly {
			idle = idleOf(a.tx, p, a.now)
		}
		var msgs []segments.Message
		must(a.tx.Scan(p, idle.from, func(sm *segments.StoredMessage) (bool, error) {
			if idle.leased(sm.Offset) {
				return true, nil
			}
			m := sm.Message
			m.Payload = bytes.Clone(sm.Payload)
			msgs = append(msgs, m)
			return true, nil
		}))
		if len(msgs) > 0 {
			tp := a.partitionForPush(tq, p.Name)
			for i := 0; i < len(msgs); i += chunk {
				part := msgs[i:min(i+chunk, len(msgs))]
				base := must1(a.tx.ReserveIDs(uint64(len(part))))
				// Not looked up: a moved id may be in the target's index.
				must1(a.tx.AppendSegment(tp, a.now, base, part, false))
			}
			must(a.tx.PutPartition(tp))
			moved += uint64(len(msgs))
		}
		if idleOnly {
			a.purgeBacklog(p)
			must(a.tx.PutPartition(p))
		}
	}
	a.events.touch(tq.Name)
	return moved
}

// maybeFinish completes a deletion whose last live lease ended, or a
// graceful drain whose backlog reached zero.
func (a *applier) maybeFinish(name string) bool {
	q := must1(a.tx.Queue(name))
	if q == nil || !drainDone(a.tx, q, a.now) {
		return false
	}
	if d := q.OJS.Deletion; d != nil {
		a.finishDeletion(q, d.Strategy, d.Target)
		return true
	}
	must(a.tx.DeleteQueue(q))
	a.countOJS(ojsDeleted)
	a.events.touch(q.Name)
	a.event(segments.QueueEvent{Type: "queue.deleted", Queue: q.Name, Reason: "drained"})
	return true
}

// drainDone reports whether q's drain can end at now: a deletion once no
// lease is live, a graceful drain once nothing is left (never for default,
// which always exists). maybeFinish acts on it; OJSSweepDue asks it.
func drainDone(tx *segments.Tx, q *segments.Queue, now int64) bool {
	if q.OJS == nil || q.OJS.State != segments.OJSDraining {
		return false
	}
	if q.OJS.Deletion != nil {
		n, _ := liveLeases(tx, q, now)
		return n == 0
	}
	if q.Name == DefaultQueue {
		return false
	}
	depth, _ := queueDepth(tx, q, false)
	return depth == 0
}

// queueResult answers a write that leaves queue q in place with q and its
// effective configuration as the write left them. The handler reads the
// queue back for its answer, but a later command of the same entry (group
// commit) may delete it; the write succeeded all the same, and its answer
// is then rendered from these.
func (a *applier) queueResult(q *segments.Queue, r OJSResult) *OJSResult {
	e := effective(a.tx, q)
	r.Queue, r.Config = copyQueue(q), &e
	return &r
}

// ---- purge ----

func applyOJSPurgeQueue(a *applier, c *OJSPurgeQueue) any {
	q := must1(a.tx.Queue(c.Name))
	if q == nil {
		return notFound(c.Name)
	}
	if deleting(q) {
		return conflict("queue_deleting", q, "queue %s is being deleted", c.Name)
	}
	parts := partitionsOf(a.tx, q.ID)
	var n uint64
	for _, p := range parts {
		if c.States&PurgeCompleted != 0 {
			n += a.purgeConsumed(p)
		}
		if c.States&PurgeBacklog != 0 {
			n += a.purgeBacklog(p)
		}
		must(a.tx.PutPartition(p))
	}
	if c.States&PurgeDiscarded != 0 {
		n += must1(a.tx.DeleteDeadLetters(q.ID))
	}
	a.events.touch(q.Name)
	a.event(segments.QueueEvent{Type: "queue.purged", Queue: q.Name, Count: int64(n)})
	return a.queueResult(q, OJSResult{Affected: n, Changed: true})
}

// purgeConsumed deletes the stored messages every group has consumed: the
// segments wholly before the slowest cursor, and the consumed head of the
// segment the cursor is in.
func (a *applier) purgeConsumed(p *segments.Partition) uint64 {
	from := slowest(a.tx, p)
	var doomed []uint64
	var split uint64 // first offset of the segment from falls inside
	hasSplit := false
	must(a.tx.Segments(p, func(si segments.SegmentInfo) (bool, error) {
		if si.First >= from {
			return false, nil
		}
		if si.First+si.Count > from {
			split, hasSplit = si.First, true
			return false, nil
		}
		doomed = append(doomed, si.First)
		return true, nil
	}))
	var n uint64
	for _, f := range doomed {
		n += must1(a.tx.DeleteSegment(p, f))
	}
	if hasSplit {
		// Cutting out the last consumed message splits the segment around
		// it: the unconsumed tail keeps its offsets in a segment of its own
		// at from, and the consumed head (if any) is then deleted whole.
		if must1(a.tx.DeleteMessage(p, from-1)) {
			n++
		}
		if split < from-1 {
			n += must1(a.tx.DeleteSegment(p, split))
		}
	}
	return n
}

// partitionsOf loads every partition of queue qid, so that a caller may
// write them while it walks them.
func partitionsOf(tx *segments.Tx, qid uint64) []*segments.Partition {
	var parts []*segments.Partition
	must(tx.ForEachPartition(qid, "", func(p *segments.Partition) (bool, error) {
		parts = append(parts, p)
		return true, nil
	}))
	return parts
}

// purgeIdle removes the backlog of every partition of q except the live
// leased batches (purgeBacklog), and returns how many messages went.
func (a *applier) purgeIdle(q *segments.Queue) uint64 {
	parts := partitionsOf(a.tx, q.ID)
	var n uint64
	for _, p := range parts {
		n += a.purgeBacklog(p)
		must(a.tx.PutPartition(p))
	}
	a.events.touch(q.Name)
	return n
}

// purgeBacklog removes the unconsumed messages of a partition except those
// in live leased batches (idleOf): groups without a live lease move past
// the end, and every stored offset idleOf calls idle is deleted, cutting
// the segments around the batches. It returns by how much the backlog
// shrank.
func (a *applier) purgeBacklog(p *segments.Partition) uint64 {
	backlog := partitionBacklog(a.tx, p)
	if backlog == 0 {
		return 0
	}
	idle := idleOf(a.tx, p, a.now)
	type gs struct {
		name string
		g    *segments.Group
	}
	var groups []gs
	must(a.tx.ForEachGroup(p.ID, func(name string, g *segments.Group) (bool, error) {
		c := *g
		groups = append(groups, gs{name, &c})
		return true, nil
	}))
	for _, x := range groups {
		g := x.g
		if g.LeaseLive(a.now) && g.HasBatch() {
			// The batch stays; what follows it is removed for this group,
			// though other groups' live batches there stay stored.
			if from := g.LeaseLast + 1; from < p.NextOffset {
				g.SkipFrom, g.SkipTo = from, p.NextOffset
				must(a.tx.PutGroup(p.ID, x.name, g))
			}
			continue
		}
		if g.HasLease() {
			must(a.tx.UnindexLease(g.LeaseID, p.ID, x.name))
		}
		g.EndBatch()
		if g.Next < p.NextOffset {
			g.Next = p.NextOffset
		}
		g.PassSkipped() // a range an earlier purge left is behind it now
		must(a.tx.PutGroup(p.ID, x.name, g))
	}
	var segs []span
	must(a.tx.Segments(p, func(si segments.SegmentInfo) (bool, error) {
		if si.First+si.Count > idle.from {
			segs = append(segs, span{si.First, si.First + si.Count - 1})
		}
		return true, nil
	}))
	for _, sg := range segs {
		a.cutIdle(p, sg, idle.gaps(sg))
	}
	after := partitionBacklog(a.tx, p)
	if backlog < after {
		return 0
	}
	return backlog - after
}

// cutIdle deletes the offsets of gaps (disjoint, sorted, inside the
// segment sg) from the segment, the last gap first so that the segment's
// head keeps its key: a gap with kept messages after it splits them off
// (DeleteMessage of its last offset), and what is left of the gap is then
// the end of the head, cut off. Each gap rewrites the head once or twice; a
// partition has as many gaps as live batches at most, one per group.
func (a *applier) cutIdle(p *segments.Partition, sg span, gaps []span) {
	for i := len(gaps) - 1; i >= 0; i-- {
		g := gaps[i]
		if g.last < sg.last {
			must1(a.tx.DeleteMessage(p, g.last))
			if g.first == g.last {
				continue
			}
		}
		must1(a.tx.TruncateSegment(p, sg.first, g.first-sg.first))
	}
}

// ---- policies ----

func applyOJSPutPolicy(a *applier, c *OJSPutPolicy) any {
	p := must1(a.tx.Policy(c.Name))
	switch {
	case c.Mode == PolicyCreate && p != nil:
		return ojsErr(http.StatusConflict, "conflict", "policy_exists", "policy %s already exists", c.Name)
	case c.Mode != PolicyCreate && p == nil && c.Name != DefaultPolicyName:
		return ojsErr(http.StatusNotFound, "not_found", "policy_not_found", "policy %s does not exist", c.Name)
	}
	created := p == nil
	if p == nil {
		p = &segments.Policy{Name: c.Name, CreatedAt: a.now}
	}
	before := configBytes(&p.Config)
	beforeMeta := fmt.Sprintf("%s/%d", p.Match, p.Priority)
	if c.HasMatch {
		p.Match = c.Match
	}
	if c.HasPriority {
		p.Priority = c.Priority
	}
	switch c.Mode {
	case PolicyPut, PolicyCreate:
		p.Config = QueueConfig{}
	default:
		unsetFields(&p.Config, c.Unset)
	}
	mergeConfig(&p.Config, &c.Set)
	configChanged := !bytes.Equal(before, configBytes(&p.Config))
	// An absent _default is the same as an empty one: writing an empty one
	// is no change (ojs-queues.md 6.4: {} is a no-op, no event), and leaves
	// plain queues without policy layers.
	implicit := created && c.Name == DefaultPolicyName
	if (!created || implicit) && !configChanged && beforeMeta == fmt.Sprintf("%s/%d", p.Match, p.Priority) {
		return &OJSResult{Policy: p}
	}
	p.UpdatedAt = a.now
	must(a.tx.PutPolicy(p))
	if configChanged {
		a.reresolve(func(q *segments.Queue) bool {
			return c.Name == DefaultPolicyName || (q.OJS != nil && q.OJS.Policy == c.Name)
		}, nil)
	}
	a.event(segments.QueueEvent{Type: "queue.policy_updated", Policy: c.Name})
	return &OJSResult{Policy: p, Changed: true, Created: created}
}

// reresolve recomputes the options of every queue match selects, in key
// order, applying change first when given. It returns how many it touched.
func (a *applier) reresolve(match func(*segments.Queue) bool, change func(*segments.Queue)) uint64 {
	var qs []*segments.Queue
	must(a.tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
		if match(q) {
			qs = append(qs, q)
		}
		return true, nil
	}))
	for _, q := range qs {
		if change != nil {
			change(q)
		}
		resolve(a.tx, q)
		must(a.tx.PutQueue(q))
		a.events.touch(q.Name)
	}
	return uint64(len(qs))
}

func applyOJSDeletePolicy(a *applier, c *OJSDeletePolicy) any {
	if p := must1(a.tx.Policy(c.Name)); p == nil {
		return ojsErr(http.StatusNotFound, "not_found", "policy_not_found", "policy %s does not exist", c.Name)
	}
	must(a.tx.DeletePolicy(c.Name))
	var n uint64
	if c.Name == DefaultPolicyName {
		a.reresolve(func(*segments.Queue) bool { return true }, nil)
	} else {
		n = a.reresolve(func(q *segments.Queue) bool { return q.OJS != nil && q.OJS.Policy == c.Name },
			func(q *segments.Queue) { q.OJS.Policy, q.OJS.UpdatedAt = "", a.now })
	}
	a.event(segments.QueueEvent{Type: "queue.policy_updated", Policy: c.Name, Reason: "deleted", Count: int64(n)})
	return &OJSResult{Changed: true, Unbound: n}
}

// ---- sweep ----

func applyOJSSweep(a *applier, c *OJSSweep) any {
	res := &OJSSweepResult{}
	q := must1(a.tx.Queue(c.Queue))
	if q == nil || q.OJS == nil {
		return res
	}
	if a.maybeFinish(q.Name) {
		res.Finished = true
		return res
	}
	l := q.OJS.Limits
	if l.DLQMaxAge <= 0 && l.DLQMaxCount <= 0 {
		return res
	}
	budget := uint64(c.MaxDLQ)
	var doomed []uint64
	cutoff := a.now - l.DLQMaxAge
	if l.DLQMaxAge > 0 {
		must(a.tx.ForEachDeadLetterOldest(q.ID, func(d *segments.DeadLetter) (bool, error) {
			if d.FailedAt >= cutoff {
				return false, nil
			}
			if uint64(len(doomed)) == budget {
				res.More = true
				return false, nil
			}
			doomed = append(doomed, d.Seq)
			return true, nil
		}))
	}
	if l.DLQMaxCount > 0 && !res.More {
		total := a.tx.DeadLetterCount(q.ID) - uint64(len(doomed))
		if total > uint64(l.DLQMaxCount) {
			excess := total - uint64(l.DLQMaxCount)
			skip := uint64(len(doomed))
			must(a.tx.ForEachDeadLetterOldest(q.ID, func(d *segments.DeadLetter) (bool, error) {
				if skip > 0 {
					skip--
					return true, nil
				}
				if excess == 0 {
					return false, nil
				}
				if uint64(len(doomed)) == budget {
					res.More = true
					return false, nil
				}
				doomed = append(doomed, d.Seq)
				excess--
				return true, nil
			}))
		}
	}
	sort.Slice(doomed, func(i, j int) bool { return doomed[i] < doomed[j] })
	for _, s := range doomed {
		must(a.tx.DeleteDeadLetter(q.ID, s))
	}
	res.Pruned = uint64(len(doomed))
	return res
}

// RefusalText describes a push (or pop) refusal.
func RefusalText(r *Refusal) string {
	switch r.Code {
	case RefuseFull:
		return fmt.Sprintf("queue %s is full (%s %d of %d)", r.Queue, r.BoundType, r.Depth, r.Bound)
	case RefuseDraining:
		return fmt.Sprintf("queue %s is draining and accepts no new messages", r.Queue)
	case RefuseDeleting:
		return fmt.Sprintf("queue %s is being deleted and accepts no new messages", r.Queue)
	case RefuseDenied:
		return fmt.Sprintf("principal is not in access.producers of queue %s", r.Queue)
	case RefuseDeniedConsumer:
		return fmt.Sprintf("principal is not in access.consumers of queue %s", r.Queue)
	case RefuseProtected:
		return fmt.Sprintf("queue %s cannot be deleted", r.Queue)
	}
	return "refused"
}
