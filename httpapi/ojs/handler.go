package ojs

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crownmq/crown/fsm"
)

// Backend is what the OJS handlers need from the node's HTTP layer.
type Backend interface {
	// Commit applies cmd through Raft on the leader, or forwards the
	// original request to the leader and relays its answer. It returns
	// false when the response has been written; failures of its own are
	// reported through fail.
	Commit(w http.ResponseWriter, r *http.Request, body []byte, cmd fsm.Command, fail func(status int, code, msg string)) (any, bool)
	// Barrier waits until this node has applied the leader's commit index,
	// so that a local read after it is linearizable.
	Barrier(r *http.Request) (status int, err error)
	// Leader is the id of the node this node knows as the Raft leader
	// ("" while it knows none).
	Leader() string
}

// Config configures the handlers.
type Config struct {
	NodeID string
	// MaxBodyBytes bounds an admin request body (1 MiB).
	MaxBodyBytes int64
	// MaxQueues bounds creation, explicit or implicit (10 000).
	MaxQueues uint32
	// Strict turns implicit creation by pause, resume and the target of a
	// DELETE with strategy move off (404 instead).
	Strict   bool
	Version  string
	Registry prometheus.Registerer
}

// Handler serves /ojs/.
type Handler struct {
	cfg     Config
	b       Backend
	state   *fsm.FSM
	started time.Time
}

// New builds the handlers and registers the ojs_queue_* metrics.
func New(cfg Config, b Backend, state *fsm.FSM) *Handler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.MaxQueues == 0 {
		cfg.MaxQueues = fsm.DefaultMaxQueues
	}
	h := &Handler{cfg: cfg, b: b, state: state, started: time.Now()}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(newCollector(state))
	}
	return h
}

type route struct {
	methods map[string]func(http.ResponseWriter, *http.Request, []string)
}

// ServeHTTP routes an /ojs/ request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rid := RequestID(r)
	r.Header.Set("X-Request-Id", rid) // forwarded requests keep it
	SetHeaders(w, rid)
	path := r.URL.EscapedPath()
	var segs []string
	for _, s := range strings.Split(strings.Trim(path, "/"), "/") {
		d, err := url.PathUnescape(s)
		if err != nil {
			h.fail(w, badRequest("invalid_request", "", "malformed path"))
			return
		}
		segs = append(segs, d)
	}
	methods, args := h.match(segs)
	if methods == nil {
		h.fail(w, newErr(http.StatusNotFound, "not_found", "route_not_found", "no OJS endpoint at %s", path))
		return
	}
	fn, ok := methods[r.Method]
	if !ok {
		var allow []string
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			if _, ok := methods[m]; ok {
				allow = append(allow, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		h.fail(w, newErr(http.StatusMethodNotAllowed, "invalid_request", "method_not_allowed", "%s is not allowed on %s", r.Method, path))
		return
	}
	fn(w, r, args)
}

type methods = map[string]func(http.ResponseWriter, *http.Request, []string)

func (h *Handler) match(s []string) (methods, []string) {
	n := len(s)
	switch {
	case n == 2 && s[0] == "ojs" && s[1] == "manifest":
		return methods{"GET": h.manifest}, nil
	case n < 3 || s[0] != "ojs" || s[1] != "v1":
		return nil, nil
	case n == 3 && s[2] == "health":
		return methods{"GET": h.health}, nil
	case n == 3 && s[2] == "events":
		return methods{"GET": h.events}, nil
	case s[2] != "queues":
		return nil, nil
	case n == 3:
		return methods{"GET": h.listQueues, "POST": h.createQueue}, nil
	case n == 5 && s[3] == "_default" && s[4] == "config":
		return methods{"GET": h.getDefault, "PUT": h.putDefault, "PATCH": h.patchDefault}, nil
	case n == 4 && s[3] == "_policies":
		return methods{"GET": h.listPolicies, "POST": h.createPolicy}, nil
	case n == 5 && s[3] == "_policies":
		return methods{"GET": h.getPolicy, "PATCH": h.patchPolicy, "DELETE": h.deletePolicy}, s[4:5]
	case strings.HasPrefix(s[3], "_"):
		return nil, nil
	case n == 4:
		return methods{"GET": h.getQueue, "PATCH": h.patchQueue, "DELETE": h.deleteQueue}, s[3:4]
	case n == 5:
		switch s[4] {
		case "pause":
			return methods{"POST": h.pause}, s[3:4]
		case "resume":
			return methods{"POST": h.resume}, s[3:4]
		case "purge":
			return methods{"POST": h.purge}, s[3:4]
		case "stats":
			return methods{"GET": h.stats}, s[3:4]
		case "config":
			return methods{"PUT": h.putConfig}, s[3:4]
		}
	}
	return nil, nil
}

// ---- helpers ----

// body reads a request body within the limit and checks its content type.
// An empty body is returned as nil.
func (h *Handler) body(r *http.Request, merge bool) ([]byte, *Error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, h.cfg.MaxBodyBytes+1))
	if err != nil {
		return nil, badRequest("invalid_request", "", "read body: %v", err)
	}
	if int64(len(b)) > h.cfg.MaxBodyBytes {
		return nil, newErr(http.StatusRequestEntityTooLarge, "payload_too_large", "", "the body is over %d bytes", h.cfg.MaxBodyBytes)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		// No body, so no content type to refuse (ojs-queues.md 0.1): many
		// clients label an empty POST as a form.
		return nil, nil
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt := strings.ToLower(strings.TrimSpace(strings.SplitN(ct, ";", 2)[0]))
		ok := mt == "application/json" || mt == ContentType || (merge && mt == "application/merge-patch+json")
		if !ok {
			return nil, badRequest("unsupported_content_type", "", "content type %s is not accepted; send %s or application/json", mt, ContentType)
		}
	}
	return b, nil
}

// objectBody reads a body that must be a JSON object. When required is
// false an empty body is accepted and m is nil (reading a nil map finds
// nothing). b is kept for forwarding to the leader.
func (h *Handler) objectBody(r *http.Request, merge, required bool) (b []byte, m map[string]jsonRaw, e *Error) {
	if b, e = h.body(r, merge); e != nil || (b == nil && !required) {
		return b, nil, e
	}
	m, e = object(b)
	return b, m, e
}

// configBody reads a request whose only members are a configuration
// document (flat or under "config"), as PUT and PATCH of configuration take.
// queue, when not empty, is the queue the path names: the document may carry
// its name, as the queue configuration document does next to its sections
// (ojs-queues.md 2), so long as it is that queue's (6.4).
func (h *Handler) configBody(r *http.Request, patch bool, queue string) ([]byte, fsm.QueueConfig, uint32, *Error) {
	b, m, e := h.objectBody(r, patch, true)
	if e != nil {
		return nil, fsm.QueueConfig{}, 0, e
	}
	allowed := []string{"config"}
	if queue != "" {
		allowed = append(allowed, "name")
	}
	ps := unknownMembers(m, "", "is not a known member", true, allowed...)
	if queue != "" {
		ps = append(ps, repeatedName(m, queue, "queue")...)
	}
	cfg, unset, more := configProblems(m, patch)
	if e := problems(append(ps, more...)); e != nil {
		return nil, fsm.QueueConfig{}, 0, e
	}
	return b, cfg, unset, nil
}

// queryLimit reads the "limit" query parameter of a listing: def when
// absent, else an integer from 1 to max.
func queryLimit(q url.Values, def, max int) (int, *Error) {
	s := q.Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max {
		return 0, badRequest("invalid_parameter", "limit", "limit must be an integer from 1 to %d", max)
	}
	return n, nil
}

// object parses a required JSON object body.
func object(b []byte) (map[string]jsonRaw, *Error) {
	if b == nil {
		return nil, newErr(http.StatusBadRequest, "invalid_payload", "", "a JSON object body is required")
	}
	m, ok := decodeObject(b)
	if !ok {
		return nil, newErr(http.StatusBadRequest, "invalid_payload", "", "the body is not a JSON object")
	}
	return m, nil
}

// read runs the read barrier; false when it failed (the error is written).
func (h *Handler) read(w http.ResponseWriter, r *http.Request) bool {
	if status, err := h.b.Barrier(r); err != nil {
		e := newErr(status, "backend_error", "unavailable", "%v", err)
		e.Retryable = true
		e.Headers = map[string]string{"Retry-After": "1"}
		h.fail(w, e)
		return false
	}
	return true
}

// commit applies cmd; false when the response was written.
func (h *Handler) commit(w http.ResponseWriter, r *http.Request, body []byte, cmd fsm.Command) (any, bool) {
	res, ok := h.b.Commit(w, r, body, cmd, func(status int, code, msg string) {
		e := newErr(status, "backend_error", code, "%s", msg)
		if status == http.StatusServiceUnavailable {
			e.Type, e.Retryable = "unavailable", true
			e.Headers = map[string]string{"Retry-After": "1"}
		} else if status < 500 {
			e.Code = "invalid_request"
		}
		h.fail(w, e)
	})
	if !ok {
		return nil, false
	}
	if er, isErr := res.(*fsm.ErrorResult); isErr {
		h.fail(w, newErr(http.StatusBadRequest, "invalid_request", "", "%s", er.Err))
		return nil, false
	}
	return res, true
}

// ojsResult unwraps an OJSResult, writing its error.
// run commits an OJS command and answers its refusal, if any; ok reports
// that the command applied and the caller writes the answer.
func (h *Handler) run(w http.ResponseWriter, r *http.Request, body []byte, cmd fsm.Command) (*fsm.OJSResult, bool) {
	res, ok := h.commit(w, r, body, cmd)
	if !ok {
		return nil, false
	}
	return h.ojsResult(w, res)
}

func (h *Handler) ojsResult(w http.ResponseWriter, res any) (*fsm.OJSResult, bool) {
	or := res.(*fsm.OJSResult)
	if e := or.Err; e != nil {
		oe := newErr(e.Status, e.Code, e.Type, "%s", e.Message)
		oe.Details = map[string]any{}
		if e.State != "" {
			oe.Details["current_state"] = e.State
		}
		if e.Type == "queue_not_empty" {
			oe.Details["depth"] = e.Depth
			oe.Details["counts"] = map[string]any{"available": e.Available, "scheduled": 0, "pending": 0,
				"active": e.Active, "retryable": 0}
		}
		if e.Field != "" {
			oe.Details["field"] = e.Field
		}
		h.fail(w, oe)
		return nil, false
	}
	return or, true
}

// queueName validates a queue name from a path or body.
func queueName(name string) *Error {
	if !fsm.ValidQueueName(name) {
		return badRequest("invalid_request", "name", "queue name %q must match ^[a-z0-9][a-z0-9.-]*$ and be 1-128 bytes", name)
	}
	return nil
}

func now() int64 { return time.Now().UnixMicro() }
