package fsm

import (
	"errors"
	"fmt"
	"strings"

	"github.com/crownmq/crown/segments"
)

// The OJS configuration layers (docs/queues.md): system defaults for the
// queue's origin, the _default policy, the bound named policy, the queue's
// own overrides. Shared fields resolve into segments.Options (what the hot
// paths read); OJS-only fields into segments.Limits.

// Aliases so that the HTTP layer need not import the storage package.
type (
	QueueConfig = segments.QueueConfig
	Duration    = segments.Duration
	Policy      = segments.Policy
	OJSState    = segments.OJSState
	QueueEvent  = segments.QueueEvent
	Limits      = segments.Limits
)

// DefaultPolicyName is the storage name of the _default policy.
const DefaultPolicyName = "_default"

// DefaultQueue is the queue OJS requires on every implementation: every new
// leader ensures it exists, and neither API deletes it.
const DefaultQueue = "default"

// OJS defaults and bounds (ojs-queues.md 2.1).
const (
	OJSLeaseSeconds       = 30
	OJSCompletedTTLSec    = 7 * 86400
	OJSFailedTTL          = "P30D"
	OJSCancelledTTL       = "P7D"
	OJSDLQMaxAge          = "P180D"
	OJSDLQMaxAgeMicros    = 180 * 86400e6
	OJSDLQMaxCount        = 10000
	MaxSafeInt            = 1<<53 - 1
	MaxVisibilityTimeout  = 43200
	MaxConcurrencyLimit   = 1000000
	MaxTTLMicros          = 3650 * 86400e6
	MaxDLQCount           = 10000000
	MaxAccessEntries      = 256
	MaxPrincipalBytes     = 128
	MaxOJSNameBytes       = 128
	MaxPolicyNameBytes    = 64
	MaxPolicyPriority     = 1000
	DefaultMaxQueues      = 10000
	MaxQueueEvents        = 100000
	DefaultDLQPruneBudget = 1000
)

// Config field bits, for unsetting overrides in a patch.
const (
	FieldMaxDepth uint32 = 1 << iota
	FieldMaxSizeBytes
	FieldVisibilityTimeout
	FieldMaxConcurrency
	FieldCompletedTTL
	FieldFailedTTL
	FieldCancelledTTL
	FieldDLQEnabled
	FieldDLQMaxAge
	FieldDLQMaxCount
	FieldProducers
	FieldConsumers
	FieldsAll = 1<<12 - 1
)

// FieldPaths names each field bit by its dotted path, in bit order.
var FieldPaths = [...]string{
	"capacity.max_depth", "capacity.max_size_bytes", "processing.visibility_timeout",
	"processing.max_concurrency", "retention.completed_ttl", "retention.failed_ttl",
	"retention.cancelled_ttl", "dead_letter.enabled", "dead_letter.max_age",
	"dead_letter.max_count", "access.producers", "access.consumers",
}

// unsetFields clears the fields named by bits.
func unsetFields(c *QueueConfig, bits uint32) {
	if bits&FieldMaxDepth != 0 {
		c.MaxDepth = nil
	}
	if bits&FieldMaxSizeBytes != 0 {
		c.MaxSizeBytes = nil
	}
	if bits&FieldVisibilityTimeout != 0 {
		c.VisibilityTimeout = nil
	}
	if bits&FieldMaxConcurrency != 0 {
		c.MaxConcurrency = nil
	}
	if bits&FieldCompletedTTL != 0 {
		c.CompletedTTL = nil
	}
	if bits&FieldFailedTTL != 0 {
		c.FailedTTL = nil
	}
	if bits&FieldCancelledTTL != 0 {
		c.CancelledTTL = nil
	}
	if bits&FieldDLQEnabled != 0 {
		c.DLQEnabled = nil
	}
	if bits&FieldDLQMaxAge != 0 {
		c.DLQMaxAge = nil
	}
	if bits&FieldDLQMaxCount != 0 {
		c.DLQMaxCount = nil
	}
	if bits&FieldProducers != 0 {
		c.Producers = nil
	}
	if bits&FieldConsumers != 0 {
		c.Consumers = nil
	}
}

// namedBy is the Present bits of the shared options a patch that sets set
// and removes unset touches.
func namedBy(set *QueueConfig, unset uint32) uint32 {
	var p uint32
	if set.VisibilityTimeout != nil || unset&FieldVisibilityTimeout != 0 {
		p |= PresentLease
	}
	if set.DLQEnabled != nil || unset&FieldDLQEnabled != 0 {
		p |= PresentDLQ
	}
	if set.CompletedTTL != nil || unset&FieldCompletedTTL != 0 {
		p |= PresentRetention
	}
	return p
}

// dropNamed takes the shared options whose /configure-named bits are in
// dropped out of the override layer (docs/queues.md, layer 4: an OJS PATCH
// that sets or removes one, or a PUT of the config, replaces the configured
// value). Those values live in the base, so the base gets back what a
// /configure that did not name them stores (a full replace, as in Queen);
// the layers below then show through, as for any removed override.
// Completed retention alone is turned off: retentionSeconds, which shares
// retentionEnabled, keeps what the /configure gave it.
func dropNamed(q *segments.Queue, dropped uint32) {
	if dropped&presentShared == 0 {
		return
	}
	if q.Base == nil {
		b := q.Options
		q.Base = &b
	}
	d := DefaultOptions(segments.OriginConfigure)
	b := q.Base
	if dropped&PresentLease != 0 {
		b.LeaseTime = d.LeaseTime
	}
	if dropped&PresentDLQ != 0 {
		b.DeadLetterQueue, b.DLQAfterMaxRetries = d.DeadLetterQueue, d.DLQAfterMaxRetries
	}
	if dropped&PresentRetention != 0 {
		b.CompletedRetentionSeconds = d.CompletedRetentionSeconds
		b.RetentionEnabled = b.RetentionEnabled && b.RetentionSeconds > 0
	}
}

// Overrides is q's top layer as the OJS view shows it: its OJS overrides,
// and the shared options a /configure named, as the OJS fields say them
// (retention a /configure turned off has no OJS form and is not shown).
func Overrides(q *segments.Queue) QueueConfig {
	var ov QueueConfig
	if q.OJS != nil {
		mergeConfig(&ov, &q.OJS.Overrides)
	}
	o := q.Options
	if q.Base != nil {
		o = *q.Base
	}
	if q.Named&PresentLease != 0 {
		v := o.LeaseTime
		ov.VisibilityTimeout = &v
	}
	if q.Named&PresentDLQ != 0 {
		v := o.DeadLetterQueue || o.DLQAfterMaxRetries
		ov.DLQEnabled = &v
	}
	if q.Named&PresentRetention != 0 && o.RetentionEnabled && o.CompletedRetentionSeconds > 0 {
		ov.CompletedTTL = &Duration{Text: FormatSeconds(o.CompletedRetentionSeconds), Micros: Micros(o.CompletedRetentionSeconds)}
	}
	return ov
}

// mergeConfig sets on dst every field src sets (copying values).
func mergeConfig(dst *QueueConfig, src *QueueConfig) {
	cpI := func(p *int64) *int64 { v := *p; return &v }
	cpD := func(p *Duration) *Duration { v := *p; return &v }
	cpS := func(p *[]string) *[]string { v := append([]string{}, (*p)...); return &v }
	if src.MaxDepth != nil {
		dst.MaxDepth = cpI(src.MaxDepth)
	}
	if src.MaxSizeBytes != nil {
		dst.MaxSizeBytes = cpI(src.MaxSizeBytes)
	}
	if src.VisibilityTimeout != nil {
		dst.VisibilityTimeout = cpI(src.VisibilityTimeout)
	}
	if src.MaxConcurrency != nil {
		dst.MaxConcurrency = cpI(src.MaxConcurrency)
	}
	if src.CompletedTTL != nil {
		dst.CompletedTTL = cpD(src.CompletedTTL)
	}
	if src.FailedTTL != nil {
		dst.FailedTTL = cpD(src.FailedTTL)
	}
	if src.CancelledTTL != nil {
		dst.CancelledTTL = cpD(src.CancelledTTL)
	}
	if src.DLQEnabled != nil {
		v := *src.DLQEnabled
		dst.DLQEnabled = &v
	}
	if src.DLQMaxAge != nil {
		dst.DLQMaxAge = cpD(src.DLQMaxAge)
	}
	if src.DLQMaxCount != nil {
		dst.DLQMaxCount = cpI(src.DLQMaxCount)
	}
	if src.Producers != nil {
		dst.Producers = cpS(src.Producers)
	}
	if src.Consumers != nil {
		dst.Consumers = cpS(src.Consumers)
	}
}

// ConfigError is a value error in a configuration document (422 in OJS).
type ConfigError struct {
	Field string
	Type  string // out_of_range, invalid_duration, invalid_principal
	Msg   string
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Msg }

// CheckConfig validates the values of a partial configuration document
// (ojs-queues.md 2.1, rules 4 to 6). Every problem is returned, in field order.
func CheckConfig(c *QueueConfig) []*ConfigError {
	var errs []*ConfigError
	rng := func(field string, p *int64, lo, hi int64) {
		if p != nil && (*p < lo || *p > hi) {
			errs = append(errs, &ConfigError{field, "out_of_range", fmt.Sprintf("%s must be between %d and %d, got %d", field, lo, hi, *p)})
		}
	}
	dur := func(field string, d *Duration, lo, hi int64) {
		if d == nil {
			return
		}
		us, err := ParseDuration(d.Text)
		if errors.Is(err, ErrDurationRange) {
			errs = append(errs, &ConfigError{field, "out_of_range", fmt.Sprintf("%s must be between %s and P3650D, got %s", field, FormatSeconds(lo/1e6), d.Text)})
			return
		}
		if err != nil || us != d.Micros {
			errs = append(errs, &ConfigError{field, "invalid_duration", fmt.Sprintf("%s: %q is not an ISO 8601 duration of the form P[nW][nD][T[nH][nM][n[.fff]S]] (years and months are not accepted)", field, d.Text)})
			return
		}
		if us < lo || us > hi {
			errs = append(errs, &ConfigError{field, "out_of_range", fmt.Sprintf("%s must be between %s and P3650D, got %s", field, FormatSeconds(lo/1e6), d.Text)})
		}
	}
	acl := func(field string, p *[]string) {
		if p == nil {
			return
		}
		if len(*p) > MaxAccessEntries {
			errs = append(errs, &ConfigError{field, "out_of_range", fmt.Sprintf("%s has %d entries; at most %d are allowed", field, len(*p), MaxAccessEntries)})
			return
		}
		for i, s := range *p {
			if !ValidPrincipal(s) {
				errs = append(errs, &ConfigError{fmt.Sprintf("%s[%d]", field, i), "invalid_principal",
					fmt.Sprintf("%s[%d]: %q is not \"*\" or 1-128 characters of [A-Za-z0-9._:@/-]", field, i, s)})
			}
		}
	}
	rng("capacity.max_depth", c.MaxDepth, 0, MaxSafeInt)
	rng("capacity.max_size_bytes", c.MaxSizeBytes, 0, MaxSafeInt)
	rng("processing.visibility_timeout", c.VisibilityTimeout, 1, MaxVisibilityTimeout)
	rng("processing.max_concurrency", c.MaxConcurrency, 0, MaxConcurrencyLimit)
	dur("retention.completed_ttl", c.CompletedTTL, 0, MaxTTLMicros)
	dur("retention.failed_ttl", c.FailedTTL, 0, MaxTTLMicros)
	dur("retention.cancelled_ttl", c.CancelledTTL, 0, MaxTTLMicros)
	dur("dead_letter.max_age", c.DLQMaxAge, 1e6, MaxTTLMicros)
	rng("dead_letter.max_count", c.DLQMaxCount, 1, MaxDLQCount)
	acl("access.producers", c.Producers)
	acl("access.consumers", c.Consumers)
	return errs
}

// ValidPrincipal reports whether s is "*" or 1-128 characters of [A-Za-z0-9._:@/-].
func ValidPrincipal(s string) bool {
	if s == "*" {
		return true
	}
	if len(s) == 0 || len(s) > MaxPrincipalBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:@/-", c) >= 0) {
			return false
		}
	}
	return true
}

// NormalizeACL drops duplicates (the first stays) and collapses a list that
// contains "*" to ["*"].
func NormalizeACL(list []string) []string {
	out := []string{}
	seen := map[string]bool{}
	for _, s := range list {
		if s == "*" {
			return []string{"*"}
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// ValidQueueName reports whether name fits the OJS queue alphabet
// ^[a-z0-9][a-z0-9.-]*$ and is at most 128 bytes.
func ValidQueueName(name string) bool {
	if len(name) == 0 || len(name) > MaxOJSNameBytes {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || (i > 0 && (c == '.' || c == '-'))
		if !ok {
			return false
		}
	}
	return true
}

// ValidPattern reports whether a policy match pattern is 1-128 bytes of the
// queue alphabet plus * and ?.
func ValidPattern(p string) bool {
	if len(p) == 0 || len(p) > MaxOJSNameBytes {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '*' || c == '?') {
			return false
		}
	}
	return true
}

// GlobMatch matches a policy pattern against a whole queue name: * matches
// any run (dots included, possibly empty), ? exactly one byte.
func GlobMatch(pattern, name string) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == name[n]):
			p++
			n++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

func literalCount(pattern string) int {
	return len(pattern) - strings.Count(pattern, "*") - strings.Count(pattern, "?")
}

// betterPolicy reports whether a beats b for a queue both match: higher
// priority, then more literal characters, then the smaller name by bytes.
func betterPolicy(a, b *Policy) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if la, lb := literalCount(a.Match), literalCount(b.Match); la != lb {
		return la > lb
	}
	return a.Name < b.Name
}

// choosePolicy picks the named policy for a new queue, or nil. Policies are
// walked in key order and the choice is a total order, so it is
// deterministic.
func choosePolicy(tx *segments.Tx, name string) *Policy {
	var best *Policy
	must(tx.ForEachPolicy(func(p *Policy) (bool, error) {
		if p.Name == DefaultPolicyName || !GlobMatch(p.Match, name) {
			return true, nil
		}
		if best == nil || betterPolicy(p, best) {
			best = p
		}
		return true, nil
	}))
	return best
}

// DefaultOptionsOJS is the Queen base of a queue created through the OJS
// API: OJS system defaults where a field is shared.
func DefaultOptionsOJS() segments.Options {
	o := DefaultOptions(segments.OriginConfigure)
	o.LeaseTime = OJSLeaseSeconds
	o.DeadLetterQueue, o.DLQAfterMaxRetries = false, false
	o.RetentionEnabled, o.CompletedRetentionSeconds = true, OJSCompletedTTLSec
	return o
}

// layers returns the configuration layers of q, highest first: overrides,
// bound policy, _default.
func layers(tx *segments.Tx, q *segments.Queue) []*QueueConfig {
	var out []*QueueConfig
	if q.OJS != nil {
		out = append(out, &q.OJS.Overrides)
		if q.OJS.Policy != "" {
			if p := must1(tx.Policy(q.OJS.Policy)); p != nil {
				out = append(out, &p.Config)
			}
		}
	}
	if d := must1(tx.Policy(DefaultPolicyName)); d != nil {
		out = append(out, &d.Config)
	}
	return out
}

// EffectiveConfig is every leaf of the OJS view, resolved.
type EffectiveConfig struct {
	MaxDepth, MaxSizeBytes, VisibilityTimeout, MaxConcurrency int64
	CompletedTTL                                              string // "" shown as null: Queen retention off
	FailedTTL, CancelledTTL                                   string
	DLQEnabled                                                bool
	DLQMaxAge                                                 string // "" shown as null: no pruning
	DLQMaxCount                                               int64  // 0 shown as null: no pruning
	Producers, Consumers                                      []string
}

func firstInt(ls []*QueueConfig, get func(*QueueConfig) *int64) *int64 {
	for _, l := range ls {
		if v := get(l); v != nil {
			return v
		}
	}
	return nil
}

func firstDur(ls []*QueueConfig, get func(*QueueConfig) *Duration) *Duration {
	for _, l := range ls {
		if v := get(l); v != nil {
			return v
		}
	}
	return nil
}

func firstACL(ls []*QueueConfig, get func(*QueueConfig) *[]string) *[]string {
	for _, l := range ls {
		if v := get(l); v != nil {
			return v
		}
	}
	return nil
}

// resolve recomputes q.Options (from the Queen base) and q.OJS.Limits and
// Gate from the layers. It reads policies from tx and writes nothing.
func resolve(tx *segments.Tx, q *segments.Queue) {
	ls := layers(tx, q)
	if q.Base == nil {
		if len(ls) == 0 && q.OJS == nil {
			return
		}
		b := q.Options
		q.Base = &b
	}
	// A shared option a /configure named keeps its base value: it is in the
	// top layer, where an OJS override of the same option cannot also be.
	o := *q.Base
	if v := firstInt(ls, func(c *QueueConfig) *int64 { return c.VisibilityTimeout }); v != nil && q.Named&PresentLease == 0 {
		o.LeaseTime = *v
	}
	for _, l := range ls {
		if l.DLQEnabled != nil && q.Named&PresentDLQ == 0 {
			o.DeadLetterQueue, o.DLQAfterMaxRetries = *l.DLQEnabled, *l.DLQEnabled
			break
		}
	}
	if d := firstDur(ls, func(c *QueueConfig) *Duration { return c.CompletedTTL }); d != nil && q.Named&PresentRetention == 0 {
		o.RetentionEnabled, o.CompletedRetentionSeconds = true, ceilSeconds(d.Micros)
	}
	q.Options = o
	if q.OJS == nil {
		q.OJS = &segments.OJSState{}
	}
	var lim segments.Limits
	if v := firstInt(ls, func(c *QueueConfig) *int64 { return c.MaxDepth }); v != nil {
		lim.MaxDepth = *v
	}
	if v := firstInt(ls, func(c *QueueConfig) *int64 { return c.MaxSizeBytes }); v != nil {
		lim.MaxSizeBytes = *v
	}
	if v := firstInt(ls, func(c *QueueConfig) *int64 { return c.MaxConcurrency }); v != nil {
		lim.MaxConcurrency = *v
	}
	if v := firstACL(ls, func(c *QueueConfig) *[]string { return c.Producers }); v != nil && !isStar(*v) {
		lim.RestrictProducers, lim.Producers = true, append([]string{}, (*v)...)
	}
	if v := firstACL(ls, func(c *QueueConfig) *[]string { return c.Consumers }); v != nil && !isStar(*v) {
		lim.RestrictConsumers, lim.Consumers = true, append([]string{}, (*v)...)
	}
	ojsBorn := q.Origin == segments.OriginOJS
	if d := firstDur(ls, func(c *QueueConfig) *Duration { return c.DLQMaxAge }); d != nil {
		lim.DLQMaxAge = d.Micros
	} else if ojsBorn {
		lim.DLQMaxAge = OJSDLQMaxAgeMicros
	}
	if v := firstInt(ls, func(c *QueueConfig) *int64 { return c.DLQMaxCount }); v != nil {
		lim.DLQMaxCount = *v
	} else if ojsBorn {
		lim.DLQMaxCount = OJSDLQMaxCount
	}
	q.OJS.Limits = lim
	setGate(q.OJS)
}

func isStar(l []string) bool { return len(l) == 1 && l[0] == "*" }

func setGate(s *segments.OJSState) {
	var g uint8
	if s.State != segments.OJSActive || s.Deletion != nil {
		g |= segments.GateState
	}
	if s.Limits.RestrictProducers || s.Limits.RestrictConsumers {
		g |= segments.GateAccess
	}
	if s.Limits.MaxDepth > 0 || s.Limits.MaxSizeBytes > 0 {
		g |= segments.GateCapacity
	}
	if s.Limits.MaxConcurrency > 0 {
		g |= segments.GateConcurrency
	}
	s.Gate = g
}

// Effective resolves every leaf of q's OJS view for display.
func effective(tx *segments.Tx, q *segments.Queue) EffectiveConfig {
	ls := layers(tx, q)
	o := q.Options
	e := EffectiveConfig{VisibilityTimeout: o.LeaseTime, DLQEnabled: o.DeadLetterQueue || o.DLQAfterMaxRetries,
		FailedTTL: OJSFailedTTL, CancelledTTL: OJSCancelledTTL, Producers: []string{"*"}, Consumers: []string{"*"}}
	if q.OJS != nil {
		l := q.OJS.Limits
		e.MaxDepth, e.MaxSizeBytes, e.MaxConcurrency = l.MaxDepth, l.MaxSizeBytes, l.MaxConcurrency
		if l.RestrictProducers {
			e.Producers = append([]string{}, l.Producers...)
		}
		if l.RestrictConsumers {
			e.Consumers = append([]string{}, l.Consumers...)
		}
		if l.DLQMaxAge > 0 {
			e.DLQMaxAge = FormatSeconds(ceilSeconds(l.DLQMaxAge))
		}
		e.DLQMaxCount = l.DLQMaxCount
	} else if q.Origin == segments.OriginOJS {
		e.DLQMaxAge, e.DLQMaxCount = OJSDLQMaxAge, OJSDLQMaxCount
	}
	if d := firstDur(ls, func(c *QueueConfig) *Duration { return c.CompletedTTL }); d != nil && q.Named&PresentRetention == 0 {
		e.CompletedTTL = d.Text
	} else if o.RetentionEnabled && o.CompletedRetentionSeconds > 0 {
		e.CompletedTTL = FormatSeconds(o.CompletedRetentionSeconds)
	}
	if d := firstDur(ls, func(c *QueueConfig) *Duration { return c.FailedTTL }); d != nil {
		e.FailedTTL = d.Text
	}
	if d := firstDur(ls, func(c *QueueConfig) *Duration { return c.CancelledTTL }); d != nil {
		e.CancelledTTL = d.Text
	}
	if d := firstDur(ls, func(c *QueueConfig) *Duration { return c.DLQMaxAge }); d != nil {
		e.DLQMaxAge = d.Text
	}
	return e
}
