package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func (s *stack) setSwitch(path string, on bool) obj {
	s.t.Helper()
	r := s.post(path, obj{"enabled": on})
	if r.Status != http.StatusOK {
		s.t.Fatalf("%s: %d %s", path, r.Status, r.Raw)
	}
	return asObj(s.t, r.Body)
}

func TestHTTPPushMaintenance(t *testing.T) {
	s := newStack(t)
	code, body := s.get("/api/v1/system/maintenance")
	o := asObj(t, body)
	if code != http.StatusOK || o["maintenanceMode"] != false || o["popMaintenanceMode"] != false ||
		asInt(t, o["bufferedMessages"]) != 0 || o["bufferHealthy"] != true {
		t.Fatalf("initial: %d %v", code, body)
	}
	wantKeys(t, "maintenance", o, "maintenanceMode", "popMaintenanceMode", "bufferedMessages", "bufferHealthy", "bufferStats")

	s.push(obj{"queue": "orders", "partition": "p", "transactionId": "before", "payload": 0})
	on := s.setSwitch("/api/v1/system/maintenance", true)
	wantKeys(t, "switch on", on, "maintenanceMode", "bufferedMessages", "bufferHealthy", "bufferStats", "message")
	if on["maintenanceMode"] != true || !strings.Contains(asStr(t, on["message"]), "buffered") {
		t.Fatalf("switch on: %v", on)
	}

	// Pushes are accepted into the buffer, answered 201 "buffered".
	r := s.post("/api/v1/push", obj{"items": arr{
		obj{"queue": "orders", "partition": "p", "transactionId": "b1", "payload": obj{"n": 1}},
		obj{"queue": "orders", "payload": 2},
	}})
	if r.Status != http.StatusCreated {
		t.Fatalf("buffered push: %d %s", r.Status, r.Raw)
	}
	items := asArr(t, r.Body)
	it0, it1 := asObj(t, items[0]), asObj(t, items[1])
	wantKeys(t, "buffered item", it0, "index", "status", "queue", "partition", "transactionId", "transaction_id",
		"queueName", "message_id")
	if it0["status"] != "buffered" || it0["queue"] != "orders" || it0["partition"] != "p" || it0["transactionId"] != "b1" ||
		it1["partition"] != "Default" || it1["status"] != "buffered" || asInt(t, it1["index"]) != 1 {
		t.Errorf("buffered items %s", r.Raw)
	}
	generated := asStr(t, it1["transactionId"])
	s.push(obj{"queue": "orders", "partition": "p", "transactionId": "b2", "payload": 3})

	// Nothing buffered is visible to a pop.
	got := s.pop("/api/v1/pop/queue/orders?batch=10&consumerGroup=g")
	if msgs := asArr(t, got["messages"]); len(msgs) != 1 || asObj(t, msgs[0])["transactionId"] != "before" {
		t.Fatalf("pop during maintenance %v", got)
	}
	_, body = s.get("/api/v1/system/maintenance")
	o = asObj(t, body)
	if asInt(t, o["bufferedMessages"]) != 3 || asInt(t, asObj(t, o["bufferStats"])["requests"]) != 2 {
		t.Errorf("buffer %v", o)
	}

	// A transaction that pushes is refused; the buffer is untouched.
	tr := s.post("/api/v1/transaction", obj{"operations": arr{obj{"type": "push", "items": arr{obj{"queue": "orders", "payload": 1}}}}})
	if tr.Status != http.StatusServiceUnavailable || asObj(t, tr.Body)["code"] != "maintenance_mode" {
		t.Errorf("transaction during maintenance: %d %s", tr.Status, tr.Raw)
	}

	// Switching off drains the buffer in order.
	off := s.setSwitch("/api/v1/system/maintenance", false)
	if off["maintenanceMode"] != false || asInt(t, off["bufferedMessages"]) != 0 ||
		asInt(t, asObj(t, off["drained"])["queued"]) != 3 {
		t.Fatalf("switch off: %v", off)
	}
	got = s.pop("/api/v1/pop/queue/orders?batch=10&consumerGroup=h")
	var order []string
	for _, m := range asArr(t, got["messages"]) {
		order = append(order, fmt.Sprint(asObj(t, m)["partition"], "/", asObj(t, m)["transactionId"]))
	}
	if len(order) == 0 {
		t.Fatal("nothing drained")
	}
	all := strings.Join(order, ",")
	for _, p := range []string{"/api/v1/pop/queue/orders?batch=10&consumerGroup=h"} {
		if more := s.pop(p); more != nil {
			for _, m := range asArr(t, more["messages"]) {
				all += "," + fmt.Sprint(asObj(t, m)["partition"], "/", asObj(t, m)["transactionId"])
			}
		}
	}
	if all != "p/before,p/b1,p/b2,Default/"+generated && all != "Default/"+generated+",p/before,p/b1,p/b2" {
		t.Errorf("after the drain group h sees %s", all)
	}
	if tr := s.post("/api/v1/transaction", obj{"operations": arr{obj{"type": "push", "items": arr{obj{"queue": "orders", "payload": 1}}}}}); tr.Status != http.StatusOK {
		t.Errorf("transaction after maintenance: %d %s", tr.Status, tr.Raw)
	}
}

func TestHTTPPushMaintenanceBufferFull(t *testing.T) {
	s := newStack(t)
	s.setSwitch("/api/v1/system/maintenance", true)
	items := make([]obj, 10000)
	for i := range items {
		items[i] = obj{"queue": "big", "payload": i}
	}
	if res := s.push(items...); asObj(t, res[9999])["status"] != "buffered" {
		t.Fatalf("last item %v", res[9999])
	}
	_, body := s.get("/api/v1/system/maintenance")
	if asObj(t, body)["bufferHealthy"] != false {
		t.Errorf("a full buffer reported healthy: %v", body)
	}
	r := s.post("/api/v1/push", obj{"items": arr{obj{"queue": "big", "payload": "one too many"}}})
	if r.Status != http.StatusServiceUnavailable || asObj(t, r.Body)["code"] != "maintenance_buffer_full" {
		t.Fatalf("push into a full buffer: %d %s", r.Status, r.Raw)
	}
	off := s.setSwitch("/api/v1/system/maintenance", false)
	if asInt(t, asObj(t, off["drained"])["queued"]) != 10000 {
		t.Fatalf("drain %v", off)
	}
	got := s.pop("/api/v1/pop/queue/big?batch=10000")
	msgs := asArr(t, got["messages"])
	if len(msgs) != 10000 || asInt(t, asObj(t, msgs[0])["data"]) != 0 || asInt(t, asObj(t, msgs[9999])["data"]) != 9999 {
		t.Fatalf("popped %d messages", len(msgs))
	}
}

func TestHTTPMaintenanceErrors(t *testing.T) {
	s := newStack(t)
	for _, path := range []string{"/api/v1/system/maintenance", "/api/v1/system/maintenance/pop"} {
		wantError(t, s.post(path, obj{}), http.StatusBadRequest, "missing_field", "enabled", "enabled is required (true or false)")
		wantError(t, s.post(path, obj{"enabled": "yes"}), http.StatusBadRequest, "invalid_field", "enabled", `enabled must be a boolean, got "yes"`)
		wantError(t, s.post(path, ""), http.StatusBadRequest, "empty_body", "", "Empty request body")
	}
}

func TestHTTPPopMaintenance(t *testing.T) {
	s := newStack(t)
	code, body := s.get("/api/v1/system/maintenance/pop")
	o := asObj(t, body)
	wantKeys(t, "pop maintenance", o, "popMaintenanceMode", "message")
	if code != http.StatusOK || o["popMaintenanceMode"] != false {
		t.Fatalf("initial %d %v", code, body)
	}
	// A long-poll parked when the switch goes on answers 204 promptly.
	done := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		r := s.do(http.MethodGet, "/api/v1/pop/queue/quiet?wait=true&timeout=10000", nil)
		if r.Status != http.StatusNoContent {
			t.Errorf("parked pop answered %d %s", r.Status, r.Raw)
		}
		done <- time.Since(start)
	}()
	time.Sleep(300 * time.Millisecond)
	on := s.setSwitch("/api/v1/system/maintenance/pop", true)
	if on["popMaintenanceMode"] != true || on["message"] == "" {
		t.Fatalf("switch on %v", on)
	}
	select {
	case d := <-done:
		if d > 3*time.Second {
			t.Errorf("parked pop answered after %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("parked pop still waiting 5 s after pop maintenance went on")
	}
	// Every form answers 204 at once, with messages waiting.
	s.push(obj{"queue": "busy", "partition": "p", "payload": 1})
	for _, p := range []string{"/api/v1/pop/queue/busy", "/api/v1/pop/queue/busy/partition/p", "/api/v1/pop?namespace=x",
		"/api/v1/pop/queue/busy?wait=true&timeout=5000"} {
		start := time.Now()
		if got := s.pop(p); got != nil || time.Since(start) > 2*time.Second {
			t.Errorf("%s during pop maintenance: %v after %v", p, got, time.Since(start))
		}
	}
	_, body = s.get("/api/v1/system/maintenance")
	if asObj(t, body)["popMaintenanceMode"] != true {
		t.Errorf("maintenance status %v", body)
	}
	s.setSwitch("/api/v1/system/maintenance/pop", false)
	if got := s.pop("/api/v1/pop/queue/busy"); got == nil {
		t.Fatal("nothing delivered after pop maintenance went off")
	}
}

func TestHTTPSharedState(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "q", "payload": 1})
	s.setSwitch("/api/v1/system/maintenance/pop", true)
	code, body := s.get("/api/v1/system/shared-state")
	o := asObj(t, body)
	if code != http.StatusOK || o["isLeader"] != true || asInt(t, o["queues"]) != 1 || asInt(t, o["appliedIndex"]) == 0 {
		t.Fatalf("shared state %d %v", code, body)
	}
	m := asObj(t, o["maintenance"])
	if m["popMaintenanceMode"] != true || m["maintenanceMode"] != false || m["popMaintenanceSince"] == nil {
		t.Errorf("maintenance %v", m)
	}
	if len(asArr(t, o["nodes"])) != 1 {
		t.Errorf("nodes %v", o["nodes"])
	}
}
