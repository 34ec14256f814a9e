package httpapi_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// Streams endpoints (queen-api.md 3.18) through the real stack.

// registerQuery posts a registration and returns the answer (status must be want).
func (s *stack) registerQuery(body obj, want int) obj {
	s.t.Helper()
	r := s.post("/streams/v1/queries", body)
	if r.Status != want {
		s.t.Fatalf("register: status %d, want %d; body %s", r.Status, want, r.Raw)
	}
	return asObj(s.t, r.Body)
}

// cycle posts a cycle and returns the answer (status must be 200).
func (s *stack) cycle(body any) obj {
	s.t.Helper()
	r := s.post("/streams/v1/cycle", body)
	if r.Status != http.StatusOK {
		s.t.Fatalf("cycle: status %d body %s", r.Status, r.Raw)
	}
	return asObj(s.t, r.Body)
}

// stateRows posts a state read and returns its rows as "key=value" (the
// answer must succeed).
func (s *stack) stateRows(body obj) []string {
	s.t.Helper()
	r := s.post("/streams/v1/state/get", body)
	if r.Status != http.StatusOK {
		s.t.Fatalf("state/get: status %d body %s", r.Status, r.Raw)
	}
	o := asObj(s.t, r.Body)
	wantKeys(s.t, "state/get", o, "success", "rows")
	if o["success"] != true {
		s.t.Fatalf("state/get failed: %s", r.Raw)
	}
	var out []string
	for _, rw := range asArr(s.t, o["rows"]) {
		row := asObj(s.t, rw)
		wantKeys(s.t, "state row", row, "key", "value", "updated_at")
		if !millisRE.MatchString(asStr(s.t, row["updated_at"])) {
			s.t.Errorf("updated_at %v", row["updated_at"])
		}
		v, err := json.Marshal(row["value"])
		if err != nil {
			s.t.Fatal(err)
		}
		out = append(out, asStr(s.t, row["key"])+"="+string(v))
	}
	return out
}

func TestHTTPStreamsEndToEnd(t *testing.T) {
	s := newStack(t)
	reg := obj{"name": "orders.per_customer", "source_queue": "orders", "sink_queue": "orders.totals",
		"config_hash": "sha256:3f2a", "reset": false}
	o := s.registerQuery(reg, http.StatusOK)
	wantKeys(t, "registration", o, "success", "query_id", "name", "config_hash", "fresh", "reset")
	qid := wantUUID(t, "query_id", o["query_id"])
	if o["success"] != true || o["name"] != "orders.per_customer" || o["config_hash"] != "sha256:3f2a" ||
		o["fresh"] != true || o["reset"] != false {
		t.Fatalf("registration %v", o)
	}
	if o := s.registerQuery(reg, http.StatusOK); o["fresh"] != false || o["query_id"] != qid || o["reset"] != false {
		t.Errorf("idempotent registration %v", o)
	}

	s.push(obj{"queue": "orders", "partition": "customer-42", "payload": obj{"amount": 5}, "transactionId": "o1"},
		obj{"queue": "orders", "partition": "customer-42", "payload": obj{"amount": 7.5}, "transactionId": "o2"})
	p := s.pop("/api/v1/pop/queue/orders?consumerGroup=streams.agg&batch=10")
	msgs := asArr(t, p["messages"])
	if len(msgs) != 2 {
		t.Fatalf("pop %v", p)
	}
	pid, lease := asStr(t, p["partitionId"]), asStr(t, p["leaseId"])

	c := s.cycle(obj{
		"query_id": qid, "partition_id": pid, "consumer_group": "streams.agg",
		"state_ops": arr{
			obj{"type": "upsert", "key": "win:1715850000000", "value": obj{"sum": 12.5, "windowEnd": 1715850060000}},
			obj{"type": "upsert", "key": "agg\u001fcustomer-42", "value": obj{"sum": 12.5}},
			obj{"type": "upsert", "key": "scratch", "value": 1},
			obj{"type": "delete", "key": "scratch"},
		},
		"push_items": arr{obj{"queue": "orders.totals", "partition": "customer-42",
			"payload": obj{"customer": "customer-42", "sum": 12.5}, "transactionId": "total-1"}},
		"ack":           obj{"transactionId": "o2", "leaseId": lease, "status": "completed", "count": 2},
		"release_lease": true,
	})
	wantKeys(t, "cycle", c, "success", "query_id", "partition_id", "queueName", "state_ops_applied", "push_results", "ack_result")
	if c["success"] != true || c["query_id"] != qid || c["partition_id"] != pid || c["queueName"] != "orders" ||
		asInt(t, c["state_ops_applied"]) != 4 {
		t.Fatalf("cycle %v", c)
	}
	prs := asArr(t, c["push_results"])
	if len(prs) != 1 {
		t.Fatalf("push_results %v", prs)
	}
	pr := asObj(t, prs[0])
	for _, k := range []string{"index", "status", "message_id", "transaction_id", "partition_id", "trace_id", "queueName"} {
		if _, ok := pr[k]; !ok {
			t.Errorf("push result lacks %q: %v", k, pr)
		}
	}
	if pr["status"] != "queued" || pr["transaction_id"] != "total-1" || pr["queueName"] != "orders.totals" || pr["trace_id"] != nil {
		t.Errorf("push result %v", pr)
	}
	wantUUID(t, "message_id", pr["message_id"])
	ack := asObj(t, c["ack_result"])
	wantKeys(t, "ack_result", ack, "success", "count", "lease_released", "dlq")
	if ack["success"] != true || asInt(t, ack["count"]) != 2 || ack["lease_released"] != true || ack["dlq"] != false {
		t.Errorf("ack_result %v", ack)
	}

	// The source is consumed, the sink holds the result.
	if p := s.pop("/api/v1/pop/queue/orders?consumerGroup=streams.agg"); p != nil {
		t.Errorf("consumed source delivered again: %v", p)
	}
	out := s.popOne("/api/v1/pop/queue/orders.totals")
	if out["transactionId"] != "total-1" || asObj(t, out["data"])["customer"] != "customer-42" {
		t.Errorf("sink message %v", out)
	}

	all := s.stateRows(obj{"query_id": qid, "partition_id": pid})
	want := []string{`agg` + "\x1f" + `customer-42={"sum":12.5}`, `win:1715850000000={"sum":12.5,"windowEnd":1715850060000}`}
	if strings.Join(all, "|") != strings.Join(want, "|") {
		t.Errorf("rows\n got %q\nwant %q", all, want)
	}
	if got := s.stateRows(obj{"query_id": qid, "partition_id": pid, "key_prefix": "agg\u001f"}); len(got) != 1 || got[0] != want[0] {
		t.Errorf("prefix rows %q", got)
	}
	if got := s.stateRows(obj{"query_id": qid, "partition_id": pid, "keys": arr{"win:1715850000000", "nope"}}); len(got) != 1 || got[0] != want[1] {
		t.Errorf("rows by key %q", got)
	}
	if got := s.stateRows(obj{"query_id": qid, "partition_id": pid, "keys": arr{}, "ripe_at_or_before": 1715850060000}); len(got) != 1 || got[0] != want[1] {
		t.Errorf("ripe rows %q", got)
	}
	if got := s.stateRows(obj{"query_id": qid, "partition_id": pid, "ripe_at_or_before": 1715850059999}); len(got) != 0 {
		t.Errorf("unripe rows %q", got)
	}
	// A linearizable read is served too.
	if r := s.post("/streams/v1/state/get?consistency=linearizable", obj{"query_id": qid, "partition_id": pid}); r.Status != http.StatusOK {
		t.Errorf("linearizable read %d %s", r.Status, r.Raw)
	}

	// A changed hash is a conflict until the client asks for a reset.
	changed := obj{"name": "orders.per_customer", "source_queue": "orders", "sink_queue": "orders.totals", "config_hash": "sha256:beef"}
	o = s.registerQuery(changed, http.StatusConflict)
	wantKeys(t, "conflict", o, "success", "query_id", "name", "error", "code")
	if o["success"] != false || o["code"] != "conflict" || o["query_id"] != qid || o["name"] != "orders.per_customer" ||
		!strings.HasPrefix(asStr(t, o["error"]), "config_hash mismatch: ") {
		t.Errorf("conflict %v", o)
	}
	if got := s.stateRows(obj{"query_id": qid, "partition_id": pid}); len(got) != 2 {
		t.Errorf("state after a refused registration %q", got)
	}
	changed["reset"] = true
	o = s.registerQuery(changed, http.StatusOK)
	if o["success"] != true || o["query_id"] != qid || o["config_hash"] != "sha256:beef" || o["fresh"] != false || o["reset"] != true {
		t.Errorf("reset %v", o)
	}
	if got := s.stateRows(obj{"query_id": qid, "partition_id": pid}); len(got) != 0 {
		t.Errorf("state after reset %q", got)
	}

	// A cycle without ack or pushes: ack_result null, push_results empty.
	c = s.cycle(obj{"query_id": qid, "partition_id": pid, "state_ops": arr{obj{"type": "upsert", "key": "k", "value": nil}},
		"push_items": arr{}, "ack": nil})
	if c["success"] != true || c["ack_result"] != nil || len(asArr(t, c["push_results"])) != 0 || asInt(t, c["state_ops_applied"]) != 1 {
		t.Errorf("state-only cycle %v", c)
	}
	if got := s.stateRows(obj{"query_id": qid, "partition_id": pid}); len(got) != 1 || got[0] != "k=null" {
		t.Errorf("null value %q", got)
	}
}

// A cycle whose ack fails answers 200 with success false and applies
// nothing: no state, no pushed message, no sink queue, the lease runs on.
func TestHTTPStreamsCycleFailureAppliesNothing(t *testing.T) {
	s := newStack(t)
	qid := asStr(t, s.registerQuery(obj{"name": "q", "source_queue": "src", "config_hash": "h"}, http.StatusOK)["query_id"])
	s.push(obj{"queue": "src", "payload": 1, "transactionId": "m1"})
	m := s.popOne("/api/v1/pop/queue/src?consumerGroup=g")
	pid := asStr(t, m["partitionId"])
	body := func(ack obj) obj {
		return obj{"query_id": qid, "partition_id": pid, "consumer_group": "g",
			"state_ops":  arr{obj{"type": "upsert", "key": "a", "value": 1}},
			"push_items": arr{obj{"queue": "sink", "payload": 1}}, "ack": ack}
	}
	for _, tc := range []struct {
		ack  obj
		want string
	}{
		{obj{"transactionId": "nope", "leaseId": m["leaseId"]}, "ack failed: unresolvable"},
		{obj{"transactionId": "m1", "leaseId": "01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7"}, "ack failed: Invalid or expired lease"},
		{obj{"transactionId": "m1", "status": "later"}, "ack failed: Unknown status: later"},
		{obj{"transactionId": "m1", "status": "retry"}, "ack failed: Unknown status: retry"},
	} {
		c := s.cycle(body(tc.ack))
		wantKeys(t, "failed cycle", c, "success", "query_id", "partition_id", "queueName", "error")
		if c["success"] != false || c["error"] != tc.want || c["query_id"] != qid || c["partition_id"] != pid {
			t.Errorf("failed cycle %v, want error %q", c, tc.want)
		}
	}
	if got := s.stateRows(obj{"query_id": qid, "partition_id": pid}); len(got) != 0 {
		t.Errorf("state written by failed cycles %q", got)
	}
	if s.queueExists("sink") {
		t.Errorf("a failed cycle created its sink queue")
	}
	// The lease is intact: its holder can still complete the message.
	if a := s.ack(obj{"transactionId": "m1", "partitionId": pid, "leaseId": m["leaseId"], "consumerGroup": "g"}); a["success"] != true {
		t.Errorf("ack after failed cycles %v", a)
	}

	// Unknown query: a failure in the body; state/get says so too.
	c := s.cycle(obj{"query_id": "01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7", "partition_id": pid})
	if c["success"] != false || c["error"] != "query not found" {
		t.Errorf("unknown query cycle %v", c)
	}
	r := s.post("/streams/v1/state/get", obj{"query_id": "01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7", "partition_id": pid})
	if o := asObj(t, r.Body); r.Status != http.StatusOK || o["success"] != false || o["error"] != "query not found" {
		t.Errorf("unknown query read %d %s", r.Status, r.Raw)
	}
}

// failed and dlq dead-letter the message at once and end the lease.
func TestHTTPStreamsCycleDLQ(t *testing.T) {
	s := newStack(t)
	qid := asStr(t, s.registerQuery(obj{"name": "q", "source_queue": "src", "config_hash": "h"}, http.StatusOK)["query_id"])
	s.push(obj{"queue": "src", "payload": 1, "transactionId": "m1"}, obj{"queue": "src", "payload": 2, "transactionId": "m2"})
	p := s.pop("/api/v1/pop/queue/src?consumerGroup=g&batch=10")
	c := s.cycle(obj{"query_id": qid, "partition_id": p["partitionId"], "consumer_group": "g", "release_lease": false,
		"ack": obj{"transactionId": "m1", "leaseId": p["leaseId"], "status": "failed", "error": "poison"}})
	ack := asObj(t, c["ack_result"])
	if c["success"] != true || ack["dlq"] != true || ack["lease_released"] != true || asInt(t, ack["count"]) != 1 {
		t.Fatalf("dlq cycle %v", c)
	}
	if m := s.popOne("/api/v1/pop/queue/src?consumerGroup=g&batch=10"); m["transactionId"] != "m2" {
		t.Errorf("after dead-letter %v", m)
	}
	st, body := s.get("/api/v1/dlq?queue=src")
	if st != http.StatusOK || !strings.Contains(string(mustJSON(t, body)), "poison") {
		t.Errorf("dlq %d %v", st, body)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHTTPStreamsBadRequests(t *testing.T) {
	s := newStack(t)
	const id = "01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7"
	for _, tc := range []struct {
		path, body, code, field, msg string
	}{
		{"/streams/v1/queries", `{"source_queue":"s","config_hash":"h"}`, "missing_field", "name", "name is required"},
		{"/streams/v1/queries", `{"name":"","source_queue":"s","config_hash":"h"}`, "missing_field", "name", "name is required"},
		{"/streams/v1/queries", `{"name":"n","config_hash":"h"}`, "missing_field", "source_queue", "source_queue is required"},
		{"/streams/v1/queries", `{"name":"n","source_queue":"s"}`, "missing_field", "config_hash", "config_hash is required"},
		{"/streams/v1/queries", `{"name":5,"source_queue":"s","config_hash":"h"}`, "invalid_field", "name", "name must be a string"},
		{"/streams/v1/queries", `{"name":"n","source_queue":"s","config_hash":"h","reset":"maybe"}`, "invalid_field", "reset", "reset must be a boolean"},
		{"/streams/v1/queries", `{"name":"n","source_queue":"s","config_hash":"h","sink_queue":1}`, "invalid_field", "sink_queue", "sink_queue must be a string"},
		{"/streams/v1/state/get", `{"partition_id":"` + id + `"}`, "missing_field", "query_id", "query_id is required"},
		{"/streams/v1/state/get", `{"query_id":"` + id + `"}`, "missing_field", "partition_id", "partition_id is required"},
		{"/streams/v1/state/get", `{"query_id":"x","partition_id":"` + id + `"}`, "invalid_field", "query_id", `query_id must be a UUID, got "x"`},
		{"/streams/v1/state/get", `{"query_id":"` + id + `","partition_id":"` + id + `","keys":"k"}`, "invalid_field", "keys", "keys must be an array of strings"},
		{"/streams/v1/state/get", `{"query_id":"` + id + `","partition_id":"` + id + `","keys":["a",1]}`, "invalid_field", "keys[1]", "keys[1] must be a string"},
		{"/streams/v1/state/get", `{"query_id":"` + id + `","partition_id":"` + id + `","ripe_at_or_before":"soon"}`, "invalid_field", "ripe_at_or_before", "ripe_at_or_before must be a number"},
		{"/streams/v1/cycle", `{"partition_id":"` + id + `"}`, "missing_field", "query_id", "query_id is required"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `"}`, "missing_field", "partition_id", "partition_id is required"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":{}}`, "invalid_field", "state_ops", "state_ops must be an array"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":[{"key":"k"}]}`, "missing_field", "state_ops[0].type", "state_ops[0].type is required"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":[{"type":"merge","key":"k"}]}`, "invalid_field", "state_ops[0].type", `state_ops[0].type must be "upsert" or "delete"`},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":[{"type":"delete"}]}`, "missing_field", "state_ops[0].key", "state_ops[0].key is required"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":[{"type":"upsert","key":"k"}]}`, "missing_field", "state_ops[0].value", "state_ops[0].value is required for an upsert"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":[{"type":"delete","key":"` + strings.Repeat("k", 1025) + `"}]}`, "limit_exceeded", "state_ops[0].key", "state_ops[0].key is 1025 bytes long; the limit is 1024 bytes"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","push_items":{}}`, "invalid_field", "push_items", "push_items must be an array"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","push_items":[{"queue":1}]}`, "invalid_field", "push_items[0].queue", "Queue must be a string"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","ack":{"status":"completed"}}`, "missing_field", "ack.transactionId", "ack.transactionId is required"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","ack":{"transactionId":"t","count":0}}`, "invalid_field", "ack.count", "ack.count must be a positive integer"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","release_lease":1}`, "invalid_field", "release_lease", "release_lease must be a boolean"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","consumer_group":7}`, "invalid_field", "consumer_group", "consumer_group must be a string"},
	} {
		wantError(t, s.post(tc.path, tc.body), http.StatusBadRequest, tc.code, tc.field, tc.msg)
	}
	wantError(t, s.post("/streams/v1/cycle", ""), http.StatusBadRequest, "empty_body", "", "Empty request body")
}

// Cycle pushes to an encrypted queue are sealed before they reach the log.
func TestHTTPStreamsCycleSealsEncryptedSink(t *testing.T) {
	var raw [32]byte
	rand.Read(raw[:])
	s := newStack(t, withKey(hex.EncodeToString(raw[:])))
	s.configure(obj{"queue": "secret", "options": obj{"encryptionEnabled": true}})
	qid := asStr(t, s.registerQuery(obj{"name": "q", "source_queue": "src", "sink_queue": "secret", "config_hash": "h"}, http.StatusOK)["query_id"])
	s.push(obj{"queue": "src", "payload": 1, "transactionId": "m1"})
	m := s.popOne("/api/v1/pop/queue/src")
	marker := "crown-streams-marker-" + hex.EncodeToString(raw[:6])
	c := s.cycle(obj{"query_id": qid, "partition_id": m["partitionId"],
		"push_items": arr{obj{"queue": "secret", "payload": obj{"card": marker}}},
		"ack":        obj{"transactionId": "m1", "leaseId": m["leaseId"]}})
	if c["success"] != true {
		t.Fatalf("cycle %v", c)
	}
	if out := s.popOne("/api/v1/pop/queue/secret"); asObj(t, out["data"])["card"] != marker {
		t.Errorf("sink message %v", out)
	}
	if fileContains(t, filepath.Join(s.Dir, "raft", "log.db"), []byte(marker)) {
		t.Errorf("the Raft log holds the plaintext of a cycle's push to an encrypted queue")
	}
	if fileContains(t, filepath.Join(s.Dir, "state"), []byte(marker)) {
		t.Errorf("the state files hold the plaintext of a cycle's push to an encrypted queue")
	}
}
