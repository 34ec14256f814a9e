package httpapi_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Edges of the message browsing and consumer-group administration endpoints
// (queen-api.md 3.12, 3.15) that the other tests do not reach: time ranges
// whose `to` covers the rest of its minute, a `from` with no `to`, an
// undecodable deleteMetadata, and names read from a path that are not UTF-8.

// listTxIDs lists the transaction ids of a GET /api/v1/messages answer.
func listTxIDs(t *testing.T, s *stack, query string) []string {
	t.Helper()
	var out []string
	for _, m := range asArr(t, asObj(t, s.getOK("/api/v1/messages?"+query))["messages"]) {
		out = append(out, asStr(t, asObj(t, m)["transactionId"]))
	}
	return out
}

// queen-api.md 3.12: `to` is "inclusive to the end of that minute". A `from`
// later than `to` but inside `to`'s minute still leaves a range: the
// messages from `from` to the end of the minute. Such a listing (a
// dashboard's `to` picked to the minute, a `from` to the second) must list
// them, not be refused as a `from` after its `to`.
func TestListMessagesFromInsideToMinute(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "lm", "partition": "p", "payload": 1, "transactionId": "t1"})
	m := asObj(t, asArr(t, asObj(t, s.getOK("/api/v1/messages?queue=lm"))["messages"])[0])
	created, err := time.Parse(time.RFC3339Nano, asStr(t, m["createdAt"]))
	if err != nil {
		t.Fatal(err)
	}
	from := created.Format(time.RFC3339Nano)
	to := created.Truncate(time.Minute).Format(time.RFC3339)
	q := "queue=lm&from=" + url.QueryEscape(from) + "&to=" + url.QueryEscape(to)
	if got := listTxIDs(t, s, q); strings.Join(got, ",") != "t1" {
		t.Errorf("messages?%s: %v, want [t1] (to covers the rest of its minute)", q, got)
	}
	// A from at or after the end of to's minute is still a from after its to.
	late := created.Truncate(time.Minute).Add(time.Minute).Format(time.RFC3339)
	wantErrorAnyText(t, "from after the end of to's minute",
		s.do(http.MethodGet, "/api/v1/messages?from="+url.QueryEscape(late)+"&to="+url.QueryEscape(to), nil),
		http.StatusBadRequest, "invalid_field", "from")
}

// queen-api.md 3.12: `to` defaults to now. A `from` after now with no `to`
// (a client whose clock runs ahead, or one asking for what is still to come)
// selects nothing yet: an empty page, as for a `to` before the default
// `from`, not the 400 reserved for a `from` the client sent after its own `to`.
func TestListMessagesFutureFromWithoutTo(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "lm", "partition": "p", "payload": 1, "transactionId": "t1"})
	from := time.Now().UTC().Add(24 * time.Hour).Format(time.RFC3339)
	r := s.do(http.MethodGet, "/api/v1/messages?queue=lm&from="+url.QueryEscape(from), nil)
	if r.Status != http.StatusOK {
		t.Fatalf("from=%s without to: status %d, want 200; body %s", from, r.Status, r.Raw)
	}
	if msgs := asArr(t, asObj(t, r.Body)["messages"]); len(msgs) != 0 {
		t.Errorf("from=%s without to: %v, want no message", from, msgs)
	}
}

// queen-api.md 3.15 and the README: deleteMetadata is true when absent and
// false for any value other than true and 1. A value that does not
// URL-decode is dropped by url.Values, which made it read as absent and
// delete the group's subscription records: it is refused instead, and
// nothing is deleted.
func TestDeleteGroupUndecodableDeleteMetadataRefused(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "dg", "partition": "p", "payload": 1, "transactionId": "t1"})
	if got := s.popGroupTxIDs("/api/v1/pop/queue/dg?consumerGroup=g&subscriptionMode=new"); len(got) != 0 {
		t.Fatalf("new-mode first contact delivered %v", got)
	}
	for _, q := range []string{"deleteMetadata=%ZZ", "deleteMetadata=false;x"} {
		for _, path := range []string{"/api/v1/consumer-groups/g?" + q, "/api/v1/consumer-groups/g/queues/dg?" + q} {
			wantErrorAnyText(t, "DELETE "+path, s.do(http.MethodDelete, path, nil), http.StatusBadRequest,
				"invalid_field", "deleteMetadata")
		}
	}
	_, body := s.get("/api/v1/consumer-groups")
	if row := groupRow(t, asArr(t, body), "g", "dg"); row["subscriptionMode"] != "new" {
		t.Errorf("subscription after refused deletions: %v", row)
	}
}

// README Limits: names read from a path must be valid UTF-8 (400
// invalid_field) and at most 255 bytes (400 limit_exceeded), as DELETE of a
// message and the trace listing already answer. GET of a message and of a
// consumer group answered 404 and {} for such names instead.
func TestGetByPathNameRefusesInvalidName(t *testing.T) {
	s := newStack(t)
	res := s.push(obj{"queue": "gn", "partition": "p", "payload": 1, "transactionId": "t1"})
	pid := asStr(t, asObj(t, res[0])["partition_id"])
	for _, c := range []struct{ path, code, field string }{
		{"/api/v1/messages/" + pid + "/%FF", "invalid_field", "transactionId"},
		{"/api/v1/messages/" + pid + "/" + strings.Repeat("x", 256), "limit_exceeded", "transactionId"},
		{"/api/v1/consumer-groups/%FF", "invalid_field", "consumerGroup"},
		{"/api/v1/consumer-groups/" + strings.Repeat("g", 256), "limit_exceeded", "consumerGroup"},
	} {
		wantErrorAnyText(t, "GET "+c.path, s.do(http.MethodGet, c.path, nil), http.StatusBadRequest, c.code, c.field)
	}
}

// README Limits and queen-api.md 1.2: a queue, partition, group or tag name
// read from a path or a query string is at most 255 bytes of UTF-8, as a
// pop and the message and group reads above enforce. The queue reads and the
// listings' name filters answered such a name with a 404 or an empty page,
// which hides the mistake (a filter cut or mangled on its way) as "nothing
// there".
func TestReadsRefuseInvalidNames(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "rn", "partition": "p", "payload": 1, "transactionId": "t1"})
	long := strings.Repeat("n", 256)
	for _, c := range []struct{ path, code, field string }{
		{"/api/v1/resources/queues/%FF", "invalid_field", "queue"},
		{"/api/v1/resources/queues/" + long, "limit_exceeded", "queue"},
		{"/api/v1/status/queues/%FF", "invalid_field", "queue"},
		{"/api/v1/status/queues/" + long + "/messages", "limit_exceeded", "queue"},
		{"/api/v1/resources/queues?namespace=%FF", "invalid_field", "namespace"},
		{"/api/v1/dlq?queue=" + long, "limit_exceeded", "queue"},
		{"/api/v1/dlq?queue=rn&consumerGroup=%C3", "invalid_field", "consumerGroup"},
		{"/api/v1/dlq?queue=rn&partition=" + long, "limit_exceeded", "partition"},
		{"/api/v1/messages?ns=%FF", "invalid_field", "ns"},
		{"/api/v1/messages?queue=rn&partition=" + long, "limit_exceeded", "partition"},
		{"/api/v1/status?task=" + long, "limit_exceeded", "task"},
		{"/api/v1/status/queues?task=%FF", "invalid_field", "task"},
		{"/api/v1/status/analytics?queue=%FF", "invalid_field", "queue"},
	} {
		wantErrorAnyText(t, "GET "+c.path, s.do(http.MethodGet, c.path, nil), http.StatusBadRequest, c.code, c.field)
	}
	// Names at the limit are names: an unknown one is still a 404 or an
	// empty answer.
	atLimit := strings.Repeat("n", 255)
	wantError(t, s.do(http.MethodGet, "/api/v1/resources/queues/"+atLimit, nil), http.StatusNotFound, "not_found", "", "Queue not found")
	if n := asInt(t, asObj(t, s.getOK("/api/v1/dlq?queue="+atLimit))["total"]); n != 0 {
		t.Errorf("dlq of an unknown queue: total %d", n)
	}
	if msgs := asArr(t, asObj(t, s.getOK("/api/v1/messages?queue=rn&partition=p"))["messages"]); len(msgs) != 1 {
		t.Errorf("messages of rn/p: %v", msgs)
	}
}
