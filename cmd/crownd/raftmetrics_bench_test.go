package main

import (
	"testing"
	"time"

	metrics "github.com/armon/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkRaftMetricsSample is what one of raft's timer samples costs once
// exportRaftMetrics is installed (raft takes about 10-20 a log entry).
func BenchmarkRaftMetricsSample(b *testing.B) {
	if err := exportRaftMetrics(prometheus.NewRegistry()); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		metrics.MeasureSince([]string{"raft", "commitTime"}, start)
	}
}
