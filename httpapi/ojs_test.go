package httpapi_test

// Tests of the OJS queue administration API (ojs-queues.md, Part 1) served
// by the node's HTTP server.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi"
	"github.com/crownmq/crown/httpapi/ojs"
)

// ojsAns is a decoded OJS answer (any content type).
type ojsAns struct {
	Status int
	Header http.Header
	Raw    string
	Body   map[string]any
}

func (s *stack) ojs(method, path, body string, hdr ...string) ojsAns {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := ojsAns{Status: resp.StatusCode, Header: resp.Header, Raw: string(b)}
	if len(bytes.TrimSpace(b)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		dec.Decode(&a.Body)
	}
	return a
}

func (a ojsAns) want(t *testing.T, status int) ojsAns {
	t.Helper()
	if a.Status != status {
		t.Fatalf("status %d, want %d: %s", a.Status, status, a.Raw)
	}
	return a
}

// at reads a value by dotted path.
func (a ojsAns) at(p string) any {
	var v any = a.Body
	for _, k := range strings.Split(p, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func (a ojsAns) num(t *testing.T, p string) int64 {
	t.Helper()
	n, ok := a.at(p).(json.Number)
	if !ok {
		t.Fatalf("%s = %v (%T), want a number: %s", p, a.at(p), a.at(p), a.Raw)
	}
	i, _ := n.Int64()
	return i
}

func (s *stack) qpush(queue, partition string, payloads ...string) {
	s.t.Helper()
	var its []string
	for _, p := range payloads {
		its = append(its, fmt.Sprintf(`{"queue":%q,"partition":%q,"payload":%q}`, queue, partition, p))
	}
	s.ojs("POST", "/api/v1/push", `{"items":[`+strings.Join(its, ",")+`]}`).want(s.t.(*testing.T), 201)
}

// TestOJSRejectDetailsCounts checks that a DELETE with strategy reject of a
// non-empty queue answers 409 queue_not_empty with details {"depth": n,
// "counts": {…}} (ojs-queues.md 6.5), the counts those of the Queue object.
func TestOJSRejectDetailsCounts(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues", `{"name":"rej"}`).want(t, 201)
	s.qpush("rej", "", "a", "b", "c")
	s.ojs("GET", "/api/v1/pop/queue/rej?batch=1&wait=false", "").want(t, 200)
	a := s.ojs("DELETE", "/ojs/v1/queues/rej", "").want(t, 409)
	if a.at("error.type") != "queue_not_empty" {
		t.Fatalf("type %v", a.at("error.type"))
	}
	if _, ok := a.at("error.details.counts").(map[string]any); !ok {
		t.Fatalf("details.counts missing from the queue_not_empty error: %s", a.Raw)
	}
	if d, av, ac := a.num(t, "error.details.depth"), a.num(t, "error.details.counts.available"),
		a.num(t, "error.details.counts.active"); d != 3 || av != 2 || ac != 1 {
		t.Errorf("depth %d, counts.available %d, counts.active %d; want 3, 2, 1: %s", d, av, ac, a.Raw)
	}
	for _, k := range []string{"scheduled", "pending", "retryable"} {
		if a.num(t, "error.details.counts."+k) != 0 {
			t.Errorf("counts.%s is not 0: %s", k, a.Raw)
		}
	}
}

// TestOJSDelete200QueueObject checks that a DELETE that completes at once
// answers 200 {"queue": Queue} with every "always" field of the Queue object
// (ojs-queues.md 6.1, 6.5), state and status "deleted", the last
// configuration and zero counts.
func TestOJSDelete200QueueObject(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues", `{"name":"gone","capacity":{"max_depth":7}}`).want(t, 201)
	a := s.ojs("DELETE", "/ojs/v1/queues/gone", "").want(t, 200)
	q, _ := a.at("queue").(map[string]any)
	var missing []string
	for _, k := range []string{"name", "state", "status", "paused", "origin", "policy", "config", "overrides", "depth",
		"available", "scheduled", "pending", "active", "retryable", "completed", "discarded", "cancelled",
		"dead_lettered", "created_at", "updated_at"} {
		if _, ok := q[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		t.Errorf("DELETE 200 queue object lacks %v: %s", missing, a.Raw)
	}
	if a.at("queue.state") != "deleted" || a.at("queue.status") != "deleted" || a.at("queue.paused") != false ||
		a.at("queue.origin") != "explicit" || a.num(t, "queue.config.capacity.max_depth") != 7 ||
		a.num(t, "queue.overrides.capacity.max_depth") != 7 || a.num(t, "queue.depth") != 0 {
		t.Errorf("DELETE 200 queue object: %s", a.Raw)
	}
	if a.at("strategy") != "reject" || a.num(t, "jobs_affected") != 0 {
		t.Errorf("DELETE 200 envelope: %s", a.Raw)
	}
	s.ojs("GET", "/ojs/v1/queues/gone", "").want(t, 404)
}

// TestOJSOptionsHeaders checks that OPTIONS on an OJS path, which no OJS
// endpoint serves, gets the OJS headers and a 405 with Allow and an error
// body (ojs-queues.md 0.1), while OPTIONS elsewhere stays a CORS preflight.
func TestOJSOptionsHeaders(t *testing.T) {
	s := newStack(t)
	a := s.ojs("OPTIONS", "/ojs/v1/queues", "")
	if a.Header.Get("OJS-Version") != "1.0" || a.Header.Get("Content-Type") != "application/openjobspec+json" ||
		a.Header.Get("X-Request-Id") == "" {
		t.Errorf("OPTIONS /ojs/v1/queues: %d, headers %v, body %q; want the OJS headers", a.Status, a.Header, a.Raw)
	}
	if a.Status != 405 || a.Header.Get("Allow") != "GET, POST" || a.at("error.type") != "method_not_allowed" ||
		a.at("error.request_id") != a.Header.Get("X-Request-Id") {
		t.Errorf("OPTIONS /ojs/v1/queues: %d Allow %q %s; want 405 method_not_allowed", a.Status, a.Header.Get("Allow"), a.Raw)
	}
	if a := s.ojs("OPTIONS", "/ojs/v1/nothing", "", "X-Request-Id", "opt-1"); a.Status != 404 ||
		a.Header.Get("X-Request-Id") != "opt-1" || a.Header.Get("Content-Type") != "application/openjobspec+json" {
		t.Errorf("OPTIONS on an unknown OJS route: %d %v %s", a.Status, a.Header, a.Raw)
	}
	if a := s.ojs("OPTIONS", "/api/v1/push", ""); a.Status != 204 || a.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("OPTIONS /api/v1/push: %d %v; want the CORS 204", a.Status, a.Header)
	}
}

// TestOJSCreateStateMessageNamesField checks that the error message of a
// create with a bad state names the field (ojs-queues.md 0.5).
func TestOJSCreateStateMessageNamesField(t *testing.T) {
	s := newStack(t)
	a := s.ojs("POST", "/ojs/v1/queues", `{"name":"stq","state":"draining"}`).want(t, 422)
	if msg, _ := a.at("error.message").(string); msg != `state must be active or paused, not "draining"` {
		t.Errorf("message %q does not name the field state (details.field %v)", msg, a.at("error.details.field"))
	}
	if a.at("error.details.field") != "state" {
		t.Errorf("details.field %v", a.at("error.details.field"))
	}
}

// TestOJSStrictMoveUnknownTarget checks that in strict mode
// (--ojs-strict-queues) a DELETE with strategy move to an unknown target is
// a 404 and changes nothing (ojs-queues.md 6.5, 4.3).
func TestOJSStrictMoveUnknownTarget(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.OJSStrict = true })
	s.ojs("POST", "/ojs/v1/queues", `{"name":"src"}`).want(t, 201)
	s.qpush("src", "", "a")
	a := s.ojs("DELETE", "/ojs/v1/queues/src?strategy=move&target_queue=nowhere", "")
	if a.Status != 404 || a.at("error.type") != "queue_not_found" {
		t.Errorf("strict mode, move to an unknown target: %d %s, want 404", a.Status, a.Raw)
	}
	if g := s.ojs("GET", "/ojs/v1/queues/nowhere", ""); g.Status != 404 {
		t.Errorf("strict mode: the move created the target queue")
	}
	if g := s.ojs("GET", "/ojs/v1/queues/src", "").want(t, 200); g.num(t, "queue.available") != 1 {
		t.Errorf("strict mode: the refused move changed the source: %s", g.Raw)
	}
}

// TestOJSPurgeCompletedRemovesAll checks that a purge with states
// ["completed"] removes every completed job (ojs-queues.md 6.7), also when
// it shares a segment with a job still available.
func TestOJSPurgeCompletedRemovesAll(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues", `{"name":"pc"}`).want(t, 201)
	s.qpush("pc", "", "a", "b") // one push: one segment
	m := s.popOne("/api/v1/pop/queue/pc?batch=1&wait=false")
	s.ack(obj{"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"], "status": "completed"})
	g := s.ojs("GET", "/ojs/v1/queues/pc", "").want(t, 200)
	if g.num(t, "queue.completed") != 1 || g.num(t, "queue.available") != 1 {
		t.Fatalf("setup: %s", g.Raw)
	}
	a := s.ojs("POST", "/ojs/v1/queues/pc/purge", `{"confirm":true,"states":["completed"]}`).want(t, 200)
	if c, n, av := a.num(t, "queue.completed"), a.num(t, "purged_count"), a.num(t, "queue.available"); c != 0 || n != 1 || av != 1 {
		t.Errorf("purge of completed: queue.completed %d purged_count %d available %d, want 0, 1 and 1", c, n, av)
	}
	if m := s.popOne("/api/v1/pop/queue/pc?batch=1&wait=false"); m["data"] != "b" && m["payload"] != "b" {
		t.Errorf("the available job after the purge: %v", m)
	}
}

// TestOJSOldestAvailableSkipsActive checks that stats.oldest_available_at is
// the time of the oldest available job, not of a leased one (ojs-queues.md
// 6.8).
func TestOJSOldestAvailableSkipsActive(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues", `{"name":"old"}`).want(t, 201)
	s.qpush("old", "", "a")
	time.Sleep(30 * time.Millisecond)
	s.qpush("old", "", "b")
	s.popOne("/api/v1/pop/queue/old?batch=1&wait=false") // "a" is active
	st := s.ojs("GET", "/ojs/v1/queues/old/stats", "").want(t, 200)
	got, _ := st.at("stats.oldest_available_at").(string)
	m := s.do("GET", "/api/v1/messages?queue=old", nil)
	var createdB string
	if o, ok := m.Body.(map[string]any); ok {
		for _, it := range asArr(t, o["messages"]) {
			im := asObj(t, it)
			if im["leaseExpiresAt"] == nil { // the available one
				createdB, _ = im["createdAt"].(string)
			}
		}
	}
	if len(createdB) < 23 {
		t.Fatalf("could not read the second message's time: %s", m.Raw)
	}
	if got != createdB[:23]+"Z" {
		t.Errorf("oldest_available_at %s, want the available message's time %s", got, createdB)
	}
	// With every job leased, nothing is available and the field is omitted.
	s.qpush("all", "", "a")
	s.qpush("all", "", "b")
	s.ojs("GET", "/api/v1/pop/queue/all?batch=2&wait=false", "").want(t, 200)
	st = s.ojs("GET", "/ojs/v1/queues/all/stats", "").want(t, 200)
	if st.num(t, "queue.active") != 2 {
		t.Fatalf("setup: %s", st.Raw)
	}
	if v := st.at("stats.oldest_available_at"); v != nil {
		t.Errorf("oldest_available_at %v with nothing available: %s", v, st.Raw)
	}
}

// TestOJSHugeDurationOutOfRange checks that a duration of the §0.2 form
// whose value is too large is a range error, 422 out_of_range, not
// invalid_duration (ojs-queues.md 2.1 rules 4 and 5).
func TestOJSHugeDurationOutOfRange(t *testing.T) {
	s := newStack(t)
	for _, d := range []string{"P999999999999999999D", "P99999999999999999999999D"} {
		a := s.ojs("POST", "/ojs/v1/queues", `{"name":"hd","retention":{"completed_ttl":"`+d+`"}}`)
		if a.Status != 422 || a.at("error.type") != "out_of_range" || a.at("error.details.field") != "retention.completed_ttl" {
			t.Errorf("%s: got %d %v, want 422 out_of_range: %s", d, a.Status, a.at("error.type"), a.Raw)
		}
	}
	if a := s.ojs("POST", "/ojs/v1/queues", `{"name":"hd","retention":{"completed_ttl":"P1Y"}}`); a.Status != 422 ||
		a.at("error.type") != "invalid_duration" {
		t.Errorf("P1Y: got %d %v, want 422 invalid_duration", a.Status, a.at("error.type"))
	}
}

// TestOJSPauseReason256Characters checks that the pause reason is limited
// to 256 characters, not bytes (ojs-queues.md 6.6), in the handler and in
// the replicated command alike.
func TestOJSPauseReason256Characters(t *testing.T) {
	s := newStack(t)
	reason := strings.Repeat("é", 256) // 256 characters, 512 bytes
	if a := s.ojs("POST", "/ojs/v1/queues/rsn/pause", `{"reason":"`+reason+`"}`); a.Status != 200 {
		t.Errorf("pause with a 256-character reason: %d %s", a.Status, a.Raw)
	}
	a := s.ojs("POST", "/ojs/v1/queues/rsn/resume", `{"reason":"`+reason+`é"}`)
	if a.Status != 422 || a.at("error.type") != "out_of_range" || a.at("error.details.field") != "reason" {
		t.Errorf("resume with a 257-character reason: %d %s, want 422 out_of_range", a.Status, a.Raw)
	}
	if err := (&fsm.OJSSetState{Name: "rsn", Reason: reason}).Validate(); err != nil {
		t.Errorf("OJSSetState with a 256-character reason: %v", err)
	}
	if err := (&fsm.OJSSetState{Name: "rsn", Reason: reason + "x"}).Validate(); err == nil {
		t.Error("OJSSetState with a 257-character reason is valid")
	}
}

// failingBackend is an ojs.Backend whose reads pass and whose commits fail
// with an internal (500) error, as the node's commit does for its own
// internal failures.
type failingBackend struct{}

func (failingBackend) Commit(_ http.ResponseWriter, _ *http.Request, _ []byte, _ fsm.Command,
	fail func(status int, code, msg string)) (any, bool) {
	fail(http.StatusInternalServerError, "internal", "boom")
	return nil, false
}

func (failingBackend) Barrier(*http.Request) (int, error) { return 0, nil }

func (failingBackend) Leader() string { return "n1" }

// TestOJSBackendErrorRetryable checks that every 500 backend_error is
// retryable: true (ojs-queues.md 0.5), whether a commit or a read failed.
func TestOJSBackendErrorRetryable(t *testing.T) {
	state, err := fsm.Open(fsm.Config{Dir: filepath.Join(t.TempDir(), "state"), NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	h := ojs.New(ojs.Config{NodeID: "n1"}, failingBackend{}, state)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/ojs/v1/queues", `{"name":"x"}`}, // the commit fails with 500
		{"GET", "/ojs/v1/queues/x", ""},            // the read fails: the state is closed below
	} {
		if c.method == "GET" {
			state.Close()
		}
		var rd io.Reader
		if c.body != "" {
			rd = strings.NewReader(c.body)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(c.method, c.path, rd))
		var b struct {
			Error struct {
				Code      string `json:"code"`
				Retryable bool   `json:"retryable"`
			} `json:"error"`
		}
		json.Unmarshal(w.Body.Bytes(), &b)
		if w.Code != 500 || b.Error.Code != "backend_error" {
			t.Fatalf("%s %s: %d %s", c.method, c.path, w.Code, w.Body.String())
		}
		if !b.Error.Retryable {
			t.Errorf("%s %s: 500 backend_error with retryable false: %s", c.method, c.path, w.Body.String())
		}
	}
}

// TestOJSDelete202IdleJobsHandledNow checks that a DELETE with strategy move
// or purge of a queue with an active job handles the jobs that are not
// active at once (ojs-queues.md 6.5): the 202 answer shows only the active
// job left (depth 1, active 1), jobs_affected counts the others, a move's
// target holds them already, and the last ack completes the deletion.
func TestOJSDelete202IdleJobsHandledNow(t *testing.T) {
	for _, strategy := range []string{"move", "purge"} {
		t.Run(strategy, func(t *testing.T) {
			s := newStack(t)
			s.ojs("POST", "/ojs/v1/queues", `{"name":"old"}`).want(t, 201)
			s.qpush("old", "", "a", "b", "c")
			m := s.popOne("/api/v1/pop/queue/old?batch=1&wait=false") // "a" is active
			path := "/ojs/v1/queues/old?strategy=" + strategy
			if strategy == "move" {
				path += "&target_queue=new"
			}
			a := s.ojs("DELETE", path, "").want(t, 202)
			if a.at("queue.state") != "draining" || a.num(t, "queue.depth") != 1 || a.num(t, "queue.active") != 1 ||
				a.num(t, "queue.available") != 0 || a.num(t, "jobs_affected") != 2 ||
				a.num(t, "queue.deletion.active_remaining") != 1 {
				t.Fatalf("202 answer: %s", a.Raw)
			}
			if strategy == "move" {
				g := s.ojs("GET", "/ojs/v1/queues/new", "").want(t, 200)
				if g.num(t, "queue.depth") != 2 || g.num(t, "queue.available") != 2 {
					t.Fatalf("target while the source drains: %s", g.Raw)
				}
			}
			s.ack(obj{"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"], "status": "completed"})
			s.ojs("GET", "/ojs/v1/queues/old", "").want(t, 404)
			if strategy == "move" {
				if g := s.ojs("GET", "/ojs/v1/queues/new", "").want(t, 200); g.num(t, "queue.depth") != 2 {
					t.Fatalf("target after the last ack: %s", g.Raw)
				}
			}
		})
	}
}

// TestOJSAllConfigProblems checks that a create, PATCH and PUT with several
// problems list every one in details.errors, shape and value problems
// together, with 400 winning over 422 and the first problem giving
// details.field, type and message (ojs-queues.md 0.5, 2.1).
func TestOJSAllConfigProblems(t *testing.T) {
	s := newStack(t)
	check := func(a ojsAns, status int, code string, fields ...string) {
		t.Helper()
		a.want(t, status)
		errs, _ := a.at("error.details.errors").([]any)
		var got []string
		for _, x := range errs {
			m, _ := x.(map[string]any)
			if m["type"] == nil || m["message"] == "" {
				t.Errorf("entry without type or message: %v", m)
			}
			got = append(got, fmt.Sprint(m["field"]))
		}
		if strings.Join(got, " ") != strings.Join(fields, " ") {
			t.Errorf("details.errors fields %v, want %v: %s", got, fields, a.Raw)
		}
		first, _ := errs[0].(map[string]any)
		if a.at("error.code") != code || a.at("error.details.field") != fields[0] ||
			a.at("error.type") != first["type"] || a.at("error.message") != first["message"] {
			t.Errorf("top level does not match the first problem %v: %s", first, a.Raw)
		}
	}
	check(s.ojs("POST", "/ojs/v1/queues", `{"name":"mp","bogus":1,"extra":2,"state":"draining",`+
		`"capacity":{"max_depth":-1,"nope":1},"processing":{"visibility_timeout":"30"},"retention":{"failed_ttl":"P1M"}}`),
		400, "invalid_request", "bogus", "extra", "capacity.nope", "processing.visibility_timeout",
		"state", "retention.failed_ttl", "capacity.max_depth")
	// Value problems only: 422, all of them.
	check(s.ojs("POST", "/ojs/v1/queues", `{"name":"mp","config":{"capacity":{"max_depth":-1},"dead_letter":{"max_count":0}}}`),
		422, "validation_error", "config.capacity.max_depth", "config.dead_letter.max_count")
	s.ojs("POST", "/ojs/v1/queues", `{"name":"mp"}`).want(t, 201)
	check(s.ojs("PATCH", "/ojs/v1/queues/mp", `{"depth":1,"zz":1,"state":"gone","capacity":{"max_depth":1.5},"processing":{"visibility_timeout":0}}`),
		400, "invalid_request", "depth", "zz", "capacity.max_depth", "state", "processing.visibility_timeout")
	check(s.ojs("PUT", "/ojs/v1/queues/mp/config", `{"config":{"nope":{},"capacity":{"max_depth":-1}}}`),
		400, "invalid_request", "config.nope", "config.capacity.max_depth")
}

// TestOJSPurgeGroupSkipsAnotherGroupsBatch: after a backlog purge, a
// consumer group that held a live batch finishes it and then reads only
// what is pushed after the purge, never the batch another group still
// holds (kept stored for that group's redelivery); that group likewise.
func TestOJSPurgeGroupSkipsAnotherGroupsBatch(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues", `{"name":"pg"}`).want(t, 201)
	var items []obj
	for _, tx := range []string{"m1", "m2", "m3", "m4"} {
		items = append(items, obj{"queue": "pg", "partition": "p", "transactionId": tx, "payload": tx})
	}
	s.push(items...)
	pop := func(group string, batch int) string {
		return fmt.Sprintf("/api/v1/pop/queue/pg/partition/p?batch=%d&wait=false&consumerGroup=%s", batch, group)
	}
	ackOne := func(group string, m obj) {
		t.Helper()
		r := s.ack(obj{"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"],
			"consumerGroup": group, "status": "completed"})
		if r["success"] != true {
			t.Fatalf("ack of %v by %s: %v", m["transactionId"], group, r)
		}
	}
	b := s.popOne(pop("B", 1)) // B leases m1
	for range 2 {              // A consumes m1, m2
		ackOne("A", s.popOne(pop("A", 1)))
	}
	a := s.popOne(pop("A", 1)) // A leases m3
	if b["transactionId"] != "m1" || a["transactionId"] != "m3" {
		t.Fatalf("setup: B leased %v, A leased %v", b["transactionId"], a["transactionId"])
	}
	s.ojs("POST", "/ojs/v1/queues/pg/purge", `{"confirm":true}`).want(t, 200)
	// The queue's counts hold only what some group has still to read.
	wantCounts := func(when string, depth, active int64) {
		t.Helper()
		g := s.ojs("GET", "/ojs/v1/queues/pg", "").want(t, 200)
		if g.num(t, "queue.depth") != depth || g.num(t, "queue.active") != active || g.num(t, "queue.available") != 0 {
			t.Fatalf("%s: want depth %v, active %v, available 0: %s", when, depth, active, g.Raw)
		}
	}
	wantCounts("after the purge (B holds m1, A holds m3)", 2, 2)

	ackOne("A", a)
	if got := s.popGroupTxIDs(pop("A", 10)); len(got) != 0 {
		t.Fatalf("A read %v after its batch", got)
	}
	// m3 stays stored while B's batch lasts, but every group passed it: A
	// consumed it, B's range skips it.
	wantCounts("after A's batch ended", 1, 1)
	ackOne("B", b)
	if got := s.popGroupTxIDs(pop("B", 10)); len(got) != 0 {
		t.Fatalf("B read %v after its batch: the purge removed m2..m4 for it, m3 stayed only for A's batch", got)
	}
	wantCounts("after B's batch ended", 0, 0)
	s.push(obj{"queue": "pg", "partition": "p", "transactionId": "m5", "payload": "m5"})
	for _, g := range []string{"A", "B"} {
		if got := s.popGroupTxIDs(pop(g, 10)); len(got) != 1 || got[0] != "m5" {
			t.Fatalf("%s read %v after a push that followed the purge, want [m5]", g, got)
		}
	}
}

// ojs-queues.md 13.11: a healthy node's GET /ojs/v1/health names the Raft
// leader in its backend, so an operator (or a probe) reading it sees which
// node leads without a second call.
func TestOJSHealthNamesTheLeader(t *testing.T) {
	s := newStack(t)
	a := s.ojs("GET", "/ojs/v1/health", "").want(t, 200)
	backend, _ := a.Body["backend"].(map[string]any)
	if a.Body["status"] != "ok" || backend["status"] != "connected" || backend["type"] != "raft" {
		t.Fatalf("GET /ojs/v1/health: %s, want status ok and a connected raft backend", a.Raw)
	}
	if backend["leader"] != "node1" {
		t.Errorf("GET /ojs/v1/health: backend.leader %v in %s, want node1 (the node leads its one-node cluster)", backend["leader"], a.Raw)
	}
}
