package httpapi_test

import (
	"net/http"
	"testing"
)

// Conformance checks of the read and admin endpoints (queen-api.md 3.11,
// 3.13, 3.14, 3.18 and the conventions of section 1) for inputs the other
// tests do not reach: extreme page bounds and time filters at the edge of
// the epoch, and filters that do not URL-decode.

// deadLetterEach pushes one message per transaction id to queue, pops it in
// queue mode and dead-letters it with a dlq ack.
func deadLetterEach(t *testing.T, s *stack, queue string, txIDs ...string) {
	t.Helper()
	for _, tx := range txIDs {
		s.push(obj{"queue": queue, "partition": "p", "payload": obj{"tx": tx}, "transactionId": tx})
		m := s.popOne("/api/v1/pop/queue/" + queue)
		res := s.ack(obj{"transactionId": tx, "partitionId": m["partitionId"], "leaseId": m["leaseId"], "status": "dlq"})
		if res["success"] != true || res["dlq"] != true {
			t.Fatalf("dlq ack of %s: %v", tx, res)
		}
	}
}

// queen-api.md 1.2: integer query parameters never fail a request, and 1.4
// keeps 500 for internal failures. A DLQ page whose limit is the largest
// int64 must list what follows the offset, not overflow offset+limit into
// a slice panic answered as 500.
func TestDLQHugeLimitWithOffset(t *testing.T) {
	s := newStack(t)
	deadLetterEach(t, s, "dq", "m1", "m2", "m3")
	r := s.do(http.MethodGet, "/api/v1/dlq?queue=dq&limit=9223372036854775807&offset=1", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("status %d, want 200; body %s", r.Status, r.Raw)
	}
	o := asObj(t, r.Body)
	if got := resTxIDs(t, asArr(t, o["messages"])); len(got) != 2 || got[0] != "m2" || got[1] != "m1" {
		t.Errorf("page after offset 1 = %v, want [m2 m1]", got)
	}
	if asInt(t, o["total"]) != 3 || asInt(t, o["offset"]) != 1 {
		t.Errorf("total %v offset %v, want 3 and 1", o["total"], o["offset"])
	}
}

// queen-api.md 3.13: `to` is a bound on the dead-lettering time that the
// broker MUST honour (section 6, point 15). A `to` at the Unix epoch is a
// bound like any other: every entry was dead-lettered after it, so none
// matches; it must not be mistaken for an absent filter.
func TestDLQToAtEpochIsABound(t *testing.T) {
	s := newStack(t)
	deadLetterEach(t, s, "dq", "m1")
	for _, to := range []string{"1970-01-01", "1970-01-01T00:00:00Z"} {
		o := asObj(t, s.getOK("/api/v1/dlq?queue=dq&to="+to))
		if n := asInt(t, o["total"]); n != 0 || len(asArr(t, o["messages"])) != 0 {
			t.Errorf("dlq?to=%s: total %d, %d messages; want none (every entry failed after %s)",
				to, n, len(asArr(t, o["messages"])), to)
		}
	}
	// The bound on the other side stays open-ended: from the epoch on is everything.
	if n := asInt(t, asObj(t, s.getOK("/api/v1/dlq?queue=dq&from=1970-01-01"))["total"]); n != 1 {
		t.Errorf("dlq?from=1970-01-01: total %d, want 1", n)
	}
}

// queen-api.md 1.2: integer query parameters fall back or apply, they do
// not fail the request; the README's Limits table caps the offset of the
// message listings only. An offset past every queue of GET
// /api/v1/status/queues is an empty page, as it is for
// /api/v1/resources/queues, not an undocumented 400.
func TestStatusQueuesLargeOffsetIsEmptyPage(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "sq", "payload": 1})
	for _, path := range []string{"/api/v1/status/queues?offset=3000000000", "/api/v1/resources/queues?offset=3000000000"} {
		r := s.do(http.MethodGet, path, nil)
		if r.Status != http.StatusOK {
			t.Errorf("GET %s: status %d, want 200; body %s", path, r.Status, r.Raw)
			continue
		}
		if qs := asArr(t, asObj(t, r.Body)["queues"]); len(qs) != 0 {
			t.Errorf("GET %s: %d queues, want an empty page", path, len(qs))
		}
	}
	o := asObj(t, s.getOK("/api/v1/status/queues?offset=3000000000"))
	if p := asObj(t, o["pagination"]); asInt(t, p["offset"]) != 3000000000 || asInt(t, p["limit"]) != 100 {
		t.Errorf("pagination %v, want offset 3000000000 and limit 100", p)
	}
}

// queen-api.md 1.2: query values are URL-decoded, and 3.13 and 3.11 make
// queue, namespace and task filters that the broker MUST (3.13) or SHOULD
// (3.11) honour. A filter value that cannot be decoded (a bad %XX escape,
// or a ';', which net/url refuses as a separator) is silently dropped by
// url.Values, so the request would answer the entries of every queue: such
// a filter is refused with a 400 naming it instead.
func TestUndecodableFilterIsRefused(t *testing.T) {
	s := newStack(t)
	deadLetterEach(t, s, "other", "m1")
	s.configure(obj{"queue": "mine", "namespace": "ns", "task": "tk"})
	for _, tc := range []struct{ path, field string }{
		{"/api/v1/dlq?queue=%ZZ", "queue"},
		{"/api/v1/dlq?queue=mine;x", "queue"},
		{"/api/v1/dlq?consumerGroup=%G1", "consumerGroup"},
		{"/api/v1/resources/queues?namespace=%ZZ", "namespace"},
		{"/api/v1/status/queues?task=%", "task"},
		{"/api/v1/status?queue=%ZZ", "queue"},
		{"/api/v1/status/analytics?namespace=%ZZ", "namespace"},
		{"/api/v1/messages?queue=%ZZ", "queue"},
		{"/api/v1/pop/queue/mine?consumerGroup=%ZZ", "consumerGroup"},
		{"/api/v1/pop?namespace=ns&task=%ZZ", "task"},
	} {
		wantErrorAnyText(t, "GET "+tc.path, s.do(http.MethodGet, tc.path, nil), http.StatusBadRequest, "invalid_field", tc.field)
	}
	// Integers keep their fallback (1.2): an undecodable limit is the default.
	if n := asInt(t, asObj(t, s.getOK("/api/v1/dlq?queue=other&limit=%ZZ"))["limit"]); n != 100 {
		t.Errorf("dlq?limit=%%ZZ: limit %d, want the default 100", n)
	}
}

// A status range whose only sent bound lies beyond the defaulted one (a
// from in the future with no to; a to before the hour the default from
// reaches back) has nothing in it yet: a zero-length range at the sent
// bound, as GET /api/v1/messages answers an empty page (README, "from
// after a defaulted bound"). Only a from after the client's own to is a
// 400 naming from.
func TestStatusRangePastADefaultedBoundIsEmpty(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "sq", "partition": "p", "payload": 1})
	for _, path := range []string{"/api/v1/status", "/api/v1/status/analytics"} {
		o := asObj(t, s.getOK(path+"?from=2999-01-01"))
		rng := o
		if tr, ok := o["timeRange"]; ok {
			rng = asObj(t, tr)
		}
		if rng["from"] != "2999-01-01T00:00:00.000Z" || rng["to"] != rng["from"] {
			t.Errorf("%s?from=2999-01-01: range %v to %v, want both at 2999-01-01", path, rng["from"], rng["to"])
		}
		o = asObj(t, s.getOK(path+"?to=2000-01-01"))
		if tr, ok := o["timeRange"]; ok {
			o = asObj(t, tr)
		}
		if o["from"] != "2000-01-01T00:00:00.000Z" || o["to"] != o["from"] {
			t.Errorf("%s?to=2000-01-01: range %v to %v, want both at 2000-01-01", path, o["from"], o["to"])
		}
		r := s.do(http.MethodGet, path+"?from=2000-01-02&to=2000-01-01", nil)
		if r.Status != http.StatusBadRequest || asObj(t, r.Body)["code"] != "invalid_field" {
			t.Errorf("%s with from after to: %d %s, want 400 invalid_field", path, r.Status, r.Raw)
		}
	}
}
