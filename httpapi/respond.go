package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// apiError is a request-level failure: an HTTP status and a JSON body
// {"error": message, "code": code, "field": field}. Codes are stable and
// documented in the README; clients only read "error".
type apiError struct {
	Status  int
	Code    string
	Field   string
	Message string
	// notSent marks a forwarding failure that happened before the request
	// left this node (the leader could not be dialled): nothing was
	// applied, so the request may be sent again.
	notSent bool
}

func (e *apiError) Error() string { return e.Message }

// Stable error codes.
const (
	codeEmptyBody     = "empty_body"
	codeInvalidJSON   = "invalid_json"
	codeInvalidField  = "invalid_field"
	codeMissingField  = "missing_field"
	codeTooLarge      = "body_too_large"
	codeBodyTimeout   = "body_timeout"
	codeLimit         = "limit_exceeded"
	codeNotFound      = "not_found"
	codeConflict      = "conflict"
	codeNoLeader      = "no_leader"
	codeUnknown       = "unknown_outcome"
	codeUnavailable   = "unavailable"
	codeInternal      = "internal"
	codeEncryption    = "encryption_unavailable"
	codeNotLeaderForw = "forwarding_failed"
)

func badRequest(code, field, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, &apiError{Status: 500, Code: codeInternal, Message: "encode response: " + err.Error()})
		return
	}
	writeRawJSON(w, status, b)
}

func writeRawJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	writeBody(w, status, b)
}

// writeBody answers with status and the whole body b. Stating its length
// spares net/http the chunked encoding it falls back to for a body over
// 2 KB written without one (a pop of 100 messages answers about 60 KB), and
// the client, often another node relaying, reading the chunks back.
func writeBody(w http.ResponseWriter, status int, b []byte) {
	if status != http.StatusNoContent && status != http.StatusNotModified && status >= 200 {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	}
	w.WriteHeader(status)
	w.Write(b)
}

// internalError answers 500 with a storage or state error.
func internalError(w http.ResponseWriter, err error) {
	writeError(w, &apiError{Status: 500, Code: codeInternal, Message: err.Error()})
}

func writeError(w http.ResponseWriter, e *apiError) {
	body := map[string]any{"error": e.Message, "code": e.Code}
	if e.Field != "" {
		body["field"] = e.Field
	}
	b, _ := json.Marshal(body)
	writeRawJSON(w, e.Status, b)
}

// ---- ids ----

func formatUUID(id [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], id[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], id[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], id[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], id[8:10])
	b[23] = '-'
	hex.Encode(b[24:], id[10:])
	return string(b[:])
}

// parseUUID accepts the canonical hyphenated form (any case) and 32 bare
// hex digits.
func parseUUID[T ~string | ~[]byte](s T) (id [16]byte, ok bool) {
	at := &hexPairsPlain
	switch len(s) {
	case 36:
		if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
			return id, false
		}
		at = &hexPairsDashed
	case 32:
	default:
		return id, false
	}
	// Without a branch a digit: a byte that is not a hex digit reads as
	// 0xff, whose high bits survive the OR. Every ack names a partition and
	// a lease this way, and the leader parses every ack.
	var bad byte
	for i, j := range at {
		hi, lo := hexValue[s[j]], hexValue[s[j+1]]
		bad |= hi | lo
		id[i] = hi<<4 | lo
	}
	if bad > 0xf {
		return [16]byte{}, false
	}
	return id, true
}

// hexPairsDashed and hexPairsPlain are where each byte's two digits start
// in the dashed (8-4-4-4-12) and plain forms.
var (
	hexPairsDashed = [16]uint8{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}
	hexPairsPlain  = [16]uint8{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}
)

// hexValue is each byte's value as a hex digit, 0xff for any other byte.
var hexValue = func() (t [256]byte) {
	for c := range t {
		switch {
		case '0' <= c && c <= '9':
			t[c] = byte(c - '0')
		case 'a' <= c && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			t[c] = byte(c - 'A' + 10)
		default:
			t[c] = 0xff
		}
	}
	return t
}()

// newUUIDv7 makes a time-ordered random UUID for ids the receiving node
// assigns (transaction ids of items that came without one).
func newUUIDv7() string {
	var id [16]byte
	rand.Read(id[6:])
	ms := uint64(time.Now().UnixMilli())
	id[0], id[1], id[2] = byte(ms>>40), byte(ms>>32), byte(ms>>24)
	id[3], id[4], id[5] = byte(ms>>16), byte(ms>>8), byte(ms)
	id[6] = 0x70 | id[6]&0x0f
	id[8] = 0x80 | id[8]&0x3f
	return formatUUID(id)
}

// ---- times ----

// appendMicros appends unix µs as RFC 3339 UTC with microseconds (message
// createdAt).
func appendMicros(dst []byte, us int64) []byte {
	return time.UnixMicro(us).UTC().AppendFormat(dst, "2006-01-02T15:04:05.000000Z")
}

// formatMillis renders unix µs as RFC 3339 UTC with milliseconds (every other time).
func formatMillis(us int64) string {
	return time.UnixMicro(us).UTC().Format("2006-01-02T15:04:05.000Z")
}

func optMillis(us int64) any {
	if us == 0 {
		return nil
	}
	return formatMillis(us)
}

// parseTime reads an RFC 3339 timestamp (Z or offset, optional fraction) or
// a bare date (midnight UTC).
func parseTime(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, true
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, true
	}
	return time.Time{}, false
}
