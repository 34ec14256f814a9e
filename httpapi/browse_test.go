package httpapi_test

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The read-only browsing, resource and status endpoints (queen-api.md 3.11,
// 3.12, 3.14) through the real stack.

// getOK GETs a path and requires 200.
func (s *stack) getOK(path string) any {
	s.t.Helper()
	r := s.do(http.MethodGet, path, nil)
	if r.Status != http.StatusOK {
		s.t.Fatalf("GET %s: status %d body %s", path, r.Status, r.Raw)
	}
	return r.Body
}

// seedBrowse builds orders.shipped (p1: a, b; p2: c) and orders (d), has
// queue mode complete a and hold b, and dead-letters c for group billing.
func seedBrowse(t *testing.T, s *stack) (p1, p2 string) {
	t.Helper()
	s.configure(obj{"queue": "orders.shipped", "namespace": "orders", "task": "shipped", "options": obj{"retryLimit": 0}})
	s.push(obj{"queue": "orders.shipped", "partition": "p1", "payload": obj{"n": 1}, "transactionId": "a"},
		obj{"queue": "orders.shipped", "partition": "p1", "payload": obj{"n": 2}, "transactionId": "b"})
	s.push(obj{"queue": "orders.shipped", "partition": "p2", "payload": obj{"n": 3}, "transactionId": "c"})
	s.push(obj{"queue": "orders", "payload": "d", "transactionId": "d"})
	m := s.popOne("/api/v1/pop/queue/orders.shipped/partition/p1")
	p1 = asStr(t, m["partitionId"])
	if res := s.ack(obj{"transactionId": "a", "partitionId": p1, "leaseId": m["leaseId"], "status": "completed"}); res["success"] != true {
		t.Fatalf("ack a: %v", res)
	}
	s.popOne("/api/v1/pop/queue/orders.shipped/partition/p1")
	m = s.popOne("/api/v1/pop/queue/orders.shipped/partition/p2?consumerGroup=billing")
	p2 = asStr(t, m["partitionId"])
	res := s.ack(obj{"transactionId": "c", "partitionId": p2, "leaseId": m["leaseId"], "status": "failed",
		"error": "bad c", "consumerGroup": "billing"})
	if res["dlq"] != true {
		t.Fatalf("ack c: %v", res)
	}
	return p1, p2
}

func TestHTTPBrowseTagsAndOverview(t *testing.T) {
	s := newStack(t)
	seedBrowse(t, s)
	ns := asArr(t, asObj(t, s.getOK("/api/v1/resources/namespaces"))["namespaces"])
	if len(ns) != 1 {
		t.Fatalf("namespaces %v", ns)
	}
	n := asObj(t, ns[0])
	wantKeys(t, "namespace", n, "namespace", "queues", "partitions", "messages")
	wantKeys(t, "namespace messages", asObj(t, n["messages"]), "total", "pending")
	if n["namespace"] != "orders" || asInt(t, n["queues"]) != 2 || asInt(t, n["partitions"]) != 3 ||
		asInt(t, asObj(t, n["messages"])["total"]) != 4 || asInt(t, asObj(t, n["messages"])["pending"]) != 1 {
		t.Errorf("namespace %v", n)
	}
	ts := asObj(t, s.getOK("/api/v1/resources/tasks"))
	wantKeys(t, "tasks", ts, "tasks")
	tasks := asArr(t, ts["tasks"])
	if len(tasks) != 1 || asObj(t, tasks[0])["task"] != "shipped" || asInt(t, asObj(t, tasks[0])["queues"]) != 1 ||
		asInt(t, asObj(t, asObj(t, tasks[0])["messages"])["total"]) != 3 {
		t.Errorf("tasks %v", tasks)
	}

	o := asObj(t, s.getOK("/api/v1/resources/overview"))
	wantKeys(t, "overview", o, "queues", "partitions", "namespaces", "tasks", "messages", "lag", "throughput", "timestamp", "statsAge")
	if asInt(t, o["queues"]) != 2 || asInt(t, o["partitions"]) != 3 || asInt(t, o["namespaces"]) != 1 ||
		asInt(t, o["tasks"]) != 1 || asInt(t, o["statsAge"]) != 0 {
		t.Errorf("overview %v", o)
	}
	msgs := asObj(t, o["messages"])
	wantKeys(t, "overview messages", msgs, "total", "pending", "processing", "completed", "failed", "deadLetter")
	// c counts as completed too: billing, p2's only reader, moved past it.
	if asInt(t, msgs["total"]) != 4 || asInt(t, msgs["pending"]) != 1 || asInt(t, msgs["processing"]) != 1 ||
		asInt(t, msgs["completed"]) != 2 || asInt(t, msgs["failed"]) != 1 || asInt(t, msgs["deadLetter"]) != 1 {
		t.Errorf("overview messages %v", msgs)
	}
	lag := asObj(t, o["lag"])
	wantKeys(t, "lag", lag, "time", "offset")
	off := asObj(t, lag["offset"])
	wantKeys(t, "offset lag", off, "avg", "median", "min", "max")
	// p1 (queue mode: b unconsumed) and p2 (billing: consumed) have readers.
	if asInt(t, off["min"]) != 0 || asInt(t, off["max"]) != 1 {
		t.Errorf("offset lag %v", off)
	}
	th := asObj(t, o["throughput"])
	wantKeys(t, "throughput", th, "ingestedPerSecond", "processedPerSecond")
	if v, _ := th["ingestedPerSecond"].(interface{ String() string }); v == nil || v.String() == "0" {
		t.Errorf("4 messages pushed just now, ingestedPerSecond %v", th["ingestedPerSecond"])
	}
	if ts, _ := o["timestamp"].(string); !millisRE.MatchString(ts) {
		t.Errorf("timestamp %v", o["timestamp"])
	}
}

func TestHTTPBrowseMessages(t *testing.T) {
	s := newStack(t)
	p1, p2 := seedBrowse(t, s)
	o := asObj(t, s.getOK("/api/v1/messages?ns=orders"))
	wantKeys(t, "messages", o, "messages", "mode")
	mode := asObj(t, o["mode"])
	wantKeys(t, "mode", mode, "hasQueueMode", "busGroupsCount", "type")
	if mode["hasQueueMode"] != true || asInt(t, mode["busGroupsCount"]) != 1 || mode["type"] != "hybrid" {
		t.Errorf("mode %v", mode)
	}
	msgs := asArr(t, o["messages"])
	var got []string
	for _, v := range msgs {
		m := asObj(t, v)
		got = append(got, asStr(t, m["transactionId"])+":"+asStr(t, m["status"]))
	}
	if strings.Join(got, " ") != "d:pending c:dead_letter b:processing a:completed" {
		t.Errorf("listing %v", got)
	}
	b := asObj(t, msgs[2])
	wantKeys(t, "message", b, "id", "transactionId", "partitionId", "queuePath", "queue", "partition", "namespace",
		"task", "status", "queueStatus", "busStatus", "traceId", "producerSub", "queuePriority", "createdAt", "leaseExpiresAt")
	wantUUID(t, "id", b["id"])
	if b["partitionId"] != p1 || b["queuePath"] != "orders.shipped/p1" || b["queue"] != "orders.shipped" ||
		b["partition"] != "p1" || b["namespace"] != "orders" || b["task"] != "shipped" || b["queueStatus"] != "processing" ||
		b["traceId"] != nil || b["producerSub"] != nil || asInt(t, b["queuePriority"]) != 0 {
		t.Errorf("message b %v", b)
	}
	for _, k := range []string{"createdAt", "leaseExpiresAt"} {
		if v, _ := b[k].(string); !millisRE.MatchString(v) {
			t.Errorf("%s %v", k, b[k])
		}
	}
	c := asObj(t, msgs[1])
	if bs := asObj(t, c["busStatus"]); c["partitionId"] != p2 || asInt(t, bs["consumedBy"]) != 1 ||
		asInt(t, bs["totalGroups"]) != 1 || c["leaseExpiresAt"] != nil {
		t.Errorf("message c %v", c)
	}
	for q, want := range map[string]string{
		"queue=orders.shipped&status=pending":        "",
		"queue=orders.shipped&status=dead_letter":    "c",
		"queue=orders.shipped&status=completed":      "a",
		"queue=orders.shipped&partition=p1":          "b a",
		"task=shipped&limit=1&offset=1":              "b",
		"queue=orders":                               "d",
		"queue=orders&from=2020-01-01&to=2020-01-02": "",
		"queue=nope": "",
		"ns=orders&consumerGroup=ignored&limit=2":                                   "d c",
		"queue=orders&to=" + url.QueryEscape(time.Now().UTC().Format(time.RFC3339)): "d",
	} {
		var got []string
		for _, v := range asArr(t, asObj(t, s.getOK("/api/v1/messages?"+q))["messages"]) {
			got = append(got, asStr(t, asObj(t, v)["transactionId"]))
		}
		if strings.Join(got, " ") != want {
			t.Errorf("messages?%s: %v, want %q", q, got, want)
		}
	}
	// Integers fall back to their defaults (queen-api.md 1.2): the whole page.
	for _, q := range []string{"limit=ten", "limit=-3", "offset=-1", "offset=x"} {
		if n := len(asArr(t, asObj(t, s.getOK("/api/v1/messages?ns=orders&"+q))["messages"])); n != len(msgs) {
			t.Errorf("messages?%s: %d messages, want the default page of %d", q, n, len(msgs))
		}
	}
	for q, field := range map[string]string{"status=done": "status",
		"offset=100001": "offset", "from=yesterday": "from", "to=soon": "to",
		"from=2026-01-02&to=2026-01-01": "from"} {
		r := s.do(http.MethodGet, "/api/v1/messages?"+q, nil)
		if r.Status != http.StatusBadRequest {
			t.Errorf("messages?%s: status %d, want 400", q, r.Status)
			continue
		}
		e := asObj(t, r.Body)
		if e["field"] != field || e["error"] == "" || (e["code"] != "invalid_field" && e["code"] != "limit_exceeded") {
			t.Errorf("messages?%s: error %v, want field %s", q, e, field)
		}
	}
}

func TestHTTPBrowseMessageDetail(t *testing.T) {
	var key [32]byte
	rand.Read(key[:])
	s := newStack(t, withKey(hex.EncodeToString(key[:])))
	p1, p2 := seedBrowse(t, s)
	d := asObj(t, s.getOK("/api/v1/messages/"+p1+"/b"))
	wantKeys(t, "detail", d, "id", "transactionId", "partitionId", "queuePath", "queue", "partition", "namespace", "task",
		"status", "payload", "isEncrypted", "traceId", "producerSub", "createdAt", "errorMessage", "retryCount",
		"leaseExpiresAt", "queueConfig", "mode", "consumerGroups")
	if d["transactionId"] != "b" || d["partitionId"] != p1 || d["status"] != "processing" || d["isEncrypted"] != false ||
		asInt(t, asObj(t, d["payload"])["n"]) != 2 || d["errorMessage"] != nil || d["retryCount"] != nil ||
		d["queuePath"] != "orders.shipped/p1" {
		t.Errorf("detail b %v", d)
	}
	if v, _ := d["leaseExpiresAt"].(string); !millisRE.MatchString(v) {
		t.Errorf("leaseExpiresAt %v", d["leaseExpiresAt"])
	}
	qc := asObj(t, d["queueConfig"])
	wantKeys(t, "queueConfig", qc, "leaseTime", "retryLimit", "retryDelay", "ttl", "priority")
	if asInt(t, qc["leaseTime"]) != 300 || asInt(t, qc["retryLimit"]) != 0 {
		t.Errorf("queueConfig %v", qc)
	}
	mode := asObj(t, d["mode"])
	wantKeys(t, "mode", mode, "hasQueueMode", "busGroupsCount", "consumedByGroups", "type")
	if mode["hasQueueMode"] != true || asInt(t, mode["busGroupsCount"]) != 0 || mode["type"] != "queue" {
		t.Errorf("mode %v", mode)
	}
	groups := asArr(t, d["consumerGroups"])
	if len(groups) != 1 {
		t.Fatalf("groups %v", groups)
	}
	g := asObj(t, groups[0])
	wantKeys(t, "group", g, "name", "consumed", "leaseExpiresAt")
	if g["name"] != "__QUEUE_MODE__" || g["consumed"] != false || g["leaseExpiresAt"] != d["leaseExpiresAt"] {
		t.Errorf("group %v", g)
	}

	c := asObj(t, s.getOK("/api/v1/messages/"+p2+"/c"))
	if c["status"] != "dead_letter" || c["errorMessage"] != "bad c" || asInt(t, c["retryCount"]) != 0 ||
		asInt(t, asObj(t, c["mode"])["consumedByGroups"]) != 1 || asObj(t, c["mode"])["type"] != "bus" {
		t.Errorf("detail c %v", c)
	}

	// Encrypted at rest, plaintext on the wire.
	s.configure(obj{"queue": "secret", "options": obj{"encryptionEnabled": true}})
	res := s.push(obj{"queue": "secret", "payload": obj{"card": "4111"}, "transactionId": "s/1"})
	sp := asStr(t, asObj(t, asArr(t, asObj(t, s.getOK("/api/v1/messages?queue=secret"))["messages"])[0])["partitionId"])
	e := asObj(t, s.getOK("/api/v1/messages/"+sp+"/"+url.PathEscape("s/1")))
	if e["isEncrypted"] != true || asObj(t, e["payload"])["card"] != "4111" || e["id"] != asObj(t, res[0])["message_id"] {
		t.Errorf("encrypted detail %v (push %v)", e, res)
	}

	for _, path := range []string{"/api/v1/messages/" + p1 + "/nope", "/api/v1/messages/01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7/b"} {
		r := s.do(http.MethodGet, path, nil)
		wantError(t, r, http.StatusNotFound, "not_found", "", "Message not found")
	}
	r := s.do(http.MethodGet, "/api/v1/messages/not-a-uuid/b", nil)
	if r.Status != http.StatusBadRequest || asObj(t, r.Body)["field"] != "partitionId" {
		t.Errorf("bad partition id: %d %s", r.Status, r.Raw)
	}
}

// TestHTTPDeleteMessage deletes a message a queue-mode pop holds leased:
// 200 either way, success saying whether it existed; the deletion ends the
// batch it was the last of, so a new message is delivered at once rather
// than after the 300 s lease; bad identifiers are 400s naming the field.
func TestHTTPDeleteMessage(t *testing.T) {
	s := newStack(t)
	p1, _ := seedBrowse(t, s) // b, on p1, is leased by the queue-mode group
	want := obj{"success": true, "partitionId": p1, "transactionId": "b", "message": "Message deleted successfully"}
	if r := s.do(http.MethodDelete, "/api/v1/messages/"+p1+"/b", nil); r.Status != http.StatusOK || !reflect.DeepEqual(asObj(t, r.Body), want) {
		t.Fatalf("DELETE b: %d %s", r.Status, r.Raw)
	}
	wantError(t, s.do(http.MethodGet, "/api/v1/messages/"+p1+"/b", nil), http.StatusNotFound, "not_found", "", "Message not found")
	want["success"], want["message"] = false, "Message not found"
	if r := s.do(http.MethodDelete, "/api/v1/messages/"+p1+"/b", nil); r.Status != http.StatusOK || !reflect.DeepEqual(asObj(t, r.Body), want) {
		t.Fatalf("DELETE b again: %d %s", r.Status, r.Raw)
	}
	s.push(obj{"queue": "orders.shipped", "partition": "p1", "payload": 5, "transactionId": "e"})
	if m := s.popOne("/api/v1/pop/queue/orders.shipped/partition/p1"); m["transactionId"] != "e" {
		t.Fatalf("pop after the delete: %v", m)
	}
	for _, c := range []struct{ path, field string }{
		{"/api/v1/messages/not-a-uuid/a", "partitionId"},
		{"/api/v1/messages/" + p1 + "/" + strings.Repeat("x", 256), "transactionId"},
	} {
		r := s.do(http.MethodDelete, c.path, nil)
		if r.Status != http.StatusBadRequest || asObj(t, r.Body)["field"] != c.field {
			t.Errorf("DELETE %s: %d %s", c.path, r.Status, r.Raw)
		}
	}
	if d := asObj(t, s.getOK("/api/v1/messages/"+p1+"/a")); d["transactionId"] != "a" {
		t.Errorf("a after the deletions: %v", d)
	}
}

func TestHTTPBrowseStatus(t *testing.T) {
	s := newStack(t)
	seedBrowse(t, s)
	o := asObj(t, s.getOK("/api/v1/status"))
	wantKeys(t, "status", o, "timeRange", "bucketMinutes", "pointCount", "throughput", "queues", "messages", "leases",
		"deadLetterQueue", "workers", "errors", "statsAge")
	if asInt(t, o["bucketMinutes"]) != 1 || asInt(t, o["pointCount"]) != 61 || asInt(t, o["statsAge"]) != 0 ||
		len(asArr(t, o["workers"])) != 0 {
		t.Errorf("status %v", o)
	}
	wantKeys(t, "timeRange", asObj(t, o["timeRange"]), "from", "to")
	points := asArr(t, o["throughput"])
	if len(points) != 61 {
		t.Fatalf("%d points", len(points))
	}
	newest := asObj(t, points[0])
	wantKeys(t, "point", newest, "timestamp", "ingested", "processed", "popMessages", "ingestedPerSecond",
		"processedPerSecond", "popPerSecond", "avgLagMs", "maxLagMs", "ackFailed", "dlqCount")
	var ingested, dlq int64
	for i, p := range points {
		po := asObj(t, p)
		ingested += asInt(t, po["ingested"])
		dlq += asInt(t, po["dlqCount"])
		if i > 0 && asStr(t, po["timestamp"]) >= asStr(t, asObj(t, points[i-1])["timestamp"]) {
			t.Errorf("points not newest first at %d", i)
		}
	}
	if ingested != 4 || dlq != 1 {
		t.Errorf("ingested %d dlq %d over the hour", ingested, dlq)
	}
	msgs := asObj(t, o["messages"])
	if asInt(t, msgs["total"]) != 4 || asInt(t, msgs["deadLetter"]) != 1 || asInt(t, msgs["failed"]) != 1 ||
		asInt(t, asObj(t, msgs["requests"])["push"]) != 3 {
		t.Errorf("status messages %v", msgs)
	}
	wantKeys(t, "batchEfficiency", asObj(t, msgs["batchEfficiency"]), "push", "pop", "ack")
	leases := asObj(t, o["leases"])
	if asInt(t, leases["active"]) != 1 || asInt(t, leases["partitionsWithLeases"]) != 1 || asInt(t, leases["totalBatchSize"]) != 1 {
		t.Errorf("leases %v", leases)
	}
	dq := asObj(t, o["deadLetterQueue"])
	top := asArr(t, dq["topErrors"])
	if asInt(t, dq["totalMessages"]) != 1 || asInt(t, dq["affectedPartitions"]) != 1 || len(top) != 1 ||
		asObj(t, top[0])["error"] != "bad c" {
		t.Errorf("deadLetterQueue %v", dq)
	}
	if e := asObj(t, o["errors"]); asInt(t, e["ackFailed"]) != 1 || asInt(t, e["dlqMessages"]) != 1 || asInt(t, e["dbErrors"]) != 0 {
		t.Errorf("errors %v", e)
	}
	queues := asArr(t, o["queues"])
	if len(queues) != 2 || asObj(t, queues[1])["name"] != "orders.shipped" || asInt(t, asObj(t, queues[1])["totalConsumed"]) != 2 {
		t.Errorf("queues %v", queues)
	}
	wantKeys(t, "status queue", asObj(t, queues[0]), "id", "name", "namespace", "task", "partitions", "totalConsumed")
	if q := asObj(t, s.getOK("/api/v1/status?queue=orders&from=2026-01-01&to=2026-01-03")); asInt(t, q["bucketMinutes"]) != 60 ||
		len(asArr(t, q["queues"])) != 1 || asInt(t, q["pointCount"]) != 49 {
		t.Errorf("two days of orders: %v %v", q["bucketMinutes"], q["pointCount"])
	}
	for q, field := range map[string]string{"from=x": "from", "from=1900-01-01": "from", "to=2000-01-01&from=2001-01-01": "from"} {
		r := s.do(http.MethodGet, "/api/v1/status?"+q, nil)
		if r.Status != http.StatusBadRequest || asObj(t, r.Body)["field"] != field {
			t.Errorf("status?%s: %d %s", q, r.Status, r.Raw)
		}
	}
}

func TestHTTPBrowseStatusQueues(t *testing.T) {
	s := newStack(t)
	p1, _ := seedBrowse(t, s)
	o := asObj(t, s.getOK("/api/v1/status/queues?limit=1"))
	wantKeys(t, "status queues", o, "queues", "pagination")
	qs := asArr(t, o["queues"])
	if len(qs) != 1 || asInt(t, asObj(t, o["pagination"])["limit"]) != 1 || asInt(t, asObj(t, o["pagination"])["offset"]) != 0 {
		t.Fatalf("status queues %v", o)
	}
	q := asObj(t, qs[0])
	wantKeys(t, "status queue", q, "id", "name", "namespace", "task", "createdAt", "partitions", "messages")
	if q["name"] != "orders" { // newest first
		t.Errorf("first queue %v", q)
	}
	page2 := asArr(t, asObj(t, s.getOK("/api/v1/status/queues?limit=5&offset=1&namespace=orders"))["queues"])
	if len(page2) != 1 || asObj(t, page2[0])["name"] != "orders.shipped" ||
		asInt(t, asObj(t, asObj(t, page2[0])["messages"])["processing"]) != 1 {
		t.Errorf("page 2 %v", page2)
	}
	if n := len(asArr(t, asObj(t, s.getOK("/api/v1/status/queues?limit=-5"))["queues"])); n != 2 {
		t.Errorf("limit=-5 (the default): %d queues, want 2", n)
	}

	d := asObj(t, s.getOK("/api/v1/status/queues/orders.shipped?includePartitions=true"))
	wantKeys(t, "status queue detail", d, "queue", "partitions", "totals")
	qi := asObj(t, d["queue"])
	wantKeys(t, "queue", qi, "id", "name", "namespace", "task", "priority", "createdAt", "config")
	wantKeys(t, "config", asObj(t, qi["config"]), "leaseTime", "retryLimit", "retryDelay", "ttl", "maxQueueSize", "deadLetterQueue")
	parts := asArr(t, d["partitions"])
	if len(parts) != 2 {
		t.Fatalf("partitions %v", parts)
	}
	pp := asObj(t, parts[0])
	wantKeys(t, "partition", pp, "id", "name", "createdAt", "messages", "stats", "cursor", "lastActivity", "oldestMessage", "newestMessage")
	if pp["id"] != p1 || asInt(t, asObj(t, pp["stats"])["completed"]) != 1 || asInt(t, asObj(t, pp["messages"])["processing"]) != 1 ||
		asInt(t, asObj(t, pp["cursor"])["totalConsumed"]) != 1 {
		t.Errorf("partition p1 %v", pp)
	}
	totals := asObj(t, d["totals"])
	wantKeys(t, "totals", totals, "messages", "total", "pending", "processing", "completed", "failed", "deadLetter")
	if asInt(t, totals["total"]) != 3 || asInt(t, asObj(t, totals["messages"])["deadLetter"]) != 1 {
		t.Errorf("totals %v", totals)
	}
	wantError(t, s.do(http.MethodGet, "/api/v1/status/queues/nope", nil), http.StatusNotFound, "not_found", "", "Queue not found")

	r := s.do(http.MethodGet, "/api/v1/status/queues/orders.shipped/messages?limit=2", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("queue messages %d %s", r.Status, r.Raw)
	}
	arr := asArr(t, r.Body)
	var got []string
	for _, v := range arr {
		m := asObj(t, v)
		wantKeys(t, "queue message", m, "id", "transactionId", "partitionId", "queuePath", "queue", "partition", "status", "createdAt")
		got = append(got, asStr(t, m["transactionId"])+":"+asStr(t, m["status"]))
	}
	// c is dead-lettered for billing only: queue mode has not read it.
	if strings.Join(got, " ") != "c:pending b:processing" {
		t.Errorf("queue messages %v", got)
	}
	wantError(t, s.do(http.MethodGet, "/api/v1/status/queues/nope/messages", nil), http.StatusNotFound, "not_found", "", "Queue not found")
	if r := s.do(http.MethodGet, "/api/v1/status/queues/orders/messages?offset=x", nil); r.Status != http.StatusOK {
		t.Errorf("offset=x (the default, 0): %d %s", r.Status, r.Raw)
	}
}

func TestHTTPBrowseAnalyticsAndBuffers(t *testing.T) {
	s := newStack(t)
	seedBrowse(t, s)
	o := asObj(t, s.getOK("/api/v1/status/analytics"))
	wantKeys(t, "analytics", o, "dataPoints", "interval", "from", "to")
	pts := asArr(t, o["dataPoints"])
	if o["interval"] != "hour" || len(pts) != 25 {
		t.Fatalf("analytics interval %v, %d points", o["interval"], len(pts))
	}
	var total int64
	for i, p := range pts {
		po := asObj(t, p)
		wantKeys(t, "point", po, "timestamp", "messages")
		total += asInt(t, po["messages"])
		if ts := asStr(t, po["timestamp"]); !strings.HasSuffix(ts, ":00:00.000Z") || (i > 0 && ts <= asStr(t, asObj(t, pts[i-1])["timestamp"])) {
			t.Errorf("point %d timestamp %s", i, ts)
		}
	}
	if total != 4 {
		t.Errorf("%d messages over the day, want 4", total)
	}
	mo := asObj(t, s.getOK("/api/v1/status/analytics?interval=minute&queue=orders.shipped&from="+
		url.QueryEscape(time.Now().Add(-10*time.Minute).UTC().Format(time.RFC3339))))
	var n int64
	for _, p := range asArr(t, mo["dataPoints"]) {
		n += asInt(t, asObj(t, p)["messages"])
	}
	if mo["interval"] != "minute" || len(asArr(t, mo["dataPoints"])) != 11 || n != 3 {
		t.Errorf("minute analytics %v", mo)
	}
	if day := asObj(t, s.getOK("/api/v1/status/analytics?interval=day&from=2026-01-01&to=2026-01-31")); len(asArr(t, day["dataPoints"])) != 31 {
		t.Errorf("31 days: %d points", len(asArr(t, day["dataPoints"])))
	}
	for q, field := range map[string]string{"interval=week": "interval", "interval=minute&from=2000-01-01": "from",
		"from=2026-13-01": "from"} {
		r := s.do(http.MethodGet, "/api/v1/status/analytics?"+q, nil)
		if r.Status != http.StatusBadRequest || asObj(t, r.Body)["field"] != field {
			t.Errorf("analytics?%s: %d %s", q, r.Status, r.Raw)
		}
	}

	b := asObj(t, s.getOK("/api/v1/status/buffers"))
	wantKeys(t, "buffers", b, "pending", "failed", "dbHealthy", "worker")
	if b["dbHealthy"] != true || asInt(t, b["pending"]) != 0 || asInt(t, b["failed"]) != 0 || asInt(t, b["worker"]) != 0 {
		t.Errorf("buffers %v", b)
	}

	for _, series := range []string{"system-metrics", "worker-metrics", "queue-lag", "queue-ops",
		"queue-parked-replicas", "retention", "postgres-stats"} {
		a := asObj(t, s.getOK("/api/v1/analytics/"+series+"?from=2026-01-01"))
		wantKeys(t, series, a, "series")
		if len(asArr(t, a["series"])) != 0 {
			t.Errorf("%s: %v", series, a)
		}
	}
	if r := s.do(http.MethodGet, "/api/v1/analytics/nope", nil); r.Status != http.StatusNotFound {
		t.Errorf("unknown series: %d", r.Status)
	}
}

// queen-api.md 3.19: "These exist in client code but have no server route in
// Queen; they answer `404` and the broker SHOULD keep it that way rather than
// invent semantics: ... `POST /api/v1/messages/{partitionId}/{transactionId}/retry`
// and `.../dlq` (JS admin)". The README repeats it: "The paths of its section
// 3.19 answer 404, as the spec asks." The message routes' `{transactionId:.+}`
// pattern matches these paths too, so without a route of their own the
// router would answer 405 method_not_allowed.
func TestHTTPUnservedMessageRetryAndDLQPathsAnswer404(t *testing.T) {
	s := newStack(t)
	res := s.push(obj{"queue": "q", "partition": "p", "transactionId": "t1", "payload": 1})
	pid := asStr(t, asObj(t, res[0])["partition_id"])
	for _, suffix := range []string{"retry", "dlq"} {
		path := "/api/v1/messages/" + pid + "/t1/" + suffix
		r := s.do(http.MethodPost, path, []byte(`{}`))
		if r.Status != http.StatusNotFound {
			t.Errorf("POST %s: status %d, want 404 (queen-api.md 3.19); body %s", path, r.Status, r.Raw)
			continue
		}
		if o := asObj(t, r.Body); o["code"] != "not_found" {
			t.Errorf("POST %s: code %v, want not_found", path, o["code"])
		}
	}
	// The message itself is untouched by either request.
	if code, body := s.get("/api/v1/messages/" + pid + "/t1"); code != http.StatusOK || asObj(t, body)["status"] != "pending" {
		t.Errorf("message after the refused requests: %d %v", code, body)
	}
}

// queen-api.md 3.12, GET /api/v1/messages query table: "`from` | now − 1 h |
// Only messages created at or after this time." and "`to` | now | Inclusive
// to the end of that minute." The default of `from` is one hour before now,
// whatever `to` says: a listing with only an upper bound later than now (a
// dashboard asking "up to the end of today") shows the message pushed a
// moment ago, and one whose `to` is older than an hour shows nothing.
func TestHTTPListMessagesFromDefaultsToNowMinusOneHour(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "lq", "partition": "p", "transactionId": "t1", "payload": 1})
	count := func(query string) (int, []any) {
		t.Helper()
		code, body := s.get("/api/v1/messages?" + query)
		if code != http.StatusOK {
			t.Fatalf("list %s: status %d %v", query, code, body)
		}
		msgs := asArr(t, asObj(t, body)["messages"])
		return len(msgs), msgs
	}
	if n, _ := count("queue=lq"); n != 1 {
		t.Fatalf("default listing: %d messages, want 1", n)
	}
	to := time.Now().UTC().Add(3 * time.Hour).Format(time.RFC3339)
	n, msgs := count("queue=lq&to=" + url.QueryEscape(to))
	if n != 1 {
		t.Fatalf("listing with to=%s and no from: %d messages, want the 1 pushed now (from defaults to now − 1 h)", to, n)
	}
	if got := asObj(t, msgs[0])["transactionId"]; got != "t1" {
		t.Errorf("listed %v, want t1", got)
	}
	// A `to` older than the default start leaves nothing: an empty page, not
	// the 400 of a `from` the client sent after its `to`.
	old := time.Now().UTC().Add(-2 * time.Hour).Format(time.RFC3339)
	if n, _ := count("queue=lq&to=" + url.QueryEscape(old)); n != 0 {
		t.Errorf("listing with to=%s and no from: %d messages, want 0", old, n)
	}
}
