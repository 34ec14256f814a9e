package benchkit

import (
	"fmt"
	"testing"
)

func testConfig(mode string, count int64, producers, groups int) *Config {
	c := &Config{Mode: mode, Count: count, PayloadSize: 64, PushBatch: 10, PopBatch: 10, Partitions: 2,
		Queues: 1, Groups: groups, Producers: producers, Consumers: 1, Prefix: "t", RunID: "run1",
		IdleTimeout: 1, Progress: "off", Retries: 1}
	return c
}

func ids(c *Config, p int, seqs ...int64) []string {
	var out []string
	for _, s := range seqs {
		out = append(out, c.TxnID(p, s))
	}
	return out
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for s := from; s < to; s++ {
		out = append(out, s)
	}
	return out
}

func groupName(g int) string { return fmt.Sprintf("g%d", g) }

func TestTrackerExactlyOnce(t *testing.T) {
	c := testConfig(ModeBoth, 20, 2, 2)
	tr := NewTracker(c)
	for p := 0; p < 2; p++ {
		tr.Attempted(p, 10)
		tr.Confirmed(p, 10)
	}
	if tr.TotalConfirmed() != 20 {
		t.Fatalf("TotalConfirmed %d", tr.TotalConfirmed())
	}
	for g := 0; g < 2; g++ {
		for p := 0; p < 2; p++ {
			msgs := tr.Delivered(g, ids(c, p, seqRange(0, 10)...))
			tr.Acked(g, msgs, nil)
		}
		if !tr.Done(g) {
			t.Fatalf("group %d not done after every message", g)
		}
	}
	for _, r := range tr.Results(groupName) {
		want := GroupResult{Group: r.Group, Expected: 20, Deliveries: 20, Unique: 20, OK: true}
		if r != want {
			t.Errorf("result %+v, want %+v", r, want)
		}
	}
}

func TestTrackerLostDuplicatesRedelivered(t *testing.T) {
	c := testConfig(ModeBoth, 10, 1, 1)
	tr := NewTracker(c)
	tr.Attempted(0, 10)
	tr.Confirmed(0, 10)
	// 0..4 delivered and acked; 5 delivered, its ack failed, redelivered and
	// acked; 6 delivered, its ack failed twice (redelivered once, unacked);
	// 2 and 3 delivered again after their ack: duplicates.
	tr.Acked(0, tr.Delivered(0, ids(c, 0, 0, 1, 2, 3, 4)), nil)
	tr.Acked(0, tr.Delivered(0, ids(c, 0, 5, 6)), []bool{true, true})
	tr.Acked(0, tr.Delivered(0, ids(c, 0, 5, 6, 2, 3)), []bool{false, true, false, false})
	// 7 twice in one batch, and again while the first ack is pending: 2
	// duplicates. 8 and 9 are lost.
	tr.Delivered(0, ids(c, 0, 7, 7))
	tr.Delivered(0, ids(c, 0, 7))
	if tr.Done(0) || tr.Unique(0) != 8 {
		t.Fatalf("Done %v, Unique %d", tr.Done(0), tr.Unique(0))
	}
	r := tr.Results(groupName)[0]
	want := GroupResult{Group: "g0", Expected: 10, Deliveries: 14, Unique: 8, Lost: 2, Duplicates: 4,
		Redelivered: 2, Unacked: 2}
	if r != want {
		t.Fatalf("result\n %+v\nwant\n %+v", r, want)
	}
}

func TestTrackerForeignUnexpectedUnconfirmed(t *testing.T) {
	c := testConfig(ModeBoth, 10, 2, 1)
	tr := NewTracker(c)
	// Producer 0 confirmed 0..4 and gave up on 5..9; producer 1 confirmed 0..4.
	tr.Attempted(0, 10)
	tr.Confirmed(0, 5)
	tr.Attempted(1, 5)
	tr.Confirmed(1, 5)
	in := ids(c, 0, seqRange(0, 7)...)                      // 5, 6: unconfirmed, fine
	in = append(in, ids(c, 1, seqRange(0, 5)...)...)        // all good
	in = append(in, c.TxnID(1, 5), c.TxnID(2, 0))           // never sent: unexpected
	in = append(in, "other-0-1", "garbage", "", "run1-x-1") // foreign
	msgs := tr.Delivered(0, in)
	if len(msgs) != len(in) {
		t.Fatalf("%d msgs for %d ids", len(msgs), len(in))
	}
	if !msgs[0].Own || msgs[0].Producer != 0 || msgs[0].Seq != 0 || msgs[len(msgs)-1].Own {
		t.Fatalf("msgs %+v", msgs)
	}
	tr.Acked(0, msgs, nil)
	r := tr.Results(groupName)[0]
	want := GroupResult{Group: "g0", Expected: 10, Deliveries: 14, Unique: 10, Unconfirmed: 2, Unexpected: 2, Foreign: 4}
	if r != want {
		t.Fatalf("result\n %+v\nwant\n %+v", r, want)
	}
}

func TestTrackerConsumeWithCount(t *testing.T) {
	c := testConfig(ModeConsume, 7, 2, 1) // producer 0: 0..3, producer 1: 0..2
	tr := NewTracker(c)
	if tr.TotalConfirmed() != 7 {
		t.Fatalf("TotalConfirmed %d", tr.TotalConfirmed())
	}
	tr.Acked(0, tr.Delivered(0, append(ids(c, 0, 0, 1, 2, 3), ids(c, 1, 0, 2)...)), nil)
	if tr.Done(0) {
		t.Fatal("done with one message missing")
	}
	r := tr.Results(groupName)[0]
	if r.Lost != 1 || r.Unique != 6 || r.OK {
		t.Fatalf("result %+v", r)
	}
	tr.Acked(0, tr.Delivered(0, ids(c, 1, 1)), nil)
	if !tr.Done(0) || !tr.Results(groupName)[0].OK {
		t.Fatalf("not done/OK: %+v", tr.Results(groupName)[0])
	}
}

func TestTrackerConsumeInferred(t *testing.T) {
	c := testConfig(ModeConsume, 0, 1, 2)
	tr := NewTracker(c)
	// Producer 3 was not declared (--producers 1) but is inferred too.
	tr.Acked(0, tr.Delivered(0, append(ids(c, 0, 0, 1, 4), ids(c, 3, 0, 1)...)), nil)
	tr.Acked(1, tr.Delivered(1, ids(c, 0, 0, 1, 2, 3)), nil)
	if tr.Done(0) || tr.Done(1) {
		t.Fatal("an inferring tracker is never done")
	}
	rs := tr.Results(groupName)
	// Expected per producer: 0..4 (highest seen in any group) and 0..1.
	if r := rs[0]; r.Expected != 7 || r.Unique != 5 || r.Lost != 2 || !r.Inferred || r.OK {
		t.Errorf("group 0: %+v", r)
	}
	if r := rs[1]; r.Expected != 7 || r.Unique != 4 || r.Lost != 3 || r.OK {
		t.Errorf("group 1: %+v", r)
	}
}

func TestTxnIDRoundTrip(t *testing.T) {
	c := testConfig(ModeBoth, 1, 1, 1)
	c.RunID = "ab12"
	for _, tc := range []struct {
		p int
		s int64
	}{{0, 0}, {7, 123456789}, {65535, 1 << 40}} {
		run, p, s, ok := ParseTxnID(c.TxnID(tc.p, tc.s))
		if !ok || run != "ab12" || p != tc.p || s != tc.s {
			t.Errorf("%d/%d: got %q %d %d %v", tc.p, tc.s, run, p, s, ok)
		}
	}
	for _, bad := range []string{"", "-1-2", "a-1", "a--1", "a-1-", "a-x-1", "a-1--2", "a-1-2x"} {
		if _, _, _, ok := ParseTxnID(bad); ok {
			t.Errorf("ParseTxnID(%q) ok", bad)
		}
	}
}

func TestPayloadSizeAndPlacement(t *testing.T) {
	for _, size := range []int{40, 256, 1000} {
		for _, seq := range []int64{0, 9, 123456} {
			b := AppendPayload([]byte("prefix"), 3, seq, size)
			if got := len(b) - len("prefix"); got != size {
				t.Errorf("size %d seq %d: payload %d bytes: %s", size, seq, got, b)
			}
		}
	}
	c := testConfig(ModeBoth, 100, 3, 1)
	c.Queues, c.Partitions = 2, 3
	counts := map[[2]int]int{}
	for p := 0; p < 3; p++ {
		for s := int64(0); s < 60; s++ {
			q, part := c.Place(p, s)
			counts[[2]int{q, part}]++
		}
	}
	if len(counts) != 6 {
		t.Fatalf("placement covers %d slots: %v", len(counts), counts)
	}
	for k, n := range counts {
		if n != 30 {
			t.Errorf("slot %v got %d messages, want 30", k, n)
		}
	}
	total := int64(0)
	for p := 0; p < 3; p++ {
		total += c.ProducerCount(p)
	}
	if total != 100 || c.ProducerCount(0) != 34 || c.ProducerCount(2) != 33 {
		t.Errorf("split of 100 over 3: %d %d %d", c.ProducerCount(0), c.ProducerCount(1), c.ProducerCount(2))
	}
}

func TestValidate(t *testing.T) {
	c := testConfig(ModeBoth, 0, 1, 1)
	c.IdleTimeout = 10
	c.RunID = ""
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Count != DefaultCount || len(c.RunID) != 8 {
		t.Errorf("defaults: count %d run %q", c.Count, c.RunID)
	}
	c = testConfig(ModeConsume, 0, 1, 1)
	c.RunID = ""
	if err := c.Validate(); err == nil {
		t.Error("consume without --run-id accepted")
	}
	for _, mutate := range []func(*Config){
		func(c *Config) { c.Mode = "x" },
		func(c *Config) { c.PushBatch = 0 },
		func(c *Config) { c.PayloadSize = 10 },
		func(c *Config) { c.Prefix = "a.b" },
		func(c *Config) { c.RunID = "a-b" },
		func(c *Config) { c.Progress = "maybe" },
	} {
		c := testConfig(ModeBoth, 10, 1, 1)
		mutate(c)
		if err := c.Validate(); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}
