package httpapi

// queen-api.md sections 1, 2 and 3.1 to 3.5 (names, Prometheus families,
// JSON limits) driven over real HTTP against one in-process node (real
// state machine, real single-node Raft over TCP).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/crownmq/crown/httpapi/jsonscan"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/raftnode"
)

type convNode struct {
	t      testing.TB
	url    string
	state  *fsm.FSM
	client *http.Client
}

type convResp struct {
	status int
	header http.Header
	raw    []byte
	body   any
}

func newConvNode(t testing.TB) *convNode {
	t.Helper()
	dir := t.TempDir()
	const nodeID = "node1"
	state, err := fsm.Open(fsm.Config{Dir: filepath.Join(dir, "state"), NodeID: nodeID})
	if err != nil {
		t.Fatalf("fsm.Open: %v", err)
	}
	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := rl.Addr().String()
	rl.Close()
	node, err := raftnode.New(raftnode.Config{NodeID: nodeID, RaftAddr: raftAddr, DataDir: dir,
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond}, state)
	if err != nil {
		state.Close()
		t.Fatalf("raftnode.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{NodeID: nodeID, AdvertiseURL: "http://" + ln.Addr().String(), RaftAddr: raftAddr,
		Hotlist: true, WindowBatch: 100, Version: "test"}
	api := New(cfg, node, state)
	srv := httptest.NewUnstartedServer(api.Handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	ctx, cancel := context.WithCancel(context.Background())
	registered := make(chan struct{})
	go func() { defer close(registered); api.KeepRegistered(ctx) }()
	n := &convNode{t: t, url: srv.URL, state: state, client: &http.Client{Timeout: 30 * time.Second}}
	t.Cleanup(func() {
		cancel()
		<-registered
		api.Drain()
		srv.Close()
		node.Shutdown()
		state.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if node.IsLeader() {
			if r := n.do(http.MethodGet, "/health", nil, nil); r.status == http.StatusOK {
				return n
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not healthy within 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (n *convNode) do(method, path string, body []byte, hdr map[string]string) convResp {
	n.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, n.url+path, rd)
	if err != nil {
		n.t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := convResp{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if dec.Decode(&r.body) != nil {
			r.body = nil
		}
	}
	return r
}

func (n *convNode) post(path, body string) convResp {
	n.t.Helper()
	return n.do(http.MethodPost, path, []byte(body), map[string]string{"Content-Type": "application/json"})
}

func (n *convNode) get(path string) convResp {
	n.t.Helper()
	return n.do(http.MethodGet, path, nil, nil)
}

// ---- helpers ----

// noRedirect sends one request and returns the first answer, never
// following a redirect (so a 301 shows as a 301).
func (n *convNode) noRedirect(method, path string) convResp {
	n.t.Helper()
	c := &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(method, n.url+path, nil)
	if err != nil {
		n.t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := convResp{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if dec.Decode(&r.body) != nil {
			r.body = nil
		}
	}
	return r
}

func (n *convNode) mustStatus(r convResp, want int, what string) map[string]any {
	n.t.Helper()
	if r.status != want {
		n.t.Fatalf("%s: status %d, want %d; body %.300s", what, r.status, want, r.raw)
	}
	o, _ := r.body.(map[string]any)
	return o
}

// scrape returns the Prometheus text of the node.
func (n *convNode) scrape() (string, http.Header) {
	n.t.Helper()
	r := n.do(http.MethodGet, "/metrics/prometheus", nil, map[string]string{"Accept": "application/json"})
	if r.status != http.StatusOK {
		n.t.Fatalf("/metrics/prometheus: %d", r.status)
	}
	return string(r.raw), r.header
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
	n := newConvNode(t)
	r := n.post("/api/v1/push", `{"items":[{"queue":".","payload":1},{"queue":"..","payload":2},{"queue":"keep","payload":3}]}`)
	n.mustStatus(r, http.StatusCreated, "push to . and ..")
	// The group g reads both ".." and "keep" (through %2E%2E, which is not cleaned).
	n.mustStatus(n.get("/api/v1/pop/queue/keep?consumerGroup=g&autoAck=true"), http.StatusOK, "pop keep")
	n.mustStatus(n.get("/api/v1/pop/queue/%2E%2E?consumerGroup=g&autoAck=true"), http.StatusOK, "pop %2E%2E")

	// Queue detail of ".": answered 301 to /api/v1/resources/queues (the list).
	r = n.noRedirect(http.MethodGet, "/api/v1/resources/queues/.")
	if o, _ := r.body.(map[string]any); r.status != http.StatusOK || o["name"] != "." {
		t.Errorf("GET /api/v1/resources/queues/. = %d (Location %q) %.200s; want 200 with the detail of queue \".\"",
			r.status, r.header.Get("Location"), r.raw)
	}
	// Pop of "..": answered 301 to /api/v1/pop (the discovery form, a 400).
	r = n.noRedirect(http.MethodGet, "/api/v1/pop/queue/..?consumerGroup=h")
	if o, _ := r.body.(map[string]any); r.status != http.StatusOK || o["queue"] != ".." {
		t.Errorf("GET /api/v1/pop/queue/.. = %d (Location %q) %.200s; want 200 delivering the message of queue \"..\"",
			r.status, r.header.Get("Location"), r.raw)
	}
	// Deleting g's state on queue "..": answered 301 to
	// /api/v1/consumer-groups/g. Go's http.Client follows a 301 of a DELETE
	// as a GET, so the Go client receives 200 with g's detail and reports
	// the deletion done, while nothing was deleted.
	r = n.noRedirect(http.MethodDelete, "/api/v1/consumer-groups/g/queues/..")
	if o, _ := r.body.(map[string]any); r.status != http.StatusOK || o["queueName"] != ".." {
		t.Errorf("DELETE /api/v1/consumer-groups/g/queues/.. = %d (Location %q) %.200s; want 200 deleting g on queue \"..\" only",
			r.status, r.header.Get("Location"), r.raw)
	}
}

// ---- section 3.3: Prometheus ----

// queen-api.md 3.3: "/metrics/prometheus answers text/plain; version=0.0.4;
// charset=utf-8" (also 1.1: "`/metrics/prometheus` answers
// `text/plain; version=0.0.4; charset=utf-8`").
func TestConvPrometheusContentType(t *testing.T) {
	n := newConvNode(t)
	_, h := n.scrape()
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
	n := newConvNode(t)
	n.mustStatus(n.post("/api/v1/configure", `{"queue":"dq","options":{"retryLimit":0}}`), http.StatusOK, "configure")
	n.mustStatus(n.post("/api/v1/push", `{"items":[{"queue":"dq","payload":1,"transactionId":"poison"}]}`), http.StatusCreated, "push")
	p := n.mustStatus(n.get("/api/v1/pop/queue/dq?consumerGroup=billing"), http.StatusOK, "pop")
	m := p["messages"].([]any)[0].(map[string]any)
	ack := fmt.Sprintf(`{"transactionId":"poison","partitionId":%q,"leaseId":%q,"status":"failed","consumerGroup":"billing"}`,
		m["partitionId"], m["leaseId"])
	n.mustStatus(n.post("/api/v1/ack", ack), http.StatusOK, "failed ack")
	dlq := n.mustStatus(n.get("/api/v1/dlq?queue=dq"), http.StatusOK, "dlq")
	if fmt.Sprint(dlq["total"]) != "1" {
		t.Fatalf("precondition: dlq total %v, want 1", dlq["total"])
	}
	text, _ := n.scrape()
	for _, want := range []string{`queen_dlq_depth{scope="cluster"} 1`, `queen_dlq_depth_by_queue{queue="dq"} 1`} {
		if !strings.Contains(text, "\n"+want+"\n") {
			t.Errorf("metric line %q missing; queen dlq lines:\n%s", want, convGrep(text, "queen_"+"dlq"))
		}
	}
}

// queen-api.md 3.3: "process: queen_uptime_seconds,
// queen_cpu_user_microseconds_total, queen_cpu_system_microseconds_total,
// queen_process_resident_memory_bytes, queen_process_virtual_memory_bytes"
// are names "to keep where the concept exists in this broker": beside the
// client library's process_* names, so that a Queen dashboard shows them.
func TestConvPrometheusProcessFamilies(t *testing.T) {
	n := newConvNode(t)
	text, _ := n.scrape()
	for _, name := range []string{"queen_cpu_user_microseconds_total", "queen_cpu_system_microseconds_total",
		"queen_process_resident_memory_bytes", "queen_process_virtual_memory_bytes"} {
		if !strings.Contains(text, "\n"+name+" ") && !strings.Contains(text, "\n"+name+"{") {
			t.Errorf("family %s missing; the same figures are exported only as: %s | %s", name,
				convGrep(text, "process_cpu_seconds_total"), convGrep(text, "process_resident_memory_bytes"))
		}
	}
}

// queen-api.md 3.3: "per queue (label queue), gauges ...:
// ..., queen_queue_parked_consumers, ...": one series per queue waited on,
// not one node-wide gauge.
func TestConvPrometheusParkedConsumersByQueue(t *testing.T) {
	n := newConvNode(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get(n.url + "/api/v1/pop/queue/pk?wait=true&timeout=3000")
		if err == nil {
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	var text string
	for time.Now().Before(deadline) {
		text, _ = n.scrape()
		if strings.Contains(text, "\nqueen_queue_parked_consumers 1\n") || strings.Contains(text, `queen_queue_parked_consumers{queue="pk"} 1`) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(text, `queen_queue_parked_consumers{queue="pk"} 1`) {
		t.Errorf("want queen_queue_parked_consumers{queue=\"pk\"} 1 while one pop is parked on queue pk; got:\n%s",
			convGrep(text, "queen_queue_parked_consumers"))
	}
	<-done
}

func convGrep(text, needle string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, needle) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// ---- section 1.2 / 3.5: valid JSON called invalid ----

// queen-api.md 3.5: payload is "any JSON value ... Stored and returned
// verbatim"; 1.2: "a body that is not valid JSON answers 400 with an error
// string that starts with Invalid JSON". A payload nested 998 deep (a 2 KB
// body) is valid JSON and is stored; nesting has a limit (the README's
// limits table, 10,000 as encoding/json), refused as limit_exceeded, not as
// invalid JSON.
func TestConvDeepPayloadStored(t *testing.T) {
	n := newConvNode(t)
	payload := strings.Repeat("[", 998) + "1" + strings.Repeat("]", 998)
	if !json.Valid([]byte(payload)) {
		t.Fatal("precondition: payload is not valid JSON")
	}
	r := n.post("/api/v1/push", `{"items":[{"queue":"deep","payload":`+payload+`}]}`)
	if r.status != http.StatusCreated {
		t.Errorf("push of a valid payload nested 998 deep: %d %s; want 201", r.status, r.raw)
	}
	deep := strings.Repeat("[", jsonscan.MaxDepth) + "1" + strings.Repeat("]", jsonscan.MaxDepth)
	r = n.post("/api/v1/push", `{"items":[{"queue":"deep","payload":`+deep+`}]}`)
	if o, _ := r.body.(map[string]any); r.status != http.StatusBadRequest || o["code"] != "limit_exceeded" {
		t.Errorf("push nested %d deep: %d %.200s; want 400 limit_exceeded", jsonscan.MaxDepth+2, r.status, r.raw)
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
	n := newConvNode(t)
	n.mustStatus(n.post("/api/v1/push", `{"items":[{"queue":"lg","payload":1}]}`), http.StatusCreated, "push")
	long := strings.Repeat("g", 256)
	r := n.get("/api/v1/pop/queue/lg?consumerGroup=" + long)
	o, _ := r.body.(map[string]any)
	if r.status != http.StatusBadRequest || o["code"] != "limit_exceeded" || o["field"] != "consumerGroup" {
		t.Errorf("pop with a 256-byte consumerGroup on a queue holding a message: %d %q; want 400 limit_exceeded naming consumerGroup",
			r.status, r.raw)
	}
	// The same group one byte shorter is served: the message is deliverable.
	n.mustStatus(n.get("/api/v1/pop/queue/lg?consumerGroup="+long[:255]), http.StatusOK, "pop with a 255-byte group")
}
