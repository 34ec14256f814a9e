package httpapi_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Tests for queen-api.md 3.11, 3.13, 3.14, 3.15, 4.3,
// 4.4, 4.7 and 4.20, driven over real HTTP against one in-process node
// (real state machine on disk, real single-node Raft over TCP).

// resTxIDs lists the transaction ids of messages.
func resTxIDs(t testing.TB, msgs arr) []string {
	t.Helper()
	out := []string{}
	for _, m := range msgs {
		out = append(out, asStr(t, asObj(t, m)["transactionId"]))
	}
	return out
}

// queen-api.md 3.13: "Read-only. Dead-letter entries, newest first." The
// queue filter is optional (only the clients always send it), so without it
// the entries of every queue must come newest first, not grouped by queue.
func TestResDLQNewestFirstAcrossQueues(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "aaa", "partition": "p", "payload": obj{"id": "old"}, "transactionId": "old"})
	s.push(obj{"queue": "zzz", "partition": "p", "payload": obj{"id": "new"}, "transactionId": "new"})
	// deadLetter pops the message of queue in queue mode and acks it with status dlq.
	deadLetter := func(queue string) {
		t.Helper()
		m := s.popOne("/api/v1/pop/queue/" + queue)
		body := obj{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
			"leaseId": m["leaseId"], "status": "dlq"}
		if res := s.ack(body); res["success"] != true {
			t.Fatalf("ack %v: %v", body, res)
		}
	}
	// Dead-letter "old" (queue aaa) first, then "new" (queue zzz).
	deadLetter("aaa")
	time.Sleep(20 * time.Millisecond)
	deadLetter("zzz")

	v := asObj(t, s.getOK("/api/v1/dlq"))
	got := resTxIDs(t, asArr(t, v["messages"]))
	if strings.Join(got, ",") != "new,old" {
		t.Errorf("GET /api/v1/dlq order = %v, want [new old] (newest dead-lettering first)", got)
	}
	// Paging must follow the same order: the first page of one is the newest.
	v = asObj(t, s.getOK("/api/v1/dlq?limit=1"))
	if got := resTxIDs(t, asArr(t, v["messages"])); len(got) != 1 || got[0] != "new" {
		t.Errorf("GET /api/v1/dlq?limit=1 = %v, want [new]", got)
	}
}

// queen-api.md 3.15 (partition seek): "Unknown partition: 500 {"success":
// false, "error": "Partition not found"} in Queen; the broker SHOULD answer
// 404 with the same body." Section 1.4 lets the broker add "a stable
// machine-readable code next to it", and Crown's README (Errors) promises
// that every request-level error carries one ("not_found" for an unknown
// resource), as its other 404s do (queue detail, message traces).
func TestResSeekPartitionNotFoundHasCode(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "q", "partition": "p1", "payload": obj{"id": "m1"}, "transactionId": "m1"})
	for _, path := range []string{
		"/api/v1/consumer-groups/g/queues/q/partitions/nope/seek",    // unknown partition
		"/api/v1/consumer-groups/g/queues/nosuch/partitions/p1/seek", // unknown queue
	} {
		st, v := s.postJSON(path, `{}`)
		o, _ := v.(obj)
		if st != http.StatusNotFound || o["error"] != "Partition not found" || o["success"] != false {
			t.Fatalf("POST %s: %d %v, want 404 {success:false, error:Partition not found}", path, st, v)
		}
		if o["code"] != "not_found" {
			t.Errorf("POST %s: body %v has code %v, want \"not_found\" like every other 404", path, v, o["code"])
		}
	}
}

// queen-api.md 1.2: names (queue, partition, consumer group) are "case-
// sensitive strings" that MUST be percent-decoded from paths and queries, and
// section 2: a consumer group "exists as soon as a pop or ack names it". 3.15
// lists every group by name and DELETE /api/v1/consumer-groups/{group}
// "Removes the group's cursors ... with deleteMetadata (default true) also its
// subscription records". A name taken from a query parameter that is not
// valid UTF-8 (here Latin-1 "café" as a client might percent-encode it)
// would be stored as raw bytes but listed as U+FFFD, then be neither
// readable nor deletable by the name the listing gives: it is refused (400,
// nothing written), or stored as the listing shows it.
func TestResGroupNameFromQueryRoundTrips(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "q", "partition": "p1", "payload": obj{"id": "m1"}, "transactionId": "m1"})
	st, v := s.get("/api/v1/pop/queue/q?consumerGroup=caf%E9&subscriptionMode=new")
	if st == http.StatusBadRequest {
		return // refusing a name that cannot round-trip is a fix
	}
	if st != http.StatusNoContent {
		t.Fatalf("pop: %d %v", st, v)
	}
	rows := asArr(t, s.getOK("/api/v1/consumer-groups"))
	if len(rows) == 0 {
		return // treating the name like an over-long one (nothing written) is a fix too
	}
	if len(rows) != 1 {
		t.Fatalf("listing %v, want the one group the pop named", rows)
	}
	name := asStr(t, asObj(t, rows[0])["name"])
	// The listed name addresses the group: its detail names queue q ...
	if d := asObj(t, s.getOK("/api/v1/consumer-groups/"+url.PathEscape(name))); d["q"] == nil {
		t.Errorf("GET /api/v1/consumer-groups/%s = %v: the group the listing shows is unknown by that name", url.PathEscape(name), d)
	}
	// ... and deleting it by that name removes it from the listing.
	if r := s.do(http.MethodDelete, "/api/v1/consumer-groups/"+url.PathEscape(name), nil); r.Status != http.StatusOK {
		t.Fatalf("DELETE /api/v1/consumer-groups/%s: status %d, want 200: %s", url.PathEscape(name), r.Status, r.Raw)
	}
	if rows := asArr(t, s.getOK("/api/v1/consumer-groups")); len(rows) != 0 {
		t.Errorf("after DELETE /api/v1/consumer-groups/%s the listing still holds %v", url.PathEscape(name), rows)
	}
}
