package fsm

import "github.com/crownmq/crown/segments"

// Lease defaults (queue-options.md, "leaseTime"): a queue created by a push
// leases for 60 s, one created by /configure without leaseTime for 300 s.
const (
	PushLeaseSeconds      = 60
	ConfigureLeaseSeconds = 300
	// FallbackLeaseSeconds applies when neither the pop nor the queue gives a
	// positive lease time.
	FallbackLeaseSeconds = 60
	// MaxMinPopWaitMillis is the clamp of minPopWaitTime.
	MaxMinPopWaitMillis = 60000
	// DefaultDedupWindowSeconds is dedupWindowSeconds when omitted.
	DefaultDedupWindowSeconds = 3600
)

// DefaultOptions are the resolved options of a queue created by origin with
// nothing specified.
func DefaultOptions(origin uint8) segments.Options {
	o := segments.Options{
		LeaseTime:          ConfigureLeaseSeconds,
		RetryLimit:         3,
		DeadLetterQueue:    true,
		DLQAfterMaxRetries: true,
		DedupWindowSeconds: DefaultDedupWindowSeconds,
		RetryDelay:         1000,
		TTL:                3600,
	}
	if origin == segments.OriginPush {
		o.LeaseTime = PushLeaseSeconds
	}
	return o
}

// maxDurationMicros caps a duration converted from seconds at 10^11 s
// (about 3,170 years): far beyond any meaningful option, small enough that a
// commit time plus it cannot overflow int64, and early enough that every
// instant it yields still formats as a four-digit RFC 3339 year.
const maxDurationMicros = 100_000_000_000 * 1_000_000

// Micros converts a duration in seconds (a queue option, a lease or an
// extension) to microseconds, saturating at maxDurationMicros rather than
// wrapping: the options are any non-negative integer a client sends, and a
// wrapped product would turn "keep for ever" into "delete now".
func Micros(seconds int64) int64 {
	switch {
	case seconds <= 0:
		return 0
	case seconds >= maxDurationMicros/1_000_000:
		return maxDurationMicros
	default:
		return seconds * 1e6
	}
}

// ClampOptions applies the documented clamps to resolved options.
func ClampOptions(o *segments.Options) {
	if o.MinPopWaitTime < 0 {
		o.MinPopWaitTime = 0
	}
	if o.MinPopWaitTime > MaxMinPopWaitMillis {
		o.MinPopWaitTime = MaxMinPopWaitMillis
	}
}

// DeriveTags computes namespace and task of a push-created queue from its
// name: namespace is the text before the first '.', or the whole name;
// task is the text between the first and second '.', or "".
func DeriveTags(name string) (namespace, task string) {
	i := indexByte(name, '.')
	if i < 0 {
		return name, ""
	}
	rest := name[i+1:]
	if j := indexByte(rest, '.'); j >= 0 {
		return name[:i], rest[:j]
	}
	return name[:i], rest
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
