// Package httpapi serves the Queen HTTP API (and Crown's cluster and
// internal endpoints) on top of the replicated state machine: it parses and
// validates requests, proposes commands on the leader or forwards them to
// it, parks long-poll pops and wakes them on local commits, and shapes the
// JSON responses. It knows nothing of bbolt.
package httpapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi/envelope"
	"github.com/crownmq/crown/httpapi/ojs"
	"github.com/crownmq/crown/httpapi/relay"
	"github.com/crownmq/crown/raftnode"
)

// Cluster is what the HTTP layer needs from the Raft node. *raftnode.Node
// implements it; tests may substitute a fake.
type Cluster interface {
	Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error)
	IsLeader() bool
	Leader() (id, addr string)
	WaitLeader(ctx context.Context) (id, addr string, err error)
	LeaderView() context.Context
	Status() raftnode.Status
	LogStorage() raftnode.LogStorage
	ReadIndex() (uint64, error)
	WaitApplied(ctx context.Context, index uint64) error
	Barrier(ctx context.Context) error
	Members() ([]raftnode.Member, error)
	AddVoter(id, addr string, timeout time.Duration) error
	RemoveServer(id string, timeout time.Duration) error
	TransferLeadership(id string) error
}

// Config configures the HTTP layer.
type Config struct {
	NodeID string
	// AdvertiseURL is how other nodes reach this node's HTTP API
	// (http://host:port); it is stored in the replicated node registry.
	AdvertiseURL string
	RaftAddr     string
	Limits       Limits
	// ReadFloor is an index local reads (and a leader's first look for a
	// pop) wait for this node to have applied, as they wait for the writes
	// it relayed: crownd gives the last command in its Raft log at start
	// (raftnode.Node.StartFloor). A write acknowledged before a crash
	// is in the log, but the state file may lack it until Raft replays it
	// (its commits are deferred: fsm/DESIGN.md, "Deferred commits").
	ReadFloor uint64
	// ReadFloorNow, when set, is asked while the floor is not reached for
	// the index to wait for instead (raftnode.Node.FloorNow): lower once a
	// leader has replaced the entry at it, which no leader committed, so
	// that reads are not held until the cluster commits commands past an
	// index the log no longer holds.
	ReadFloorNow func(floor uint64) uint64
	// LeaderWait bounds how long a request waits for a leader during an
	// election before failing with 503 (default 5 s).
	LeaderWait time.Duration
	// DefaultPopTimeout is the long-poll timeout when a pop sends none (30 s).
	DefaultPopTimeout time.Duration
	// Window rules stamped into pops (QUEEN_HOTLIST, QUEEN_HOTLIST_WINDOW_BATCH).
	Hotlist     bool
	WindowBatch uint64
	Key         *envelope.Key
	Logger      *slog.Logger
	Registry    *prometheus.Registry
	Pprof       bool
	Version     string
	// OJSStrict turns off implicit queue creation by OJS pause and resume
	// (--ojs-strict-queues).
	OJSStrict bool
	// OJSMaxBodyBytes bounds an OJS request body (--ojs-max-body-bytes;
	// 0: 1 MiB). OJSMaxQueues bounds the queues a creation through the OJS
	// API may bring the cluster to (--ojs-max-queues; 0: 10,000).
	OJSMaxBodyBytes int64
	OJSMaxQueues    uint32
	// ForwardProtocol is how a follower forwards to the leader:
	// ForwardRelay (the default) or ForwardHTTP (--forward-protocol).
	ForwardProtocol string
	// PopMaxBytes bounds the stored bytes of the messages one pop takes
	// (fsm.LeaseCapped; at least one message goes however large): the
	// answer is built in memory (0: DefaultPopMaxBytes).
	PopMaxBytes uint64
	// BodyTimeout bounds how long a request body may take to arrive once
	// its headers have (0: DefaultBodyTimeout).
	BodyTimeout time.Duration
}

// DefaultPopMaxBytes bounds a pop's messages as a request body is bounded.
const DefaultPopMaxBytes = 16 << 20

// DefaultBodyTimeout is how long a request body may take to arrive: 16 MiB
// at 2.2 Mbit/s. crownd's ReadHeaderTimeout covers only the headers.
const DefaultBodyTimeout = 60 * time.Second

// Server is the HTTP API of one node.
type Server struct {
	cfg     Config
	log     *slog.Logger
	cluster Cluster
	state   *fsm.FSM
	waiters *waiters
	fwd     *forwarder
	metrics *metrics
	started time.Time
	router  *mux.Router
	closing chan struct{}
	// relayed is the highest log index of a forwarded write this node has
	// answered; local reads wait for it (forward.go, localRead).
	relayed atomic.Uint64
	// floor is Config.ReadFloor, lowered as ReadFloorNow finds; local
	// reads wait for it too.
	floor atomic.Uint64
	// leaving is set while this node, as leader, removes itself from the
	// cluster: it must not register itself again meanwhile.
	leaving atomic.Bool
	ojs     *ojs.Handler
	// seals orders the pushes this node seals as the leader against the
	// configures that turn encryption on (seal_gate.go).
	seals sealGate
	// delivered remembers where the messages of the pops proposed here are
	// stored, for their acknowledgments (delivered.go).
	delivered *delivered
	// nodeAddrs keeps the registry's HTTP addresses (forward.go).
	nodeAddrs nodeAddrs
	// relays counts the followers' relay connections served here.
	relays relayConns
}

// New builds the server and subscribes its long-poll waiters to commits.
func New(cfg Config, cluster Cluster, state *fsm.FSM) *Server {
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits
	}
	if cfg.LeaderWait <= 0 {
		cfg.LeaderWait = 5 * time.Second
	}
	if cfg.PopMaxBytes == 0 {
		cfg.PopMaxBytes = DefaultPopMaxBytes
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.DefaultPopTimeout <= 0 {
		cfg.DefaultPopTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Key == nil {
		cfg.Key = &envelope.Key{}
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger.With("component", "http"), cluster: cluster, state: state,
		waiters: newWaiters(), started: time.Now(), closing: make(chan struct{}), delivered: newDelivered(),
	}
	s.floor.Store(cfg.ReadFloor)
	s.fwd = newForwarder(s)
	s.metrics = newMetrics(cfg.Registry, s)
	state.Subscribe(s.waiters.notify)
	state.Subscribe(s.nodeAddrs.changed)
	s.ojs = ojs.New(ojs.Config{NodeID: cfg.NodeID, MaxBodyBytes: cfg.OJSMaxBodyBytes, MaxQueues: cfg.OJSMaxQueues,
		Strict: cfg.OJSStrict, Version: cfg.Version, Registry: cfg.Registry}, ojsBackend{s}, state)
	s.router = s.routes()
	return s
}

// Drain answers every parked long-poll pop with 204 now and every later one
// at once: called when the node shuts down, so in-flight requests finish.
func (s *Server) Drain() {
	select {
	case <-s.closing:
	default:
		close(s.closing)
	}
}

// Handler is the root handler with CORS, panic recovery and metrics.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serve) }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == relay.Path && r.Method == http.MethodGet {
		// Not instrumented as a request: the connection lives for as long
		// as this node leads, and each request it carries comes back
		// through serve.
		s.serveRelay(w, r)
		return
	}
	if r.ContentLength != 0 {
		r.Body = s.timedBody(w, r.Body)
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization")
	// OPTIONS is answered as a CORS preflight, except on the OJS paths:
	// there every response carries the OJS headers and a method the path
	// does not serve gets 405 (ojs-queues.md 0.1), so the OJS handler answers.
	if r.Method == http.MethodOptions && !strings.HasPrefix(r.URL.Path, "/ojs/") {
		h.Set("Access-Control-Max-Age", "86400")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("handler panic", "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			writeError(w, &apiError{Status: 500, Code: codeInternal, Message: "internal error"})
		}
	}()
	s.router.ServeHTTP(w, r)
}

func (s *Server) routes() *mux.Router {
	// No path cleaning: a queue or group may be named "." or ".." (queen-
	// api.md 3.4: any string), which clients escape with url.PathEscape, and
	// a cleaned path would redirect a DELETE of one to another resource.
	r := mux.NewRouter().SkipClean(true)
	r.UseEncodedPath()
	notFound := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, &apiError{Status: 404, Code: codeNotFound, Message: "Not Found"})
	})
	r.NotFoundHandler = notFound
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, &apiError{Status: 405, Code: "method_not_allowed", Message: "Method Not Allowed"})
	})
	handle := func(method, path, name string, h http.HandlerFunc) {
		r.Handle(path, s.metrics.instrument(name, h)).Methods(method)
	}
	handle("GET", "/health", "health", s.handleHealth)
	handle("GET", "/metrics", "metrics", s.handleMetricsJSON)
	r.Handle("/metrics/prometheus", s.metrics.handler()).Methods("GET")

	handle("POST", "/api/v1/configure", "configure", s.handleConfigure)
	handle("POST", "/api/v1/push", "push", s.handlePush)
	handle("GET", "/api/v1/pop/queue/{queue}/partition/{partition}", "pop", s.popHandler(fsm.ScopeSpecific))
	handle("GET", "/api/v1/pop/queue/{queue}", "pop", s.popHandler(fsm.ScopeWildcard))
	handle("GET", "/api/v1/pop", "pop", s.popHandler(fsm.ScopeDiscovery))
	handle("POST", "/api/v1/ack", "ack", s.handleAck)
	handle("POST", "/api/v1/ack/batch", "ack_batch", s.handleAckBatch)
	handle("POST", "/api/v1/transaction", "transaction", s.handleTransaction)
	handle("POST", "/api/v1/lease/{leaseId}/extend", "extend", s.handleExtend)
	// Traces (traces.go): the fixed paths before {partitionId}/{transactionId}.
	handle("POST", "/api/v1/traces", "traces_add", s.handleAddTrace)
	handle("GET", "/api/v1/traces/names", "traces_names", s.handleTraceNames)
	handle("GET", "/api/v1/traces/by-name/{traceName}", "traces_by_name", s.handleTracesByName)
	handle("GET", "/api/v1/traces/{partitionId}/{transactionId:.+}", "traces_message", s.handleMessageTraces)
	// System maintenance switches (system.go).
	handle("GET", "/api/v1/system/maintenance", "maintenance", s.handleGetMaintenance)
	handle("POST", "/api/v1/system/maintenance", "maintenance_set", s.handleSetMaintenance)
	handle("GET", "/api/v1/system/maintenance/pop", "pop_maintenance", s.handleGetPopMaintenance)
	handle("POST", "/api/v1/system/maintenance/pop", "pop_maintenance_set", s.handleSetPopMaintenance)
	handle("GET", "/api/v1/system/shared-state", "shared_state", s.handleSharedState)

	handle("GET", "/api/v1/resources/queues", "queues", s.handleListQueues)
	handle("GET", "/api/v1/resources/queues/{queue}", "queue", s.handleGetQueue)
	handle("DELETE", "/api/v1/resources/queues/{queue}", "delete_queue", s.handleDeleteQueue)
	handle("GET", "/api/v1/resources/namespaces", "namespaces", s.tagsHandler(false))
	handle("GET", "/api/v1/resources/tasks", "tasks", s.tagsHandler(true))
	handle("GET", "/api/v1/resources/overview", "overview", s.handleOverview)
	handle("GET", "/api/v1/messages", "messages", s.handleListMessages)
	handle("GET", "/api/v1/messages/{partitionId}/{transactionId:.+}", "message", s.handleGetMessage)
	handle("DELETE", "/api/v1/messages/{partitionId}/{transactionId:.+}", "message_delete", s.handleDeleteMessage)
	// POST .../retry and .../dlq are client paths Queen does not serve
	// (queen-api.md 3.19): without this route the two above match them as a
	// transaction id holding a slash and a POST would be a 405.
	r.Handle("/api/v1/messages/{partitionId}/{transactionId:.+}", notFound).Methods("POST")
	handle("GET", "/api/v1/status", "status", s.handleStatus)
	handle("GET", "/api/v1/status/queues", "status_queues", s.handleStatusQueues)
	handle("GET", "/api/v1/status/queues/{queue}", "status_queue", s.handleStatusQueue)
	handle("GET", "/api/v1/status/queues/{queue}/messages", "status_queue_messages", s.handleStatusQueueMessages)
	handle("GET", "/api/v1/status/analytics", "status_analytics", s.handleStatusAnalytics)
	handle("GET", "/api/v1/status/buffers", "status_buffers", s.handleStatusBuffers)
	handle("GET", "/api/v1/analytics/{series}", "analytics", s.handleAnalyticsSeries)
	handle("GET", "/api/v1/dlq", "dlq", s.handleDLQ)
	// Consumer-group administration (groups.go); "lagging" before {group}.
	handle("GET", "/api/v1/consumer-groups", "consumer_groups", s.handleListGroups)
	handle("GET", "/api/v1/consumer-groups/lagging", "consumer_groups_lagging", s.handleLaggingGroups)
	handle("GET", "/api/v1/consumer-groups/{group}", "consumer_group", s.handleGetGroup)
	handle("DELETE", "/api/v1/consumer-groups/{group}", "consumer_group_delete", s.handleDeleteGroup)
	handle("DELETE", "/api/v1/consumer-groups/{group}/queues/{queue}", "consumer_group_delete_queue", s.handleDeleteGroup)
	handle("POST", "/api/v1/consumer-groups/{group}/subscription", "consumer_group_subscription", s.handleRewriteSubscription)
	handle("POST", "/api/v1/consumer-groups/{group}/queues/{queue}/seek", "consumer_group_seek", s.handleSeek)
	handle("POST", "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek",
		"consumer_group_seek_partition", s.handleSeekPartition)
	handle("POST", "/api/v1/stats/refresh", "stats_refresh", s.handleStatsRefresh)

	// Streams queries, state and cycles (streams.go).
	handle("POST", "/streams/v1/queries", "streams_queries", s.handleStreamQueries)
	handle("POST", "/streams/v1/state/get", "streams_state_get", s.handleStreamStateGet)
	handle("POST", "/streams/v1/cycle", "streams_cycle", s.handleStreamCycle)

	// The OJS queue administration API (package ojs), with its own error
	// format, headers and method handling.
	r.PathPrefix("/ojs/").Handler(s.metrics.instrument("ojs", s.ojs.ServeHTTP))

	handle("GET", "/internal/v1/digest", "digest", s.handleDigest)
	handle("GET", "/internal/v1/read-index", "read_index", s.handleReadIndex)
	handle("POST", "/internal/v1/join", "join", s.handleJoin)
	handle("POST", "/internal/v1/register", "register", s.handleRegister)
	handle("GET", "/api/v1/cluster/status", "cluster_status", s.handleClusterStatus)
	handle("GET", "/api/v1/cluster/members", "cluster_members", s.handleClusterMembers)
	handle("POST", "/api/v1/cluster/members", "cluster_add", s.handleClusterAdd)
	handle("DELETE", "/api/v1/cluster/members/{id}", "cluster_remove", s.handleClusterRemove)
	handle("POST", "/api/v1/cluster/transfer-leadership", "cluster_transfer", s.handleClusterTransfer)

	if s.cfg.Pprof {
		r.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		r.HandleFunc("/debug/pprof/profile", pprof.Profile)
		r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		r.HandleFunc("/debug/pprof/trace", pprof.Trace)
		r.PathPrefix("/debug/pprof/").HandlerFunc(pprof.Index)
	}
	return r
}

// pathVar returns a percent-decoded path variable.
func pathVar(r *http.Request, name string) string {
	v := mux.Vars(r)[name]
	if d, err := pathUnescape(v); err == nil {
		return d
	}
	return v
}

// timedBody sets the connection's read deadline for a request body, so a
// client that trickles one (or announces one and sends nothing) does not
// hold its connection, its goroutine and what it sent for ever. The
// deadline is lifted once the body has been read to its end: the answer
// may take longer (a commit waiting for a leader), and net/http cancels a
// request whose connection's read deadline passes. A relayed request's
// writer has no deadline to set, and its body is already in memory.
func (s *Server) timedBody(w http.ResponseWriter, body io.ReadCloser) io.ReadCloser {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)) != nil {
		return body
	}
	return &deadlineBody{ReadCloser: body, rc: rc}
}

type deadlineBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
