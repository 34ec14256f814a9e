package benchkit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// processCPU is the user plus system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Item is one message a producer sends.
type Item struct {
	Producer  int
	Seq       int64
	Queue     int // index: Config.QueueName
	Partition int // index: PartitionName
	TxnID     string
	Payload   []byte // JSON
}

// Delivery is one message a consumer received. Handle is the driver's own
// (what it needs to ack the message).
type Delivery struct {
	TxnID  string
	Bytes  int
	Handle any
}

// Driver connects the harness to one broker.
type Driver interface {
	// Producer returns producer p's connection (called once per producer).
	Producer(p int) (Producer, error)
	// Consumer returns consumer c of group g (called once per consumer).
	Consumer(g, c int) (Consumer, error)
}

// Producer sends batches. Push must be idempotent for the same items (the
// harness retries failed pushes with the same transaction ids). It returns
// the number of items the broker reported as duplicates; an error wrapped
// with Fatal stops the run, any other is retried.
type Producer interface {
	Push(ctx context.Context, items []Item) (duplicates int, err error)
	Close()
}

// Consumer pops and acks for one consumer group.
type Consumer interface {
	// Pop returns the next batch, or none when nothing came before the
	// long-poll timeout.
	Pop(ctx context.Context) ([]Delivery, error)
	// Ack acknowledges a popped batch; failed[i] tells that item i was
	// refused (nil: none was). An error means the request failed as a whole.
	Ack(ctx context.Context, ds []Delivery) (failed []bool, err error)
	Close()
}

type fatalError struct{ error }

func (f fatalError) Unwrap() error { return f.error }

// Fatal marks an error that retrying cannot fix (a 4xx, a bad set-up).
func Fatal(err error) error { return fatalError{err} }

// IsFatal reports whether err was marked with Fatal.
func IsFatal(err error) bool {
	var f fatalError
	return errors.As(err, &f)
}

// worker stats, merged at the end.
type stats struct {
	push, pop, ack Histogram
	errs           Errors
	pushReqs       int64
	popReqs        int64
	ackReqs        int64
	prodMsgs       int64
	prodBytes      int64
	consMsgs       int64
	consBytes      int64
}

// Run runs the workload c against d and fills in the measured parts of a
// report (throughput, latency, errors, verification, problems). ctx ends
// the run early (an interrupt); the counters feed the progress line.
func Run(ctx context.Context, c *Config, d Driver, counters *Counters) *Report {
	rep := &Report{StartedAt: time.Now().UTC(), Workload: *c, Latency: map[string]Summary{}}
	tracker := NewTracker(c)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		mu       sync.Mutex
		total    stats
		problems []string
		warnings []string
	)
	// A problem fails the run; a warning is a transient error worth showing.
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	warn := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(warnings) < 10 {
			warnings = append(warnings, fmt.Sprintf(format, args...))
		}
	}
	merge := func(s *stats) {
		mu.Lock()
		defer mu.Unlock()
		total.push.Merge(&s.push)
		total.pop.Merge(&s.pop)
		total.ack.Merge(&s.ack)
		e := &total.errs
		e.Push += s.errs.Push
		e.PushGivenUp += s.errs.PushGivenUp
		e.Pop += s.errs.Pop
		e.Ack += s.errs.Ack
		e.AckItems += s.errs.AckItems
		e.EmptyPops += s.errs.EmptyPops
		e.PushDupes += s.errs.PushDupes
		total.pushReqs += s.pushReqs
		total.popReqs += s.popReqs
		total.ackReqs += s.ackReqs
		total.prodMsgs += s.prodMsgs
		total.prodBytes += s.prodBytes
		total.consMsgs += s.consMsgs
		total.consBytes += s.consBytes
	}

	// Connections first, so that set-up time is not measured.
	var prods []Producer
	var conss [][]Consumer
	closeAll := func() {
		for _, p := range prods {
			p.Close()
		}
		for _, g := range conss {
			for _, c := range g {
				c.Close()
			}
		}
	}
	defer closeAll()
	if c.Mode != ModeConsume {
		for p := 0; p < c.Producers; p++ {
			pc, err := d.Producer(p)
			if err != nil {
				rep.Problems = append(rep.Problems, fmt.Sprintf("producer %d: %v", p, err))
				rep.Finish()
				return rep
			}
			prods = append(prods, pc)
		}
	}
	if c.Mode != ModeProduce {
		for g := 0; g < c.Groups; g++ {
			var gs []Consumer
			for i := 0; i < c.Consumers; i++ {
				cc, err := d.Consumer(g, i)
				if err != nil {
					rep.Problems = append(rep.Problems, fmt.Sprintf("consumer %d of group %d: %v", i, g, err))
					rep.Finish()
					return rep
				}
				gs = append(gs, cc)
			}
			conss = append(conss, gs)
		}
	}

	cpu0 := processCPU()
	start := time.Now()
	var deadline time.Time
	if c.Duration > 0 {
		deadline = start.Add(c.Duration)
	}
	prodDone := make(chan struct{})
	var prodEnd atomic.Int64 // unix nanos when the last producer finished
	var lastDelivery atomic.Int64
	var wg sync.WaitGroup

	// Producers.
	var pwg sync.WaitGroup
	for p, pc := range prods {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			var s stats
			defer merge(&s)
			produce(runCtx, c, p, pc, deadline, tracker, counters, &s, problem, warn, cancel)
		}()
	}
	go func() {
		pwg.Wait()
		prodEnd.Store(time.Now().UnixNano())
		close(prodDone)
	}()

	// Consumers.
	groupLast := make([]atomic.Int64, c.Groups)
	for g, gs := range conss {
		groupLast[g].Store(start.UnixNano())
		for _, cc := range gs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var s stats
				defer merge(&s)
				consume(runCtx, c, g, cc, tracker, counters, &s, prodDone, &prodEnd, &groupLast[g], &lastDelivery, problem, warn, cancel)
			}()
		}
	}
	pwg.Wait()
	<-prodDone
	wg.Wait()

	rep.Interrupted = ctx.Err() != nil
	rep.ClientCPUSeconds = round3((processCPU() - cpu0).Seconds())
	if len(prods) > 0 {
		rep.Produce = NewThroughput(total.prodMsgs, total.prodBytes, total.pushReqs, time.Duration(prodEnd.Load()-start.UnixNano()))
		rep.Latency["push"] = total.push.Summary()
	}
	if len(conss) > 0 {
		end := lastDelivery.Load()
		if end == 0 {
			end = start.UnixNano()
		}
		rep.Consume = NewThroughput(total.consMsgs, total.consBytes, total.popReqs, time.Duration(end-start.UnixNano()))
		rep.Latency["pop"] = total.pop.Summary()
		rep.Latency["ack"] = total.ack.Summary()
		rep.Verification = tracker.Results(c.GroupName)
	}
	rep.Errors = total.errs
	rep.Problems = append(rep.Problems, problems...)
	rep.Warnings = warnings
	rep.Finish()
	return rep
}

func produce(ctx context.Context, c *Config, p int, pc Producer, deadline time.Time, tracker *Tracker,
	counters *Counters, s *stats, problem, warn func(string, ...any), cancel func()) {
	limit := c.ProducerCount(p)
	items := make([]Item, 0, c.PushBatch)
	var buf []byte
	// Paced (--rate): this producer's pushes are due at its share of the
	// rate, and the producers' schedules are staggered evenly over one
	// push interval so that they do not all send at the same instant.
	// Latency is still timed from the send, so a push held up by a slow
	// one before it does not count the wait.
	var perMsg time.Duration
	start := time.Now()
	if c.Rate > 0 {
		perMsg = time.Duration(float64(time.Second) * float64(c.Producers) / c.Rate)
		start = start.Add(perMsg * time.Duration(c.PushBatch) * time.Duration(p) / time.Duration(c.Producers))
	}
	for seq := int64(0); limit < 0 || seq < limit; {
		if c.Rate > 0 {
			due := start.Add(perMsg * time.Duration(seq))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}
		if ctx.Err() != nil || (!deadline.IsZero() && !time.Now().Before(deadline)) {
			return
		}
		n := int64(c.PushBatch)
		if limit >= 0 {
			n = min(n, limit-seq)
		}
		items, buf = items[:0], buf[:0]
		var bytes int64
		for i := int64(0); i < n; i++ {
			q, part := c.Place(p, seq+i)
			start := len(buf)
			buf = AppendPayload(buf, p, seq+i, c.PayloadSize)
			items = append(items, Item{Producer: p, Seq: seq + i, Queue: q, Partition: part,
				TxnID: c.TxnID(p, seq+i), Payload: buf[start:len(buf):len(buf)]})
			bytes += int64(len(buf) - start)
		}
		tracker.Attempted(p, seq+n)
		for attempt := 1; ; attempt++ {
			t0 := time.Now()
			dupes, err := pc.Push(ctx, items)
			s.pushReqs++
			if err == nil {
				s.push.Record(time.Since(t0))
				s.errs.PushDupes += int64(dupes)
				break
			}
			if ctx.Err() != nil {
				return
			}
			s.errs.Push++
			counters.Errors.Add(1)
			if attempt == 1 || attempt%10 == 0 {
				warn("push error (attempt %d of producer %d): %v", attempt, p, err)
			}
			if IsFatal(err) {
				problem("producer %d: %v (run stopped)", p, err)
				cancel()
				return
			}
			if attempt >= c.Retries {
				s.errs.PushGivenUp++
				problem("producer %d gave up after %d attempts at seq %d: %v", p, attempt, seq, err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryBackoff(attempt)):
			}
		}
		seq += n
		tracker.Confirmed(p, seq)
		s.prodMsgs += n
		s.prodBytes += bytes
		counters.Produced.Add(n)
	}
}

func consume(ctx context.Context, c *Config, g int, cc Consumer, tracker *Tracker, counters *Counters,
	s *stats, prodDone <-chan struct{}, prodEnd, groupLast, lastDelivery *atomic.Int64, problem, warn func(string, ...any),
	cancel func()) {
	ids := make([]string, 0, c.PopBatch)
	var popErrs int
	for {
		// Stop once the producers are done and the group has everything,
		// or nothing came for --idle-timeout since then.
		select {
		case <-ctx.Done():
			return
		case <-prodDone:
			if tracker.Done(g) {
				return
			}
			idleSince := max(groupLast.Load(), prodEnd.Load())
			if time.Since(time.Unix(0, idleSince)) >= c.IdleTimeout {
				return
			}
		default:
		}
		t0 := time.Now()
		ds, err := cc.Pop(ctx)
		s.popReqs++
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.errs.Pop++
			counters.Errors.Add(1)
			if IsFatal(err) {
				// Every consumer would get the same answer: stop the run
				// rather than let the others drain what this one cannot.
				problem("consumer of group %d: pop: %v (run stopped)", g, err)
				cancel()
				return
			}
			popErrs++
			if popErrs == 1 || popErrs%100 == 0 {
				warn("pop error (%d so far in one consumer of group %d): %v", popErrs, g, err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if len(ds) == 0 {
			s.errs.EmptyPops++
			continue
		}
		s.pop.Record(time.Since(t0))
		now := time.Now().UnixNano()
		groupLast.Store(now)
		lastDelivery.Store(now)
		ids = ids[:0]
		for _, d := range ds {
			ids = append(ids, d.TxnID)
			s.consBytes += int64(d.Bytes)
		}
		msgs := tracker.Delivered(g, ids)
		s.consMsgs += int64(len(ds))
		counters.Consumed.Add(int64(len(ds)))

		// An acknowledgment that got no answer (a node stopped or restarting,
		// a keep-alive connection it closed) or a 5xx is sent again, as a
		// push is (a driver sends each attempt to its next node): acking a
		// message again is idempotent, and given up the batch would stay
		// leased until its lease expired, starving its partition, so the
		// run would report as lost what the broker still holds.
		var (
			t1     time.Time
			failed []bool
		)
		for attempt := 1; ; attempt++ {
			t1 = time.Now()
			failed, err = cc.Ack(ctx, ds)
			s.ackReqs++
			if err == nil || ctx.Err() != nil || IsFatal(err) || attempt >= c.Retries {
				break
			}
			s.errs.Ack++
			counters.Errors.Add(1)
			if attempt == 1 || attempt%10 == 0 {
				warn("ack error (attempt %d in group %d): %v", attempt, g, err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryBackoff(attempt)):
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.errs.Ack++
			counters.Errors.Add(1)
			failed = make([]bool, len(ds))
			for i := range failed {
				failed[i] = true
			}
			if IsFatal(err) {
				// A refused ack (a 4xx) is refused again when retried:
				// nothing this run consumes would ever be acknowledged,
				// and the lease expiries would pass for redeliveries.
				tracker.Acked(g, msgs, failed)
				problem("consumer of group %d: ack: %v (run stopped)", g, err)
				cancel()
				return
			}
			warn("ack error in group %d: %v", g, err)
		} else {
			s.ack.Record(time.Since(t1))
			for _, f := range failed {
				if f {
					s.errs.AckItems++
				}
			}
		}
		tracker.Acked(g, msgs, failed)
	}
}

// retryBackoff is the wait before a failed push's or acknowledgment's next
// attempt: doubling from 50 ms, at most a second.
func retryBackoff(attempt int) time.Duration {
	return min(25*time.Millisecond<<min(attempt, 10), time.Second)
}
