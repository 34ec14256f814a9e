package ojs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"

	"github.com/crownmq/crown/fsm"
)

// problem is one validation finding, with the dotted path of its field.
type problem struct {
	Field   string `json:"field"`
	Type    string `json:"type"`
	Message string `json:"message"`
	status  int
}

// problems turns findings into one error (ojs-queues.md 0.5, 2.1). Shape
// errors (400) are more severe than value errors (422): the status is 400
// when any finding is a shape error, otherwise 422. details.errors holds
// every finding, shape errors first, each group in the order found; the
// first entry gives details.field, the error type and the message.
func problems(ps []problem) *Error {
	if len(ps) == 0 {
		return nil
	}
	all := append([]problem(nil), ps...)
	sort.SliceStable(all, func(i, j int) bool {
		return all[i].status == http.StatusBadRequest && all[j].status != http.StatusBadRequest
	})
	status := http.StatusUnprocessableEntity
	code := "validation_error"
	if all[0].status == http.StatusBadRequest {
		status, code = http.StatusBadRequest, "invalid_request"
	}
	e := newErr(status, code, all[0].Type, "%s", all[0].Message)
	e.Details = map[string]any{"field": all[0].Field, "errors": all}
	return e
}

// findings turns an error back into findings, so that single-error checks
// can be reported together with the others.
func findings(e *Error) []problem {
	if e == nil {
		return nil
	}
	if ps, ok := e.Details["errors"].([]problem); ok {
		return ps
	}
	f, _ := e.Details["field"].(string)
	return []problem{{Field: f, Type: e.Type, Message: e.Message, status: e.Status}}
}

func shape(field, typ, format string, args ...any) problem {
	return problem{Field: field, Type: typ, Message: fmt.Sprintf(format, args...), status: http.StatusBadRequest}
}

// decodeObject parses a JSON object into its raw members. Not JSON, or not
// an object, is 400 invalid_payload (top level) or invalid_type (nested).
func decodeObject(raw []byte) (map[string]json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, false
	}
	return m, true
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// jsonInteger reads a JSON integer: no fraction, no exponent, no quotes.
func jsonInteger(raw json.RawMessage) (int64, bool) {
	s := string(bytes.TrimSpace(raw))
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || (i == 0 && s[i] == '-')) {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// Too large for int64: still an integer, report it out of range.
		if len(s) > 0 && s[0] == '-' {
			return -1 << 63, true
		}
		return 1<<63 - 1, true
	}
	return n, true
}

// requiredName reads the name a create body must carry (ojs-queues.md 2.1):
// absent or null it is missing_field, another JSON type invalid_type, and a
// string valid refuses gives valid's findings; the name is "" unless valid.
func requiredName(m map[string]json.RawMessage, valid func(string) *Error) (string, []problem) {
	raw, ok := m["name"]
	if !ok || isNull(raw) {
		return "", []problem{shape("name", "missing_field", "name is required")}
	}
	name, ok := jsonString(raw)
	if !ok {
		return "", []problem{shape("name", "invalid_type", "name must be a string")}
	}
	if e := valid(name); e != nil {
		return "", findings(e)
	}
	return name, nil
}

// repeatedName checks a body's optional name against the one its path gave
// (of says whose): it may repeat it, nothing else (ojs-queues.md 6.4).
func repeatedName(m map[string]json.RawMessage, name, of string) []problem {
	raw, ok := m["name"]
	if !ok {
		return nil
	}
	if s, ok := jsonString(raw); !ok || s != name {
		return []problem{shape("name", "read_only_field", "name may only repeat the %s's name", of)}
	}
	return nil
}

func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if len(bytes.TrimSpace(raw)) == 0 || bytes.TrimSpace(raw)[0] != '"' {
		return "", false
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

func jsonBool(raw json.RawMessage) (bool, bool) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

var sectionFields = map[string][]string{
	"capacity":    {"max_depth", "max_size_bytes"},
	"processing":  {"visibility_timeout", "max_concurrency"},
	"retention":   {"completed_ttl", "failed_ttl", "cancelled_ttl"},
	"dead_letter": {"enabled", "max_age", "max_count"},
	"access":      {"producers", "consumers"},
}

// Sections lists the five configuration sections in document order.
var Sections = []string{"capacity", "processing", "retention", "dead_letter", "access"}

func fieldBit(path string) uint32 {
	for i, p := range fsm.FieldPaths {
		if p == path {
			return 1 << i
		}
	}
	return 0
}

// parseSections reads the configuration sections of m (only the keys that
// are sections). With patch, null removes an override (its bit is set in
// unset); otherwise null is the same as leaving the field out.
func parseSections(m map[string]json.RawMessage, prefix string, patch bool) (cfg fsm.QueueConfig, unset uint32, ps []problem) {
	for _, sec := range Sections {
		raw, ok := m[sec]
		if !ok {
			continue
		}
		path := prefix + sec
		if isNull(raw) {
			if patch {
				for _, f := range sectionFields[sec] {
					unset |= fieldBit(sec + "." + f)
				}
			}
			continue
		}
		sm, ok := decodeObject(raw)
		if !ok {
			ps = append(ps, shape(path, "invalid_type", "%s must be an object", path))
			continue
		}
		keys := make([]string, 0, len(sm))
		for k := range sm {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			known := false
			for _, f := range sectionFields[sec] {
				known = known || f == k
			}
			if !known {
				ps = append(ps, shape(path+"."+k, "unknown_field", "%s.%s is not a configuration field", path, k))
			}
		}
		for _, f := range sectionFields[sec] {
			v, ok := sm[f]
			if !ok {
				continue
			}
			fp := path + "." + f
			leaf := sec + "." + f
			if isNull(v) {
				if patch {
					unset |= fieldBit(leaf)
				}
				continue
			}
			switch leaf {
			case "capacity.max_depth", "capacity.max_size_bytes", "processing.visibility_timeout",
				"processing.max_concurrency", "dead_letter.max_count":
				n, ok := jsonInteger(v)
				if !ok {
					ps = append(ps, shape(fp, "invalid_type", "%s must be an integer", fp))
					continue
				}
				switch leaf {
				case "capacity.max_depth":
					cfg.MaxDepth = &n
				case "capacity.max_size_bytes":
					cfg.MaxSizeBytes = &n
				case "processing.visibility_timeout":
					cfg.VisibilityTimeout = &n
				case "processing.max_concurrency":
					cfg.MaxConcurrency = &n
				default:
					cfg.DLQMaxCount = &n
				}
			case "dead_letter.enabled":
				b, ok := jsonBool(v)
				if !ok {
					ps = append(ps, shape(fp, "invalid_type", "%s must be a boolean", fp))
					continue
				}
				cfg.DLQEnabled = &b
			case "retention.completed_ttl", "retention.failed_ttl", "retention.cancelled_ttl", "dead_letter.max_age":
				s, ok := jsonString(v)
				if !ok {
					ps = append(ps, shape(fp, "invalid_type", "%s must be an ISO 8601 duration string", fp))
					continue
				}
				us, err := fsm.ParseDuration(s)
				if err != nil && !errors.Is(err, fsm.ErrDurationRange) {
					ps = append(ps, problem{Field: fp, Type: "invalid_duration", status: http.StatusUnprocessableEntity,
						Message: fmt.Sprintf("%s: %q is not an ISO 8601 duration of the form P[nW][nD][T[nH][nM][n[.fff]S]] (no years or months)", fp, s)})
					continue
				}
				d := &fsm.Duration{Text: s, Micros: us} // a range error is fsm.CheckConfig's (out_of_range)
				switch leaf {
				case "retention.completed_ttl":
					cfg.CompletedTTL = d
				case "retention.failed_ttl":
					cfg.FailedTTL = d
				case "retention.cancelled_ttl":
					cfg.CancelledTTL = d
				default:
					cfg.DLQMaxAge = d
				}
			case "access.producers", "access.consumers":
				var arr []json.RawMessage
				if t := bytes.TrimSpace(v); len(t) == 0 || t[0] != '[' || json.Unmarshal(v, &arr) != nil {
					ps = append(ps, shape(fp, "invalid_type", "%s must be an array of strings", fp))
					continue
				}
				list := make([]string, 0, len(arr))
				bad := false
				for i, el := range arr {
					s, ok := jsonString(el)
					if !ok {
						ps = append(ps, shape(fmt.Sprintf("%s[%d]", fp, i), "invalid_type", "%s[%d] must be a string", fp, i))
						bad = true
						continue
					}
					list = append(list, s)
				}
				if bad {
					// The list is not stored, so fsm.CheckConfig will not see
					// it: report its value problems here.
					if len(arr) > fsm.MaxAccessEntries {
						ps = append(ps, problem{Field: fp, Type: "out_of_range", status: http.StatusUnprocessableEntity,
							Message: fmt.Sprintf("%s has %d entries; at most %d are allowed", fp, len(arr), fsm.MaxAccessEntries)})
						continue
					}
					for i, el := range arr {
						if s, ok := jsonString(el); ok && !fsm.ValidPrincipal(s) {
							ps = append(ps, problem{Field: fmt.Sprintf("%s[%d]", fp, i), Type: "invalid_principal", status: http.StatusUnprocessableEntity,
								Message: fmt.Sprintf("%s[%d]: %q is not \"*\" or 1-128 characters of [A-Za-z0-9._:@/-]", fp, i, s)})
						}
					}
					continue
				}
				if leaf == "access.producers" {
					cfg.Producers = &list
				} else {
					cfg.Consumers = &list
				}
			}
		}
	}
	// Value rules (422) of the well-typed fields, with the caller's prefix
	// on the field paths; they are checked even after a shape error, so that
	// every problem is reported.
	for _, ce := range fsm.CheckConfig(&cfg) {
		ps = append(ps, problem{Field: prefix + ce.Field, Type: ce.Type, Message: prefix + ce.Msg, status: http.StatusUnprocessableEntity})
	}
	if len(ps) == 0 {
		if cfg.Producers != nil {
			l := fsm.NormalizeACL(*cfg.Producers)
			cfg.Producers = &l
		}
		if cfg.Consumers != nil {
			l := fsm.NormalizeACL(*cfg.Consumers)
			cfg.Consumers = &l
		}
	}
	return cfg, unset, ps
}

// configOf parses the configuration document of a request object (flat or
// wrapped in "config"): any problem fails it, with every problem in the
// error's details.
func configOf(m map[string]json.RawMessage, patch bool) (fsm.QueueConfig, uint32, *Error) {
	cfg, unset, ps := configProblems(m, patch)
	if e := problems(ps); e != nil {
		return fsm.QueueConfig{}, 0, e
	}
	return cfg, unset, nil
}

// configProblems is configOf returning the findings instead of one error.
func configProblems(m map[string]json.RawMessage, patch bool) (fsm.QueueConfig, uint32, []problem) {
	sm, prefix, ps := splitConfig(m)
	cfg, unset, more := parseSections(sm, prefix, patch)
	return cfg, unset, append(ps, more...)
}

// splitConfig handles the two request forms: sections at the top level, or
// nested in "config". It returns the members holding the sections, the path
// prefix for error fields, and the problems of the "config" member (every
// unknown section is one).
func splitConfig(m map[string]json.RawMessage) (map[string]json.RawMessage, string, []problem) {
	raw, nested := m["config"]
	if !nested {
		return m, "", nil
	}
	for _, s := range Sections {
		if _, ok := m[s]; ok {
			return nil, "", []problem{shape("config", "ambiguous_body", "send the configuration either at the top level or in config, not both")}
		}
	}
	if isNull(raw) {
		return map[string]json.RawMessage{}, "config.", nil
	}
	cm, ok := decodeObject(raw)
	if !ok {
		return nil, "", []problem{shape("config", "invalid_type", "config must be an object")}
	}
	return cm, "config.", unknownMembers(cm, "config.", "is not a configuration section", false, Sections...)
}

// unknownMembers reports, in name order, every member of m that is not in
// allowed (nor a configuration section, with sections): 400 unknown_field,
// with prefix on the field path.
func unknownMembers(m map[string]json.RawMessage, prefix, what string, sections bool, allowed ...string) []problem {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ps []problem
	for _, k := range keys {
		ok := false
		for _, a := range allowed {
			ok = ok || a == k
		}
		if _, sec := sectionFields[k]; sec && sections {
			ok = true
		}
		if !ok {
			ps = append(ps, shape(prefix+k, "unknown_field", "%s%s %s", prefix, k, what))
		}
	}
	return ps
}

// checkMembers reports every member of m that is neither in allowed nor a
// configuration section (400 unknown_field).
func checkMembers(m map[string]json.RawMessage, allowed ...string) *Error {
	return problems(unknownMembers(m, "", "is not a known member", true, allowed...))
}

// ConfigJSON renders a partial configuration (overrides or a policy's
// config) with only the fields it sets; {} when none.
func ConfigJSON(c *fsm.QueueConfig) map[string]map[string]any {
	out := map[string]map[string]any{}
	put := func(sec, f string, v any) {
		if out[sec] == nil {
			out[sec] = map[string]any{}
		}
		out[sec][f] = v
	}
	if c.MaxDepth != nil {
		put("capacity", "max_depth", *c.MaxDepth)
	}
	if c.MaxSizeBytes != nil {
		put("capacity", "max_size_bytes", *c.MaxSizeBytes)
	}
	if c.VisibilityTimeout != nil {
		put("processing", "visibility_timeout", *c.VisibilityTimeout)
	}
	if c.MaxConcurrency != nil {
		put("processing", "max_concurrency", *c.MaxConcurrency)
	}
	if c.CompletedTTL != nil {
		put("retention", "completed_ttl", c.CompletedTTL.Text)
	}
	if c.FailedTTL != nil {
		put("retention", "failed_ttl", c.FailedTTL.Text)
	}
	if c.CancelledTTL != nil {
		put("retention", "cancelled_ttl", c.CancelledTTL.Text)
	}
	if c.DLQEnabled != nil {
		put("dead_letter", "enabled", *c.DLQEnabled)
	}
	if c.DLQMaxAge != nil {
		put("dead_letter", "max_age", c.DLQMaxAge.Text)
	}
	if c.DLQMaxCount != nil {
		put("dead_letter", "max_count", *c.DLQMaxCount)
	}
	if c.Producers != nil {
		put("access", "producers", append([]string{}, (*c.Producers)...))
	}
	if c.Consumers != nil {
		put("access", "consumers", append([]string{}, (*c.Consumers)...))
	}
	return out
}

// EffectiveJSON renders every leaf of an effective configuration.
func EffectiveJSON(e *fsm.EffectiveConfig) map[string]map[string]any {
	var completed, maxAge, maxCount any
	if e.CompletedTTL != "" {
		completed = e.CompletedTTL
	}
	if e.DLQMaxAge != "" {
		maxAge = e.DLQMaxAge
	}
	if e.DLQMaxCount > 0 {
		maxCount = e.DLQMaxCount
	}
	return map[string]map[string]any{
		"capacity":    {"max_depth": e.MaxDepth, "max_size_bytes": e.MaxSizeBytes},
		"processing":  {"visibility_timeout": e.VisibilityTimeout, "max_concurrency": e.MaxConcurrency},
		"retention":   {"completed_ttl": completed, "failed_ttl": e.FailedTTL, "cancelled_ttl": e.CancelledTTL},
		"dead_letter": {"enabled": e.DLQEnabled, "max_age": maxAge, "max_count": maxCount},
		"access":      {"producers": nonNil(e.Producers), "consumers": nonNil(e.Consumers)},
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

type jsonRaw = json.RawMessage

func jsonUnmarshalStrict(raw jsonRaw, v any) error { return json.Unmarshal(raw, v) }
