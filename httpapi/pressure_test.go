package httpapi_test

import (
	"net/http"
	"testing"
)

// TestHTTPPushPressureHeaders: a push that leaves a bounded queue at 80 % or
// more of a bound answers 201 with X-OJS-Queue-Pressure and the depth and
// bound headers (ojs-queues.md 7.1); one below it carries none.
func TestHTTPPushPressureHeaders(t *testing.T) {
	s := newStack(t)
	if r := s.do(http.MethodPost, "/ojs/v1/queues", []byte(`{"name":"cap","capacity":{"max_depth":5}}`)); r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	push := func(tx string) response {
		t.Helper()
		r := s.do(http.MethodPost, "/api/v1/push", []byte(`{"items":[{"queue":"cap","payload":1,"transactionId":"`+tx+`"}]}`))
		if r.Status != http.StatusCreated {
			t.Fatalf("push %s: %d %s", tx, r.Status, r.Raw)
		}
		return r
	}
	for _, tx := range []string{"a", "b", "c"} {
		if h := push(tx).Header.Get("X-OJS-Queue-Pressure"); h != "" {
			t.Fatalf("push %s: pressure %q below 80 %%", tx, h)
		}
	}
	r := push("d")
	if r.Header.Get("X-OJS-Queue-Pressure") != "0.80" || r.Header.Get("X-OJS-Queue-Depth") != "4" ||
		r.Header.Get("X-OJS-Queue-Bound") != "5" {
		t.Fatalf("4 of 5: headers %v", r.Header)
	}
	if r := push("e"); r.Header.Get("X-OJS-Queue-Pressure") != "1.00" {
		t.Fatalf("5 of 5: headers %v", r.Header)
	}
}
