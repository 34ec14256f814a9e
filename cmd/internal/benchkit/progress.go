package benchkit

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Counters are the live figures the progress line shows.
type Counters struct {
	Produced atomic.Int64 // confirmed messages
	Consumed atomic.Int64 // deliveries
	Errors   atomic.Int64 // failed requests of any kind
}

// Progress prints a progress line to w about once a second until Stop.
type Progress struct {
	w       io.Writer
	c       *Counters
	inPlace bool
	start   time.Time
	stop    chan struct{}
	wg      sync.WaitGroup
	width   int
}

// StartProgress starts the line; mode is the --progress value. On a
// terminal (auto) the line is rewritten in place; elsewhere a new line is
// printed each time.
func StartProgress(w io.Writer, c *Counters, mode string) *Progress {
	p := &Progress{w: w, c: c, start: time.Now(), stop: make(chan struct{})}
	if mode == "off" {
		return p
	}
	if f, ok := w.(*os.File); ok && mode == "auto" {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.inPlace = true
		}
	}
	p.wg.Add(1)
	go p.loop()
	return p
}

func (p *Progress) loop() {
	defer p.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastP, lastC int64
	last := p.start
	for {
		select {
		case <-p.stop:
			// A last line with the totals and the average rates.
			prod, cons := p.c.Produced.Load(), p.c.Consumed.Load()
			p.print(time.Since(p.start), prod, cons, time.Since(p.start), prod, cons)
			if p.inPlace {
				fmt.Fprintln(p.w)
			}
			return
		case now := <-t.C:
			prod, cons := p.c.Produced.Load(), p.c.Consumed.Load()
			p.print(now.Sub(p.start), prod, cons, now.Sub(last), prod-lastP, cons-lastC)
			lastP, lastC, last = prod, cons, now
		}
	}
}

// print shows the totals and the rates over the last dt.
func (p *Progress) print(elapsed time.Duration, prod, cons int64, dt time.Duration, dProd, dCons int64) {
	rate := func(n int64) string {
		if dt <= 0 {
			return "0"
		}
		return thousands(int64(float64(n) / dt.Seconds()))
	}
	line := fmt.Sprintf("[%5.1fs] produced %s (%s/s)  consumed %s (%s/s)  errors %d",
		elapsed.Seconds(), thousands(prod), rate(dProd), thousands(cons), rate(dCons), p.c.Errors.Load())
	if p.inPlace {
		pad := max(p.width-len(line), 0)
		p.width = len(line)
		fmt.Fprintf(p.w, "\r%s%*s", line, pad, "")
	} else {
		fmt.Fprintln(p.w, line)
	}
}

// Stop ends the line.
func (p *Progress) Stop() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	p.wg.Wait()
}
