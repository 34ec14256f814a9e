package httpapi_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crownmq/crown/httpapi"
)

// End-to-end tests through the real stack (HTTP, Raft over TCP, bbolt),
// asserting the wire contract of queen-api.md.

var (
	uuidRE   = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	microsRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)
	millisRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	hex64RE  = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

func wantUUID(t testing.TB, what string, v any) string {
	t.Helper()
	s, _ := v.(string)
	if !uuidRE.MatchString(s) {
		t.Errorf("%s = %v, want a lowercase hyphenated UUID", what, v)
	}
	return s
}

// push posts items and returns the result array (status must be 201).
func (s *stack) push(items ...obj) arr {
	s.t.Helper()
	r := s.post("/api/v1/push", obj{"items": items})
	if r.Status != http.StatusCreated {
		s.t.Fatalf("push: status %d body %s", r.Status, r.Raw)
	}
	return asArr(s.t, r.Body)
}

// configure posts a configure body and returns the answer (status must be 200).
func (s *stack) configure(body obj) obj {
	s.t.Helper()
	r := s.post("/api/v1/configure", body)
	if r.Status != http.StatusOK {
		s.t.Fatalf("configure: status %d body %s", r.Status, r.Raw)
	}
	return asObj(s.t, r.Body)
}

// pop GETs a pop path; it returns the decoded object, or nil for a 204.
func (s *stack) pop(path string) obj {
	s.t.Helper()
	r := s.do(http.MethodGet, path, nil)
	switch r.Status {
	case http.StatusNoContent:
		if len(r.Raw) != 0 {
			s.t.Errorf("204 with a body: %q", r.Raw)
		}
		return nil
	case http.StatusOK:
		return asObj(s.t, r.Body)
	}
	s.t.Fatalf("pop %s: status %d body %s", path, r.Status, r.Raw)
	return nil
}

// popOne pops and requires exactly one message, which it returns.
func (s *stack) popOne(path string) obj {
	s.t.Helper()
	p := s.pop(path)
	if p == nil {
		s.t.Fatalf("pop %s: 204, want a message", path)
	}
	msgs := asArr(s.t, p["messages"])
	if len(msgs) != 1 {
		s.t.Fatalf("pop %s: %d messages, want 1", path, len(msgs))
	}
	return asObj(s.t, msgs[0])
}

// ack posts a single ack and returns its one result.
func (s *stack) ack(body obj) obj {
	s.t.Helper()
	r := s.post("/api/v1/ack", body)
	if r.Status != http.StatusOK {
		s.t.Fatalf("ack: status %d body %s", r.Status, r.Raw)
	}
	res := asArr(s.t, r.Body)
	if len(res) != 1 {
		s.t.Fatalf("ack: %d results, want exactly 1: %s", len(res), r.Raw)
	}
	return asObj(s.t, res[0])
}

// queueExists reports whether GET /api/v1/resources/queues/{queue} finds it.
func (s *stack) queueExists(name string) bool {
	s.t.Helper()
	r := s.do(http.MethodGet, "/api/v1/resources/queues/"+url.PathEscape(name), nil)
	switch r.Status {
	case http.StatusOK:
		return true
	case http.StatusNotFound:
		if got := asObj(s.t, r.Body)["error"]; got != "Queue not found" {
			s.t.Errorf("404 error %v, want \"Queue not found\"", got)
		}
		return false
	}
	s.t.Fatalf("queue detail: status %d body %s", r.Status, r.Raw)
	return false
}

// ---- request-level errors ----

var postEndpoints = []string{"/api/v1/configure", "/api/v1/push", "/api/v1/ack", "/api/v1/ack/batch",
	"/api/v1/transaction", "/api/v1/lease/01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7/extend"}

func TestHTTPEmptyBody(t *testing.T) {
	s := newStack(t)
	for _, path := range postEndpoints {
		for _, body := range [][]byte{nil, {}, []byte("  \n ")} {
			r := s.do(http.MethodPost, path, body)
			wantError(t, r, http.StatusBadRequest, "empty_body", "", "Empty request body")
		}
	}
}

func TestHTTPInvalidJSON(t *testing.T) {
	s := newStack(t)
	for _, path := range postEndpoints {
		for _, body := range []string{`{`, `not json`, `{"items": [}`, `{"a":1} trailing`, `[]`, `"str"`, `null`} {
			r := s.post(path, body)
			if r.Status != http.StatusBadRequest {
				t.Errorf("%s %q: status %d, want 400", path, body, r.Status)
				continue
			}
			o := asObj(t, r.Body)
			if msg, _ := o["error"].(string); !strings.HasPrefix(msg, "Invalid JSON") {
				t.Errorf("%s %q: error %q does not start with \"Invalid JSON\"", path, body, msg)
			}
			if o["code"] != "invalid_json" {
				t.Errorf("%s %q: code %v", path, body, o["code"])
			}
		}
	}
}

func TestHTTPBodyTooLarge(t *testing.T) {
	s := newStack(t)
	prefix, suffix := `{"items":[{"queue":"big","payload":"`, `"}]}`
	body := make([]byte, 16<<20+1)
	copy(body, prefix)
	for i := len(prefix); i < len(body)-len(suffix); i++ {
		body[i] = 'x'
	}
	copy(body[len(body)-len(suffix):], suffix)
	r := s.post("/api/v1/push", body)
	if r.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413; body %.200s", r.Status, r.Raw)
	}
	o := asObj(t, r.Body)
	if o["code"] != "body_too_large" || o["error"] == "" {
		t.Errorf("body %s", r.Raw)
	}
	if s.queueExists("big") {
		t.Errorf("a refused push created its queue")
	}
	// Just under the limit is accepted (the payload limit is 8 MiB, so use a smaller one).
	small := []byte(`{"items":[{"queue":"big","payload":"` + strings.Repeat("y", 1<<20) + `"}]}`)
	if r := s.post("/api/v1/push", small); r.Status != http.StatusCreated {
		t.Errorf("1 MiB push: status %d %.200s", r.Status, r.Raw)
	}
}

func TestHTTPPushNonStringQueueWritesNothing(t *testing.T) {
	s := newStack(t)
	r := s.post("/api/v1/push", `{"items":[{"queue":"fresh","payload":1},{"queue":5,"payload":2}]}`)
	wantError(t, r, http.StatusBadRequest, "invalid_field", "items[1].queue", "Queue must be a string")
	if s.queueExists("fresh") {
		t.Errorf("queue created by a refused push")
	}
	for body, want := range map[string][3]string{
		`{}`:           {"missing_field", "items", "items array is required"},
		`{"items":{}}`: {"invalid_field", "items", "items array is required"},
		`{"items":[{"queue":"fresh","partition":7}]}`:     {"invalid_field", "items[0].partition", "Partition must be a string"},
		`{"items":[{"queue":"fresh","transactionId":7}]}`: {"invalid_field", "items[0].transactionId", "TransactionId must be a string"},
		`{"items":[{"queue":"fresh","traceId":7}]}`:       {"invalid_field", "items[0].traceId", "TraceId must be a string"},
		`{"items":[{"queue":"fresh","traceId":"x"}]}`:     {"invalid_field", "items[0].traceId", `TraceId must be a UUID, got "x"`},
		`{"items":[{"queue":"` + strings.Repeat("q", 256) + `"}]}`: {"limit_exceeded", "items[0].queue",
			"items[0].queue is 256 bytes long; the limit is 255 bytes"},
	} {
		wantError(t, s.post("/api/v1/push", body), http.StatusBadRequest, want[0], want[1], want[2])
	}
	if s.queueExists("fresh") {
		t.Errorf("queue created by a refused push")
	}
}

// ---- push ----

func TestHTTPPushShape(t *testing.T) {
	s := newStack(t)
	r := s.post("/api/v1/push", `{"items":[]}`)
	if r.Status != http.StatusCreated || string(bytes.TrimSpace(r.Raw)) != "[]" {
		t.Errorf("empty push: %d %q, want 201 []", r.Status, r.Raw)
	}
	const trace = "01963a5e-8a7b-7c3d-9e1f-2a3b4c5d6e7f"
	res := s.push(
		obj{"queue": "orders", "partition": "customer-42", "payload": obj{"orderId": 7}, "transactionId": "order-7", "traceId": trace},
		obj{"queue": "orders", "payload": obj{"orderId": 8}},
		obj{"queue": "other"},
	)
	if len(res) != 3 {
		t.Fatalf("%d results", len(res))
	}
	partitions := map[string]string{}
	for i, v := range res {
		o := asObj(t, v)
		wantKeys(t, fmt.Sprintf("result %d", i), o, "index", "status", "transaction_id", "transactionId", "message_id",
			"partition_id", "trace_id", "queueName")
		if asInt(t, o["index"]) != int64(i) || o["status"] != "queued" {
			t.Errorf("result %d: %v", i, o)
		}
		wantUUID(t, "message_id", o["message_id"])
		partitions[fmt.Sprint(i)] = wantUUID(t, "partition_id", o["partition_id"])
		if o["transaction_id"] != o["transactionId"] {
			t.Errorf("transactionId alias %v != %v", o["transactionId"], o["transaction_id"])
		}
	}
	first, second, third := asObj(t, res[0]), asObj(t, res[1]), asObj(t, res[2])
	if first["transaction_id"] != "order-7" || first["trace_id"] != trace || first["queueName"] != "orders" {
		t.Errorf("first %v", first)
	}
	wantUUID(t, "generated transaction_id", second["transaction_id"])
	if second["trace_id"] != nil || third["queueName"] != "other" {
		t.Errorf("second %v third %v", second, third)
	}
	if partitions["0"] == partitions["1"] || partitions["1"] == partitions["2"] {
		t.Errorf("partition ids %v: customer-42, orders/Default and other/Default must differ", partitions)
	}
	// The payload comes back verbatim, with the default partition name.
	m := s.popOne("/api/v1/pop/queue/orders/partition/Default")
	if m["partition"] != "Default" || m["partitionId"] != partitions["1"] || m["traceId"] != nil {
		t.Errorf("message %v", m)
	}
	if d := asObj(t, m["data"]); asInt(t, d["orderId"]) != 8 {
		t.Errorf("data %v", m["data"])
	}
}

func TestHTTPPushPayloadsVerbatim(t *testing.T) {
	s := newStack(t)
	payloads := []string{`{"a":{"b":[1,2,{"c":null}]}}`, `[1,"two",3.5]`, `"just a string"`, `42`, `-0.5e-3`, `true`, `false`, `null`}
	var items []string
	for i, p := range payloads {
		items = append(items, fmt.Sprintf(`{"queue":"verbatim","payload":%s,"transactionId":"t%d"}`, p, i))
	}
	items = append(items, `{"queue":"verbatim","transactionId":"absent"}`)
	if r := s.post("/api/v1/push", `{"items":[`+strings.Join(items, ",")+`]}`); r.Status != http.StatusCreated {
		t.Fatalf("push %d %s", r.Status, r.Raw)
	}
	r := s.do(http.MethodGet, "/api/v1/pop/queue/verbatim?batch=100", nil)
	var p struct {
		Messages []struct {
			TransactionID string          `json:"transactionId"`
			Data          json.RawMessage `json:"data"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(r.Raw, &p); err != nil || len(p.Messages) != len(payloads)+1 {
		t.Fatalf("pop %d %s (%v)", r.Status, r.Raw, err)
	}
	for i, want := range append(payloads, "null") {
		if got := string(p.Messages[i].Data); got != want {
			t.Errorf("message %d (%s): data %s, want %s", i, p.Messages[i].TransactionID, got, want)
		}
	}
}

func TestHTTPPushDuplicate(t *testing.T) {
	s := newStack(t)
	first := asObj(t, s.push(obj{"queue": "orders", "partition": "customer-42", "payload": obj{}, "transactionId": "order-7"})[0])
	again := s.push(
		obj{"queue": "orders", "partition": "customer-42", "payload": obj{"other": true}, "transactionId": "order-7"},
		obj{"queue": "orders", "partition": "customer-43", "transactionId": "order-7"},
		obj{"queue": "orders", "partition": "customer-44", "transactionId": "x"},
		obj{"queue": "orders", "partition": "customer-44", "transactionId": "x"},
	)
	dup := asObj(t, again[0])
	wantKeys(t, "duplicate result", dup, "index", "status", "transaction_id", "transactionId", "message_id", "queueName")
	if dup["status"] != "duplicate" || dup["message_id"] != first["message_id"] || dup["transaction_id"] != "order-7" || dup["queueName"] != "orders" {
		t.Errorf("duplicate %v, first %v", dup, first)
	}
	if other := asObj(t, again[1]); other["status"] != "queued" || other["message_id"] == first["message_id"] {
		t.Errorf("same transaction id in another partition: %v", other)
	}
	a, b := asObj(t, again[2]), asObj(t, again[3])
	if a["status"] != "queued" || b["status"] != "duplicate" || a["message_id"] != b["message_id"] || asInt(t, b["index"]) != 3 {
		t.Errorf("in-request duplicate: %v %v", a, b)
	}
	// Nothing was written for the duplicate: one message in customer-42.
	p := s.pop("/api/v1/pop/queue/orders/partition/customer-42?batch=10")
	if n := len(asArr(t, p["messages"])); n != 1 {
		t.Errorf("%d messages in customer-42, want 1", n)
	}
}

// ---- configure and queue resources ----

func TestHTTPConfigureEcho(t *testing.T) {
	s := newStack(t)
	r := s.configure(obj{"queue": "orders.shipped", "namespace": "orders", "task": "shipped",
		"options": obj{"leaseTime": 120, "retryLimit": "5", "dedupWindowSeconds": 600, "deadLetterQueue": "false",
			"minPopWaitTime": 99999, "priority": 4, "maxSize": 100, "retryDelay": 2500, "ttl": 60, "unknownOption": 1}})
	wantKeys(t, "configure", r, "configured", "queueId", "partitionId", "queue", "namespace", "task", "options")
	if r["configured"] != true || r["partitionId"] != nil || r["queue"] != "orders.shipped" || r["namespace"] != "orders" || r["task"] != "shipped" {
		t.Errorf("configure %v", r)
	}
	if v, present := r["partitionId"]; !present || v != nil {
		t.Errorf("partitionId must be present and null")
	}
	id := wantUUID(t, "queueId", r["queueId"])
	want := map[string]any{"leaseTime": 120, "retryLimit": 5, "deadLetterQueue": false, "dlqAfterMaxRetries": true,
		"delayedProcessing": 0, "windowBuffer": 0, "retentionEnabled": false, "retentionSeconds": 0,
		"completedRetentionSeconds": 0, "maxWaitTimeSeconds": 0, "minPopWaitTime": 60000, "encryptionEnabled": false,
		"dedupWindowSeconds": 600, "priority": 4, "maxSize": 100, "retryDelay": 2500, "ttl": 60}
	checkOptions(t, "configure options", asObj(t, r["options"]), want)

	// A full replace: omitted options and tags return to their defaults; the id is stable.
	r = s.configure(obj{"queue": "orders.shipped", "retryLimit": 1})
	if r["queueId"] != id || r["namespace"] != "" || r["task"] != "" {
		t.Errorf("reconfigure %v", r)
	}
	checkOptions(t, "reconfigured options", asObj(t, r["options"]), map[string]any{"leaseTime": 300, "retryLimit": 1,
		"deadLetterQueue": true, "dlqAfterMaxRetries": true, "delayedProcessing": 0, "windowBuffer": 0,
		"retentionEnabled": false, "retentionSeconds": 0, "completedRetentionSeconds": 0, "maxWaitTimeSeconds": 0,
		"minPopWaitTime": 0, "encryptionEnabled": false, "dedupWindowSeconds": 3600, "priority": 0, "maxSize": 0,
		"retryDelay": 1000, "ttl": 3600})

	// The queue detail shows the values pops use (no legacy keys).
	_, body := s.get("/api/v1/resources/queues/orders.shipped")
	q := asObj(t, body)
	if q["id"] != id {
		t.Errorf("detail id %v, want %v", q["id"], id)
	}
	checkOptions(t, "detail config", asObj(t, q["config"]), map[string]any{"leaseTime": 300, "retryLimit": 1,
		"deadLetterQueue": true, "dlqAfterMaxRetries": true, "delayedProcessing": 0, "windowBuffer": 0,
		"retentionEnabled": false, "retentionSeconds": 0, "completedRetentionSeconds": 0, "maxWaitTimeSeconds": 0,
		"minPopWaitTime": 0, "encryptionEnabled": false, "dedupWindowSeconds": 3600})
}

// checkOptions compares an options object with want exactly (no extra keys).
func checkOptions(t *testing.T, what string, got obj, want map[string]any) {
	t.Helper()
	var names []string
	for k := range want {
		names = append(names, k)
	}
	wantKeys(t, what, got, names...)
	for k, w := range want {
		switch w := w.(type) {
		case int:
			if n, ok := got[k].(json.Number); !ok || n.String() != fmt.Sprint(w) {
				t.Errorf("%s.%s = %v, want %d", what, k, got[k], w)
			}
		default:
			if got[k] != w {
				t.Errorf("%s.%s = %v, want %v", what, k, got[k], w)
			}
		}
	}
}

func TestHTTPConfigureErrorsWriteNothing(t *testing.T) {
	s := newStack(t)
	for body, want := range map[string][3]string{
		`{"queue":"cq","options":{"leaseTime":"soon"}}`:         {"invalid_field", "options.leaseTime", "leaseTime must be an integer"},
		`{"queue":"cq","options":{"leaseTime":1.5}}`:            {"invalid_field", "options.leaseTime", "leaseTime must be an integer"},
		`{"queue":"cq","retryLimit":-1}`:                        {"invalid_field", "retryLimit", "retryLimit must not be negative, got -1"},
		`{"queue":"cq","options":{"retentionEnabled":"maybe"}}`: {"invalid_field", "options.retentionEnabled", "retentionEnabled must be a boolean"},
		`{"options":{"leaseTime":1}}`:                           {"missing_field", "queue", "queue is required"},
		`{"queue":7}`:                                           {"invalid_field", "queue", "queue is required"},
	} {
		wantError(t, s.post("/api/v1/configure", body), http.StatusBadRequest, want[0], want[1], want[2])
	}
	if s.queueExists("cq") {
		t.Errorf("a refused configure created the queue")
	}
}

func TestHTTPPushCreatedQueueDefaults(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "orders.shipped.eu", "payload": 1})
	status, body := s.get("/api/v1/resources/queues/orders.shipped.eu")
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	q := asObj(t, body)
	wantKeys(t, "queue detail", q, "id", "name", "namespace", "task", "createdAt", "config", "partitions", "totals")
	if q["name"] != "orders.shipped.eu" || q["namespace"] != "orders" || q["task"] != "shipped" {
		t.Errorf("detail %v", q)
	}
	if s, _ := q["createdAt"].(string); !millisRE.MatchString(s) {
		t.Errorf("createdAt %v", q["createdAt"])
	}
	checkOptions(t, "push-created config", asObj(t, q["config"]), map[string]any{"leaseTime": 60, "retryLimit": 3,
		"deadLetterQueue": true, "dlqAfterMaxRetries": true, "delayedProcessing": 0, "windowBuffer": 0,
		"retentionEnabled": false, "retentionSeconds": 0, "completedRetentionSeconds": 0, "maxWaitTimeSeconds": 0,
		"minPopWaitTime": 0, "encryptionEnabled": false, "dedupWindowSeconds": 3600})
	parts := asArr(t, q["partitions"])
	if len(parts) != 1 {
		t.Fatalf("%d partitions", len(parts))
	}
	p := asObj(t, parts[0])
	wantKeys(t, "partition", p, "id", "name", "createdAt", "stats", "oldestMessage", "newestMessage")
	if p["name"] != "Default" {
		t.Errorf("partition %v", p)
	}
	wantKeys(t, "stats", asObj(t, p["stats"]), "total", "pending", "processing", "completed", "failed", "deadLetter")
	if asInt(t, asObj(t, q["totals"])["total"]) != 1 || asInt(t, asObj(t, q["totals"])["pending"]) != 1 {
		t.Errorf("totals %v", q["totals"])
	}
	// A push-created queue leases for 60 s.
	pop := s.pop("/api/v1/pop/queue/orders.shipped.eu")
	m := asObj(t, asArr(t, pop["messages"])[0])
	_, ext := s.postJSON("/api/v1/lease/"+asStr(t, m["leaseId"])+"/extend", obj{"seconds": 1})
	if e := asObj(t, asArr(t, ext)[0]); e["success"] != true {
		t.Fatalf("extend %v", e)
	} else if exp, err := time.Parse(time.RFC3339, asStr(t, e["expiresAt"])); err != nil ||
		exp.Before(time.Now().Add(50*time.Second)) || exp.After(time.Now().Add(70*time.Second)) {
		t.Errorf("lease of a push-created queue expires at %v (%v), want about now+60s", e["expiresAt"], err)
	}
	if s.queueExists("no-such-queue") {
		t.Errorf("unknown queue found")
	}
	status, body = s.get("/api/v1/resources/queues")
	list := asArr(t, asObj(t, body)["queues"])
	if status != http.StatusOK || len(list) != 1 {
		t.Fatalf("list %d %v", status, body)
	}
	wantKeys(t, "queue list entry", asObj(t, list[0]), "id", "name", "namespace", "task", "createdAt", "partitions", "messages")
}

func TestHTTPDeleteQueue(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "doomed", "payload": 1})
	for i, want := range []bool{true, false} {
		r := s.do(http.MethodDelete, "/api/v1/resources/queues/doomed", nil)
		if r.Status != http.StatusOK {
			t.Fatalf("delete %d: status %d", i, r.Status)
		}
		o := asObj(t, r.Body)
		wantKeys(t, "delete", o, "deleted", "queue", "existed")
		if o["deleted"] != true || o["queue"] != "doomed" || o["existed"] != want {
			t.Errorf("delete %d: %v, want existed %v", i, o, want)
		}
	}
	if s.queueExists("doomed") || s.pop("/api/v1/pop/queue/doomed") != nil {
		t.Errorf("deleted queue still there")
	}
	// The OJS queue "default" always exists: its Queen delete is refused
	// like its OJS delete, with the OJS error body, and keeps its messages.
	s.push(obj{"queue": "default", "payload": 1})
	r := s.do(http.MethodDelete, "/api/v1/resources/queues/default", nil)
	e := asObj(t, asObj(t, r.Body)["error"])
	if r.Status != http.StatusConflict || e["code"] != "conflict" || e["type"] != "queue_protected" {
		t.Fatalf("delete default: %d %s", r.Status, r.Raw)
	}
	if s.pop("/api/v1/pop/queue/default") == nil {
		t.Errorf("default lost its message to a refused delete")
	}
}

// ---- pop ----

func TestHTTPPopShapeAndForms(t *testing.T) {
	s := newStack(t)
	s.configure(obj{"queue": "shop.orders", "namespace": "shop", "task": "orders"})
	s.push(obj{"queue": "shop.orders", "partition": "p1", "payload": obj{"n": 1}, "transactionId": "a"},
		obj{"queue": "shop.orders", "partition": "p2", "payload": obj{"n": 2}, "transactionId": "b"},
		obj{"queue": "shop.orders", "partition": "p 3/x", "payload": obj{"n": 3}, "transactionId": "c"})

	// Unknown queue, unknown partition: 204 with an empty body.
	for _, path := range []string{"/api/v1/pop/queue/nope", "/api/v1/pop/queue/nope?wait=false&batch=5",
		"/api/v1/pop/queue/shop.orders/partition/nope", "/api/v1/pop?namespace=nobody"} {
		if p := s.pop(path); p != nil {
			t.Errorf("%s: %v, want 204", path, p)
		}
	}
	// Discovery without a filter.
	r := s.do(http.MethodGet, "/api/v1/pop?batch=1", nil)
	wantError(t, r, http.StatusBadRequest, "missing_field", "namespace", "namespace or task is required")
	r = s.do(http.MethodGet, "/api/v1/pop?namespace=&task=", nil)
	wantError(t, r, http.StatusBadRequest, "missing_field", "namespace", "namespace or task is required")

	// Specific form, with a percent-encoded partition name.
	p := s.pop("/api/v1/pop/queue/shop.orders/partition/" + url.PathEscape("p 3/x") + "?consumerGroup=billing")
	wantKeys(t, "pop", p, "success", "queue", "partition", "partitionId", "leaseId", "consumerGroup", "partitionsClaimed", "messages")
	if p["success"] != true || p["queue"] != "shop.orders" || p["partition"] != "p 3/x" || p["consumerGroup"] != "billing" ||
		asInt(t, p["partitionsClaimed"]) != 1 {
		t.Errorf("pop %v", p)
	}
	lease := wantUUID(t, "leaseId", p["leaseId"])
	pid := wantUUID(t, "partitionId", p["partitionId"])
	m := asObj(t, asArr(t, p["messages"])[0])
	wantKeys(t, "message", m, "id", "transactionId", "queue", "partition", "partitionId", "leaseId", "consumerGroup",
		"data", "traceId", "producerSub", "createdAt", "retryCount")
	wantUUID(t, "id", m["id"])
	if m["transactionId"] != "c" || m["queue"] != "shop.orders" || m["partition"] != "p 3/x" || m["partitionId"] != pid ||
		m["leaseId"] != lease || m["consumerGroup"] != "billing" || m["traceId"] != nil || m["producerSub"] != nil ||
		asInt(t, m["retryCount"]) != 0 {
		t.Errorf("message %v", m)
	}
	if c, _ := m["createdAt"].(string); !microsRE.MatchString(c) {
		t.Errorf("createdAt %v, want microsecond RFC 3339", m["createdAt"])
	}
	if d := asObj(t, m["data"]); asInt(t, d["n"]) != 3 {
		t.Errorf("data %v", m["data"])
	}

	// Wildcard form, queue mode: the default group is __QUEUE_MODE__.
	p = s.pop("/api/v1/pop/queue/shop.orders?batch=10&partitions=5")
	if p["consumerGroup"] != "__QUEUE_MODE__" || asInt(t, p["partitionsClaimed"]) != 3 || len(asArr(t, p["messages"])) != 3 {
		t.Errorf("wildcard pop %v", p)
	}
	// Everything is leased for queue mode now.
	if p := s.pop("/api/v1/pop/queue/shop.orders?batch=10"); p != nil {
		t.Errorf("second wildcard pop delivered %v", p)
	}
	// Discovery form for another group, by namespace, by task, by both.
	for i, q := range []string{"namespace=shop", "task=orders", "namespace=shop&task=orders"} {
		p := s.pop(fmt.Sprintf("/api/v1/pop?%s&consumerGroup=disc%d&batch=10&partitions=10", q, i))
		if p == nil || p["queue"] != "shop.orders" || len(asArr(t, p["messages"])) != 3 {
			t.Errorf("discovery %s: %v", q, p)
		}
	}
	if p := s.pop("/api/v1/pop?namespace=shop&task=other&consumerGroup=disc9"); p != nil {
		t.Errorf("discovery with a non-matching task delivered %v", p)
	}
}

func TestHTTPLongPollWakesOnPush(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "lp", "partition": "warm", "payload": 0}) // the queue exists; nothing for group g below
	s.pop("/api/v1/pop/queue/lp?consumerGroup=g")
	go func() {
		time.Sleep(500 * time.Millisecond)
		b, _ := json.Marshal(obj{"items": arr{obj{"queue": "lp", "partition": "hot", "payload": obj{"late": true}}}})
		resp, err := http.Post(s.URL+"/api/v1/push", "application/json", bytes.NewReader(b))
		if err == nil {
			resp.Body.Close()
		}
	}()
	start := time.Now()
	r := s.do(http.MethodGet, "/api/v1/pop/queue/lp?consumerGroup=g&wait=true&timeout=3000", nil)
	elapsed := time.Since(start)
	if r.Status != http.StatusOK {
		t.Fatalf("long poll answered %d after %v, want 200 with the pushed message", r.Status, elapsed)
	}
	m := asObj(t, asArr(t, asObj(t, r.Body)["messages"])[0])
	if m["partition"] != "hot" {
		t.Errorf("message %v", m)
	}
	if elapsed > 2500*time.Millisecond {
		t.Errorf("long poll answered after %v; a push 0.5 s in should wake it within about a second", elapsed)
	}
	if elapsed < 400*time.Millisecond {
		t.Errorf("long poll answered after %v, before the push", elapsed)
	}
}

func TestHTTPLongPollTimeout(t *testing.T) {
	s := newStack(t)
	for _, path := range []string{"/api/v1/pop/queue/empty?wait=true&timeout=1000",
		"/api/v1/pop/queue/empty/partition/p?wait=1&timeout=1000", "/api/v1/pop?namespace=x&wait=true&timeout=1000"} {
		start := time.Now()
		r := s.do(http.MethodGet, path, nil)
		elapsed := time.Since(start)
		if r.Status != http.StatusNoContent || len(r.Raw) != 0 {
			t.Errorf("%s: %d %q, want 204 with no body", path, r.Status, r.Raw)
		}
		if elapsed < 900*time.Millisecond || elapsed > 2500*time.Millisecond {
			t.Errorf("%s: answered after %v, want about the 1 s timeout", path, elapsed)
		}
	}
	// wait=false (or any other value than true/1) answers at once.
	start := time.Now()
	if p := s.pop("/api/v1/pop/queue/empty?wait=yes&timeout=5000"); p != nil || time.Since(start) > 1500*time.Millisecond {
		t.Errorf("wait=yes waited %v", time.Since(start))
	}
}

// A long-poll waits only when it finds nothing (queen-api.md 3.6, 4.9): one
// whose timeout is already over when it looks (timeout=0) still takes what is
// deliverable, as a pop with wait=false does, rather than answer 204 over it.
func TestHTTPLongPollWithATimeoutOfZeroTakesWhatIsThere(t *testing.T) {
	s := newStack(t)
	const n = 30
	items := make([]obj, n)
	for i := range items {
		items[i] = obj{"queue": "t0", "payload": i, "transactionId": fmt.Sprintf("m%d", i)}
	}
	s.push(items...)
	for i := range n {
		p := s.pop("/api/v1/pop/queue/t0?wait=true&timeout=0&autoAck=true")
		if p == nil {
			t.Fatalf("pop %d of %d with wait=true&timeout=0 answered 204 with %d messages waiting", i+1, n, n-i)
		}
		if m := asObj(t, asArr(t, p["messages"])[0]); m["transactionId"] != fmt.Sprintf("m%d", i) {
			t.Fatalf("pop %d delivered %v, want m%d", i+1, m["transactionId"], i)
		}
	}
	// Nothing left: it answers 204 at once rather than wait.
	start := time.Now()
	if p := s.pop("/api/v1/pop/queue/t0?wait=true&timeout=0"); p != nil || time.Since(start) > 500*time.Millisecond {
		t.Errorf("empty queue, wait=true&timeout=0: %v after %v, want 204 at once", p, time.Since(start))
	}
}

func TestHTTPAutoAck(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "aa", "payload": 1, "transactionId": "m1"}, obj{"queue": "aa", "payload": 2, "transactionId": "m2"})
	p := s.pop("/api/v1/pop/queue/aa?autoAck=true&batch=10")
	if p["leaseId"] != "" {
		t.Errorf("top-level leaseId %v, want \"\" with autoAck", p["leaseId"])
	}
	msgs := asArr(t, p["messages"])
	if len(msgs) != 2 {
		t.Fatalf("%d messages", len(msgs))
	}
	for _, v := range msgs {
		if m := asObj(t, v); m["leaseId"] != "" {
			t.Errorf("message leaseId %v, want \"\"", m["leaseId"])
		}
	}
	if p := s.pop("/api/v1/pop/queue/aa?batch=10"); p != nil {
		t.Errorf("auto-acknowledged messages delivered again: %v", p)
	}
	// An ack for an auto-acknowledged message succeeds and changes nothing.
	m := asObj(t, msgs[1])
	res := s.ack(obj{"transactionId": "m2", "partitionId": m["partitionId"]})
	if res["success"] != true || res["error"] != nil {
		t.Errorf("ack after autoAck: %v", res)
	}
}

// ---- ack ----

func TestHTTPAck(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "acks", "partition": "p", "payload": 1, "transactionId": "t1"})
	m := s.popOne("/api/v1/pop/queue/acks")
	res := s.ack(obj{"transactionId": "t1", "partitionId": m["partitionId"], "leaseId": m["leaseId"],
		"status": "completed", "consumerGroup": nil, "error": nil})
	wantKeys(t, "ack result", res, "index", "transactionId", "success", "error", "queueName", "partitionName",
		"leaseReleased", "dlq", "dropped")
	if v, present := res["error"]; !present || v != nil {
		t.Errorf("error must be present and null on success: %v", res)
	}
	if asInt(t, res["index"]) != 0 || res["transactionId"] != "t1" || res["success"] != true || res["queueName"] != "acks" ||
		res["partitionName"] != "p" || res["leaseReleased"] != true || res["dlq"] != false || res["dropped"] != false {
		t.Errorf("ack %v", res)
	}
	if p := s.pop("/api/v1/pop/queue/acks"); p != nil {
		t.Errorf("acknowledged message delivered again")
	}

	// Unknown partition id (a UUID, or not even one): per-item unresolvable inside a 200.
	for _, pid := range []string{"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09", "not-a-uuid"} {
		res := s.ack(obj{"transactionId": "t1", "partitionId": pid})
		if res["success"] != false || res["error"] != "unresolvable" || res["queueName"] != nil || res["partitionName"] != nil {
			t.Errorf("ack on partition %q: %v", pid, res)
		}
	}
	// Unknown transaction id in a known partition.
	if res := s.ack(obj{"transactionId": "never", "partitionId": m["partitionId"]}); res["error"] != "unresolvable" {
		t.Errorf("unknown transaction id: %v", res)
	}
	// Request-level errors.
	wantError(t, s.post("/api/v1/ack", `{"partitionId":"x"}`), http.StatusBadRequest, "missing_field", "transactionId", "transactionId is required")
	wantError(t, s.post("/api/v1/ack", `{"transactionId":"x"}`), http.StatusBadRequest, "missing_field", "partitionId",
		"partitionId is required to ensure message uniqueness")
}

func TestHTTPAckWrongLease(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "wl", "payload": 1, "transactionId": "t1"})
	m := s.popOne("/api/v1/pop/queue/wl")
	for _, lease := range []string{"01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7", "garbage"} {
		res := s.ack(obj{"transactionId": "t1", "partitionId": m["partitionId"], "leaseId": lease})
		if res["success"] != false || res["error"] != "Invalid or expired lease" || res["queueName"] != "wl" {
			t.Errorf("ack with lease %q: %v", lease, res)
		}
	}
	// The lease is untouched: the message is not redelivered, and the right lease still acks.
	if p := s.pop("/api/v1/pop/queue/wl"); p != nil {
		t.Errorf("message redelivered after a refused ack")
	}
	if res := s.ack(obj{"transactionId": "t1", "partitionId": m["partitionId"], "leaseId": m["leaseId"]}); res["success"] != true {
		t.Errorf("ack with the right lease: %v", res)
	}
	// A group that does not hold the lease cannot use it.
	s.push(obj{"queue": "wl", "payload": 2, "transactionId": "t2"})
	m2 := s.popOne("/api/v1/pop/queue/wl?consumerGroup=g1")
	res := s.ack(obj{"transactionId": m2["transactionId"], "partitionId": m2["partitionId"], "leaseId": m2["leaseId"], "consumerGroup": "g2"})
	if res["error"] != "Invalid or expired lease" {
		t.Errorf("ack for another group: %v", res)
	}
}

func TestHTTPAckBatch(t *testing.T) {
	s := newStack(t)
	r := s.post("/api/v1/ack/batch", `{"acknowledgments":[]}`)
	if r.Status != http.StatusOK || string(bytes.TrimSpace(r.Raw)) != "[]" {
		t.Errorf("empty batch: %d %s", r.Status, r.Raw)
	}
	s.push(obj{"queue": "ab", "payload": 1, "transactionId": "t1"}, obj{"queue": "ab", "payload": 2, "transactionId": "t2"})
	p := s.pop("/api/v1/pop/queue/ab?batch=2&consumerGroup=g")
	pid, lease := p["partitionId"], p["leaseId"]

	// One bad item refuses the whole request and applies nothing: the "retry"
	// would have released the lease.
	r = s.post("/api/v1/ack/batch", obj{"consumerGroup": "g", "acknowledgments": arr{
		obj{"transactionId": "t1", "partitionId": pid, "leaseId": lease, "status": "retry"},
		obj{"partitionId": pid, "leaseId": lease},
	}})
	wantError(t, r, http.StatusBadRequest, "missing_field", "acknowledgments[1].transactionId",
		"Each acknowledgment must have a valid transactionId string")
	r = s.post("/api/v1/ack/batch", obj{"consumerGroup": "g", "acknowledgments": arr{
		obj{"transactionId": "t1", "partitionId": pid, "leaseId": lease, "status": "retry"},
		obj{"transactionId": "t2"},
	}})
	wantError(t, r, http.StatusBadRequest, "missing_field", "acknowledgments[1].partitionId",
		"Each acknowledgment must have a valid partitionId string")
	wantError(t, s.post("/api/v1/ack/batch", `{"consumerGroup":"g"}`), http.StatusBadRequest, "missing_field", "acknowledgments",
		"acknowledgments array is required")
	if p := s.pop("/api/v1/pop/queue/ab?consumerGroup=g"); p != nil {
		t.Fatalf("lease released by a refused batch ack")
	}

	// Listed out of order, with one unresolvable item: results in request order.
	r = s.post("/api/v1/ack/batch", obj{"consumerGroup": "g", "acknowledgments": arr{
		obj{"transactionId": "t2", "partitionId": pid, "leaseId": lease, "status": "completed", "consumerGroup": "ignored"},
		obj{"transactionId": "nope", "partitionId": pid, "leaseId": lease},
		obj{"transactionId": "t1", "partitionId": pid, "leaseId": lease, "status": "success", "error": nil},
	}})
	if r.Status != http.StatusOK {
		t.Fatalf("batch ack %d %s", r.Status, r.Raw)
	}
	res := asArr(t, r.Body)
	if len(res) != 3 {
		t.Fatalf("%d results", len(res))
	}
	for i, v := range res {
		o := asObj(t, v)
		wantKeys(t, "batch result", o, "index", "transactionId", "success", "error", "queueName", "partitionName",
			"leaseReleased", "dlq", "dropped")
		if asInt(t, o["index"]) != int64(i) {
			t.Errorf("result %d index %v", i, o["index"])
		}
	}
	r0, r1, r2 := asObj(t, res[0]), asObj(t, res[1]), asObj(t, res[2])
	if r0["transactionId"] != "t2" || r0["success"] != true || r0["error"] != nil || r0["leaseReleased"] != true {
		t.Errorf("result 0 %v", r0)
	}
	if r1["success"] != false || r1["error"] != "unresolvable" {
		t.Errorf("result 1 %v", r1)
	}
	if r2["transactionId"] != "t1" || r2["success"] != true || r2["error"] != nil {
		t.Errorf("result 2 %v", r2)
	}
	if p := s.pop("/api/v1/pop/queue/ab?consumerGroup=g"); p != nil {
		t.Errorf("batch was not consumed: %v", p)
	}
}

// ---- transaction ----

func TestHTTPTransaction(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "stage-a", "payload": obj{"orderId": 7}, "transactionId": "order-7"})
	m := s.popOne("/api/v1/pop/queue/stage-a?consumerGroup=billing")

	// A transaction that fails changes nothing and answers 200.
	r := s.post("/api/v1/transaction", obj{"operations": arr{
		obj{"type": "push", "items": arr{obj{"queue": "stage-b", "payload": obj{"x": 1}, "transactionId": "out-1"}}},
		obj{"type": "ack", "transactionId": "order-7", "partitionId": "6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09",
			"status": "completed", "consumerGroup": "billing"},
	}, "requiredLeases": arr{m["leaseId"]}})
	if r.Status != http.StatusOK {
		t.Fatalf("failed transaction: status %d %s", r.Status, r.Raw)
	}
	o := asObj(t, r.Body)
	wantKeys(t, "failed transaction", o, "transactionId", "success", "error", "results")
	wantUUID(t, "transactionId", o["transactionId"])
	if o["success"] != false || o["error"] != "ACK operation failed: unresolvable" {
		t.Errorf("failed transaction %v", o)
	}
	results := asArr(t, o["results"])
	if len(results) != 2 {
		t.Fatalf("results %v: want the push and the failing ack", results)
	}
	last := asObj(t, results[1])
	if last["type"] != "ack" || last["success"] != false || last["error"] != "unresolvable" || last["dlq"] != false ||
		last["transactionId"] != "order-7" || asInt(t, last["index"]) != 1 {
		t.Errorf("failing ack result %v", last)
	}
	if p := s.pop("/api/v1/pop/queue/stage-b"); p != nil {
		t.Errorf("message pushed by a failed transaction is poppable: %v", p)
	}
	if s.queueExists("stage-b") {
		t.Errorf("queue created by a failed transaction")
	}

	// The same transaction with the right partition commits both.
	r = s.post("/api/v1/transaction", obj{"operations": arr{
		obj{"type": "ack", "transactionId": "order-7", "partitionId": m["partitionId"], "status": "completed", "consumerGroup": "billing"},
		obj{"type": "push", "items": arr{obj{"queue": "stage-b", "partition": "c42", "payload": obj{"x": 1}, "transactionId": "out-1"}}},
		obj{"type": "push", "queue": "stage-b", "data": obj{"flat": true}},
	}, "requiredLeases": arr{m["leaseId"]}})
	o = asObj(t, r.Body)
	wantKeys(t, "transaction", o, "transactionId", "success", "results")
	if r.Status != http.StatusOK || o["success"] != true {
		t.Fatalf("transaction %d %s", r.Status, r.Raw)
	}
	results = asArr(t, o["results"])
	if len(results) != 3 {
		t.Fatalf("results %v", results)
	}
	ack := asObj(t, results[0])
	wantKeys(t, "ack op", ack, "index", "type", "success", "transactionId", "error", "dlq")
	if ack["type"] != "ack" || ack["success"] != true || ack["error"] != nil {
		t.Errorf("ack op %v", ack)
	}
	push := asObj(t, results[1])
	for _, k := range []string{"index", "type", "success", "transactionId", "messageId", "partitionId", "queueName"} {
		if _, ok := push[k]; !ok {
			t.Errorf("push op result lacks %q: %v", k, push)
		}
	}
	if push["type"] != "push" || push["success"] != true || push["transactionId"] != "out-1" || push["queueName"] != "stage-b" {
		t.Errorf("push op %v", push)
	}
	wantUUID(t, "messageId", push["messageId"])
	wantUUID(t, "partitionId", push["partitionId"])
	if p := s.pop("/api/v1/pop/queue/stage-a?consumerGroup=billing"); p != nil {
		t.Errorf("input consumed by the transaction delivered again")
	}
	p := s.pop("/api/v1/pop/queue/stage-b?batch=10&partitions=10")
	if p == nil || len(asArr(t, p["messages"])) != 2 {
		t.Errorf("output of the transaction: %v", p)
	}

	wantError(t, s.post("/api/v1/transaction", `{"operations":[]}`), http.StatusBadRequest, "missing_field", "operations",
		"operations array cannot be empty")
	wantError(t, s.post("/api/v1/transaction", `{}`), http.StatusBadRequest, "missing_field", "operations", "operations array required")
	// An unknown operation type fails the transaction inside a 200.
	r = s.post("/api/v1/transaction", `{"operations":[{"type":"push","queue":"stage-c","payload":1},{"type":"teleport"}]}`)
	if o := asObj(t, r.Body); r.Status != http.StatusOK || o["success"] != false || o["error"] != "Unknown operation type: teleport" {
		t.Errorf("unknown type: %d %s", r.Status, r.Raw)
	}
	if s.queueExists("stage-c") {
		t.Errorf("queue created by a failed transaction")
	}
}

// ---- lease extension ----

func TestHTTPExtend(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "ext", "payload": 1, "transactionId": "t1"})
	m := s.popOne("/api/v1/pop/queue/ext")
	lease := asStr(t, m["leaseId"])
	for _, body := range []string{`{}`, `{"seconds":600}`} {
		r := s.post("/api/v1/lease/"+lease+"/extend", body)
		if r.Status != http.StatusOK {
			t.Fatalf("extend %d %s", r.Status, r.Raw)
		}
		res := asArr(t, r.Body)
		if len(res) != 1 {
			t.Fatalf("extend answered %d results", len(res))
		}
		o := asObj(t, res[0])
		wantKeys(t, "extend", o, "index", "leaseId", "success", "error", "expiresAt")
		if asInt(t, o["index"]) != 0 || o["leaseId"] != lease || o["success"] != true || o["error"] != nil {
			t.Errorf("extend %s: %v", body, o)
		}
		if e, _ := o["expiresAt"].(string); !millisRE.MatchString(e) {
			t.Errorf("expiresAt %v, want millisecond RFC 3339", o["expiresAt"])
		}
	}
	// Released by the ack: Lease not found. Never existed, or not a UUID: the same.
	s.ack(obj{"transactionId": "t1", "partitionId": m["partitionId"], "leaseId": lease})
	for _, id := range []string{lease, "01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7", "not-a-lease"} {
		r := s.post("/api/v1/lease/"+id+"/extend", `{}`)
		if r.Status != http.StatusOK {
			t.Fatalf("extend %s: %d", id, r.Status)
		}
		o := asObj(t, asArr(t, r.Body)[0])
		if o["success"] != false || o["error"] != "Lease not found" || o["expiresAt"] != nil || o["leaseId"] != id {
			t.Errorf("extend %s: %v", id, o)
		}
	}
	wantError(t, s.post("/api/v1/lease/"+lease+"/extend", `{"seconds":-1}`), http.StatusBadRequest, "invalid_field", "seconds",
		"seconds must be a positive integer")
}

// ---- dead letters ----

func TestHTTPDLQ(t *testing.T) {
	s := newStack(t)
	_, body := s.get("/api/v1/dlq?queue=dq")
	if o := asObj(t, body); asInt(t, o["total"]) != 0 || len(asArr(t, o["messages"])) != 0 {
		t.Errorf("fresh dlq %v", o)
	}
	s.configure(obj{"queue": "dq", "namespace": "ns", "options": obj{"retryLimit": 0}})
	s.push(obj{"queue": "dq", "partition": "p", "payload": obj{"bad": true}, "transactionId": "poison"})
	m := s.popOne("/api/v1/pop/queue/dq?consumerGroup=billing")
	res := s.ack(obj{"transactionId": "poison", "partitionId": m["partitionId"], "leaseId": m["leaseId"],
		"status": "failed", "error": "schema mismatch", "consumerGroup": "billing"})
	if res["success"] != true || res["dlq"] != true || res["leaseReleased"] != true || res["dropped"] != false {
		t.Errorf("failed ack with retryLimit 0: %v", res)
	}
	status, body := s.get("/api/v1/dlq?queue=dq")
	if status != http.StatusOK {
		t.Fatalf("dlq %d", status)
	}
	o := asObj(t, body)
	wantKeys(t, "dlq", o, "messages", "total", "limit", "offset", "pagination")
	if asInt(t, o["total"]) != 1 || asInt(t, o["limit"]) != 100 || asInt(t, o["offset"]) != 0 {
		t.Errorf("dlq %v", o)
	}
	msgs := asArr(t, o["messages"])
	if len(msgs) != 1 {
		t.Fatalf("%d dead letters", len(msgs))
	}
	d := asObj(t, msgs[0])
	wantKeys(t, "dead letter", d, "id", "messageId", "transactionId", "partitionId", "queue", "partition", "namespace",
		"task", "consumerGroup", "errorMessage", "retryCount", "data", "traceId", "producerSub", "createdAt", "failedAt")
	if d["id"] != m["id"] || d["messageId"] != m["id"] || d["transactionId"] != "poison" || d["partitionId"] != m["partitionId"] ||
		d["queue"] != "dq" || d["partition"] != "p" || d["namespace"] != "ns" || d["consumerGroup"] != "billing" ||
		d["errorMessage"] != "schema mismatch" || asInt(t, d["retryCount"]) != 0 {
		t.Errorf("dead letter %v", d)
	}
	if data := asObj(t, d["data"]); data["bad"] != true {
		t.Errorf("data %v", d["data"])
	}
	for _, k := range []string{"createdAt", "failedAt"} {
		if v, _ := d[k].(string); !millisRE.MatchString(v) {
			t.Errorf("%s %v", k, d[k])
		}
	}
	// Filters.
	for q, want := range map[string]int64{"queue=dq&consumerGroup=billing": 1, "queue=dq&consumerGroup=other": 0,
		"queue=dq&partition=p": 1, "queue=dq&partition=Default": 0, "queue=other": 0} {
		_, body := s.get("/api/v1/dlq?" + q)
		if got := asInt(t, asObj(t, body)["total"]); got != want {
			t.Errorf("dlq?%s total %d, want %d", q, got, want)
		}
	}
	// Queue mode still receives the message.
	if p := s.pop("/api/v1/pop/queue/dq"); p == nil {
		t.Errorf("dead-lettering for billing hid the message from queue mode")
	}
}

// ---- encryption ----

func TestHTTPEncryption(t *testing.T) {
	var raw [32]byte
	rand.Read(raw[:])
	s := newStack(t, withKey(hex.EncodeToString(raw[:])))
	r := s.configure(obj{"queue": "secret", "options": obj{"encryptionEnabled": true}})
	if asObj(t, r["options"])["encryptionEnabled"] != true {
		t.Fatalf("configure %v", r)
	}
	marker := "crown-plaintext-marker-" + hex.EncodeToString(raw[:6])
	payload := `{"card":"` + marker + `","n":[1,2,3]}`
	if r := s.post("/api/v1/push", `{"items":[{"queue":"secret","payload":`+payload+`,"transactionId":"s1"}]}`); r.Status != http.StatusCreated {
		t.Fatalf("push %d %s", r.Status, r.Raw)
	}
	// A transaction push is sealed too.
	if r := s.post("/api/v1/transaction", `{"operations":[{"type":"push","queue":"secret","payload":`+payload+`,"transactionId":"s2"}]}`); r.Status != http.StatusOK {
		t.Fatalf("transaction %d %s", r.Status, r.Raw)
	}
	pr := s.do(http.MethodGet, "/api/v1/pop/queue/secret?batch=10", nil)
	var p struct {
		Messages []struct {
			Data json.RawMessage `json:"data"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(pr.Raw, &p); err != nil || len(p.Messages) != 2 {
		t.Fatalf("pop %d %s", pr.Status, pr.Raw)
	}
	for i, m := range p.Messages {
		if string(m.Data) != payload {
			t.Errorf("message %d: data %s, want %s", i, m.Data, payload)
		}
	}
	if fileContains(t, filepath.Join(s.Dir, "state"), []byte(marker)) {
		t.Errorf("the state files hold the plaintext of an encrypted queue's message")
	}
	if fileContains(t, filepath.Join(s.Dir, "raft", "log.db"), []byte(marker)) {
		t.Errorf("the Raft log holds the plaintext of an encrypted queue's message")
	}
	// A queue without encryption stores plaintext (the check above is meaningful).
	s.push(obj{"queue": "clear", "payload": obj{"card": marker + "-clear"}})
	if !fileContains(t, filepath.Join(s.Dir, "state"), []byte(marker+"-clear")) {
		t.Errorf("plaintext of an unencrypted queue not found in the state files: the grep is not meaningful")
	}
}

// electedMidRequest stages a follower that parses a request while no leader
// is known and wins the election while the request waits for one: it claims
// to follow nobody until the first WaitLeader, then is the leader it is.
type electedMidRequest struct {
	httpapi.Cluster
	following atomic.Bool
}

func (c *electedMidRequest) IsLeader() bool { return !c.following.Load() && c.Cluster.IsLeader() }

func (c *electedMidRequest) Leader() (string, string) {
	if c.following.Load() {
		return "", ""
	}
	return c.Cluster.Leader()
}

func (c *electedMidRequest) WaitLeader(ctx context.Context) (string, string, error) {
	c.following.Store(false)
	return c.Cluster.WaitLeader(ctx)
}

// A push or transaction parsed by a node that then proposes it as the new
// leader is sealed like any other: the payload is sealed where it is
// proposed, not where it was parsed.
func TestHTTPEncryptionSealedWhenElectedMidRequest(t *testing.T) {
	var raw [32]byte
	rand.Read(raw[:])
	var staged *electedMidRequest
	s := newStackWrapped(t, func(c httpapi.Cluster) httpapi.Cluster {
		staged = &electedMidRequest{Cluster: c}
		return staged
	}, withKey(hex.EncodeToString(raw[:])))
	s.configure(obj{"queue": "secret", "options": obj{"encryptionEnabled": true}})
	marker := "crown-elected-marker-" + hex.EncodeToString(raw[:6])
	for _, req := range []struct{ path, body string }{
		{"/api/v1/push", `{"items":[{"queue":"secret","payload":{"m":"` + marker + `"},"transactionId":"e1"}]}`},
		{"/api/v1/transaction", `{"operations":[{"type":"push","queue":"secret","payload":{"m":"` + marker + `"},"transactionId":"e2"}]}`},
	} {
		staged.following.Store(true)
		if r := s.post(req.path, req.body); r.Status >= 300 {
			t.Fatalf("%s: %d %s", req.path, r.Status, r.Raw)
		}
		if staged.following.Load() {
			t.Fatalf("%s: the request never waited for a leader: the staging did not happen", req.path)
		}
	}
	pr := s.do(http.MethodGet, "/api/v1/pop/queue/secret?batch=10", nil)
	if pr.Status != http.StatusOK || strings.Count(string(pr.Raw), marker) != 2 {
		t.Fatalf("pop %d %s: want both messages, decrypted", pr.Status, pr.Raw)
	}
	if fileContains(t, filepath.Join(s.Dir, "raft", "log.db"), []byte(marker)) {
		t.Errorf("the Raft log holds the plaintext of an encrypted queue's message")
	}
	if fileContains(t, filepath.Join(s.Dir, "state"), []byte(marker)) {
		t.Errorf("the state files hold the plaintext of an encrypted queue's message")
	}
}

// A node without the key (a misconfigured member that leads) refuses a pop
// of an encrypted queue before leasing anything, and when a pop did lease a
// message it cannot open (sealed before the queue's encryption was turned
// off), it gives the lease back: another node delivers it at once.
func TestHTTPPopOnANodeWithoutTheKey(t *testing.T) {
	var raw [32]byte
	rand.Read(raw[:])
	s := newStack(t, withKey(hex.EncodeToString(raw[:])))
	// The same leader, served by an HTTP layer that has no key.
	api := httpapi.New(httpapi.Config{NodeID: "node1", Hotlist: true, WindowBatch: 100, Version: "test"}, s.Node, s.State)
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	keyless := &stack{t: t, URL: srv.URL, client: s.client}

	s.configure(obj{"queue": "secret", "options": obj{"encryptionEnabled": true}})
	s.push(obj{"queue": "secret", "payload": obj{"n": 1}})
	r := keyless.do(http.MethodGet, "/api/v1/pop/queue/secret?batch=10", nil)
	wantError(t, r, http.StatusBadRequest, "encryption_unavailable", "queue",
		`queue "secret" has encryptionEnabled and this node has no QUEEN_ENCRYPTION_KEY; nothing was leased`)
	if m := s.popOne("/api/v1/pop/queue/secret?batch=10&autoAck=true"); asObj(t, m["data"])["n"] != json.Number("1") {
		t.Fatalf("pop through the node with the key: %v", m)
	}

	// A sealed message stays sealed when the queue's encryption is turned off.
	s.push(obj{"queue": "secret", "payload": obj{"n": 2}})
	s.configure(obj{"queue": "secret", "options": obj{"encryptionEnabled": false}})
	r = keyless.do(http.MethodGet, "/api/v1/pop/queue/secret?batch=10", nil)
	if r.Status != http.StatusInternalServerError || !strings.Contains(string(r.Raw), "the lease was released") {
		t.Fatalf("keyless pop of a sealed message: %d %s", r.Status, r.Raw)
	}
	m := s.popOne("/api/v1/pop/queue/secret?batch=10")
	if asObj(t, m["data"])["n"] != json.Number("2") || asInt(t, m["retryCount"]) != 0 {
		t.Fatalf("after the lease was given back: %v", m)
	}
}

func TestHTTPEncryptionUnavailable(t *testing.T) {
	s := newStack(t)
	for _, body := range []string{`{"queue":"secret","options":{"encryptionEnabled":true}}`, `{"queue":"secret","encryptionEnabled":"true"}`} {
		r := s.post("/api/v1/configure", body)
		if r.Status != http.StatusBadRequest {
			t.Fatalf("status %d %s", r.Status, r.Raw)
		}
		if o := asObj(t, r.Body); o["code"] != "encryption_unavailable" || o["error"] == "" {
			t.Errorf("body %s", r.Raw)
		}
	}
	if s.queueExists("secret") {
		t.Errorf("refused configure created the queue")
	}
}

// ---- HTTP plumbing, health, metrics ----

func TestHTTPCORSAndOptions(t *testing.T) {
	s := newStack(t)
	for _, path := range []string{"/api/v1/push", "/api/v1/pop/queue/q", "/no/such/path", "/health"} {
		r := s.do(http.MethodOptions, path, nil)
		if r.Status != http.StatusNoContent || len(r.Raw) != 0 {
			t.Errorf("OPTIONS %s: %d %q", path, r.Status, r.Raw)
		}
		checkCORS(t, "OPTIONS "+path, r.Header)
		if r.Header.Get("Access-Control-Max-Age") != "86400" {
			t.Errorf("OPTIONS %s: Access-Control-Max-Age %q", path, r.Header.Get("Access-Control-Max-Age"))
		}
	}
	// Every answer carries the CORS headers, errors included.
	for _, r := range []response{s.do(http.MethodGet, "/health", nil), s.post("/api/v1/push", ""), s.do(http.MethodGet, "/nope", nil),
		s.do(http.MethodGet, "/api/v1/pop/queue/q", nil)} {
		checkCORS(t, fmt.Sprintf("status %d", r.Status), r.Header)
	}
}

func checkCORS(t *testing.T, what string, h http.Header) {
	t.Helper()
	if h.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("%s: Access-Control-Allow-Origin %q", what, h.Get("Access-Control-Allow-Origin"))
	}
	methods := h.Get("Access-Control-Allow-Methods")
	for _, m := range []string{"GET", "POST", "PUT", "DELETE", "OPTIONS"} {
		if !strings.Contains(methods, m) {
			t.Errorf("%s: Access-Control-Allow-Methods %q lacks %s", what, methods, m)
		}
	}
	if got := h.Get("Access-Control-Allow-Headers"); !strings.Contains(got, "Content-Type") || !strings.Contains(got, "Authorization") {
		t.Errorf("%s: Access-Control-Allow-Headers %q", what, got)
	}
}

func TestHTTPUnknownRoute(t *testing.T) {
	s := newStack(t)
	for _, path := range []string{"/nope", "/api/v1/nope", "/api/v2/push"} {
		r := s.do(http.MethodGet, path, nil)
		if r.Status != http.StatusNotFound || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("%s: %d %q %s", path, r.Status, r.Header.Get("Content-Type"), r.Raw)
		}
		if o := asObj(t, r.Body); o["error"] == "" || o["code"] != "not_found" {
			t.Errorf("%s: %s", path, r.Raw)
		}
	}
}

func TestHTTPPrometheus(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "m", "payload": 1}, obj{"queue": "m", "payload": 2})
	s.popOne("/api/v1/pop/queue/m?batch=1")
	r := s.do(http.MethodGet, "/metrics/prometheus", nil)
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("%d %q", r.Status, r.Header.Get("Content-Type"))
	}
	text := string(r.Raw)
	for _, name := range []string{"queen_cluster_push_messages_total", "queen_pop_fill_wait_total",
		"queen_pop_fill_wait_microseconds_total", "queen_cluster_push_requests_total"} {
		if !strings.Contains(text, "\n"+name) {
			t.Errorf("metric %s missing", name)
		}
	}
	if !regexp.MustCompile(`(?m)^queen_cluster_push_messages_total\{scope="cluster"\} 2$`).MatchString(text) {
		t.Errorf("queen_cluster_push_messages_total is not 2:\n%s", grepLines(text, "queen_cluster_push_messages_total"))
	}
	// The pushes' entries are in the log and in no snapshot yet.
	if !regexp.MustCompile(`(?m)^crown_raft_log_bytes_since_snapshot [1-9][0-9]*$`).MatchString(text) {
		t.Errorf("crown_raft_log_bytes_since_snapshot is not positive:\n%s", grepLines(text, "crown_raft_log_bytes_since_snapshot"))
	}
	// This node leads, so it proposed the push's entry (and the queue's);
	// it applied them, committing its state file and writing its pages.
	for _, name := range []string{"crown_commit_entries_total", "crown_commit_commands_total",
		"crown_state_commits_total", "crown_state_pages_written_total"} {
		if !regexp.MustCompile(`(?m)^` + name + ` [1-9][0-9]*$`).MatchString(text) {
			t.Errorf("%s is not positive:\n%s", name, grepLines(text, name))
		}
	}
	// The stack commits its state file after every batch: the pop's look
	// found no open transaction and read a view.
	for read, n := range map[string]string{"open_transaction": "0", "view": "[1-9][0-9]*", "gave_up": "0"} {
		if !regexp.MustCompile(`(?m)^crown_pop_looks_total\{read="` + read + `"\} ` + n + `$`).MatchString(text) {
			t.Errorf("crown_pop_looks_total{read=%q} is not %s:\n%s", read, n, grepLines(text, "crown_pop_looks_total"))
		}
	}
	if !regexp.MustCompile(`(?m)^crown_commit_lingered_total [0-9]+$`).MatchString(text) {
		t.Errorf("crown_commit_lingered_total missing:\n%s", grepLines(text, "crown_commit_lingered_total"))
	}
	status, body := s.get("/metrics")
	if status != http.StatusOK {
		t.Fatalf("/metrics %d", status)
	}
	m := asObj(t, body)
	wantKeys(t, "/metrics", m, "uptime", "requests", "messages", "database", "memory", "cpu")
	// The process figures are measured, not placeholders: a running
	// server holds memory and has used CPU (Node's process.cpuUsage(), in
	// microseconds, is what Queen reports).
	// The server runs in this process: its rss is this process's resident
	// size, read by the kernel around the request (not the Go runtime's
	// reserved memory, which it reported before).
	rss := asInt(t, asObj(t, m["memory"])["rss"])
	if kernel, ok := statmResident(t); ok {
		if float64(rss) < 0.8*float64(kernel) || float64(rss) > 1.25*float64(kernel) {
			t.Errorf("/metrics memory.rss %d, want about the kernel's resident size %d", rss, kernel)
		}
	} else if rss <= 0 {
		t.Errorf("/metrics memory.rss %d, want the resident size", rss)
	}
	if cpu := asObj(t, m["cpu"]); asInt(t, cpu["user"])+asInt(t, cpu["system"]) <= 0 {
		t.Errorf("/metrics cpu %v, want the CPU time used so far", cpu)
	}
}

// queen-api.md 3.1: "connected" means a leader is known and the local store
// is open. A node whose state can no longer be read is unhealthy, so a load
// balancer stops sending it requests it could not serve.
func TestHealthReportsAClosedStore(t *testing.T) {
	s := newStack(t)
	if status, _ := s.get("/health"); status != http.StatusOK {
		t.Fatalf("/health %d before the store closed, want 200", status)
	}
	if err := s.State.Close(); err != nil {
		t.Fatal(err)
	}
	status, body := s.get("/health")
	if o := asObj(t, body); status != http.StatusServiceUnavailable || o["status"] != "unhealthy" || o["database"] != "disconnected" {
		t.Errorf("/health with the local store closed: %d %v, want 503 unhealthy disconnected", status, o)
	}
}

func grepLines(text, needle string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, needle) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestHTTPDigest(t *testing.T) {
	s := newStack(t)
	_, before := s.get("/internal/v1/digest")
	s.push(obj{"queue": "d", "payload": 1})
	status, body := s.get("/internal/v1/digest")
	if status != http.StatusOK {
		t.Fatalf("digest %d", status)
	}
	o := asObj(t, body)
	if o["node_id"] != "node1" || asInt(t, o["applied_index"]) <= asInt(t, asObj(t, before)["applied_index"]) {
		t.Errorf("digest %v (before %v)", o, before)
	}
	if d, _ := o["digest"].(string); !hex64RE.MatchString(d) {
		t.Errorf("digest %v, want 64 hex characters", o["digest"])
	}
	if o["digest"] == asObj(t, before)["digest"] {
		t.Errorf("digest unchanged by a push")
	}
}

func TestHTTPHealth(t *testing.T) {
	s := newStack(t)
	status, body := s.get("/health")
	if status != http.StatusOK {
		t.Fatalf("health %d", status)
	}
	o := asObj(t, body)
	raft := asObj(t, o["raft"])
	if o["status"] != "healthy" || o["node_id"] != "node1" || raft["state"] != "Leader" || raft["leader_id"] != "node1" ||
		raft["leader_http"] != s.URL {
		t.Errorf("health %v", o)
	}
}

func TestHTTPEmptyPartitionName(t *testing.T) {
	s := newStack(t)
	res := s.push(obj{"queue": "ep", "partition": "", "payload": 1}, obj{"queue": "ep", "payload": 2},
		obj{"queue": "ep", "partition": nil, "payload": 3})
	empty, def, null := asObj(t, res[0]), asObj(t, res[1]), asObj(t, res[2])
	if empty["partition_id"] == def["partition_id"] || def["partition_id"] != null["partition_id"] {
		t.Errorf("partition \"\" must be distinct from Default, and null must mean Default: %v %v %v", empty, def, null)
	}
	p := s.pop("/api/v1/pop/queue/ep?batch=10&partitions=10")
	names := map[any]int{}
	for _, v := range asArr(t, p["messages"]) {
		names[asObj(t, v)["partition"]]++
	}
	if len(names) != 2 || names[""] != 1 || names["Default"] != 2 {
		t.Errorf("partitions delivered %v", names)
	}
}

func TestHTTPLongPollWakesOnLeaseRelease(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "rel", "payload": 1, "transactionId": "t1"})
	m := s.popOne("/api/v1/pop/queue/rel?consumerGroup=g")
	go func() {
		time.Sleep(400 * time.Millisecond)
		b, _ := json.Marshal(obj{"transactionId": "t1", "partitionId": m["partitionId"], "leaseId": m["leaseId"],
			"status": "retry", "consumerGroup": "g"})
		resp, err := http.Post(s.URL+"/api/v1/ack", "application/json", bytes.NewReader(b))
		if err == nil {
			resp.Body.Close()
		}
	}()
	start := time.Now()
	r := s.do(http.MethodGet, "/api/v1/pop/queue/rel?consumerGroup=g&wait=true&timeout=4000", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("parked pop answered %d after %v, want the released message", r.Status, time.Since(start))
	}
	if el := time.Since(start); el > 2500*time.Millisecond {
		t.Errorf("parked pop woke %v after arrival; the release came at 0.4 s", el)
	}
	again := asObj(t, asArr(t, asObj(t, r.Body)["messages"])[0])
	if again["transactionId"] != "t1" || asInt(t, again["retryCount"]) != 0 {
		t.Errorf("redelivery %v (a retry does not charge the budget)", again)
	}
}

func TestHTTPMinPopWaitTime(t *testing.T) {
	s := newStack(t)
	s.configure(obj{"queue": "fill", "options": obj{"minPopWaitTime": 800}})
	s.push(obj{"queue": "fill", "payload": 1})
	go func() {
		time.Sleep(200 * time.Millisecond)
		b, _ := json.Marshal(obj{"items": arr{obj{"queue": "fill", "payload": 2}}})
		resp, err := http.Post(s.URL+"/api/v1/push", "application/json", bytes.NewReader(b))
		if err == nil {
			resp.Body.Close()
		}
	}()
	start := time.Now()
	p := s.pop("/api/v1/pop/queue/fill?batch=10&wait=true&timeout=5000")
	elapsed := time.Since(start)
	if p == nil || len(asArr(t, p["messages"])) != 2 {
		t.Errorf("fill-wait pop %v: want both messages (the second arrived during the wait)", p)
	}
	if elapsed < 700*time.Millisecond || elapsed > 3*time.Second {
		t.Errorf("fill-wait pop answered after %v, want about minPopWaitTime (800 ms)", elapsed)
	}
	// Without wait=true (or with batch=1) the option has no effect.
	s.push(obj{"queue": "fill", "payload": 3})
	start = time.Now()
	if p := s.pop("/api/v1/pop/queue/fill?batch=10&consumerGroup=other"); p == nil || time.Since(start) > 500*time.Millisecond {
		t.Errorf("wait=false pop held back %v (%v)", time.Since(start), p)
	}
	r := s.do(http.MethodGet, "/metrics/prometheus", nil)
	if !regexp.MustCompile(`(?m)^queen_pop_fill_wait_total 1$`).Match(r.Raw) {
		t.Errorf("queen_pop_fill_wait_total:\n%s", grepLines(string(r.Raw), "queen_pop_fill_wait"))
	}
}

// brokenCollector yields a metric whose collection fails, as a library's
// malformed metric would.
type brokenCollector struct{ desc *prometheus.Desc }

func (b brokenCollector) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }
func (b brokenCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(b.desc, errors.New("malformed by its library"))
}

// A metric that cannot be gathered costs that metric, not the scrape: the
// registry also holds metrics libraries shape (crownd's crown_raft_*).
func TestHTTPPrometheusServesAroundABrokenMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(brokenCollector{prometheus.NewDesc("library_broken", "a metric its library broke", nil, nil)})
	s := newStack(t, func(c *httpapi.Config) { c.Registry = reg })
	s.push(obj{"queue": "m", "payload": 1})
	r := s.do(http.MethodGet, "/metrics/prometheus", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("/metrics/prometheus with a broken metric: %d %s", r.Status, r.Raw)
	}
	text := string(r.Raw)
	if !regexp.MustCompile(`(?m)^crown_commit_entries_total [1-9][0-9]*$`).MatchString(text) {
		t.Errorf("the other metrics are missing:\n%s", text)
	}
	if strings.Contains(text, "library_broken") {
		t.Errorf("the broken metric was served:\n%s", grepLines(text, "library_broken"))
	}
}

// statmResident is this process's resident size from /proc/self/statm
// (false where there is no /proc).
func statmResident(t *testing.T) (int64, bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		t.Fatalf("/proc/self/statm: %q", b)
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize()), true
}
