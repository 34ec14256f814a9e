package httpapi_test

// Tests of the OJS queue administration API's wire rules (ojs-queues.md 0.1)
// and endpoint answers (section 6), through the node's HTTP server.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi"
)

// ojs-queues.md 0.1: "A body with any other content type gets 400
// invalid_request"; a request that sends no body has none to refuse. Many
// clients label an empty POST application/x-www-form-urlencoded (curl with an empty -d,
// Java's HttpURLConnection), and pause, resume and DELETE take an optional
// body (6.5, 6.6), so such a request must be served.
func TestOJSEmptyBodyIgnoresContentType(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues", `{"name":"ct"}`).want(t, 201)
	form := []string{"Content-Type", "application/x-www-form-urlencoded"}
	if a := s.ojs("POST", "/ojs/v1/queues/ct/pause", "", form...); a.Status != 200 || a.at("queue.paused") != true {
		t.Errorf("pause without a body, labelled as a form: %d %s; want 200 paused", a.Status, a.Raw)
	}
	if a := s.ojs("POST", "/ojs/v1/queues/ct/resume", "", "Content-Type", "text/plain"); a.Status != 200 || a.at("queue.paused") != false {
		t.Errorf("resume without a body, labelled text/plain: %d %s; want 200 active", a.Status, a.Raw)
	}
	if a := s.ojs("DELETE", "/ojs/v1/queues/ct", "", form...); a.Status != 200 || a.at("queue.state") != "deleted" {
		t.Errorf("DELETE without a body, labelled as a form: %d %s; want 200 deleted", a.Status, a.Raw)
	}
	// A body of another type is still refused.
	a := s.ojs("POST", "/ojs/v1/queues", `{"name":"ct2"}`, "Content-Type", "text/plain").want(t, 400)
	if a.at("error.code") != "invalid_request" || a.at("error.type") != "unsupported_content_type" {
		t.Errorf("a JSON body labelled text/plain: %s; want 400 invalid_request/unsupported_content_type", a.Raw)
	}
	s.ojs("GET", "/ojs/v1/queues/ct2", "").want(t, 404)
}

// settleAfterDelete runs settle right after the next OJS DELETE command it
// proposes has applied, before the handler reads the queue back: what group
// commit does when an ack shares the DELETE's log entry or follows it at once.
type settleAfterDelete struct {
	httpapi.Cluster
	settle atomic.Pointer[func()]
}

func (c *settleAfterDelete) Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error) {
	res, idx, err := c.Cluster.Propose(ctx, cmd)
	if _, ok := cmd.(*fsm.OJSDeleteQueue); ok && err == nil {
		if f := c.settle.Swap(nil); f != nil {
			(*f)()
		}
	}
	return res, idx, err
}

// ojs-queues.md 6.5: a DELETE with active jobs starts the deletion (202);
// when the last of them settles right after, the deletion is complete. The
// answer was read back after the command, found no queue and said 404
// queue_not_found for a DELETE that had succeeded; it must say the queue
// is deleted (200, state "deleted"), with its last configuration.
func TestOJSDeleteFinishedByAckAtOnceIsNot404(t *testing.T) {
	var staged *settleAfterDelete
	s := newStackWrapped(t, func(c httpapi.Cluster) httpapi.Cluster {
		staged = &settleAfterDelete{Cluster: c}
		return staged
	})
	s.ojs("POST", "/ojs/v1/queues", `{"name":"race","capacity":{"max_depth":9}}`).want(t, 201)
	s.qpush("race", "", "a")
	m := s.popOne("/api/v1/pop/queue/race?batch=1&wait=false")
	ackBody := fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"completed"}`,
		m["transactionId"], m["partitionId"], m["leaseId"])
	var ackStatus atomic.Int32
	settle := func() {
		resp, err := http.Post(s.URL+"/api/v1/ack", "application/json", strings.NewReader(ackBody))
		if err == nil {
			ackStatus.Store(int32(resp.StatusCode))
			resp.Body.Close()
		}
	}
	staged.settle.Store(&settle)
	a := s.ojs("DELETE", "/ojs/v1/queues/race?strategy=purge", "")
	if ackStatus.Load() != 200 {
		t.Fatalf("the ack staged after the DELETE answered %d", ackStatus.Load())
	}
	if a.Status != 200 || a.at("queue.state") != "deleted" || a.at("strategy") != "purge" {
		t.Fatalf("DELETE whose last active job settled at once: %d %s; want 200 with state deleted", a.Status, a.Raw)
	}
	if a.num(t, "queue.config.capacity.max_depth") != 9 || a.num(t, "queue.config.processing.visibility_timeout") != 30 ||
		a.num(t, "queue.depth") != 0 || a.at("queue.deletion") != nil {
		t.Errorf("the deleted queue's last configuration and counts: %s", a.Raw)
	}
	s.ojs("GET", "/ojs/v1/queues/race", "").want(t, 404)
}

// ojs-queues.md 6.4: "PUT /ojs/v1/queues/{name}/config replaces all of the
// queue's overrides with the submitted document"; 2: the configuration
// document "sits at the top level of the body, next to `name`", as in the
// extension's example ({"name": "payments", "capacity": …}), which PUT …/config
// is served for. Such a document was refused 400 unknown_field for its
// name. As in a PATCH, the name may repeat the path's and nothing else.
func TestOJSPutConfigDocumentWithItsName(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues", `{"name":"payments","processing":{"max_concurrency":5}}`).want(t, 201)
	a := s.ojs("PUT", "/ojs/v1/queues/payments/config", `{"name":"payments","capacity":{"max_depth":100}}`).want(t, 200)
	if got := fmt.Sprint(a.at("queue.overrides")); got != "map[capacity:map[max_depth:100]]" {
		t.Errorf("overrides after PUT of the named document: %s, want only capacity.max_depth 100", got)
	}
	a = s.ojs("PUT", "/ojs/v1/queues/payments/config", `{"name":"payments","config":{"capacity":{"max_depth":7}}}`).want(t, 200)
	if got := a.num(t, "queue.config.capacity.max_depth"); got != 7 {
		t.Errorf("PUT of the named document, sections under config: max_depth %d, want 7", got)
	}
	for _, body := range []string{`{"name":"other","capacity":{"max_depth":1}}`, `{"name":5}`} {
		a := s.ojs("PUT", "/ojs/v1/queues/payments/config", body).want(t, 400)
		if a.at("error.type") != "read_only_field" || a.at("error.details.field") != "name" {
			t.Errorf("PUT %s: %s; want 400 read_only_field naming name", body, a.Raw)
		}
	}
	if got := s.ojs("GET", "/ojs/v1/queues/payments", "").want(t, 200).num(t, "queue.config.capacity.max_depth"); got != 7 {
		t.Errorf("a refused PUT changed the queue: max_depth %d, want 7", got)
	}
	// _default has no name to repeat.
	s.ojs("PUT", "/ojs/v1/queues/_default/config", `{"name":"default","capacity":{"max_depth":1}}`).want(t, 400)
}
