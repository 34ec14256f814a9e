package ojs

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/segments"
)

// QueueJSON renders the Queue object (ojs-queues.md 6.1).
func QueueJSON(v *fsm.OJSQueueView) map[string]any {
	q := &v.Queue
	state := fsm.StateName(q)
	var policy any
	overrides := fsm.Overrides(q)
	origin := "implicit"
	updated := max(q.CreatedAt, q.ConfiguredAt)
	if s := q.OJS; s != nil {
		if s.Policy != "" {
			policy = s.Policy
		}
		if s.Explicit {
			origin = "explicit"
		}
		if s.UpdatedAt > updated {
			updated = s.UpdatedAt
		}
	}
	m := map[string]any{
		"name": q.Name, "state": state, "status": state, "paused": state == "paused",
		"origin": origin, "policy": policy,
		"config": EffectiveJSON(&v.Config), "overrides": ConfigJSON(&overrides),
		"depth": v.Depth, "available": v.Available, "scheduled": 0, "pending": 0, "active": v.Active,
		"retryable": 0, "completed": v.Completed, "discarded": v.DeadLettered, "cancelled": 0,
		"dead_lettered": v.DeadLettered,
		"created_at":    Timestamp(q.CreatedAt), "updated_at": Timestamp(updated),
		"ojs_addressable": fsm.ValidQueueName(q.Name),
	}
	if s := q.OJS; s != nil {
		if s.State == segments.OJSPaused && s.PausedAt != 0 {
			m["paused_at"] = Timestamp(s.PausedAt)
		}
		if s.State == segments.OJSDraining && s.DrainingSince != 0 {
			m["draining_since"] = Timestamp(s.DrainingSince)
		}
		if d := s.Deletion; d != nil {
			del := map[string]any{"strategy": fsm.StrategyName(d.Strategy), "active_remaining": v.Active}
			if d.Target != "" {
				del["target_queue"] = d.Target
			}
			m["deletion"] = del
		}
	}
	return m
}

// lookup reads a queue's view: nil when there is no such queue; false once
// a read failure has been answered.
func (h *Handler) lookup(w http.ResponseWriter, name string) (*fsm.OJSQueueView, bool) {
	v, err := h.state.OJSQueue(name, now())
	if err != nil {
		h.fail(w, newErr(500, "backend_error", "", "%v", err))
		return nil, false
	}
	return v, true
}

// view is lookup with a missing queue answered 404.
func (h *Handler) view(w http.ResponseWriter, name string) (*fsm.OJSQueueView, bool) {
	v, ok := h.lookup(w, name)
	if ok && v == nil {
		h.fail(w, queueNotFound(name))
		return nil, false
	}
	return v, ok
}

func queueNotFound(name string) *Error {
	return newErr(http.StatusNotFound, "not_found", "queue_not_found", "queue %s does not exist", name)
}

// answerQueue reads the queue back and answers {"queue": …}. When or, the
// result of a write, is given and the queue is gone, a later command of the
// same log entry deleted it: the write succeeded, so its status stands and
// the queue is rendered as the write left it, state deleted.
func (h *Handler) answerQueue(w http.ResponseWriter, status int, name string, or *fsm.OJSResult, extra map[string]any) {
	v, ok := h.lookup(w, name)
	if !ok {
		return
	}
	var queue map[string]any
	switch {
	case v != nil:
		queue = QueueJSON(v)
	case or != nil && or.Queue != nil:
		queue = deletedQueueJSON(name, or)
	default:
		h.fail(w, queueNotFound(name))
		return
	}
	out := map[string]any{"queue": queue}
	for k, x := range extra {
		out[k] = x
	}
	h.reply(w, status, out)
}

// ---- list ----

func (h *Handler) listQueues(w http.ResponseWriter, r *http.Request, _ []string) {
	q := r.URL.Query()
	limit, e := queryLimit(q, 50, 200)
	if e != nil {
		h.fail(w, e)
		return
	}
	offset := 0
	if s := q.Get("offset"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			h.fail(w, badRequest("invalid_parameter", "offset", "offset must be a non-negative integer"))
			return
		}
		offset = n
	}
	after := ""
	hasCursor := false
	if s := q.Get("cursor"); s != "" {
		b, err := hex.DecodeString(strings.TrimPrefix(s, "c"))
		if err != nil || !strings.HasPrefix(s, "c") {
			h.fail(w, badRequest("invalid_parameter", "cursor", "cursor is not one this server issued"))
			return
		}
		after, hasCursor = string(b), true
	}
	stateFilter := q.Get("state")
	switch stateFilter {
	case "", "active", "paused", "draining":
	default:
		h.fail(w, badRequest("invalid_parameter", "state", "state must be active, paused or draining"))
		return
	}
	prefix := q.Get("prefix")
	if !h.read(w, r) {
		return
	}
	var start, end int
	var last string // the page's last name, for the next cursor
	var keep func(*fsm.QueueInfo) bool
	if stateFilter != "" {
		keep = func(qi *fsm.QueueInfo) bool { return fsm.StateName(qi) == stateFilter }
	}
	total, views, err := h.state.OJSQueuePage(now(), prefix, keep, func(names []string) (int, int) {
		start = offset
		if hasCursor {
			// The names come in order: the page starts after the cursor's.
			start = sort.SearchStrings(names, after+"\x00")
		}
		start = min(start, len(names))
		end = min(start+limit, len(names))
		if end > start {
			last = names[end-1]
		}
		return start, end
	})
	if err != nil {
		h.fail(w, newErr(500, "backend_error", "", "%v", err))
		return
	}
	items := make([]map[string]any, 0, len(views))
	for i := range views {
		items = append(items, QueueJSON(&views[i]))
	}
	pg := map[string]any{"total": total, "limit": limit, "offset": start, "has_more": end < total}
	if end < total {
		pg["next_cursor"] = "c" + hex.EncodeToString([]byte(last))
	}
	h.reply(w, http.StatusOK, map[string]any{"queues": items, "pagination": pg})
}

// ---- create ----

func (h *Handler) createQueue(w http.ResponseWriter, r *http.Request, _ []string) {
	b, m, e := h.objectBody(r, false, true)
	if e != nil {
		h.fail(w, e)
		return
	}
	// Every problem of the body is reported at once (ojs-queues.md 2.1).
	ps := unknownMembers(m, "", "is not a known member", true, "name", "state", "policy", "config")
	c := &fsm.OJSCreateQueue{MaxQueues: h.cfg.MaxQueues}
	name, more := requiredName(m, queueName)
	c.Name, ps = name, append(ps, more...)
	if raw, ok := m["state"]; ok && !isNull(raw) {
		if s, ok := jsonString(raw); !ok {
			ps = append(ps, shape("state", "invalid_type", "state must be a string"))
		} else {
			switch s {
			case "active":
			case "paused":
				c.Paused = true
			default:
				ps = append(ps, problem{Field: "state", Type: "invalid_state", status: http.StatusUnprocessableEntity,
					Message: fmt.Sprintf("state must be active or paused, not %q", s)})
			}
		}
	}
	if bind, pol, e := parsePolicyRef(m); e != nil {
		ps = append(ps, findings(e)...)
	} else {
		c.Bind, c.Policy = bind, pol
	}
	cfg, _, more := configProblems(m, false)
	if e := problems(append(ps, more...)); e != nil {
		h.fail(w, e)
		return
	}
	c.Config = cfg
	or, ok := h.run(w, r, b, c)
	if !ok {
		return
	}
	w.Header().Set("Location", "/ojs/v1/queues/"+name)
	h.answerQueue(w, http.StatusCreated, name, or, nil)
}

// parsePolicyRef reads the optional "policy" member: absent binds by
// pattern, null binds none, a name binds that policy.
func parsePolicyRef(m map[string]jsonRaw) (uint8, string, *Error) {
	raw, ok := m["policy"]
	if !ok {
		return fsm.BindAuto, "", nil
	}
	if isNull(raw) {
		return fsm.BindNone, "", nil
	}
	s, ok := jsonString(raw)
	if !ok {
		return 0, "", badRequest("invalid_type", "policy", "policy must be a string or null")
	}
	if len(s) > fsm.MaxPolicyNameBytes || !fsm.ValidQueueName(s) {
		return 0, "", badRequest("invalid_request", "policy", "policy name %q is not valid", s)
	}
	return fsm.BindNamed, s, nil
}

// ---- get / patch / put config ----

func (h *Handler) getQueue(w http.ResponseWriter, r *http.Request, a []string) {
	if e := queueName(a[0]); e != nil {
		h.fail(w, e)
		return
	}
	if !h.read(w, r) {
		return
	}
	h.answerQueue(w, http.StatusOK, a[0], nil, nil)
}

var readOnlyMembers = []string{"origin", "status", "paused", "config", "overrides", "depth", "available",
	"scheduled", "pending", "active", "retryable", "completed", "discarded", "cancelled", "dead_lettered",
	"created_at", "updated_at", "paused_at", "draining_since", "deletion", "ojs_addressable"}

func (h *Handler) patchQueue(w http.ResponseWriter, r *http.Request, a []string) {
	name := a[0]
	if e := queueName(name); e != nil {
		h.fail(w, e)
		return
	}
	b, m, e := h.objectBody(r, true, true)
	if e != nil {
		h.fail(w, e)
		return
	}
	// Every problem of the body is reported at once (ojs-queues.md 2.1).
	var ps []problem
	readOnly := map[string]bool{}
	for _, k := range readOnlyMembers {
		if _, ok := m[k]; ok {
			readOnly[k] = true
			ps = append(ps, shape(k, "read_only_field", "%s is read-only", k))
		}
	}
	for _, p := range unknownMembers(m, "", "is not a known member", true, "name", "state", "policy") {
		if !readOnly[p.Field] {
			ps = append(ps, p)
		}
	}
	ps = append(ps, repeatedName(m, name, "queue")...)
	c := &fsm.OJSUpdateQueue{Name: name}
	if raw, ok := m["state"]; ok {
		if s, ok := jsonString(raw); !ok {
			ps = append(ps, shape("state", "invalid_type", "state must be a string"))
		} else {
			switch s {
			case "active":
				c.State = fsm.ToActive
			case "paused":
				c.State = fsm.ToPaused
			case "draining":
				c.State = fsm.ToDraining
			default:
				ps = append(ps, problem{Field: "state", Type: "invalid_state", status: http.StatusUnprocessableEntity,
					Message: fmt.Sprintf("state must be active, paused or draining, not %q", s)})
			}
		}
	}
	if _, ok := m["policy"]; ok {
		if bind, pol, e := parsePolicyRef(m); e != nil {
			ps = append(ps, findings(e)...)
		} else {
			c.Bind, c.Policy = bind, pol
		}
	}
	cfg, unset, more := parseSections(m, "", true)
	if e := problems(append(ps, more...)); e != nil {
		h.fail(w, e)
		return
	}
	c.Set, c.Unset = cfg, unset
	if !h.read(w, r) {
		return
	}
	if len(m) == 0 {
		// {} is a no-op: no command, no event.
		h.answerQueue(w, http.StatusOK, name, nil, nil)
		return
	}
	or, ok := h.run(w, r, b, c)
	if !ok {
		return
	}
	h.answerQueue(w, http.StatusOK, name, or, nil)
}

func (h *Handler) putConfig(w http.ResponseWriter, r *http.Request, a []string) {
	name := a[0]
	if e := queueName(name); e != nil {
		h.fail(w, e)
		return
	}
	b, cfg, _, e := h.configBody(r, false, name)
	if e != nil {
		h.fail(w, e)
		return
	}
	or, ok := h.run(w, r, b, &fsm.OJSUpdateQueue{Name: name, Replace: true, Set: cfg})
	if !ok {
		return
	}
	h.answerQueue(w, http.StatusOK, name, or, nil)
}

// ---- pause / resume ----

func (h *Handler) pause(w http.ResponseWriter, r *http.Request, a []string) {
	h.setState(w, r, a[0], true)
}
func (h *Handler) resume(w http.ResponseWriter, r *http.Request, a []string) {
	h.setState(w, r, a[0], false)
}

func (h *Handler) setState(w http.ResponseWriter, r *http.Request, name string, pause bool) {
	if e := queueName(name); e != nil {
		h.fail(w, e)
		return
	}
	b, m, e := h.objectBody(r, false, false)
	if e != nil {
		h.fail(w, e)
		return
	}
	c := &fsm.OJSSetState{Name: name, Pause: pause, Strict: h.cfg.Strict, MaxQueues: h.cfg.MaxQueues}
	if m != nil {
		if e := checkMembersOnly(m, "reason"); e != nil {
			h.fail(w, e)
			return
		}
		if raw, ok := m["reason"]; ok && !isNull(raw) {
			s, ok := jsonString(raw)
			if !ok {
				h.fail(w, badRequest("invalid_type", "reason", "reason must be a string"))
				return
			}
			if utf8.RuneCountInString(s) > fsm.MaxPauseReason {
				e := newErr(http.StatusUnprocessableEntity, "validation_error", "out_of_range", "reason is over %d characters", fsm.MaxPauseReason)
				e.Details = map[string]any{"field": "reason"}
				h.fail(w, e)
				return
			}
			c.Reason = s
		}
	}
	or, ok := h.run(w, r, b, c)
	if !ok {
		return
	}
	h.answerQueue(w, http.StatusOK, name, or, nil)
}

// checkMembersOnly reports every member of m not in allowed (400 unknown_field).
func checkMembersOnly(m map[string]jsonRaw, allowed ...string) *Error {
	return problems(unknownMembers(m, "", "is not a known member", false, allowed...))
}

// ---- purge ----

func (h *Handler) purge(w http.ResponseWriter, r *http.Request, a []string) {
	name := a[0]
	if e := queueName(name); e != nil {
		h.fail(w, e)
		return
	}
	b, m, e := h.objectBody(r, false, false)
	if e != nil {
		h.fail(w, e)
		return
	}
	if e := checkMembersOnly(m, "confirm", "states"); e != nil {
		h.fail(w, e)
		return
	}
	if v, ok := jsonBool(m["confirm"]); !ok || !v {
		h.fail(w, badRequest("confirmation_required", "confirm", "purge is destructive: send {\"confirm\": true}"))
		return
	}
	states := []string{"available", "scheduled", "retryable", "pending"}
	if raw, ok := m["states"]; ok && !isNull(raw) {
		var list []string
		if err := jsonUnmarshalStrict(raw, &list); err != nil {
			h.fail(w, badRequest("invalid_type", "states", "states must be an array of strings"))
			return
		}
		states = list
	}
	c := &fsm.OJSPurgeQueue{Name: name}
	for i, s := range states {
		switch s {
		case "available":
			c.States |= fsm.PurgeBacklog
		case "completed":
			c.States |= fsm.PurgeCompleted
		case "discarded":
			c.States |= fsm.PurgeDiscarded
		case "scheduled", "retryable", "pending", "cancelled":
			// Crown holds no job in these states (their counts are
			// always 0), so they match nothing: the backlog is the
			// available jobs, removed only when "available" is named.
		default:
			e := newErr(http.StatusUnprocessableEntity, "validation_error", "invalid_state",
				"states[%d]: %q cannot be purged (leased jobs must be cancelled; allowed: available, scheduled, retryable, pending, completed, discarded, cancelled)", i, s)
			e.Details = map[string]any{"field": fmt.Sprintf("states[%d]", i)}
			h.fail(w, e)
			return
		}
	}
	if c.States == 0 {
		// Nothing to remove, so no command; the queue's state still rules
		// (ojs-queues.md 3: no purge of a queue being deleted).
		if !h.read(w, r) {
			return
		}
		v, ok := h.view(w, name)
		if !ok {
			return
		}
		if s := v.Queue.OJS; s != nil && s.Deletion != nil {
			e := newErr(http.StatusConflict, "conflict", "queue_deleting", "queue %s is being deleted", name)
			e.Details = map[string]any{"current_state": fsm.StateName(&v.Queue)}
			h.fail(w, e)
			return
		}
		h.reply(w, http.StatusOK, map[string]any{"queue": QueueJSON(v), "purged_count": 0, "states": states})
		return
	}
	res, ok := h.commit(w, r, b, c)
	if !ok {
		return
	}
	or, ok := h.ojsResult(w, res)
	if !ok {
		return
	}
	h.answerQueue(w, http.StatusOK, name, or, map[string]any{"purged_count": or.Affected, "states": states})
}

// ---- delete ----

func (h *Handler) deleteQueue(w http.ResponseWriter, r *http.Request, a []string) {
	name := a[0]
	if e := queueName(name); e != nil {
		h.fail(w, e)
		return
	}
	q := r.URL.Query()
	strategy, target := q.Get("strategy"), q.Get("target_queue")
	b, m, e := h.objectBody(r, false, false)
	if e != nil {
		h.fail(w, e)
		return
	}
	if m != nil {
		if e := checkMembersOnly(m, "strategy", "target_queue"); e != nil {
			h.fail(w, e)
			return
		}
		for _, f := range []struct {
			k   string
			dst *string
		}{{"strategy", &strategy}, {"target_queue", &target}} {
			raw, ok := m[f.k]
			if !ok || isNull(raw) {
				continue
			}
			s, ok := jsonString(raw)
			if !ok {
				h.fail(w, badRequest("invalid_type", f.k, "%s must be a string", f.k))
				return
			}
			if *f.dst != "" && *f.dst != s {
				h.fail(w, badRequest("invalid_request", f.k, "%s differs between the query and the body", f.k))
				return
			}
			*f.dst = s
		}
	}
	c := &fsm.OJSDeleteQueue{Name: name, Strict: h.cfg.Strict, MaxQueues: h.cfg.MaxQueues}
	switch strategy {
	case "", "reject":
		c.Strategy, strategy = segments.DeleteReject, "reject"
	case "purge":
		c.Strategy = segments.DeletePurge
	case "move":
		c.Strategy = segments.DeleteMove
	case "discard":
		c.Strategy = segments.DeleteDiscard
	default:
		h.fail(w, badRequest("invalid_parameter", "strategy", "strategy must be reject, purge, move or discard"))
		return
	}
	if c.Strategy == segments.DeleteMove {
		if target == "" {
			h.fail(w, badRequest("missing_field", "target_queue", "strategy move needs target_queue"))
			return
		}
		if !fsm.ValidQueueName(target) {
			h.fail(w, badRequest("invalid_request", "target_queue", "target_queue %q is not a valid queue name", target))
			return
		}
		c.Target = target
	} else if target != "" {
		h.fail(w, badRequest("invalid_parameter", "target_queue", "target_queue is only for strategy move"))
		return
	}
	res, ok := h.commit(w, r, b, c)
	if !ok {
		return
	}
	or, ok := h.ojsResult(w, res)
	if !ok {
		return
	}
	out := map[string]any{"strategy": strategy, "jobs_affected": or.Affected}
	if c.Target != "" {
		out["target_queue"] = c.Target
	}
	if or.Pending {
		v, ok := h.lookup(w, name)
		if !ok {
			return
		}
		if v != nil {
			out["queue"] = QueueJSON(v)
			h.reply(w, http.StatusAccepted, out)
			return
		}
		// The last active job settled in a command applied right after
		// this one (group commit): the deletion is already complete.
	}
	out["queue"] = deletedQueueJSON(name, or)
	h.reply(w, http.StatusOK, out)
}

// deletedQueueJSON renders the Queue object of a queue a DELETE removed
// (ojs-queues.md 6.5): its last configuration, every count 0, state deleted.
func deletedQueueJSON(name string, or *fsm.OJSResult) map[string]any {
	v := &fsm.OJSQueueView{Queue: fsm.QueueInfo{Name: name}}
	if or.Queue != nil {
		v.Queue = *or.Queue
	}
	if or.Config != nil {
		v.Config = *or.Config
	}
	m := QueueJSON(v)
	m["state"], m["status"], m["paused"] = "deleted", "deleted", false
	delete(m, "paused_at")
	delete(m, "draining_since")
	delete(m, "deletion")
	return m
}

// ---- stats ----

func (h *Handler) stats(w http.ResponseWriter, r *http.Request, a []string) {
	name := a[0]
	if e := queueName(name); e != nil {
		h.fail(w, e)
		return
	}
	if !h.read(w, r) {
		return
	}
	v, ok := h.view(w, name)
	if !ok {
		return
	}
	var pressure any
	if v.Config.MaxDepth > 0 {
		pressure = float64(v.Depth) / float64(v.Config.MaxDepth)
	}
	st := map[string]any{
		"queue": name, "depth": v.Depth, "max_depth": v.Config.MaxDepth, "size_bytes": v.SizeBytes,
		"max_size_bytes": v.Config.MaxSizeBytes, "pressure": pressure,
		"completed_last_hour": 0, "failed_last_hour": 0,
	}
	if v.OldestAt != 0 && v.Available > 0 {
		st["oldest_available_at"] = Timestamp(v.OldestAt)
	}
	h.reply(w, http.StatusOK, map[string]any{"queue": QueueJSON(v), "stats": st, "computed_at": Timestamp(now())})
}
