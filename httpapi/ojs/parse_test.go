package ojs

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/crownmq/crown/fsm"
)

func parseDoc(t *testing.T, body string, patch bool) (*Error, uint32) {
	t.Helper()
	m, ok := decodeObject([]byte(body))
	if !ok {
		t.Fatalf("not an object: %s", body)
	}
	_, unset, ps := parseSections(m, "", patch)
	return problems(ps), unset
}

func TestParseSectionsRules(t *testing.T) {
	for _, c := range []struct {
		body, typ, field string
		status           int
	}{
		{`{"capacity":{"max_depth":10}}`, "", "", 0},
		{`{"capacity":{"nope":1}}`, "unknown_field", "capacity.nope", 400},
		{`{"capacity":"x"}`, "invalid_type", "capacity", 400},
		{`{"capacity":{"max_depth":"10"}}`, "invalid_type", "capacity.max_depth", 400},
		{`{"capacity":{"max_depth":10.0}}`, "invalid_type", "capacity.max_depth", 400},
		{`{"capacity":{"max_depth":1E2}}`, "invalid_type", "capacity.max_depth", 400},
		{`{"capacity":{"max_depth":9007199254740992}}`, "out_of_range", "capacity.max_depth", 422},
		{`{"capacity":{"max_depth":99999999999999999999999}}`, "out_of_range", "capacity.max_depth", 422},
		{`{"dead_letter":{"enabled":1}}`, "invalid_type", "dead_letter.enabled", 400},
		{`{"retention":{"completed_ttl":7}}`, "invalid_type", "retention.completed_ttl", 400},
		{`{"retention":{"completed_ttl":"P1M"}}`, "invalid_duration", "retention.completed_ttl", 422},
		{`{"retention":{"completed_ttl":"PT0S"}}`, "", "", 0},
		{`{"access":{"producers":"a"}}`, "invalid_type", "access.producers", 400},
		{`{"access":{"producers":[1]}}`, "invalid_type", "access.producers[0]", 400},
		{`{"access":{"consumers":["*","x y"]}}`, "invalid_principal", "access.consumers[1]", 422},
		// A shape error wins over a value error, whatever the order.
		{`{"capacity":{"max_depth":-1},"processing":{"nope":1}}`, "unknown_field", "processing.nope", 400},
	} {
		e, _ := parseDoc(t, c.body, false)
		if c.status == 0 {
			if e != nil {
				t.Errorf("%s: %v", c.body, e)
			}
			continue
		}
		if e == nil || e.Status != c.status || e.Type != c.typ || e.Details["field"] != c.field {
			t.Errorf("%s: got %+v, want %d %s %s", c.body, e, c.status, c.typ, c.field)
		}
	}
	_, unset := parseDoc(t, `{"capacity":null,"processing":{"max_concurrency":null}}`, true)
	if unset != 0b1011 {
		t.Errorf("unset bits %b", unset)
	}
}

func TestErrorBodyShape(t *testing.T) {
	e := badRequest("unknown_field", "capacity.x", "bad")
	var body struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(ErrorBody(e, "req_1"), &body); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"code", "type", "message", "retryable", "request_id", "hint", "docs_url", "details"} {
		if _, ok := body.Error[k]; !ok {
			t.Errorf("error body lacks %s", k)
		}
	}
	if e.Status != http.StatusBadRequest || body.Error["retryable"] != false {
		t.Errorf("%+v", body)
	}
}

func FuzzParseSections(f *testing.F) {
	for _, s := range []string{`{"capacity":{"max_depth":1}}`, `{"retention":{"completed_ttl":"P7D"}}`,
		`{"access":{"producers":["a","*"]}}`, `{"capacity":null}`, `{"x":[]}`} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, body string, patch bool) {
		m, ok := decodeObject([]byte(body))
		if !ok {
			return
		}
		cfg, _, ps := parseSections(m, "", patch)
		if e := problems(ps); e != nil {
			if e.Status != 400 && e.Status != 422 {
				t.Fatalf("status %d", e.Status)
			}
			return
		}
		if cfg.Producers != nil {
			for _, p := range *cfg.Producers {
				if p == "" {
					t.Fatal("empty principal accepted")
				}
			}
		}
	})
}

// want is one expected entry of details.errors.
type want struct{ field, typ string }

// checkAll checks that e lists exactly ws in details.errors, in order, and
// that its status, code, type, message and details.field come from the
// first entry (ojs-queues.md 0.5 and 2.1).
func checkAll(t *testing.T, name string, e *Error, status int, ws []want) {
	t.Helper()
	if e == nil {
		t.Errorf("%s: no error, want %d %v", name, status, ws)
		return
	}
	code := map[int]string{400: "invalid_request", 422: "validation_error"}[status]
	if e.Status != status || e.Code != code || e.Type != ws[0].typ || e.Details["field"] != ws[0].field {
		t.Errorf("%s: got %d %s %s field %v, want %d %s %s field %s", name, e.Status, e.Code, e.Type,
			e.Details["field"], status, code, ws[0].typ, ws[0].field)
	}
	got, _ := e.Details["errors"].([]problem)
	if len(got) != len(ws) {
		t.Errorf("%s: details.errors %+v, want %v", name, got, ws)
		return
	}
	for i, w := range ws {
		if got[i].Field != w.field || got[i].Type != w.typ || got[i].Message == "" {
			t.Errorf("%s: details.errors[%d] = %+v, want %v", name, i, got[i], w)
		}
	}
	if e.Message != got[0].Message {
		t.Errorf("%s: message %q is not the first problem's %q", name, e.Message, got[0].Message)
	}
}

// Every problem of a configuration document is reported: shape (400) and
// value (422) problems together, shape ones first; 400 wins.
func TestParseSectionsAllProblems(t *testing.T) {
	for _, c := range []struct {
		body   string
		patch  bool
		status int
		errs   []want
	}{
		{`{"capacity":{"max_depth":-1},"processing":{"nope":1}}`, false, 400,
			[]want{{"processing.nope", "unknown_field"}, {"capacity.max_depth", "out_of_range"}}},
		{`{"capacity":{"max_depth":"x","max_size_bytes":-5},"retention":{"completed_ttl":"P1M","failed_ttl":"P9999D"}}`, false, 400,
			[]want{{"capacity.max_depth", "invalid_type"}, {"retention.completed_ttl", "invalid_duration"},
				{"capacity.max_size_bytes", "out_of_range"}, {"retention.failed_ttl", "out_of_range"}}},
		{`{"processing":{"visibility_timeout":0},"dead_letter":{"enabled":"yes","max_count":0},"access":"x"}`, true, 400,
			[]want{{"dead_letter.enabled", "invalid_type"}, {"access", "invalid_type"},
				{"processing.visibility_timeout", "out_of_range"}, {"dead_letter.max_count", "out_of_range"}}},
		// A list with a non-string entry still has its principals checked.
		{`{"access":{"producers":[1,"x y","ok",2]}}`, false, 400,
			[]want{{"access.producers[0]", "invalid_type"}, {"access.producers[3]", "invalid_type"},
				{"access.producers[1]", "invalid_principal"}}},
		// Value problems only: 422, all of them.
		{`{"capacity":{"max_depth":-1},"processing":{"visibility_timeout":0},"access":{"consumers":["x y"]}}`, false, 422,
			[]want{{"capacity.max_depth", "out_of_range"}, {"processing.visibility_timeout", "out_of_range"},
				{"access.consumers[0]", "invalid_principal"}}},
	} {
		e, _ := parseDoc(t, c.body, c.patch)
		checkAll(t, c.body, e, c.status, c.errs)
	}
}

// Unknown members and sections are all reported, together with the
// problems of the sections (flat and "config" forms, and policy bodies).
func TestConfigAllProblems(t *testing.T) {
	obj := func(body string) map[string]json.RawMessage {
		m, ok := decodeObject([]byte(body))
		if !ok {
			t.Fatalf("not an object: %s", body)
		}
		return m
	}
	for _, c := range []struct {
		body   string
		status int
		errs   []want
	}{
		{`{"config":{"zzz":1,"bogus":{},"capacity":{"max_depth":-1,"x":1}}}`, 400,
			[]want{{"config.bogus", "unknown_field"}, {"config.zzz", "unknown_field"},
				{"config.capacity.x", "unknown_field"}, {"config.capacity.max_depth", "out_of_range"}}},
		{`{"config":{"capacity":{"max_depth":-1},"retention":{"failed_ttl":"P1Y"}}}`, 422,
			[]want{{"config.retention.failed_ttl", "invalid_duration"}, {"config.capacity.max_depth", "out_of_range"}}},
	} {
		_, _, e := configOf(obj(c.body), false)
		checkAll(t, "configOf "+c.body, e, c.status, c.errs)
	}

	e := checkMembers(obj(`{"b":1,"name":"q","a":2,"capacity":{}}`), "name")
	checkAll(t, "checkMembers", e, 400, []want{{"a", "unknown_field"}, {"b", "unknown_field"}})
	e = checkMembersOnly(obj(`{"b":1,"a":2,"reason":"x"}`), "reason")
	checkAll(t, "checkMembersOnly", e, 400, []want{{"a", "unknown_field"}, {"b", "unknown_field"}})

	var pc fsm.OJSPutPolicy
	e = parsePolicy(obj(`{"match":"A B","priority":5000,"config":{"x":1,"capacity":{"max_depth":"1","max_size_bytes":-1}}}`), false, &pc)
	checkAll(t, "parsePolicy", e, 400, []want{{"config.x", "unknown_field"}, {"config.capacity.max_depth", "invalid_type"},
		{"match", "invalid_pattern"}, {"priority", "out_of_range"}, {"config.capacity.max_size_bytes", "out_of_range"}})
}

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{`{"match":"batch.*","priority":10,"config":{"capacity":{"max_depth":1000}}}`,
		`{"match":"A B","priority":5000,"config":{"x":1}}`, `{"config":null}`, `{"priority":"1"}`, `{}`} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, body string, patch bool) {
		m, ok := decodeObject([]byte(body))
		if !ok {
			return
		}
		c := fsm.OJSPutPolicy{Name: "p", Mode: fsm.PolicyCreate}
		if patch {
			c.Mode = fsm.PolicyPatch
		}
		if e := parsePolicy(m, patch, &c); e != nil {
			if e.Status != 400 && e.Status != 422 {
				t.Fatalf("status %d", e.Status)
			}
			return
		}
		if c.HasMatch && !fsm.ValidPattern(c.Match) {
			t.Fatalf("match %q accepted", c.Match)
		}
	})
}
