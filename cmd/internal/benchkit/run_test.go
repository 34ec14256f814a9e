package benchkit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeBroker is an in-memory broker: every group gets every message once
// (deduplicated by transaction id); a refused ack puts the message back.
type fakeBroker struct {
	mu         sync.Mutex
	seen       map[string]bool
	pending    [][]string // per group
	pushes     int
	failEvery  int             // every Nth push fails after applying (an unknown outcome), a batch at most once
	failAll    bool            // every push fails, retries too
	failedOnce map[string]bool // batches (by first transaction id) failed already
	failAck    bool            // the first ack of each group refuses its first item
	ackFailed  map[int]bool
	ackErrors  int  // the first ackErrors acks fail without applying (a transport error)
	dupDeliver bool // deliver the first message of group 0 twice (a broker bug)
	fatalPush  bool
}

func newFakeBroker(groups int) *fakeBroker {
	return &fakeBroker{seen: map[string]bool{}, pending: make([][]string, groups), ackFailed: map[int]bool{},
		failedOnce: map[string]bool{}}
}

func (b *fakeBroker) Producer(int) (Producer, error)      { return fakeProducer{b}, nil }
func (b *fakeBroker) Consumer(g, _ int) (Consumer, error) { return &fakeConsumer{b: b, g: g}, nil }
func (fakeProducer) Close()                               {}
func (*fakeConsumer) Close()                              {}

type fakeProducer struct{ b *fakeBroker }

func (p fakeProducer) Push(_ context.Context, items []Item) (int, error) {
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fatalPush {
		return 0, Fatal(errors.New("400 bad request"))
	}
	b.pushes++
	dupes := 0
	for _, it := range items {
		if b.seen[it.TxnID] {
			dupes++
			continue
		}
		b.seen[it.TxnID] = true
		for g := range b.pending {
			b.pending[g] = append(b.pending[g], it.TxnID)
			if b.dupDeliver && g == 0 && it.Producer == 0 && it.Seq == 0 {
				b.pending[g] = append(b.pending[g], it.TxnID)
			}
		}
	}
	// A retried batch is not failed again: with failures counted across
	// producers, one producer's retries could otherwise each land on a
	// failing count and use up its attempts, depending on how the two
	// producers interleave.
	if b.failAll || b.failEvery > 0 && b.pushes%b.failEvery == 0 && !b.failedOnce[items[0].TxnID] {
		b.failedOnce[items[0].TxnID] = true
		return 0, errors.New("503 unknown outcome")
	}
	return dupes, nil
}

type fakeConsumer struct {
	b *fakeBroker
	g int
}

func (c *fakeConsumer) Pop(ctx context.Context) ([]Delivery, error) {
	c.b.mu.Lock()
	q := c.b.pending[c.g]
	n := min(len(q), 7)
	out := make([]Delivery, n)
	for i := range n {
		out[i] = Delivery{TxnID: q[i], Bytes: 10}
	}
	c.b.pending[c.g] = q[n:]
	c.b.mu.Unlock()
	if n == 0 {
		select { // a short long-poll
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	return out, nil
}

func (c *fakeConsumer) Ack(_ context.Context, ds []Delivery) ([]bool, error) {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ackErrors > 0 {
		b.ackErrors--
		return nil, errors.New("connection refused")
	}
	if b.failAck && !b.ackFailed[c.g] {
		b.ackFailed[c.g] = true
		failed := make([]bool, len(ds))
		failed[0] = true
		b.pending[c.g] = append(b.pending[c.g], ds[0].TxnID) // redelivered
		return failed, nil
	}
	return nil, nil
}

func runFake(t *testing.T, c *Config, b *fakeBroker) *Report {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var counters Counters
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return Run(ctx, c, b, &counters)
}

func TestRunClean(t *testing.T) {
	c := testConfig(ModeBoth, 1000, 3, 2)
	c.Consumers, c.IdleTimeout = 2, time.Second
	b := newFakeBroker(2)
	rep := runFake(t, c, b)
	if !rep.OK || rep.Produce.Messages != 1000 || rep.Consume.Messages != 2000 {
		t.Fatalf("report %+v", rep)
	}
	if rep.Latency["push"].Count != uint64(rep.Produce.Requests) || rep.Latency["pop"].Count == 0 || rep.Latency["ack"].Count == 0 {
		t.Fatalf("latency %+v", rep.Latency)
	}
	for _, v := range rep.Verification {
		if v.Unique != 1000 || v.Lost != 0 || v.Duplicates != 0 || v.Redelivered != 0 {
			t.Errorf("verification %+v", v)
		}
	}
}

func TestRunRetriesAndRedeliveries(t *testing.T) {
	c := testConfig(ModeBoth, 500, 2, 2)
	c.Retries, c.IdleTimeout = 3, time.Second
	b := newFakeBroker(2)
	b.failEvery, b.failAck = 4, true
	rep := runFake(t, c, b)
	if !rep.OK {
		t.Fatalf("not OK: %+v", rep)
	}
	if rep.Errors.Push == 0 || rep.Errors.PushDupes == 0 || rep.Errors.AckItems != 2 {
		t.Fatalf("errors %+v", rep.Errors)
	}
	for _, v := range rep.Verification {
		if v.Unique != 500 || v.Redelivered != 1 || v.Duplicates != 0 || v.Unacked != 0 {
			t.Errorf("verification %+v", v)
		}
	}
}

// An acknowledgment that failed (no answer, a 5xx) is sent again, as a push
// is: given up, its batch would stay leased and the run would report its
// messages lost (with this fake broker, never delivered again at all).
func TestRunRetriesFailedAcks(t *testing.T) {
	c := testConfig(ModeBoth, 200, 1, 1)
	c.Retries, c.IdleTimeout = 3, time.Second
	b := newFakeBroker(1)
	b.ackErrors = 2 // one ack's first two attempts
	rep := runFake(t, c, b)
	if !rep.OK || rep.Errors.Ack != 2 {
		t.Fatalf("OK %v, ack errors %d (want 2): %+v", rep.OK, rep.Errors.Ack, rep.Errors)
	}
	for _, v := range rep.Verification {
		if v.Unique != 200 || v.Lost != 0 || v.Duplicates != 0 || v.Unacked != 0 {
			t.Errorf("verification %+v", v)
		}
	}
}

func TestRunDetectsDuplicate(t *testing.T) {
	c := testConfig(ModeBoth, 100, 1, 1)
	c.IdleTimeout = 200 * time.Millisecond
	b := newFakeBroker(1)
	b.dupDeliver = true
	rep := runFake(t, c, b)
	if rep.OK || rep.Verification[0].Duplicates != 1 {
		t.Fatalf("duplicate not detected: %+v", rep.Verification)
	}
}

func TestRunGivesUpAndFatal(t *testing.T) {
	c := testConfig(ModeBoth, 100, 1, 1)
	c.Retries, c.IdleTimeout = 2, 200*time.Millisecond
	b := newFakeBroker(1)
	b.failAll = true // every push fails (after applying)
	rep := runFake(t, c, b)
	if rep.OK || rep.Errors.PushGivenUp != 1 || len(rep.Problems) == 0 {
		t.Fatalf("give-up: %+v", rep)
	}
	// The first batch applied but was never confirmed: delivered, unconfirmed.
	if v := rep.Verification[0]; v.Expected != 0 || v.Unconfirmed != 10 || v.Lost != 0 {
		t.Fatalf("verification %+v", v)
	}

	b = newFakeBroker(1)
	b.fatalPush = true
	rep = runFake(t, testConfig(ModeBoth, 100, 2, 1), b)
	if rep.OK || len(rep.Problems) == 0 || rep.Errors.Push == 0 {
		t.Fatalf("fatal: %+v", rep)
	}
}

func TestRunDurationAndConsumeOnly(t *testing.T) {
	c := testConfig(ModeProduce, 0, 2, 1)
	c.Duration = 100 * time.Millisecond
	b := newFakeBroker(1)
	rep := runFake(t, c, b)
	if !rep.OK || rep.Consume != nil || rep.Produce.Messages == 0 || rep.Produce.Messages%10 != 0 {
		t.Fatalf("produce: %+v", rep.Produce)
	}
	produced := rep.Produce.Messages

	c2 := testConfig(ModeConsume, 0, 2, 1)
	c2.RunID, c2.IdleTimeout = c.RunID, 200*time.Millisecond
	rep = runFake(t, c2, b)
	v := rep.Verification[0]
	if !rep.OK || v.Unique != produced || !v.Inferred || rep.Produce != nil {
		t.Fatalf("consume: %+v %+v", rep, v)
	}
}

func TestRunInterrupted(t *testing.T) {
	c := testConfig(ModeBoth, 0, 1, 1)
	c.Duration = time.Hour
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var counters Counters
	rep := Run(ctx, c, newFakeBroker(1), &counters)
	if rep.OK || !rep.Interrupted || counters.Produced.Load() == 0 {
		t.Fatalf("interrupted run: %+v", rep)
	}
}

// TestRunRatePaces: with --rate the producers cannot finish before their
// schedule (a lower bound, which sleeping guarantees), and still push
// everything exactly once.
func TestRunRatePaces(t *testing.T) {
	c := testConfig(ModeBoth, 300, 3, 1)
	c.Rate, c.IdleTimeout = 1000, time.Second
	t0 := time.Now()
	rep := runFake(t, c, newFakeBroker(1))
	// Each producer's last batch (seq 90 of 100 at 333 msg/s) is due at 0.27 s.
	if el := time.Since(t0); el < 250*time.Millisecond {
		t.Errorf("300 messages at 1000 msg/s took %v", el)
	}
	if !rep.OK || rep.Produce.Messages != 300 || !strings.Contains(c.Describe(), "at 1,000 msg/s") {
		t.Fatalf("report %+v, workload %q", rep, c.Describe())
	}
}
