package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Consumer-group administration (queen-api.md 3.15) through the real stack.

// popGroupTxIDs pops a path and lists the delivered transaction ids (none on 204).
func (s *stack) popGroupTxIDs(path string) []string {
	s.t.Helper()
	p := s.pop(path)
	if p == nil {
		return nil
	}
	var out []string
	for _, m := range asArr(s.t, p["messages"]) {
		out = append(out, asStr(s.t, asObj(s.t, m)["transactionId"]))
	}
	return out
}

// groupRow finds the listing row of (group, queue).
func groupRow(t *testing.T, rows arr, group, queue string) obj {
	t.Helper()
	for _, r := range rows {
		o := asObj(t, r)
		if o["name"] == group && o["queueName"] == queue {
			return o
		}
	}
	t.Fatalf("no row for %s on %s in %v", group, queue, rows)
	return nil
}

func TestHTTPGroupsListAndDetail(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "orders", "partition": "a", "payload": 1, "transactionId": "a1"},
		obj{"queue": "orders", "partition": "a", "payload": 2, "transactionId": "a2"},
		obj{"queue": "orders", "partition": "b", "payload": 3, "transactionId": "b1"})
	// billing consumes a1 and holds a lease on b; queue mode drains a;
	// "fresh" only made a first contact in "new" mode.
	m := s.popOne("/api/v1/pop/queue/orders/partition/a?consumerGroup=billing")
	s.ack(obj{"transactionId": "a1", "partitionId": m["partitionId"], "leaseId": m["leaseId"],
		"status": "completed", "consumerGroup": "billing"})
	s.popOne("/api/v1/pop/queue/orders/partition/b?consumerGroup=billing")
	s.pop("/api/v1/pop/queue/orders/partition/a?autoAck=true&batch=10")
	if p := s.pop("/api/v1/pop/queue/orders?consumerGroup=fresh&subscriptionMode=new"); p != nil {
		t.Fatalf("new-mode first contact delivered %v", p)
	}

	st, body := s.get("/api/v1/consumer-groups")
	if st != http.StatusOK {
		t.Fatalf("list: %d %v", st, body)
	}
	rows := asArr(t, body)
	var order []string
	for _, r := range rows {
		o := asObj(t, r)
		wantKeys(t, "row", o, "name", "topics", "queueName", "members", "partitionsWithLag", "totalLag",
			"maxTimeLag", "state", "subscriptionMode", "subscriptionTimestamp", "subscriptionCreatedAt")
		order = append(order, asStr(t, o["name"])+"/"+asStr(t, o["queueName"]))
	}
	if strings.Join(order, " ") != "__QUEUE_MODE__/orders billing/orders fresh/orders" {
		t.Fatalf("rows %v", order)
	}
	billing := groupRow(t, rows, "billing", "orders")
	if topics := asArr(t, billing["topics"]); len(topics) != 1 || topics[0] != "orders" {
		t.Errorf("topics %v", billing["topics"])
	}
	if asInt(t, billing["members"]) != 2 || asInt(t, billing["partitionsWithLag"]) != 2 || billing["totalLag"] != nil ||
		asInt(t, billing["maxTimeLag"]) > 60 || billing["state"] != "Stable" || billing["subscriptionMode"] != nil {
		t.Errorf("billing %v", billing)
	}
	qm := groupRow(t, rows, "__QUEUE_MODE__", "orders")
	if asInt(t, qm["members"]) != 1 || asInt(t, qm["partitionsWithLag"]) != 0 || qm["state"] != "Stable" {
		t.Errorf("queue mode %v", qm)
	}
	fresh := groupRow(t, rows, "fresh", "orders")
	if asInt(t, fresh["members"]) != 0 || fresh["state"] != "Dead" || fresh["subscriptionMode"] != "new" ||
		!millisRE.MatchString(asStr(t, fresh["subscriptionTimestamp"])) ||
		!millisRE.MatchString(asStr(t, fresh["subscriptionCreatedAt"])) {
		t.Errorf("fresh %v", fresh)
	}

	st, body = s.get("/api/v1/consumer-groups/billing")
	if st != http.StatusOK {
		t.Fatalf("detail: %d %v", st, body)
	}
	detail := asObj(t, body)
	wantKeys(t, "detail", detail, "orders")
	wantKeys(t, "orders", asObj(t, detail["orders"]), "partitions")
	parts := asArr(t, asObj(t, detail["orders"])["partitions"])
	if len(parts) != 2 {
		t.Fatalf("partitions %v", parts)
	}
	a, b := asObj(t, parts[0]), asObj(t, parts[1])
	for _, p := range []obj{a, b} {
		wantKeys(t, "partition", p, "partition", "workerId", "lastConsumedAt", "totalConsumed", "offsetLag",
			"timeLagSeconds", "leaseActive")
		if p["workerId"] != nil || asInt(t, p["offsetLag"]) != 1 || asInt(t, p["timeLagSeconds"]) < 0 {
			t.Errorf("partition %v", p)
		}
	}
	if a["partition"] != "a" || asInt(t, a["totalConsumed"]) != 1 || a["leaseActive"] != false ||
		!millisRE.MatchString(asStr(t, a["lastConsumedAt"])) {
		t.Errorf("a %v", a)
	}
	if b["partition"] != "b" || asInt(t, b["totalConsumed"]) != 0 || b["leaseActive"] != true || b["lastConsumedAt"] != nil {
		t.Errorf("b %v", b)
	}
	// A group known only by its subscription lists the queue, no partitions.
	if _, body := s.get("/api/v1/consumer-groups/fresh"); len(asArr(t, asObj(t, asObj(t, body)["orders"])["partitions"])) != 0 {
		t.Errorf("fresh detail %v", body)
	}
	r := s.do(http.MethodGet, "/api/v1/consumer-groups/nobody", nil)
	if r.Status != http.StatusOK || strings.TrimSpace(string(r.Raw)) != "{}" {
		t.Errorf("unknown group: %d %s", r.Status, r.Raw)
	}

	// Statistics are live: refreshing them is an acknowledged no-op.
	st, body = s.postJSON("/api/v1/stats/refresh", obj{})
	if st != http.StatusOK || len(asObj(t, body)) != 1 || asObj(t, body)["success"] != true {
		t.Errorf("stats refresh: %d %v", st, body)
	}
}

func TestHTTPGroupsLagging(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "orders", "partition": "p", "payload": 1, "transactionId": "m1"},
		obj{"queue": "orders", "partition": "p", "payload": 2, "transactionId": "m2"})
	s.popOne("/api/v1/pop/queue/orders?consumerGroup=billing")
	time.Sleep(1100 * time.Millisecond)

	// "lagging" is not a group name: its own route answers an array.
	st, body := s.get("/api/v1/consumer-groups/lagging")
	if st != http.StatusOK || len(asArr(t, body)) != 0 {
		t.Fatalf("default threshold (1 h): %d %v", st, body)
	}
	st, body = s.get("/api/v1/consumer-groups/lagging?minLagSeconds=1")
	rows := asArr(t, body)
	if st != http.StatusOK || len(rows) != 1 {
		t.Fatalf("minLagSeconds=1: %d %v", st, body)
	}
	row := asObj(t, rows[0])
	wantKeys(t, "lagging", row, "consumer_group", "queue_name", "partition_name", "partition_id", "worker_id",
		"offset_lag", "time_lag_seconds", "lag_hours", "oldest_unconsumed_at", "last_consumed_at")
	wantUUID(t, "partition_id", row["partition_id"])
	lag := asInt(t, row["time_lag_seconds"])
	hours, _ := row["lag_hours"].(json.Number).Float64()
	if row["consumer_group"] != "billing" || row["queue_name"] != "orders" || row["partition_name"] != "p" ||
		row["worker_id"] != nil || asInt(t, row["offset_lag"]) != 2 || lag < 1 || lag > 60 || hours > 0.02 ||
		!millisRE.MatchString(asStr(t, row["oldest_unconsumed_at"])) || row["last_consumed_at"] != nil {
		t.Errorf("row %v", row)
	}
	if _, body := s.get("/api/v1/consumer-groups/lagging?minLagSeconds=3600"); len(asArr(t, body)) != 0 {
		t.Errorf("minLagSeconds=3600: %v", body)
	}
	// An unparsable or negative value is the default, 3600 s (queen-api.md 1.2).
	for _, bad := range []string{"abc", "-1", "1.5"} {
		if _, body := s.get("/api/v1/consumer-groups/lagging?minLagSeconds=" + bad); len(asArr(t, body)) != 0 {
			t.Errorf("minLagSeconds=%s: %v", bad, body)
		}
	}
}

func TestHTTPGroupsDelete(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "orders", "partition": "p", "payload": 1, "transactionId": "old"})
	time.Sleep(5 * time.Millisecond)
	if p := s.pop("/api/v1/pop/queue/orders?consumerGroup=g&subscriptionMode=new"); p != nil {
		t.Fatalf("first contact delivered %v", p)
	}
	s.push(obj{"queue": "orders", "partition": "p", "payload": 2, "transactionId": "new"},
		obj{"queue": "other", "partition": "p", "payload": 3, "transactionId": "x"})
	const pop = "/api/v1/pop/queue/orders?consumerGroup=g&autoAck=true&batch=10"
	if got := s.popGroupTxIDs(pop); strings.Join(got, ",") != "new" {
		t.Fatalf("g before: %v", got)
	}
	s.popGroupTxIDs("/api/v1/pop/queue/other?consumerGroup=g&autoAck=true")

	// Without metadata: positions go, the subscription start stays.
	r := s.do(http.MethodDelete, "/api/v1/consumer-groups/g/queues/orders?deleteMetadata=false", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("delete on orders: %d %s", r.Status, r.Raw)
	}
	o := asObj(t, r.Body)
	wantKeys(t, "delete queue", o, "success", "consumerGroup", "queueName", "deletedPartitions", "metadataDeleted")
	if o["success"] != true || o["consumerGroup"] != "g" || o["queueName"] != "orders" ||
		asInt(t, o["deletedPartitions"]) != 1 || o["metadataDeleted"] != false {
		t.Errorf("delete on orders: %v", o)
	}
	if got := s.popGroupTxIDs(pop); strings.Join(got, ",") != "new" {
		t.Errorf("after deletion without metadata: %v, want the subscription's start again", got)
	}
	// The group on the other queue is untouched.
	if p := s.pop("/api/v1/pop/queue/other?consumerGroup=g"); p != nil {
		t.Errorf("other queue redelivered %v", p)
	}

	// With metadata (the default), on every queue: a first contact again.
	r = s.do(http.MethodDelete, "/api/v1/consumer-groups/g", nil)
	o = asObj(t, r.Body)
	wantKeys(t, "delete", o, "success", "consumerGroup", "deletedPartitions", "metadataDeleted")
	if r.Status != http.StatusOK || o["success"] != true || o["consumerGroup"] != "g" ||
		asInt(t, o["deletedPartitions"]) != 2 || o["metadataDeleted"] != true {
		t.Errorf("delete: %d %v", r.Status, o)
	}
	if got := s.popGroupTxIDs(pop); strings.Join(got, ",") != "old,new" {
		t.Errorf("after deletion with metadata: %v", got)
	}
	_, body := s.get("/api/v1/consumer-groups")
	if row := groupRow(t, asArr(t, body), "g", "orders"); row["subscriptionMode"] != nil {
		t.Errorf("subscription survived: %v", row)
	}
	// An unknown group deletes nothing and says so.
	if r := s.do(http.MethodDelete, "/api/v1/consumer-groups/nobody", nil); r.Status != http.StatusOK ||
		asInt(t, asObj(t, r.Body)["deletedPartitions"]) != 0 {
		t.Errorf("unknown group: %d %s", r.Status, r.Raw)
	}
	// Only true and 1 are true (queen-api.md 1.2): an unclear value keeps the records.
	if r := s.do(http.MethodDelete, "/api/v1/consumer-groups/g?deleteMetadata=maybe", nil); r.Status != http.StatusOK ||
		asObj(t, r.Body)["metadataDeleted"] != false {
		t.Errorf("deleteMetadata=maybe: %d %s", r.Status, r.Raw)
	}
	long := strings.Repeat("x", 256)
	wantError(t, s.do(http.MethodDelete, "/api/v1/consumer-groups/g/queues/"+long, nil), http.StatusBadRequest,
		"limit_exceeded", "queue", "queue is 256 bytes long; the limit is 255 bytes")
}

func TestHTTPGroupsSubscription(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "orders", "partition": "p", "payload": 1, "transactionId": "old"})
	time.Sleep(5 * time.Millisecond)
	if p := s.pop("/api/v1/pop/queue/orders?consumerGroup=g&subscriptionMode=new"); p != nil {
		t.Fatalf("first contact delivered %v", p)
	}
	const path = "/api/v1/consumer-groups/g/subscription"
	wantError(t, s.post(path, obj{}), http.StatusBadRequest, "missing_field", "subscriptionTimestamp",
		"subscriptionTimestamp is required")
	wantError(t, s.post(path, obj{"subscriptionTimestamp": 5}), http.StatusBadRequest, "invalid_field",
		"subscriptionTimestamp", "subscriptionTimestamp must be an RFC 3339 timestamp string")
	wantError(t, s.post(path, obj{"subscriptionTimestamp": "yesterday"}), http.StatusBadRequest, "invalid_field",
		"subscriptionTimestamp", `subscriptionTimestamp "yesterday" is not an RFC 3339 timestamp`)
	wantError(t, s.post(path, `[1]`), http.StatusBadRequest, "invalid_json", "", "Invalid JSON: body must be an object")

	r := s.post(path, obj{"subscriptionTimestamp": "2026-05-01T00:00:00Z"})
	if r.Status != http.StatusOK {
		t.Fatalf("rewrite: %d %s", r.Status, r.Raw)
	}
	o := asObj(t, r.Body)
	wantKeys(t, "rewrite", o, "success", "consumerGroup", "newTimestamp", "rowsUpdated")
	if o["success"] != true || o["consumerGroup"] != "g" || o["newTimestamp"] != "2026-05-01T00:00:00Z" ||
		asInt(t, o["rowsUpdated"]) != 1 {
		t.Errorf("rewrite %v", o)
	}
	// The group has no position on p yet: the earlier start applies.
	if got := s.popGroupTxIDs("/api/v1/pop/queue/orders?consumerGroup=g&autoAck=true"); strings.Join(got, ",") != "old" {
		t.Errorf("after the rewrite: %v", got)
	}
	_, body := s.get("/api/v1/consumer-groups")
	if row := groupRow(t, asArr(t, body), "g", "orders"); row["subscriptionTimestamp"] != "2026-05-01T00:00:00.000Z" {
		t.Errorf("listing %v", row)
	}
	if _, body := s.postJSON("/api/v1/consumer-groups/nobody/subscription", obj{"subscriptionTimestamp": "2026-05-01"}); asInt(t, asObj(t, body)["rowsUpdated"]) != 0 {
		t.Errorf("unknown group: %v", body)
	}
}

func TestHTTPGroupsSeek(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "orders", "partition": "a", "payload": 1, "transactionId": "a1"},
		obj{"queue": "orders", "partition": "b", "payload": 2, "transactionId": "b1"})
	const pop = "/api/v1/pop/queue/orders?consumerGroup=g&batch=10&partitions=10"
	if got := s.popGroupTxIDs(pop); len(got) != 2 {
		t.Fatalf("pop %v", got)
	}
	const path = "/api/v1/consumer-groups/g/queues/orders/seek"
	const neither = "Must specify either 'toEnd': true or 'timestamp'"
	wantError(t, s.post(path, obj{}), http.StatusBadRequest, "missing_field", "toEnd", neither)
	wantError(t, s.post(path, obj{"toEnd": false}), http.StatusBadRequest, "missing_field", "toEnd", neither)
	wantError(t, s.post(path, obj{"toEnd": true, "timestamp": "2026-05-01T00:00:00Z"}), http.StatusBadRequest,
		"invalid_field", "timestamp", "Specify either 'toEnd': true or 'timestamp', not both")
	wantError(t, s.post(path, obj{"toEnd": "yes"}), http.StatusBadRequest, "invalid_field", "toEnd", "toEnd must be a boolean")
	wantError(t, s.post(path, obj{"timestamp": "soon"}), http.StatusBadRequest, "invalid_field", "timestamp",
		`timestamp "soon" is not an RFC 3339 timestamp`)

	// Back to before every message: the leases are released and both
	// partitions deliver again at once.
	r := s.post(path, obj{"timestamp": "2020-01-02T03:04:05.678+01:00"})
	if r.Status != http.StatusOK {
		t.Fatalf("seek: %d %s", r.Status, r.Raw)
	}
	o := asObj(t, r.Body)
	wantKeys(t, "seek", o, "success", "consumerGroup", "queueName", "seekToEnd", "targetTimestamp", "partitionsUpdated")
	if o["success"] != true || o["consumerGroup"] != "g" || o["queueName"] != "orders" || o["seekToEnd"] != false ||
		o["targetTimestamp"] != "2020-01-02T02:04:05.678Z" || asInt(t, o["partitionsUpdated"]) != 2 {
		t.Errorf("seek %v", o)
	}
	if got := s.popGroupTxIDs(pop); strings.Join(got, ",") != "a1,b1" && strings.Join(got, ",") != "b1,a1" {
		t.Fatalf("after seeking back: %v", got)
	}
	// To the end: nothing is left, and the new leases are released.
	r = s.post(path, obj{"toEnd": true})
	o = asObj(t, r.Body)
	if r.Status != http.StatusOK || o["seekToEnd"] != true || o["targetTimestamp"] != nil || asInt(t, o["partitionsUpdated"]) != 2 {
		t.Errorf("seek to end: %d %v", r.Status, o)
	}
	_, body := s.get("/api/v1/consumer-groups/g")
	for _, p := range asArr(t, asObj(t, asObj(t, body)["orders"])["partitions"]) {
		if p := asObj(t, p); p["leaseActive"] != false || asInt(t, p["offsetLag"]) != 0 {
			t.Errorf("after seek to end: %v", p)
		}
	}
	if p := s.pop(pop); p != nil {
		t.Errorf("after seek to end: %v", p)
	}
	// An unknown queue or group updates nothing.
	if _, body := s.postJSON("/api/v1/consumer-groups/g/queues/missing/seek", obj{"toEnd": true}); asInt(t, asObj(t, body)["partitionsUpdated"]) != 0 {
		t.Errorf("unknown queue: %v", body)
	}
}

func TestHTTPGroupsSeekPartition(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "orders", "partition": "customer-42", "payload": 1, "transactionId": "m1"},
		obj{"queue": "orders", "partition": "customer-42", "payload": 2, "transactionId": "m2"})
	const pop = "/api/v1/pop/queue/orders/partition/customer-42?consumerGroup=g&batch=10"
	s.pop(pop)
	for _, path := range []string{"/api/v1/consumer-groups/g/queues/orders/partitions/nope/seek",
		"/api/v1/consumer-groups/g/queues/nope/partitions/customer-42/seek"} {
		r := s.post(path, obj{})
		if r.Status != http.StatusNotFound || strings.TrimSpace(string(r.Raw)) != `{"code":"not_found","error":"Partition not found","success":false}` {
			t.Errorf("%s: %d %s", path, r.Status, r.Raw)
		}
	}
	// The body's members are ignored.
	r := s.post("/api/v1/consumer-groups/g/queues/orders/partitions/customer-42/seek", obj{"toEnd": false})
	if r.Status != http.StatusOK {
		t.Fatalf("seek: %d %s", r.Status, r.Raw)
	}
	o := asObj(t, r.Body)
	wantKeys(t, "seek", o, "success", "consumerGroup", "queueName", "partitionName", "updated", "cursorMovedTo")
	if o["success"] != true || o["consumerGroup"] != "g" || o["queueName"] != "orders" || o["partitionName"] != "customer-42" ||
		o["updated"] != true || !millisRE.MatchString(asStr(t, o["cursorMovedTo"])) {
		t.Errorf("seek %v", o)
	}
	// The lease was released and the position is at the end: only new
	// messages come, at once.
	s.push(obj{"queue": "orders", "partition": "customer-42", "payload": 3, "transactionId": "m3"})
	if got := s.popGroupTxIDs(pop); strings.Join(got, ",") != "m3" {
		t.Errorf("after the seek: %v", got)
	}
	// A group that never read the partition is moved to its end too.
	s.post("/api/v1/consumer-groups/late/queues/orders/partitions/customer-42/seek", obj{})
	if p := s.pop("/api/v1/pop/queue/orders/partition/customer-42?consumerGroup=late"); p != nil {
		t.Errorf("late group got the backlog: %v", p)
	}
}

// queen-api.md 1.2: a POST whose body is empty answers 400 "Empty request
// body", as every other POST does; the clients always send at least {}. The
// seeks and the subscription rewrite answered a missing body like {}, and a
// partition seek without one moved the group to the end of the partition:
// a bare POST by hand skipped the backlog instead of being refused.
func TestHTTPGroupsEmptyBodyRefused(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "orders", "partition": "p", "payload": 1, "transactionId": "m1"})
	for _, path := range []string{"/api/v1/consumer-groups/g/subscription", "/api/v1/consumer-groups/g/queues/orders/seek",
		"/api/v1/consumer-groups/g/queues/orders/partitions/p/seek", "/api/v1/stats/refresh"} {
		for _, body := range [][]byte{nil, {}, []byte(" \n ")} {
			t.Run(path, func(t *testing.T) {
				wantError(t, s.do(http.MethodPost, path, body), http.StatusBadRequest, "empty_body", "", "Empty request body")
			})
		}
	}
	// The refused partition seek gave g no position: it reads m1.
	if got := s.popGroupTxIDs("/api/v1/pop/queue/orders/partition/p?consumerGroup=g"); strings.Join(got, ",") != "m1" {
		t.Errorf("after the refused seeks g got %v, want [m1]", got)
	}
}
