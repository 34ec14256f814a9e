package httpapi_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

func (s *stack) addTrace(body obj) obj {
	s.t.Helper()
	r := s.post("/api/v1/traces", body)
	if r.Status != http.StatusCreated {
		s.t.Fatalf("trace: status %d body %s", r.Status, r.Raw)
	}
	o := asObj(s.t, r.Body)
	wantKeys(s.t, "trace answer", o, "success", "traceId")
	if o["success"] != true {
		s.t.Fatalf("trace answer %s", r.Raw)
	}
	wantUUID(s.t, "traceId", o["traceId"])
	return o
}

func eventTypes(t *testing.T, traces any) []string {
	t.Helper()
	var out []string
	for _, tr := range asArr(t, traces) {
		out = append(out, asStr(t, asObj(t, tr)["event_type"]))
	}
	return out
}

func TestHTTPTraces(t *testing.T) {
	s := newStack(t)
	res := s.push(obj{"queue": "orders", "partition": "p1", "transactionId": "t1", "payload": obj{"n": 1}},
		obj{"queue": "orders", "partition": "p1", "transactionId": "t2", "payload": "two"})
	pid := asStr(t, asObj(t, res[0])["partition_id"])

	first := s.addTrace(obj{"transactionId": "t1", "partitionId": pid, "consumerGroup": "billing",
		"traceNames": arr{"tenant-acme", "checkout", "", "checkout"}, "eventType": "received",
		"data": obj{"step": "charged"}, "workerId": "w-1"})
	time.Sleep(5 * time.Millisecond)
	s.addTrace(obj{"transactionId": "t1", "partitionId": pid, "data": "plain", "traceNames": "checkout",
		"consumerGroup": nil, "eventType": nil})
	time.Sleep(5 * time.Millisecond)
	s.addTrace(obj{"transactionId": "t2", "partitionId": pid, "data": 7, "traceNames": arr{"tenant-acme"}, "eventType": "t2"})

	// The message's events, oldest first, in the documented shape.
	code, body := s.get("/api/v1/traces/" + pid + "/t1")
	if code != http.StatusOK {
		t.Fatalf("message traces: %d %v", code, body)
	}
	o := asObj(t, body)
	wantKeys(t, "message traces", o, "traces")
	list := asArr(t, o["traces"])
	if got := eventTypes(t, list); strings.Join(got, ",") != "received,info" {
		t.Fatalf("events %v", got)
	}
	e0, e1 := asObj(t, list[0]), asObj(t, list[1])
	wantKeys(t, "trace", e0, "id", "event_type", "data", "consumer_group", "worker_id", "created_at", "trace_names")
	if e0["id"] != first["traceId"] || e0["consumer_group"] != "billing" || e0["worker_id"] != "w-1" ||
		asObj(t, e0["data"])["step"] != "charged" || fmt.Sprint(e0["trace_names"]) != "[tenant-acme checkout]" {
		t.Errorf("first event %v", e0)
	}
	if _, err := time.Parse(time.RFC3339, asStr(t, e0["created_at"])); err != nil {
		t.Errorf("created_at: %v", err)
	}
	if e1["consumer_group"] != "__QUEUE_MODE__" || e1["data"] != "plain" || e1["worker_id"] != nil ||
		fmt.Sprint(e1["trace_names"]) != "[checkout]" {
		t.Errorf("defaults %v", e1)
	}
	if _, body := s.get("/api/v1/traces/" + pid + "/unknown"); len(asArr(t, asObj(t, body)["traces"])) != 0 {
		t.Errorf("traces of an unknown message: %v", body)
	}

	// By name: oldest first, with the message, paginated.
	code, body = s.get("/api/v1/traces/by-name/tenant-acme")
	o = asObj(t, body)
	if code != http.StatusOK || asInt(t, o["total"]) != 2 {
		t.Fatalf("by name: %d %v", code, body)
	}
	wantKeys(t, "by name", o, "traces", "total", "pagination")
	if p := asObj(t, o["pagination"]); asInt(t, p["limit"]) != 100 || asInt(t, p["offset"]) != 0 {
		t.Errorf("default pagination %v", p)
	}
	list = asArr(t, o["traces"])
	if got := eventTypes(t, list); strings.Join(got, ",") != "received,t2" {
		t.Fatalf("by name %v", got)
	}
	e := asObj(t, list[1])
	wantKeys(t, "by-name trace", e, "id", "event_type", "data", "consumer_group", "worker_id", "created_at",
		"trace_names", "transaction_id", "partition_id", "queue_name", "partition_name", "message_payload")
	if e["transaction_id"] != "t2" || e["partition_id"] != pid || e["queue_name"] != "orders" ||
		e["partition_name"] != "p1" || e["message_payload"] != "two" || asInt(t, e["data"]) != 7 {
		t.Errorf("by-name event %v", e)
	}
	_, body = s.get("/api/v1/traces/by-name/tenant-acme?limit=1&offset=1")
	o = asObj(t, body)
	if got := eventTypes(t, o["traces"]); asInt(t, o["total"]) != 2 || strings.Join(got, ",") != "t2" {
		t.Errorf("page %v", body)
	}
	if p := asObj(t, o["pagination"]); asInt(t, p["limit"]) != 1 || asInt(t, p["offset"]) != 1 {
		t.Errorf("pagination %v", p)
	}

	// Names: most recently seen first.
	code, body = s.get("/api/v1/traces/names")
	o = asObj(t, body)
	if code != http.StatusOK || asInt(t, o["total"]) != 2 {
		t.Fatalf("names: %d %v", code, body)
	}
	wantKeys(t, "names", o, "trace_names", "total", "pagination")
	names := asArr(t, o["trace_names"])
	n0, n1 := asObj(t, names[0]), asObj(t, names[1])
	wantKeys(t, "name", n0, "trace_name", "trace_count", "message_count", "last_seen")
	if n0["trace_name"] != "tenant-acme" || asInt(t, n0["trace_count"]) != 2 || asInt(t, n0["message_count"]) != 2 ||
		n1["trace_name"] != "checkout" || asInt(t, n1["trace_count"]) != 2 || asInt(t, n1["message_count"]) != 1 {
		t.Errorf("names %v", names)
	}
	_, body = s.get("/api/v1/traces/names?limit=1&offset=1")
	if names := asArr(t, asObj(t, body)["trace_names"]); len(names) != 1 || asObj(t, names[0])["trace_name"] != "checkout" {
		t.Errorf("names page %v", body)
	}

	// Deleting the queue deletes its traces.
	if r := s.do(http.MethodDelete, "/api/v1/resources/queues/orders", nil); r.Status != http.StatusOK {
		t.Fatalf("delete queue: %d %s", r.Status, r.Raw)
	}
	_, body = s.get("/api/v1/traces/by-name/tenant-acme")
	if asInt(t, asObj(t, body)["total"]) != 0 {
		t.Errorf("traces outlived their queue: %v", body)
	}
	_, body = s.get("/api/v1/traces/names")
	if asInt(t, asObj(t, body)["total"]) != 0 {
		t.Errorf("names outlived their queue: %v", body)
	}
}

func TestHTTPTraceErrors(t *testing.T) {
	s := newStack(t)
	res := s.push(obj{"queue": "q", "transactionId": "t1", "payload": 1})
	pid := asStr(t, asObj(t, res[0])["partition_id"])

	r := s.post("/api/v1/traces", obj{"transactionId": "missing", "partitionId": pid, "data": obj{}})
	if r.Status != http.StatusNotFound {
		t.Fatalf("unknown message: %d %s", r.Status, r.Raw)
	}
	o := asObj(t, r.Body)
	if o["success"] != false || o["error"] != "Message not found" {
		t.Errorf("unknown message body %s", r.Raw)
	}
	r = s.post("/api/v1/traces", obj{"transactionId": "t1", "partitionId": "01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7", "data": 1})
	if r.Status != http.StatusNotFound {
		t.Errorf("unknown partition: %d %s", r.Status, r.Raw)
	}

	many := make(arr, 11)
	for i := range many {
		many[i] = fmt.Sprintf("n%d", i)
	}
	for _, c := range []struct {
		body                 obj
		code, field, message string
	}{
		{obj{"partitionId": pid, "data": 1}, "missing_field", "transactionId", "transactionId is required"},
		{obj{"transactionId": 5, "partitionId": pid, "data": 1}, "invalid_field", "transactionId", "transactionId must be a string"},
		{obj{"transactionId": "t1", "data": 1}, "missing_field", "partitionId", "partitionId is required"},
		{obj{"transactionId": "t1", "partitionId": "nope", "data": 1}, "invalid_field", "partitionId", `partitionId must be a UUID, got "nope"`},
		{obj{"transactionId": "t1", "partitionId": pid}, "missing_field", "data", "data is required"},
		{obj{"transactionId": "t1", "partitionId": pid, "data": nil}, "missing_field", "data", "data is required"},
		{obj{"transactionId": "t1", "partitionId": pid, "data": 1, "eventType": 3}, "invalid_field", "eventType", "eventType must be a string"},
		{obj{"transactionId": "t1", "partitionId": pid, "data": 1, "traceNames": arr{"a", 2}}, "invalid_field", "traceNames[1]", "traceNames[1] must be a string"},
		{obj{"transactionId": "t1", "partitionId": pid, "data": 1, "traceNames": obj{}}, "invalid_field", "traceNames", "traceNames must be a string, an array of strings or null"},
		{obj{"transactionId": "t1", "partitionId": pid, "data": 1, "traceNames": many}, "limit_exceeded", "traceNames", "traceNames holds more than 10 names; the limit is 10 per event"},
		{obj{"transactionId": "t1", "partitionId": pid, "data": 1, "traceNames": strings.Repeat("x", 256)}, "limit_exceeded", "traceNames", "traceNames is 256 bytes long; the limit is 255 bytes"},
		{obj{"transactionId": "t1", "partitionId": pid, "data": strings.Repeat("x", 64<<10)}, "limit_exceeded", "data", "data is 65538 bytes of JSON; the limit is 65536"},
	} {
		wantError(t, s.post("/api/v1/traces", c.body), http.StatusBadRequest, c.code, c.field, c.message)
	}
	wantError(t, s.do(http.MethodGet, "/api/v1/traces/nope/t1", nil), http.StatusBadRequest, "invalid_field", "partitionId",
		`partitionId must be a UUID, got "nope"`)
	wantError(t, s.do(http.MethodGet, "/api/v1/traces/by-name/"+url.PathEscape(strings.Repeat("x", 256)), nil),
		http.StatusBadRequest, "limit_exceeded", "traceName", "traceName is 256 bytes long; the limit is 255 bytes")
	// Nothing was stored by any of them.
	if _, body := s.get("/api/v1/traces/" + pid + "/t1"); len(asArr(t, asObj(t, body)["traces"])) != 0 {
		t.Errorf("a refused trace was stored: %v", body)
	}
}
