package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
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
	parked         *parkedGauge
	popEmpty       prometheus.Counter
	ackOffsets     prometheus.Counter
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
		parked: newParkedGauge(),
		popEmpty: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "crown_pop_empty_total", Help: "Pops answered 204 on this node.",
		}),
		ackOffsets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "crown_ack_offsets_written_total",
			Help: "Acknowledgments this node proposed carrying the offset of a message it delivered (no node looks them up).",
		}),
	}
	reg.MustRegister(m.requests, m.latency, m.fillWaits, m.fillWaitMicros, m.parked, m.popEmpty, m.ackOffsets,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		// Queen's names for the same process figures (queen-api.md 3.3).
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "queen"}),
		newCPUCollector(),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_uptime_seconds", Help: "Seconds since this node started."},
			func() float64 { return time.Since(s.started).Seconds() }),
		newClusterCollector(s))
	return m
}

// handler serves every metric it can gather: the registry also holds
// metrics that libraries name (crownd's crown_raft_* from hashicorp/raft),
// and one that a new library version shapes inconsistently must cost that
// metric, logged, not the whole scrape.
//
// The text format is announced as queen-api.md 3.3 gives it: the library
// appends "; escaping=underscores", which Queen's scrapers do not expect.
func (m *metrics) handler() http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      gatherLog{m.log},
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&textFormatHeader{ResponseWriter: w}, r)
	})
}

// prometheusText is the content type of the text exposition format.
const prometheusText = "text/plain; version=0.0.4; charset=utf-8"

// textFormatHeader rewrites the negotiated text format's content type as it
// is written, and leaves other formats (protobuf, OpenMetrics) alone.
type textFormatHeader struct {
	http.ResponseWriter
	done bool
}

func (t *textFormatHeader) fix() {
	if t.done {
		return
	}
	t.done = true
	h := t.ResponseWriter.Header()
	if ct := h.Get("Content-Type"); strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		h.Set("Content-Type", prometheusText)
	}
}

func (t *textFormatHeader) WriteHeader(code int) {
	t.fix()
	t.ResponseWriter.WriteHeader(code)
}

func (t *textFormatHeader) Write(b []byte) (int, error) {
	t.fix()
	return t.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (t *textFormatHeader) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// parkedGauge is queen_queue_parked_consumers by queue: the long-poll pops
// parked on this node. A queue's series goes when its count returns to 0,
// so the labels stay as many as the queues being waited on; a discovery pop
// (no queue) is counted under queue="".
type parkedGauge struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	n    map[string]int
}

func newParkedGauge() *parkedGauge {
	return &parkedGauge{n: map[string]int{}, desc: prometheus.NewDesc("queen_queue_parked_consumers",
		"Long-poll pops parked on this node, by queue (\"\" for a discovery pop by namespace or task).", []string{"queue"}, nil)}
}

func (g *parkedGauge) add(queue string, d int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n[queue] += d; g.n[queue] <= 0 {
		delete(g.n, queue)
	}
}

func (g *parkedGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *parkedGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for q, n := range g.n {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(n), q)
	}
}

// cpuCollector exports the process's user and system CPU time under
// Queen's names (queen_cpu_{user,system}_microseconds_total), which the
// process collector's process_cpu_seconds_total adds together.
type cpuCollector struct{ user, system *prometheus.Desc }

func newCPUCollector() *cpuCollector {
	return &cpuCollector{
		user:   prometheus.NewDesc("queen_cpu_user_microseconds_total", "User CPU time of this process.", nil, nil),
		system: prometheus.NewDesc("queen_cpu_system_microseconds_total", "System CPU time of this process.", nil, nil),
	}
}

func (c *cpuCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.user; ch <- c.system }

func (c *cpuCollector) Collect(ch chan<- prometheus.Metric) {
	user, system, ok := processCPU()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.user, prometheus.CounterValue, float64(user.Microseconds()))
	ch <- prometheus.MustNewConstMetric(c.system, prometheus.CounterValue, float64(system.Microseconds()))
}

// gatherLog is promhttp's error log on the node's logger.
type gatherLog struct{ log *slog.Logger }

func (g gatherLog) Println(v ...any) { g.log.Warn("metrics gathering", "error", fmt.Sprint(v...)) }

type statusRecorder struct {
	http.ResponseWriter
	code int
	// failure is the start of a 500 answer's body, for the log.
	failure []byte
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

// maxLoggedFailure bounds what of a 500 answer goes into the log line.
const maxLoggedFailure = 1024

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == http.StatusInternalServerError && len(r.failure) < maxLoggedFailure {
		r.failure = append(r.failure, b[:min(len(b), maxLoggedFailure-len(r.failure))]...)
	}
	return r.ResponseWriter.Write(b)
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
		if rec.code == http.StatusInternalServerError {
			// A 500 is a storage failure or a bug the README asks operators
			// to report: the client's answer alone leaves them nothing to
			// report. (503s are elections and shutdowns, answered by the
			// thousand while they last; the client retries them.)
			m.log.Error("request failed", "route", route, "method", r.Method, "path", r.URL.Path,
				"status", rec.code, "answer", string(rec.failure))
		}
	})
}

// clusterCollector exports the replicated lifetime counters (identical on
// every node: aggregate with max, not sum) and this node's Raft position.
type clusterCollector struct {
	s                                                    *Server
	counters                                             []*prometheus.Desc // in counterNames order
	ack, applied, commit, leader, term, logBytes         *prometheus.Desc
	firstIndex, trailingLogs, logFileBytes, snapshotHeld *prometheus.Desc
	entries, commands, lingered                          *prometheus.Desc
	dlqDepth, dlqByQueue                                 *prometheus.Desc
	ackResolved, ackRefused                              *prometheus.Desc
	stateCommits, statePages                             *prometheus.Desc
	popLooks                                             *prometheus.Desc
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
		firstIndex: prometheus.NewDesc("crown_raft_first_index", "Oldest Raft index this node's log still holds; older entries are in its snapshot.", nil, nil),
		trailingLogs: prometheus.NewDesc("crown_raft_trailing_logs",
			"Log entries the next snapshot leaves behind: --raft-trailing-logs, fewer when the newest exceed --raft-trailing-log-bytes.", nil, nil),
		logFileBytes: prometheus.NewDesc("crown_raft_log_file_bytes", "Size of this node's Raft log file (raft/log.db) on disk.", nil, nil),
		snapshotHeld: prometheus.NewDesc("crown_snapshot_held_bytes",
			"Bytes of segment files the state no longer uses that this node's snapshots still hold; a quiet node takes them back from --raft-snapshot-reclaim-bytes.", nil, nil),
		entries: prometheus.NewDesc("crown_commit_entries_total",
			"Raft log entries this node proposed as leader (group commit: many requests per entry).", nil, nil),
		commands: prometheus.NewDesc("crown_commit_commands_total",
			"Commands (requests) carried by the entries this node proposed; divided by crown_commit_entries_total, the batch size.", nil, nil),
		lingered: prometheus.NewDesc("crown_commit_lingered_total",
			"Entries that waited out --commit-linger for more requests (the node was busy) rather than filling up first.", nil, nil),
		dlqDepth: prometheus.NewDesc("queen_dlq_depth", "Dead letters stored, all queues.", nil, cluster),
		ackResolved: prometheus.NewDesc("crown_ack_resolutions_total",
			"Acknowledgments this node's state machine resolved by transaction id: by the offset the leader wrote into them, or by a lookup in the index.",
			[]string{"by"}, nil),
		ackRefused: prometheus.NewDesc("crown_ack_offsets_refused_total",
			"Acknowledgments whose offset the state machine could not prove the index's answer (the message deleted, or its id possibly repeated), so it looked them up.",
			nil, nil),
		stateCommits: prometheus.NewDesc("crown_state_commits_total",
			"Write transactions this node committed to its state file: one every --fsm-commit-interval or --fsm-commit-batches applied batches, and before any read view, snapshot or seal.", nil, nil),
		popLooks: prometheus.NewDesc("crown_pop_looks_total",
			"Pops' looks for something to claim, by how they read the state: inside the state file's open write transaction (open_transaction), in a committed read view (view: nothing open, or a discovery pop), or both after reading 128 partitions in the transaction (gave_up; each commits the state file first).",
			[]string{"read"}, nil),
		statePages: prometheus.NewDesc("crown_state_pages_written_total",
			"Pages this node's state file commits wrote, each with a pwrite of its own; divided by crown_state_commits_total, what a transaction costs (many partitions touched at once cost more: docs/performance.md lesson 46).",
			nil, nil),
		dlqByQueue: prometheus.NewDesc("queen_dlq_depth_by_queue",
			"Dead letters stored, by queue (queues holding none have no series).", []string{"queue"}, nil),
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
	for _, d := range []*prometheus.Desc{c.ack, c.applied, c.commit, c.leader, c.term, c.logBytes, c.firstIndex, c.trailingLogs,
		c.logFileBytes, c.snapshotHeld, c.entries, c.commands, c.lingered, c.dlqDepth, c.dlqByQueue, c.ackResolved, c.ackRefused,
		c.stateCommits, c.statePages, c.popLooks} {
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
	if depths, err := c.s.state.DeadLetterDepths(); err == nil {
		var total uint64
		for _, d := range depths {
			total += d.N
			ch <- prometheus.MustNewConstMetric(c.dlqByQueue, prometheus.GaugeValue, float64(d.N), d.Queue)
		}
		ch <- prometheus.MustNewConstMetric(c.dlqDepth, prometheus.GaugeValue, float64(total))
	}
	ar := c.s.state.AckResolutions()
	ch <- prometheus.MustNewConstMetric(c.ackResolved, prometheus.CounterValue, float64(ar.ByOffset), "offset")
	ch <- prometheus.MustNewConstMetric(c.ackResolved, prometheus.CounterValue, float64(ar.ByIndex), "index")
	ch <- prometheus.MustNewConstMetric(c.ackRefused, prometheus.CounterValue, float64(ar.Refused))
	sw := c.s.state.StateWrites()
	ch <- prometheus.MustNewConstMetric(c.stateCommits, prometheus.CounterValue, float64(sw.Commits))
	ch <- prometheus.MustNewConstMetric(c.statePages, prometheus.CounterValue, float64(sw.Pages))
	pl := c.s.state.PopLooks()
	ch <- prometheus.MustNewConstMetric(c.popLooks, prometheus.CounterValue, float64(pl.OpenTx), "open_transaction")
	ch <- prometheus.MustNewConstMetric(c.popLooks, prometheus.CounterValue, float64(pl.View), "view")
	ch <- prometheus.MustNewConstMetric(c.popLooks, prometheus.CounterValue, float64(pl.GaveUp), "gave_up")
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
	ls := c.s.cluster.LogStorage()
	ch <- prometheus.MustNewConstMetric(c.firstIndex, prometheus.GaugeValue, float64(ls.FirstIndex))
	ch <- prometheus.MustNewConstMetric(c.trailingLogs, prometheus.GaugeValue, float64(ls.TrailingLogs))
	ch <- prometheus.MustNewConstMetric(c.logFileBytes, prometheus.GaugeValue, float64(ls.FileBytes))
	ch <- prometheus.MustNewConstMetric(c.snapshotHeld, prometheus.GaugeValue, float64(ls.SnapshotHeldBytes))
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.CounterValue, float64(st.ProposedEntries))
	ch <- prometheus.MustNewConstMetric(c.commands, prometheus.CounterValue, float64(st.ProposedCommands))
	ch <- prometheus.MustNewConstMetric(c.lingered, prometheus.CounterValue, float64(st.Lingered))
}
