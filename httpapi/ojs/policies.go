package ojs

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/crownmq/crown/fsm"
	"github.com/prometheus/client_golang/prometheus"
)

// PolicyJSON renders a named policy.
func PolicyJSON(p *fsm.Policy) map[string]any {
	return map[string]any{"name": p.Name, "match": p.Match, "priority": p.Priority,
		"config": ConfigJSON(&p.Config), "created_at": Timestamp(p.CreatedAt), "updated_at": Timestamp(p.UpdatedAt)}
}

// ---- _default ----

func (h *Handler) answerDefault(w http.ResponseWriter) {
	eff, err := h.state.DefaultEffective()
	if err != nil {
		h.fail(w, newErr(500, "backend_error", "", "%v", err))
		return
	}
	_, def, err := h.state.Policies()
	if err != nil {
		h.fail(w, newErr(500, "backend_error", "", "%v", err))
		return
	}
	out := map[string]any{"config": EffectiveJSON(&eff), "overrides": map[string]map[string]any{}}
	if def != nil {
		out["overrides"] = ConfigJSON(&def.Config)
		out["updated_at"] = Timestamp(def.UpdatedAt)
	}
	h.reply(w, http.StatusOK, out)
}

func (h *Handler) getDefault(w http.ResponseWriter, r *http.Request, _ []string) {
	if !h.read(w, r) {
		return
	}
	h.answerDefault(w)
}

func (h *Handler) putDefault(w http.ResponseWriter, r *http.Request, _ []string) {
	h.writeDefault(w, r, fsm.PolicyPut)
}

func (h *Handler) patchDefault(w http.ResponseWriter, r *http.Request, _ []string) {
	h.writeDefault(w, r, fsm.PolicyPatch)
}

func (h *Handler) writeDefault(w http.ResponseWriter, r *http.Request, mode uint8) {
	b, cfg, unset, e := h.configBody(r, mode == fsm.PolicyPatch, "")
	if e != nil {
		h.fail(w, e)
		return
	}
	if _, ok := h.run(w, r, b, &fsm.OJSPutPolicy{Name: fsm.DefaultPolicyName, Mode: mode, Set: cfg, Unset: unset}); !ok {
		return
	}
	h.answerDefault(w)
}

// ---- named policies ----

func (h *Handler) listPolicies(w http.ResponseWriter, r *http.Request, _ []string) {
	q := r.URL.Query()
	limit, e := queryLimit(q, 50, 200)
	if e != nil {
		h.fail(w, e)
		return
	}
	after := ""
	if s := q.Get("cursor"); s != "" {
		b, err := hex.DecodeString(strings.TrimPrefix(s, "c"))
		if err != nil || !strings.HasPrefix(s, "c") {
			h.fail(w, badRequest("invalid_parameter", "cursor", "cursor is not one this server issued"))
			return
		}
		after = string(b)
	}
	if !h.read(w, r) {
		return
	}
	named, _, err := h.state.Policies()
	if err != nil {
		h.fail(w, newErr(500, "backend_error", "", "%v", err))
		return
	}
	items := []map[string]any{}
	start := 0
	for start < len(named) && after != "" && named[start].Name <= after {
		start++
	}
	end := min(start+limit, len(named))
	for i := start; i < end; i++ {
		items = append(items, PolicyJSON(&named[i]))
	}
	pg := map[string]any{"total": len(named), "limit": limit, "offset": start, "has_more": end < len(named)}
	if end < len(named) {
		pg["next_cursor"] = "c" + hex.EncodeToString([]byte(named[end-1].Name))
	}
	h.reply(w, http.StatusOK, map[string]any{"policies": items, "pagination": pg})
}

func policyName(name string) *Error {
	if len(name) > fsm.MaxPolicyNameBytes || !fsm.ValidQueueName(name) {
		return badRequest("invalid_request", "name", "policy name %q must match ^[a-z0-9][a-z0-9.-]*$ and be 1-64 bytes", name)
	}
	return nil
}

func (h *Handler) findPolicy(w http.ResponseWriter, name string) {
	named, _, err := h.state.Policies()
	if err != nil {
		h.fail(w, newErr(500, "backend_error", "", "%v", err))
		return
	}
	for i := range named {
		if named[i].Name == name {
			h.reply(w, http.StatusOK, map[string]any{"policy": PolicyJSON(&named[i])})
			return
		}
	}
	h.fail(w, newErr(http.StatusNotFound, "not_found", "policy_not_found", "policy %s does not exist", name))
}

func (h *Handler) getPolicy(w http.ResponseWriter, r *http.Request, a []string) {
	if e := policyName(a[0]); e != nil {
		h.fail(w, e)
		return
	}
	if !h.read(w, r) {
		return
	}
	h.findPolicy(w, a[0])
}

// parsePolicy reads match, priority and config of a policy body. Its error
// holds every problem found (ojs-queues.md 2.1).
func parsePolicy(m map[string]jsonRaw, patch bool, c *fsm.OJSPutPolicy) *Error {
	return problems(policyProblems(m, patch, c))
}

func policyProblems(m map[string]jsonRaw, patch bool, c *fsm.OJSPutPolicy) []problem {
	var ps []problem
	if raw, ok := m["match"]; ok {
		if s, ok := jsonString(raw); !ok {
			ps = append(ps, shape("match", "invalid_type", "match must be a string"))
		} else if len(s) > fsm.MaxOJSNameBytes {
			ps = append(ps, shape("match", "invalid_request", "match is over 128 bytes"))
		} else if !fsm.ValidPattern(s) {
			ps = append(ps, problem{Field: "match", Type: "invalid_pattern", status: http.StatusUnprocessableEntity,
				Message: fmt.Sprintf("match %q must be 1-128 characters of a-z 0-9 . - * ?", s)})
		} else {
			c.Match, c.HasMatch = s, true
		}
	} else if !patch {
		ps = append(ps, shape("match", "missing_field", "match is required"))
	}
	if raw, ok := m["priority"]; ok && isNull(raw) {
		// null removes the setting (ojs-queues.md 6.10, merge patch): the
		// default priority, 0.
		c.Priority, c.HasPriority = 0, true
	} else if ok {
		if n, ok := jsonInteger(raw); !ok {
			ps = append(ps, shape("priority", "invalid_type", "priority must be an integer"))
		} else if n < -fsm.MaxPolicyPriority || n > fsm.MaxPolicyPriority {
			ps = append(ps, problem{Field: "priority", Type: "out_of_range", status: http.StatusUnprocessableEntity,
				Message: fmt.Sprintf("priority must be between -1000 and 1000, got %d", n)})
		} else {
			c.Priority, c.HasPriority = n, true
		}
	}
	raw, ok := m["config"]
	if !ok {
		if !patch {
			ps = append(ps, shape("config", "missing_field", "config is required"))
		}
		return ps
	}
	if isNull(raw) {
		if patch {
			c.Unset = fsm.FieldsAll
		}
		return ps
	}
	cm, ok := decodeObject(raw)
	if !ok {
		return append(ps, shape("config", "invalid_type", "config must be an object"))
	}
	ps = append(ps, unknownMembers(cm, "config.", "is not a known member", false, Sections...)...)
	cfg, unset, more := parseSections(cm, "config.", patch)
	c.Set, c.Unset = cfg, c.Unset|unset
	return append(ps, more...)
}

func (h *Handler) createPolicy(w http.ResponseWriter, r *http.Request, _ []string) {
	b, m, e := h.objectBody(r, false, true)
	if e != nil {
		h.fail(w, e)
		return
	}
	// Every problem of the body is reported at once (ojs-queues.md 2.1).
	ps := unknownMembers(m, "", "is not a known member", false, "name", "match", "priority", "config")
	name, more := requiredName(m, policyName)
	ps = append(ps, more...)
	c := &fsm.OJSPutPolicy{Name: name, Mode: fsm.PolicyCreate}
	if e := problems(append(ps, policyProblems(m, false, c)...)); e != nil {
		h.fail(w, e)
		return
	}
	if _, ok := h.run(w, r, b, c); !ok {
		return
	}
	w.Header().Set("Location", "/ojs/v1/queues/_policies/"+name)
	named, _, _ := h.state.Policies()
	for i := range named {
		if named[i].Name == name {
			h.reply(w, http.StatusCreated, map[string]any{"policy": PolicyJSON(&named[i])})
			return
		}
	}
	h.fail(w, newErr(http.StatusNotFound, "not_found", "policy_not_found", "policy %s does not exist", name))
}

func (h *Handler) patchPolicy(w http.ResponseWriter, r *http.Request, a []string) {
	name := a[0]
	if e := policyName(name); e != nil {
		h.fail(w, e)
		return
	}
	b, m, e := h.objectBody(r, true, true)
	if e != nil {
		h.fail(w, e)
		return
	}
	// Every problem of the body is reported at once (ojs-queues.md 2.1).
	ps := unknownMembers(m, "", "is not a known member", false, "name", "match", "priority", "config")
	ps = append(ps, repeatedName(m, name, "policy")...)
	c := &fsm.OJSPutPolicy{Name: name, Mode: fsm.PolicyPatch}
	if e := problems(append(ps, policyProblems(m, true, c)...)); e != nil {
		h.fail(w, e)
		return
	}
	if _, ok := h.run(w, r, b, c); !ok {
		return
	}
	h.findPolicy(w, name)
}

func (h *Handler) deletePolicy(w http.ResponseWriter, r *http.Request, a []string) {
	name := a[0]
	if e := policyName(name); e != nil {
		h.fail(w, e)
		return
	}
	res, ok := h.commit(w, r, nil, &fsm.OJSDeletePolicy{Name: name})
	if !ok {
		return
	}
	or, ok := h.ojsResult(w, res)
	if !ok {
		return
	}
	h.reply(w, http.StatusOK, map[string]any{"deleted": true, "policy": name, "queues_unbound": or.Unbound})
}

// ---- events, health, manifest ----

// EventID renders a queue event's id.
func EventID(e *fsm.QueueEvent) string { return "evt_" + FormatUUID(e.ID) }

func (h *Handler) events(w http.ResponseWriter, r *http.Request, _ []string) {
	q := r.URL.Query()
	limit, e := queryLimit(q, 100, 1000)
	if e != nil {
		h.fail(w, e)
		return
	}
	var after uint64
	if s := q.Get("after"); s != "" {
		id, ok := parseUUID(strings.TrimPrefix(s, "evt_"))
		if !ok || !strings.HasPrefix(s, "evt_") {
			h.fail(w, badRequest("invalid_parameter", "after", "after must be an event id (evt_…)"))
			return
		}
		after = eventSeq(id)
	}
	set := func(k string) map[string]bool {
		if q.Get(k) == "" {
			return nil
		}
		m := map[string]bool{}
		for _, v := range strings.Split(q.Get(k), ",") {
			m[strings.TrimSpace(v)] = true
		}
		return m
	}
	types, queues := set("types"), set("queues")
	if !h.read(w, r) {
		return
	}
	evs, more, err := h.state.QueueEvents(after, limit, func(e *fsm.QueueEvent) bool {
		return (types == nil || types[e.Type]) && (queues == nil || queues[e.Queue])
	})
	if err != nil {
		h.fail(w, newErr(500, "backend_error", "", "%v", err))
		return
	}
	out := make([]map[string]any, 0, len(evs))
	cursor := q.Get("after")
	for i := range evs {
		e := &evs[i]
		data := map[string]any{"queue": e.Queue}
		for k, v := range map[string]string{"reason": e.Reason, "strategy": e.Strategy, "target_queue": e.Target, "policy": e.Policy} {
			if v != "" {
				data[k] = v
			}
		}
		if e.Count != 0 || e.Type == "queue.purged" || e.Type == "queue.deleted" {
			data["count"] = e.Count
		}
		if len(e.Fields) > 0 {
			data["fields"] = e.Fields
		}
		subject := e.Queue
		if subject == "" {
			subject = e.Policy
		}
		out = append(out, map[string]any{"specversion": "1.0", "id": EventID(e), "type": e.Type,
			"source": "ojs://crown/" + h.cfg.NodeID, "time": Timestamp(e.Time), "subject": subject, "data": data})
		cursor = EventID(e)
	}
	resp := map[string]any{"events": out, "has_more": more}
	if cursor != "" {
		resp["cursor"] = cursor
	}
	h.reply(w, http.StatusOK, resp)
}

func eventSeq(id [16]byte) uint64 {
	v := uint64(0)
	for _, b := range id[8:] {
		v = v<<8 | uint64(b)
	}
	return uint64(id[7])<<62 | v&(1<<62-1)
}

func (h *Handler) health(w http.ResponseWriter, r *http.Request, _ []string) {
	if _, err := h.b.Barrier(r); err != nil {
		h.reply(w, http.StatusServiceUnavailable, map[string]any{"status": "degraded", "version": Version,
			"backend": map[string]any{"type": "raft", "status": "disconnected", "error": err.Error()}})
		return
	}
	h.reply(w, http.StatusOK, map[string]any{"status": "ok", "version": Version,
		"uptime_seconds": int64(now()/1e6) - h.started.Unix(),
		"backend":        map[string]any{"type": "raft", "status": "connected", "leader": h.b.Leader()}})
}

func (h *Handler) manifest(w http.ResponseWriter, _ *http.Request, _ []string) {
	h.reply(w, http.StatusOK, map[string]any{
		"specversion": "1.0", "ojs_version": "1.0",
		"implementation":    map[string]any{"name": "crown", "version": h.cfg.Version, "language": "go"},
		"conformance_level": 0, "conformance_tier": "admin", "protocols": []string{"http"}, "backend": "crown-raft",
		"capabilities": map[string]any{"pause_resume": true, "dead_letter": true, "queue_config": true,
			"batch_enqueue": false, "delayed_jobs": false, "priority_queues": false, "cron_jobs": false,
			"workflows": false, "unique_jobs": false, "rate_limiting": false, "schema_validation": false, "job_ttl": false},
		"extensions": map[string]any{"official": []map[string]any{{"name": "queue-config", "uri": "urn:ojs:ext:queue-config", "version": "1.0.0-rc.1"}}},
	})
}

// ---- metrics ----

type collector struct {
	state                          *fsm.FSM
	depth, bound, overflow, paused *prometheus.Desc
	created, deleted               *prometheus.Desc
}

func newCollector(state *fsm.FSM) *collector {
	return &collector{
		state: state,
		depth: prometheus.NewDesc("ojs_queue_depth", "Messages of the queue by job state (available, active).", []string{"queue", "state"}, nil),
		bound: prometheus.NewDesc("ojs_queue_bound", "The queue's capacity bound (0: unbounded).", []string{"queue", "kind"}, nil),
		overflow: prometheus.NewDesc("ojs_queue_overflow_total", "Pushes refused because the queue was full (replicated count).",
			[]string{"queue"}, nil),
		paused:  prometheus.NewDesc("ojs_queue_paused", "1 while the queue is paused.", []string{"queue"}, nil),
		created: prometheus.NewDesc("ojs_queue_created_total", "Queues created (replicated count).", nil, nil),
		deleted: prometheus.NewDesc("ojs_queue_deleted_total", "Queues deleted through either API or a drain (replicated count).", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.depth, c.bound, c.overflow, c.paused, c.created, c.deleted} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	views, err := c.state.OJSQueues(now(), nil)
	if err == nil {
		for i := range views {
			v := &views[i]
			n := v.Queue.Name
			ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(v.Available), n, "available")
			ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(v.Active), n, "active")
			ch <- prometheus.MustNewConstMetric(c.bound, prometheus.GaugeValue, float64(v.Config.MaxDepth), n, "depth")
			ch <- prometheus.MustNewConstMetric(c.bound, prometheus.GaugeValue, float64(v.Config.MaxSizeBytes), n, "size")
			var overflow uint64
			if v.Queue.OJS != nil {
				overflow = v.Queue.OJS.Overflow
			}
			ch <- prometheus.MustNewConstMetric(c.overflow, prometheus.CounterValue, float64(overflow), n)
			p := 0.0
			if fsm.StateName(&v.Queue) == "paused" {
				p = 1
			}
			ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, p, n)
		}
	}
	if cr, del, _, err := c.state.OJSCounters(); err == nil {
		ch <- prometheus.MustNewConstMetric(c.created, prometheus.CounterValue, float64(cr))
		ch <- prometheus.MustNewConstMetric(c.deleted, prometheus.CounterValue, float64(del))
	}
}
