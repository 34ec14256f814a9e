package httpapi

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
)

// Table tests for the request decoders (queen-api.md 1.2, 3.4, 3.5, 3.7-3.10).

// wantAPIError fails unless err is a request-level error with these parts.
func wantAPIError(t *testing.T, err *apiError, status int, code, field, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %d %s %q at %q", status, code, msg, field)
	}
	if err.Status != status || err.Code != code || err.Field != field || err.Message != msg {
		t.Errorf("error {%d %s %q %q}, want {%d %s %q %q}", err.Status, err.Code, err.Field, err.Message,
			status, code, field, msg)
	}
}

func noAPIError(t *testing.T, err *apiError) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error {%d %s %q %q}", err.Status, err.Code, err.Field, err.Message)
	}
}

var name255, name256 = strings.Repeat("n", 255), strings.Repeat("n", 256)

// ---- body reading ----

func TestReadBody(t *testing.T) {
	// Both readers, with the length announced (Content-Length, which
	// sizes the pooled buffer) and without (chunked): the same answers.
	readers := map[string]func(r *http.Request, limit int64) ([]byte, *apiError){
		"readBody": readBody,
		"readBodyPooled": func(r *http.Request, limit int64) ([]byte, *apiError) {
			b, release, err := readBodyPooled(r, limit)
			out := append([]byte(nil), b...)
			release()
			return out, err
		},
	}
	for name, readFn := range readers {
		for _, announced := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/announced=%v", name, announced), func(t *testing.T) {
				read := func(body string, limit int64) ([]byte, *apiError) {
					r := httptest.NewRequest(http.MethodPost, "/api/v1/push", strings.NewReader(body))
					if !announced {
						r.ContentLength = -1
					}
					return readFn(r, limit)
				}
				_, err := read("", 100)
				wantAPIError(t, err, 400, "empty_body", "", "Empty request body")
				_, err = read(" \n\t ", 100)
				wantAPIError(t, err, 400, "empty_body", "", "Empty request body")
				_, err = read(strings.Repeat("x", 101), 100)
				wantAPIError(t, err, 413, "body_too_large", "", "Request body exceeds the limit of 100 bytes")
				_, err = read(strings.Repeat("x", 100000), 100)
				wantAPIError(t, err, 413, "body_too_large", "", "Request body exceeds the limit of 100 bytes")
				for _, n := range []int{1, 100, 5000} {
					want := strings.Repeat("y", n)
					b, err := read(want, 5000)
					noAPIError(t, err)
					if string(b) != want {
						t.Errorf("read %d bytes, want %d", len(b), n)
					}
				}
			})
		}
	}
}

func TestDecodeObject(t *testing.T) {
	for _, tc := range []struct {
		in, msg string
	}{
		{`[]`, "Invalid JSON: body must be an object"},
		{`null`, "Invalid JSON: body must be an object"},
		{`"x"`, "Invalid JSON: body must be an object"},
		{`17`, "Invalid JSON: body must be an object"},
		{`{`, "Invalid JSON: expected a member name at offset 1"},
		{`{"a":1} x`, "Invalid JSON: unexpected data after the value at offset 8"},
		{`not json`, "Invalid JSON: invalid literal at offset 0"},
	} {
		_, err := decodeObject([]byte(tc.in), "")
		wantAPIError(t, err, 400, "invalid_json", "", tc.msg)
	}
	m, err := decodeObject([]byte(`{"a": 1, "b": [1, 2]}`), "")
	noAPIError(t, err)
	if string(m["a"]) != "1" || string(m["b"]) != "[1, 2]" {
		t.Errorf("members %q", m)
	}
	_, err = decodeObject([]byte(`[1]`), "options")
	wantAPIError(t, err, 400, "invalid_json", "options", "Invalid JSON: options must be an object")
}

// ---- push ----

// parsePushBody decodes a push body the way handlePush does.
func parsePushBody(body string, lim Limits, allowData bool) ([]fsm.PushItem, *apiError) {
	m, err := decodeObject([]byte(body), "")
	if err != nil {
		return nil, err
	}
	return parsePushItems(m["items"], "items", lim, allowData)
}

func TestParsePushItemsValid(t *testing.T) {
	const trace = "01963a5e-8a7b-7c3d-9e1f-2a3b4c5d6e7f"
	traceID, _ := parseUUID(trace)
	for _, tc := range []struct {
		name      string
		body      string
		allowData bool
		queue     string
		partition string
		tx        string // "" means generated
		payload   string
		hasTrace  bool
	}{
		{name: "minimal", body: `{"items":[{"queue":"q"}]}`, queue: "q", partition: "Default", payload: "null"},
		{name: "payload null", body: `{"items":[{"queue":"q","payload":null}]}`, queue: "q", partition: "Default", payload: "null"},
		{name: "partition null", body: `{"items":[{"queue":"q","partition":null}]}`, queue: "q", partition: "Default", payload: "null"},
		{name: "empty partition stays", body: `{"items":[{"queue":"q","partition":""}]}`, queue: "q", partition: "", payload: "null"},
		{name: "empty queue", body: `{"items":[{"queue":""}]}`, queue: "", partition: "Default", payload: "null"},
		{name: "object payload verbatim", body: `{"items":[{"queue":"q","payload":{"b": 2,  "a":[1, 2]}}]}`,
			queue: "q", partition: "Default", payload: `{"b": 2,  "a":[1, 2]}`},
		{name: "array payload", body: `{"items":[{"queue":"q","payload":[1,"x",null]}]}`, queue: "q", partition: "Default", payload: `[1,"x",null]`},
		{name: "string payload", body: `{"items":[{"queue":"q","payload":"h\u00e9llo"}]}`, queue: "q", partition: "Default", payload: `"h\u00e9llo"`},
		{name: "number payload", body: `{"items":[{"queue":"q","payload":-1.5e3}]}`, queue: "q", partition: "Default", payload: `-1.5e3`},
		{name: "false payload", body: `{"items":[{"queue":"q","payload":false}]}`, queue: "q", partition: "Default", payload: `false`},
		{name: "tx kept", body: `{"items":[{"queue":"q","partition":"p","transactionId":"t-1"}]}`, queue: "q", partition: "p", tx: "t-1", payload: "null"},
		{name: "tx null generated", body: `{"items":[{"queue":"q","transactionId":null}]}`, queue: "q", partition: "Default", payload: "null"},
		{name: "tx empty generated", body: `{"items":[{"queue":"q","transactionId":""}]}`, queue: "q", partition: "Default", payload: "null"},
		{name: "trace", body: `{"items":[{"queue":"q","traceId":"` + trace + `"}]}`, queue: "q", partition: "Default", payload: "null", hasTrace: true},
		{name: "trace upper case", body: `{"items":[{"queue":"q","traceId":"` + strings.ToUpper(trace) + `"}]}`, queue: "q", partition: "Default", payload: "null", hasTrace: true},
		{name: "trace null", body: `{"items":[{"queue":"q","traceId":null}]}`, queue: "q", partition: "Default", payload: "null"},
		{name: "unknown and ignored fields", body: `{"items":[{"queue":"q","producerSub":"mallory","namespace":5,"task":[],"extra":{"x":1}}],"bufferMs":100,"bufferMax":5}`,
			queue: "q", partition: "Default", payload: "null"},
		{name: "names at the limit", body: `{"items":[{"queue":"` + name255 + `","partition":"` + name255 + `","transactionId":"` + name255 + `"}]}`,
			queue: name255, partition: name255, tx: name255, payload: "null"},
		{name: "escaped names", body: `{"items":[{"queue":"a\"b\\c\u00e9","partition":"p\/q"}]}`, queue: "a\"b\\c\u00e9", partition: "p/q", payload: "null"},
		{name: "data ignored for plain push", body: `{"items":[{"queue":"q","data":{"x":1}}]}`, queue: "q", partition: "Default", payload: "null"},
		{name: "data for transaction", allowData: true, body: `{"items":[{"queue":"q","data":{"x":1}}]}`, queue: "q", partition: "Default", payload: `{"x":1}`},
		{name: "payload wins over data", allowData: true, body: `{"items":[{"queue":"q","payload":2,"data":1}]}`, queue: "q", partition: "Default", payload: `2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items, err := parsePushBody(tc.body, DefaultLimits, tc.allowData)
			noAPIError(t, err)
			if len(items) != 1 {
				t.Fatalf("%d items", len(items))
			}
			it := items[0]
			if it.Queue != tc.queue || it.Partition != tc.partition || string(it.Payload) != tc.payload {
				t.Errorf("got queue %q partition %q payload %s", it.Queue, it.Partition, it.Payload)
			}
			if tc.tx != "" && it.TxID != tc.tx {
				t.Errorf("transactionId %q, want %q", it.TxID, tc.tx)
			}
			if tc.tx == "" {
				id, ok := parseUUID(it.TxID)
				if !ok || len(it.TxID) != 36 || id[6]>>4 != 7 || id[8]>>6 != 2 {
					t.Errorf("generated transactionId %q is not a UUIDv7", it.TxID)
				}
			}
			if it.HasTrace != tc.hasTrace || (tc.hasTrace && it.TraceID != traceID) {
				t.Errorf("trace %v %x", it.HasTrace, it.TraceID)
			}
			if it.Encrypted || it.ProducerSub != "" {
				t.Errorf("encrypted %v producerSub %q", it.Encrypted, it.ProducerSub)
			}
		})
	}
}

func TestParsePushItemsMany(t *testing.T) {
	items, err := parsePushBody(`{"items":[]}`, DefaultLimits, false)
	noAPIError(t, err)
	if len(items) != 0 {
		t.Errorf("%d items", len(items))
	}
	items, err = parsePushBody(`{"items":[{"queue":"a","payload":1},{"queue":"b","partition":"p","payload":2},{"queue":"a"}]}`, DefaultLimits, false)
	noAPIError(t, err)
	if len(items) != 3 || items[1].Queue != "b" || items[1].Partition != "p" || string(items[1].Payload) != "2" {
		t.Fatalf("items %+v", items)
	}
	if items[0].TxID == items[2].TxID {
		t.Errorf("generated transaction ids repeat: %q", items[0].TxID)
	}
}

func TestParsePushItemsErrors(t *testing.T) {
	small := DefaultLimits
	small.MaxItems, small.MaxPayloadBytes = 2, 10
	for _, tc := range []struct {
		name, body       string
		lim              Limits
		status           int
		code, field, msg string
	}{
		{"items missing", `{}`, DefaultLimits, 400, "missing_field", "items", "items array is required"},
		{"items null", `{"items":null}`, DefaultLimits, 400, "missing_field", "items", "items array is required"},
		{"items object", `{"items":{"queue":"q"}}`, DefaultLimits, 400, "invalid_field", "items", "items array is required"},
		{"items string", `{"items":"[]"}`, DefaultLimits, 400, "invalid_field", "items", "items array is required"},
		{"item not object", `{"items":[1]}`, DefaultLimits, 400, "invalid_field", "items[0]", "items[0] must be an object"},
		{"item null", `{"items":[{"queue":"q"},null]}`, DefaultLimits, 400, "invalid_field", "items[1]", "items[1] must be an object"},
		{"queue missing", `{"items":[{"payload":1}]}`, DefaultLimits, 400, "missing_field", "items[0].queue", "Queue must be a string"},
		{"queue null", `{"items":[{"queue":null}]}`, DefaultLimits, 400, "missing_field", "items[0].queue", "Queue must be a string"},
		{"queue number", `{"items":[{"queue":"ok"},{"queue":5}]}`, DefaultLimits, 400, "invalid_field", "items[1].queue", "Queue must be a string"},
		{"queue object", `{"items":[{"queue":{"name":"q"}}]}`, DefaultLimits, 400, "invalid_field", "items[0].queue", "Queue must be a string"},
		{"partition number", `{"items":[{"queue":"q","partition":1}]}`, DefaultLimits, 400, "invalid_field", "items[0].partition", "Partition must be a string"},
		{"partition bool", `{"items":[{"queue":"q","partition":false}]}`, DefaultLimits, 400, "invalid_field", "items[0].partition", "Partition must be a string"},
		{"tx number", `{"items":[{"queue":"q","transactionId":7}]}`, DefaultLimits, 400, "invalid_field", "items[0].transactionId", "TransactionId must be a string"},
		{"trace number", `{"items":[{"queue":"q","traceId":7}]}`, DefaultLimits, 400, "invalid_field", "items[0].traceId", "TraceId must be a string"},
		{"trace not uuid", `{"items":[{"queue":"q"},{"queue":"q","traceId":"abc"}]}`, DefaultLimits, 400, "invalid_field", "items[1].traceId", `TraceId must be a UUID, got "abc"`},
		{"trace empty", `{"items":[{"queue":"q","traceId":""}]}`, DefaultLimits, 400, "invalid_field", "items[0].traceId", `TraceId must be a UUID, got ""`},
		{"trace bad hyphens", `{"items":[{"queue":"q","traceId":"01963a5e8-a7b-7c3d-9e1f-2a3b4c5d6e7f"}]}`, DefaultLimits, 400, "invalid_field", "items[0].traceId", `TraceId must be a UUID, got "01963a5e8-a7b-7c3d-9e1f-2a3b4c5d6e7f"`},
		{"queue too long", `{"items":[{"queue":"` + name256 + `"}]}`, DefaultLimits, 400, "limit_exceeded", "items[0].queue", "items[0].queue is 256 bytes long; the limit is 255 bytes"},
		{"partition too long", `{"items":[{"queue":"q"},{"queue":"q","partition":"` + name256 + `"}]}`, DefaultLimits, 400, "limit_exceeded", "items[1].partition", "items[1].partition is 256 bytes long; the limit is 255 bytes"},
		{"tx too long", `{"items":[{"queue":"q","transactionId":"` + name256 + `"}]}`, DefaultLimits, 400, "limit_exceeded", "items[0].transactionId", "items[0].transactionId is 256 bytes long; the limit is 255 bytes"},
		{"multi-byte name too long", `{"items":[{"queue":"` + strings.Repeat("é", 128) + `"}]}`, DefaultLimits, 400, "limit_exceeded", "items[0].queue", "items[0].queue is 256 bytes long; the limit is 255 bytes"},
		{"too many items", `{"items":[{"queue":"q"},{"queue":"q"},{"queue":"q"}]}`, small, 400, "limit_exceeded", "items", "items holds more than 2 items; the limit is 2 per request"},
		{"payload too large", `{"items":[{"queue":"q","payload":"0123456789"}]}`, small, 400, "limit_exceeded", "items[0].payload", "payload is 12 bytes; the limit is 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parsePushBody(tc.body, tc.lim, false)
			wantAPIError(t, err, tc.status, tc.code, tc.field, tc.msg)
		})
	}
	// The payload limit is inclusive.
	small.MaxPayloadBytes = 12
	_, err := parsePushBody(`{"items":[{"queue":"q","payload":"0123456789"}]}`, small, false)
	noAPIError(t, err)
}

// ---- configure ----

func TestParseConfigureDefaults(t *testing.T) {
	for _, body := range []string{`{"queue":"q"}`, `{"queue":"q","options":null}`, `{"queue":"q","options":{}}`,
		`{"queue":"q","options":{"leaseTime":null,"retryLimit":null,"deadLetterQueue":null,"namespace":null}}`} {
		c, err := parseConfigure([]byte(body))
		noAPIError(t, err)
		want := fsm.Options{LeaseTime: 300, RetryLimit: 3, DeadLetterQueue: true, DLQAfterMaxRetries: true,
			DedupWindowSeconds: 3600, RetryDelay: 1000, TTL: 3600}
		if c.Queue != "q" || c.Namespace != "" || c.Task != "" || c.Options != want {
			t.Errorf("%s: got %+v", body, c)
		}
	}
}

func TestParseConfigureAllOptions(t *testing.T) {
	full := `"leaseTime":120,"retryLimit":5,"deadLetterQueue":false,"dlqAfterMaxRetries":false,
		"delayedProcessing":2,"windowBuffer":3,"retentionEnabled":true,"retentionSeconds":40,
		"completedRetentionSeconds":50,"maxWaitTimeSeconds":60,"minPopWaitTime":700,
		"encryptionEnabled":true,"dedupWindowSeconds":0,"priority":-4,"maxSize":9,"retryDelay":2000,"ttl":10`
	want := fsm.Options{LeaseTime: 120, RetryLimit: 5, DelayedProcessing: 2, WindowBuffer: 3, RetentionEnabled: true,
		RetentionSeconds: 40, CompletedRetentionSeconds: 50, MaxWaitTimeSeconds: 60, MinPopWaitTime: 700,
		EncryptionEnabled: true, DedupWindowSeconds: 0, Priority: -4, MaxSize: 9, RetryDelay: 2000, TTL: 10}
	for _, body := range []string{
		`{"queue":"orders.shipped","namespace":"orders","task":"shipped","options":{` + full + `}}`,
		`{"queue":"orders.shipped","options":{"namespace":"orders","task":"shipped",` + full + `}}`,
		`{"queue":"orders.shipped","namespace":"orders","task":"shipped",` + full + `}`,
		`{"queue":"orders.shipped","namespace":"orders","task":"shipped","options":null,` + full + `}`,
	} {
		c, err := parseConfigure([]byte(body))
		noAPIError(t, err)
		if c.Queue != "orders.shipped" || c.Namespace != "orders" || c.Task != "shipped" || c.Options != want {
			t.Errorf("%s:\n got %+v\nwant %+v", body, c, want)
		}
	}
}

func TestParseConfigureShapes(t *testing.T) {
	// Nested options win; top-level option keys are ignored when options is present.
	c, err := parseConfigure([]byte(`{"queue":"q","leaseTime":5,"options":{"retryLimit":1}}`))
	noAPIError(t, err)
	if c.Options.LeaseTime != 300 || c.Options.RetryLimit != 1 {
		t.Errorf("options %+v", c.Options)
	}
	// Tags inside options win over top-level ones; null falls back to the top level.
	c, err = parseConfigure([]byte(`{"queue":"q","namespace":"top","task":"top","options":{"namespace":"in","task":null}}`))
	noAPIError(t, err)
	if c.Namespace != "in" || c.Task != "top" {
		t.Errorf("namespace %q task %q", c.Namespace, c.Task)
	}
	// The empty string is a valid queue name; unknown keys are ignored.
	c, err = parseConfigure([]byte(`{"queue":"","foo":{"bar":1},"options":{"nope":[1],"leaseTime":7}}`))
	noAPIError(t, err)
	if c.Queue != "" || c.Options.LeaseTime != 7 {
		t.Errorf("got %+v", c)
	}
	c, err = parseConfigure([]byte(`{"queue":"` + name255 + `","namespace":"` + name255 + `","task":"` + name255 + `"}`))
	noAPIError(t, err)
	if c.Queue != name255 || c.Namespace != name255 || c.Task != name255 {
		t.Errorf("255-byte names not kept")
	}
}

func TestParseConfigureOptionValues(t *testing.T) {
	for _, tc := range []struct {
		opts string
		get  func(fsm.Options) any
		want any
	}{
		{`"leaseTime":"120"`, func(o fsm.Options) any { return o.LeaseTime }, int64(120)},
		{`"leaseTime":" 45 "`, func(o fsm.Options) any { return o.LeaseTime }, int64(45)},
		{`"leaseTime":120.0`, func(o fsm.Options) any { return o.LeaseTime }, int64(120)},
		{`"leaseTime":1e2`, func(o fsm.Options) any { return o.LeaseTime }, int64(100)},
		{`"leaseTime":0`, func(o fsm.Options) any { return o.LeaseTime }, int64(0)},
		{`"retryLimit":"0"`, func(o fsm.Options) any { return o.RetryLimit }, int64(0)},
		{`"dedupWindowSeconds":"600"`, func(o fsm.Options) any { return o.DedupWindowSeconds }, int64(600)},
		{`"deadLetterQueue":"false"`, func(o fsm.Options) any { return o.DeadLetterQueue }, false},
		{`"retentionEnabled":"true"`, func(o fsm.Options) any { return o.RetentionEnabled }, true},
		{`"encryptionEnabled":false`, func(o fsm.Options) any { return o.EncryptionEnabled }, false},
		{`"minPopWaitTime":-5`, func(o fsm.Options) any { return o.MinPopWaitTime }, int64(0)},
		{`"minPopWaitTime":"-5"`, func(o fsm.Options) any { return o.MinPopWaitTime }, int64(0)},
		{`"minPopWaitTime":60000`, func(o fsm.Options) any { return o.MinPopWaitTime }, int64(60000)},
		{`"minPopWaitTime":60001`, func(o fsm.Options) any { return o.MinPopWaitTime }, int64(60000)},
		{`"minPopWaitTime":"999999"`, func(o fsm.Options) any { return o.MinPopWaitTime }, int64(60000)},
		{`"priority":-3`, func(o fsm.Options) any { return o.Priority }, int64(-3)},
		{`"maxSize":"0"`, func(o fsm.Options) any { return o.MaxSize }, int64(0)},
		{`"retryDelay":1`, func(o fsm.Options) any { return o.RetryDelay }, int64(1)},
		{`"ttl":99`, func(o fsm.Options) any { return o.TTL }, int64(99)},
		// Legacy keys are echoed verbatim, negative values too (queen-api.md 3.4).
		{`"maxSize":-1`, func(o fsm.Options) any { return o.MaxSize }, int64(-1)},
		{`"retryDelay":"-250"`, func(o fsm.Options) any { return o.RetryDelay }, int64(-250)},
		{`"ttl":-60`, func(o fsm.Options) any { return o.TTL }, int64(-60)},
	} {
		for _, body := range []string{`{"queue":"q","options":{` + tc.opts + `}}`, `{"queue":"q",` + tc.opts + `}`} {
			c, err := parseConfigure([]byte(body))
			noAPIError(t, err)
			if got := tc.get(c.Options); got != tc.want {
				t.Errorf("%s: got %v, want %v", body, got, tc.want)
			}
		}
	}
}

func TestParseConfigureErrors(t *testing.T) {
	for _, tc := range []struct {
		body, code, field, msg string
	}{
		{`{}`, "missing_field", "queue", "queue is required"},
		{`{"queue":null}`, "missing_field", "queue", "queue is required"},
		{`{"queue":5}`, "invalid_field", "queue", "queue is required"},
		{`{"queue":["q"]}`, "invalid_field", "queue", "queue is required"},
		{`{"options":{"queue":"q"}}`, "missing_field", "queue", "queue is required"},
		{`[]`, "invalid_json", "", "Invalid JSON: body must be an object"},
		{`{"queue":"q"`, "invalid_json", "", "Invalid JSON: unexpected end of input in object at offset 12"},
		{`{"queue":"q","options":5}`, "invalid_json", "options", "Invalid JSON: options must be an object"},
		{`{"queue":"q","options":[]}`, "invalid_json", "options", "Invalid JSON: options must be an object"},
		{`{"queue":"` + name256 + `"}`, "limit_exceeded", "queue", "queue is 256 bytes long; the limit is 255 bytes"},
		{`{"queue":"q","namespace":"` + name256 + `"}`, "limit_exceeded", "namespace", "namespace is 256 bytes long; the limit is 255 bytes"},
		{`{"queue":"q","options":{"task":"` + name256 + `"}}`, "limit_exceeded", "options.task", "options.task is 256 bytes long; the limit is 255 bytes"},
		{`{"queue":"q","namespace":5}`, "invalid_field", "namespace", "namespace must be a string"},
		{`{"queue":"q","options":{"task":true}}`, "invalid_field", "options.task", "task must be a string"},
		{`{"queue":"q","options":{"leaseTime":1.5}}`, "invalid_field", "options.leaseTime", "leaseTime must be an integer"},
		{`{"queue":"q","leaseTime":1.5}`, "invalid_field", "leaseTime", "leaseTime must be an integer"},
		{`{"queue":"q","options":{"leaseTime":"1.5"}}`, "invalid_field", "options.leaseTime", "leaseTime must be an integer"},
		{`{"queue":"q","options":{"leaseTime":"abc"}}`, "invalid_field", "options.leaseTime", "leaseTime must be an integer"},
		{`{"queue":"q","options":{"leaseTime":""}}`, "invalid_field", "options.leaseTime", "leaseTime must be an integer"},
		{`{"queue":"q","options":{"leaseTime":true}}`, "invalid_field", "options.leaseTime", "leaseTime must be an integer"},
		{`{"queue":"q","options":{"leaseTime":[1]}}`, "invalid_field", "options.leaseTime", "leaseTime must be an integer"},
		{`{"queue":"q","options":{"leaseTime":1e300}}`, "invalid_field", "options.leaseTime", "leaseTime must be an integer"},
		{`{"queue":"q","options":{"retryLimit":{"n":1}}}`, "invalid_field", "options.retryLimit", "retryLimit must be an integer"},
		{`{"queue":"q","options":{"leaseTime":-1}}`, "invalid_field", "options.leaseTime", "leaseTime must not be negative, got -1"},
		{`{"queue":"q","options":{"delayedProcessing":"-2"}}`, "invalid_field", "options.delayedProcessing", "delayedProcessing must not be negative, got -2"},
		{`{"queue":"q","windowBuffer":-3}`, "invalid_field", "windowBuffer", "windowBuffer must not be negative, got -3"},
		{`{"queue":"q","options":{"retentionSeconds":-1}}`, "invalid_field", "options.retentionSeconds", "retentionSeconds must not be negative, got -1"},
		{`{"queue":"q","options":{"completedRetentionSeconds":-1}}`, "invalid_field", "options.completedRetentionSeconds", "completedRetentionSeconds must not be negative, got -1"},
		{`{"queue":"q","options":{"maxWaitTimeSeconds":-1}}`, "invalid_field", "options.maxWaitTimeSeconds", "maxWaitTimeSeconds must not be negative, got -1"},
		{`{"queue":"q","options":{"dedupWindowSeconds":-1}}`, "invalid_field", "options.dedupWindowSeconds", "dedupWindowSeconds must not be negative, got -1"},
		{`{"queue":"q","options":{"retryLimit":-1}}`, "invalid_field", "options.retryLimit", "retryLimit must not be negative, got -1"},
		{`{"queue":"q","options":{"deadLetterQueue":1}}`, "invalid_field", "options.deadLetterQueue", "deadLetterQueue must be a boolean"},
		{`{"queue":"q","options":{"dlqAfterMaxRetries":"yes"}}`, "invalid_field", "options.dlqAfterMaxRetries", "dlqAfterMaxRetries must be a boolean"},
		{`{"queue":"q","options":{"retentionEnabled":"TRUE"}}`, "invalid_field", "options.retentionEnabled", "retentionEnabled must be a boolean"},
		{`{"queue":"q","encryptionEnabled":0}`, "invalid_field", "encryptionEnabled", "encryptionEnabled must be a boolean"},
	} {
		t.Run(tc.body[:min(len(tc.body), 60)], func(t *testing.T) {
			c, err := parseConfigure([]byte(tc.body))
			if c != nil {
				t.Errorf("returned a command with an error: %+v", c)
			}
			wantAPIError(t, err, 400, tc.code, tc.field, tc.msg)
		})
	}
}

// ---- scalar helpers ----

func TestJSONInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{`0`, 0, true}, {`5`, 5, true}, {`-5`, -5, true}, {`-0`, 0, true},
		{`5.0`, 5, true}, {`1e3`, 1000, true}, {`1E3`, 1000, true}, {`2.5e1`, 25, true},
		{`9223372036854775807`, 9223372036854775807, true}, {`-9223372036854775808`, -9223372036854775808, true},
		{`9007199254740992.0`, 9007199254740992, true},
		{`"5"`, 5, true}, {`"-5"`, -5, true}, {`" 7 "`, 7, true}, {`"\u0035"`, 5, true}, {`"5.0"`, 5, true},
		{`5.5`, 0, false}, {`-0.1`, 0, false}, {`1e-3`, 0, false}, {`1e300`, 0, false},
		{`9223372036854775808`, 0, false}, {`18446744073709551616`, 0, false},
		{`"5.5"`, 0, false}, {`""`, 0, false}, {`"abc"`, 0, false}, {`"5x"`, 0, false}, {`"NaN"`, 0, false}, {`"Inf"`, 0, false},
		{`true`, 0, false}, {`false`, 0, false}, {`null`, 0, false}, {`[1]`, 0, false}, {`{}`, 0, false}, {``, 0, false},
	} {
		got, ok := jsonInt(json.RawMessage(tc.in))
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("jsonInt(%s) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestJSONBool(t *testing.T) {
	for _, tc := range []struct {
		in       string
		want, ok bool
	}{
		{`true`, true, true}, {`false`, false, true}, {`"true"`, true, true}, {`"false"`, false, true},
		{`1`, false, false}, {`0`, false, false}, {`"1"`, false, false}, {`"True"`, false, false},
		{`"yes"`, false, false}, {`null`, false, false}, {`""`, false, false}, {`[true]`, false, false}, {``, false, false},
	} {
		got, ok := jsonBool(json.RawMessage(tc.in))
		if ok != tc.ok || got != tc.want {
			t.Errorf("jsonBool(%s) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestJSONString(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{`"abc"`, "abc", true}, {`""`, "", true}, {`"a\"b"`, `a"b`, true}, {`"\u00e9"`, "é", true},
		{`"é"`, "é", true}, {`"a\/b"`, "a/b", true}, {`"\n"`, "\n", true},
		{`5`, "", false}, {`null`, "", false}, {`true`, "", false}, {`["a"]`, "", false}, {`{"a":"b"}`, "", false}, {``, "", false},
	} {
		got, ok := jsonString(json.RawMessage(tc.in))
		if ok != tc.ok || got != tc.want {
			t.Errorf("jsonString(%s) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestUUIDRoundTrip(t *testing.T) {
	for i := 0; i < 200; i++ {
		var id [16]byte
		rand.Read(id[:])
		s := formatUUID(id)
		if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' || strings.ToLower(s) != s {
			t.Fatalf("formatUUID(%x) = %q", id, s)
		}
		for _, form := range []string{s, strings.ToUpper(s), strings.ReplaceAll(s, "-", "")} {
			back, ok := parseUUID(form)
			if !ok || back != id {
				t.Fatalf("parseUUID(%q) = %x, %v; want %x", form, back, ok, id)
			}
			if back, ok := parseUUID([]byte(form)); !ok || back != id {
				t.Fatalf("parseUUID([]byte(%q)) = %x, %v; want %x", form, back, ok, id)
			}
		}
	}
	if got := formatUUID([16]byte{}); got != "00000000-0000-0000-0000-000000000000" {
		t.Errorf("zero uuid %q", got)
	}
	for _, bad := range []string{"", "x", "01963a5e-8a7b-7c3d-9e1f-2a3b4c5d6e7", "01963a5e-8a7b-7c3d-9e1f-2a3b4c5d6e7f0",
		"01963a5e_8a7b_7c3d_9e1f_2a3b4c5d6e7f", "01963a5e-8a7b-7c3d-9e1f-2a3b4c5d6e7g", "g1963a5e8a7b7c3d9e1f2a3b4c5d6e7f",
		"{1963a5e-8a7b-7c3d-9e1f-2a3b4c5d6e7f}", "01963a5e8-a7b-7c3d-9e1f-2a3b4c5d6e7f", "01963a5e-8a7b-7c3d-9e1f2-a3b4c5d6e7f"} {
		if _, ok := parseUUID(bad); ok {
			t.Errorf("parseUUID(%q) accepted", bad)
		}
		if _, ok := parseUUID([]byte(bad)); ok {
			t.Errorf("parseUUID([]byte(%q)) accepted", bad)
		}
	}
	a, b := newUUIDv7(), newUUIDv7()
	for _, s := range []string{a, b} {
		id, ok := parseUUID(s)
		if !ok || id[6]>>4 != 7 || id[8]>>6 != 2 || formatUUID(id) != s {
			t.Errorf("newUUIDv7 %q is not a canonical UUIDv7", s)
		}
	}
	if a == b {
		t.Errorf("newUUIDv7 repeated %q", a)
	}
}

// ---- acks ----

func TestParseAckValid(t *testing.T) {
	const pid, lid = "6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09", "01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7"
	pidB, _ := parseUUID(pid)
	lidB, _ := parseUUID(lid)
	c, err := parseAck([]byte(`{"transactionId":"t-1","partitionId":"` + pid + `","leaseId":"` + lid +
		`","status":"failed","consumerGroup":"billing","error":"schema mismatch","unknown":[1]}`))
	noAPIError(t, err)
	want := fsm.AckItem{TxID: "t-1", PartitionID: pidB, PartitionOK: true, LeaseID: lidB, HasLease: true,
		Status: fsm.AckFailed, Error: "schema mismatch"}
	if c.Group != "billing" || len(c.Items) != 1 || c.Items[0] != want {
		t.Errorf("got %+v", c)
	}
	// Defaults, and null treated as absent (the JavaScript client sends "error": null).
	for _, body := range []string{
		`{"transactionId":"t","partitionId":"` + pid + `"}`,
		`{"transactionId":"t","partitionId":"` + pid + `","leaseId":null,"status":null,"consumerGroup":null,"error":null}`,
		`{"transactionId":"t","partitionId":"` + pid + `","leaseId":"","consumerGroup":""}`,
		`{"transactionId":"t","partitionId":"` + pid + `","consumerGroup":"__QUEUE_MODE__"}`,
	} {
		c, err := parseAck([]byte(body))
		noAPIError(t, err)
		want := fsm.AckItem{TxID: "t", PartitionID: pidB, PartitionOK: true, Status: fsm.AckCompleted}
		if c.Group != fsm.QueueMode || len(c.Items) != 1 || c.Items[0] != want {
			t.Errorf("%s: got %+v", body, c)
		}
	}
	// A partition id or lease id that is not a UUID is a per-item outcome, not a 400.
	c, err = parseAck([]byte(`{"transactionId":"t","partitionId":"not-a-uuid","leaseId":"not-a-lease"}`))
	noAPIError(t, err)
	if it := c.Items[0]; it.PartitionOK || !it.HasLease || it.LeaseID != ([16]byte{}) {
		t.Errorf("got %+v", it)
	}
	for status, code := range map[string]uint8{"completed": fsm.AckCompleted, "success": fsm.AckCompleted,
		"failed": fsm.AckFailed, "retry": fsm.AckRetry, "dlq": fsm.AckDLQ, "Completed": fsm.AckUnknown, "weird": fsm.AckUnknown, "": fsm.AckUnknown} {
		c, err := parseAck([]byte(`{"transactionId":"t","partitionId":"` + pid + `","status":"` + status + `"}`))
		noAPIError(t, err)
		// Only an unknown status keeps its text: the apply quotes it.
		text := ""
		if code == fsm.AckUnknown {
			text = status
		}
		if c.Items[0].Status != code || c.Items[0].StatusText != text {
			t.Errorf("status %q: got %d %q", status, c.Items[0].Status, c.Items[0].StatusText)
		}
	}
	c, err = parseAck([]byte(`{"transactionId":"` + name255 + `","partitionId":"x","consumerGroup":"` + name255 + `"}`))
	noAPIError(t, err)
	if c.Group != name255 || c.Items[0].TxID != name255 {
		t.Errorf("255-byte names not kept")
	}
}

func TestParseAckErrors(t *testing.T) {
	const pid = "6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09"
	for _, tc := range []struct {
		body, code, field, msg string
	}{
		{`{}`, "missing_field", "transactionId", "transactionId is required"},
		{`{"partitionId":"` + pid + `"}`, "missing_field", "transactionId", "transactionId is required"},
		{`{"transactionId":null,"partitionId":"` + pid + `"}`, "missing_field", "transactionId", "transactionId is required"},
		{`{"transactionId":5,"partitionId":"` + pid + `"}`, "invalid_field", "transactionId", "transactionId is required"},
		{`{"transactionId":"t"}`, "missing_field", "partitionId", "partitionId is required to ensure message uniqueness"},
		{`{"transactionId":"t","partitionId":null}`, "missing_field", "partitionId", "partitionId is required to ensure message uniqueness"},
		{`{"transactionId":"t","partitionId":7}`, "invalid_field", "partitionId", "partitionId is required to ensure message uniqueness"},
		{`{"transactionId":"t","partitionId":"` + pid + `","status":1}`, "invalid_field", "status", "status must be a string"},
		{`{"transactionId":"t","partitionId":"` + pid + `","leaseId":1}`, "invalid_field", "leaseId", "leaseId must be a string"},
		{`{"transactionId":"t","partitionId":"` + pid + `","error":{"m":1}}`, "invalid_field", "error", "error must be a string"},
		{`{"transactionId":"t","partitionId":"` + pid + `","consumerGroup":1}`, "invalid_field", "consumerGroup", "consumerGroup must be a string"},
		{`{"transactionId":"` + name256 + `","partitionId":"` + pid + `"}`, "limit_exceeded", "transactionId", "transactionId is 256 bytes long; the limit is 255 bytes"},
		{`{"transactionId":"t","partitionId":"` + pid + `","consumerGroup":"` + name256 + `"}`, "limit_exceeded", "consumerGroup", "consumerGroup is 256 bytes long; the limit is 255 bytes"},
		{`[{"transactionId":"t","partitionId":"` + pid + `"}]`, "invalid_json", "", "Invalid JSON: body must be an object"},
		{`{"transactionId":"t",`, "invalid_json", "", "Invalid JSON: expected a member name at offset 21"},
	} {
		t.Run(tc.body[:min(len(tc.body), 60)], func(t *testing.T) {
			_, err := parseAck([]byte(tc.body))
			wantAPIError(t, err, 400, tc.code, tc.field, tc.msg)
		})
	}
}

func TestParseAckBatch(t *testing.T) {
	const pid = "6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09"
	c, err := parseAckBatch([]byte(`{"consumerGroup":"billing","acknowledgments":[
		{"transactionId":"t-1","partitionId":"`+pid+`","status":"completed","consumerGroup":"other"},
		{"transactionId":"t-2","partitionId":"`+pid+`","status":"failed","error":"boom","leaseId":null}]}`), DefaultLimits)
	noAPIError(t, err)
	if c.Group != "billing" || len(c.Items) != 2 || c.Items[0].TxID != "t-1" || c.Items[1].Status != fsm.AckFailed ||
		c.Items[1].Error != "boom" || !c.Items[0].PartitionOK {
		t.Errorf("got %+v", c)
	}
	// consumerGroup is read only at the top level: a per-item group is ignored.
	c, err = parseAckBatch([]byte(`{"acknowledgments":[{"transactionId":"t","partitionId":"`+pid+`","consumerGroup":"g"}]}`), DefaultLimits)
	noAPIError(t, err)
	if c.Group != fsm.QueueMode {
		t.Errorf("group %q", c.Group)
	}
	c, err = parseAckBatch([]byte(`{"acknowledgments":[],"consumerGroup":null}`), DefaultLimits)
	noAPIError(t, err)
	if len(c.Items) != 0 || c.Group != fsm.QueueMode {
		t.Errorf("got %+v", c)
	}
}

func TestParseAckBatchErrors(t *testing.T) {
	const pid = "6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09"
	ok := `{"transactionId":"t","partitionId":"` + pid + `"}`
	small := DefaultLimits
	small.MaxItems = 1
	for _, tc := range []struct {
		body             string
		lim              Limits
		code, field, msg string
	}{
		{`{}`, DefaultLimits, "missing_field", "acknowledgments", "acknowledgments array is required"},
		{`{"acknowledgments":null}`, DefaultLimits, "missing_field", "acknowledgments", "acknowledgments array is required"},
		{`{"acknowledgments":{}}`, DefaultLimits, "invalid_field", "acknowledgments", "acknowledgments array is required"},
		{`{"acknowledgments":[` + ok + `,{"partitionId":"` + pid + `"}]}`, DefaultLimits, "missing_field", "acknowledgments[1].transactionId", "Each acknowledgment must have a valid transactionId string"},
		{`{"acknowledgments":[{"transactionId":5,"partitionId":"` + pid + `"}]}`, DefaultLimits, "invalid_field", "acknowledgments[0].transactionId", "Each acknowledgment must have a valid transactionId string"},
		{`{"acknowledgments":[{"transactionId":"t"}]}`, DefaultLimits, "missing_field", "acknowledgments[0].partitionId", "Each acknowledgment must have a valid partitionId string"},
		{`{"acknowledgments":[{"transactionId":"t","partitionId":null}]}`, DefaultLimits, "missing_field", "acknowledgments[0].partitionId", "Each acknowledgment must have a valid partitionId string"},
		{`{"acknowledgments":[` + ok + `,"t-2"]}`, DefaultLimits, "invalid_field", "acknowledgments[1]", "Each acknowledgment must be an object"},
		{`{"acknowledgments":[null]}`, DefaultLimits, "invalid_field", "acknowledgments[0]", "Each acknowledgment must be an object"},
		{`{"acknowledgments":[{"transactionId":"t","partitionId":"` + pid + `","status":false}]}`, DefaultLimits, "invalid_field", "acknowledgments[0].status", "status must be a string"},
		{`{"acknowledgments":[{"transactionId":"` + name256 + `","partitionId":"` + pid + `"}]}`, DefaultLimits, "limit_exceeded", "acknowledgments[0].transactionId", "acknowledgments[0].transactionId is 256 bytes long; the limit is 255 bytes"},
		{`{"consumerGroup":5,"acknowledgments":[]}`, DefaultLimits, "invalid_field", "consumerGroup", "consumerGroup must be a string"},
		{`{"consumerGroup":"` + name256 + `","acknowledgments":[]}`, DefaultLimits, "limit_exceeded", "consumerGroup", "consumerGroup is 256 bytes long; the limit is 255 bytes"},
		{`{"acknowledgments":[` + ok + `,` + ok + `]}`, small, "limit_exceeded", "acknowledgments", "acknowledgments holds more than 1 items; the limit is 1 per request"},
		{`[]`, DefaultLimits, "invalid_json", "", "Invalid JSON: body must be an object"},
	} {
		t.Run(tc.body[:min(len(tc.body), 60)], func(t *testing.T) {
			_, err := parseAckBatch([]byte(tc.body), tc.lim)
			wantAPIError(t, err, 400, tc.code, tc.field, tc.msg)
		})
	}
}

// ---- transaction ----

func TestParseTransaction(t *testing.T) {
	const pid = "6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09"
	pidB, _ := parseUUID(pid)
	c, err := parseTransaction([]byte(`{
		"operations": [
			{"type": "ack", "transactionId": "order-7", "partitionId": "`+pid+`", "status": "completed", "consumerGroup": "billing"},
			{"type": "push", "items": [
				{"queue": "invoices", "partition": "customer-42", "payload": {"orderId": 7}, "transactionId": "inv-7"},
				{"queue": "invoices", "data": {"orderId": 8}}]},
			{"type": "push", "queue": "flat", "payload": [1]},
			{"type": "push", "queue": "flat", "partition": "p", "data": "d"},
			{"type": "ack", "transactionId": "t", "partitionId": "`+pid+`", "consumerGroup": null, "error": null}
		],
		"requiredLeases": ["01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7"]
	}`), DefaultLimits)
	noAPIError(t, err)
	if len(c.Ops) != 5 {
		t.Fatalf("%d ops", len(c.Ops))
	}
	ack := c.Ops[0]
	if ack.Kind != fsm.OpAck || ack.Group != "billing" || ack.Ack.TxID != "order-7" || ack.Ack.PartitionID != pidB || ack.Ack.Status != fsm.AckCompleted {
		t.Errorf("op 0: %+v", ack)
	}
	push := c.Ops[1]
	if push.Kind != fsm.OpPush || len(push.Items) != 2 || push.Items[0].Partition != "customer-42" || push.Items[0].TxID != "inv-7" ||
		string(push.Items[0].Payload) != `{"orderId": 7}` || push.Items[1].Partition != "Default" || string(push.Items[1].Payload) != `{"orderId": 8}` {
		t.Errorf("op 1: %+v", push)
	}
	if op := c.Ops[2]; op.Kind != fsm.OpPush || len(op.Items) != 1 || op.Items[0].Queue != "flat" || op.Items[0].Partition != "Default" || string(op.Items[0].Payload) != "[1]" {
		t.Errorf("op 2: %+v", op)
	}
	if op := c.Ops[3]; op.Kind != fsm.OpPush || op.Items[0].Partition != "p" || string(op.Items[0].Payload) != `"d"` {
		t.Errorf("op 3: %+v", op)
	}
	if op := c.Ops[4]; op.Kind != fsm.OpAck || op.Group != fsm.QueueMode || op.Ack.Status != fsm.AckCompleted {
		t.Errorf("op 4: %+v", op)
	}
	// An operation that cannot run fails the transaction (inside a 200), it is not a 400.
	for _, tc := range []struct{ op, name string }{
		{`5`, "operations[0] must be an object"},
		{`{}`, "operations[0].type is required"},
		{`{"type":5}`, "operations[0].type is required"},
		{`{"type":"delete"}`, "Unknown operation type: delete"},
		{`{"type":"PUSH","queue":"q"}`, "Unknown operation type: PUSH"},
		{`{"type":"push"}`, "Queue must be a string"},
		{`{"type":"push","items":[{"queue":1}]}`, "Queue must be a string"},
		{`{"type":"push","items":"x"}`, "items array is required"},
		{`{"type":"push","queue":"q","traceId":"nope"}`, `TraceId must be a UUID, got "nope"`},
		{`{"type":"ack","partitionId":"` + pid + `"}`, "transactionId is required"},
		{`{"type":"ack","transactionId":"t"}`, "partitionId is required to ensure message uniqueness"},
		{`{"type":"ack","transactionId":"t","partitionId":"` + pid + `","consumerGroup":4}`, "consumerGroup must be a string"},
	} {
		c, err := parseTransaction([]byte(`{"operations":[`+tc.op+`]}`), DefaultLimits)
		noAPIError(t, err)
		if len(c.Ops) != 1 || c.Ops[0].Kind != fsm.OpInvalid || c.Ops[0].Name != tc.name {
			t.Errorf("%s: got %+v, want invalid %q", tc.op, c.Ops, tc.name)
		}
	}
}

func TestParseTransactionErrors(t *testing.T) {
	small := DefaultLimits
	small.MaxItems = 1
	for _, tc := range []struct {
		body             string
		lim              Limits
		code, field, msg string
	}{
		{`{}`, DefaultLimits, "missing_field", "operations", "operations array required"},
		{`{"operations":null}`, DefaultLimits, "missing_field", "operations", "operations array required"},
		{`{"operations":{"type":"push"}}`, DefaultLimits, "invalid_field", "operations", "operations array required"},
		{`{"operations":[]}`, DefaultLimits, "missing_field", "operations", "operations array cannot be empty"},
		{`{"operations":[{"type":"ack"},{"type":"ack"}]}`, small, "limit_exceeded", "operations", "operations holds 2 items; the limit is 1 per request"},
		{`[]`, DefaultLimits, "invalid_json", "", "Invalid JSON: body must be an object"},
	} {
		_, err := parseTransaction([]byte(tc.body), tc.lim)
		wantAPIError(t, err, 400, tc.code, tc.field, tc.msg)
	}
}

// ---- lease extension ----

func TestParseExtend(t *testing.T) {
	const lid = "01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7"
	lidB, _ := parseUUID(lid)
	for body, secs := range map[string]int64{`{}`: 60, `{"seconds":null}`: 60, `{"seconds":120}`: 120,
		`{"seconds":"30"}`: 30, `{"seconds":1,"other":true}`: 1} {
		c, ok, err := parseExtend([]byte(body), lid)
		noAPIError(t, err)
		if !ok || c.Seconds != secs || c.LeaseID != lidB {
			t.Errorf("%s: got %+v %v", body, c, ok)
		}
	}
	_, ok, err := parseExtend([]byte(`{}`), "not-a-lease")
	noAPIError(t, err)
	if ok {
		t.Errorf("a non-UUID lease id was accepted as valid")
	}
	for _, body := range []string{`{"seconds":0}`, `{"seconds":-5}`, `{"seconds":1.5}`, `{"seconds":"x"}`, `{"seconds":true}`} {
		_, _, err := parseExtend([]byte(body), lid)
		wantAPIError(t, err, 400, "invalid_field", "seconds", "seconds must be a positive integer")
	}
	_, _, err = parseExtend([]byte(`[]`), lid)
	wantAPIError(t, err, 400, "invalid_json", "", "Invalid JSON: body must be an object")
}

// ---- pop parameters ----

// A long-poll's timeout (queen-api.md 3.6): milliseconds, the server's
// default when absent or unusable, and at most maxPopTimeout (the README's
// Limits table), which keeps it inside a time.Duration.
func TestParsePopTimeout(t *testing.T) {
	s := &Server{cfg: Config{DefaultPopTimeout: 30 * time.Second, Limits: DefaultLimits}}
	for query, want := range map[string]time.Duration{
		"":                            30 * time.Second,
		"timeout=0":                   0,
		"timeout=1500":                1500 * time.Millisecond,
		"timeout=-1":                  30 * time.Second,
		"timeout=999999":              999999 * time.Millisecond,
		"timeout=3600001":             maxPopTimeout,
		"timeout=9000000000000000000": maxPopTimeout,
	} {
		p, aerr, ok := s.parsePop(httptest.NewRequest(http.MethodGet, "/api/v1/pop/queue/q?wait=true&"+query, nil), fsm.ScopeWildcard)
		noAPIError(t, aerr)
		if !ok || p.timeout != want {
			t.Errorf("%q: timeout %v (ok %v), want %v", query, p.timeout, ok, want)
		}
	}
}

// ---- error body ----

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	writeError(rec, badRequest(codeInvalidField, "items[3].traceId", "TraceId must be a UUID, got %q", "x"))
	if rec.Code != 400 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d content type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var body map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if len(body) != 3 || body["error"] != `TraceId must be a UUID, got "x"` || body["code"] != "invalid_field" || body["field"] != "items[3].traceId" {
		t.Errorf("body %s", rec.Body.Bytes())
	}
	rec = httptest.NewRecorder()
	writeError(rec, badRequest(codeEmptyBody, "", "Empty request body"))
	if !bytes.Equal(bytes.TrimSpace(rec.Body.Bytes()), []byte(`{"code":"empty_body","error":"Empty request body"}`)) {
		t.Errorf("body %s", rec.Body.Bytes())
	}
}

func TestItemsHint(t *testing.T) {
	for _, tc := range []struct{ n, per, limit, want int }{
		{0, 256, 1000, 1},         // an empty body still gets room for one
		{30_000, 256, 1000, 118},  // a push of 100 benchmark messages
		{15_000, 128, 1000, 118},  // their acknowledgment
		{1 << 20, 256, 1000, 128}, // one big payload: no room for thousands
		{30_000, 256, 10, 10},     // never past the item limit
		{30_000, 256, 0, 1},       // nor below one
	} {
		if got := itemsHint(tc.n, tc.per, tc.limit); got != tc.want {
			t.Errorf("itemsHint(%d, %d, %d) = %d, want %d", tc.n, tc.per, tc.limit, got, tc.want)
		}
	}
}
