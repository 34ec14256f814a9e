package main_test

// Operability of crownd and of the local deployments: flag
// validation, environment equivalents, structured logs, signals and
// scripts/cluster.sh. Real crownd processes, started through
// cmd/internal/testcluster or with exec where the harness cannot express the
// case (a command line that must be refused, a resource limit).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// opsRun runs crownd with args for at most d. It returns the combined
// output, the exit code (-1 when it was still running after d and had to be
// killed) and whether it exited by itself.
func opsRun(t *testing.T, d time.Duration, env []string, args ...string) (string, int, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, tc.Binary(t), args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return out.String(), -1, false
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run crownd: %v", err)
	}
	return out.String(), cmd.ProcessState.ExitCode(), true
}

// opsAddrs returns loopback HTTP and Raft addresses that were free a moment ago.
func opsAddrs(t *testing.T) (httpAddr, raftAddr string) {
	p := freeHostPorts(t, 2)
	return fmt.Sprintf("127.0.0.1:%d", p[0]), fmt.Sprintf("127.0.0.1:%d", p[1])
}

// opsFiles lists the regular files under dir (relative paths).
func opsFiles(t *testing.T, dir string) []string {
	var out []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// opsStoppedJSONLog starts one node logging JSON, stops it cleanly and
// returns it with its whole log.
func opsStoppedJSONLog(t *testing.T) (*tc.Node, string) {
	t.Helper()
	node := tc.Start(t, 1, tc.WithArgs("--log-format", "json")).Node(0)
	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	log, err := node.CurrentLog()
	if err != nil {
		t.Fatal(err)
	}
	return node, log
}

// opsJSONLines returns the JSON objects of a log, skipping the harness's
// start markers; lines that are not JSON objects are returned apart.
func opsJSONLines(log string) (objs []map[string]any, raw []string, bad []string) {
	for _, line := range strings.Split(log, "\n") {
		if line == "" || strings.HasPrefix(line, "==== testcluster:") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			bad = append(bad, line)
			continue
		}
		objs, raw = append(objs, m), append(raw, line)
	}
	return objs, raw, bad
}

// opsDuplicateKeys returns the top-level keys that occur more than once in
// one JSON object (encoding/json silently keeps the last).
func opsDuplicateKeys(line string) []string {
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	seen := map[string]bool{}
	var dups []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return dups
		}
		k, _ := tok.(string)
		if seen[k] {
			dups = append(dups, k)
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return dups
		}
	}
	return dups
}

// ---- flag validation ----

// A bad value anywhere on the command line is refused before the node
// touches its data directory: a malformed HTTP address (an invalid port), a
// Raft timeout the Raft library refuses, and a Raft address that cannot be
// advertised. Each must exit with status 2 (the status crownd gives every
// other bad command line, main.go) with a message naming the flag, and leave
// the data directory empty.
//
// Brief (operability): "crownd flag validation (a bad value ...: a clear
// message and exit status 2, never a panic or a half-started node)";
// docs/deployments.md "Delete ./data (not while it runs) to start from
// scratch": a refused command line must not be what created ./data.
func TestOpsBadValueRefusedBeforeDataDirIsWritten(t *testing.T) {
	for _, c := range []struct {
		name, flag string
		args       func(httpAddr, raftAddr string) []string
	}{
		{"http port out of range", "--http-addr", func(h, r string) []string {
			return []string{"--http-addr", "127.0.0.1:99999", "--raft-addr", r}
		}},
		{"raft heartbeat below Raft's minimum", "--raft-heartbeat-timeout", func(h, r string) []string {
			return []string{"--http-addr", h, "--raft-addr", r, "--raft-heartbeat-timeout", "1ms"}
		}},
		{"unspecified raft address without --raft-advertise", "--raft-a", func(h, r string) []string {
			_, port, _ := net.SplitHostPort(r)
			return []string{"--http-addr", h, "--raft-addr", "0.0.0.0:" + port}
		}},
		{"--peers without this node", "--peers", func(h, r string) []string {
			return []string{"--http-addr", h, "--raft-addr", r, "--peers", "node2@127.0.0.1:1,node3@127.0.0.1:2"}
		}},
		{"--peers naming this node at another address", "--peers", func(h, r string) []string {
			return []string{"--http-addr", h, "--raft-addr", r, "--peers", "node1@127.0.0.1:1,node2@127.0.0.1:2"}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			h, r := opsAddrs(t)
			args := append([]string{"--node-id", "node1", "--data-dir", dir}, c.args(h, r)...)
			out, code, exited := opsRun(t, 20*time.Second, tc.ChildEnv(), args...)
			if !exited {
				t.Fatalf("crownd %v still running after 20 s; output:\n%s", args, out)
			}
			if code != 2 {
				t.Errorf("exit status %d, want 2 (a bad command line); output:\n%s", code, lastLines(out, 5))
			}
			if !strings.Contains(out, c.flag) {
				t.Errorf("message does not name %s:\n%s", c.flag, lastLines(out, 5))
			}
			if files := opsFiles(t, dir); len(files) != 0 {
				t.Errorf("refused command line left %d files in the data directory: %v", len(files), files)
			}
		})
	}
}

// An empty --data-dir is refused like an empty --node-id or --http-addr
// ("must be 1 to 255 bytes", "missing port in address"): crownd accepts it
// and creates raft/ and state/ in whatever directory it was started from
// (filepath.Join("", "state") is "state"), e.g. / in the container image
// when a compose file's ${DATA_DIR} is unset.
//
// Brief: "crownd flag validation (a bad value, an unknown flag, a missing
// required one: a clear message and exit status 2, never a panic or a
// half-started node)"; crownd --help: "--data-dir directory for the Raft
// log, snapshots and the state database".
func TestOpsEmptyDataDirRefused(t *testing.T) {
	cwd := t.TempDir()
	h, r := opsAddrs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tc.Binary(t), "--node-id", "node1", "--data-dir", "", "--http-addr", h, "--raft-addr", r)
	cmd.Dir, cmd.Env = cwd, tc.ChildEnv()
	out, _ := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Errorf("crownd --data-dir \"\" was still running after 8 s, want exit status 2; last lines:\n%s", lastLines(string(out), 2))
	} else if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "--data-dir") {
		t.Errorf("crownd --data-dir \"\": exit status %d, output %q; want 2 naming --data-dir", code, lastLines(string(out), 2))
	}
	if files := opsFiles(t, cwd); len(files) != 0 {
		t.Errorf("crownd --data-dir \"\" wrote %d files into its working directory: %v", len(files), files)
	}
}

// URL-valued flags are checked: --http-advertise is the URL every other node
// forwards writes to, and --join the URL crownd posts its join request to.
// A value that is not an http(s) URL must be refused at start (exit status 2,
// naming the flag) instead of starting a node that reports itself healthy
// while no peer can reach it, or retrying a join that can never work forever.
//
// Brief: "crownd flag validation (a bad value ...: a clear message and exit
// status 2, never a panic or a half-started node)"; crownd --help:
// "--http-advertise URL other nodes use to reach this node's HTTP API",
// "--join URL of any node of an existing cluster to join".
func TestOpsMalformedURLFlagRefused(t *testing.T) {
	for _, flagName := range []string{"--http-advertise", "--join"} {
		t.Run(flagName, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			h, r := opsAddrs(t)
			out, code, exited := opsRun(t, 8*time.Second, tc.ChildEnv(),
				"--node-id", "node1", "--data-dir", dir, "--http-addr", h, "--raft-addr", r, flagName, "node1:6632")
			if !exited {
				t.Fatalf("crownd %s node1:6632 (no scheme) was still running after 8 s, want exit status 2; last lines:\n%s",
					flagName, lastLines(out, 3))
			}
			if code != 2 || !strings.Contains(out, flagName) {
				t.Errorf("exit status %d, output %q; want 2 and a message naming %s", code, lastLines(out, 3), flagName)
			}
		})
	}
}

// Bad command lines that crownd does refuse correctly (kept: no other test
// runs crownd's flag parsing): exit status 2, a message naming what is wrong,
// nothing written; and the environment variable standing in for a flag is
// validated the same way and named in the message.
func TestOpsBadCommandLineExitStatus2(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{args: []string{"--no-such-flag"}, want: "no-such-flag"},
		{args: []string{"--leader-wait", "soon"}, want: "leader-wait"},
		{args: []string{"--log-level", "verbose"}, want: "--log-level"},
		{args: []string{"--log-format", "xml"}, want: "--log-format"},
		{args: []string{"--peers", "node1"}, want: "--peers"},
		{args: []string{"--peers", "a@127.0.0.1:1", "--join", "http://127.0.0.1:1"}, want: "exclusive"},
		{args: []string{"stray"}, want: "stray"},
		{env: []string{"CROWN_LEADER_WAIT=soon"}, want: "CROWN_LEADER_WAIT"},
		{env: []string{"CROWN_LOG_FORMAT=xml"}, want: "xml"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		h, r := opsAddrs(t)
		args := append([]string{"--data-dir", dir, "--http-addr", h, "--raft-addr", r}, c.args...)
		out, code, exited := opsRun(t, 10*time.Second, tc.ChildEnv(c.env...), args...)
		if !exited || code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("%v %v: exited %v, status %d, output %q; want status 2 naming %q", c.env, c.args, exited, code, lastLines(out, 2), c.want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v %v: data directory created (%v)", c.env, c.args, err)
		}
	}
}

// Every flag has a CROWN_* equivalent, and a flag on the command line wins
// (kept: no other test sets crownd's environment variables).
//
// docs/deployments.md: "Every crownd flag can also be set through the
// environment (--log-level is CROWN_LOG_LEVEL, and so on; a flag on the
// command line wins)".
func TestOpsEnvironmentEquivalentsAndFlagWins(t *testing.T) {
	base := t.TempDir()
	h, r := opsAddrs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tc.Binary(t), "--node-id", "from-flag", "--log-format", "json")
	cmd.Env = tc.ChildEnv("CROWN_NODE_ID=from-env", "CROWN_LOG_FORMAT=text", "CROWN_DATA_DIR="+filepath.Join(base, "envdata"),
		"CROWN_HTTP_ADDR="+h, "CROWN_RAFT_ADDR="+r, "CROWN_PPROF=true", "CROWN_RAFT_METRICS=false", "CROWN_LOG_LEVEL=warn")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { cmd.Process.Kill(); <-done }()
	cl := tc.NewClient("http://" + h)
	var hl tc.Health
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if hl, err = cl.Health(ctx); err == nil && hl.HTTPStatus == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node from the environment never healthy: %v %+v\n%s", err, hl, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if hl.NodeID != "from-flag" {
		t.Errorf("node_id %q, want from-flag (the flag wins over CROWN_NODE_ID)", hl.NodeID)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + h + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/debug/pprof/"); code != 200 {
		t.Errorf("CROWN_PPROF=true: /debug/pprof/ answered %d, want 200", code)
	}
	if _, body := get("/metrics/prometheus"); strings.Contains(body, "crown_raft_commitTime") {
		t.Errorf("CROWN_RAFT_METRICS=false: crown_raft_* still exported")
	}
	if _, err := os.Stat(filepath.Join(base, "envdata", "state")); err != nil {
		t.Errorf("CROWN_DATA_DIR not used: %v", err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-done; err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	done <- nil
	objs, _, bad := opsJSONLines(out.String())
	if len(bad) != 0 {
		t.Errorf("--log-format json on the command line lost to CROWN_LOG_FORMAT=text: %q", bad[:min(3, len(bad))])
	}
	for _, m := range objs {
		if m["level"] == "INFO" || m["level"] == "DEBUG" {
			t.Errorf("CROWN_LOG_LEVEL=warn: %v line logged: %v", m["level"], m["msg"])
			break
		}
	}
}

// The collector's target: --gc-percent's default, the flag, and Go's own
// GOGC, which wins over both (an operator who sets it means it), read back
// from the running process's go_gc_gogc_percent.
func TestOpsGCPercentDefaultFlagAndGOGC(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []tc.Option
		want float64
	}{
		{"default", []tc.Option{tc.WithEnv("GOGC=")}, 200},
		{"flag", []tc.Option{tc.WithEnv("GOGC="), tc.WithArgs("--gc-percent", "150")}, 150},
		{"GOGC wins", []tc.Option{tc.WithEnv("GOGC=80"), tc.WithArgs("--gc-percent", "150")}, 80},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := nodeMetrics(tc.Start(t, 1, c.opts...).Node(0))
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := m["go_gc_gogc_percent"]; !ok || got != c.want {
				t.Errorf("go_gc_gogc_percent %v (exported: %t), want %v", got, ok, c.want)
			}
		})
	}
}

// ---- structured logs ----

// The "node" field every line carries (main.go: the logger is built
// .With("node", <--node-id>)) must survive Raft's own lines, which log a
// "node" key of their own ("entering candidate state"): were both in one
// JSON object, every JSON reader would keep the second, and a log pipeline
// grouping by node would file those lines under no node.
//
// raftnode/hclog.go: "hclogAdapter sends hashicorp/raft's logs to log/slog,
// so the whole process writes one structured stream"; brief: "structured
// logs (log/slog, --log-format json|text, --log-level) carry the fields they
// promise".
func TestOpsJSONLogNodeFieldNotOverwritten(t *testing.T) {
	node, log := opsStoppedJSONLog(t)
	objs, raw, _ := opsJSONLines(log)
	if len(objs) < 5 {
		t.Fatalf("only %d JSON lines in the log:\n%s", len(objs), log)
	}
	var wrong []string
	for i, m := range objs {
		if m["node"] != node.ID() || len(opsDuplicateKeys(raw[i])) != 0 {
			wrong = append(wrong, raw[i])
		}
	}
	if len(wrong) != 0 {
		t.Errorf("%d of %d JSON log lines do not carry node=%q exactly once, e.g.\n%s",
			len(wrong), len(objs), node.ID(), strings.Join(wrong[:min(3, len(wrong))], "\n"))
	}
}

// Raft's values reach the JSON log rendered: hclog.Fmt values formatted (not
// the raw ["%+v", [...]] pair), and *raft.Raft values (the "leader",
// "follower" and "node" of the state-change lines) as their text, not {}, so
// the line that announces a new leader says which node it is.
//
// raftnode/hclog.go: "so the whole process writes one structured stream";
// brief: "structured logs ... carry the fields they promise".
func TestOpsJSONLogRaftValuesRendered(t *testing.T) {
	node, log := opsStoppedJSONLog(t)
	objs, raw, _ := opsJSONLines(log)
	var seenConfig, seenLeader bool
	for i, m := range objs {
		switch m["msg"] {
		case "initial configuration":
			seenConfig = true
			if s, ok := m["servers"].(string); !ok || strings.Contains(s, "%+v") || !strings.Contains(s, node.RaftAddr()) {
				t.Errorf("initial configuration: servers = %#v, want the rendered server list naming %s; line:\n%s",
					m["servers"], node.RaftAddr(), raw[i])
			}
		case "entering leader state":
			seenLeader = true
			if !strings.Contains(raw[i], node.RaftAddr()) {
				t.Errorf("entering leader state does not name the leader (%s); line:\n%s", node.RaftAddr(), raw[i])
			}
		}
		if strings.Contains(raw[i], `":{}`) || strings.Contains(raw[i], `["%`) {
			t.Errorf("unrendered value in log line:\n%s", raw[i])
		}
	}
	if !seenConfig || !seenLeader {
		t.Fatalf("log lacks Raft's initial configuration (%v) or leader (%v) line:\n%s", seenConfig, seenLeader, log)
	}
}

// With --log-format json, everything crownd writes to stderr is a JSON
// object. The HTTP server has no ErrorLog, so net/http's own messages go to
// the standard library's default logger as plain text: with file
// descriptors exhausted (the moment an operator reads the log), every
// "http: Accept error ... too many open files; retrying" is a bare line with
// no level, no node and no JSON, which a JSON log pipeline drops or rejects.
//
// crownd --help: "--log-format log format: json or text"; raftnode/hclog.go:
// "so the whole process writes one structured stream".
func TestOpsJSONLogHasOnlyJSONLines(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	h, r := opsAddrs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A low descriptor limit, as on a busy host; crownd itself needs ~20.
	cmd := exec.CommandContext(ctx, "bash", "-c", `ulimit -n 48 && exec "$0" "$@"`, tc.Binary(t),
		"--node-id", "node1", "--data-dir", dir, "--http-addr", h, "--raft-addr", r, "--log-format", "json")
	cmd.Env = tc.ChildEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { cmd.Process.Kill(); <-done }()
	cl := tc.NewClient("http://" + h)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if hl, err := cl.Health(ctx); err == nil && hl.HTTPStatus == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node never healthy:\n%s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// 60 idle connections: more than the limit leaves.
	var conns []net.Conn
	for range 60 {
		c, err := net.DialTimeout("tcp", h, 2*time.Second)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	time.Sleep(time.Second)
	for _, c := range conns {
		c.Close()
	}
	time.Sleep(500 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	<-done
	done <- nil
	_, _, bad := opsJSONLines(out.String())
	if len(bad) != 0 {
		t.Errorf("%d lines of crownd --log-format json are not JSON, e.g.\n%s", len(bad), strings.Join(bad[:min(3, len(bad))], "\n"))
	}
}

// ---- signals ----

// SIGINT (Ctrl-C) shuts down like SIGTERM (kept: the existing graceful test
// sends SIGTERM only): the parked long-poll is answered 204 at once, the
// process exits 0 after logging "stopped", and the restarted node has
// everything.
//
// docs/deployments.md: "Ctrl-C (SIGINT) or SIGTERM shuts it down cleanly:
// parked long-polls are answered, in-flight requests finish, the state files
// ... are fsynced."
func TestOpsSIGINTGracefulShutdown(t *testing.T) {
	c := tc.Start(t, 1)
	node := c.Node(0)
	cl := node.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := cl.Push(ctx, []tc.PushItem{{Queue: "sigint", Payload: 1, TransactionID: "s-1"}}); err != nil {
		t.Fatal(err)
	}
	type res struct {
		n    int
		err  error
		took time.Duration
	}
	parked := make(chan res, 1)
	go func() {
		t0 := time.Now()
		m, err := cl.Pop(ctx, "sigint-empty", tc.PopParams{Wait: true, Timeout: 60 * time.Second})
		parked <- res{len(m), err, time.Since(t0)}
	}()
	time.Sleep(time.Second) // parked
	before := stableDigest(t, cl)
	sigAt := time.Now()
	proc, err := os.FindProcess(opsPid(t, node))
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-parked:
		if p.err != nil || p.n != 0 || time.Since(sigAt) > 10*time.Second {
			t.Errorf("parked long-poll on SIGINT: %v, %d messages, %v after the signal (want 204 at once)", p.err, p.n, time.Since(sigAt))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("parked long-poll not answered 20 s after SIGINT")
	}
	for deadline := time.Now().Add(30 * time.Second); node.Running(); {
		if time.Now().After(deadline) {
			t.Fatal("crownd still running 30 s after SIGINT")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code := node.ExitCode(); code != 0 {
		t.Errorf("exit status %d after SIGINT, want 0", code)
	}
	if log, _ := node.CurrentLog(); !strings.Contains(log, "signal=interrupt") || !strings.Contains(log, "msg=stopped") {
		t.Errorf("log does not record the interrupt and a clean stop:\n%s", lastLines(log, 5))
	}
	node.Restart()
	if _, err := c.WaitLeader(tc.LeaderTimeout); err != nil {
		t.Fatal(err)
	}
	after := stableDigest(t, cl)
	if after.AppliedIndex != before.AppliedIndex || after.Digest != before.Digest {
		t.Errorf("state after SIGINT and restart %d/%s, before %d/%s", after.AppliedIndex, after.Digest, before.AppliedIndex, before.Digest)
	}
}

// pendingPush starts a push whose body never finishes, which keeps a
// graceful shutdown waiting, and returns its connection and node's process.
// The handler must be running before a signal (a connection still in the
// listen queue is dropped, not waited for): the server's "100 Continue"
// answers the handler's first read of the body.
func pendingPush(t *testing.T, node *tc.Node) (net.Conn, *os.Process) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(node.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(status, "100 Continue") {
		t.Fatalf("no 100 Continue for the pending push: %q, %v", status, err)
	}
	if _, err := fmt.Fprint(conn, `{"items":[`); err != nil {
		t.Fatal(err)
	}
	proc, err := os.FindProcess(opsPid(t, node))
	if err != nil {
		t.Fatal(err)
	}
	return conn, proc
}

// A second SIGTERM while the graceful shutdown waits for an in-flight request
// exits at once instead of after the 30 s grace, and loses nothing that was
// acknowledged: the restarted node holds the push answered before.
func TestOpsSecondSignalExitsAtOnce(t *testing.T) {
	c := tc.Start(t, 1)
	node := c.Node(0)
	cl := node.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := cl.Push(ctx, []tc.PushItem{{Queue: "twice", Payload: 1, TransactionID: "t-1"}}); err != nil {
		t.Fatal(err)
	}
	conn, proc := pendingPush(t, node)
	defer conn.Close()
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The first signal is being handled once the node stops answering
	// health checks as healthy (Drain) or logs it.
	for deadline := time.Now().Add(20 * time.Second); ; {
		if log, _ := node.CurrentLog(); strings.Contains(log, "shutting down") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no shutdown logged 20 s after the first SIGTERM")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if !node.Running() {
		t.Fatal("crownd exited before the in-flight request ended: the test cannot tell a forced exit from a graceful one")
	}
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The graceful path would wait for the request up to its 30 s grace.
	for deadline := time.Now().Add(15 * time.Second); node.Running(); {
		if time.Now().After(deadline) {
			t.Fatal("crownd still running 15 s after a second SIGTERM")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := node.ExitCode(); code != 1 {
		t.Errorf("exit status %d after a second SIGTERM, want 1", code)
	}
	if log, _ := node.CurrentLog(); !strings.Contains(log, "second signal during shutdown") {
		t.Errorf("log does not record the forced exit:\n%s", lastLines(log, 5))
	}
	node.Restart()
	if _, err := c.WaitLeader(tc.LeaderTimeout); err != nil {
		t.Fatal(err)
	}
	msgs, err := cl.Pop(ctx, "twice", tc.PopParams{Batch: 10})
	if err != nil || len(msgs) != 1 || msgs[0].TransactionID != "t-1" {
		t.Fatalf("after a forced exit and restart: %v, %+v (want the one acknowledged push)", err, msgs)
	}
}

// opsPid finds the pid of a harness node's process from /proc (the harness
// exposes signals only as SIGTERM/SIGKILL/SIGSTOP/SIGCONT).
func opsPid(t *testing.T, n *tc.Node) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		for i := 0; i+1 < len(argv); i++ {
			if argv[i] == "--data-dir" && argv[i+1] == n.DataDir() && filepath.Base(argv[0]) == "crownd" {
				return pid
			}
		}
	}
	t.Fatalf("no crownd process with --data-dir %s", n.DataDir())
	return 0
}

// ---- scripts/cluster.sh ----

// cluster.sh start on a node that stays unhealthy (here node1 alone: no
// quorum, so no leader) must fail and print the end of that node's log, as
// it does for a node that exits.
//
// docs/deployments.md (Local cluster): "start waits up to 30 s for /health
// to answer 200 on every node it started ...; when a node exits or stays
// unhealthy, the script prints the end of its log and fails."
func TestOpsClusterShUnhealthyNodePrintsLogTail(t *testing.T) {
	bin := filepath.Dir(tc.Binary(t))
	dir := filepath.Join(t.TempDir(), "cluster")
	script := filepath.Join(repoRoot(t), "scripts", "cluster.sh")
	env := tc.ChildEnv("CROWN_BIN_DIR="+bin, "CROWN_CLUSTER_DIR="+dir,
		"CROWN_CLUSTER_HTTP_BASE=36741", "CROWN_CLUSTER_RAFT_BASE=36751", "CROWN_CLUSTER_WAIT=3")
	run := func(args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
		cmd.Env = env
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		return so.String(), se.String(), err
	}
	t.Cleanup(func() {
		if so, se, err := run("clean"); err != nil {
			t.Errorf("cluster.sh clean: %v\n%s%s", err, so, se)
		}
	})
	so, se, err := run("start", "node1")
	if err == nil {
		t.Fatalf("cluster.sh start node1 (no quorum) succeeded:\n%s%s", so, se)
	}
	if !strings.Contains(se, "not healthy") {
		t.Fatalf("unexpected failure of cluster.sh start node1:\n%s%s", so, se)
	}
	log, err := os.ReadFile(filepath.Join(dir, "node1.log"))
	if err != nil || !strings.Contains(string(log), `msg="crownd started"`) {
		t.Fatalf("node1.log: %v\n%s", err, log)
	}
	// Every line of the node's log (--log-format text) carries level=; the
	// script's own messages do not.
	if !strings.Contains(se, "level=") {
		t.Errorf("cluster.sh start, node1 stays unhealthy: stderr shows none of node1.log; stderr:\n%s", se)
	}
}
