//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/crownmq/crown/cmd/crown-chaos/history"
	"github.com/crownmq/crown/cmd/crown-chaos/nemesis"
	"github.com/crownmq/crown/cmd/crown-chaos/scenario"
	"github.com/crownmq/crown/cmd/crown-chaos/workload"
)

// playScenario runs one scenario's events at their times, then heals
// everything, waits for recovery and checks convergence.
func (r *runner) playScenario(ctx context.Context, s *scenario.Scenario) {
	r.mu.Lock()
	r.scenario = s.Name
	r.mu.Unlock()
	t0 := r.hist.Now()
	r.logf("== scenario %s (%s, %d events)%s", s.Name, s.Duration, len(s.Events), descr(s.Description))
	r.hist.Write(&history.Op{Kind: history.KindScenario, Start: t0, Label: "start", Scenario: s.Name})
	bindings := map[string][]string{}
	base := time.Now()
	for _, ev := range s.Events {
		if !sleepCtx(ctx, time.Until(base.Add(ev.At))) {
			return
		}
		r.exec(ctx, s, ev, bindings)
	}
	// Heal whatever the scenario left broken.
	r.healAll(ctx, s.Name)
	r.awaitProbes()
	if ctx.Err() != nil {
		return
	}
	if ok, why := r.waitHealthy(ctx, r.o.recoverWait); !ok && ctx.Err() == nil {
		r.fail("scenario %s: the cluster did not recover within %s after healing: %s", s.Name, r.o.recoverWait, why)
	}
	if !sleepCtx(ctx, r.o.settle) {
		return
	}
	r.checkpoint(ctx, s.Name+" end")
	r.hist.Write(&history.Op{Kind: history.KindScenario, Start: t0, End: r.hist.Now(), Label: "end", Scenario: s.Name})
}

func descr(d string) string {
	if d == "" {
		return ""
	}
	return ": " + d
}

func (r *runner) waitHealthy(ctx context.Context, d time.Duration) (bool, string) {
	deadline := time.Now().Add(d)
	for {
		ok, why := r.healthy(ctx)
		if ok {
			return true, ""
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false, why
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// healAll removes network faults, resumes paused nodes and starts stopped
// ones, closing every open window.
func (r *runner) healAll(ctx context.Context, scen string) {
	r.mu.Lock()
	open := len(r.windows)
	r.mu.Unlock()
	if open == 0 {
		return
	}
	ev := scenario.Event{Action: scenario.Heal}
	r.exec(ctx, &scenario.Scenario{Name: scen}, ev, nil)
	for _, id := range nemesis.NodeIDs {
		switch r.be.State(id) {
		case nemesis.Paused:
			r.exec(ctx, &scenario.Scenario{Name: scen}, scenario.Event{Action: scenario.Resume, Groups: [][]scenario.Sel{{scenario.Sel(selOf(id))}}}, nil)
		case nemesis.Killed, nemesis.Stopped:
			r.exec(ctx, &scenario.Scenario{Name: scen}, scenario.Event{Action: scenario.Restart, Groups: [][]scenario.Sel{{scenario.Sel(selOf(id))}}}, nil)
		}
	}
}

func selOf(id string) string { return "n" + strings.TrimPrefix(id, "node") }

// resolve turns one group of selectors into node ids (or "client").
func (r *runner) resolve(ctx context.Context, sels []scenario.Sel, named map[string]bool, bindings map[string][]string) ([]string, error) {
	var out []string
	addAll := func(ids ...string) {
		for _, id := range ids {
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	for _, s := range sels {
		if s == "rest" {
			continue
		}
		switch {
		case s.IsBinding():
			b, ok := bindings[string(s)]
			if !ok {
				return nil, fmt.Errorf("%s is not bound (the action that binds it failed?)", s)
			}
			addAll(b...)
		case strings.HasPrefix(string(s), "n") && len(s) == 2:
			addAll("node" + string(s[1:]))
		case s == "all":
			addAll(nemesis.NodeIDs...)
		case s == "client":
			addAll("client")
		case s == "random":
			addAll(nemesis.NodeIDs[r.rng.IntN(len(nemesis.NodeIDs))])
		case s == "killed" || s == "stopped" || s == "paused":
			want := map[scenario.Sel]string{"killed": nemesis.Killed, "stopped": nemesis.Stopped, "paused": nemesis.Paused}[s]
			for _, id := range nemesis.NodeIDs {
				st := r.be.State(id)
				if st == want || (s == "killed" && st == nemesis.Stopped) || (s == "stopped" && st == nemesis.Killed) {
					addAll(id)
				}
			}
		case s == "leader" || s == "follower" || s == "follower2" || s == "followers":
			l, err := r.leader(ctx, 10*time.Second)
			if err != nil {
				return nil, err
			}
			var fol []string
			for _, id := range nemesis.NodeIDs {
				if id != l {
					fol = append(fol, id)
				}
			}
			switch s {
			case "leader":
				addAll(l)
			case "follower":
				addAll(fol[0])
			case "follower2":
				addAll(fol[1])
			case "followers":
				addAll(fol...)
			}
		default:
			return nil, fmt.Errorf("unknown selector %q", s)
		}
	}
	for _, id := range out {
		named[id] = true
	}
	return out, nil
}

func (r *runner) resolveRest(sels []scenario.Sel, named map[string]bool, out []string) []string {
	if !slices.Contains(sels, "rest") {
		return out
	}
	for _, id := range nemesis.NodeIDs {
		if !named[id] && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// exec runs one event and records it.
func (r *runner) exec(ctx context.Context, s *scenario.Scenario, ev scenario.Event, bindings map[string][]string) {
	start := r.hist.Now()
	op := &history.Op{Kind: history.KindNemesis, Start: start, Label: ev.String(), Scenario: s.Name}
	err := r.do(ctx, s, ev, bindings, op)
	op.End = r.hist.Now()
	if err != nil {
		op.Error = err.Error()
	}
	r.hist.Write(op)
	tgt := ""
	if len(op.Targets) > 0 {
		tgt = " -> " + strings.Join(op.Targets, " ")
	}
	if err != nil {
		r.logf("%s: %s%s: ERROR %v", s.Name, ev, tgt, err)
	} else if ev.Action != scenario.Checkpoint && ev.Action != scenario.End {
		r.logf("%s: %s%s (%.2fs)", s.Name, ev, tgt, float64(op.End-start)/1e9)
	}
}

func (r *runner) do(ctx context.Context, s *scenario.Scenario, ev scenario.Event, bindings map[string][]string, op *history.Op) error {
	named := map[string]bool{}
	var groups [][]string
	for _, g := range ev.Groups {
		ids, err := r.resolve(ctx, g, named, bindings)
		if err != nil {
			return err
		}
		groups = append(groups, ids)
	}
	for i, g := range ev.Groups {
		groups[i] = r.resolveRest(g, named, groups[i])
	}
	var flat []string
	for i, g := range groups {
		if i > 0 {
			op.Targets = append(op.Targets, "|")
		}
		op.Targets = append(op.Targets, g...)
		for _, id := range g {
			if id != "client" && !slices.Contains(flat, id) {
				flat = append(flat, id)
			}
		}
	}
	if ev.Bind != "" && bindings != nil {
		bindings[ev.Bind] = flat
	}
	if ev.Action != scenario.Heal && ev.Action != scenario.Checkpoint && ev.Action != scenario.End && ev.Action != scenario.Partition && len(flat) == 0 {
		return errors.New("the selectors matched no node")
	}
	label := ev.String()
	if len(op.Targets) > 0 {
		label += " (" + strings.Join(op.Targets, " ") + ")"
	}
	switch ev.Action {
	case scenario.Partition:
		if err := r.be.Partition(groups); err != nil {
			return err
		}
		r.openWindow(label, ev.Action, true, nil)
	case scenario.Isolate:
		var rest []string
		for _, id := range nemesis.NodeIDs {
			if !slices.Contains(flat, id) {
				rest = append(rest, id)
			}
		}
		if err := r.be.Partition([][]string{flat, rest}); err != nil {
			return err
		}
		r.openWindow(label, ev.Action, true, nil)
	case scenario.Cut:
		if err := r.be.Cut(groups[0], groups[1]); err != nil {
			return err
		}
		r.openWindow(label, ev.Action, true, nil)
	case scenario.Netem:
		if err := r.be.Netem(flat, ev.Netem); err != nil {
			return err
		}
		r.openWindow(label, ev.Action, true, nil)
	case scenario.Flap:
		if err := r.be.Flap(flat, ev.Period); err != nil {
			return err
		}
		r.openWindow(label, ev.Action, true, nil)
	case scenario.Heal:
		err := r.be.Heal()
		r.closeWindows(func(w *window) bool { return w.network })
		return err
	case scenario.Kill, scenario.Wipe, scenario.Stop, scenario.Pause:
		var errs []error
		var done []string
		for _, id := range flat {
			var err error
			switch ev.Action {
			case scenario.Kill:
				err = r.be.Kill(id)
			case scenario.Wipe:
				if why := r.wipeBlocked(ctx, id); why != "" {
					r.logf("%s: wipe of %s skipped: %s", s.Name, id, why)
					continue
				}
				if err = r.be.Wipe(id); err == nil {
					if r.wiped == nil {
						r.wiped = map[string]bool{}
					}
					r.wiped[id] = true
				}
			case scenario.Stop:
				err = r.be.Terminate(id)
			case scenario.Pause:
				err = r.be.Pause(id)
			}
			if err != nil {
				errs = append(errs, err)
			} else {
				done = append(done, id)
			}
		}
		r.client.CloseIdle()
		if len(done) > 0 {
			r.openWindow(label, ev.Action, false, done)
		}
		return errors.Join(errs...)
	case scenario.Restart, scenario.Resume:
		var errs []error
		for _, id := range flat {
			st := r.be.State(id)
			var err error
			switch {
			case ev.Action == scenario.Restart && (st == nemesis.Killed || st == nemesis.Stopped):
				err = r.be.StartNode(id)
			case ev.Action == scenario.Resume && st == nemesis.Paused:
				err = r.be.Resume(id)
			default:
				continue // already running
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			r.closeNode(id, ev.Action)
		}
		r.client.CloseIdle()
		return errors.Join(errs...)
	case scenario.Checkpoint:
		if !r.checkpoint(ctx, fmt.Sprintf("%s at %s", s.Name, scenario.FormatTime(ev.At))) {
			return errors.New("not converged")
		}
	case scenario.End:
	}
	return nil
}

var (
	errNextFault  = errors.New("interrupted by the next fault")
	errSuperseded = errors.New("superseded by a later heal")
)

// wipeBlocked waits up to 60 s until every node wiped earlier (other than
// id) runs and has caught up, off probation. A second lost disk before the
// first one's node has caught up is a majority of disks lost, which no
// broker survives and the checker would rightly flag: such a wipe is
// skipped, and the reason returned.
func (r *runner) wipeBlocked(ctx context.Context, id string) string {
	deadline := time.Now().Add(60 * time.Second)
	for {
		var waiting []string
		hs := r.health(ctx)
		for _, h := range hs {
			if !r.wiped[h.id] {
				continue
			}
			if h.err == nil && !h.probation && r.be.State(h.id) == nemesis.Running {
				delete(r.wiped, h.id)
				continue
			}
			if h.id != id {
				waiting = append(waiting, h.id)
			}
		}
		if len(waiting) == 0 {
			return ""
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Sprintf("%s, wiped earlier, has not caught up (two lost disks are a majority)", strings.Join(waiting, ", "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// openWindow starts a fault window; a recovery probe still measuring the
// previous heal stops (the new fault would distort it).
func (r *runner) openWindow(label string, a scenario.Action, network bool, nodes []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.probeStop != nil {
		r.probeStop(errNextFault)
		r.probeStop, r.probeTargets = nil, nil
	}
	r.nextWindow++
	r.windows = append(r.windows, &window{id: r.nextWindow, label: label, scenario: r.scenario, start: r.hist.Now(),
		network: network, action: a, nodes: slices.Clone(nodes)})
}

// closeNode removes a restarted or resumed node from the process windows
// holding it; a window without nodes left closes.
func (r *runner) closeNode(id string, a scenario.Action) {
	r.closeWindows(func(w *window) bool {
		if w.network {
			return false
		}
		if (a == scenario.Resume) != (w.action == scenario.Pause) {
			return false
		}
		w.nodes = slices.DeleteFunc(w.nodes, func(n string) bool { return n == id })
		return len(w.nodes) == 0
	})
}

// closeWindows closes the windows matching f, records them and starts a
// recovery probe for them.
func (r *runner) closeWindows(f func(*window) bool) {
	now := r.hist.Now()
	r.mu.Lock()
	var closed []*window
	keep := r.windows[:0]
	for _, w := range r.windows {
		if f(w) {
			closed = append(closed, w)
		} else {
			keep = append(keep, w)
		}
	}
	r.windows = keep
	stillOpen := len(keep)
	r.mu.Unlock()
	if len(closed) == 0 {
		return
	}
	var ids []int
	for _, w := range closed {
		r.hist.Write(&history.Op{Kind: history.KindWindow, Start: w.start, End: now, Label: w.label, Scenario: w.scenario, Window: w.id})
		ids = append(ids, w.id)
	}
	if stillOpen > 0 {
		// Another fault is still active: recovery cannot be measured.
		for _, id := range ids {
			r.hist.Write(&history.Op{Kind: history.KindRecovery, Start: now, Window: id,
				Recovery: &history.Recovery{Healthy: -1, Writes: -1, Note: "another fault still active"}})
		}
		return
	}
	r.startProbe(now, ids)
}

type probeTarget struct {
	window int
	t      int64 // when the window closed (history clock)
}

// startProbe measures how long after a heal (at t, history clock) every
// running node is healthy again and accepts a write. A probe still running
// for an earlier heal hands its windows over: their recovery is measured
// from their own heal.
func (r *runner) startProbe(t int64, windows []int) {
	cctx, cancel := context.WithCancelCause(r.ctx)
	ctx, cancelT := context.WithTimeout(cctx, r.o.recoverWait)
	r.mu.Lock()
	targets := append([]probeTarget(nil), r.probeTargets...)
	if r.probeStop != nil {
		r.probeStop(errSuperseded)
	}
	for _, w := range windows {
		targets = append(targets, probeTarget{window: w, t: t})
	}
	r.probeTargets = targets
	r.probeStop = cancel
	r.probeGen++
	gen := r.probeGen
	r.mu.Unlock()
	r.probes.Add(1)
	go func() {
		defer r.probes.Done()
		defer cancel(nil)
		defer cancelT()
		var healthyAt, writesAt int64 = -1, -1
		wrote := map[string]bool{}
		for ctx.Err() == nil {
			if healthyAt < 0 {
				if ok, _ := r.healthy(ctx); ok {
					healthyAt = r.hist.Now()
				}
			}
			if healthyAt >= 0 {
				all := true
				for _, n := range r.nodes {
					if wrote[n.ID] || r.be.State(n.ID) != nemesis.Running {
						continue
					}
					if r.probeWrite(ctx, n) {
						wrote[n.ID] = true
					} else {
						all = false
					}
				}
				if all {
					writesAt = r.hist.Now()
					break
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		cause := context.Cause(cctx)
		if errors.Is(cause, errSuperseded) {
			return // the next probe reports these windows
		}
		note := ""
		if writesAt < 0 {
			if cause != nil {
				note = cause.Error()
			} else {
				note = fmt.Sprintf("not recovered within %s", r.o.recoverWait)
			}
		}
		r.mu.Lock()
		if r.probeGen == gen {
			r.probeTargets, r.probeStop = nil, nil
		}
		r.mu.Unlock()
		for _, pt := range targets {
			rec := history.Recovery{Healthy: -1, Writes: -1, Note: note}
			if healthyAt >= 0 {
				rec.Healthy = max(healthyAt-pt.t, 0)
			}
			if writesAt >= 0 {
				rec.Writes = max(writesAt-pt.t, 0)
			}
			r.hist.Write(&history.Op{Kind: history.KindRecovery, Start: pt.t, End: r.hist.Now(), Window: pt.window, Recovery: &rec})
		}
		if writesAt >= 0 {
			last := targets[len(targets)-1].t
			r.logf("recovered %.2fs after the heal (healthy after %.2fs)", float64(writesAt-last)/1e9, float64(max(healthyAt-last, 0))/1e9)
		} else {
			r.logf("recovery not measured: %s", note)
		}
	}()
}

// awaitProbes waits for the running recovery probe.
func (r *runner) awaitProbes() { r.probes.Wait() }

func (r *runner) probeWrite(ctx context.Context, n workload.Node) bool {
	r.mu.Lock()
	r.probeSeq++
	seq := r.probeSeq
	r.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, a := r.client.Push(cctx, n.URL, []workload.PushItem{{Queue: "chaos-probe", Partition: "probe",
		Payload: map[string]int{"probe": seq}, TransactionID: fmt.Sprintf("probe.%s.%d", n.ID, seq)}})
	return a.Outcome == history.OK
}
