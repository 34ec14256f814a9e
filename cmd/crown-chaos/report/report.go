// Package report turns a checked history into the three outputs of a chaos
// run: a text summary, a JSON file and an SVG timeline of throughput and
// latency with the fault windows shaded.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/crownmq/crown/cmd/crown-chaos/checker"
	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

// Point is one second of the run.
type Point struct {
	T          float64 `json:"t"`           // seconds since the start
	PushedMsgs int     `json:"pushed"`      // messages confirmed by pushes answered in this second
	Delivered  int     `json:"delivered"`   // messages delivered by pops answered in this second
	Completed  int     `json:"completed"`   // ack items answered success
	Failed     int     `json:"failed"`      // operations answered fail or unknown
	PushP50Ms  float64 `json:"push_p50_ms"` // latency of the pushes answered ok
	PushP99Ms  float64 `json:"push_p99_ms"` //
	AckP99Ms   float64 `json:"ack_p99_ms"`  // latency of the acks answered ok
	MaxOpMs    float64 `json:"max_op_ms"`   // slowest push or ack, whatever its outcome
	Operations int     `json:"operations"`  // push, pop and ack requests answered in this second
}

// Span is a scenario's time on the run's clock.
type Span struct {
	Name  string  `json:"name"`
	Start float64 `json:"start_s"`
	End   float64 `json:"end_s"`
}

// Report is everything a run produced, ready to print.
type Report struct {
	Meta      *history.Meta   `json:"meta,omitempty"`
	Result    *checker.Result `json:"result"`
	Failures  []string        `json:"failures,omitempty"` // harness-level: no recovery, crashed nodes
	Scenarios []Span          `json:"scenarios,omitempty"`
	Quiet     []Span          `json:"checkpoints,omitempty"` // checkpoints: the workload was paused
	Series    []Point         `json:"series"`
	Passed    bool            `json:"passed"`
}

// Build summarises a history and its check result.
func Build(ops []history.Op, res *checker.Result) *Report {
	rep := &Report{Result: res}
	starts := map[string]float64{}
	var last int64
	for i := range ops {
		op := &ops[i]
		last = max(last, op.Start, op.End)
		switch op.Kind {
		case history.KindMeta:
			rep.Meta = op.Meta
		case history.KindScenario:
			if op.Label == "start" {
				starts[op.Scenario] = sec(op.Start)
			} else {
				rep.Scenarios = append(rep.Scenarios, Span{Name: op.Scenario, Start: sec(op.Start), End: sec(op.End)})
			}
		case history.KindCheckpoint, history.KindFinal:
			rep.Quiet = append(rep.Quiet, Span{Name: op.Label, Start: sec(op.Start), End: sec(op.End)})
		case history.KindNote:
			if strings.HasPrefix(op.Label, "failure: ") {
				rep.Failures = append(rep.Failures, strings.TrimPrefix(op.Label, "failure: "))
			}
		}
	}
	for name, s := range starts {
		found := slices.ContainsFunc(rep.Scenarios, func(sp Span) bool { return sp.Name == name })
		if !found {
			rep.Scenarios = append(rep.Scenarios, Span{Name: name, Start: s, End: sec(last)})
		}
	}
	slices.SortFunc(rep.Scenarios, func(a, b Span) int { return int((a.Start - b.Start) * 1e6) })
	rep.Series = series(ops, last)
	rep.Passed = res.OK && len(rep.Failures) == 0
	return rep
}

func sec(ns int64) float64 { return float64(ns) / float64(time.Second) }

func series(ops []history.Op, last int64) []Point {
	n := int(last/int64(time.Second)) + 1
	pts := make([]Point, n)
	pushLat := make([][]float64, n)
	ackLat := make([][]float64, n)
	for i := range pts {
		pts[i].T = float64(i)
	}
	for i := range ops {
		op := &ops[i]
		if op.Kind != history.KindPush && op.Kind != history.KindPop && op.Kind != history.KindAck {
			continue
		}
		b := int(op.End / int64(time.Second))
		if b < 0 || b >= n {
			continue
		}
		p := &pts[b]
		p.Operations++
		lat := float64(op.End-op.Start) / 1e6
		if op.Outcome != history.OK {
			p.Failed++
		}
		switch op.Kind {
		case history.KindPush:
			p.MaxOpMs = max(p.MaxOpMs, lat)
			if op.Outcome == history.OK {
				p.PushedMsgs += len(op.Items)
				pushLat[b] = append(pushLat[b], lat)
			}
		case history.KindPop:
			if op.Outcome == history.OK {
				p.Delivered += len(op.Items)
			}
		case history.KindAck:
			p.MaxOpMs = max(p.MaxOpMs, lat)
			if op.Outcome == history.OK {
				ackLat[b] = append(ackLat[b], lat)
				if op.Status == "completed" {
					for _, it := range op.Items {
						if it.Success {
							p.Completed++
						}
					}
				}
			}
		}
	}
	for i := range pts {
		pts[i].PushP50Ms = quantile(pushLat[i], 0.5)
		pts[i].PushP99Ms = quantile(pushLat[i], 0.99)
		pts[i].AckP99Ms = quantile(ackLat[i], 0.99)
	}
	return pts
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := int(q*float64(len(v))+0.5) - 1
	return v[min(max(i, 0), len(v)-1)]
}

// Files lists the files WriteDir writes.
func Files(dir string) []string {
	return []string{filepath.Join(dir, "summary.txt"), filepath.Join(dir, "report.json"), filepath.Join(dir, "timeline.svg")}
}

// WriteDir writes summary.txt, report.json and timeline.svg into dir.
func WriteDir(dir string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f := Files(dir)
	var b strings.Builder
	WriteText(&b, rep)
	if err := os.WriteFile(f[0], []byte(b.String()), 0o644); err != nil {
		return err
	}
	jf, err := os.Create(f[1])
	if err != nil {
		return err
	}
	if err := WriteJSON(jf, rep); err != nil {
		jf.Close()
		return err
	}
	if err := jf.Close(); err != nil {
		return err
	}
	return os.WriteFile(f[2], []byte(SVG(rep)), 0o644)
}

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func secs(f float64) string {
	if f < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", f)
}

// WriteText writes the human summary.
func WriteText(w io.Writer, rep *Report) {
	r := rep.Result
	verdict := "PASS"
	if !rep.Passed {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "Crown chaos report: %s\n", verdict)
	if m := rep.Meta; m != nil {
		fmt.Fprintf(w, "run %s, backend %s, seed %d, started %s on %s\n", m.RunID, m.Backend, m.Seed,
			m.Started.Format(time.RFC3339), m.Host)
		fmt.Fprintf(w, "workload: queues %s x partitions %s, groups %s\n", strings.Join(m.Queues, ","),
			strings.Join(m.Partitions, ","), strings.Join(checker.GroupNames(m.Groups), ","))
		fmt.Fprintf(w, "scenarios: %s\n", strings.Join(m.Scenarios, ", "))
	}
	fmt.Fprintf(w, "duration: %.1fs\n\n", r.DurationSec)
	o := r.Operations
	fmt.Fprintf(w, "operations checked: %d (push %d: %d ok, %d fail, %d unknown; pop %d: %d ok, %d fail, %d unknown; ack %d: %d ok, %d fail, %d unknown)\n",
		o.All.Total, o.Push.Total, o.Push.OK, o.Push.Fail, o.Push.Unknown, o.Pop.Total, o.Pop.OK, o.Pop.Fail, o.Pop.Unknown,
		o.Ack.Total, o.Ack.OK, o.Ack.Fail, o.Ack.Unknown)
	fmt.Fprintf(w, "messages: %d attempted, %d confirmed, %d with only unknown pushes, %d with only failed pushes\n",
		r.Messages.Attempted, r.Messages.Confirmed, r.Messages.UnknownOnly, r.Messages.FailedOnly)
	fmt.Fprintf(w, "deliveries: %d (%d documented redeliveries), completed acks: %d\n\n", r.Deliveries, r.Redeliveries, r.Completions)
	fmt.Fprintf(w, "lost: %d   duplicated: %d   reordered: %d   unexpected: %d   divergence: %d\n",
		r.Lost, r.Duplicated, r.Reordered, r.Unexpected, r.Divergence)
	conv := "NOT converged"
	if r.Converged {
		nodes := make([]string, 0, len(r.FinalDigests))
		var d string
		for n, dg := range r.FinalDigests {
			nodes = append(nodes, n)
			d = dg
		}
		slices.Sort(nodes)
		conv = fmt.Sprintf("converged: %s at applied index %d, digest %.16s", strings.Join(nodes, ", "), r.FinalApplied, d)
	} else if !r.HaveFinalState {
		conv = "no final state recorded"
	}
	passed := 0
	for _, c := range r.Checkpoints {
		if c.Passed {
			passed++
		}
	}
	fmt.Fprintf(w, "final state: %s; checkpoints %d/%d converged\n", conv, passed, len(r.Checkpoints))
	if len(r.Windows) > 0 {
		fmt.Fprintf(w, "\nfault windows (availability = share of push/pop/ack requests sent during the window answered ok;\npush/s = pushes answered ok per second; recovery = time from the heal until every running node is healthy /\naccepted a write):\n")
		fmt.Fprintf(w, "  %3s  %-22s %-46s %8s %7s %6s %7s %8s %9s %9s\n", "#", "scenario", "fault", "start", "length", "ops", "avail", "push/s", "healthy", "writes")
		for _, win := range r.Windows {
			label := win.Label
			if len(label) > 46 {
				label = label[:45] + "~"
			}
			fmt.Fprintf(w, "  %3d  %-22s %-46s %7.1fs %6.1fs %6d %7s %8.1f %9s %9s", win.ID, trunc(win.Scenario, 22), label,
				win.StartSec, win.EndSec-win.StartSec, win.Ops.Total, pct(win.Availability), win.PushesPerSec,
				secs(win.RecoveryHealthySec), secs(win.RecoveryWritesSec))
			if win.RecoveryNote != "" {
				fmt.Fprintf(w, "  (%s)", win.RecoveryNote)
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "  outside every window: %d operations, availability %s, %.1f pushes ok/s\n", r.Baseline.Total,
			pct(r.Baseline.Availability()), r.BaselinePushesPerSec)
	}
	if len(rep.Failures) > 0 {
		fmt.Fprintf(w, "\nfailures:\n")
		for _, f := range rep.Failures {
			fmt.Fprintf(w, "  %s\n", f)
		}
	}
	if len(r.Violations) > 0 {
		fmt.Fprintf(w, "\nviolations (by kind: %v; at most 20 examples of each):\n", r.ViolationKinds)
		for _, v := range r.Violations {
			fmt.Fprintf(w, "  %s\n", v)
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintf(w, "\nnotes:\n")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n-1] + "~"
	}
	return s
}
