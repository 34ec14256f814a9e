// Package ojs serves Crown's OJS queue administration API (Part 1 of
// ojs-queues.md) under /ojs/v1/ and /ojs/manifest, on the same queues as the
// Queen API (docs/queues.md). It reaches Raft only through Backend, which
// httpapi implements: commits are forwarded to the leader like every other
// write, and every read runs a read barrier first, so it is linearizable
// whichever node answers.
package ojs

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"time"
)

// ContentType is the exact Content-Type of every OJS response.
const ContentType = "application/openjobspec+json"

// Version is the OJS-Version header value.
const Version = "1.0"

const docsBase = "https://crown.example/docs/errors#"

var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// Error is an OJS error response (ojs-queues.md 0.5).
type Error struct {
	Status    int
	Code      string
	Type      string
	Message   string
	Retryable bool
	Hint      string
	Details   map[string]any
	Headers   map[string]string
}

func (e *Error) Error() string { return e.Message }

func newErr(status int, code, typ, format string, args ...any) *Error {
	if typ == "" {
		typ = code
	}
	return &Error{Status: status, Code: code, Type: typ, Message: fmt.Sprintf(format, args...)}
}

func badRequest(typ, field, format string, args ...any) *Error {
	e := newErr(http.StatusBadRequest, "invalid_request", typ, format, args...)
	if field != "" {
		e.Details = map[string]any{"field": field}
	}
	return e
}

var defaultHints = map[string]string{
	"invalid_payload":   "Send a JSON object body.",
	"invalid_request":   "Fix the request shape: member names, JSON types and query parameters.",
	"validation_error":  "Fix the value named in details.field.",
	"not_found":         "Check the name; deleted queues and policies are gone.",
	"conflict":          "Check the queue's current state and retry the operation that fits it.",
	"permission_denied": "Send an X-OJS-Client-Id listed in the queue's access lists.",
	"QUEUE_FULL":        "Wait for consumers to drain the queue, or raise capacity.",
	"payload_too_large": "Send a smaller body.",
	"backend_error":     "Retry after a moment.",
	"unsupported":       "Use an operation Crown implements.",
}

// RequestID returns the request id of r: the client's value when sane,
// otherwise a generated req_<uuidv7>.
func RequestID(r *http.Request) string {
	if v := r.Header.Get("X-Request-Id"); requestIDRe.MatchString(v) {
		return v
	}
	return "req_" + uuidv7()
}

// SetHeaders sets the headers every OJS response carries.
func SetHeaders(w http.ResponseWriter, rid string) {
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("OJS-Version", Version)
	h.Set("X-Request-Id", rid)
}

// ErrorBody renders the OJS error body.
func ErrorBody(e *Error, rid string) []byte {
	hint := e.Hint
	if hint == "" {
		hint = defaultHints[e.Code]
	}
	// backend_error (500 and 503) is always retryable (ojs-queues.md 0.5).
	retryable := e.Retryable || e.Code == "backend_error"
	body := map[string]any{
		"code": e.Code, "type": e.Type, "message": e.Message, "retryable": retryable,
		"request_id": rid, "docs_url": docsBase + e.Code,
	}
	if hint != "" {
		body["hint"] = hint
	}
	if len(e.Details) > 0 {
		body["details"] = e.Details
	}
	b, _ := json.Marshal(map[string]any{"error": body})
	return b
}

// WriteError writes an OJS error with the given Content-Type (the Queen
// routes keep application/json).
func WriteError(w http.ResponseWriter, e *Error, rid, contentType string) {
	for k, v := range e.Headers {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(e.Status)
	w.Write(ErrorBody(e, rid))
}

func (h *Handler) fail(w http.ResponseWriter, e *Error) {
	if e.Status == http.StatusMethodNotAllowed {
		e.Code, e.Type = "invalid_request", "method_not_allowed"
	}
	WriteError(w, e, w.Header().Get("X-Request-Id"), ContentType)
}

func (h *Handler) reply(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		h.fail(w, newErr(500, "backend_error", "", "encode response: %v", err))
		return
	}
	w.Header().Set("Content-Type", ContentType)
	w.WriteHeader(status)
	w.Write(b)
}

// Timestamp renders unix µs as RFC 3339 UTC with milliseconds.
func Timestamp(us int64) string {
	return time.UnixMicro(us).UTC().Format("2006-01-02T15:04:05.000Z")
}

func uuidv7() string {
	var b [16]byte
	rand.Read(b[:])
	ms := uint64(time.Now().UnixMilli())
	for i := 0; i < 6; i++ {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = 0x70 | b[6]&0x0f
	b[8] = 0x80 | b[8]&0x3f
	return FormatUUID(b)
}

// FormatUUID renders 16 bytes as a lower-case UUID.
func FormatUUID(b [16]byte) string {
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func parseUUID(s string) ([16]byte, bool) {
	var out [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return out, false
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	b, err := hex.DecodeString(h)
	if err != nil {
		return out, false
	}
	copy(out[:], b)
	return out, true
}
