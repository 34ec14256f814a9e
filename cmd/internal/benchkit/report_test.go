package benchkit

import (
	"regexp"
	"strings"
	"testing"
)

// TestCompareMissingFigure: a figure one report lacks (a latency with no
// request measured) is absent, in the JSON and in the table ("-"), and has
// no ratio: no request measured is not 0 ms, nor 0.00 times the other's.
//
// Issue 5: "prints one table with both results and the Crown/JetStream ratio
// for each figure"; CompareRow: "A figure a report does not have ... is nil,
// not 0".
func TestCompareMissingFigure(t *testing.T) {
	wl := Config{Mode: ModeBoth, Count: 1000, PayloadSize: 256, PushBatch: 100, PopBatch: 100,
		Partitions: 8, Queues: 1, Groups: 1, Producers: 8, Consumers: 8, RunID: "x"}
	a := &Report{Broker: "crown", Workload: wl,
		Produce: NewThroughput(1000, 256000, 10, 1e9), Consume: NewThroughput(0, 0, 50, 1e9),
		Latency: map[string]Summary{"push": {Count: 10, P50Ms: 4, P90Ms: 5, P99Ms: 6, MaxMs: 7},
			"pop": {}, "ack": {}}} // nothing delivered: no pop or ack latency measured
	b := &Report{Broker: "jetstream", Workload: wl,
		Produce: NewThroughput(1000, 256000, 10, 1e9), Consume: NewThroughput(1000, 256000, 10, 1e9),
		Latency: map[string]Summary{"push": {Count: 10, P50Ms: 2, P90Ms: 3, P99Ms: 4, MaxMs: 5},
			"pop": {Count: 10, P50Ms: 2, P90Ms: 3, P99Ms: 4, MaxMs: 5},
			"ack": {Count: 10, P50Ms: 1, P90Ms: 1, P99Ms: 2, MaxMs: 2}}}
	for _, r := range Compare(a, b).Rows {
		switch r.Name {
		case "pop p50 ms", "pop p90 ms", "pop p99 ms", "pop max ms", "ack p50 ms", "ack p90 ms", "ack p99 ms", "ack max ms":
			if r.Ratio != nil || r.A != nil || r.B == nil {
				t.Errorf("%s: crown measured no request: a %v, b %v, ratio %v; want a and ratio absent (nil, shown as -)",
					r.Name, r.A, r.B, r.Ratio)
			}
		case "push p50 ms":
			if r.A == nil || *r.A != 4 || r.B == nil || *r.B != 2 || r.Ratio == nil || *r.Ratio != 2 {
				t.Errorf("%s: both measured: %+v", r.Name, r)
			}
		}
	}
	var out strings.Builder
	if err := RenderCompare(&out, a, b); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^ *pop p50 ms +- +2\.00 +- *$`).MatchString(out.String()) {
		t.Errorf("table row of a figure crown lacks, want \"pop p50 ms  -  2.00  -\":\n%s", out.String())
	}
	// A side one run did not have at all (a produce-only run against a
	// full one) is absent too, not 0 msg/s.
	a.Consume, a.Latency = nil, map[string]Summary{"push": a.Latency["push"]}
	for _, r := range Compare(a, b).Rows {
		if strings.HasPrefix(r.Name, "consume ") && (r.A != nil || r.B == nil || r.Ratio != nil) {
			t.Errorf("%s: crown consumed nothing: a %v, b %v, ratio %v; want a and ratio absent", r.Name, r.A, r.B, r.Ratio)
		}
	}
}
