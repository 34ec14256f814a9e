package httpapi_test

// Tests of the OJS queue administration endpoints (ojs-queues.md,
// Part 1).

import (
	"testing"
)

// ojs-queues.md 3 (the operation table: Purge in "draining (deleting)" is
// 409 queue_deleting) and 6.7 ("Errors: 404 (unknown queue), 409
// (queue_deleting)"). A purge whose states select nothing Crown stores
// (`[]`, or only `cancelled`) never reached the state machine and answered
// 200 for a queue being deleted.
func TestOJSPurgeNothingWhileDeleting(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues", `{"name":"gone"}`).want(t, 201)
	s.qpush("gone", "", "a", "b")
	s.popOne("/api/v1/pop/queue/gone?batch=1&wait=false") // a live lease keeps the deletion pending
	s.ojs("DELETE", "/ojs/v1/queues/gone?strategy=purge", "").want(t, 202)
	for _, body := range []string{`{"confirm":true,"states":[]}`, `{"confirm":true,"states":["cancelled"]}`} {
		a := s.ojs("POST", "/ojs/v1/queues/gone/purge", body).want(t, 409)
		if a.at("error.code") != "conflict" || a.at("error.type") != "queue_deleting" ||
			a.at("error.details.current_state") != "draining" {
			t.Errorf("purge %s of a queue being deleted: %s, want 409 conflict/queue_deleting", body, a.Raw)
		}
	}
	// The same selection on a queue not being deleted is a 200 no-op.
	s.ojs("POST", "/ojs/v1/queues", `{"name":"kept"}`).want(t, 201)
	a := s.ojs("POST", "/ojs/v1/queues/kept/purge", `{"confirm":true,"states":["cancelled"]}`).want(t, 200)
	if a.num(t, "purged_count") != 0 {
		t.Errorf("purge of cancelled: %s", a.Raw)
	}
}

// ojs-queues.md 6.7: "Matching jobs are removed permanently." Crown counts
// no job as scheduled, retryable or pending (docs/queues.md, Known gaps), so
// a purge of those states matches nothing; it removed the whole available
// backlog.
func TestOJSPurgeStatesWithoutJobsKeepsAvailable(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues", `{"name":"sel"}`).want(t, 201)
	s.qpush("sel", "", "a", "b", "c")
	for _, body := range []string{`{"confirm":true,"states":["scheduled"]}`, `{"confirm":true,"states":["retryable"]}`,
		`{"confirm":true,"states":["pending","scheduled","retryable","cancelled"]}`} {
		a := s.ojs("POST", "/ojs/v1/queues/sel/purge", body).want(t, 200)
		if n, av := a.num(t, "purged_count"), a.num(t, "queue.available"); n != 0 || av != 3 {
			t.Errorf("purge %s: purged_count %d, queue.available %d; want 0 and 3", body, n, av)
		}
	}
	a := s.ojs("POST", "/ojs/v1/queues/sel/purge", `{"confirm":true,"states":["available"]}`).want(t, 200)
	if n, av := a.num(t, "purged_count"), a.num(t, "queue.available"); n != 3 || av != 0 {
		t.Errorf("purge of available: purged_count %d, queue.available %d; want 3 and 0", n, av)
	}
}
