package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/httpapi"
)

// Config.ReadFloor holds local reads, and a leader's first look for a pop,
// until the node has applied that index: what crownd gives after a restart
// (the last command in its log), so that a write it acknowledged before a
// crash, whose state-file commit was deferred, is seen once replayed. Not
// reached within --leader-wait, the read is refused with 503 rather than
// answered from a state without it; reached, it reads as any other.
func TestReadFloorHoldsLocalReads(t *testing.T) {
	ahead := newStack(t, func(c *httpapi.Config) {
		c.ReadFloor, c.LeaderWait = 1<<40, 300*time.Millisecond
	})
	for _, path := range []string{"/api/v1/resources/queues", "/api/v1/pop/queue/rf?batch=10&wait=false"} {
		r := ahead.do("GET", path, nil)
		if r.Status != 503 || !strings.Contains(string(r.Raw), "catching up") {
			t.Errorf("GET %s below the read floor: %d %s, want 503 saying the node is catching up", path, r.Status, r.Raw)
		}
	}

	reached := newStack(t, func(c *httpapi.Config) { c.ReadFloor = 1 })
	if code, _ := reached.postJSON("/api/v1/push", map[string]any{"items": []map[string]any{{"queue": "rf", "payload": map[string]any{"i": 1}}}}); code != 201 {
		t.Fatalf("push: %d", code)
	}
	if r := reached.do("GET", "/api/v1/resources/queues", nil); r.Status != 200 {
		t.Errorf("a read past the floor: %d %s", r.Status, r.Raw)
	}
	if r := reached.do("GET", "/api/v1/pop/queue/rf?batch=10&wait=false", nil); r.Status != 200 {
		t.Errorf("a pop past the floor: %d %s", r.Status, r.Raw)
	}
}
