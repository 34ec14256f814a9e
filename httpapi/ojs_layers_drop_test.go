package httpapi_test

// Tests of the two views of one queue record (README "Operating
// queues"; docs/queues.md, "How a queue's settings are resolved").

import (
	"fmt"
	"testing"
)

// docs/queues.md, layer 4: the shared options a /configure names are
// overrides, and "an OJS PATCH that sets or removes (null) the same option
// replaces the configured value; a PUT of the config replaces them all";
// ojs-queues.md 6.4: "null removes the override, so the queue inherits the
// value again". With no policy, what is inherited is the base a /configure
// that did not name the option gives (a full replace, as in Queen): a 300 s
// lease, dead-lettering on, completed retention off. The configured values
// used to stay in force, unexplained by any layer: `overrides` went to {}
// while `config` (and Queen's leaseTime) kept the configured 100 s.
func TestOJSPatchNullDropsConfiguredValue(t *testing.T) {
	s := newStack(t)
	s.configure(obj{"queue": "cfgq", "options": obj{"leaseTime": 100, "deadLetterQueue": false,
		"dlqAfterMaxRetries": false, "retentionEnabled": true, "completedRetentionSeconds": 3600}})
	a := s.ojs("GET", "/ojs/v1/queues/cfgq", "").want(t, 200)
	if got := fmt.Sprint(a.at("queue.overrides")); got != "map[dead_letter:map[enabled:false] processing:map[visibility_timeout:100] retention:map[completed_ttl:PT1H]]" {
		t.Fatalf("overrides after configure: %s", got)
	}

	a = s.ojs("PATCH", "/ojs/v1/queues/cfgq",
		`{"processing":{"visibility_timeout":null},"dead_letter":{"enabled":null},"retention":{"completed_ttl":null}}`).want(t, 200)
	if got := fmt.Sprint(a.at("queue.overrides")); got != "map[]" {
		t.Fatalf("overrides after PATCH null: %s, want {}", got)
	}
	if got := a.num(t, "queue.config.processing.visibility_timeout"); got != 300 {
		t.Errorf("visibility_timeout %d after its override was removed, want the inherited 300 (configure default), not the removed 100", got)
	}
	if got := a.at("queue.config.dead_letter.enabled"); got != true {
		t.Errorf("dead_letter.enabled %v after its override was removed, want the inherited true", got)
	}
	if got := a.at("queue.config.retention.completed_ttl"); got != nil {
		t.Errorf("completed_ttl %v after its override was removed, want null (retention off, inherited)", got)
	}
	q := s.ojs("GET", "/api/v1/resources/queues/cfgq", "").want(t, 200)
	if got := q.num(t, "config.leaseTime"); got != 300 {
		t.Errorf("Queen leaseTime %d after the OJS override was removed, want 300", got)
	}
	if q.at("config.deadLetterQueue") != true || q.at("config.dlqAfterMaxRetries") != true {
		t.Errorf("Queen dead-letter flags %v/%v, want true/true", q.at("config.deadLetterQueue"), q.at("config.dlqAfterMaxRetries"))
	}
	if got := q.num(t, "config.completedRetentionSeconds"); got != 0 {
		t.Errorf("Queen completedRetentionSeconds %d, want 0", got)
	}
}

// The same through a PATCH that first sets the option (which replaces the
// configured value) and then removes it: the value inherited is again the
// configure default, not the configured value hidden underneath.
func TestOJSPatchSetThenNullDropsConfiguredLease(t *testing.T) {
	s := newStack(t)
	s.configure(obj{"queue": "cfgr", "options": obj{"leaseTime": 100}})
	s.ojs("PATCH", "/ojs/v1/queues/cfgr", `{"processing":{"visibility_timeout":200}}`).want(t, 200)
	a := s.ojs("PATCH", "/ojs/v1/queues/cfgr", `{"processing":{"visibility_timeout":null}}`).want(t, 200)
	if got := a.num(t, "queue.config.processing.visibility_timeout"); got != 300 {
		t.Errorf("visibility_timeout %d after set-then-remove, want 300 (configure default), not the replaced 100", got)
	}
}

// PUT .../config replaces every override, the configured ones included
// (docs/queues.md layer 4): a lease a /configure named is no longer in force.
func TestOJSPutConfigDropsConfiguredLease(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues", `{"name":"cfgp"}`).want(t, 201)
	s.configure(obj{"queue": "cfgp", "options": obj{"leaseTime": 100}})
	a := s.ojs("PUT", "/ojs/v1/queues/cfgp/config", `{"capacity":{"max_depth":5}}`).want(t, 200)
	if got := fmt.Sprint(a.at("queue.overrides")); got != "map[capacity:map[max_depth:5]]" {
		t.Fatalf("overrides after PUT: %s", got)
	}
	if got := a.num(t, "queue.config.processing.visibility_timeout"); got != 300 {
		t.Errorf("visibility_timeout %d after PUT config replaced the overrides, want 300, not the configured 100", got)
	}
}
