//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/crownmq/crown/cmd/crown-chaos/checker"
	"github.com/crownmq/crown/cmd/crown-chaos/history"
	"github.com/crownmq/crown/cmd/crown-chaos/nemesis"
	"github.com/crownmq/crown/cmd/crown-chaos/report"
	"github.com/crownmq/crown/cmd/crown-chaos/scenario"
	"github.com/crownmq/crown/cmd/crown-chaos/workload"
)

type runOpts struct {
	backend      string
	scenarios    []string
	random       bool
	seed         uint64
	duration     time.Duration
	reportDir    string
	crownd       string
	keepData     bool
	warmup       time.Duration
	settle       time.Duration
	recoverWait  time.Duration
	convergeWait time.Duration
	drainWait    time.Duration
	wl           workload.Config
	queues       int
	partitions   int
	groups       int
	subnet       string
	composeFile  string
	dockerImage  string
	dockerPort   int
	crowndArgs   string
	progress     time.Duration
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", "[flags]", `Starts a fresh three-node cluster (netns: three crownd processes in network
namespaces; docker: the Compose cluster), runs the workload, plays the scenarios
one after another (or a random schedule), heals everything, drains every
consumer group, checks convergence, checks the history and writes the report
(history.jsonl, summary.txt, report.json, timeline.svg, node logs) to --report.
Needs root for the netns backend. Ctrl-C stops the run and cleans up.

`+scenarioHelp(), stderr)
	o := runOpts{}
	var scen stringList
	fs.Var(&scen, "scenario", "scenario file or directory of *.chaos files (repeatable; played in order)")
	fs.StringVar(&o.backend, "backend", "netns", "netns or docker")
	fs.BoolVar(&o.random, "random", false, "play a random schedule instead of scenario files")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the random schedule and the workload (0: from the clock; printed)")
	fs.DurationVar(&o.duration, "duration", 5*time.Minute, "length of the random schedule")
	fs.StringVar(&o.reportDir, "report", "chaos-report", "output directory (emptied first)")
	fs.StringVar(&o.crownd, "crownd", "bin/crownd", "crownd binary (netns backend)")
	fs.BoolVar(&o.keepData, "keep-data", false, "keep the nodes' data directories (always kept when a check fails)")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "workload time before the first scenario")
	fs.DurationVar(&o.settle, "settle", 2*time.Second, "workload time after each scenario's recovery")
	fs.DurationVar(&o.recoverWait, "recover-timeout", 60*time.Second, "how long a heal may take to bring every node back")
	fs.DurationVar(&o.convergeWait, "converge-timeout", 30*time.Second, "how long a checkpoint waits for equal digests")
	fs.DurationVar(&o.drainWait, "drain-timeout", 90*time.Second, "how long the final drain may take")
	fs.IntVar(&o.queues, "queues", 3, "queues")
	fs.IntVar(&o.partitions, "partitions", 4, "partitions per queue (one producer each)")
	fs.IntVar(&o.groups, "groups", 3, "consumer groups per queue, the first being queue mode")
	fs.IntVar(&o.wl.ConsumersPerGroup, "consumers", 2, "consumers per queue and group")
	fs.Float64Var(&o.wl.PushRate, "push-rate", 4, "push requests per second per producer")
	fs.Float64Var(&o.wl.FailureRate, "consumer-failure-rate", 0.15, "share of batches consumers mishandle on purpose")
	fs.IntVar(&o.wl.LeaseSeconds, "lease", 5, "leaseSeconds of every pop")
	fs.BoolVar(&o.wl.Deletes, "deletes", true, "also push to queue "+workload.DeleteQueue+" and delete one message of each push (DELETE /api/v1/messages), then check every node agrees on what is left")
	fs.StringVar(&o.subnet, "subnet", "10.77.0", "netns: first three octets of the /24 the nodes live in")
	fs.StringVar(&o.crowndArgs, "crownd-args", "", "netns: extra crownd flags (space separated), after --verify-acks, which every netns node runs with")
	fs.StringVar(&o.composeFile, "compose-file", "scripts/docker/docker-compose.yml", "docker: compose file")
	fs.StringVar(&o.dockerImage, "image", "crown:latest", "docker: image to run")
	fs.IntVar(&o.dockerPort, "docker-port", 16632, "docker: host port of node1 (node2, node3 follow)")
	fs.DurationVar(&o.progress, "progress", 5*time.Second, "interval of the progress line (0: off)")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	o.scenarios = scen
	if rc := noArgs(fs, "run", stderr); rc >= 0 {
		return rc
	}
	if (len(o.scenarios) == 0) == !o.random {
		fmt.Fprintln(stderr, "crown-chaos run: give --scenario FILE... or --random (not both)")
		return exitUsage
	}
	if o.random {
		if rc := positiveDuration("run", o.duration, stderr); rc >= 0 {
			return rc
		}
	}
	if o.backend != "netns" && o.backend != "docker" {
		fmt.Fprintf(stderr, "crown-chaos run: --backend must be netns or docker\n")
		return exitUsage
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &runner{o: o, out: stdout, errw: stderr}
	return r.run(ctx)
}

// runner is one chaos run.
type runner struct {
	ctx    context.Context // the run's; cancelled by SIGINT/SIGTERM
	o      runOpts
	out    io.Writer
	errw   io.Writer
	be     nemesis.Backend
	hist   *history.Writer
	wl     *workload.Workload
	client *workload.Client
	nodes  []workload.Node
	rng    *rand.Rand

	mu           sync.Mutex
	windows      []*window
	nextWindow   int
	probeSeq     int
	probes       sync.WaitGroup
	probeStop    context.CancelCauseFunc // cancels the running recovery probe when a new fault begins
	probeTargets []probeTarget
	probeGen     int
	failures     []string // harness-level failures: no recovery, crashes
	scenario     string
	// wiped holds the nodes wiped and not yet seen caught up (their /health
	// raft.probation false); only the play loop touches it.
	wiped map[string]bool
}

type window struct {
	id       int
	label    string
	scenario string
	start    int64
	network  bool
	action   scenario.Action
	nodes    []string // process faults: the nodes still down
}

func (r *runner) logf(format string, a ...any) {
	t := 0.0
	if r.hist != nil {
		t = float64(r.hist.Now()) / 1e9
	}
	fmt.Fprintf(r.out, "[%7.1fs] %s\n", t, fmt.Sprintf(format, a...))
}

func (r *runner) fail(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	r.mu.Lock()
	r.failures = append(r.failures, msg)
	r.mu.Unlock()
	r.logf("FAILURE: %s", msg)
	if r.hist != nil {
		r.hist.Write(&history.Op{Kind: history.KindNote, Start: r.hist.Now(), Label: "failure: " + msg})
	}
}

func loadScenarios(paths []string) ([]*scenario.Scenario, error) {
	var out []*scenario.Scenario
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		files := []string{p}
		if st.IsDir() {
			files, _ = filepath.Glob(filepath.Join(p, "*.chaos"))
			slices.Sort(files)
			if len(files) == 0 {
				return nil, fmt.Errorf("%s: no *.chaos files", p)
			}
		}
		for _, f := range files {
			s, err := scenario.ParseFile(f)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
	return out, nil
}

func (r *runner) run(ctx context.Context) (rc int) {
	o := r.o
	r.ctx = ctx
	r.rng = rand.New(rand.NewPCG(o.seed, 0x72756e))
	var scens []*scenario.Scenario
	if o.random {
		s, err := scenario.Random(o.seed, scenario.RandomOptions{Duration: o.duration, ProcessOnly: o.backend == "docker"})
		if err != nil {
			fmt.Fprintln(r.errw, "crown-chaos run:", err)
			return exitError
		}
		scens = []*scenario.Scenario{s}
	} else {
		var err error
		if scens, err = loadScenarios(o.scenarios); err != nil {
			fmt.Fprintln(r.errw, "crown-chaos run:", err)
			return exitUsage
		}
	}
	if err := os.RemoveAll(o.reportDir); err != nil {
		fmt.Fprintln(r.errw, "crown-chaos run:", err)
		return exitError
	}
	dataDir := filepath.Join(o.reportDir, "data")
	logDir := filepath.Join(o.reportDir, "nodes")
	for _, d := range []string{o.reportDir, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			fmt.Fprintln(r.errw, "crown-chaos run:", err)
			return exitError
		}
	}
	var sched strings.Builder
	for _, s := range scens {
		sched.WriteString(scenario.Format(s) + "\n")
	}
	_ = os.WriteFile(filepath.Join(o.reportDir, "schedule.chaos"), []byte(sched.String()), 0o644)

	switch o.backend {
	case "netns":
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(r.errw, "crown-chaos run:", err)
			return exitError
		}
		crownd, err := filepath.Abs(o.crownd)
		if err == nil {
			_, err = os.Stat(crownd)
		}
		if err != nil {
			fmt.Fprintf(r.errw, "crown-chaos run: crownd binary %s: %v (run make build)\n", o.crownd, err)
			return exitUsage
		}
		absData, _ := filepath.Abs(dataDir)
		r.be = nemesis.NewNetns(nemesis.NetnsConfig{Crownd: crownd, Self: self, DataDir: absData, LogDir: logDir,
			Subnet: o.subnet, ExtraArgs: append([]string{"--verify-acks"}, strings.Fields(o.crowndArgs)...), Logf: r.logf})
	case "docker":
		r.be = nemesis.NewDocker(nemesis.DockerConfig{ComposeFile: o.composeFile, Image: o.dockerImage,
			FirstPort: o.dockerPort, LogDir: logDir, Logf: r.logf})
	}
	for _, s := range scens {
		for _, ev := range s.Events {
			if err := r.be.Supports(ev); err != nil {
				fmt.Fprintf(r.errw, "crown-chaos run: %s: %v\n", s.Name, err)
				return exitUsage
			}
		}
	}

	start := time.Now()
	h, err := history.Create(filepath.Join(o.reportDir, "history.jsonl"), start)
	if err != nil {
		fmt.Fprintln(r.errw, "crown-chaos run:", err)
		return exitError
	}
	r.hist = h
	r.client = workload.NewClient()
	r.nodes = r.be.Nodes()
	runID := fmt.Sprintf("r%x", start.UnixNano()&0xffffffffff)
	var queues, parts, groups []string
	for i := range o.queues {
		queues = append(queues, fmt.Sprintf("chaos-q%d", i+1))
	}
	for i := range o.partitions {
		parts = append(parts, fmt.Sprintf("p%d", i))
	}
	for i := range o.groups {
		if i == 0 {
			groups = append(groups, "")
		} else {
			groups = append(groups, fmt.Sprintf("g%d", i))
		}
	}
	meta := &history.Meta{RunID: runID, Started: start, Backend: r.be.Name(), Seed: o.seed, Nodes: map[string]string{},
		Queues: queues, Partitions: parts, Groups: groups, Command: strings.Join(os.Args, " "),
		LeaseSeconds: max(o.wl.LeaseSeconds, 1)}
	if o.wl.LeaseSeconds <= 0 {
		meta.LeaseSeconds = 5 // the workload's default
	}
	meta.Host, _ = os.Hostname()
	for _, n := range r.nodes {
		meta.Nodes[n.ID] = n.URL
	}
	for _, s := range scens {
		meta.Scenarios = append(meta.Scenarios, s.Name)
	}
	h.Write(&history.Op{Kind: history.KindMeta, Meta: meta})
	r.logf("run %s: backend %s, seed %d, %d scenario(s): %s; report in %s", runID, r.be.Name(), o.seed, len(scens),
		strings.Join(meta.Scenarios, ", "), o.reportDir)

	cleanedUp := false
	cleanup := func() {
		if cleanedUp {
			return
		}
		cleanedUp = true
		// Bounded waits: a harness bug must not keep the nodes and the
		// network alive.
		waitFor := func(what string, f func()) {
			done := make(chan struct{})
			go func() { f(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				r.logf("cleanup: %s still busy after 30s; going on", what)
			}
		}
		if r.wl != nil {
			r.wl.Abort()
			waitFor("workload", r.wl.Wait)
		}
		waitFor("recovery probe", r.probes.Wait)
		if ux, ok := r.be.(interface{ UnexpectedExits() []string }); ok {
			for _, u := range ux.UnexpectedExits() {
				r.fail("node crashed: %s", u)
			}
		}
		if err := r.be.Close(); err != nil {
			r.logf("cleanup: %v", err)
		}
		if err := h.Close(); err != nil {
			// Records the writer dropped would leave the checker judging
			// part of the run: a pass would prove nothing.
			r.fail("history incomplete: %v", err)
		}
	}
	defer cleanup()

	if err := r.be.Start(ctx); err != nil {
		r.logf("start: %v", err)
		return exitError
	}
	if err := r.waitReady(ctx, 60*time.Second); err != nil {
		r.logf("cluster not ready: %v", err)
		return exitError
	}
	wcfg := o.wl
	wcfg.NoFailures = wcfg.FailureRate == 0
	wcfg.RunID, wcfg.Nodes, wcfg.Queues, wcfg.Partitions, wcfg.Groups, wcfg.Seed = runID, r.nodes, queues, parts, groups, o.seed
	for _, q := range append(slices.Clone(queues), "chaos-probe") {
		if err := r.configure(ctx, q, wcfg.LeaseSeconds); err != nil {
			r.logf("configure %s: %v", q, err)
			return exitError
		}
	}
	r.wl = workload.New(wcfg, h, r.client)
	r.wl.Start(ctx)
	progressDone := make(chan struct{})
	stopProgress := sync.OnceFunc(func() { close(progressDone) })
	go r.progressLoop(progressDone)
	defer stopProgress()
	wc := r.wl.Config()
	r.logf("workload: %d queues x %d partitions (one producer each, %.1f pushes/s), groups %s, %d consumers per queue and group, lease %ds, failure rate %.0f%%",
		len(queues), len(parts), wc.PushRate, strings.Join(checker.GroupNames(groups), ","), wc.ConsumersPerGroup, wc.LeaseSeconds, wc.FailureRate*100)
	sleepCtx(ctx, o.warmup)

	for _, s := range scens {
		if ctx.Err() != nil {
			break
		}
		r.playScenario(ctx, s)
	}
	if ctx.Err() != nil {
		r.logf("interrupted: cleaning up")
		cleanup()
		return 130
	}

	// Everything healed (each scenario ends healed): drain and check.
	r.logf("stopping producers (unresolved pushes are retried for up to 30s)")
	r.wl.StopProducers(time.Now().Add(30 * time.Second))
	r.logf("draining every consumer group (up to %s)", o.drainWait)
	ok, missing := r.wl.Drain(o.drainWait)
	if ok {
		r.note("drain complete: every group completed every confirmed message")
	} else {
		r.note("drain incomplete after " + o.drainWait.String() + ": " + missing)
	}
	r.wl.StopConsumers()
	// The workload is over: a progress line would repeat its last counts
	// through the checks and the teardown below.
	stopProgress()
	r.final(ctx, queues, parts)
	if wc.Deletes {
		r.verifyDeletes(ctx)
	}
	r.logf("stopping the cluster (%s backend)", r.be.Name())
	cleanup()
	if ctx.Err() != nil {
		r.logf("interrupted")
		return 130
	}

	ops, err := history.ReadFile(filepath.Join(o.reportDir, "history.jsonl"))
	if err != nil {
		fmt.Fprintln(r.errw, "crown-chaos run: read history:", err)
		return exitError
	}
	r.mu.Lock()
	rep := buildReport(ops, r.failures)
	r.mu.Unlock()
	if err := report.WriteDir(o.reportDir, rep); err != nil {
		fmt.Fprintln(r.errw, "crown-chaos run: report:", err)
		return exitError
	}
	fmt.Fprintln(r.out)
	report.WriteText(r.out, rep)
	fmt.Fprintf(r.out, "\nreport: %s\n", strings.Join(report.Files(o.reportDir), ", "))
	if rep.Passed {
		if !o.keepData {
			_ = os.RemoveAll(dataDir)
		}
		return exitOK
	}
	if o.backend == "netns" {
		fmt.Fprintf(r.out, "node data kept in %s, logs in %s\n", dataDir, logDir)
	}
	return exitViolation
}

// buildReport checks the history and reports it with the run's failures.
// Each failure r.fail recorded is a note of the history, which report.Build
// lists already; only one the history lacks (its write failed) is added, so
// that every failure appears once and still fails the run.
func buildReport(ops []history.Op, failures []string) *report.Report {
	rep := report.Build(ops, checker.Check(ops, checker.Options{RequireFinal: true}))
	listed := map[string]int{}
	for _, f := range rep.Failures {
		listed[f]++
	}
	for _, f := range failures {
		if listed[f] > 0 {
			listed[f]--
			continue
		}
		rep.Failures = append(rep.Failures, f)
		rep.Passed = false
	}
	return rep
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *runner) note(s string) {
	r.logf("%s", s)
	r.hist.Write(&history.Op{Kind: history.KindNote, Start: r.hist.Now(), Label: s})
}

func (r *runner) progressLoop(done chan struct{}) {
	if r.o.progress <= 0 {
		return
	}
	t := time.NewTicker(r.o.progress)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			c := &r.wl.C
			r.mu.Lock()
			var open []string
			for _, w := range r.windows {
				open = append(open, w.label)
			}
			r.mu.Unlock()
			faults := "none"
			if len(open) > 0 {
				faults = strings.Join(open, "; ")
			}
			r.logf("pushes %d ok/%d fail/%d unknown (%d msgs) | pops %d ok/%d fail/%d unknown (%d delivered) | acks %d ok/%d fail/%d unknown | faults: %s",
				c.PushOK.Load(), c.PushFail.Load(), c.PushUnknown.Load(), c.Pushed.Load(),
				c.PopOK.Load(), c.PopFail.Load(), c.PopUnknown.Load(), c.Delivered.Load(),
				c.AckOK.Load(), c.AckFail.Load(), c.AckUnknown.Load(), faults)
		}
	}
}

// configure sets the queue options the checker relies on: short leases and
// a retry budget that is never exhausted (nothing is dead-lettered, so only
// completed acks move positions).
func (r *runner) configure(ctx context.Context, queue string, lease int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := r.nodes[r.rng.IntN(len(r.nodes))]
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		a := r.client.Configure(cctx, n.URL, queue, map[string]any{"leaseTime": lease, "retryLimit": 1_000_000_000})
		cancel()
		if a.Outcome == history.OK {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New(a.Error)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// ---- cluster views ----

type nodeHealth struct {
	id     string
	status int
	state  string
	leader string
	term   uint64
	// probation: the node's log started empty and it has not caught up
	// with a leader yet (raftnode/DESIGN.md).
	probation bool
	err       error
}

func (r *runner) health(ctx context.Context) []nodeHealth {
	out := make([]nodeHealth, len(r.nodes))
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer cancel()
			h, err := r.client.Health(cctx, n.URL)
			out[i] = nodeHealth{id: n.ID, status: h.Status, state: h.Raft.State, leader: h.Raft.LeaderID, term: h.Raft.Term,
				probation: h.Raft.Probation, err: err}
		}()
	}
	wg.Wait()
	return out
}

// leader returns the node that reports itself leader with the highest term,
// among running nodes.
func (r *runner) leader(ctx context.Context, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		best, term := "", uint64(0)
		for _, h := range r.health(ctx) {
			if h.err == nil && h.state == "Leader" && r.be.State(h.id) == nemesis.Running && (best == "" || h.term > term) {
				best, term = h.id, h.term
			}
		}
		if best != "" {
			return best, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("no leader within %s", wait)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// healthy reports whether every running node answers /health 200 and all
// name the same leader.
func (r *runner) healthy(ctx context.Context) (bool, string) {
	leader := ""
	for _, h := range r.health(ctx) {
		if r.be.State(h.id) != nemesis.Running {
			continue
		}
		if h.err != nil {
			return false, fmt.Sprintf("%s: %v", h.id, h.err)
		}
		if h.status != 200 {
			return false, fmt.Sprintf("%s: status %d (%s)", h.id, h.status, h.state)
		}
		if leader == "" {
			leader = h.leader
		} else if h.leader != leader {
			return false, fmt.Sprintf("%s sees leader %s, others %s", h.id, h.leader, leader)
		}
	}
	return true, ""
}

func (r *runner) waitReady(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		ok, why := r.healthy(ctx)
		if ok {
			if l, err := r.leader(ctx, time.Second); err == nil {
				r.logf("cluster ready: leader %s", l)
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New(why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// states reads every node's digest (and, when totals is set, the stored
// messages per partition).
func (r *runner) states(ctx context.Context, queues []string) []history.NodeState {
	out := make([]history.NodeState, len(r.nodes))
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := history.NodeState{Node: n.ID}
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			var err error
			s.AppliedIndex, s.Digest, err = r.client.Digest(cctx, n.URL)
			if err != nil {
				s.Error = err.Error()
			}
			if len(queues) > 0 && err == nil {
				s.Totals = map[string]int64{}
				for _, q := range queues {
					t, err := r.client.PartitionTotals(cctx, n.URL, q, true)
					if err != nil {
						s.Error = "totals: " + err.Error()
						break
					}
					for p, v := range t {
						s.Totals[q+"/"+p] = v
					}
				}
			}
			out[i] = s
		}()
	}
	wg.Wait()
	return out
}

func converged(states []history.NodeState) bool {
	for _, s := range states {
		if s.Error != "" || s.AppliedIndex != states[0].AppliedIndex || s.Digest != states[0].Digest {
			return false
		}
	}
	return len(states) > 0
}

// checkpoint quiesces the workload and waits until every node reports the
// same applied index and digest.
func (r *runner) checkpoint(ctx context.Context, label string) bool {
	start := r.hist.Now()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := r.wl.Pause(pctx); err != nil {
		r.logf("checkpoint: workload not quiet after 30s (%v); checking anyway", err)
	}
	cancel()
	defer r.wl.Resume()
	st := r.awaitConvergence(ctx, r.o.convergeWait)
	ok := converged(st)
	r.hist.Write(&history.Op{Kind: history.KindCheckpoint, Start: start, End: r.hist.Now(), Label: label,
		Scenario: r.scenario, States: st, Passed: &ok})
	if ok {
		r.logf("checkpoint %s: converged at applied index %d (digest %.12s) in %.1fs", label, st[0].AppliedIndex,
			st[0].Digest, float64(r.hist.Now()-start)/1e9)
	} else {
		var parts []string
		for _, s := range st {
			parts = append(parts, fmt.Sprintf("%s %d/%.12s %s", s.Node, s.AppliedIndex, s.Digest, s.Error))
		}
		r.logf("checkpoint %s: NOT converged within %s: %s", label, r.o.convergeWait, strings.Join(parts, "; "))
	}
	return ok
}

// awaitConvergence reads every node's state until all agree or wait
// passes, and returns the last reading.
func (r *runner) awaitConvergence(ctx context.Context, wait time.Duration) []history.NodeState {
	deadline := time.Now().Add(wait)
	for {
		st := r.states(ctx, nil)
		if converged(st) || time.Now().After(deadline) || ctx.Err() != nil {
			return st
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// final records the state after the drain: digests, once equal, and the
// stored messages per partition on every node.
// verifyDeletes reads back what the deletion worker confirmed through every
// node (workload/deletes.go); a disagreement is a failure of the run.
func (r *runner) verifyDeletes(ctx context.Context) {
	problems := r.wl.VerifyDeletes(ctx)
	for _, p := range problems {
		r.fail("message deletion: %s", p)
	}
	if len(problems) == 0 {
		dc := r.wl.DeleteCounts()
		r.note(fmt.Sprintf("message deletion: %d of %d confirmed messages deleted, every node reads exactly the others "+
			"(%d not checked: the delete went unanswered)", dc.Deleted, dc.Pushed, dc.Unverified))
	}
}

// withCounts joins converged digests with a second reading that added the
// stored counts. When that reading is not converged, something committed
// between the two (a timer): the counts are taken, the digests kept. A
// count read that failed keeps its error beside its partial totals, so that
// the checker does not take a partition the read missed for an empty one.
func withCounts(digests, counts []history.NodeState) []history.NodeState {
	if converged(counts) {
		return counts
	}
	out := slices.Clone(digests)
	for i := range out {
		out[i].Totals, out[i].Error = counts[i].Totals, counts[i].Error
	}
	return out
}

func (r *runner) final(ctx context.Context, queues, parts []string) {
	start := r.hist.Now()
	st := r.awaitConvergence(ctx, 2*r.o.convergeWait)
	ok := converged(st)
	if ok {
		st = withCounts(st, r.states(ctx, queues))
	}
	r.hist.Write(&history.Op{Kind: history.KindFinal, Start: start, End: r.hist.Now(), States: st, Passed: &ok, Label: "final"})
	if ok {
		r.logf("final state: all nodes at applied index %d, digest %.16s", st[0].AppliedIndex, st[0].Digest)
	} else {
		r.logf("final state: NOT converged")
	}
}
