package benchkit

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a run: what `--json` prints, and what
// RenderCompare reads back.
type Report struct {
	Broker    string    `json:"broker"` // "crown" or "jetstream"
	Targets   []string  `json:"targets"`
	StartedAt time.Time `json:"started_at"`
	Workload  Config    `json:"workload"`
	Notes     []string  `json:"notes,omitempty"`

	Produce *Throughput `json:"produce,omitempty"`
	Consume *Throughput `json:"consume,omitempty"`
	// Latency per request kind: "push", "pop", "ack".
	Latency map[string]Summary `json:"latency"`
	Errors  Errors             `json:"errors"`
	// CPU time the bench process itself used during the run (it shares
	// the machine with the brokers when they run locally).
	ClientCPUSeconds float64 `json:"client_cpu_s"`

	Verification []GroupResult `json:"verification,omitempty"`
	Interrupted  bool          `json:"interrupted,omitempty"`
	Problems     []string      `json:"problems,omitempty"` // the run failed
	Warnings     []string      `json:"warnings,omitempty"` // transient errors (retried)
	OK           bool          `json:"ok"`
}

// Throughput of one side. Produce counts confirmed messages, from the start
// until the last producer finished; consume counts deliveries (all groups,
// repeats included), from the start until the last delivery.
type Throughput struct {
	Messages  int64   `json:"messages"`
	Bytes     int64   `json:"bytes"` // payload bytes
	Requests  int64   `json:"requests"`
	Seconds   float64 `json:"seconds"`
	MsgPerSec float64 `json:"msg_per_s"`
	MBPerSec  float64 `json:"mb_per_s"` // payload, 10^6 bytes
}

// NewThroughput computes the rates.
func NewThroughput(msgs, bytes, requests int64, d time.Duration) *Throughput {
	t := &Throughput{Messages: msgs, Bytes: bytes, Requests: requests, Seconds: round3(d.Seconds())}
	if d > 0 {
		t.MsgPerSec = math.Round(float64(msgs) / d.Seconds())
		t.MBPerSec = round3(float64(bytes) / d.Seconds() / 1e6)
	}
	return t
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// Errors counts failed requests. Failed pushes are retried with the same
// transaction ids; failed pops are repeated; a failed ack is not retried
// (the messages come back when the lease expires).
type Errors struct {
	Push        int64 `json:"push"`          // push attempts that failed (5xx, transport)
	PushGivenUp int64 `json:"push_given_up"` // pushes abandoned after --retries attempts
	Pop         int64 `json:"pop"`
	Ack         int64 `json:"ack"`             // ack requests that failed
	AckItems    int64 `json:"ack_items"`       // ack items answered with an error
	EmptyPops   int64 `json:"empty_pops"`      // pops that delivered nothing (not an error)
	PushDupes   int64 `json:"push_duplicates"` // items the broker reported as duplicates (retries that had applied)
}

// WriteJSON prints the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadReport reads a report written by WriteJSON.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: not a bench report: %w", path, err)
	}
	if r.Broker == "" {
		return nil, fmt.Errorf("%s: not a bench report (no broker)", path)
	}
	return &r, nil
}

// Finish sets OK from the verification and the problems.
func (r *Report) Finish() {
	r.OK = len(r.Problems) == 0 && !r.Interrupted
	for _, v := range r.Verification {
		r.OK = r.OK && v.OK
	}
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Describe is the one-line description of a workload.
func (c *Config) Describe() string {
	amount := thousands(c.Count) + " messages"
	switch {
	case c.Mode == ModeConsume && c.Count == 0:
		amount = "inferred count"
	case c.Count == 0:
		amount = c.Duration.String()
	case c.Duration > 0:
		amount += " or " + c.Duration.String()
	}
	rate := ""
	if c.Rate > 0 {
		rate = fmt.Sprintf(" at %s msg/s", thousands(int64(c.Rate)))
	}
	return fmt.Sprintf("mode %s, %s x %d B%s, push batch %d, pop batch %d, %d producers, %d consumers x %d group(s), %d queue(s) x %d partitions, run %s",
		c.Mode, amount, c.PayloadSize, rate, c.PushBatch, c.PopBatch, c.Producers, c.Consumers, c.Groups, c.Queues, c.Partitions, c.RunID)
}

// Render prints the report for a person.
func (r *Report) Render(w io.Writer) error {
	fmt.Fprintf(w, "%s bench against %s\n%s\n", r.Broker, strings.Join(r.Targets, ","), r.Workload.Describe())
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tmessages\tseconds\tmsg/s\tMB/s\trequests\t")
	for _, row := range []struct {
		name string
		t    *Throughput
	}{{"produced", r.Produce}, {"consumed", r.Consume}} {
		if row.t != nil {
			fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\t%.2f\t%s\t\n", row.name, thousands(row.t.Messages), row.t.Seconds,
				thousands(int64(row.t.MsgPerSec)), row.t.MBPerSec, thousands(row.t.Requests))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency (ms)\trequests\tp50\tp90\tp99\tmax\t")
	for _, k := range []string{"push", "pop", "ack"} {
		if s, ok := r.Latency[k]; ok && s.Count > 0 {
			fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t\n", k, thousands(int64(s.Count)), s.P50Ms, s.P90Ms, s.P99Ms, s.MaxMs)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	e := r.Errors
	fmt.Fprintf(w, "\nbench client CPU: %.2f s\n", r.ClientCPUSeconds)
	fmt.Fprintf(w, "errors: push %d (given up %d, duplicates reported %d), pop %d, ack %d (items %d); empty pops %d\n",
		e.Push, e.PushGivenUp, e.PushDupes, e.Pop, e.Ack, e.AckItems, e.EmptyPops)
	for _, v := range r.Verification {
		verdict := "OK: every confirmed message consumed exactly once"
		if !v.OK {
			verdict = "FAILED"
		}
		exp := thousands(v.Expected)
		if v.Inferred {
			exp += " (inferred)"
		}
		fmt.Fprintf(w, "verify %s: expected %s, unique %s, lost %d, duplicates %d, redelivered %d, unacked %d, unconfirmed %d, unexpected %d, foreign %d: %s\n",
			v.Group, exp, thousands(v.Unique), v.Lost, v.Duplicates, v.Redelivered, v.Unacked, v.Unconfirmed, v.Unexpected, v.Foreign, verdict)
	}
	if r.Interrupted {
		fmt.Fprintln(w, "interrupted: the figures cover the run until then")
	}
	for _, p := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", p)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	return nil
}

// CompareRow is one figure of two reports and their ratio a/b. A figure a
// report does not have (no request of that kind was measured, nothing was
// consumed or checked) is nil, not 0: a latency of no request is not 0 ms.
// The ratio is nil when either figure is absent or b is 0.
type CompareRow struct {
	Name  string   `json:"name"`
	A     *float64 `json:"a"`
	B     *float64 `json:"b"`
	Ratio *float64 `json:"ratio"`
	fmt   string
}

// Comparison is two reports side by side, for `--json`.
type Comparison struct {
	A    string       `json:"a"`
	B    string       `json:"b"`
	Rows []CompareRow `json:"rows"`
	OKA  bool         `json:"ok_a"`
	OKB  bool         `json:"ok_b"`
}

// Compare lists the figures of two reports with the ratio a/b of each (for
// latencies, below 1 means a is faster).
func Compare(a, b *Report) *Comparison {
	cmp := &Comparison{A: a.Broker, B: b.Broker, OKA: a.OK, OKB: b.OK}
	// fig is a figure a report has (has) or lacks.
	fig := func(has bool, v float64) *float64 {
		if !has {
			return nil
		}
		return &v
	}
	row := func(name string, x, y *float64, format string) {
		r := CompareRow{Name: name, A: x, B: y, fmt: format}
		if x != nil && y != nil && *y != 0 {
			q := round3(*x / *y)
			r.Ratio = &q
		}
		cmp.Rows = append(cmp.Rows, r)
	}
	// A side that one run did not have (a produce-only or consume-only
	// run) is absent from it, not 0 msg/s.
	tp := func(side string, x, y *Throughput) {
		if x == nil && y == nil {
			return
		}
		get := func(t *Throughput, f func(*Throughput) float64) *float64 {
			if t == nil {
				return nil
			}
			return fig(true, f(t))
		}
		for _, f := range []struct {
			name, format string
			v            func(*Throughput) float64
		}{
			{" msg/s", "%.0f", func(t *Throughput) float64 { return t.MsgPerSec }},
			{" MB/s", "%.2f", func(t *Throughput) float64 { return t.MBPerSec }},
			{" messages", "%.0f", func(t *Throughput) float64 { return float64(t.Messages) }},
			{" seconds", "%.2f", func(t *Throughput) float64 { return t.Seconds }},
		} {
			row(side+f.name, get(x, f.v), get(y, f.v), f.format)
		}
	}
	tp("produce", a.Produce, b.Produce)
	tp("consume", a.Consume, b.Consume)
	// A latency of a run that measured no request of its kind (no pop
	// delivered anything) is absent: its zeros are no figure.
	for _, k := range []string{"push", "pop", "ack"} {
		x, y := a.Latency[k], b.Latency[k]
		if x.Count == 0 && y.Count == 0 {
			continue
		}
		hx, hy := x.Count > 0, y.Count > 0
		row(k+" p50 ms", fig(hx, x.P50Ms), fig(hy, y.P50Ms), "%.2f")
		row(k+" p90 ms", fig(hx, x.P90Ms), fig(hy, y.P90Ms), "%.2f")
		row(k+" p99 ms", fig(hx, x.P99Ms), fig(hy, y.P99Ms), "%.2f")
		row(k+" max ms", fig(hx, x.MaxMs), fig(hy, y.MaxMs), "%.2f")
	}
	sum := func(r *Report, f func(GroupResult) int64) *float64 {
		var n float64
		for _, v := range r.Verification {
			n += float64(f(v))
		}
		return fig(len(r.Verification) > 0, n)
	}
	// A produce-only run consumed nothing, so it has no delivery check:
	// zeros here would read as "nothing lost" (the consume run checks).
	if len(a.Verification) > 0 || len(b.Verification) > 0 {
		for _, v := range []struct {
			name string
			f    func(GroupResult) int64
		}{
			{"lost", func(v GroupResult) int64 { return v.Lost }},
			{"duplicates", func(v GroupResult) int64 { return v.Duplicates }},
			{"redelivered", func(v GroupResult) int64 { return v.Redelivered }},
		} {
			row(v.name, sum(a, v.f), sum(b, v.f), "%.0f")
		}
	}
	row("request errors", fig(true, float64(a.Errors.Push+a.Errors.Pop+a.Errors.Ack)),
		fig(true, float64(b.Errors.Push+b.Errors.Pop+b.Errors.Ack)), "%.0f")
	row("bench client CPU s", fig(true, a.ClientCPUSeconds), fig(true, b.ClientCPUSeconds), "%.2f")
	return cmp
}

// RenderCompare prints two reports side by side with the ratio a/b of each
// figure.
func RenderCompare(w io.Writer, a, b *Report) error {
	fmt.Fprintf(w, "workload: %s\n", stripRun(a.Workload.Describe()))
	if da, db := a.Workload.Describe(), b.Workload.Describe(); stripRun(da) != stripRun(db) {
		fmt.Fprintf(w, "warning: %s ran another workload: %s\n", b.Broker, db)
	}
	for _, r := range []*Report{a, b} {
		fmt.Fprintf(w, "%s: %s\n", r.Broker, strings.Join(r.Targets, ","))
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\t%s\t%s\t%s/%s\t\n", a.Broker, b.Broker, a.Broker, b.Broker)
	// show is a figure as the row formats it, "-" when absent.
	show := func(v *float64, format string) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf(format, *v)
	}
	for _, r := range Compare(a, b).Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", r.Name, show(r.A, r.fmt), show(r.B, r.fmt), show(r.Ratio, "%.2f"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range []*Report{a, b} {
		fmt.Fprintf(w, "%s: %s", r.Broker, verdict(r))
		for _, p := range r.Problems {
			fmt.Fprintf(w, "; %s", p)
		}
		if len(r.Warnings) > 0 {
			fmt.Fprintf(w, " (first warning: %s)", r.Warnings[0])
		}
		fmt.Fprintln(w)
	}
	return nil
}

// verdict is a report's outcome in one phrase for RenderCompare. A produce
// run consumed nothing and checked no deliveries, so it does not claim a
// verification; an inferred expected count is said, since it cannot see
// messages lost at the end of a producer's sequence.
func verdict(r *Report) string {
	if r.Workload.Mode == ModeProduce {
		if r.OK {
			return "produce run OK (nothing consumed: no delivery check)"
		}
		return "produce run FAILED"
	}
	v := "verification OK"
	if !r.OK {
		v = "verification FAILED"
	}
	for _, g := range r.Verification {
		if g.Inferred {
			return v + " (expected count inferred from the deliveries)"
		}
	}
	return v
}

func stripRun(s string) string {
	if i := strings.LastIndex(s, ", run "); i >= 0 {
		return s[:i]
	}
	return s
}
