package httpapi_test

// queen-api.md sections 1, 2 and 3.1 to 3.5 (names, Prometheus families,
// JSON limits) driven over real HTTP against one in-process node (real
// state machine, real single-node Raft over TCP).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/httpapi/jsonscan"
)

// ---- helpers ----

// convNoRedirect sends one request and returns the first answer, never
// following a redirect (so a 301 shows as a 301).
func convNoRedirect(s *stack, method, path string) response {
	s.t.Helper()
	c := *s
	c.client = &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return c.do(method, path, nil)
}

// convScrape returns the Prometheus text of the node and the answer's header.
func convScrape(s *stack) (string, http.Header) {
	s.t.Helper()
	r := s.do(http.MethodGet, "/metrics/prometheus", nil)
	if r.Status != http.StatusOK {
		s.t.Fatalf("/metrics/prometheus: %d", r.Status)
	}
	return string(r.Raw), r.Header
}

// ---- section 1.2: path parameters ----

// queen-api.md 1.2: "Path parameters ({queue}, {partition}, {leaseId},
// {group}, …) MUST be percent-decoded. The Go client escapes them with
// url.PathEscape; the JavaScript client sends queue and partition names in
// pop paths unescaped." Section 2 / 3.4: a queue name is any string, and
// a push creates "." and ".." like any other name (201). url.PathEscape
// leaves dots alone, so the clients address such a queue as
// /api/v1/resources/queues/. and /api/v1/pop/queue/.. ; the router must
// hand those segments to the handler as names, not clean them as
// filesystem paths and redirect elsewhere.
func TestConvDotNamesAreNames(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": ".", "payload": 1}, obj{"queue": "..", "payload": 2}, obj{"queue": "keep", "payload": 3})
	// The group g reads both ".." and "keep" (through %2E%2E, which is not cleaned).
	s.getOK("/api/v1/pop/queue/keep?consumerGroup=g&autoAck=true")
	s.getOK("/api/v1/pop/queue/%2E%2E?consumerGroup=g&autoAck=true")

	// Queue detail of ".": answered 301 to /api/v1/resources/queues (the list).
	r := convNoRedirect(s, http.MethodGet, "/api/v1/resources/queues/.")
	if o, _ := r.Body.(map[string]any); r.Status != http.StatusOK || o["name"] != "." {
		t.Errorf("GET /api/v1/resources/queues/. = %d (Location %q) %.200s; want 200 with the detail of queue \".\"",
			r.Status, r.Header.Get("Location"), r.Raw)
	}
	// Pop of "..": answered 301 to /api/v1/pop (the discovery form, a 400).
	r = convNoRedirect(s, http.MethodGet, "/api/v1/pop/queue/..?consumerGroup=h")
	if o, _ := r.Body.(map[string]any); r.Status != http.StatusOK || o["queue"] != ".." {
		t.Errorf("GET /api/v1/pop/queue/.. = %d (Location %q) %.200s; want 200 delivering the message of queue \"..\"",
			r.Status, r.Header.Get("Location"), r.Raw)
	}
	// Deleting g's state on queue "..": answered 301 to
	// /api/v1/consumer-groups/g. Go's http.Client follows a 301 of a DELETE
	// as a GET, so the Go client receives 200 with g's detail and reports
	// the deletion done, while nothing was deleted.
	r = convNoRedirect(s, http.MethodDelete, "/api/v1/consumer-groups/g/queues/..")
	if o, _ := r.Body.(map[string]any); r.Status != http.StatusOK || o["queueName"] != ".." {
		t.Errorf("DELETE /api/v1/consumer-groups/g/queues/.. = %d (Location %q) %.200s; want 200 deleting g on queue \"..\" only",
			r.Status, r.Header.Get("Location"), r.Raw)
	}
}

// ---- section 3.3: Prometheus ----

// queen-api.md 3.3: "/metrics/prometheus answers text/plain; version=0.0.4;
// charset=utf-8" (also 1.1: "`/metrics/prometheus` answers
// `text/plain; version=0.0.4; charset=utf-8`").
func TestConvPrometheusContentType(t *testing.T) {
	s := newStack(t)
	_, h := convScrape(s)
	if got := h.Get("Content-Type"); got != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("Content-Type %q, want exactly \"text/plain; version=0.0.4; charset=utf-8\"", got)
	}
}

// queen-api.md 3.3: Queen's families "which dashboards and alert rules
// written for Queen expect (names to keep where the concept exists in this
// broker)", among them "dead letters: queen_dlq_depth{scope="cluster"},
// queen_dlq_depth_by_queue{queue}": Crown has dead letters (GET
// /api/v1/dlq counts them), so it exports both gauges.
func TestConvPrometheusDLQDepth(t *testing.T) {
	s := newStack(t)
	s.configure(obj{"queue": "dq", "options": obj{"retryLimit": 0}})
	s.push(obj{"queue": "dq", "payload": 1, "transactionId": "poison"})
	m := s.popOne("/api/v1/pop/queue/dq?consumerGroup=billing")
	s.ack(obj{"transactionId": "poison", "partitionId": m["partitionId"], "leaseId": m["leaseId"],
		"status": "failed", "consumerGroup": "billing"})
	dlq := asObj(t, s.getOK("/api/v1/dlq?queue=dq"))
	if fmt.Sprint(dlq["total"]) != "1" {
		t.Fatalf("precondition: dlq total %v, want 1", dlq["total"])
	}
	text, _ := convScrape(s)
	for _, want := range []string{`queen_dlq_depth{scope="cluster"} 1`, `queen_dlq_depth_by_queue{queue="dq"} 1`} {
		if !strings.Contains(text, "\n"+want+"\n") {
			t.Errorf("metric line %q missing; queen dlq lines:\n%s", want, grepLines(text, "queen_"+"dlq"))
		}
	}
}

// queen-api.md 3.3: "process: queen_uptime_seconds,
// queen_cpu_user_microseconds_total, queen_cpu_system_microseconds_total,
// queen_process_resident_memory_bytes, queen_process_virtual_memory_bytes"
// are names "to keep where the concept exists in this broker": beside the
// client library's process_* names, so that a Queen dashboard shows them.
func TestConvPrometheusProcessFamilies(t *testing.T) {
	s := newStack(t)
	text, _ := convScrape(s)
	for _, name := range []string{"queen_cpu_user_microseconds_total", "queen_cpu_system_microseconds_total",
		"queen_process_resident_memory_bytes", "queen_process_virtual_memory_bytes"} {
		if !strings.Contains(text, "\n"+name+" ") && !strings.Contains(text, "\n"+name+"{") {
			t.Errorf("family %s missing; the same figures are exported only as: %s | %s", name,
				grepLines(text, "process_cpu_seconds_total"), grepLines(text, "process_resident_memory_bytes"))
		}
	}
}

// queen-api.md 3.3: "per queue (label queue), gauges ...:
// ..., queen_queue_parked_consumers, ...": one series per queue waited on,
// not one node-wide gauge.
func TestConvPrometheusParkedConsumersByQueue(t *testing.T) {
	s := newStack(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get(s.URL + "/api/v1/pop/queue/pk?wait=true&timeout=3000")
		if err == nil {
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	var text string
	for time.Now().Before(deadline) {
		text, _ = convScrape(s)
		if strings.Contains(text, "\nqueen_queue_parked_consumers 1\n") || strings.Contains(text, `queen_queue_parked_consumers{queue="pk"} 1`) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(text, `queen_queue_parked_consumers{queue="pk"} 1`) {
		t.Errorf("want queen_queue_parked_consumers{queue=\"pk\"} 1 while one pop is parked on queue pk; got:\n%s",
			grepLines(text, "queen_queue_parked_consumers"))
	}
	<-done
}

// ---- section 1.2 / 3.5: valid JSON called invalid ----

// queen-api.md 3.5: payload is "any JSON value ... Stored and returned
// verbatim"; 1.2: "a body that is not valid JSON answers 400 with an error
// string that starts with Invalid JSON". A payload nested 998 deep (a 2 KB
// body) is valid JSON and is stored; nesting has a limit (the README's
// limits table, 10,000 as encoding/json), refused as limit_exceeded, not as
// invalid JSON.
func TestConvDeepPayloadStored(t *testing.T) {
	s := newStack(t)
	payload := strings.Repeat("[", 998) + "1" + strings.Repeat("]", 998)
	if !json.Valid([]byte(payload)) {
		t.Fatal("precondition: payload is not valid JSON")
	}
	r := s.post("/api/v1/push", `{"items":[{"queue":"deep","payload":`+payload+`}]}`)
	if r.Status != http.StatusCreated {
		t.Errorf("push of a valid payload nested 998 deep: %d %s; want 201", r.Status, r.Raw)
	}
	deep := strings.Repeat("[", jsonscan.MaxDepth) + "1" + strings.Repeat("]", jsonscan.MaxDepth)
	r = s.post("/api/v1/push", `{"items":[{"queue":"deep","payload":`+deep+`}]}`)
	if o, _ := r.Body.(map[string]any); r.Status != http.StatusBadRequest || o["code"] != "limit_exceeded" {
		t.Errorf("push nested %d deep: %d %.200s; want 400 limit_exceeded", jsonscan.MaxDepth+2, r.Status, r.Raw)
	}
}

// ---- section 1.2: names over 255 bytes ----

// queen-api.md 1.2: "Queue names, partition names, consumer-group names and
// transaction ids are case-sensitive strings of at most 255 bytes in
// Queen's storage. A longer value MUST be rejected with 400 and nothing
// written"; the README's limits table: consumer-group strings over 255
// bytes are "400 limit_exceeded". A 204 (as if nothing were deliverable)
// would leave the consumer looping on "empty" for ever, never told its
// group name is refused. (3.6's "no 4xx for bad parameter values" covers
// values that fall back to defaults; this one falls back to nothing.)
func TestConvPopLongConsumerGroupRefused(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "lg", "payload": 1})
	long := strings.Repeat("g", 256)
	r := s.do(http.MethodGet, "/api/v1/pop/queue/lg?consumerGroup="+long, nil)
	o, _ := r.Body.(map[string]any)
	if r.Status != http.StatusBadRequest || o["code"] != "limit_exceeded" || o["field"] != "consumerGroup" {
		t.Errorf("pop with a 256-byte consumerGroup on a queue holding a message: %d %q; want 400 limit_exceeded naming consumerGroup",
			r.Status, r.Raw)
	}
	// The same group one byte shorter is served: the message is deliverable.
	s.getOK("/api/v1/pop/queue/lg?consumerGroup=" + long[:255])
}
