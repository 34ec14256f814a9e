package httpapi_test

// The OJS queue administration surface where it meets the Queen view and the
// policies (ojs-queues.md Part 1 sections 0, 3, 5, 6.3, 6.6, 6.8-6.10, 8, 9);
// each test names the spec sentence it enforces.

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/httpapi"
)

// ojsAdminMetric reads one unlabelled sample of /metrics/prometheus.
func ojsAdminMetric(t *testing.T, s *stack, name string) string {
	t.Helper()
	r := s.do(http.MethodGet, "/metrics/prometheus", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /metrics/prometheus: status %d", r.Status)
	}
	sc := bufio.NewScanner(bytes.NewReader(r.Raw))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	t.Fatalf("no sample %s in /metrics/prometheus", name)
	return ""
}

// ojsAdminEventTypes lists the types of the queue events GET
// /ojs/v1/events answers for query q.
func ojsAdminEventTypes(t *testing.T, s *stack, q string) []string {
	t.Helper()
	a := s.ojs("GET", "/ojs/v1/events?"+q, "").want(t, 200)
	var out []string
	for _, e := range asArr(t, a.Body["events"]) {
		out = append(out, asStr(t, asObj(t, e)["type"]))
	}
	return out
}

// ojs-queues.md 5.1: "A queue's effective value for each leaf field is taken
// from the highest layer that sets it", the queue's own overrides (layer 4)
// above the `_default` policy (layer 2); 6.1: "`config` ... The **effective**
// configuration". docs/queues.md puts what a /configure names in layer 4
// ("an explicit configure value beats a policy") and shows
// `retention.completed_ttl` as "`null` when Queen retention is off". A
// /configure naming a 100 s completed retention under a `_default` of P1D
// retains for 100 s (the Queen view says so, and `overrides` shows PT100S),
// so `config.retention.completed_ttl` must say PT100S, not P1D; one naming
// retentionEnabled false must show null.
func TestOJSAdminEffectiveRetentionFollowsConfigure(t *testing.T) {
	s := newStack(t)
	s.ojs("PUT", "/ojs/v1/queues/_default/config", `{"retention":{"completed_ttl":"P1D"}}`).want(t, 200)

	s.configure(obj{"queue": "ret100", "options": obj{"retentionEnabled": true, "completedRetentionSeconds": 100}})
	_, body := s.get("/api/v1/resources/queues/ret100")
	qc := asObj(t, asObj(t, body)["config"])
	if qc["retentionEnabled"] != true || asInt(t, qc["completedRetentionSeconds"]) != 100 {
		t.Fatalf("Queen view: retentionEnabled %v completedRetentionSeconds %v, want true and 100",
			qc["retentionEnabled"], qc["completedRetentionSeconds"])
	}
	a := s.ojs("GET", "/ojs/v1/queues/ret100", "").want(t, 200)
	if got := a.at("queue.overrides.retention.completed_ttl"); got != "PT100S" {
		t.Errorf("overrides.retention.completed_ttl = %v, want PT100S", got)
	}
	if got := a.at("queue.config.retention.completed_ttl"); got != "PT100S" {
		t.Errorf("effective config.retention.completed_ttl = %v, want PT100S (the configured 100 s the queue "+
			"actually retains for, layer 4, beats the _default policy's P1D)", got)
	}

	s.configure(obj{"queue": "retoff", "options": obj{"retentionEnabled": false}})
	a = s.ojs("GET", "/ojs/v1/queues/retoff", "").want(t, 200)
	if got, ok := a.at("queue.config.retention").(map[string]any)["completed_ttl"]; !ok || got != nil {
		t.Errorf("effective config.retention.completed_ttl = %v (present %v), want null: the /configure turned "+
			"Queen retention off, which the _default policy's P1D does not override", got, ok)
	}
}

// ojs-queues.md 6.1: "`created_at`, `updated_at` | timestamp | always |
// `updated_at` moves on any configuration, state or policy change." A Queen
// /configure of a plain queue changes its lease (`config.processing.
// visibility_timeout` and `overrides` both show the new 100 s), so the OJS
// view's `updated_at` must move past `created_at`.
func TestOJSAdminConfigureMovesUpdatedAt(t *testing.T) {
	s := newStack(t)
	s.push(obj{"queue": "plainq", "payload": 1})
	before := s.ojs("GET", "/ojs/v1/queues/plainq", "").want(t, 200)
	created := asStr(t, before.at("queue.created_at"))
	time.Sleep(50 * time.Millisecond)
	s.configure(obj{"queue": "plainq", "options": obj{"leaseTime": 100}})
	a := s.ojs("GET", "/ojs/v1/queues/plainq", "").want(t, 200)
	if got := a.num(t, "queue.config.processing.visibility_timeout"); got != 100 {
		t.Fatalf("config.processing.visibility_timeout = %d after configure leaseTime 100", got)
	}
	if got := a.num(t, "queue.overrides.processing.visibility_timeout"); got != 100 {
		t.Fatalf("overrides.processing.visibility_timeout = %d after configure leaseTime 100", got)
	}
	if updated := asStr(t, a.at("queue.updated_at")); updated <= created {
		t.Errorf("updated_at %s after a configuration change, want later than created_at %s", updated, created)
	}
}

// ojs-queues.md 8: "Queue events: `queue.created`, ..., `queue.deleted`"
// and "Prometheus metrics: ... `ojs_queue_created_total`,
// `ojs_queue_deleted_total`"; 3: "`deleted` | The queue is gone. This state
// appears only in DELETE responses and `queue.deleted` events".
// docs/queues.md: "a change through either API shows in the other". A queue
// created by a Queen push is counted in ojs_queue_created_total and gets a
// `queue.created` event; deleting it through the Queen API must likewise
// give `queue.deleted` and count in ojs_queue_deleted_total.
func TestOJSAdminQueenDeleteEmitsQueueDeleted(t *testing.T) {
	s := newStack(t)
	createdBefore := ojsAdminMetric(t, s, "ojs_queue_created_total")
	s.push(obj{"queue": "qdel", "payload": 1})
	if got := ojsAdminMetric(t, s, "ojs_queue_created_total"); got == createdBefore {
		t.Fatalf("ojs_queue_created_total stayed %s after a push created a queue", got)
	}
	if got := ojsAdminEventTypes(t, s, "queues=qdel"); strings.Join(got, ",") != "queue.created" {
		t.Fatalf("events of qdel before the delete: %v, want [queue.created]", got)
	}
	r := s.do(http.MethodDelete, "/api/v1/resources/queues/qdel", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("Queen DELETE: status %d body %s", r.Status, r.Raw)
	}
	s.ojs("GET", "/ojs/v1/queues/qdel", "").want(t, 404)
	if got := ojsAdminEventTypes(t, s, "queues=qdel"); strings.Join(got, ",") != "queue.created,queue.deleted" {
		t.Errorf("events of qdel after a Queen delete: %v, want [queue.created queue.deleted]", got)
	}
	if got := ojsAdminMetric(t, s, "ojs_queue_deleted_total"); got != "1" {
		t.Errorf("ojs_queue_deleted_total = %s after one queue was deleted, want 1", got)
	}
}

// ojs-queues.md 6.10: "`PATCH /ojs/v1/queues/_policies/{name}` (merge patch
// over `match`, `priority`, `config`)"; 5.2: "`priority`: an integer from
// −1000 to 1000. Default 0."; 6.4 (the merge-patch rules): "`null` removes
// the override". In a merge patch (RFC 7396) `"priority": null` removes the
// member, so the policy's priority falls back to its default 0; it must not
// be silently ignored.
func TestOJSAdminPolicyPatchNullPriority(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues/_policies", `{"name":"pp","match":"pp.*","priority":7,"config":{}}`).want(t, 201)
	a := s.ojs("PATCH", "/ojs/v1/queues/_policies/pp", `{"priority":null}`).want(t, 200)
	if got := a.num(t, "policy.priority"); got != 0 {
		t.Errorf("priority %d after PATCH {\"priority\":null}, want the default 0", got)
	}
	if got := s.ojs("GET", "/ojs/v1/queues/_policies/pp", "").want(t, 200).num(t, "policy.priority"); got != 0 {
		t.Errorf("GET: priority %d after PATCH {\"priority\":null}, want the default 0", got)
	}
}

// ojs-queues.md 6.9: "**PATCH** merges, with the same rules as §6.4" and
// 6.4: "`{}` is a no-op: 200 and no event." On a cluster whose `_default`
// policy was never written, PATCH {} changes nothing and must emit no
// `queue.policy_updated` event.
func TestOJSAdminDefaultPatchEmptyIsNoOp(t *testing.T) {
	s := newStack(t)
	before := s.ojs("GET", "/ojs/v1/queues/_default/config", "").want(t, 200)
	a := s.ojs("PATCH", "/ojs/v1/queues/_default/config", `{}`).want(t, 200)
	if got := fmt.Sprint(a.at("overrides")); got != fmt.Sprint(before.at("overrides")) {
		t.Fatalf("overrides %s after PATCH {}, want unchanged %s", got, fmt.Sprint(before.at("overrides")))
	}
	if got := ojsAdminEventTypes(t, s, "types=queue.policy_updated"); len(got) != 0 {
		t.Errorf("PATCH {} of _default/config emitted %v, want no event", got)
	}
}

// ojs-queues.md 0.4: "Number of queues | 10 000 | 422 `validation_error`,
// type `queue_limit_reached`"; 6.6: "An unknown name is created implicitly
// (§4.1)". Pausing an unknown name creates an OJS queue; on a cluster that
// already holds 10 000 queues (where POST /ojs/v1/queues is refused with
// queue_limit_reached) it must be refused the same way and create nothing.
func TestOJSAdminPauseUnknownRespectsQueueLimit(t *testing.T) {
	s := newStack(t)
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := 0; i < 10000; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"queue":"lim%05d","payload":1}`, i)
	}
	b.WriteString(`]}`)
	if r := s.do(http.MethodPost, "/api/v1/push", []byte(b.String())); r.Status != http.StatusCreated {
		t.Fatalf("push to 10,000 queues: status %d", r.Status)
	}
	c := s.ojs("POST", "/ojs/v1/queues", `{"name":"over-limit"}`).want(t, 422)
	if got := c.at("error.type"); got != "queue_limit_reached" {
		t.Fatalf("explicit create past the limit: error.type %v, want queue_limit_reached", got)
	}
	p := s.ojs("POST", "/ojs/v1/queues/over-limit-paused/pause", "")
	if p.Status != http.StatusUnprocessableEntity || p.at("error.type") != "queue_limit_reached" {
		t.Errorf("pause of an unknown name past the queue limit: status %d error.type %v, want 422 queue_limit_reached: %.300s",
			p.Status, p.at("error.type"), p.Raw)
	}
	if g := s.ojs("GET", "/ojs/v1/queues/over-limit-paused", ""); g.Status != http.StatusNotFound {
		t.Errorf("GET after the refused pause: status %d, want 404 (the limit creates nothing)", g.Status)
	}
}

// ojs-queues.md 2.1: "Validation. The whole document is checked before
// anything changes. The first failing field goes in `details.field`"; 0.5:
// "`details` ... `field` (dotted path of the first bad field)" and
// "`message` ... Names the offending field when there is one"; 5.3:
// "Naming a policy that does not exist gets 422, type `unknown_policy`".
// Every other refused member of a create or PATCH body names itself in
// details.field; the unknown policy must name "policy" too.
func TestOJSAdminUnknownPolicyNamesField(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues", `{"name":"upq2"}`).want(t, 201)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/ojs/v1/queues", `{"name":"upq","policy":"nope"}`},
		{"PATCH", "/ojs/v1/queues/upq2", `{"policy":"nope"}`},
	} {
		a := s.ojs(c.method, c.path, c.body).want(t, 422)
		if got := a.at("error.type"); got != "unknown_policy" {
			t.Fatalf("%s %s: error.type %v, want unknown_policy", c.method, c.path, got)
		}
		if got := a.at("error.details.field"); got != "policy" {
			t.Errorf("%s %s: error.details.field = %v, want \"policy\" (the hint even says \"Fix the value named in details.field\"): %s",
				c.method, c.path, got, a.Raw)
		}
	}
}

// ojs-queues.md 6.4: "A leaf value sets that override. `null` removes the
// override, so the queue inherits the value again" and "Emits
// `queue.config_updated`, which lists the changed fields"; 8: the queue
// events include `queue.config_updated`. docs/queues.md, layer 4: "An OJS
// PATCH that sets or removes (`null`) the same option replaces the
// configured value". A lease a /configure named shows in `overrides`;
// PATCH `processing.visibility_timeout: null` removes it (overrides become
// {}, the effective lease falls from 100 s to the bound policy's 60 s), so
// the PATCH must emit queue.config_updated listing
// processing.visibility_timeout.
func TestOJSAdminPatchRemovingConfiguredLeaseEmitsEvent(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues/_policies",
		`{"name":"lp","match":"lp*","config":{"processing":{"visibility_timeout":60}}}`).want(t, 201)
	s.ojs("POST", "/ojs/v1/queues", `{"name":"lp1"}`).want(t, 201)
	s.configure(obj{"queue": "lp1", "options": obj{"leaseTime": 100}})
	a := s.ojs("GET", "/ojs/v1/queues/lp1", "").want(t, 200)
	if got := a.num(t, "queue.overrides.processing.visibility_timeout"); got != 100 {
		t.Fatalf("overrides.processing.visibility_timeout = %d after configure leaseTime 100", got)
	}
	before := len(ojsAdminEventTypes(t, s, "queues=lp1&types=queue.config_updated"))

	a = s.ojs("PATCH", "/ojs/v1/queues/lp1", `{"processing":{"visibility_timeout":null}}`).want(t, 200)
	if got := fmt.Sprint(a.at("queue.overrides")); got != "map[]" {
		t.Fatalf("overrides after PATCH visibility_timeout null: %s, want {}", got)
	}
	if got := a.num(t, "queue.config.processing.visibility_timeout"); got != 60 {
		t.Fatalf("effective visibility_timeout %d after the override was removed, want the policy's 60", got)
	}
	ev := s.ojs("GET", "/ojs/v1/events?queues=lp1&types=queue.config_updated", "").want(t, 200)
	evs := asArr(t, ev.Body["events"])
	if len(evs) != before+1 {
		t.Fatalf("%d queue.config_updated events after the PATCH, want %d (one for the PATCH): %s", len(evs), before+1, ev.Raw)
	}
	data := asObj(t, asObj(t, evs[len(evs)-1])["data"])
	if got := fmt.Sprint(data["fields"]); got != "[processing.visibility_timeout]" {
		t.Errorf("the PATCH's queue.config_updated lists fields %s, want [processing.visibility_timeout]", got)
	}
}

// ojs-queues.md 0.5: "`type` ... Finer reason" and "`message` ... Names the
// offending field"; 2.1 rule 3: "A wrong type gets 400 `invalid_type`"; 6.2
// answers a queue's create the same way. A policy create whose name was sent
// as a number was told "name is required" (type missing_field), as if the
// member were absent.
func TestOJSAdminPolicyNameWrongType(t *testing.T) {
	s := newStack(t)
	for _, c := range []struct{ body, typ, msg string }{
		{`{"name":5,"match":"a*","config":{}}`, "invalid_type", "name must be a string"},
		{`{"match":"a*","config":{}}`, "missing_field", "name is required"},
		{`{"name":null,"match":"a*","config":{}}`, "missing_field", "name is required"},
	} {
		a := s.ojs("POST", "/ojs/v1/queues/_policies", c.body).want(t, 400)
		if a.at("error.code") != "invalid_request" || a.at("error.type") != c.typ || a.at("error.message") != c.msg ||
			a.at("error.details.field") != "name" {
			t.Errorf("POST _policies %s: %s; want invalid_request/%s %q naming name", c.body, a.Raw, c.typ, c.msg)
		}
	}
}

// ojs-queues.md 0.4: "Limits (Crown choice; each is also a server flag)":
// the admin request body (1 MiB, 413 payload_too_large) and the number of
// queues (10 000, 422 queue_limit_reached). Both were fixed in the code;
// Config.OJSMaxBodyBytes and OJSMaxQueues carry crownd's --ojs-max-body-bytes
// and --ojs-max-queues.
func TestOJSAdminLimitsFromConfig(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.OJSMaxQueues, c.OJSMaxBodyBytes = 2, 64 })
	s.qpush("lq1", "", "a")
	s.qpush("lq2", "", "b") // Queen pushes create queues without the bound
	a := s.ojs("POST", "/ojs/v1/queues", `{"name":"lq3"}`).want(t, 422)
	if a.at("error.type") != "queue_limit_reached" {
		t.Errorf("create past --ojs-max-queues 2: %s; want 422 queue_limit_reached", a.Raw)
	}
	s.ojs("PATCH", "/ojs/v1/queues/lq1", `{"capacity":{"max_depth":5}}`).want(t, 200)
	big := `{"capacity":{"max_depth":5},"processing":{"visibility_timeout":30,"max_concurrency":2}}`
	a = s.ojs("PATCH", "/ojs/v1/queues/lq1", big).want(t, 413)
	if a.at("error.code") != "payload_too_large" {
		t.Errorf("a %d-byte body past --ojs-max-body-bytes 64: %s; want 413 payload_too_large", len(big), a.Raw)
	}
}
