package main_test

// OJS queue administration against a real three-node cluster
// (docs/queues.md): wire conventions, validation, the state table, policy
// precedence, delete strategies, capacity under concurrent pushes through
// every node, access lists, and the Queen and OJS views agreeing.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

type ojsAnswer struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    string
}

func ojsDo(t *testing.T, base, method, path, body string, hdr ...string) ojsAnswer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := ojsAnswer{Status: resp.StatusCode, Header: resp.Header, Raw: string(b)}
	if len(bytes.TrimSpace(b)) > 0 {
		json.Unmarshal(b, &a.Body)
	}
	return a
}

func (a ojsAnswer) expect(t *testing.T, status int) ojsAnswer {
	t.Helper()
	if a.Status != status {
		t.Fatalf("status %d, want %d: %s", a.Status, status, a.Raw)
	}
	return a
}

// errType is error.type of an OJS error body.
func (a ojsAnswer) errType() string {
	e, _ := a.Body["error"].(map[string]any)
	s, _ := e["type"].(string)
	return s
}

func (a ojsAnswer) errField() string {
	e, _ := a.Body["error"].(map[string]any)
	d, _ := e["details"].(map[string]any)
	s, _ := d["field"].(string)
	return s
}

func (a ojsAnswer) expectErr(t *testing.T, status int, typ string) {
	t.Helper()
	a.expect(t, status)
	if a.errType() != typ {
		t.Fatalf("error type %q, want %q: %s", a.errType(), typ, a.Raw)
	}
}

// path reads a value by dotted path from the body.
func (a ojsAnswer) path(p string) any {
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

func queenPush(t *testing.T, base, queue, partition, tx string, hdr ...string) ojsAnswer {
	t.Helper()
	body := fmt.Sprintf(`{"items":[{"queue":%q,"partition":%q,"transactionId":%q,"payload":{"tx":%q}}]}`, queue, partition, tx, tx)
	return ojsDo(t, base, "POST", "/api/v1/push", body, hdr...)
}

func TestOJSQueueAdministration(t *testing.T) {
	c := tc.Start(t, 3, tc.WithEnv("RETENTION_INTERVAL=200"))
	nodes := c.Nodes()
	url := func(i int) string { return nodes[i%len(nodes)].URL() }

	t.Run("default queue exists and is protected", func(t *testing.T) {
		// The leader creates it right after the election.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if a := ojsDo(t, url(2), "GET", "/ojs/v1/queues/default", ""); a.Status == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the queue default does not exist on a fresh cluster")
			}
		}
		ojsDo(t, url(1), "DELETE", "/ojs/v1/queues/default", "").expectErr(t, 409, "queue_protected")
	})

	t.Run("wire", func(t *testing.T) {
		a := ojsDo(t, url(1), "GET", "/ojs/v1/queues", "", "X-Request-Id", "abc-123").expect(t, 200)
		if ct := a.Header.Get("Content-Type"); ct != "application/openjobspec+json" {
			t.Fatalf("content type %q", ct)
		}
		if a.Header.Get("OJS-Version") != "1.0" || a.Header.Get("X-Request-Id") != "abc-123" {
			t.Fatalf("headers %v", a.Header)
		}
		a = ojsDo(t, url(2), "PUT", "/ojs/v1/queues", "{}")
		a.expectErr(t, 405, "method_not_allowed")
		if a.Header.Get("Allow") != "GET, POST" || a.Header.Get("Content-Type") != "application/openjobspec+json" {
			t.Fatalf("405 headers %v", a.Header)
		}
		ojsDo(t, url(0), "GET", "/ojs/v1/nothing", "").expectErr(t, 404, "route_not_found")
		a = ojsDo(t, url(0), "POST", "/ojs/v1/queues", "not json").expect(t, 400)
		if !strings.HasPrefix(a.path("error.request_id").(string), "req_") {
			t.Fatalf("request id %v", a.path("error.request_id"))
		}
		ojsDo(t, url(0), "GET", "/ojs/manifest", "").expect(t, 200)
	})

	t.Run("validation", func(t *testing.T) {
		for _, c := range []struct {
			body, typ, field string
			status           int
		}{
			{`{"name":"v1","capacity":{"max_depht":1}}`, "unknown_field", "capacity.max_depht", 400},
			{`{"name":"v1","bogus":1}`, "unknown_field", "bogus", 400},
			{`{"name":"v1","capacity":{"max_depth":"5"}}`, "invalid_type", "capacity.max_depth", 400},
			{`{"name":"v1","capacity":{"max_depth":1.5}}`, "invalid_type", "capacity.max_depth", 400},
			{`{"name":"v1","capacity":{"max_depth":1e3}}`, "invalid_type", "capacity.max_depth", 400},
			{`{"name":"v1","dead_letter":{"enabled":"yes"}}`, "invalid_type", "dead_letter.enabled", 400},
			{`{"name":"v1","capacity":[]}`, "invalid_type", "capacity", 400},
			{`{"name":"v1","processing":{"visibility_timeout":0}}`, "out_of_range", "processing.visibility_timeout", 422},
			{`{"name":"v1","processing":{"visibility_timeout":43201}}`, "out_of_range", "processing.visibility_timeout", 422},
			{`{"name":"v1","processing":{"max_concurrency":1000001}}`, "out_of_range", "processing.max_concurrency", 422},
			{`{"name":"v1","capacity":{"max_depth":-1}}`, "out_of_range", "capacity.max_depth", 422},
			{`{"name":"v1","dead_letter":{"max_count":0}}`, "out_of_range", "dead_letter.max_count", 422},
			{`{"name":"v1","retention":{"completed_ttl":"P1Y"}}`, "invalid_duration", "retention.completed_ttl", 422},
			{`{"name":"v1","retention":{"failed_ttl":"P3651D"}}`, "out_of_range", "retention.failed_ttl", 422},
			{`{"name":"v1","dead_letter":{"max_age":"PT0S"}}`, "out_of_range", "dead_letter.max_age", 422},
			{`{"name":"v1","access":{"producers":["ok","bad name"]}}`, "invalid_principal", "access.producers[1]", 422},
			{`{"name":"v1","config":{"capacity":{"max_depth":1}},"capacity":{}}`, "ambiguous_body", "config", 400},
			{`{"name":"V1"}`, "invalid_request", "name", 400},
			{`{"name":"v1","policy":"missing"}`, "unknown_policy", "", 422},
		} {
			a := ojsDo(t, url(1), "POST", "/ojs/v1/queues", c.body)
			if a.Status != c.status || a.errType() != c.typ || (c.field != "" && a.errField() != c.field) {
				t.Errorf("%s: got %d %s field %q, want %d %s %q", c.body, a.Status, a.errType(), a.errField(), c.status, c.typ, c.field)
			}
		}
		// Nothing changed by the refused requests.
		ojsDo(t, url(2), "GET", "/ojs/v1/queues/v1", "").expectErr(t, 404, "queue_not_found")
		// A refused PATCH changes nothing either.
		ojsDo(t, url(0), "POST", "/ojs/v1/queues", `{"name":"v2","capacity":{"max_depth":5}}`).expect(t, 201)
		ojsDo(t, url(1), "PATCH", "/ojs/v1/queues/v2", `{"capacity":{"max_depth":7},"processing":{"visibility_timeout":0}}`).expect(t, 422)
		ojsDo(t, url(2), "PATCH", "/ojs/v1/queues/v2", `{"depth":3}`).expectErr(t, 400, "read_only_field")
		if a := ojsDo(t, url(2), "GET", "/ojs/v1/queues/v2", "").expect(t, 200); a.path("queue.config.capacity.max_depth") != 5.0 {
			t.Fatalf("max_depth after refused patch: %v", a.path("queue.config.capacity.max_depth"))
		}
		ojsDo(t, url(0), "POST", "/ojs/v1/queues/v2/purge", `{}`).expectErr(t, 400, "confirmation_required")
		ojsDo(t, url(0), "POST", "/ojs/v1/queues/v2/purge", `{"confirm":true,"states":["active"]}`).expectErr(t, 422, "invalid_state")
	})

	t.Run("state table", func(t *testing.T) {
		ojsDo(t, url(0), "POST", "/ojs/v1/queues", `{"name":"st"}`).expect(t, 201)
		queenPush(t, url(1), "st", "", "a").expect(t, 201)
		// active -> paused: pushes accepted, pops get nothing.
		a := ojsDo(t, url(2), "POST", "/ojs/v1/queues/st/pause", `{"reason":"deploy"}`).expect(t, 200)
		if a.path("queue.paused") != true || a.path("queue.state") != "paused" || a.path("queue.paused_at") == nil {
			t.Fatalf("pause answer %s", a.Raw)
		}
		ojsDo(t, url(0), "POST", "/ojs/v1/queues/st/pause", "").expect(t, 200) // no-op
		queenPush(t, url(2), "st", "", "b").expect(t, 201)
		ojsDo(t, url(1), "GET", "/api/v1/pop/queue/st?wait=false", "").expect(t, 204)
		ojsDo(t, url(0), "PATCH", "/ojs/v1/queues/st", `{"state":"draining"}`).expectErr(t, 409, "invalid_state_transition")
		// paused -> active.
		a = ojsDo(t, url(1), "POST", "/ojs/v1/queues/st/resume", "").expect(t, 200)
		if a.path("queue.paused") != false || a.path("queue.paused_at") != nil {
			t.Fatalf("resume answer %s", a.Raw)
		}
		ojsDo(t, url(1), "POST", "/ojs/v1/queues/st/resume", "").expect(t, 200) // no-op
		// active -> draining (graceful): push 409, pop delivers, pause/resume 409.
		ojsDo(t, url(2), "PATCH", "/ojs/v1/queues/st", `{"state":"draining"}`).expect(t, 200)
		queenPush(t, url(0), "st", "", "c").expectErr(t, 409, "queue_draining")
		ojsDo(t, url(1), "POST", "/ojs/v1/queues/st/pause", "").expectErr(t, 409, "queue_draining")
		ojsDo(t, url(1), "POST", "/ojs/v1/queues/st/resume", "").expectErr(t, 409, "queue_draining")
		ojsDo(t, url(1), "PATCH", "/ojs/v1/queues/st", `{"state":"paused"}`).expectErr(t, 409, "invalid_state_transition")
		ojsDo(t, url(0), "PATCH", "/ojs/v1/queues/st", `{"capacity":{"max_depth":9}}`).expect(t, 200)
		// draining -> active cancels the drain (the backlog is still there,
		// so the drain cannot have completed meanwhile).
		ojsDo(t, url(2), "PATCH", "/ojs/v1/queues/st", `{"state":"active"}`).expect(t, 200)
		ojsDo(t, url(2), "POST", "/ojs/v1/queues/st/purge", `{"confirm":true}`).expect(t, 200)
		queenPush(t, url(0), "st", "", "d").expect(t, 201)
		// Purge is allowed while draining; a drained queue then goes away.
		queenPush(t, url(0), "st-drain", "", "x").expect(t, 201)
		ojsDo(t, url(1), "PATCH", "/ojs/v1/queues/st-drain", `{"state":"draining"}`).expect(t, 200)
		ojsDo(t, url(2), "POST", "/ojs/v1/queues/st-drain/purge", `{"confirm":true}`).expect(t, 200)
		gone := false
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if r := ojsDo(t, url(0), "GET", "/ojs/v1/queues/st-drain", ""); r.Status == 404 {
				gone = true
				break
			}
		}
		if !gone {
			t.Fatal("a draining queue purged to depth 0 was not deleted")
		}
		// draining (deleting): a leased message keeps it; everything 409s.
		var popped []map[string]any
		pa := ojsDo(t, url(1), "GET", "/api/v1/pop/queue/st?wait=true&timeout=5000", "").expect(t, 200)
		popped = append(popped, pa.Body["messages"].([]any)[0].(map[string]any))
		a = ojsDo(t, url(2), "DELETE", "/ojs/v1/queues/st?strategy=purge", "").expect(t, 202)
		if a.path("queue.state") != "draining" || a.path("queue.deletion.strategy") != "purge" {
			t.Fatalf("202 answer %s", a.Raw)
		}
		queenPush(t, url(0), "st", "", "e").expectErr(t, 409, "queue_deleting")
		ojsDo(t, url(1), "POST", "/ojs/v1/queues/st/pause", "").expectErr(t, 409, "queue_deleting")
		ojsDo(t, url(1), "POST", "/ojs/v1/queues/st/resume", "").expectErr(t, 409, "queue_deleting")
		ojsDo(t, url(1), "PATCH", "/ojs/v1/queues/st", `{"capacity":{"max_depth":1}}`).expectErr(t, 409, "queue_deleting")
		ojsDo(t, url(1), "PATCH", "/ojs/v1/queues/st", `{"state":"active"}`).expectErr(t, 409, "queue_deleting")
		ojsDo(t, url(2), "POST", "/ojs/v1/queues/st/purge", `{"confirm":true}`).expectErr(t, 409, "queue_deleting")
		ojsDo(t, url(0), "DELETE", "/ojs/v1/queues/st?strategy=purge", "").expect(t, 202)
		ojsDo(t, url(0), "DELETE", "/ojs/v1/queues/st?strategy=discard", "").expectErr(t, 409, "queue_deleting")
		ojsDo(t, url(1), "GET", "/api/v1/pop/queue/st?wait=false", "").expect(t, 204)
		// The ack of the last leased message finishes the deletion.
		m := popped[0]
		ack := fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"completed"}`,
			m["transactionId"], m["partitionId"], pa.Body["leaseId"])
		ojsDo(t, url(2), "POST", "/api/v1/ack", ack).expect(t, 200)
		ojsDo(t, url(0), "GET", "/ojs/v1/queues/st", "").expectErr(t, 404, "queue_not_found")
		// Pause of an unknown name creates it (implicit), paused.
		a = ojsDo(t, url(1), "POST", "/ojs/v1/queues/pause-test/pause", "").expect(t, 200)
		if a.path("queue.origin") != "implicit" || a.path("queue.paused") != true {
			t.Fatalf("implicit pause %s", a.Raw)
		}
		// Stats.
		queenPush(t, url(2), "pause-test", "", "x").expect(t, 201)
		a = ojsDo(t, url(0), "GET", "/ojs/v1/queues/pause-test/stats", "").expect(t, 200)
		if a.path("queue.available") != 1.0 || a.path("stats.depth") != 1.0 || a.path("stats.queue") != "pause-test" {
			t.Fatalf("stats %s", a.Raw)
		}
	})

	t.Run("policies", func(t *testing.T) {
		post := func(body string) {
			ojsDo(t, url(0), "POST", "/ojs/v1/queues/_policies", body).expect(t, 201)
		}
		post(`{"name":"wide","match":"pol.*","config":{"processing":{"visibility_timeout":11}}}`)
		post(`{"name":"narrow","match":"pol.i*","config":{"processing":{"visibility_timeout":22}}}`)
		post(`{"name":"alpha","match":"pol.i?x","config":{"processing":{"visibility_timeout":33}}}`)
		post(`{"name":"beta","match":"pol.?nx","config":{"processing":{"visibility_timeout":44}}}`)
		post(`{"name":"urgent","match":"*.urgent","priority":5,"config":{"capacity":{"max_depth":3}}}`)
		ojsDo(t, url(1), "POST", "/ojs/v1/queues/_policies", `{"name":"wide","match":"x","config":{}}`).expectErr(t, 409, "policy_exists")
		for q, want := range map[string]string{"pol.a": "wide", "pol.ix": "narrow", "pol.inx": "alpha", "pol.urgent": "urgent"} {
			queenPush(t, url(2), q, "", "t").expect(t, 201) // implicit creation binds
			a := ojsDo(t, url(1), "GET", "/ojs/v1/queues/"+q, "").expect(t, 200)
			if a.path("queue.policy") != want {
				t.Errorf("%s bound to %v, want %s", q, a.path("queue.policy"), want)
			}
		}
		// A Queen-push-born queue under a policy: 60 s unless the policy sets it.
		// (A Queen read is served from local state; the push went through
		// another node, so it asks for a linearizable read.)
		a := ojsDo(t, url(0), "GET", "/api/v1/resources/queues/pol.a?consistency=linearizable", "").expect(t, 200)
		if a.path("config.leaseTime") != 11.0 {
			t.Fatalf("policy lease on the Queen view: %v", a.path("config.leaseTime"))
		}
		// _default reaches every queue for unset fields.
		ojsDo(t, url(1), "PUT", "/ojs/v1/queues/_default/config", `{"capacity":{"max_size_bytes":1000000}}`).expect(t, 200)
		if a := ojsDo(t, url(2), "GET", "/ojs/v1/queues/pol.a", "").expect(t, 200); a.path("queue.config.capacity.max_size_bytes") != 1e6 {
			t.Fatalf("_default not applied: %s", a.Raw)
		}
		ojsDo(t, url(1), "PUT", "/ojs/v1/queues/_default/config", `{}`).expect(t, 200)
		a = ojsDo(t, url(0), "DELETE", "/ojs/v1/queues/_policies/wide", "").expect(t, 200)
		if a.Body["queues_unbound"] != 1.0 {
			t.Fatalf("unbind %s", a.Raw)
		}
		if a := ojsDo(t, url(0), "GET", "/ojs/v1/queues/pol.a", "").expect(t, 200); a.path("queue.config.processing.visibility_timeout") != 60.0 {
			t.Fatalf("after unbinding: %s", a.Raw)
		}
		ojsDo(t, url(0), "GET", "/ojs/v1/queues/_policies/wide", "").expectErr(t, 404, "policy_not_found")
	})

	t.Run("delete strategies", func(t *testing.T) {
		queenPush(t, url(0), "del-rej", "", "1").expect(t, 201)
		a := ojsDo(t, url(1), "DELETE", "/ojs/v1/queues/del-rej", "")
		a.expectErr(t, 409, "queue_not_empty")
		ojsDo(t, url(2), "GET", "/ojs/v1/queues/del-rej", "").expect(t, 200)
		ojsDo(t, url(2), "DELETE", "/ojs/v1/queues/del-rej?strategy=discard", "").expect(t, 200)
		ojsDo(t, url(0), "GET", "/ojs/v1/queues/del-rej", "").expect(t, 404)
		// move keeps per-partition order.
		for p := 0; p < 3; p++ {
			var its []string
			for s := 0; s < 5; s++ {
				its = append(its, fmt.Sprintf(`{"queue":"del-src","partition":"p%d","transactionId":"p%d-%d","payload":%d}`, p, p, s, s))
			}
			ojsDo(t, url(p), "POST", "/api/v1/push", `{"items":[`+strings.Join(its, ",")+`]}`).expect(t, 201)
		}
		ojsDo(t, url(1), "DELETE", "/ojs/v1/queues/del-src?strategy=move&target_queue=del-src", "").expectErr(t, 422, "invalid_target")
		ojsDo(t, url(1), "DELETE", "/ojs/v1/queues/del-src?strategy=move", "").expect(t, 400)
		a = ojsDo(t, url(1), "DELETE", "/ojs/v1/queues/del-src?strategy=move&target_queue=del-dst", "").expect(t, 200)
		if a.Body["jobs_affected"] != 15.0 || a.path("queue.state") != "deleted" {
			t.Fatalf("move %s", a.Raw)
		}
		for p := 0; p < 3; p++ {
			a := ojsDo(t, url(2), "GET", fmt.Sprintf("/api/v1/pop/queue/del-dst/partition/p%d?batch=10&wait=true&timeout=5000&autoAck=true", p), "").expect(t, 200)
			var got []string
			for _, m := range a.Body["messages"].([]any) {
				got = append(got, m.(map[string]any)["transactionId"].(string))
			}
			if want := fmt.Sprintf("p%d-0,p%d-1,p%d-2,p%d-3,p%d-4", p, p, p, p, p); strings.Join(got, ",") != want {
				t.Fatalf("partition p%d after move: %v", p, got)
			}
		}
		// purge with nothing active: 200.
		queenPush(t, url(0), "del-purge", "", "1").expect(t, 201)
		a = ojsDo(t, url(2), "DELETE", "/ojs/v1/queues/del-purge", `{"strategy":"purge"}`).expect(t, 200)
		if a.Body["jobs_affected"] != 1.0 {
			t.Fatalf("purge %s", a.Raw)
		}
	})

	t.Run("capacity under concurrent pushes", func(t *testing.T) {
		const bound = 40
		ojsDo(t, url(0), "POST", "/ojs/v1/queues", fmt.Sprintf(`{"name":"cap","capacity":{"max_depth":%d}}`, bound)).expect(t, 201)
		var ok, full atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < 9; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < 12; i++ {
					a := queenPush(t, url(w), "cap", fmt.Sprintf("p%d", i%3), fmt.Sprintf("w%d-%d", w, i))
					switch a.Status {
					case 201:
						ok.Add(1)
					case 429:
						full.Add(1)
						if a.Header.Get("Retry-After") != "1" || a.Header.Get("X-OJS-Queue-Bound") != fmt.Sprint(bound) ||
							a.path("error.code") != "QUEUE_FULL" {
							t.Errorf("429 answer %v %s", a.Header, a.Raw)
						}
					default:
						t.Errorf("push: %d %s", a.Status, a.Raw)
					}
				}
			}(w)
		}
		wg.Wait()
		a := ojsDo(t, url(2), "GET", "/ojs/v1/queues/cap", "").expect(t, 200)
		if ok.Load() != bound || a.path("queue.depth") != float64(bound) {
			t.Fatalf("accepted %d (429: %d), stored depth %v; bound %d", ok.Load(), full.Load(), a.path("queue.depth"), bound)
		}
		// A multi-item push that would cross the bound stores nothing.
		ojsDo(t, url(1), "PATCH", "/ojs/v1/queues/cap", `{"capacity":{"max_depth":41}}`).expect(t, 200)
		body := `{"items":[{"queue":"cap","transactionId":"m1","payload":1},{"queue":"cap","transactionId":"m2","payload":2}]}`
		ojsDo(t, url(0), "POST", "/api/v1/push", body).expectErr(t, 429, "queue_full")
		if a := ojsDo(t, url(1), "GET", "/ojs/v1/queues/cap", "").expect(t, 200); a.path("queue.depth") != float64(bound) {
			t.Fatalf("half-stored: %v", a.path("queue.depth"))
		}
	})

	t.Run("access lists", func(t *testing.T) {
		ojsDo(t, url(0), "POST", "/ojs/v1/queues",
			`{"name":"acl","access":{"producers":["svc-a","svc-a"],"consumers":["worker"]}}`).expect(t, 201)
		a := ojsDo(t, url(1), "GET", "/ojs/v1/queues/acl", "").expect(t, 200)
		if fmt.Sprint(a.path("queue.config.access.producers")) != "[svc-a]" {
			t.Fatalf("producers not deduplicated: %v", a.path("queue.config.access.producers"))
		}
		queenPush(t, url(1), "acl", "", "1").expectErr(t, 403, "permission_denied")
		queenPush(t, url(2), "acl", "", "1", "X-OJS-Client-Id", "svc-b").expectErr(t, 403, "permission_denied")
		queenPush(t, url(0), "acl", "", "1", "X-OJS-Client-Id", "svc-a").expect(t, 201)
		ojsDo(t, url(1), "GET", "/api/v1/pop/queue/acl?wait=false", "", "X-OJS-Client-Id", "svc-a").expect(t, 403)
		ojsDo(t, url(2), "GET", "/api/v1/pop/queue/acl?wait=false", "").expect(t, 403)
		ojsDo(t, url(0), "GET", "/api/v1/pop/queue/acl?wait=true&timeout=5000&autoAck=true", "", "X-OJS-Client-Id", "worker").expect(t, 200)
		// A transaction's pushes are checked for its caller too, through any node.
		txn := `{"operations":[{"type":"push","items":[{"queue":"acl","transactionId":"tx-acl","payload":1}]}]}`
		if a := ojsDo(t, url(1), "POST", "/api/v1/transaction", txn, "X-OJS-Client-Id", "svc-b").expect(t, 200); a.path("success") != false {
			t.Fatalf("svc-b transaction into acl: %s", a.Raw)
		}
		if a := ojsDo(t, url(2), "POST", "/api/v1/transaction", txn, "X-OJS-Client-Id", "svc-a").expect(t, 200); a.path("success") != true {
			t.Fatalf("svc-a transaction into acl: %s", a.Raw)
		}
	})

	t.Run("two views", func(t *testing.T) {
		ojsDo(t, url(0), "POST", "/api/v1/configure", `{"queue":"views","options":{"leaseTime":120,"deadLetterQueue":false,"dlqAfterMaxRetries":false,"retentionEnabled":true,"completedRetentionSeconds":86400}}`).expect(t, 200)
		a := ojsDo(t, url(1), "GET", "/ojs/v1/queues/views", "").expect(t, 200)
		if a.path("queue.config.processing.visibility_timeout") != 120.0 || a.path("queue.config.dead_letter.enabled") != false ||
			a.path("queue.config.retention.completed_ttl") != "P1D" {
			t.Fatalf("configure not shown in the OJS view: %s", a.Raw)
		}
		ojsDo(t, url(2), "PATCH", "/ojs/v1/queues/views",
			`{"processing":{"visibility_timeout":45},"dead_letter":{"enabled":true},"retention":{"completed_ttl":"PT2H"}}`).expect(t, 200)
		a = ojsDo(t, url(0), "GET", "/api/v1/resources/queues/views?consistency=linearizable", "").expect(t, 200)
		if a.path("config.leaseTime") != 45.0 || a.path("config.deadLetterQueue") != true ||
			a.path("config.completedRetentionSeconds") != 7200.0 || a.path("config.retentionEnabled") != true {
			t.Fatalf("OJS patch not shown in the Queen view: %s", a.Raw)
		}
		// null removes the override, and the PATCH had replaced the
		// configured 120 (docs/queues.md, layer 4): the queue inherits what
		// a /configure that did not name leaseTime stores, 300 s.
		ojsDo(t, url(1), "PATCH", "/ojs/v1/queues/views", `{"processing":{"visibility_timeout":null}}`).expect(t, 200)
		a = ojsDo(t, url(2), "GET", "/ojs/v1/queues/views", "").expect(t, 200)
		if a.path("queue.config.processing.visibility_timeout") != 300.0 || a.path("queue.overrides.processing") != nil {
			t.Fatalf("after null: %s", a.Raw)
		}
		// Names outside the OJS alphabet are listed, flagged.
		queenPush(t, url(0), "Queen_Only", "", "1").expect(t, 201)
		a = ojsDo(t, url(1), "GET", "/ojs/v1/queues?prefix=Queen", "").expect(t, 200)
		qs := a.Body["queues"].([]any)
		if len(qs) != 1 || qs[0].(map[string]any)["ojs_addressable"] != false {
			t.Fatalf("list %s", a.Raw)
		}
		// Pagination.
		a = ojsDo(t, url(2), "GET", "/ojs/v1/queues?limit=2", "").expect(t, 200)
		cur, _ := a.path("pagination.next_cursor").(string)
		if a.path("pagination.has_more") != true || cur == "" {
			t.Fatalf("pagination %s", a.Raw)
		}
		b := ojsDo(t, url(0), "GET", "/ojs/v1/queues?limit=2&cursor="+cur, "").expect(t, 200)
		if b.Body["queues"].([]any)[0].(map[string]any)["name"] == a.Body["queues"].([]any)[0].(map[string]any)["name"] {
			t.Fatal("cursor did not advance")
		}
		// Events.
		a = ojsDo(t, url(1), "GET", "/ojs/v1/events?types=queue.deleted&limit=1000", "").expect(t, 200)
		if len(a.Body["events"].([]any)) < 3 {
			t.Fatalf("events %s", a.Raw)
		}
	})

	if _, err := c.WaitConverged(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}
