package ojs

import (
	"encoding/json"
	"net/http"
	"testing"
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
