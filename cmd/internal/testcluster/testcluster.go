// Package testcluster runs real crownd processes for end-to-end tests.
//
// # Design
//
// Tests that claim durability or crash safety must exercise the real binary:
// a goroutine-hosted node shares the test's page cache, file descriptors and
// scheduler, cannot be SIGKILLed, and never exercises flag parsing, signal
// handling or process start-up. So every node here is a separate crownd
// process, started with exec and controlled with signals:
//
//   - Binary. $CROWN_BIN/crownd when CROWN_BIN is set (make test sets it to
//     bin/ after building); otherwise ./cmd/crownd of the enclosing module
//     (found by walking up from the working directory to go.mod) is built
//     once per test binary with CGO_ENABLED=0 (go build into a per-checkout
//     directory under os.TempDir, replaced atomically, so concurrent test
//     binaries do not clash and nothing accumulates).
//   - Isolation. Each node gets free loopback ports for HTTP and Raft
//     (reserved for the whole test binary, so a killed node can restart on
//     the same ports and no other node of the process takes them), its own
//     data directory under t.TempDir(), and an environment from which every
//     inherited CROWN_*, QUEEN_* and RETENTION_* variable has been
//     removed (Options add
//     them back explicitly).
//   - Logs. Each node's stdout and stderr go to one file, appended across
//     restarts with a marker line. When the test fails, the last lines of
//     every node's log are printed with t.Log, and so is every process exit
//     the harness did not cause (a crash, or a signal from another program).
//   - Lifecycle. Kill is SIGKILL (a crash: nothing flushed by the process),
//     Stop is SIGTERM and waits for a graceful exit, Restart starts the same
//     command on the same ports and data directory, Pause/Resume are
//     SIGSTOP/SIGCONT (a hung node whose sockets stay open). A goroutine
//     per process reaps it, so exit status is always collected.
//   - Cleanup. t.Cleanup kills every process still running (paused ones
//     included) and waits for it before the temporary directories are
//     removed; on Linux the children also carry a parent-death signal, so a
//     test binary that dies (a -timeout panic) does not leave orphans.
//   - Readiness is observed only through the public HTTP API: /health
//     (raft.state, leader_id) for leadership and health, and
//     /internal/v1/digest for replica convergence (same applied_index and
//     digest on every running node).
//
// Methods that take or hold a testing.TB (Start, AddNode, Kill, Stop,
// Restart, Pause, Resume, Leader) report harness failures with t.Fatalf and
// must therefore be called from the test goroutine. WaitLeader,
// WaitConverged, WaitHealthy and the Client return errors and may be used
// from any goroutine.
//
// The Client (client.go) is a small typed client for the endpoints tests
// need (push, pop, ack/batch, configure, health, digest, members). It never
// retries unless asked with Retrying, because tests about crashes must see
// every failure that a real client would see.
package testcluster

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/crownmq/crown/cmd/internal/childproc"
)

// Default timeouts used by Start, Restart and Leader.
const (
	StartTimeout  = 60 * time.Second // process up and the cluster healthy
	StopTimeout   = 40 * time.Second // SIGTERM to exit (crownd drains for up to 30 s)
	LeaderTimeout = 30 * time.Second
	logTailLines  = 100
)

// ---- binary ----

var bin struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the crownd binary the harness runs, building it on first
// use when CROWN_BIN is not set.
func Binary(t testing.TB) string {
	t.Helper()
	bin.once.Do(func() { bin.path, bin.err = findOrBuild() })
	if bin.err != nil {
		t.Fatalf("testcluster: crownd binary: %v", bin.err)
	}
	return bin.path
}

func findOrBuild() (string, error) {
	if d := os.Getenv("CROWN_BIN"); d != "" {
		p := filepath.Join(d, "crownd")
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("CROWN_BIN=%s: %w (run make build)", d, err)
		}
		return p, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	// One directory per module checkout, reused across test binaries so
	// nothing accumulates: each build writes a private file and renames it
	// into place (atomic; running processes keep their old inode), and the
	// Go build cache makes repeated builds cheap.
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(os.TempDir(), "crown-testcluster-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "crownd-build-")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	goTool := "go"
	if _, err := exec.LookPath(goTool); err != nil {
		if gr := os.Getenv("GOROOT"); gr != "" {
			goTool = filepath.Join(gr, "bin", "go")
		}
	}
	cmd := exec.Command(goTool, "build", "-o", tmp.Name(), "./cmd/crownd")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/crownd in %s: %v\n%s", root, err, b)
	}
	out := filepath.Join(dir, "crownd")
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

// moduleRoot walks up from the working directory to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory; set CROWN_BIN")
		}
		dir = parent
	}
}

// ---- ports ----

var ports struct {
	mu   sync.Mutex
	used map[int]bool
}

// freePort returns a loopback port that was free a moment ago and that no
// other node of this test binary has been given.
func freePort() (int, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.used == nil {
		ports.used = map[int]bool{}
	}
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !ports.used[p] {
			ports.used[p] = true
			return p, nil
		}
	}
	return 0, errors.New("no free port found")
}

// ---- options ----

type config struct {
	args     []string
	env      []string
	logLevel string
}

// Option configures a cluster (and every node it starts, AddNode included).
type Option func(*config)

// WithArgs appends extra crownd flags to every node's command line.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithEnv adds environment variables ("KEY=value") to every node, e.g.
// "QUEEN_ENCRYPTION_KEY=<64 hex>".
func WithEnv(kv ...string) Option {
	return func(c *config) { c.env = append(c.env, kv...) }
}

// WithLogLevel sets --log-level (default info).
func WithLogLevel(level string) Option {
	return func(c *config) { c.logLevel = level }
}

// ---- cluster ----

// Cluster is a set of crownd processes started by Start.
type Cluster struct {
	t    testing.TB
	cfg  config
	base string

	mu    sync.Mutex
	nodes []*Node
}

// Start launches n crownd nodes and waits until a leader is elected and
// every node is healthy. n == 1 bootstraps a single node; n > 1 gives every
// node the same --peers list. Everything is torn down in t.Cleanup.
func Start(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("testcluster: Start with %d nodes", n)
	}
	c := &Cluster{t: t, cfg: config{logLevel: "info"}}
	for _, o := range opts {
		o(&c.cfg)
	}
	path := Binary(t)
	// TempDir first: cleanups run last-in first-out, so the processes are
	// killed (below) before their directories are removed.
	c.base = t.TempDir()
	t.Cleanup(c.cleanup)

	for i := range n {
		node, err := c.newNode(path, fmt.Sprintf("node%d", i+1))
		if err != nil {
			t.Fatalf("testcluster: %v", err)
		}
		c.nodes = append(c.nodes, node)
	}
	if n > 1 {
		var peers []string
		for _, node := range c.nodes {
			peers = append(peers, node.id+"@"+node.raftAddr)
		}
		for _, node := range c.nodes {
			node.args = append(node.args, "--peers", strings.Join(peers, ","))
		}
	}
	for _, node := range c.nodes {
		if err := node.start(); err != nil {
			t.Fatalf("testcluster: %v", err)
		}
	}
	deadline := time.Now().Add(StartTimeout)
	for _, node := range c.nodes {
		if err := node.waitHTTP(time.Until(deadline)); err != nil {
			t.Fatalf("testcluster: %v", err)
		}
	}
	if _, err := c.WaitLeader(time.Until(deadline)); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	for _, node := range c.nodes {
		if err := node.WaitHealthy(time.Until(deadline)); err != nil {
			t.Fatalf("testcluster: %v", err)
		}
	}
	return c
}

func (c *Cluster) newNode(path, id string) (*Node, error) {
	hp, err := freePort()
	if err != nil {
		return nil, err
	}
	rp, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(c.base, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	n := &Node{
		t: c.t, id: id, bin: path, dir: dir, dataDir: filepath.Join(dir, "data"),
		logPath:  filepath.Join(dir, "crownd.log"),
		httpAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(hp)),
		raftAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(rp)),
		env:      ChildEnv(c.cfg.env...),
	}
	n.args = []string{"--node-id", id, "--data-dir", n.dataDir, "--http-addr", n.httpAddr,
		"--raft-addr", n.raftAddr, "--log-format", "text", "--log-level", c.cfg.logLevel,
		// Every test cluster checks how its acknowledgments resolve.
		"--verify-acks"}
	n.args = append(n.args, c.cfg.args...)
	return n, nil
}

// ChildEnv is the test's environment without the variables crownd reads
// (CROWN_*, QUEEN_*, RETENTION_*), plus extra: what a crownd started by a
// test sees, whatever the shell running the tests exported.
func ChildEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CROWN_") || strings.HasPrefix(kv, "QUEEN_") || strings.HasPrefix(kv, "RETENTION_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func (c *Cluster) cleanup() {
	c.mu.Lock()
	nodes := append([]*Node(nil), c.nodes...)
	c.mu.Unlock()
	for _, n := range nodes {
		n.forceKill()
	}
	if c.t.Failed() {
		for _, n := range nodes {
			c.t.Logf("---- %s (%s, raft %s) log tail: %s ----\n%s", n.id, n.URL(), n.raftAddr, n.logPath,
				tail(n.logPath, logTailLines))
		}
		for _, n := range nodes {
			for _, u := range n.UnexpectedExits() {
				c.t.Logf("testcluster: %s: %s", n.id, u)
			}
		}
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = append(lines[:0:0], lines[len(lines)-n:]...)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Nodes returns every node ever started in the cluster, in start order.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Node(nil), c.nodes...)
}

// Node returns the i-th node (0-based, in start order; node i has id
// "node<i+1>").
func (c *Cluster) Node(i int) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.nodes) {
		c.t.Fatalf("testcluster: Node(%d) of %d", i, len(c.nodes))
	}
	return c.nodes[i]
}

// running returns the nodes whose process runs and is not paused.
func (c *Cluster) running() []*Node {
	var out []*Node
	for _, n := range c.Nodes() {
		if n.Running() && !n.Paused() {
			out = append(out, n)
		}
	}
	return out
}

// WaitLeader waits until a running node reports raft.state "Leader" in a
// healthy /health answer and returns it (the one with the highest term if
// a stale leader still believes it leads).
func (c *Cluster) WaitLeader(timeout time.Duration) (*Node, error) {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		var best *Node
		var bestTerm uint64
		for _, n := range c.running() {
			h, err := n.health(time.Second)
			if err != nil {
				last = fmt.Sprintf("%s: %v", n.id, err)
				continue
			}
			if h.Raft.State == "Leader" && h.HTTPStatus == 200 && (best == nil || h.Raft.Term > bestTerm) {
				best, bestTerm = n, h.Raft.Term
			} else {
				last = fmt.Sprintf("%s: state %s, leader %q, status %d", n.id, h.Raft.State, h.Raft.LeaderID, h.HTTPStatus)
			}
		}
		if best != nil {
			return best, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no leader within %v (last: %s)", timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Leader is WaitLeader with LeaderTimeout; it fails the test when there is
// no leader.
func (c *Cluster) Leader() *Node {
	c.t.Helper()
	n, err := c.WaitLeader(LeaderTimeout)
	if err != nil {
		c.t.Fatalf("testcluster: %v", err)
	}
	return n
}

// WaitConverged waits until every running, unpaused node reports the same
// applied_index and digest on /internal/v1/digest, and returns that digest.
func (c *Cluster) WaitConverged(timeout time.Duration) (Digest, error) {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		nodes := c.running()
		var first Digest
		ok := len(nodes) > 0
		for i, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			d, err := n.Client().Digest(ctx)
			cancel()
			if err != nil {
				ok, last = false, fmt.Sprintf("%s: %v", n.id, err)
				break
			}
			if i == 0 {
				first = d
			} else if d.AppliedIndex != first.AppliedIndex || d.Digest != first.Digest {
				ok = false
				last = fmt.Sprintf("%s at %d/%.12s, %s at %d/%.12s", nodes[0].id, first.AppliedIndex, first.Digest,
					n.id, d.AppliedIndex, d.Digest)
				break
			}
		}
		if ok {
			return first, nil
		}
		if time.Now().After(deadline) {
			return Digest{}, fmt.Errorf("not converged within %v (last: %s)", timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// AddNode starts a new node with --join <leader URL> and waits until the
// leader lists it as a member and it is healthy.
func (c *Cluster) AddNode(t testing.TB) *Node {
	t.Helper()
	leader := c.Leader()
	c.mu.Lock()
	id := fmt.Sprintf("node%d", len(c.nodes)+1)
	c.mu.Unlock()
	n, err := c.newNode(Binary(t), id)
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	n.t = t
	n.args = append(n.args, "--join", leader.URL())
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	if err := n.start(); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	deadline := time.Now().Add(StartTimeout)
	if err := n.waitHTTP(time.Until(deadline)); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		members, err := leader.Client().Members(ctx)
		cancel()
		found := false
		for _, m := range members {
			found = found || m.ID == id
		}
		if err == nil && found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("testcluster: %s not a member within %v (members %v, err %v)", id, StartTimeout, members, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := n.WaitHealthy(time.Until(deadline)); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	return n
}

// ---- node ----

// Node is one crownd process (and its successors after restarts).
type Node struct {
	t        testing.TB
	id       string
	bin      string
	dir      string
	dataDir  string
	logPath  string
	httpAddr string
	raftAddr string
	args     []string
	env      []string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when the current process has been reaped
	paused   bool
	starts   int
	exitCode int
	exitErr  error
	// stopping is set when the harness sends SIGKILL or SIGTERM to the
	// current process; unexpected lists exits that it did not cause.
	stopping   bool
	unexpected []string
}

// ID is the node's --node-id.
func (n *Node) ID() string { return n.id }

// URL is the node's HTTP base URL, e.g. http://127.0.0.1:41234.
func (n *Node) URL() string { return "http://" + n.httpAddr }

// RaftAddr is the node's Raft address.
func (n *Node) RaftAddr() string { return n.raftAddr }

// DataDir is the node's --data-dir.
func (n *Node) DataDir() string { return n.dataDir }

// LogPath is the file receiving the node's stdout and stderr.
func (n *Node) LogPath() string { return n.logPath }

// Args returns the node's crownd arguments.
func (n *Node) Args() []string { return append([]string(nil), n.args...) }

// Client returns a client for this node (no retries).
func (n *Node) Client() *Client { return NewClient(n.URL()) }

// Running reports whether the node's process is alive (paused counts).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Paused reports whether the node was paused and not resumed.
func (n *Node) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.paused
}

// ExitCode is the last process's exit code (-1 when killed by a signal or
// still running).
func (n *Node) ExitCode() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exitCode
}

func (n *Node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done != nil {
		select {
		case <-n.done:
		default:
			return fmt.Errorf("%s: start while running", n.id)
		}
	}
	lf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n.starts++
	fmt.Fprintf(lf, "==== testcluster: start #%d of %s at %s: %s %s\n", n.starts, n.id,
		time.Now().Format(time.RFC3339Nano), n.bin, strings.Join(n.args, " "))
	cmd := exec.Command(n.bin, n.args...)
	cmd.Env = n.env
	cmd.Dir = n.dir
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := childproc.Start(cmd); err != nil {
		lf.Close()
		return fmt.Errorf("%s: start %s: %w", n.id, n.bin, err)
	}
	done := make(chan struct{})
	n.cmd, n.done, n.paused, n.exitCode, n.exitErr, n.stopping = cmd, done, false, -1, nil, false
	start := n.starts
	go func() {
		err := cmd.Wait()
		lf.Close()
		n.mu.Lock()
		n.exitErr = err
		n.exitCode = cmd.ProcessState.ExitCode()
		if !n.stopping {
			n.unexpected = append(n.unexpected, fmt.Sprintf("process #%d exited at %s without a signal from the harness (%v)",
				start, time.Now().Format("15:04:05.000"), cmd.ProcessState))
		}
		n.mu.Unlock()
		close(done)
	}()
	return nil
}

// waitHTTP waits until the node answers /health with any status.
func (n *Node) waitHTTP(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	for {
		select {
		case <-done:
			return fmt.Errorf("%s exited during start-up (code %d, %v); log tail:\n%s",
				n.id, n.ExitCode(), n.exitErr, tail(n.logPath, 30))
		default:
		}
		if _, err := n.health(time.Second); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: HTTP not up within %v", n.id, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (n *Node) health(timeout time.Duration) (Health, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return n.Client().Health(ctx)
}

// WaitHealthy waits until /health answers 200 (a leader is known and
// reachable).
func (n *Node) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		h, err := n.health(time.Second)
		if err == nil && h.HTTPStatus == 200 {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("status %d, state %s, leader %q", h.HTTPStatus, h.Raft.State, h.Raft.LeaderID)
		}
		if !n.Running() {
			return fmt.Errorf("%s is not running (exit code %d)", n.id, n.ExitCode())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy within %v (last: %s)", n.id, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *Node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s was never started", n.id)
	}
	select {
	case <-done:
		return fmt.Errorf("%s is not running", n.id)
	default:
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		n.mu.Lock()
		n.stopping = true
		n.mu.Unlock()
	}
	return cmd.Process.Signal(sig)
}

// UnexpectedExits lists the node's process exits that the harness did not
// cause with Kill, Stop or cleanup: a crash, or a signal from outside the
// test (another program stopping crownd processes by name).
func (n *Node) UnexpectedExits() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.unexpected...)
}

func (n *Node) wait(timeout time.Duration) bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Kill SIGKILLs the node and waits until the process is gone.
func (n *Node) Kill() {
	n.t.Helper()
	if err := n.signal(syscall.SIGKILL); err != nil {
		n.t.Fatalf("testcluster: kill: %v", err)
	}
	if !n.wait(10 * time.Second) {
		n.t.Fatalf("testcluster: %s survived SIGKILL for 10s", n.id)
	}
	// Pooled keep-alive connections to the dead process would fail once.
	sharedTransport.CloseIdleConnections()
	n.mu.Lock()
	n.paused = false
	n.mu.Unlock()
}

// forceKill is the cleanup path: never fails.
func (n *Node) forceKill() {
	if n.signal(syscall.SIGKILL) == nil {
		n.wait(10 * time.Second)
	}
}

// Stop sends SIGTERM and waits up to StopTimeout for the process to exit.
// It returns nil when the process exited with status 0, and an error for a
// non-zero status or a timeout (the process is then SIGKILLed).
func (n *Node) Stop() error {
	n.t.Helper()
	if n.Paused() {
		n.Resume()
	}
	if err := n.signal(syscall.SIGTERM); err != nil {
		n.t.Fatalf("testcluster: stop: %v", err)
	}
	if !n.wait(StopTimeout) {
		n.forceKill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM (killed)", n.id, StopTimeout)
	}
	sharedTransport.CloseIdleConnections()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exitCode != 0 {
		return fmt.Errorf("%s exited with code %d after SIGTERM: %v", n.id, n.exitCode, n.exitErr)
	}
	return nil
}

// Restart starts the node again with the same command line (ports, data
// directory, environment) and waits until its HTTP API answers. It does not
// wait for a leader: use WaitLeader or WaitHealthy.
func (n *Node) Restart() {
	n.t.Helper()
	if err := n.start(); err != nil {
		n.t.Fatalf("testcluster: restart: %v", err)
	}
	if err := n.waitHTTP(StartTimeout); err != nil {
		n.t.Fatalf("testcluster: restart: %v", err)
	}
}

// Pause stops the process with SIGSTOP: it keeps its sockets but answers
// nothing.
func (n *Node) Pause() {
	n.t.Helper()
	if err := n.signal(syscall.SIGSTOP); err != nil {
		n.t.Fatalf("testcluster: pause: %v", err)
	}
	n.mu.Lock()
	n.paused = true
	pid := n.cmd.Process.Pid
	n.mu.Unlock()
	if !childproc.WaitStopped(pid, 5*time.Second) {
		n.t.Fatalf("testcluster: %s not stopped 5s after SIGSTOP", n.id)
	}
}

// Resume continues a paused process with SIGCONT.
func (n *Node) Resume() {
	n.t.Helper()
	if err := n.signal(syscall.SIGCONT); err != nil {
		n.t.Fatalf("testcluster: resume: %v", err)
	}
	n.mu.Lock()
	n.paused = false
	n.mu.Unlock()
}
