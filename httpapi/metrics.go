package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type metrics struct {
	reg            *prometheus.Registry
	log            *slog.Logger
	requests       *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	fillWaits      prometheus.Counter
	fillWaitMicros prometheus.Counter
	parked         prometheus.Gauge
	popEmpty       prometheus.Counter
}

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	m := &metrics{
		reg: reg,
		log: s.log,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crown_http_requests_total", Help: "HTTP requests served, by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "crown_http_request_duration_seconds", Help: "HTTP request latency by route (long-poll waits included).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
		fillWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "queen_pop_fill_wait_total", Help: "Pops that held an under-full batch back for minPopWaitTime.",
		}),
		fillWaitMicros: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "queen_pop_fill_wait_microseconds_total", Help: "Time pops spent in minPopWaitTime fill waits.",
		}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "queen_queue_parked_consumers", Help: "Long-poll pops parked on this node.",
		}),
		popEmpty: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "crown_pop_empty_total", Help: "Pops answered 204 on this node.",
		}),
	}
	reg.MustRegister(m.requests, m.latency, m.fillWaits, m.fillWaitMicros, m.parked, m.popEmpty,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_uptime_seconds", Help: "Seconds since this node started."},
			func() float64 { return time.Since(s.started).Seconds() }),
		newClusterCollector(s))
	return m
}

// handler serves every metric it can gather: the registry also holds
// metrics that libraries name (crownd's crown_raft_* from hashicorp/raft),
// and one that a new library version shapes inconsistently must cost that
// metric, logged, not the whole scrape.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      gatherLog{m.log},
	})
}

// gatherLog is promhttp's error log on the node's logger.
type gatherLog struct{ log *slog.Logger }

func (g gatherLog) Println(v ...any) { g.log.Warn("metrics gathering", "error", fmt.Sprint(v...)) }

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

// Flush lets streamed responses through the recorder.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (m *metrics) instrument(route string, h http.HandlerFunc) http.Handler {
	lat := m.latency.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		h(rec, r)
		lat.Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(route, strconv.Itoa(rec.code)).Inc()
	})
}

// clusterCollector exports the replicated lifetime counters (identical on
// every node: aggregate with max, not sum) and this node's Raft position.
type clusterCollector struct {
	s                                            *Server
	counters                                     []*prometheus.Desc // in counterNames order
	ack, applied, commit, leader, term, logBytes *prometheus.Desc
	entries, commands, lingered                  *prometheus.Desc
}

var counterNames = []string{
	"queen_cluster_push_requests_total", "queen_cluster_push_messages_total",
	"queen_cluster_pop_requests_total", "queen_cluster_pop_messages_total",
	"queen_cluster_ack_requests_total", "queen_cluster_ack_messages_total",
	"queen_cluster_transactions_total", "queen_cluster_dlq_total",
}

func newClusterCollector(s *Server) *clusterCollector {
	cluster := prometheus.Labels{"scope": "cluster"}
	c := &clusterCollector{
		s:       s,
		ack:     prometheus.NewDesc("queen_cluster_ack_total", "Acknowledgements by result (cluster-wide).", []string{"result"}, cluster),
		applied: prometheus.NewDesc("crown_raft_applied_index", "Last Raft index applied to the state machine on this node.", nil, nil),
		commit:  prometheus.NewDesc("crown_raft_commit_index", "Last Raft index known committed by this node.", nil, nil),
		leader:  prometheus.NewDesc("crown_raft_leader", "1 when this node is the Raft leader.", nil, nil),
		term:    prometheus.NewDesc("crown_raft_term", "Current Raft term on this node.", nil, nil),
		logBytes: prometheus.NewDesc("crown_raft_log_bytes_since_snapshot",
			"Bytes of log entries this node applied that no snapshot holds yet; a snapshot is taken at --raft-snapshot-log-bytes.", nil, nil),
		entries: prometheus.NewDesc("crown_commit_entries_total",
			"Raft log entries this node proposed as leader (group commit: many requests per entry).", nil, nil),
		commands: prometheus.NewDesc("crown_commit_commands_total",
			"Commands (requests) carried by the entries this node proposed; divided by crown_commit_entries_total, the batch size.", nil, nil),
		lingered: prometheus.NewDesc("crown_commit_lingered_total",
			"Entries that waited out --commit-linger for more requests (the node was busy) rather than filling up first.", nil, nil),
	}
	for _, n := range counterNames {
		c.counters = append(c.counters, prometheus.NewDesc(n, "Cluster-wide lifetime counter (replicated; query with max).", nil, cluster))
	}
	return c
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.counters {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{c.ack, c.applied, c.commit, c.leader, c.term, c.logBytes, c.entries, c.commands, c.lingered} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	if ct, err := c.s.state.Counters(); err == nil {
		vals := []uint64{ct.PushRequests, ct.PushMessages, ct.PopRequests, ct.PopMessages,
			ct.AckRequests, ct.AckMessages, ct.Transactions, ct.DLQ}
		for i, d := range c.counters {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(vals[i]))
		}
		ch <- prometheus.MustNewConstMetric(c.ack, prometheus.CounterValue, float64(ct.AckSuccess), "success")
		ch <- prometheus.MustNewConstMetric(c.ack, prometheus.CounterValue, float64(ct.AckFailed), "failed")
	}
	st := c.s.cluster.Status()
	leader := 0.0
	if st.State == "Leader" {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(c.applied, prometheus.GaugeValue, float64(st.AppliedIndex))
	ch <- prometheus.MustNewConstMetric(c.commit, prometheus.GaugeValue, float64(st.CommitIndex))
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, float64(st.Term))
	ch <- prometheus.MustNewConstMetric(c.logBytes, prometheus.GaugeValue, float64(st.LogBytesSinceSnapshot))
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.CounterValue, float64(st.ProposedEntries))
	ch <- prometheus.MustNewConstMetric(c.commands, prometheus.CounterValue, float64(st.ProposedCommands))
	ch <- prometheus.MustNewConstMetric(c.lingered, prometheus.CounterValue, float64(st.Lingered))
}
