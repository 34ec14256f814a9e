package httpapi_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
)

// Queue options against the OJS policy layers (docs/queues.md: what a
// /configure names beats every policy, before and after policy edits), and
// minPopWaitTime's estimate; each test names the spec sentence it enforces.

// optsTestLeaseExpiry reads a live lease's expiry without changing it: an
// extension by 1 s never shortens a lease (queen-api.md 4.14), so it
// answers the current expiry.
func optsTestLeaseExpiry(t *testing.T, s *stack, lease string) time.Time {
	t.Helper()
	_, ext := s.postJSON("/api/v1/lease/"+lease+"/extend", obj{"seconds": 1})
	e := asObj(t, asArr(t, ext)[0])
	if e["success"] != true {
		t.Fatalf("extend %v", e)
	}
	exp, err := time.Parse(time.RFC3339, asStr(t, e["expiresAt"]))
	if err != nil {
		t.Fatal(err)
	}
	return exp
}

func optsTestNum(t *testing.T, o obj, k string) int64 {
	t.Helper()
	n, ok := o[k].(json.Number)
	if !ok {
		t.Fatalf("%s = %v (%T), want a number", k, o[k], o[k])
	}
	v, _ := n.Int64()
	return v
}

// queue-options.md, leaseTime: "A pop resolves its lease as: the request's
// `leaseSeconds` when positive, else this value, else 60"; docs/queues.md,
// layer 4: "/configure for the shared options the request *names* (an
// explicit configure value beats a policy; an omitted one falls back to
// the layers below)". A /configure naming leaseTime 86400 (one day, a valid
// Queen value above OJS's 43200 s visibility_timeout range) on a queue a
// policy matches must lease for a day, not for the policy's 60 s.
func TestHTTPOptsExplicitLeaseTimeBeatsPolicy(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues/_policies",
		`{"name":"batch","match":"batch.*","config":{"processing":{"visibility_timeout":60}}}`).want(t, 201)
	r := s.configure(obj{"queue": "batch.nightly", "options": obj{"leaseTime": 86400}})
	if got := optsTestNum(t, asObj(t, r["options"]), "leaseTime"); got != 86400 {
		t.Errorf("configure echoed leaseTime %d, want the 86400 the request named", got)
	}
	s.push(obj{"queue": "batch.nightly", "payload": 1})
	m := s.popOne("/api/v1/pop/queue/batch.nightly")
	exp := optsTestLeaseExpiry(t, s, asStr(t, m["leaseId"]))
	if d := time.Until(exp); d < 86000*time.Second {
		t.Errorf("a pop leased for %v, want about 86400 s (the configured leaseTime)", d.Round(time.Second))
	}
}

// queue-options.md, retentionEnabled: "Retention is opt-in: without this
// flag, and without a positive window, the maintenance service does no
// deletion work for the queue at all"; docs/queues.md, layer 4: "an
// explicit configure value beats a policy". A /configure that names
// retentionEnabled: false must not have completed messages deleted because
// the _default policy sets retention.completed_ttl.
func TestHTTPOptsExplicitRetentionOffBeatsDefaultPolicy(t *testing.T) {
	s := newStack(t)
	s.ojs("PUT", "/ojs/v1/queues/_default/config", `{"retention":{"completed_ttl":"PT1S"}}`).want(t, 200)
	r := s.configure(obj{"queue": "keep", "options": obj{"retentionEnabled": false, "completedRetentionSeconds": 0}})
	o := asObj(t, r["options"])
	if o["retentionEnabled"] != false || optsTestNum(t, o, "completedRetentionSeconds") != 0 {
		t.Errorf("configure echoed retentionEnabled %v completedRetentionSeconds %v, want false and 0 as named",
			o["retentionEnabled"], o["completedRetentionSeconds"])
	}
	s.push(obj{"queue": "keep", "payload": 1, "transactionId": "k1"})
	m := s.popOne("/api/v1/pop/queue/keep")
	s.ack(obj{"transactionId": "k1", "partitionId": m["partitionId"], "leaseId": m["leaseId"], "status": "completed"})
	time.Sleep(1100 * time.Millisecond)
	// What the leader's maintenance timer proposes every RETENTION_INTERVAL.
	res, _, err := s.Node.Propose(context.Background(), &fsm.Sweep{Queue: "keep", MaxSegments: 1000})
	if err != nil {
		t.Fatal(err)
	}
	sr := res.(*fsm.SweepResult)
	if n := sr.Messages[fsm.RuleCompleted] + sr.Messages[fsm.RuleRetention]; n != 0 {
		t.Errorf("a retention sweep deleted %d message(s) of a queue configured with retentionEnabled: false", n)
	}
}

// queen-api.md 4.9: "a pop MAY hold back an under-full batch to let it fill,
// only when all of these hold: the option is positive, `wait=true`,
// `batch > 1`, the queue has deliverable messages, and fewer than `batch`
// could be delivered right now"; queue-options.md, minPopWaitTime: "the
// broker's estimate of what a claim would take right now is below the
// batch size". A pop claims one partition by default (partitions=1), so
// with 3 messages in partition a and 7 in b a claim takes 3 of batch 10:
// the pop must wait, although the scope holds 10.
func TestHTTPOptsMinPopWaitEstimatesOneClaimedPartition(t *testing.T) {
	s := newStack(t)
	s.configure(obj{"queue": "fill2", "options": obj{"minPopWaitTime": 1500}})
	for i := 0; i < 3; i++ {
		s.push(obj{"queue": "fill2", "partition": "a", "payload": i})
	}
	for i := 0; i < 7; i++ {
		s.push(obj{"queue": "fill2", "partition": "b", "payload": i})
	}
	start := time.Now()
	p := s.pop("/api/v1/pop/queue/fill2?batch=10&wait=true&timeout=5000")
	elapsed := time.Since(start)
	if p == nil {
		t.Fatal("pop answered 204")
	}
	n := len(asArr(t, p["messages"]))
	if n < 10 && elapsed < 1200*time.Millisecond {
		t.Errorf("an under-full claim (%d of batch 10, partitions=1) was served after %v, want it held about minPopWaitTime (1500 ms)",
			n, elapsed.Round(time.Millisecond))
	}
}

// queen-api.md 3.4: "Response 200 (read by clients: `configured`,
// `options.*`)" with `"deadLetterQueue": true, "dlqAfterMaxRetries": true`
// listed separately, and "The JavaScript client ... its test suite checks
// that every key it sent comes back unchanged in `options`";
// queue-options.md: "an `options` object echoing the resolved values". The
// two flags are separate options (queue-options.md, dlqAfterMaxRetries:
// "A second flag with the same meaning, kept for compatibility"): a plain
// queue stores and echoes each as sent. A queue that has OJS state (created
// through /ojs/v1/queues, the `default` queue, or any queue once a policy
// exists) echoes `deadLetterQueue: true` for a request that sent `false`.
func TestHTTPOptsDLQFlagsEchoedAsSentOnOJSQueue(t *testing.T) {
	s := newStack(t)
	s.ojs("POST", "/ojs/v1/queues", `{"name":"oq"}`).want(t, 201)
	for _, flags := range []obj{
		{"deadLetterQueue": false, "dlqAfterMaxRetries": true},
		{"deadLetterQueue": true, "dlqAfterMaxRetries": false},
	} {
		r := s.configure(obj{"queue": "oq", "options": flags})
		o := asObj(t, r["options"])
		for k, want := range flags {
			if o[k] != want {
				t.Errorf("configure %v echoed %s = %v, want %v as sent (a plain queue echoes it)", flags, k, o[k], want)
			}
		}
		_, body := s.get("/api/v1/resources/queues/oq")
		c := asObj(t, asObj(t, body)["config"])
		for k, want := range flags {
			if c[k] != want {
				t.Errorf("after configure %v the queue detail shows %s = %v, want %v", flags, k, c[k], want)
			}
		}
	}
}

// docs/queues.md, "How a queue's settings are resolved", layer 4:
// "Overrides – set by OJS create/PATCH/PUT config, and by /configure for
// the shared options the request *names* (an explicit configure value beats
// a policy; an omitted one falls back to the layers below)"; queue-options.md,
// deadLetterQueue/dlqAfterMaxRetries: "Both must be `false` to disable
// dead-lettering", retentionEnabled: "Retention is opt-in", leaseTime: "A pop
// resolves its lease as: the request's `leaseSeconds` when positive, else
// this value". A queue configured explicitly (leaseTime 120, both
// dead-letter flags true, retentionEnabled false) while no policy existed
// must keep those values when a `_default` policy is written later: were
// they only the base layer, that edit would silently turn dead-lettering off
// (failed messages then dropped), retention on (consumed messages deleted
// after 1 s) and the lease down to 30 s.
func TestHTTPOptsDefaultPolicyEditKeepsExplicitConfigure(t *testing.T) {
	s := newStack(t)
	s.configure(obj{"queue": "pay", "options": obj{"leaseTime": 120, "deadLetterQueue": true,
		"dlqAfterMaxRetries": true, "retentionEnabled": false}})
	s.ojs("PUT", "/ojs/v1/queues/_default/config",
		`{"processing":{"visibility_timeout":30},"dead_letter":{"enabled":false},"retention":{"completed_ttl":"PT1S"}}`).want(t, 200)
	_, body := s.get("/api/v1/resources/queues/pay")
	c := asObj(t, asObj(t, body)["config"])
	if got := optsTestNum(t, c, "leaseTime"); got != 120 {
		t.Errorf("leaseTime %d after a _default policy edit, want the configured 120", got)
	}
	if c["deadLetterQueue"] != true || c["dlqAfterMaxRetries"] != true {
		t.Errorf("deadLetterQueue %v dlqAfterMaxRetries %v after a _default policy edit, want both true as configured",
			c["deadLetterQueue"], c["dlqAfterMaxRetries"])
	}
	if c["retentionEnabled"] != false {
		t.Errorf("retentionEnabled %v (completedRetentionSeconds %v) after a _default policy edit, want false as configured",
			c["retentionEnabled"], c["completedRetentionSeconds"])
	}
	// What the lease does: a pop leases for the configured 120 s.
	s.push(obj{"queue": "pay", "payload": 1})
	m := s.popOne("/api/v1/pop/queue/pay")
	if d := time.Until(optsTestLeaseExpiry(t, s, asStr(t, m["leaseId"]))); d < 100*time.Second {
		t.Errorf("a pop leased for %v, want about 120 s", d.Round(time.Second))
	}
}

// queue-options.md, leaseTime: a pop leases for "the request's leaseSeconds
// when positive, else this value, else 60", and queen-api.md 3.11: the
// detail's config "MUST show the values that pops actually use". A
// leaseTime of 0 is echoed by configure as sent, leases for 60 s, and the
// queue's views say 60.
func TestHTTPOptsLeaseTimeZeroShowsTheLeasePopsUse(t *testing.T) {
	s := newStack(t)
	r := s.configure(obj{"queue": "lz", "options": obj{"leaseTime": 0}})
	if got := optsTestNum(t, asObj(t, r["options"]), "leaseTime"); got != 0 {
		t.Errorf("configure echoed leaseTime %d, want the 0 it was sent", got)
	}
	s.push(obj{"queue": "lz", "payload": 1, "transactionId": "z1"})
	m := s.popOne("/api/v1/pop/queue/lz")
	exp := optsTestLeaseExpiry(t, s, asStr(t, m["leaseId"]))
	if d := time.Until(exp); d < 55*time.Second || d > 61*time.Second {
		t.Errorf("a pop leased for %v, want about 60 s", d.Round(time.Second))
	}
	if got := optsTestNum(t, asObj(t, asObj(t, s.getOK("/api/v1/resources/queues/lz"))["config"]), "leaseTime"); got != 60 {
		t.Errorf("resources detail config.leaseTime %d, want the 60 pops use", got)
	}
	st := asObj(t, asObj(t, s.getOK("/api/v1/status/queues/lz"))["queue"])
	if got := optsTestNum(t, asObj(t, st["config"]), "leaseTime"); got != 60 {
		t.Errorf("status detail config.leaseTime %d, want the 60 pops use", got)
	}
	pid := asStr(t, m["partitionId"])
	d := asObj(t, s.getOK("/api/v1/messages/"+pid+"/z1"))
	if got := optsTestNum(t, asObj(t, d["queueConfig"]), "leaseTime"); got != 60 {
		t.Errorf("message detail queueConfig.leaseTime %d, want the 60 pops use", got)
	}
}
