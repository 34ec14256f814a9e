package report

import (
	"fmt"
	"math"
	"strings"
)

// SVG draws the run: throughput (top) and latency (bottom, log scale) per
// second, fault windows shaded and labelled (orange: network faults, red:
// process faults), scenario boundaries dashed. No dependencies: plain SVG.
func SVG(rep *Report) string {
	const (
		H           = 640
		left, right = 70, 175
		p1top, p1h  = 60, 220
		p2top, p2h  = 330, 220
	)
	dur := 1.0
	if n := len(rep.Series); n > 0 {
		dur = max(rep.Series[n-1].T+1, 1)
	}
	dur = max(dur, rep.Result.DurationSec)
	// Long runs get a wider picture (2 px per second, at most 4000 px) so
	// that the fault labels stay apart.
	W := int(min(max(1200, 2*dur+left+right), 4000))
	pw := float64(W - left - right)
	x := func(t float64) float64 { return float64(left) + pw*t/dur }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", W, H, W, H)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	title := "Crown chaos run"
	if m := rep.Meta; m != nil {
		title = fmt.Sprintf("Crown chaos run %s (backend %s, seed %d)", m.RunID, m.Backend, m.Seed)
	}
	r := rep.Result
	verdict := "PASS"
	if !rep.Passed {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold">%s: %s</text>`+"\n", left, esc(title), verdict)
	fmt.Fprintf(&b, `<text x="%d" y="38">%d operations checked; lost %d, duplicated %d, reordered %d, unexpected %d, divergence %d; converged %v</text>`+"\n",
		left, r.Operations.All.Total, r.Lost, r.Duplicated, r.Reordered, r.Unexpected, r.Divergence, r.Converged)

	// Fault windows, behind everything.
	for _, w := range r.Windows {
		color := "#f5a623"
		if isProcess(w.Label) {
			color = "#d0021b"
		}
		x0, x1 := x(w.StartSec), x(w.EndSec)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="0.16"><title>%s</title></rect>`+"\n",
			x0, p1top, max(x1-x0, 1), p2top+p2h-p1top, color, esc(fmt.Sprintf("#%d %s: %.1fs-%.1fs, availability %.1f%%", w.ID, w.Label, w.StartSec, w.EndSec, 100*w.Availability)))
		ly := p1top + 4
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" transform="rotate(90 %.1f %d)" font-size="9" fill="%s">%s</text>`+"\n",
			x0+3, ly, x0+3, ly, darker(color), esc(shortLabel(w.Label)))
	}
	// Checkpoints: the workload is paused while the replicas converge.
	for _, q := range rep.Quiet {
		x0, x1 := x(q.Start), x(q.End)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#999" fill-opacity="0.15"><title>%s</title></rect>`+"\n",
			x0, p1top, max(x1-x0, 1), p2top+p2h-p1top, esc("checkpoint "+q.Name+": workload paused"))
	}
	// Scenario boundaries.
	for _, s := range rep.Scenarios {
		xs := x(s.Start)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#888" stroke-dasharray="4 3"/>`+"\n", xs, p1top, xs, p2top+p2h)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10" fill="#444">%s</text>`+"\n", xs+2, p2top+p2h+34, esc(s.Name))
	}

	// Panel 1: throughput.
	maxY := 1.0
	for _, p := range rep.Series {
		maxY = max(maxY, float64(p.PushedMsgs), float64(p.Delivered), float64(p.Completed), float64(p.Failed))
	}
	maxY = niceCeil(maxY)
	y1 := func(v float64) float64 { return float64(p1top+p1h) - float64(p1h)*v/maxY }
	axes(&b, left, p1top, int(pw), p1h, "per second")
	for i := 0; i <= 4; i++ {
		v := maxY * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-5, y1(v)+4, fmtNum(v))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", left, y1(v), left+int(pw), y1(v))
	}
	type ser struct {
		name, color string
		get         func(Point) float64
		dash        string
	}
	tp := []ser{
		{"messages pushed", "#1f77b4", func(p Point) float64 { return float64(p.PushedMsgs) }, ""},
		{"messages delivered", "#2ca02c", func(p Point) float64 { return float64(p.Delivered) }, ""},
		{"acks completed", "#9467bd", func(p Point) float64 { return float64(p.Completed) }, ""},
		{"failed/unknown req.", "#d62728", func(p Point) float64 { return float64(p.Failed) }, ""},
	}
	for i, s := range tp {
		var pts []string
		for _, p := range rep.Series {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.T+0.5), y1(s.get(p))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.3" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
		legend(&b, W-right+10, p1top+10+i*16, s.color, s.name, s.dash)
	}

	// Panel 2: latency, log scale 1 ms .. 30 s.
	lo, hi := 0.0, math.Log10(30000)
	y2 := func(ms float64) float64 {
		v := math.Log10(max(ms, 1))
		return float64(p2top+p2h) - float64(p2h)*(min(v, hi)-lo)/(hi-lo)
	}
	axes(&b, left, p2top, int(pw), p2h, "latency (log)")
	for _, ms := range []float64{1, 10, 100, 1000, 10000} {
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-5, y2(ms)+4, fmtMs(ms))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", left, y2(ms), left+int(pw), y2(ms))
	}
	lat := []ser{
		{"push p50 (ok)", "#1f77b4", func(p Point) float64 { return p.PushP50Ms }, ""},
		{"push p99 (ok)", "#17becf", func(p Point) float64 { return p.PushP99Ms }, ""},
		{"ack p99 (ok)", "#9467bd", func(p Point) float64 { return p.AckP99Ms }, ""},
		{"slowest push/ack (any)", "#7f7f7f", func(p Point) float64 { return p.MaxOpMs }, "3 2"},
	}
	for i, s := range lat {
		var segs []string
		var cur []string
		for _, p := range rep.Series {
			v := s.get(p)
			if v <= 0 {
				if len(cur) > 1 {
					segs = append(segs, strings.Join(cur, " "))
				}
				cur = nil
				continue
			}
			cur = append(cur, fmt.Sprintf("%.1f,%.1f", x(p.T+0.5), y2(v)))
		}
		if len(cur) > 1 {
			segs = append(segs, strings.Join(cur, " "))
		}
		dash := ""
		if s.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
		}
		for _, seg := range segs {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.2"%s points="%s"/>`+"\n", s.color, dash, seg)
		}
		legend(&b, W-right+10, p2top+10+i*16, s.color, s.name, s.dash)
	}
	legendBox(&b, W-right+10, p2top+p2h-58, "#999", "checkpoint (paused)")
	legendBox(&b, W-right+10, p2top+p2h-40, "#f5a623", "network fault")
	legendBox(&b, W-right+10, p2top+p2h-22, "#d0021b", "process fault")

	// Time axis.
	step := niceStep(dur / 10)
	for t := 0.0; t <= dur; t += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", x(t), p2top+p2h, x(t), p2top+p2h+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(t), p2top+p2h+16, fmtTime(t))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", x(t), p1top+p1h, x(t), p1top+p1h+4)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#444">time since the run started (dashed lines: scenario starts)</text>`+"\n", left+int(pw)/2, H-12)
	b.WriteString("</svg>\n")
	return b.String()
}

func axes(b *strings.Builder, x, y, w, h int, label string) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", x, y, w, h)
	fmt.Fprintf(b, `<text x="%d" y="%d" transform="rotate(-90 %d %d)" text-anchor="middle" fill="#444">%s</text>`+"\n",
		x-50, y+h/2, x-50, y+h/2, esc(label))
}

func legend(b *strings.Builder, x, y int, color, name, dash string) {
	d := ""
	if dash != "" {
		d = fmt.Sprintf(` stroke-dasharray="%s"`, dash)
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", x, y, x+18, y, color, d)
	fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", x+22, y+4, esc(name))
}

func legendBox(b *strings.Builder, x, y int, color, name string) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="18" height="10" fill="%s" fill-opacity="0.3"/>`+"\n", x, y-5, color)
	fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", x+22, y+4, esc(name))
}

func isProcess(label string) bool {
	for _, p := range []string{"kill", "stop", "pause"} {
		if strings.HasPrefix(label, p+" ") {
			return true
		}
	}
	return false
}

func shortLabel(l string) string {
	if len(l) > 48 {
		return l[:47] + "~"
	}
	return l
}

func darker(c string) string {
	if c == "#d0021b" {
		return "#8b0000"
	}
	return "#a0522d"
}

func esc(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	return r.Replace(s)
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

func niceStep(v float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600} {
		if s >= v {
			return s
		}
	}
	return 7200
}

func fmtNum(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func fmtMs(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.0fs", ms/1000)
	}
	return fmt.Sprintf("%.0fms", ms)
}

func fmtTime(t float64) string {
	if t >= 60 && math.Mod(t, 60) == 0 {
		return fmt.Sprintf("%.0fm", t/60)
	}
	if t >= 60 {
		return fmt.Sprintf("%dm%02.0fs", int(t)/60, math.Mod(t, 60))
	}
	return fmt.Sprintf("%.0fs", t)
}
