package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi/ojs"
)

// The bridge between the Queen server and the OJS handlers (package
// httpapi/ojs), and the OJS rules as the Queen routes answer them
// (docs/queues.md).

// ojsBackend implements ojs.Backend on the server's commit, forwarding and
// read barrier.
type ojsBackend struct{ s *Server }

func (b ojsBackend) Commit(w http.ResponseWriter, r *http.Request, body []byte, cmd fsm.Command,
	fail func(status int, code, msg string)) (any, bool) {
	return b.s.commitWith(w, r, body, cmd, func(_ http.ResponseWriter, e *apiError) { fail(e.Status, e.Code, e.Message) })
}

func (b ojsBackend) Barrier(r *http.Request) (int, error) {
	if e := b.s.barrier(r); e != nil {
		return e.Status, e
	}
	return 0, nil
}

func (b ojsBackend) Leader() string {
	id, _ := b.s.cluster.Leader()
	return id
}

// principalOf is the caller's principal for the access lists: the
// X-OJS-Client-Id header (ojs-queues.md 2.3; Crown has no authentication
// yet, which would take precedence). Anything that is not a valid principal
// is anonymous, which matches only "*".
func principalOf(r *http.Request) string {
	v := r.Header.Get("X-OJS-Client-Id")
	if v == "" || v == "*" || !fsm.ValidPrincipal(v) {
		return ""
	}
	return v
}

// refusalError maps an OJS refusal of a push or pop to the OJS error.
func refusalError(ref *fsm.Refusal) *ojs.Error {
	e := &ojs.Error{Message: fsm.RefusalText(ref), Details: map[string]any{"queue": ref.Queue}}
	switch ref.Code {
	case fsm.RefuseFull:
		e.Status, e.Code, e.Type, e.Retryable = http.StatusTooManyRequests, "QUEUE_FULL", "queue_full", true
		e.Details["depth"], e.Details["bound"], e.Details["bound_type"] = ref.Depth, ref.Bound, ref.BoundType
		e.Headers = map[string]string{"Retry-After": "1",
			"X-OJS-Queue-Depth": strconv.FormatInt(ref.Depth, 10), "X-OJS-Queue-Bound": strconv.FormatInt(ref.Bound, 10)}
	case fsm.RefuseDraining:
		e.Status, e.Code, e.Type = http.StatusConflict, "conflict", "queue_draining"
		e.Details["current_state"] = "draining"
	case fsm.RefuseDeleting:
		e.Status, e.Code, e.Type = http.StatusConflict, "conflict", "queue_deleting"
		e.Details["current_state"] = "draining"
	case fsm.RefuseProtected:
		e.Status, e.Code, e.Type = http.StatusConflict, "conflict", "queue_protected"
	default:
		e.Status, e.Code, e.Type = http.StatusForbidden, "permission_denied", "permission_denied"
	}
	return e
}

// writeRefusal answers a refused Queen push or pop with the OJS error body.
func writeRefusal(w http.ResponseWriter, r *http.Request, ref *fsm.Refusal) {
	rid := ojs.RequestID(r)
	w.Header().Set("X-Request-Id", rid)
	ojs.WriteError(w, refusalError(ref), rid, "application/json")
}

// configurePresence reports which shared options a /configure body names.
func configurePresence(body []byte) uint32 {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return 0
	}
	opts := m
	if raw, ok := m["options"]; ok && !isNull(raw) {
		var om map[string]json.RawMessage
		if json.Unmarshal(raw, &om) == nil {
			opts = om
		}
	}
	var p uint32
	has := func(k string) bool { raw, ok := opts[k]; return ok && !isNull(raw) }
	if has("leaseTime") {
		p |= fsm.PresentLease
	}
	if has("deadLetterQueue") || has("dlqAfterMaxRetries") {
		p |= fsm.PresentDLQ
	}
	if has("retentionEnabled") || has("completedRetentionSeconds") {
		p |= fsm.PresentRetention
	}
	return p
}
