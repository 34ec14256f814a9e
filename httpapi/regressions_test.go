package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Regression tests for defects found in package httpapi, each with the spec
// rule it checks and the mechanism that broke.

// Push items and acks are decoded with encoding/json into structs
// (rawPushItem, rawAck in parse.go), whose key matching is case-insensitive.
// A differently-cased key is an unknown field that must be ignored
// (queen-api.md 1.2), and a required key in the wrong case is missing.
func TestRegressionFieldNamesMatchedCaseInsensitively(t *testing.T) {
	s := newStack(t)
	// "Partition" is not a field of a push item: it must be ignored.
	r := s.post("/api/v1/push", `{"items":[{"queue":"ci","Partition":5,"payload":1}]}`)
	if r.Status != http.StatusCreated {
		t.Errorf("push with an unknown key \"Partition\": %d %s, want 201 (unknown fields are ignored)", r.Status, r.Raw)
	}
	// "QUEUE" is not "queue": the item has no queue.
	r = s.post("/api/v1/push", `{"items":[{"QUEUE":"ci-upper","payload":1}]}`)
	if r.Status != http.StatusBadRequest {
		t.Errorf("push with \"QUEUE\" instead of \"queue\": %d %s, want 400 \"Queue must be a string\"", r.Status, r.Raw)
	}
	// The same on acks: "TransactionId" is not "transactionId".
	r = s.post("/api/v1/ack", `{"TransactionId":"t","partitionId":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09"}`)
	if r.Status != http.StatusBadRequest {
		t.Errorf("ack with \"TransactionId\": %d %s, want 400 \"transactionId is required\"", r.Status, r.Raw)
	}
	r = s.post("/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"t","partitionId":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09","Status":7}]}`)
	if r.Status != http.StatusOK {
		t.Errorf("batch ack with an unknown key \"Status\": %d %s, want 200", r.Status, r.Raw)
	}
}

// parseUUID (respond.go) leaves the bytes it decoded before the first bad
// hex digit in the id it returns with ok=false, and rawAck.item (parse.go)
// keeps that id for a leaseId that is not a UUID ("A lease id that is not a
// UUID can never match a live lease"). Lease ids come from a sequence, so
// every 256th one ends in 00, and "<first 34 characters>zz" then matches it:
// an ack carrying a malformed lease id is accepted against the live lease
// (queen-api.md 3.7, 4.10: the ack is accepted only if this lease holds the
// partition).
func TestRegressionMalformedLeaseIDMatchesLiveLease(t *testing.T) {
	s := newStack(t)
	victim := asObj(t, s.push(obj{"queue": "lz", "partition": "p", "payload": 1, "transactionId": "victim"})[0])
	filler := asObj(t, s.push(obj{"queue": "filler", "payload": 0})[0])
	// Ids are sequential; advance the sequence so the next id (the lease) ends in 00.
	last, err := strconv.ParseUint(asStr(t, filler["message_id"])[34:], 16, 8)
	if err != nil {
		t.Fatal(err)
	}
	if k := (255 - last) % 256; k > 0 {
		items := make([]obj, k)
		for i := range items {
			items[i] = obj{"queue": "filler", "payload": i}
		}
		s.push(items...)
	}
	m := s.popOne("/api/v1/pop/queue/lz")
	lease := asStr(t, m["leaseId"])
	if !strings.HasSuffix(lease, "00") {
		t.Fatalf("precondition: lease %s does not end in 00 (victim %v)", lease, victim["message_id"])
	}
	malformed := lease[:34] + "zz"
	res := s.ack(obj{"transactionId": "victim", "partitionId": m["partitionId"], "leaseId": malformed})
	if res["success"] != false || res["error"] != "Invalid or expired lease" {
		t.Errorf("ack with lease id %q (not a UUID) against live lease %s: %v; want success false, \"Invalid or expired lease\"",
			malformed, lease, res)
	}
}

// jsonString (parse.go) returns the raw bytes of a string without escapes,
// so invalid UTF-8 is stored as is, while every response (encoding/json)
// shows it as U+FFFD: the queue cannot be addressed by the name the API
// reports. The slow path (a string with an escape) goes through
// encoding/json, which replaces the bad bytes, so the same decoder is
// inconsistent with itself. Names must round-trip
// (queen-api.md 1.2, 2): refuse invalid UTF-8 or decode it like
// encoding/json does.
func TestRegressionInvalidUTF8NameDoesNotRoundTrip(t *testing.T) {
	s := newStack(t)
	r := s.post("/api/v1/push", "{\"items\":[{\"queue\":\"u\xff\",\"payload\":1}]}")
	if r.Status == http.StatusBadRequest {
		return // refusing invalid UTF-8 is a fix
	}
	if r.Status != http.StatusCreated {
		t.Fatalf("push %d %s", r.Status, r.Raw)
	}
	echoed := asStr(t, asObj(t, asArr(t, r.Body)[0])["queueName"])
	if !s.queueExists(echoed) {
		t.Errorf("push answered queueName %q, but GET /api/v1/resources/queues/%s finds no such queue", echoed, url.PathEscape(echoed))
	}
}

// parseTxOp (parse.go) turns every item error into a failed transaction
// inside a 200, including the documented limits: a name over 255 bytes or
// more than 10,000 items. queen-api.md 1.2 ("A longer value MUST be
// rejected with 400 and nothing written") and the README limits table
// (400 limit_exceeded) make these request-level 400s.
func TestRegressionTransactionLimitsAnswer200(t *testing.T) {
	s := newStack(t)
	r := s.post("/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"`+strings.Repeat("q", 256)+`","payload":1}]}]}`)
	if r.Status != http.StatusBadRequest || asObj(t, r.Body)["code"] != "limit_exceeded" {
		t.Errorf("transaction pushing to a 256-byte queue name: %d %s; want 400 limit_exceeded", r.Status, r.Raw)
	}
	items := make([]string, 10001)
	for i := range items {
		items[i] = `{"queue":"tq"}`
	}
	r = s.post("/api/v1/transaction", `{"operations":[{"type":"push","items":[`+strings.Join(items, ",")+`]}]}`)
	if r.Status != http.StatusBadRequest || asObj(t, r.Body)["code"] != "limit_exceeded" {
		t.Errorf("transaction pushing 10,001 items: %d %.300s; want 400 limit_exceeded", r.Status, r.Raw)
	}
}

// parsePop (pop.go) multiplies the timeout in milliseconds into a
// time.Duration without bounds: a timeout above about 292 years overflows
// to a negative duration and the long-poll answers 204 at once instead of
// waiting (queen-api.md 3.6, 4.9), so a client polling with such a value
// spins. Clamp the value before converting it.
func TestRegressionHugePopTimeoutDoesNotWait(t *testing.T) {
	s := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/pop/queue/empty?wait=true&timeout=10000000000000", nil)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Errorf("long poll with timeout=10000000000000 answered %d after %v; want it still waiting after 1 s",
			resp.StatusCode, time.Since(start))
		return
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(fmt.Errorf("unexpected error: %w", err))
	}
}
