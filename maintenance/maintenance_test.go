package maintenance_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/maintenance"
	"github.com/crownmq/crown/segments"
)

// ---- fakes ----

// call is one Propose the runner made.
type call struct {
	round int // SweepTargets calls made before it (retention rounds started)
	cmd   fsm.Command
	live  bool // the context was not cancelled when Propose was called
}

// fakeState lists fixed sweep targets and counts retention rounds.
type fakeState struct {
	mu      sync.Mutex
	queues  []string
	err     error
	rounds  int
	onRound func(int)
}

func (s *fakeState) SweepTargets() ([]string, error) {
	s.mu.Lock()
	s.rounds++
	n, q, err, hook := s.rounds, append([]string(nil), s.queues...), s.err, s.onRound
	s.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	return q, err
}

func (s *fakeState) round() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rounds
}

// fakeProposer records every call and answers with respond.
type fakeProposer struct {
	state    *fakeState
	respond  func(ctx context.Context, cmd fsm.Command, n int) (any, error)
	mu       sync.Mutex
	calls    []call
	inFlight atomic.Int32
	maxIn    atomic.Int32 // most retention sweeps in flight at once
}

func (p *fakeProposer) Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error) {
	p.mu.Lock()
	p.calls = append(p.calls, call{round: p.state.round(), cmd: cmd, live: ctx.Err() == nil})
	n := len(p.calls)
	p.mu.Unlock()
	if _, ok := cmd.(*fsm.Sweep); ok {
		in := p.inFlight.Add(1)
		defer p.inFlight.Add(-1)
		for {
			m := p.maxIn.Load()
			if in <= m || p.maxIn.CompareAndSwap(m, in) {
				break
			}
		}
	}
	if p.respond != nil {
		res, err := p.respond(ctx, cmd, n)
		return res, uint64(n), err
	}
	return defaultResult(cmd), uint64(n), nil
}

func defaultResult(cmd fsm.Command) any {
	switch cmd.(type) {
	case *fsm.Sweep:
		return &fsm.SweepResult{}
	case *fsm.ExpireLeases:
		return &fsm.ExpireLeasesResult{}
	}
	return nil
}

func (p *fakeProposer) snapshot() []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]call(nil), p.calls...)
}

func (p *fakeProposer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// sweepQueue names the queue of a retention sweep, "" for other commands.
func sweepQueue(c fsm.Command) string {
	if s, ok := c.(*fsm.Sweep); ok {
		return s.Queue
	}
	return ""
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// metric reads one sample from a registry: a gauge or counter with the
// given label pairs; absent series read as 0.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func newRunner(t *testing.T, cfg maintenance.Config, p maintenance.Proposer, s maintenance.State) (*maintenance.Runner, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registry = reg
	r := maintenance.New(cfg, p, s)
	t.Cleanup(r.Close)
	return r, reg
}

// ---- tests ----

func TestRunnerIdleUntilLeader(t *testing.T) {
	st := &fakeState{queues: []string{"q"}}
	p := &fakeProposer{state: st}
	r, reg := newRunner(t, maintenance.Config{RetentionInterval: 5 * time.Millisecond, LeaseInterval: 5 * time.Millisecond}, p, st)
	time.Sleep(100 * time.Millisecond)
	if n := p.count(); n != 0 || st.round() != 0 {
		t.Fatalf("a runner that never led proposed %d commands in %d rounds", n, st.round())
	}
	if v := metric(t, reg, "crown_maintenance_active"); v != 0 {
		t.Fatalf("crown_maintenance_active %v before leadership", v)
	}
	r.SetLeader(false) // not leader, stays so: a no-op
	time.Sleep(20 * time.Millisecond)
	if p.count() != 0 {
		t.Fatal("SetLeader(false) on a follower started timers")
	}
	r.SetLeader(true)
	if v := metric(t, reg, "crown_maintenance_active"); v != 1 {
		t.Fatalf("crown_maintenance_active %v on the leader", v)
	}
	waitFor(t, "a retention sweep and a lease sweep", 5*time.Second, func() bool {
		var sweep, lease bool
		for _, c := range p.snapshot() {
			switch c.cmd.(type) {
			case *fsm.Sweep:
				sweep = true
			case *fsm.ExpireLeases:
				lease = true
			}
		}
		return sweep && lease
	})
}

func TestRunnerStopsWhenLeadershipLost(t *testing.T) {
	st := &fakeState{queues: []string{"a", "b"}}
	p := &fakeProposer{state: st}
	r, reg := newRunner(t, maintenance.Config{RetentionInterval: 2 * time.Millisecond, LeaseInterval: 3 * time.Millisecond}, p, st)
	r.SetLeader(true)
	waitFor(t, "sweeps", 5*time.Second, func() bool { return p.count() >= 20 })
	r.SetLeader(false)
	stoppedAt := p.count()
	if v := metric(t, reg, "crown_maintenance_active"); v != 0 {
		t.Fatalf("crown_maintenance_active %v after losing leadership", v)
	}
	time.Sleep(100 * time.Millisecond)
	calls := p.snapshot()
	for i, c := range calls[stoppedAt:] {
		if c.live {
			t.Fatalf("proposal %d (%T) with a live context after SetLeader(false)", stoppedAt+i, c.cmd)
		}
	}
	// A round already under way may have made one last, cancelled call;
	// after that nothing at all.
	settled := p.count()
	time.Sleep(100 * time.Millisecond)
	if n := p.count(); n != settled {
		t.Fatalf("%d proposals after the timers stopped", n-settled)
	}
	if settled-stoppedAt > 2 {
		t.Fatalf("%d proposals after SetLeader(false) returned", settled-stoppedAt)
	}
	// Regaining leadership restarts them.
	r.SetLeader(true)
	waitFor(t, "sweeps after regaining leadership", 5*time.Second, func() bool { return p.count() > settled+5 })
	r.SetLeader(false)
}

// A proposal blocked in Raft when leadership is lost is cancelled: the
// round ends quietly and Close does not hang.
func TestRunnerLosingLeadershipCancelsInFlightProposal(t *testing.T) {
	st := &fakeState{queues: []string{"q"}}
	entered := make(chan struct{}, 1)
	p := &fakeProposer{state: st, respond: func(ctx context.Context, cmd fsm.Command, _ int) (any, error) {
		if _, ok := cmd.(*fsm.Sweep); !ok {
			return defaultResult(cmd), nil
		}
		select {
		case entered <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	r, _ := newRunner(t, maintenance.Config{RetentionInterval: 5 * time.Millisecond, LeaseInterval: time.Hour}, p, st)
	r.SetLeader(true)
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no sweep proposed")
	}
	done := make(chan struct{})
	go func() {
		r.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung on an in-flight proposal")
	}
	n := p.count()
	time.Sleep(50 * time.Millisecond)
	if p.count() != n {
		t.Fatal("proposals after Close")
	}
}

// SetLeader(true) twice must not start a second set of timers: retention
// sweeps are never proposed concurrently.
func TestRunnerSetLeaderTwiceStartsOneTimerSet(t *testing.T) {
	st := &fakeState{queues: []string{"q"}}
	p := &fakeProposer{state: st, respond: func(_ context.Context, cmd fsm.Command, _ int) (any, error) {
		time.Sleep(3 * time.Millisecond)
		return defaultResult(cmd), nil
	}}
	r, _ := newRunner(t, maintenance.Config{RetentionInterval: time.Millisecond, LeaseInterval: time.Hour}, p, st)
	r.SetLeader(true)
	r.SetLeader(true)
	waitFor(t, "sweeps", 5*time.Second, func() bool { return p.count() >= 30 })
	r.Close() // stop and wait: no proposal or metric update in flight
	if m := p.maxIn.Load(); m != 1 {
		t.Fatalf("%d retention sweeps in flight at once", m)
	}
}

// While a sweep reports More the next one follows in the same round, with
// the configured budget; the other queues are swept after it.
func TestRunnerRepeatsSweepWhileMore(t *testing.T) {
	st := &fakeState{queues: []string{"big", "small"}}
	var bigSweeps atomic.Int32
	p := &fakeProposer{state: st, respond: func(_ context.Context, cmd fsm.Command, _ int) (any, error) {
		s, ok := cmd.(*fsm.Sweep)
		if !ok {
			return defaultResult(cmd), nil
		}
		res := &fsm.SweepResult{}
		if s.Queue == "big" {
			if n := bigSweeps.Add(1); n <= 5 {
				res.Segments[fsm.RuleRetention], res.Messages[fsm.RuleRetention] = uint64(s.MaxSegments), 2*uint64(s.MaxSegments)
				res.More = n < 5
			}
		} else {
			res.Segments[fsm.RuleMaxWait], res.Messages[fsm.RuleMaxWait] = 1, 1
		}
		return res, nil
	}}
	r, reg := newRunner(t, maintenance.Config{RetentionInterval: 20 * time.Millisecond, RetentionBatch: 7, LeaseInterval: time.Hour}, p, st)
	r.SetLeader(true)
	waitFor(t, "two rounds", 5*time.Second, func() bool {
		for _, c := range p.snapshot() {
			if c.round >= 2 {
				return true
			}
		}
		return false
	})
	r.Close() // stop and wait: no proposal or metric update in flight
	var first []string
	for _, c := range p.snapshot() {
		if c.round == 1 {
			s := c.cmd.(*fsm.Sweep)
			if s.MaxSegments != 7 {
				t.Fatalf("sweep budget %d, want RETENTION_BATCH_SIZE 7", s.MaxSegments)
			}
			first = append(first, s.Queue)
		}
	}
	if want := "[big big big big big small]"; fmt.Sprint(first) != want {
		t.Fatalf("first round swept %v, want %s", first, want)
	}
	if v := metric(t, reg, "crown_sweep_segments_deleted_total", "rule", "retention"); v != 35 {
		t.Fatalf("segments deleted (retention) %v, want 35", v)
	}
	if v := metric(t, reg, "crown_sweep_messages_deleted_total", "rule", "retention"); v != 70 {
		t.Fatalf("messages deleted (retention) %v, want 70", v)
	}
	commands := metric(t, reg, "crown_sweep_commands_total", "kind", "retention")
	if int(commands) != p.count() {
		t.Fatalf("crown_sweep_commands_total %v for %d committed sweeps", commands, p.count())
	}
	small := 0
	for _, c := range p.snapshot() {
		if sweepQueue(c.cmd) == "small" {
			small++
		}
	}
	if v := metric(t, reg, "crown_sweep_segments_deleted_total", "rule", "max_wait"); v < 1 || int(v) != small {
		t.Fatalf("segments deleted (max_wait) %v after %d sweeps of the queue", v, small)
	}
}

// A failed proposal (not leader, timeout, a refused command) ends the round:
// no retry loop, no sweep of the remaining queues until the next tick.
func TestRunnerProposalErrorEndsRound(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func() (any, error)
	}{
		{"error", func() (any, error) { return nil, errors.New("not the leader") }},
		{"refused", func() (any, error) { return &fsm.ErrorResult{Err: "sweep refused"}, nil }},
		{"cancelled", func() (any, error) { return nil, context.Canceled }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &fakeState{queues: []string{"a", "b", "c"}}
			p := &fakeProposer{state: st, respond: func(_ context.Context, cmd fsm.Command, _ int) (any, error) {
				if s, ok := cmd.(*fsm.Sweep); ok && s.Queue == "b" {
					return tc.fail()
				}
				if _, ok := cmd.(*fsm.ExpireLeases); ok {
					return tc.fail()
				}
				return &fsm.SweepResult{More: false}, nil
			}}
			r, reg := newRunner(t, maintenance.Config{RetentionInterval: 10 * time.Millisecond, LeaseInterval: 10 * time.Millisecond}, p, st)
			r.SetLeader(true)
			waitFor(t, "five rounds", 5*time.Second, func() bool { return st.round() >= 6 })
			r.Close() // stop and wait: no proposal or metric update in flight
			perRound := map[int][]string{}
			leases := 0
			for _, c := range p.snapshot() {
				if q := sweepQueue(c.cmd); q != "" {
					perRound[c.round] = append(perRound[c.round], q)
				} else {
					leases++
				}
			}
			for round := 1; round <= 5; round++ {
				if got := fmt.Sprint(perRound[round]); got != "[a b]" {
					t.Fatalf("round %d swept %s, want [a b] (the failure ends the round)", round, got)
				}
			}
			// Lease sweeps: one attempt per tick, no spinning on the failure.
			if leases > 2*st.round()+5 {
				t.Fatalf("%d lease-sweep attempts in %d retention rounds", leases, st.round())
			}
			// Only committed sweeps count.
			if v := metric(t, reg, "crown_sweep_commands_total", "kind", "retention"); int(v) != p.count()-leases-len(perRoundAll(perRound, "b")) {
				t.Fatalf("crown_sweep_commands_total %v", v)
			}
			if v := metric(t, reg, "crown_sweep_commands_total", "kind", "leases"); v != 0 {
				t.Fatalf("failed lease sweeps counted: %v", v)
			}
		})
	}
}

func perRoundAll(m map[int][]string, q string) []string {
	var out []string
	for _, qs := range m {
		for _, x := range qs {
			if x == q {
				out = append(out, x)
			}
		}
	}
	return out
}

// A SweepTargets failure skips the round without proposing anything.
func TestRunnerTargetsErrorSkipsRound(t *testing.T) {
	st := &fakeState{queues: []string{"a"}, err: errors.New("disk on fire")}
	p := &fakeProposer{state: st}
	r, _ := newRunner(t, maintenance.Config{RetentionInterval: 2 * time.Millisecond, LeaseInterval: time.Hour}, p, st)
	r.SetLeader(true)
	waitFor(t, "rounds", 5*time.Second, func() bool { return st.round() >= 5 })
	r.Close() // stop and wait: no proposal or metric update in flight
	if n := p.count(); n != 0 {
		t.Fatalf("%d proposals without targets", n)
	}
}

// Lease sweeps repeat while More, with the configured grace and budget, and
// count what they cleared.
func TestRunnerLeaseSweepRepeatsWhileMore(t *testing.T) {
	st := &fakeState{}
	var n atomic.Int32
	p := &fakeProposer{state: st, respond: func(_ context.Context, cmd fsm.Command, _ int) (any, error) {
		if _, ok := cmd.(*fsm.ExpireLeases); !ok {
			return defaultResult(cmd), nil
		}
		k := n.Add(1)
		if k <= 3 {
			return &fsm.ExpireLeasesResult{Cleared: 10, More: k < 3}, nil
		}
		return &fsm.ExpireLeasesResult{}, nil
	}}
	r, reg := newRunner(t, maintenance.Config{RetentionInterval: time.Hour, LeaseInterval: 10 * time.Millisecond,
		LeaseGrace: 2 * time.Second, LeaseBatch: 10}, p, st)
	r.SetLeader(true)
	waitFor(t, "lease sweeps", 5*time.Second, func() bool { return n.Load() >= 5 })
	r.Close() // stop and wait: no proposal or metric update in flight
	calls := p.snapshot()
	for _, c := range calls {
		el := c.cmd.(*fsm.ExpireLeases)
		if el.Grace != (2*time.Second).Microseconds() || el.Max != 10 {
			t.Fatalf("lease sweep %+v", el)
		}
	}
	if v := metric(t, reg, "crown_sweep_leases_cleared_total"); v != 30 {
		t.Fatalf("crown_sweep_leases_cleared_total %v, want 30", v)
	}
	if v := metric(t, reg, "crown_sweep_commands_total", "kind", "leases"); int(v) != len(calls) {
		t.Fatalf("crown_sweep_commands_total{kind=leases} %v for %d sweeps", v, len(calls))
	}
}

// ---- against a real state machine ----

// fsmProposer applies each command as its own log entry to a real state
// machine, stamped with a clock the test controls, as a leader would.
type fsmProposer struct {
	t     *testing.T
	f     *fsm.FSM
	mu    sync.Mutex
	index uint64
	now   time.Time
}

func (p *fsmProposer) apply(cmds ...fsm.Command) []any {
	res, _ := p.applyAt(cmds...)
	return res
}

// applyAt applies commands as one entry and returns their results and the
// entry's index. The runner's timers propose from several goroutines.
func (p *fsmProposer) applyAt(cmds ...fsm.Command) ([]any, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := fsm.AppendEntry(nil, &fsm.Entry{Stamp: p.now.UnixMicro(), Origin: "n1", Commands: cmds})
	if err != nil {
		p.t.Error(err)
		return nil, 0
	}
	p.index++
	r := p.f.ApplyBatch([]*raft.Log{{Index: p.index, Term: 1, Type: raft.LogCommand, Data: b}})[0]
	er, ok := r.(*fsm.EntryResult)
	if !ok {
		p.t.Errorf("entry result %T %+v", r, r)
		return nil, 0
	}
	return er.Results, p.index
}

func (p *fsmProposer) Propose(_ context.Context, cmd fsm.Command) (any, uint64, error) {
	res, index := p.applyAt(cmd)
	if len(res) != 1 {
		return nil, 0, errors.New("no result")
	}
	return res[0], index, nil
}

func (p *fsmProposer) advance(d time.Duration) {
	p.mu.Lock()
	p.now = p.now.Add(d)
	p.mu.Unlock()
}

// The runner deletes a real backlog through the state machine in steps of
// RetentionBatch segments, one entry each, until the queue is clean, and
// the metrics match what was deleted.
func TestRunnerSweepsRealBacklogInBoundedSteps(t *testing.T) {
	f, err := fsm.Open(fsm.Config{Dir: t.TempDir(), NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	p := &fsmProposer{t: t, f: f, now: time.Date(2026, 5, 16, 8, 0, 0, 0, time.UTC)}
	o := fsm.DefaultOptions(segments.OriginConfigure)
	o.RetentionEnabled, o.RetentionSeconds = true, 60
	p.apply(&fsm.Configure{Queue: "q", Options: o})
	p.apply(&fsm.Configure{Queue: "plain", Options: fsm.DefaultOptions(segments.OriginConfigure)})
	const segs = 103
	for i := range segs {
		p.apply(&fsm.Push{Items: []fsm.PushItem{
			{Queue: "q", Partition: fmt.Sprintf("p%d", i%4), TxID: fmt.Sprintf("t%d", i), Payload: []byte(`{"n":1}`)},
			{Queue: "q", Partition: fmt.Sprintf("p%d", i%4), TxID: fmt.Sprintf("u%d", i), Payload: []byte(`2`)},
			{Queue: "plain", Partition: "p", TxID: fmt.Sprintf("t%d", i), Payload: []byte(`3`)},
		}})
	}
	p.advance(61 * time.Second)

	var sweeps atomic.Int32
	counting := &countingProposer{inner: p, onSweep: func(r *fsm.SweepResult) {
		sweeps.Add(1)
		if r.Segments[fsm.RuleRetention] > 10 {
			t.Errorf("a sweep deleted %d segments over a budget of 10", r.Segments[fsm.RuleRetention])
		}
	}}
	r, reg := newRunner(t, maintenance.Config{RetentionInterval: 5 * time.Millisecond, RetentionBatch: 10, LeaseInterval: time.Hour}, counting, f)
	r.SetLeader(true)
	waitFor(t, "the backlog deleted", 10*time.Second, func() bool {
		return metric(t, reg, "crown_sweep_segments_deleted_total", "rule", "retention") == segs
	})
	time.Sleep(30 * time.Millisecond) // more rounds: nothing more to delete
	r.Close()                         // stop and wait: no proposal or metric update in flight
	if n := sweeps.Load(); n < segs/10+1 {
		t.Fatalf("%d sweep commands for %d segments in steps of 10", n, segs)
	}
	if v := metric(t, reg, "crown_sweep_messages_deleted_total", "rule", "retention"); v != 2*segs {
		t.Fatalf("messages deleted %v, want %d", v, 2*segs)
	}
	if v := metric(t, reg, "crown_sweep_segments_deleted_total", "rule", "retention"); v != segs {
		t.Fatalf("segments deleted %v after the queue was clean", v)
	}
	for _, name := range []string{"q", "plain"} {
		v, err := f.QueueView(name, p.now.UnixMicro(), false)
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(0)
		if name == "plain" {
			want = segs // no rule: untouched
		}
		if v.Stats.Total != want {
			t.Fatalf("%s holds %d messages, want %d", name, v.Stats.Total, want)
		}
	}
	if targets, _ := f.SweepTargets(); fmt.Sprint(targets) != "[q]" {
		t.Fatalf("targets %v", targets)
	}
}

type countingProposer struct {
	inner   maintenance.Proposer
	onSweep func(*fsm.SweepResult)
}

func (c *countingProposer) Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error) {
	res, idx, err := c.inner.Propose(ctx, cmd)
	if sr, ok := res.(*fsm.SweepResult); ok && err == nil {
		c.onSweep(sr)
	}
	return res, idx, err
}

// Queues the runner is told to ensure are proposed once per leadership
// term, as an ensure-only command (it must not resume a paused queue), and
// retried while the proposal fails.
func TestRunnerEnsuresQueuesOnLeadership(t *testing.T) {
	st := &fakeState{}
	failures := atomic.Int32{}
	p := &fakeProposer{state: st, respond: func(_ context.Context, cmd fsm.Command, _ int) (any, error) {
		if _, ok := cmd.(*fsm.OJSSetState); ok && failures.Add(1) == 1 {
			return nil, errors.New("not committed")
		}
		return &fsm.OJSResult{}, nil
	}}
	r, _ := newRunner(t, maintenance.Config{RetentionInterval: time.Hour, LeaseInterval: time.Hour,
		EnsureQueues: []string{"default"}}, p, st)
	ensures := func() []*fsm.OJSSetState {
		var out []*fsm.OJSSetState
		for _, c := range p.snapshot() {
			if s, ok := c.cmd.(*fsm.OJSSetState); ok {
				out = append(out, s)
			}
		}
		return out
	}
	time.Sleep(20 * time.Millisecond)
	if n := len(ensures()); n != 0 {
		t.Fatalf("a follower proposed %d ensure commands", n)
	}
	r.SetLeader(true)
	waitFor(t, "the ensure command to commit after one failure", 5*time.Second, func() bool { return len(ensures()) == 2 })
	for _, s := range ensures() {
		if s.Name != "default" || !s.EnsureOnly || s.Pause {
			t.Fatalf("ensure command %+v", s)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(ensures()); n != 2 {
		t.Fatalf("%d ensure commands after one committed", n)
	}
}

// existingQueues is a state that also answers which queues exist.
type existingQueues struct {
	fakeState
	names map[string]bool
}

func (s *existingQueues) Queue(name string) (*fsm.QueueInfo, error) {
	if s.names[name] {
		return &fsm.QueueInfo{Name: name}, nil
	}
	return nil, nil
}

// A new leader whose state already holds the ensured queue proposes
// nothing, so restarting an idle cluster leaves its state and applied index
// as they were; a missing queue is still ensured.
func TestRunnerSkipsEnsuringExistingQueues(t *testing.T) {
	st := &existingQueues{names: map[string]bool{"default": true}}
	p := &fakeProposer{state: &st.fakeState, respond: func(context.Context, fsm.Command, int) (any, error) {
		return &fsm.OJSResult{}, nil
	}}
	r, _ := newRunner(t, maintenance.Config{RetentionInterval: time.Hour, LeaseInterval: time.Hour,
		EnsureQueues: []string{"default", "other"}}, p, st)
	r.SetLeader(true)
	waitFor(t, "the missing queue to be ensured", 5*time.Second, func() bool { return len(p.snapshot()) > 0 })
	r.Close()
	var names []string
	for _, c := range p.snapshot() {
		if s, ok := c.cmd.(*fsm.OJSSetState); ok {
			names = append(names, s.Name)
		}
	}
	if fmt.Sprint(names) != "[other]" {
		t.Fatalf("ensured %v, want only [other]", names)
	}
}

// A deleted message's id is remembered for the rest of its dedup window;
// once the window closed, the leader's sweep timer proposes that the memory
// be dropped, and the state machine drops it.
func TestRunnerForgetsExpiredDeletedTxIDs(t *testing.T) {
	f, err := fsm.Open(fsm.Config{Dir: t.TempDir(), NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	// The runner reads the wall clock; the state's time is set just behind it.
	p := &fsmProposer{t: t, f: f, now: time.Now().Add(-2 * time.Minute)}
	o := fsm.DefaultOptions(segments.OriginConfigure)
	o.DedupWindowSeconds = 60
	p.apply(&fsm.Configure{Queue: "q", Options: o})
	pr := p.apply(&fsm.Push{Items: []fsm.PushItem{{Queue: "q", Partition: "p", TxID: "gone", Payload: []byte(`1`)}}})[0].(*fsm.PushResult)
	p.apply(&fsm.DeleteMessage{Partition: pr.Items[0].PartitionID, TxID: "gone"})
	if due, _ := f.DeletedTxIDsDue(p.now.UnixMicro()); due {
		t.Fatal("due inside the window")
	}
	p.advance(2 * time.Minute)
	if due, _ := f.DeletedTxIDsDue(time.Now().UnixMicro()); !due {
		t.Fatal("not due after the window")
	}
	r, reg := newRunner(t, maintenance.Config{RetentionInterval: 5 * time.Millisecond, LeaseInterval: time.Hour}, p, f)
	r.SetLeader(true)
	waitFor(t, "the memory forgotten", 10*time.Second, func() bool {
		due, _ := f.DeletedTxIDsDue(time.Now().Add(time.Hour).UnixMicro())
		return !due
	})
	r.Close()
	if v := metric(t, reg, "crown_sweep_commands_total", "kind", "dedup"); v < 1 {
		t.Fatalf("dedup sweep commands %v", v)
	}
}
