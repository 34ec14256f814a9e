package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi/bufpool"
	"github.com/crownmq/crown/httpapi/jsonscan"
)

// Limits on what a request may carry. They are documented in the README.
type Limits struct {
	MaxBodyBytes    int64 // whole request body (413 above it)
	MaxItems        int   // push items, acknowledgments or transaction operations per request
	MaxPayloadBytes int   // one message's payload
	MaxPopBatch     int   // pops ask for at most this many messages (larger values are clamped)
}

// DefaultLimits are the documented defaults.
var DefaultLimits = Limits{MaxBodyBytes: 16 << 20, MaxItems: 10000, MaxPayloadBytes: 8 << 20, MaxPopBatch: 10000}

// readBody reads a request body within the limit. An empty body is an error:
// Queen requires a body on every POST, even where all fields are optional.
func readBody(r *http.Request, limit int64) ([]byte, *apiError) {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if aerr := checkBody(b, err, limit); aerr != nil {
		return nil, aerr
	}
	return b, nil
}

// readBodyPooled is readBody into a pooled buffer, for the hot endpoints.
// Parsed commands alias the buffer (payloads are kept verbatim), so the
// caller releases it only after it has proposed or forwarded the command
// and written its answer (the proposer encodes a command before Propose
// returns).
func readBodyPooled(r *http.Request, limit int64) ([]byte, func(), *apiError) {
	b, release, err := readPooled(r.Body, r.ContentLength, limit+1)
	if aerr := checkBody(b, err, limit); aerr != nil {
		release()
		return nil, func() {}, aerr
	}
	return b, release, nil
}

// checkBody turns what reading up to limit+1 bytes of a body gave into the
// request's error, if any.
func checkBody(b []byte, err error, limit int64) *apiError {
	switch {
	case int64(len(b)) > limit:
		return &apiError{Status: http.StatusRequestEntityTooLarge, Code: codeTooLarge,
			Message: fmt.Sprintf("Request body exceeds the limit of %d bytes", limit)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &apiError{Status: http.StatusRequestTimeout, Code: codeBodyTimeout,
			Message: fmt.Sprintf("Request body not received in time: %v", err)}
	case err != nil:
		return badRequest(codeInvalidJSON, "", "Invalid JSON: reading body: %v", err)
	case len(bytes.TrimSpace(b)) == 0:
		return badRequest(codeEmptyBody, "", "Empty request body")
	}
	return nil
}

// readPooled reads rd to its end, or to max bytes, into a pooled buffer
// that doubles as the bytes arrive, up to the announced length when there
// is one. The bytes are valid until release is called.
//
// The announced length only caps the growth: a client's Content-Length
// costs nothing until the bytes come, so a request that announces 16 MiB
// and sends nothing does not hold 16 MiB (and the garbage collector's goal
// does not grow by it while the body is awaited).
func readPooled(rd io.Reader, announced, max int64) (b []byte, release func(), err error) {
	buf := bufpool.Get()
	release = func() { bufpool.Put(buf) }
	b = *buf
	for int64(len(b)) < max {
		if len(b) == cap(b) {
			n := 2*int64(cap(b)) + 1
			if int64(len(b)) <= announced && announced < max {
				// One byte more than announced, so the read that finds
				// the end needs no larger buffer.
				n = min(n, announced+1)
			}
			nb := make([]byte, len(b), min(n, max))
			copy(nb, b)
			b = nb
		}
		room := b[len(b):cap(b)]
		if int64(len(room)) > max-int64(len(b)) {
			room = room[:max-int64(len(b))]
		}
		var n int
		n, err = rd.Read(room)
		b = b[:len(b)+n]
		if err == io.EOF {
			err = nil
			break
		}
		if err != nil {
			break
		}
	}
	*buf = b
	return b, release, err
}

// decodeObject validates b as one JSON object and returns its raw members
// by exact name (a repeated name keeps its last value, as encoding/json does).
func decodeObject(b []byte, where string) (map[string]json.RawMessage, *apiError) {
	v, err := jsonscan.Value(b)
	if errors.Is(err, jsonscan.ErrTooDeep) {
		return nil, badRequest(codeLimit, where, "the JSON nests deeper than %d levels (%v)", jsonscan.MaxDepth, err)
	}
	if err != nil {
		return nil, badRequest(codeInvalidJSON, where, "Invalid JSON: %v", err)
	}
	m := make(map[string]json.RawMessage, 8)
	if err := jsonscan.ObjectValid(v, func(k string, val []byte) error {
		m[k] = val
		return nil
	}); err != nil {
		return nil, badRequest(codeInvalidJSON, where, "Invalid JSON: %s must be an object", nameOr(where, "body"))
	}
	return m, nil
}

// bodyError is the error of a one-pass read of a body that must be an
// object (jsonscan.Reader), err being what reading its top-level object
// returned: the same as decodeObject(body, "") gives for a body it refuses,
// nil when the body was one object and nothing after it.
func bodyError(r *jsonscan.Reader, err error) *apiError {
	const where = ""
	notObject := err == jsonscan.ErrNotObject
	if notObject {
		_, err = r.Raw() // a syntax error outranks the kind
	}
	if err == nil {
		err = r.End()
	}
	switch {
	case errors.Is(err, jsonscan.ErrTooDeep):
		return badRequest(codeLimit, where, "the JSON nests deeper than %d levels (%v)", jsonscan.MaxDepth, err)
	case err != nil:
		return badRequest(codeInvalidJSON, where, "Invalid JSON: %v", err)
	case notObject:
		return badRequest(codeInvalidJSON, where, "Invalid JSON: body must be an object")
	}
	return nil
}

func nameOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func isNull(raw json.RawMessage) bool { return jsonscan.IsNull(raw) }

// absentOr is the code of a refused member (the README's error codes):
// missing_field when it is absent or null, invalid_field when it is there
// with the wrong type.
func absentOr(raw json.RawMessage) string {
	if len(raw) == 0 || isNull(raw) {
		return codeMissingField
	}
	return codeInvalidField
}

// jsonString decodes a raw JSON string (already validated by the scanner);
// ok is false for any other type.
func jsonString(raw json.RawMessage) (string, bool) { return jsonscan.Unquote(raw) }

// optString reads an optional string member: absent and null are "not
// present"; any other non-string is a type error naming the field.
func optString(raw json.RawMessage, field, message string) (string, bool, *apiError) {
	if isNull(raw) {
		return "", false, nil
	}
	s, ok := jsonString(raw)
	if !ok {
		return "", false, badRequest(codeInvalidField, field, "%s", message)
	}
	return s, true, nil
}

// optBytes is optString for a member that is only compared or parsed: an
// unescaped string comes back without a copy.
func optBytes(raw json.RawMessage, field, message string) ([]byte, bool, *apiError) {
	if isNull(raw) {
		return nil, false, nil
	}
	b, ok := jsonscan.UnquoteBytes(raw)
	if !ok {
		return nil, false, badRequest(codeInvalidField, field, "%s", message)
	}
	return b, true, nil
}

func checkName(field, s string) *apiError {
	if len(s) > fsm.MaxNameBytes {
		return badRequest(codeLimit, field, "%s is %d bytes long; the limit is %d bytes", field, len(s), fsm.MaxNameBytes)
	}
	// JSON bodies cannot carry invalid UTF-8 (the scanner refuses it), but a
	// percent-decoded path or query can; such a name would be listed with
	// U+FFFD in place of its bytes and then be unreachable by that name.
	if !utf8.ValidString(s) {
		return badRequest(codeInvalidField, field, "%s is not valid UTF-8", field)
	}
	return nil
}

// ---- push ----

// rawPushItem holds a push item's members, matched by exact (case-
// sensitive) name: encoding/json's struct decoding would also accept
// "QUEUE" or "Partition", which Queen does not.
type rawPushItem struct {
	Queue, Partition, Payload, Data, TransactionID, TraceID json.RawMessage
}

func rawPushItemOf(m map[string]json.RawMessage) rawPushItem {
	return rawPushItem{Queue: m["queue"], Partition: m["partition"], Payload: m["payload"], Data: m["data"],
		TransactionID: m["transactionId"], TraceID: m["traceId"]}
}

// member stores one object member (scanner callback); unknown names are ignored.
func (r *rawPushItem) member(k, v []byte) error {
	switch string(k) {
	case "queue":
		r.Queue = v
	case "partition":
		r.Partition = v
	case "payload":
		r.Payload = v
	case "data":
		r.Data = v
	case "transactionId":
		r.TransactionID = v
	case "traceId":
		r.TraceID = v
	}
	return nil
}

// valid is a quick screen: the item's string members have the right types
// and sizes, so parsing it cannot fail and needs no error context.
func (r *rawPushItem) valid(lim Limits) bool {
	str := func(v []byte, optional bool) bool {
		if optional && isNull(v) {
			return true
		}
		return len(v) >= 2 && v[0] == '"' && len(v) <= fsm.MaxNameBytes
	}
	return str(r.Queue, false) && str(r.Partition, true) && str(r.TransactionID, true) && isNull(r.TraceID) &&
		len(r.Payload) <= lim.MaxPayloadBytes && len(r.Data) <= lim.MaxPayloadBytes
}

// parsePushItems validates push items (queen-api.md 3.5). allowData accepts
// "data" for "payload" (the transaction's flat form).
func parsePushItems(raw json.RawMessage, field string, lim Limits, allowData bool) ([]fsm.PushItem, *apiError) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, badRequest(absentOr(raw), field, "items array is required")
	}
	out := make([]fsm.PushItem, 0, 16)
	var aerr *apiError
	// raw is part of a body decodeObject validated: walk it without
	// validating again.
	err := jsonscan.ArrayValid(raw, func(elem []byte) error {
		if len(out) == lim.MaxItems {
			aerr = badRequest(codeLimit, field, "%s holds more than %d items; the limit is %d per request", field, lim.MaxItems, lim.MaxItems)
			return aerr
		}
		out = append(out, fsm.PushItem{})
		aerr = parsePushItem(elem, field, len(out)-1, lim, allowData, &out[len(out)-1])
		if aerr != nil {
			return aerr
		}
		return nil
	})
	if aerr != nil {
		return nil, aerr
	}
	if err != nil {
		return nil, badRequest(codeInvalidJSON, field, "Invalid JSON: %v", err)
	}
	return out, nil
}

func parsePushItem(raw json.RawMessage, field string, i int, lim Limits, allowData bool, out *fsm.PushItem) *apiError {
	var r rawPushItem
	if jsonscan.ObjectValidRaw(raw, r.member) != nil {
		return notAnItem(field, i)
	}
	return r.item(field, i, lim, allowData, out)
}

func notAnItem(field string, i int) *apiError {
	where := fmt.Sprintf("%s[%d]", field, i)
	return badRequest(codeInvalidField, where, "%s must be an object", where)
}

// parsePush reads the body of POST /api/v1/push in one pass (jsonscan.Reader)
// with the answer decodeObject and parsePushItems give
// (FuzzParsePushOnePass): the leader parses every push, and validating the
// body first and then walking what was validated read each payload four
// times. A syntax error anywhere outranks every other error, then a missing
// array, then the first bad item; "items" given twice counts as its last.
func parsePush(body []byte, lim Limits) ([]fsm.PushItem, *apiError) {
	var items []fsm.PushItem
	w := itemWalk{field: "items", limit: lim.MaxItems, notObject: func(i int) *apiError { return notAnItem("items", i) }}
	r := jsonscan.NewReader(body)
	err := r.Object(func(key []byte) error {
		if string(key) != w.field {
			return nil
		}
		items = make([]fsm.PushItem, 0, itemsHint(len(body), 256, lim.MaxItems))
		var ri rawPushItem
		return readItems(r, &w, ri.member, func(i int) *apiError {
			items = append(items, fsm.PushItem{})
			aerr := ri.item(w.field, i, lim, false, &items[i])
			ri = rawPushItem{}
			return aerr
		})
	})
	if aerr := bodyError(r, err); aerr != nil {
		return nil, aerr
	}
	if aerr := w.refusal(); aerr != nil {
		return nil, aerr
	}
	return items, nil
}

// itemsHint is the capacity for the items of a body of n bytes whose items
// take about per bytes each: grown from 16, the items of a 100-message push
// were allocated at 16, 32, 64 and 128 (29 KB for 12). At most 128, so that
// a large body of few items (one big payload) does not allocate for many.
func itemsHint(n, per, limit int) int { return max(1, min(limit, 128, n/per+1)) }

// itemWalk is the state of readItems over an array member of a body read in
// one pass (jsonscan.Reader).
type itemWalk struct {
	field     string
	limit     int
	notObject func(i int) *apiError // the refusal of an element that is not an object
	n         int                   // items read
	isArray   bool
	raw       json.RawMessage // the member when it is not an array
	err       *apiError       // the first refusal
}

// readItems reads the member's value: each element, while nothing has been
// refused and fewer than the limit were read, is an object whose members go
// to member, after which add builds item i from them (and clears what
// member filled). After the first refusal the rest is only validated, so a
// syntax error after it still outranks it; a member read again starts over,
// as a map keeps the last.
func readItems(r *jsonscan.Reader, w *itemWalk, member func(k, v []byte) error, add func(i int) *apiError) error {
	w.n, w.err, w.raw = 0, nil, nil
	err := r.Array(func() error {
		if w.err != nil {
			return nil
		}
		if w.n == w.limit {
			w.err = badRequest(codeLimit, w.field, "%s holds more than %d items; the limit is %d per request", w.field, w.limit, w.limit)
			return nil
		}
		err := r.Object(func(k []byte) error {
			v, err := r.Raw()
			if err != nil {
				return err
			}
			return member(k, v)
		})
		if err == jsonscan.ErrNotObject {
			w.err = w.notObject(w.n)
			return nil
		}
		if err != nil {
			return err
		}
		w.err = add(w.n)
		w.n++
		return nil
	})
	if w.isArray = err != jsonscan.ErrNotArray; !w.isArray {
		w.raw, err = r.Raw()
	}
	return err
}

// refusal is the walk's answer once the body was read without a syntax
// error: a member that was absent or not an array, else the first refused
// item.
func (w *itemWalk) refusal() *apiError {
	if !w.isArray {
		return badRequest(absentOr(w.raw), w.field, "%s array is required", w.field)
	}
	return w.err
}

// item validates the members of item i of field into out.
func (r *rawPushItem) item(field string, i int, lim Limits, allowData bool, out *fsm.PushItem) *apiError {
	if r.valid(lim) {
		// The common case needs no field path: build it only for an error.
		return r.into("", lim, allowData, out)
	}
	return r.into(fmt.Sprintf("%s[%d]", field, i), lim, allowData, out)
}

func (r *rawPushItem) into(where string, lim Limits, allowData bool, out *fsm.PushItem) *apiError {
	q, ok := jsonString(r.Queue)
	if !ok {
		return badRequest(absentOr(r.Queue), where+".queue", "Queue must be a string")
	}
	part, present, err := optString(r.Partition, where+".partition", "Partition must be a string")
	if err != nil {
		return err
	}
	if !present {
		part = "Default"
	}
	tx, present, err := optString(r.TransactionID, where+".transactionId", "TransactionId must be a string")
	if err != nil {
		return err
	}
	if !present || tx == "" {
		tx = newUUIDv7()
	}
	trace, hasTrace, err := optString(r.TraceID, where+".traceId", "TraceId must be a string")
	if err != nil {
		return err
	}
	for _, f := range [...][2]string{{"queue", q}, {"partition", part}, {"transactionId", tx}} {
		if len(f[1]) > fsm.MaxNameBytes {
			return checkName(where+"."+f[0], f[1])
		}
	}
	out.Queue, out.Partition, out.TxID = q, part, tx
	if hasTrace {
		id, ok := parseUUID(trace)
		if !ok {
			return badRequest(codeInvalidField, where+".traceId", "TraceId must be a UUID, got %q", trace)
		}
		out.TraceID, out.HasTrace = id, true
	}
	payload := r.Payload
	if len(payload) == 0 && allowData {
		payload = r.Data
	}
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	if len(payload) > lim.MaxPayloadBytes {
		return badRequest(codeLimit, where+".payload", "payload is %d bytes; the limit is %d", len(payload), lim.MaxPayloadBytes)
	}
	out.Payload = payload
	return nil
}

// ---- configure ----

type optionKind int

const (
	intOption optionKind = iota
	boolOption
)

// optionSpec describes one configure option: its JSON name, type, and where
// it lives in the resolved options.
type optionSpec struct {
	name string
	kind optionKind
	i    func(*fsm.Options) *int64
	b    func(*fsm.Options) *bool
}

var optionSpecs = []optionSpec{
	{name: "leaseTime", i: func(o *fsm.Options) *int64 { return &o.LeaseTime }},
	{name: "retryLimit", i: func(o *fsm.Options) *int64 { return &o.RetryLimit }},
	{name: "deadLetterQueue", kind: boolOption, b: func(o *fsm.Options) *bool { return &o.DeadLetterQueue }},
	{name: "dlqAfterMaxRetries", kind: boolOption, b: func(o *fsm.Options) *bool { return &o.DLQAfterMaxRetries }},
	{name: "delayedProcessing", i: func(o *fsm.Options) *int64 { return &o.DelayedProcessing }},
	{name: "windowBuffer", i: func(o *fsm.Options) *int64 { return &o.WindowBuffer }},
	{name: "retentionEnabled", kind: boolOption, b: func(o *fsm.Options) *bool { return &o.RetentionEnabled }},
	{name: "retentionSeconds", i: func(o *fsm.Options) *int64 { return &o.RetentionSeconds }},
	{name: "completedRetentionSeconds", i: func(o *fsm.Options) *int64 { return &o.CompletedRetentionSeconds }},
	{name: "maxWaitTimeSeconds", i: func(o *fsm.Options) *int64 { return &o.MaxWaitTimeSeconds }},
	{name: "minPopWaitTime", i: func(o *fsm.Options) *int64 { return &o.MinPopWaitTime }},
	{name: "encryptionEnabled", kind: boolOption, b: func(o *fsm.Options) *bool { return &o.EncryptionEnabled }},
	{name: "dedupWindowSeconds", i: func(o *fsm.Options) *int64 { return &o.DedupWindowSeconds }},
	{name: "priority", i: func(o *fsm.Options) *int64 { return &o.Priority }},
	{name: "maxSize", i: func(o *fsm.Options) *int64 { return &o.MaxSize }},
	{name: "retryDelay", i: func(o *fsm.Options) *int64 { return &o.RetryDelay }},
	{name: "ttl", i: func(o *fsm.Options) *int64 { return &o.TTL }},
}

// signedOptions may be negative: the legacy keys, which queen-api.md 3.4
// says are accepted, stored and echoed verbatim with no effect, and
// minPopWaitTime, which is clamped to 0-60000.
var signedOptions = map[string]bool{"priority": true, "maxSize": true, "retryDelay": true, "ttl": true, "minPopWaitTime": true}

// parseConfigure reads POST /api/v1/configure (queen-api.md 3.4): a full
// replace, options nested under "options" or at the top level.
func parseConfigure(body []byte) (*fsm.Configure, *apiError) {
	m, err := decodeObject(body, "")
	if err != nil {
		return nil, err
	}
	q, ok := jsonString(m["queue"])
	if !ok {
		return nil, badRequest(absentOr(m["queue"]), "queue", "queue is required")
	}
	if err := checkName("queue", q); err != nil {
		return nil, err
	}
	opts := m
	where := ""
	if raw, present := m["options"]; present && !isNull(raw) {
		if opts, err = decodeObject(raw, "options"); err != nil {
			return nil, err
		}
		where = "options."
	}
	c := &fsm.Configure{Queue: q, Options: fsm.DefaultOptions(0)}
	for _, tag := range []struct {
		name string
		dst  *string
	}{{"namespace", &c.Namespace}, {"task", &c.Task}} {
		raw := opts[tag.name]
		field := where + tag.name
		if isNull(raw) {
			raw, field = m[tag.name], tag.name
		}
		s, _, err := optString(raw, field, tag.name+" must be a string")
		if err != nil {
			return nil, err
		}
		if err := checkName(field, s); err != nil {
			return nil, err
		}
		*tag.dst = s
	}
	for _, spec := range optionSpecs {
		raw := opts[spec.name]
		if isNull(raw) {
			continue
		}
		field := where + spec.name
		if spec.kind == boolOption {
			v, ok := jsonBool(raw)
			if !ok {
				return nil, badRequest(codeInvalidField, field, "%s must be a boolean", spec.name)
			}
			*spec.b(&c.Options) = v
			continue
		}
		v, ok := jsonInt(raw)
		if !ok {
			return nil, badRequest(codeInvalidField, field, "%s must be an integer", spec.name)
		}
		if v < 0 && !signedOptions[spec.name] {
			return nil, badRequest(codeInvalidField, field, "%s must not be negative, got %d", spec.name, v)
		}
		*spec.i(&c.Options) = v
	}
	fsm.ClampOptions(&c.Options)
	return c, nil
}

// jsonInt reads an integer given as a JSON number (integral) or a numeric string.
func jsonInt(raw json.RawMessage) (int64, bool) {
	s := string(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var ok bool
		if s, ok = jsonString(raw); !ok {
			return 0, false
		}
		s = strings.TrimSpace(s)
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// jsonBool reads a boolean given as a JSON boolean or "true"/"false".
func jsonBool(raw json.RawMessage) (bool, bool) {
	switch string(raw) {
	case "true", `"true"`:
		return true, true
	case "false", `"false"`:
		return false, true
	}
	return false, false
}

// ---- acks ----

// rawAck holds an acknowledgment's members, matched by exact name.
type rawAck struct {
	TransactionID, PartitionID, LeaseID, Status, ConsumerGroup, Error json.RawMessage
}

func (r *rawAck) member(k, v []byte) error {
	switch string(k) {
	case "transactionId":
		r.TransactionID = v
	case "partitionId":
		r.PartitionID = v
	case "leaseId":
		r.LeaseID = v
	case "status":
		r.Status = v
	case "consumerGroup":
		r.ConsumerGroup = v
	case "error":
		r.Error = v
	}
	return nil
}

func rawAckOf(m map[string]json.RawMessage) rawAck {
	return rawAck{TransactionID: m["transactionId"], PartitionID: m["partitionId"], LeaseID: m["leaseId"],
		Status: m["status"], ConsumerGroup: m["consumerGroup"], Error: m["error"]}
}

func (r *rawAck) item(where, txMsg, partMsg string) (fsm.AckItem, *apiError) {
	var it fsm.AckItem
	tx, ok := jsonString(r.TransactionID)
	if !ok {
		return it, badRequest(absentOr(r.TransactionID), where+"transactionId", "%s", txMsg)
	}
	part, ok := jsonscan.UnquoteBytes(r.PartitionID)
	if !ok {
		return it, badRequest(absentOr(r.PartitionID), where+"partitionId", "%s", partMsg)
	}
	if len(tx) > fsm.MaxNameBytes {
		return it, checkName(where+"transactionId", tx)
	}
	it.TxID = tx
	it.PartitionID, it.PartitionOK = parseUUID(part)
	lease, present, err := optBytes(r.LeaseID, where+"leaseId", "leaseId must be a string")
	if err != nil {
		return it, err
	}
	if present && len(lease) > 0 {
		// A lease id that is not a UUID keeps the zero id, which never
		// matches a live lease.
		if id, ok := parseUUID(lease); ok {
			it.LeaseID = id
		}
		it.HasLease = true
	}
	status, present, err := optBytes(r.Status, where+"status", "status must be a string")
	if err != nil {
		return it, err
	}
	it.Status = fsm.AckCompleted
	if present {
		// Only an unknown status needs its text: the apply quotes it.
		if it.Status = ackStatus(string(status)); it.Status == fsm.AckUnknown {
			it.StatusText = string(status)
		}
	}
	if it.Error, _, err = optString(r.Error, where+"error", "error must be a string"); err != nil {
		return it, err
	}
	return it, nil
}

func ackStatus(s string) uint8 {
	switch s {
	case "completed", "success":
		return fsm.AckCompleted
	case "failed":
		return fsm.AckFailed
	case "retry":
		return fsm.AckRetry
	case "dlq":
		return fsm.AckDLQ
	}
	return fsm.AckUnknown
}

func groupOf(raw json.RawMessage, field string) (string, *apiError) {
	g, _, err := optString(raw, field, "consumerGroup must be a string")
	if err != nil {
		return "", err
	}
	if g == "" {
		return fsm.QueueMode, nil
	}
	return g, checkName(field, g)
}

// parseAck reads POST /api/v1/ack.
func parseAck(body []byte) (*fsm.Ack, *apiError) {
	m, err := decodeObject(body, "")
	if err != nil {
		return nil, err
	}
	r := rawAckOf(m)
	it, err := r.item("", "transactionId is required", "partitionId is required to ensure message uniqueness")
	if err != nil {
		return nil, err
	}
	g, err := groupOf(r.ConsumerGroup, "consumerGroup")
	if err != nil {
		return nil, err
	}
	return &fsm.Ack{Group: g, Items: []fsm.AckItem{it}}, nil
}

// parseAckBatch reads POST /api/v1/ack/batch: consumerGroup only at the top level.
//
// It reads the body in one pass (jsonscan.Reader): the leader parses every
// ack of every consumer, and validating the body first and then walking
// what it validated read each acknowledgment three times. The answer is the
// same as a validation first would give (FuzzParseAckBatchOnePass): a
// syntax error anywhere outranks every other error, then a missing array,
// then the group, then the first bad acknowledgment; as with a map of the
// members, a member given twice counts as its last.
func parseAckBatch(body []byte, lim Limits) (*fsm.Ack, *apiError) {
	const (
		txMsg   = "Each acknowledgment must have a valid transactionId string"
		partMsg = "Each acknowledgment must have a valid partitionId string"
	)
	var (
		group json.RawMessage
		items []fsm.AckItem
	)
	w := itemWalk{field: "acknowledgments", limit: lim.MaxItems, notObject: func(i int) *apiError {
		return badRequest(codeInvalidField, fmt.Sprintf("acknowledgments[%d]", i), "Each acknowledgment must be an object")
	}}
	r := jsonscan.NewReader(body)
	err := r.Object(func(key []byte) error {
		var err error
		switch string(key) {
		case "consumerGroup":
			group, err = r.Raw()
		case w.field:
			items = make([]fsm.AckItem, 0, itemsHint(len(body), 128, lim.MaxItems))
			var ra rawAck
			err = readItems(r, &w, ra.member, func(i int) *apiError {
				it, e := ra.item("", txMsg, partMsg)
				if e != nil {
					// The common case needs no field path: build it only
					// for an error, by reading the item again with it.
					_, e = ra.item(fmt.Sprintf("acknowledgments[%d].", i), txMsg, partMsg)
				}
				items, ra = append(items, it), rawAck{}
				return e
			})
		}
		return err
	})
	if aerr := bodyError(r, err); aerr != nil {
		return nil, aerr
	}
	if !w.isArray {
		return nil, w.refusal()
	}
	g, aerr := groupOf(group, "consumerGroup")
	if aerr != nil {
		return nil, aerr
	}
	if aerr := w.refusal(); aerr != nil {
		return nil, aerr
	}
	return &fsm.Ack{Group: g, Items: items}, nil
}

// ---- transaction ----

// parseTransaction reads POST /api/v1/transaction. Shape errors of the
// whole request are 400s; an operation that cannot run (unknown type,
// invalid push item) fails the transaction inside a 200, as Queen does.
func parseTransaction(body []byte, lim Limits) (*fsm.Transaction, *apiError) {
	m, err := decodeObject(body, "")
	if err != nil {
		return nil, err
	}
	raw := m["operations"]
	if len(raw) == 0 || raw[0] != '[' {
		return nil, badRequest(absentOr(raw), "operations", "operations array required")
	}
	var ops []json.RawMessage
	if err := json.Unmarshal(raw, &ops); err != nil {
		return nil, badRequest(codeInvalidJSON, "operations", "Invalid JSON: %v", err)
	}
	if len(ops) == 0 {
		return nil, badRequest(codeMissingField, "operations", "operations array cannot be empty")
	}
	if len(ops) > lim.MaxItems {
		return nil, badRequest(codeLimit, "operations", "operations holds %d items; the limit is %d per request", len(ops), lim.MaxItems)
	}
	c := &fsm.Transaction{Ops: make([]fsm.TxOp, len(ops))}
	items := 0
	for i, raw := range ops {
		op, aerr := parseTxOp(raw, fmt.Sprintf("operations[%d]", i), lim)
		if aerr != nil {
			return nil, aerr
		}
		if items += len(op.Items); items > lim.MaxItems {
			return nil, badRequest(codeLimit, "operations", "the transaction pushes more than %d items; the limit is %d per request", lim.MaxItems, lim.MaxItems)
		}
		c.Ops[i] = op
	}
	return c, nil
}

// parseTxOp reads one operation. An operation that cannot run (unknown
// type, invalid item) becomes OpInvalid and fails the transaction inside a
// 200 (queen-api.md 4.15); a documented limit exceeded is a request-level
// 400, as on every other endpoint.
func parseTxOp(raw json.RawMessage, where string, lim Limits) (fsm.TxOp, *apiError) {
	invalid := func(msg string) fsm.TxOp { return fsm.TxOp{Kind: fsm.OpInvalid, Name: msg} }
	failed := func(err *apiError) (fsm.TxOp, *apiError) {
		if err.Code == codeLimit {
			return fsm.TxOp{}, err
		}
		return invalid(err.Message), nil
	}
	m, aerr := decodeObject(raw, where)
	if aerr != nil {
		return invalid(where + " must be an object"), nil
	}
	typ, _ := jsonString(m["type"])
	switch typ {
	case "push":
		if items, ok := m["items"]; ok && !isNull(items) {
			its, err := parsePushItems(items, where+".items", lim, true)
			if err != nil {
				return failed(err)
			}
			return fsm.TxOp{Kind: fsm.OpPush, Items: its}, nil
		}
		var it fsm.PushItem
		r := rawPushItemOf(m)
		if err := r.into(where, lim, true, &it); err != nil {
			return failed(err)
		}
		return fsm.TxOp{Kind: fsm.OpPush, Items: []fsm.PushItem{it}}, nil
	case "ack":
		r := rawAckOf(m)
		it, err := r.item(where+".", "transactionId is required", "partitionId is required to ensure message uniqueness")
		if err != nil {
			return failed(err)
		}
		g, err := groupOf(r.ConsumerGroup, where+".consumerGroup")
		if err != nil {
			return failed(err)
		}
		return fsm.TxOp{Kind: fsm.OpAck, Ack: it, Group: g}, nil
	}
	if typ == "" {
		return invalid(where + ".type is required"), nil
	}
	return invalid("Unknown operation type: " + typ), nil
}

// ---- lease extension ----

func parseExtend(body []byte, leaseID string) (*fsm.Extend, bool, *apiError) {
	m, err := decodeObject(body, "")
	if err != nil {
		return nil, false, err
	}
	c := &fsm.Extend{Seconds: 60}
	if raw := m["seconds"]; !isNull(raw) {
		v, ok := jsonInt(raw)
		if !ok || v <= 0 {
			return nil, false, badRequest(codeInvalidField, "seconds", "seconds must be a positive integer")
		}
		c.Seconds = v
	}
	id, ok := parseUUID(leaseID)
	c.LeaseID = id
	return c, ok, nil
}
