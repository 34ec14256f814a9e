// Command crownd is the Crown broker: one node of a Raft-replicated
// message broker speaking the Queen MQ HTTP API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi"
	"github.com/crownmq/crown/httpapi/envelope"
	"github.com/crownmq/crown/maintenance"
	"github.com/crownmq/crown/raftnode"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "healthcheck" {
		os.Exit(healthcheck(os.Args[2:], os.Stdout, os.Stderr))
	}
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "crownd:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		os.Exit(1) // run logged why
	}
}

// config is everything crownd reads from flags and the environment.
type config struct {
	NodeID            string
	DataDir           string
	HTTPAddr          string
	HTTPAdvertise     string
	RaftAddr          string
	RaftAdvertise     string
	Peers             []raftnode.Peer
	Join              string
	LogLevel          slog.Level
	LogFormat         string
	LeaderWait        time.Duration
	Pprof             bool
	RaftMetrics       bool
	OJSStrict         bool
	OJSMaxBodyBytes   int64
	OJSMaxQueues      uint64
	ForwardProtocol   string
	FSMSync           bool
	FSMWriteback      time.Duration
	FSMCommitInterval time.Duration
	FSMCommitBatches  int
	// VerifyAcks checks every acknowledgment's resolution a second way and
	// stops the node at a disagreement (fsm.Config.VerifyAcks): for tests.
	VerifyAcks bool
	// GCPercent is the collector's target (Go's GOGC), applied at start
	// unless GOGC itself is set (GOGCEnv), which then wins.
	GCPercent   int
	GOGCEnv     string
	Key         *envelope.Key
	Hotlist     bool
	WindowBatch uint64
	Raft        raftnode.Config
	Maintenance maintenance.Config
}

// flagEnv names the environment variable that stands in for a flag.
func flagEnv(name string) string {
	return "CROWN_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

func parseConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("crownd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	var peers, logLevel string
	fs.StringVar(&c.NodeID, "node-id", "node1", "this node's unique id in the cluster")
	fs.StringVar(&c.DataDir, "data-dir", "./data", "directory for the Raft log, snapshots and the state database")
	fs.StringVar(&c.HTTPAddr, "http-addr", ":6632", "address the HTTP API listens on")
	fs.StringVar(&c.HTTPAdvertise, "http-advertise", "", "URL other nodes use to reach this node's HTTP API (default: http://<raft host>:<http port>)")
	fs.StringVar(&c.RaftAddr, "raft-addr", "127.0.0.1:7632", "address the Raft transport listens on")
	fs.StringVar(&c.RaftAdvertise, "raft-advertise", "", "address other nodes dial for Raft (default: --raft-addr)")
	fs.StringVar(&peers, "peers", "", "initial voters as id@raftaddr,..., this node among them at its --raft-advertise address (absent: single-node bootstrap); every node may get the same list")
	fs.StringVar(&c.Join, "join", "", "URL of any node of an existing cluster to join (instead of bootstrapping)")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "json", "log format: json or text")
	fs.DurationVar(&c.LeaderWait, "leader-wait", 5*time.Second, "how long a request waits for a leader during an election before failing with 503")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve /debug/pprof on the HTTP address")
	fs.BoolVar(&c.RaftMetrics, "raft-metrics", true, "export Raft's own timers (log store appends, commit time, replication round trips, apply) on /metrics/prometheus as crown_raft_* summaries")
	fs.BoolVar(&c.OJSStrict, "ojs-strict-queues", false, "OJS API: pause and resume of an unknown queue get 404 instead of creating it")
	fs.Int64Var(&c.OJSMaxBodyBytes, "ojs-max-body-bytes", 1<<20, "OJS API: the largest request body, at most 16 MiB (413 payload_too_large above it)")
	fs.Uint64Var(&c.OJSMaxQueues, "ojs-max-queues", fsm.DefaultMaxQueues, "OJS API: the number of queues a creation through the OJS API (a create, a pause or resume of an unknown name, a move's target) may bring the cluster to, counting every queue; Queen's push and configure are not bound (422 queue_limit_reached)")
	fs.StringVar(&c.ForwardProtocol, "forward-protocol", httpapi.ForwardRelay, "how a follower forwards writes and pops to the leader: relay (many at a time over one connection to the leader, taken over from an HTTP request on its HTTP port; HTTP when the leader does not take it) or http (a keep-alive HTTP request each)")
	fs.BoolVar(&c.VerifyAcks, "verify-acks", false, "testing aid: resolve every acknowledgment a second way too (the offset the leader wrote against the index, the index against a scan of the batch) and stop the node at the first disagreement; costs what the first way saves")
	fs.BoolVar(&c.FSMSync, "fsm-sync", false, "fsync the state database on every commit (the Raft log is always fsynced; see README, Durability)")
	fs.DurationVar(&c.FSMWriteback, "fsm-writeback", 250*time.Millisecond, "without --fsm-sync: have the kernel start writing the state's dirty pages this often, so they reach the disk in small pieces rather than bursts that stall Raft's fsyncs (0: leave it to the kernel; Linux only)")
	fs.DurationVar(&c.FSMCommitInterval, "fsm-commit-interval", 100*time.Millisecond, "keep the state file's write transaction open across applied entries for up to this long, committing it sooner when anything reads the state: each partition record and page is written once per commit, not once per entry (0: commit every applied batch; the Raft log is the durable record either way, see README, Durability)")
	fs.IntVar(&c.FSMCommitBatches, "fsm-commit-batches", fsm.DefaultCommitBatches, "with --fsm-commit-interval: commit the state file's open write transaction after this many applied batches at the latest")
	fs.IntVar(&c.GCPercent, "gc-percent", defaultGCPercent, "garbage collector: let the heap grow this many percent over what was live at the last collection before the next (Go's GOGC, whose own default is 100; GOGC in the environment wins over this flag)")
	fs.DurationVar(&c.Raft.HeartbeatTimeout, "raft-heartbeat-timeout", time.Second, "Raft heartbeat timeout: how long a follower waits for the leader before an election")
	fs.DurationVar(&c.Raft.ElectionTimeout, "raft-election-timeout", time.Second, "Raft election timeout")
	fs.Uint64Var(&c.Raft.SnapshotLogBytes, "raft-snapshot-log-bytes", 256<<20, "take a snapshot once this many bytes of log were applied since the last one")
	fs.Uint64Var(&c.Raft.SnapshotThreshold, "raft-snapshot-threshold", 65536, "take a snapshot once this many log entries were applied since the last one, whatever their size (checked every 30 s)")
	fs.Uint64Var(&c.Raft.TrailingLogs, "raft-trailing-logs", 16384, "log entries kept after a snapshot so a restarted node catches up from the log")
	fs.Uint64Var(&c.Raft.TrailingLogBytes, "raft-trailing-log-bytes", 256<<20, "at most this many bytes of those entries: fewer are kept when the newest are large (one at least)")
	fs.Uint64Var(&c.Raft.ReclaimBytes, "raft-snapshot-reclaim-bytes", 16<<20, "on a node that applied under 1 MiB of log in the last 30 s, once its snapshots hold this many bytes of segment files the store no longer uses (emptied by retention, acknowledgment or a deletion): take a snapshot and keep only it, so their space comes back (0: wait for the snapshots traffic brings)")
	fs.IntVar(&c.Raft.Proposer.MaxInflight, "commit-inflight", 1, "group commit: log entries in flight at once; requests arriving meanwhile share the next entry")
	fs.DurationVar(&c.Raft.Proposer.Linger, "commit-linger", raftnode.DefaultLinger, "group commit: how long an under-full entry may wait, while the node is busy, for the clients the previous entry answered to come back (negative: never)")
	// The usage answers --help on stdout (exit 0) and follows a bad
	// command line's error on stderr (exit 2).
	usage := func(w io.Writer) {
		fmt.Fprintf(w, `crownd %s: a Raft-replicated message broker speaking the Queen MQ HTTP API.

Usage:
  crownd [flags]                          run a node
  crownd healthcheck [--timeout 3s] [URL]  exit 0 when the node at URL (default http://127.0.0.1:6632) is healthy

Every flag can also be set by an environment variable: --node-id is CROWN_NODE_ID,
--raft-addr is CROWN_RAFT_ADDR, and so on. A flag on the command line wins.

Queen variables: QUEEN_ENCRYPTION_KEY (64 hex characters; a malformed key stops
crownd), QUEEN_HOTLIST (0 selects the pop-time window rule), QUEEN_HOTLIST_WINDOW_BATCH
(default 100), RETENTION_INTERVAL (ms between retention sweeps, default 5000),
RETENTION_BATCH_SIZE (segments deleted per sweep command, default 1000).

Flags:
`, version)
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(w, "  --%s (env %s, default %q)\n      %s\n", f.Name, flagEnv(f.Name), f.DefValue, f.Usage)
		})
	}
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
		} else {
			usage(stderr)
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(flagEnv(f.Name)); v != "" && !set[f.Name] && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", flagEnv(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	if err := c.checkRanges(); err != nil {
		return nil, err
	}
	c.GOGCEnv = getenv("GOGC")
	if err := c.LogLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	if c.ForwardProtocol != httpapi.ForwardRelay && c.ForwardProtocol != httpapi.ForwardHTTP {
		return nil, fmt.Errorf("--forward-protocol must be relay or http, got %q", c.ForwardProtocol)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return nil, fmt.Errorf("--log-format must be json or text, got %q", c.LogFormat)
	}
	if c.NodeID == "" || len(c.NodeID) > fsm.MaxNameBytes {
		return nil, fmt.Errorf("--node-id must be 1 to %d bytes", fsm.MaxNameBytes)
	}
	var err error
	if c.Peers, err = parsePeers(peers); err != nil {
		return nil, err
	}
	if c.Join != "" && len(c.Peers) > 0 {
		return nil, errors.New("--join and --peers are exclusive: join an existing cluster or bootstrap a new one")
	}
	if c.RaftAdvertise == "" {
		c.RaftAdvertise = c.RaftAddr
	}
	if err := checkPeersHoldSelf(c.Peers, c.NodeID, c.RaftAdvertise); err != nil {
		return nil, err
	}
	if strings.TrimSpace(c.DataDir) == "" {
		return nil, errors.New("--data-dir must not be empty")
	}
	for _, a := range []struct{ flag, addr string }{{"--http-addr", c.HTTPAddr}, {"--raft-addr", c.RaftAddr}} {
		if err := checkListenAddr(a.addr); err != nil {
			return nil, fmt.Errorf("%s %q: %w", a.flag, a.addr, err)
		}
	}
	if c.HTTPAdvertise == "" {
		if c.HTTPAdvertise, err = deriveAdvertise(c.HTTPAddr, c.RaftAdvertise); err != nil {
			return nil, err
		}
	} else if err := checkHTTPURL(c.HTTPAdvertise); err != nil {
		return nil, fmt.Errorf("--http-advertise %q: %w", c.HTTPAdvertise, err)
	}
	if c.Join != "" {
		if err := checkHTTPURL(c.Join); err != nil {
			return nil, fmt.Errorf("--join %q: %w", c.Join, err)
		}
	}
	// What Raft would refuse at start, refused before anything is written.
	if err := c.raftConfig(nil).Validate(); err != nil {
		return nil, fmt.Errorf("%w (--raft-advertise, --raft-heartbeat-timeout, --raft-election-timeout)", err)
	}
	if c.Key, err = envelope.ParseKey(getenv("QUEEN_ENCRYPTION_KEY")); err != nil {
		return nil, err
	}
	c.Hotlist = getenv("QUEEN_HOTLIST") != "0" && !strings.EqualFold(getenv("QUEEN_HOTLIST"), "false")
	c.WindowBatch = 100
	if v := getenv("QUEEN_HOTLIST_WINDOW_BATCH"); v != "" {
		if c.WindowBatch, err = strconv.ParseUint(v, 10, 64); err != nil || c.WindowBatch == 0 {
			return nil, fmt.Errorf("QUEEN_HOTLIST_WINDOW_BATCH=%q must be a positive integer", v)
		}
	}
	if v := getenv("RETENTION_INTERVAL"); v != "" {
		if c.Maintenance.RetentionInterval, err = parseMillis(v); err != nil {
			return nil, fmt.Errorf("RETENTION_INTERVAL=%q: %w", v, err)
		}
	}
	if v := getenv("RETENTION_BATCH_SIZE"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("RETENTION_BATCH_SIZE=%q must be a positive integer", v)
		}
		c.Maintenance.RetentionBatch = uint32(n)
	}
	return c, nil
}

// checkRanges refuses the zero and negative values a flag gives no meaning
// to. Left alone, raftnode and httpapi would replace each by their default
// without a word (--leader-wait 0 would wait 5 s, --raft-trailing-logs 0
// keep 16384 entries).
func (c *config) checkRanges() error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--leader-wait", c.LeaderWait},
		{"--raft-heartbeat-timeout", c.Raft.HeartbeatTimeout},
		{"--raft-election-timeout", c.Raft.ElectionTimeout},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive, got %v", d.flag, d.v)
		}
	}
	for _, n := range []struct {
		flag string
		v    uint64
	}{
		{"--raft-snapshot-log-bytes", c.Raft.SnapshotLogBytes},
		{"--raft-snapshot-threshold", c.Raft.SnapshotThreshold},
		{"--raft-trailing-logs", c.Raft.TrailingLogs},
		{"--raft-trailing-log-bytes", c.Raft.TrailingLogBytes},
	} {
		if n.v == 0 {
			return fmt.Errorf("%s must be at least 1", n.flag)
		}
	}
	if c.Raft.Proposer.MaxInflight < 1 {
		return fmt.Errorf("--commit-inflight must be at least 1, got %d", c.Raft.Proposer.MaxInflight)
	}
	if c.GCPercent < 1 {
		return fmt.Errorf("--gc-percent must be at least 1, got %d (GOGC=off turns the collector off)", c.GCPercent)
	}
	if c.FSMCommitInterval < 0 {
		return fmt.Errorf("--fsm-commit-interval must not be negative (0 commits every applied batch), got %v", c.FSMCommitInterval)
	}
	if c.FSMCommitBatches < 1 {
		return fmt.Errorf("--fsm-commit-batches must be at least 1, got %d", c.FSMCommitBatches)
	}
	// The Queen body limit bounds every request a follower relays to the
	// leader, so a larger OJS body could not be forwarded.
	if c.OJSMaxBodyBytes < 1 || c.OJSMaxBodyBytes > httpapi.DefaultLimits.MaxBodyBytes {
		return fmt.Errorf("--ojs-max-body-bytes must be from 1 to %d, got %d", httpapi.DefaultLimits.MaxBodyBytes, c.OJSMaxBodyBytes)
	}
	if c.OJSMaxQueues < 1 || c.OJSMaxQueues > math.MaxUint32 {
		return fmt.Errorf("--ojs-max-queues must be from 1 to %d, got %d", uint32(math.MaxUint32), c.OJSMaxQueues)
	}
	if c.FSMWriteback < 0 {
		return fmt.Errorf("--fsm-writeback must not be negative (0 leaves the writeback to the kernel), got %v", c.FSMWriteback)
	}
	return nil
}

// parseMillis reads a duration given as milliseconds (Queen's convention)
// or as a Go duration ("5s").
func parseMillis(v string) (time.Duration, error) {
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
		// Past this the product wraps: 10000000000000 became a negative
		// interval, silently replaced by the default 5 s.
		if ms > math.MaxInt64/int64(time.Millisecond) {
			return 0, fmt.Errorf("%d milliseconds is longer than the longest duration, %v", ms, time.Duration(math.MaxInt64))
		}
		return time.Duration(ms) * time.Millisecond, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("want a positive number of milliseconds or a duration such as 5s")
	}
	return d, nil
}

func parsePeers(s string) ([]raftnode.Peer, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []raftnode.Peer
	seen := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(p), "@")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("--peers: %q is not id@host:port", p)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("--peers: %q: %w", p, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("--peers: id %q listed twice", id)
		}
		seen[id] = true
		out = append(out, raftnode.Peer{ID: id, Addr: addr})
	}
	return out, nil
}

// checkPeersHoldSelf refuses a bootstrap list that leaves this node out or
// names it at another address than the one it advertises. Raft would
// bootstrap such a node as a non-member that cannot vote for itself, or
// let the others dial an address it does not answer on: a cluster that
// never elects a leader, found only by reading the logs of all three.
func checkPeersHoldSelf(peers []raftnode.Peer, nodeID, raftAdvertise string) error {
	if len(peers) == 0 {
		return nil
	}
	for _, p := range peers {
		if p.ID != nodeID {
			continue
		}
		if p.Addr != raftAdvertise {
			return fmt.Errorf("--peers names %s at %s, but this node advertises %s (--raft-advertise, default --raft-addr)", nodeID, p.Addr, raftAdvertise)
		}
		return nil
	}
	return fmt.Errorf("--peers must list this node (--node-id %s) among the initial voters", nodeID)
}

// checkListenAddr checks a host:port to listen on (an empty host: every
// interface; port 0: any free port).
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q must be 0 to 65535", port)
	}
	return nil
}

// checkHTTPURL checks a URL other nodes or this one will dial.
func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want http://host:port or https://host:port")
	}
	return nil
}

// raftConfig is the Raft part of c, for the node at start and for checking
// the command line.
func (c *config) raftConfig(log *slog.Logger) raftnode.Config {
	rc := c.Raft
	rc.NodeID, rc.RaftAddr, rc.Advertise, rc.DataDir = c.NodeID, c.RaftAddr, c.RaftAdvertise, c.DataDir
	rc.Peers, rc.Join, rc.Logger = c.Peers, c.Join != "", log
	return rc
}

// deriveAdvertise builds http://<host of the raft advertise address>:<http port>.
func deriveAdvertise(httpAddr, raftAddr string) (string, error) {
	_, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return "", fmt.Errorf("--http-addr %q: %w", httpAddr, err)
	}
	host, _, err := net.SplitHostPort(raftAddr)
	if err != nil {
		// --raft-addr was checked already: this is --raft-advertise.
		return "", fmt.Errorf("--raft-advertise %q: %w", raftAddr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

func newLogger(c *config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogLevel}
	var h slog.Handler
	if c.LogFormat == "text" {
		h = slog.NewTextHandler(w, opts)
	} else {
		// slog's JSON handler writes a time.Duration as a bare number of
		// nanoseconds ("retention_interval":5000000000); the text handler
		// and Raft's own lines (raftnode/hclog.go) write "5s". Write it as
		// text here too, so a duration says its unit in either format.
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				a.Value = slog.StringValue(a.Value.Duration().String())
			}
			return a
		}
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(h).With("node", c.NodeID)
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// run starts the node and serves until a signal. A failure to start, or a
// stop no signal asked for, is logged (structured, as every line once the
// logger exists) and returned.
func run(c *config) error {
	log := newLogger(c, os.Stderr)
	err := runNode(c, log)
	if err != nil {
		log.Error("crownd failed", "error", err)
	}
	return err
}

// defaultGCPercent lets the heap reach three times what was live at the last
// collection before the next. A node's live heap is small, 10-20 MiB under
// load, because its state and the Raft log are files read through the page
// cache, not Go memory; Go's default (a heap of twice what is live)
// collects twice as often to save a few tens of MiB. On a three-node cluster 200 produced 8 %
// and consumed 5 % more than 100, and 300 no more than 200 for more memory
// (docs/performance.md, lesson 41).
const defaultGCPercent = 200

// setGC applies --gc-percent unless the operator set Go's own GOGC.
func setGC(c *config, log *slog.Logger) {
	if c.GOGCEnv != "" {
		log.Info("garbage collector target from GOGC", "gogc", c.GOGCEnv)
		return
	}
	debug.SetGCPercent(c.GCPercent)
	log.Info("garbage collector target", "gc_percent", c.GCPercent)
}

func runNode(c *config, log *slog.Logger) error {
	setGC(c, log)
	// Installed before anything opens, so a signal while the node starts
	// (a long replay, a migration) is not the default action, which kills
	// without closing: it is taken up once the node is serving.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	state, err := fsm.Open(fsm.Config{Dir: filepath.Join(c.DataDir, "state"), NodeID: c.NodeID,
		Logger: log, Sync: c.FSMSync, Writeback: c.FSMWriteback, BootID: bootID(), VerifyAcks: c.VerifyAcks,
		CommitInterval: c.FSMCommitInterval, CommitBatches: c.FSMCommitBatches})
	if err != nil {
		return err
	}
	defer func() {
		if err := state.Close(); err != nil {
			log.Error("close state", "error", err)
		}
	}()
	rc := c.raftConfig(log)
	reg := prometheus.NewRegistry()
	if c.RaftMetrics {
		// Before the node starts, so its first elections and appends count.
		if err := exportRaftMetrics(reg); err != nil {
			return err
		}
	}
	node, err := raftnode.New(rc, state)
	if err != nil {
		return err
	}
	api := httpapi.New(httpapi.Config{
		NodeID: c.NodeID, AdvertiseURL: c.HTTPAdvertise, RaftAddr: c.RaftAdvertise, LeaderWait: c.LeaderWait,
		Hotlist: c.Hotlist, WindowBatch: c.WindowBatch, Key: c.Key, Logger: log, Registry: reg,
		Pprof: c.Pprof, Version: version, OJSStrict: c.OJSStrict, ForwardProtocol: c.ForwardProtocol,
		OJSMaxBodyBytes: c.OJSMaxBodyBytes, OJSMaxQueues: uint32(c.OJSMaxQueues),
		// Every write acknowledged before a crash is in the log; local
		// reads wait until the replay has applied it.
		ReadFloor: node.StartFloor(), ReadFloorNow: node.FloorNow,
	}, node, state)

	ln, err := net.Listen("tcp", c.HTTPAddr)
	if err != nil {
		node.Shutdown()
		return fmt.Errorf("listen on %s: %w", c.HTTPAddr, err)
	}
	// net/http's own complaints (accept errors, bad TLS) go to the same
	// structured log, not the default logger's plain lines.
	srv := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("crownd started", "version", version, "http", ln.Addr().String(), "advertise", c.HTTPAdvertise,
		"raft", c.RaftAddr, "data_dir", c.DataDir, "encryption", c.Key.Enabled(), "hotlist", c.Hotlist)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if c.Join != "" {
		switch members := mustMembers(node); {
		case len(members) == 0:
			go func() {
				// Join retries until it succeeds or the node stops: an end
				// because the node stops is no failure.
				if err := api.Join(ctx, c.Join); err != nil && ctx.Err() == nil {
					log.Error("join failed", "error", err)
				}
			}()
		case !raftnode.IsVoter(members, c.NodeID):
			// Its own log says it was removed. Joining again by itself
			// would undo an operator's removal whenever a supervisor
			// restarts the process, so it says what to do instead of
			// waiting in silence for a leader that never calls.
			log.Warn("this node is not a voter in the cluster configuration its data holds (it was removed): --join does not add it back; "+
				"add it with crownctl cluster add, or start it on an empty data directory with --join",
				"node_id", c.NodeID, "join", c.Join)
		}
	}
	go api.KeepRegistered(ctx)
	mcfg := c.Maintenance
	mcfg.Logger, mcfg.Registry = log, reg
	mcfg.EnsureQueues = []string{fsm.DefaultQueue}
	timers := maintenance.New(mcfg, node, state)
	node.OnLeadership(timers.SetLeader) // at once with the current state, then on every change

	var first time.Time // when the shutdown's signal came (zero: none)
	var failed error    // why the node stops, when no signal asked it to
	select {
	case s := <-sigs:
		first = time.Now()
		log.Info("shutting down", "signal", s.String())
	case err := <-serveErr:
		// Not a stop anyone asked for: shut down cleanly, then exit 1
		// so a supervisor restarts the node.
		failed = fmt.Errorf("http server stopped: %w", err)
		log.Error("http server stopped: shutting down", "error", err)
	}
	cancel()
	stopped := make(chan struct{})
	defer close(stopped)
	go forceOnSecondSignal(sigs, stopped, first, log)
	// Stop accepting, answer parked long-polls, let in-flight requests finish.
	api.Drain()
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("http shutdown", "error", err)
	}
	// The followers' relay connections were taken over from the HTTP
	// server, which does not wait for them: they answer what they read.
	if err := api.WaitRelays(sctx); err != nil {
		log.Warn("relay shutdown", "error", err)
	}
	api.CloseForwarding()
	scancel()
	timers.Close()
	if err := node.Shutdown(); err != nil {
		log.Warn("raft shutdown", "error", err)
	}
	// The state files are synced and closed before "stopped" is logged, and
	// a failure there is the exit status's too: a supervisor that sees 0
	// takes the close for clean. (The deferred Close, for the paths that
	// return early, then finds nothing to do.)
	if err := state.Close(); err != nil {
		if failed == nil {
			failed = fmt.Errorf("close state: %w", err)
		} else {
			log.Error("close state", "error", err)
		}
	}
	log.Info("stopped")
	return failed
}

// forceOnSecondSignal exits at once when a second SIGTERM or SIGINT arrives
// before the graceful shutdown ends (it may wait up to 30 s for in-flight
// requests), as an operator pressing Ctrl-C twice expects. Exiting without
// the clean close loses nothing acknowledged: every acknowledged write is in
// a fsynced Raft log, which the next start replays, exactly as after a
// SIGKILL.
//
// A signal within duplicateSignalWindow of the first is not a second one:
// one stop request can deliver it twice within microseconds (GNU timeout
// signals its child and then its whole process group), and taking that for
// an operator's second Ctrl-C skipped the clean close.
func forceOnSecondSignal(sigs <-chan os.Signal, stopped <-chan struct{}, first time.Time, log *slog.Logger) {
	for {
		select {
		case s := <-sigs:
			if !first.IsZero() && time.Since(first) < duplicateSignalWindow {
				log.Info("signal repeated at once: taken as the same stop request", "signal", s.String())
				continue
			}
			log.Warn("second signal during shutdown: exiting without a clean close", "signal", s.String())
			os.Exit(1)
		case <-stopped:
			return
		}
	}
}

// duplicateSignalWindow is how soon after the first a signal counts as the
// same delivery repeated rather than a second request: far below a person's
// double Ctrl-C, far above the gap between timeout's two kill calls.
const duplicateSignalWindow = 100 * time.Millisecond

func mustMembers(n *raftnode.Node) []raftnode.Member {
	m, _ := n.Members()
	return m
}

// healthcheck probes a node's /health (used by Docker, whose image has no shell).
func healthcheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("crownd healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 3*time.Second, "request timeout")
	// The usage answers --help on stdout; after a bad command line it goes
	// to stderr. Exit 2 is a bad command line, 1 an unhealthy node.
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "Usage: crownd healthcheck [--timeout 3s] [URL]\n\nExits 0 when GET URL/health answers 200 (default URL http://127.0.0.1:6632),\n1 when the node is unhealthy or unreachable, 2 on a bad command line.\n\nFlags:")
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(w, "  --%s (default %s)\n      %s\n", f.Name, f.DefValue, f.Usage)
		})
	}
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0
		}
		usage(stderr)
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "crownd healthcheck: --timeout must be positive, got %v\n", *timeout)
		return 2
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(stderr, "crownd healthcheck: one URL at most, got also %q\n", fs.Arg(1))
		return 2
	}
	url := "http://127.0.0.1:6632"
	if fs.NArg() > 0 {
		url = fs.Arg(0)
		if err := checkHTTPURL(url); err != nil {
			fmt.Fprintf(stderr, "crownd healthcheck: URL %q: %v\n", url, err)
			return 2
		}
	}
	client := &http.Client{Timeout: *timeout}
	resp, err := client.Get(strings.TrimRight(url, "/") + "/health")
	if err != nil {
		fmt.Fprintln(stderr, "unhealthy:", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "unhealthy: %d %s\n", resp.StatusCode, body)
		return 1
	}
	fmt.Fprintf(stdout, "healthy: %s\n", body)
	return 0
}
