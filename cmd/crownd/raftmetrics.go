package main

import (
	"fmt"

	metrics "github.com/armon/go-metrics"
	gmprom "github.com/armon/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// exportRaftMetrics sends what hashicorp/raft and raft-boltdb measure about
// themselves (how long the log store's append and fsyncs take, the leader's
// time from dispatch to commit, each follower's append round trip, the
// state machine's apply) to reg, as crown_raft_* summaries in milliseconds.
//
// Why here and process-wide: both libraries report only through go-metrics'
// global sink, and a crownd process runs exactly one node, so the process
// is the node. The raftnode package never installs it: its tests run
// several nodes in one process, whose figures would mix.
//
// These are the timers that explain a slow commit (docs/performance.md,
// lessons 18 and 25); without them an operator sees that requests are slow
// but not whether the disk, the network or the state machine is the cause.
func exportRaftMetrics(reg prometheus.Registerer) error {
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{Registerer: reg, Name: "crown_raft_sink"})
	if err != nil {
		return fmt.Errorf("raft metrics: %w", err)
	}
	cfg := metrics.DefaultConfig("crown")
	// The node's own /metrics/prometheus already says which host it is and
	// reports the Go runtime.
	cfg.EnableHostname = false
	cfg.EnableRuntimeMetrics = false
	if _, err := metrics.NewGlobal(cfg, countersTotal{sink}); err != nil {
		return fmt.Errorf("raft metrics: %w", err)
	}
	return nil
}

// countersTotal names Raft's counters as Prometheus names counters, with
// _total (crown_raft_apply_total): the sink names every series after its
// go-metrics key alone, and tools that go by the suffix took the counters
// for gauges.
type countersTotal struct{ *gmprom.PrometheusSink }

func (s countersTotal) IncrCounter(key []string, val float32) {
	s.IncrCounterWithLabels(key, val, nil)
}

func (s countersTotal) IncrCounterWithLabels(key []string, val float32, labels []metrics.Label) {
	// A copy: the caller's key may be reused for its next metric.
	s.PrometheusSink.IncrCounterWithLabels(append(key[:len(key):len(key)], "total"), val, labels)
}
