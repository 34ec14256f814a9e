package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crownmq/crown/cmd/internal/benchkit"
	"github.com/crownmq/crown/cmd/internal/testcluster"
)

func runBench(t *testing.T, args ...string) (*benchkit.Report, int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb, func(string) string { return "" })
	var rep benchkit.Report
	if out.Len() > 0 {
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("crownctl %v: exit %d, not a JSON report: %v\n%s\nstderr: %s", args, code, err, out.String(), errb.String())
		}
	}
	return &rep, code, errb.String()
}

func checkExactlyOnce(t *testing.T, rep *benchkit.Report, groups int, want int64) {
	t.Helper()
	if !rep.OK || len(rep.Verification) != groups {
		t.Fatalf("report not OK: %+v", rep)
	}
	for _, v := range rep.Verification {
		if v.Expected != want || v.Unique != want || v.Lost != 0 || v.Duplicates != 0 {
			t.Errorf("verification %+v, want %d exactly once", v, want)
		}
	}
}

// TestBenchSingleNode runs the bench against a real crownd.
func TestBenchSingleNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts crownd")
	}
	c := testcluster.Start(t, 1)
	u := c.Node(0).URL()

	rep, code, stderr := runBench(t, "--url", u, "--json", "bench", "run", "--count", "3000",
		"--producers", "4", "--consumers", "4", "--progress", "on")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	checkExactlyOnce(t, rep, 1, 3000)
	if rep.Broker != "crown" || rep.Produce.Messages != 3000 || rep.Produce.Requests != 32 ||
		rep.Consume.Messages != 3000 || rep.Latency["push"].Count != 32 || rep.Latency["ack"].Count == 0 {
		t.Errorf("report %+v", rep)
	}
	if !strings.Contains(stderr, "produced") {
		t.Errorf("no progress line on stderr: %q", stderr)
	}

	// Produce, then consume with two groups over two queues; the first
	// group also drains what is left of other runs (foreign).
	rep, code, stderr = runBench(t, "--url", u, "--json", "bench", "run", "--mode", "produce", "--count", "2000",
		"--queues", "2", "--prefix", "pc", "--run-id", "r1", "--progress", "off")
	if code != 0 || rep.Produce.Messages != 2000 || rep.Consume != nil || rep.Verification != nil {
		t.Fatalf("produce: exit %d %+v %s", code, rep, stderr)
	}
	if !strings.Contains(stderr, "--mode consume --run-id r1") {
		t.Errorf("no consume hint: %s", stderr)
	}
	rep, code, stderr = runBench(t, "--url", u, "--json", "bench", "run", "--mode", "consume", "--count", "2000",
		"--queues", "2", "--prefix", "pc", "--run-id", "r1", "--groups", "2", "--consumers", "3",
		"--idle-timeout", "3s", "--progress", "off")
	if code != 0 {
		t.Fatalf("consume: exit %d: %s", code, stderr)
	}
	checkExactlyOnce(t, rep, 2, 2000)

	// Nothing left: a consume run expecting more reports the rest as lost
	// and fails.
	rep, code, _ = runBench(t, "--url", u, "--json", "bench", "run", "--mode", "consume", "--count", "2100",
		"--queues", "2", "--prefix", "pc", "--run-id", "r1", "--idle-timeout", "1s", "--progress", "off")
	if code != exitError || rep.OK || rep.Verification[0].Lost != 2100 {
		t.Fatalf("lost not reported: exit %d %+v", code, rep.Verification)
	}

	// Queue mode, a duration and text output.
	var out, errb bytes.Buffer
	code = run([]string{"--url", u, "bench", "run", "--queue-mode", "--duration", "500ms", "--prefix", "qm",
		"--progress", "off", "--payload-size", "100"}, &out, &errb, func(string) string { return "" })
	if code != 0 || !strings.Contains(out.String(), "verify __QUEUE_MODE__: ") || !strings.Contains(out.String(), "exactly once") {
		t.Fatalf("queue mode: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
}

// TestBenchThreeNodes spreads requests over a three-node cluster.
func TestBenchThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts crownd")
	}
	c := testcluster.Start(t, 3)
	var urls []string
	for _, n := range c.Nodes() {
		urls = append(urls, n.URL())
	}
	rep, code, stderr := runBench(t, "--url", strings.Join(urls, ","), "--json", "bench", "run", "--count", "2000",
		"--producers", "4", "--consumers", "4", "--progress", "off")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	checkExactlyOnce(t, rep, 1, 2000)
	if len(rep.Targets) != 3 {
		t.Errorf("targets %v", rep.Targets)
	}
}

// fakeQueen is a minimal broker: push (deduplicated, with injected 503s
// after applying), wildcard pop and batch ack.
type fakeQueen struct {
	mu       sync.Mutex
	seen     map[string]bool
	pending  []string
	pushes   int
	fail503  int // pushes answered 503 after applying
	status4x bool
	leases   int
}

func (f *fakeQueen) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.URL.Path == "/health":
		writeJSONTest(w, 200, map[string]any{"status": "healthy"})
	case r.URL.Path == "/api/v1/push":
		if f.status4x {
			apiErr(w, 400, "limit_exceeded", "items", "too many")
			return
		}
		items, ok := decodeFakePush(w, r)
		if !ok {
			return
		}
		var res []map[string]any
		for i, it := range items {
			st := "queued"
			if f.seen[it.TransactionID] {
				st = "duplicate"
			} else {
				f.seen[it.TransactionID] = true
				f.pending = append(f.pending, it.TransactionID)
			}
			res = append(res, map[string]any{"index": i, "status": st, "transaction_id": it.TransactionID})
		}
		f.pushes++
		if f.pushes <= f.fail503 {
			apiErr(w, 503, "unknown_outcome", "", "leadership changed")
			return
		}
		writeJSONTest(w, 201, res)
	case strings.HasPrefix(r.URL.Path, "/api/v1/pop/queue/"):
		if len(f.pending) == 0 {
			w.WriteHeader(204)
			return
		}
		n := min(len(f.pending), 10)
		f.leases++
		var msgs []map[string]any
		for _, id := range f.pending[:n] {
			msgs = append(msgs, map[string]any{"transactionId": id, "partitionId": "pid", "leaseId": fmt.Sprint("l", f.leases),
				"data": map[string]any{"x": 1}})
		}
		f.pending = f.pending[n:]
		writeJSONTest(w, 200, map[string]any{"messages": msgs})
	case r.URL.Path == "/api/v1/ack/batch":
		ackAllSucceeded(w, r)
	default:
		apiErr(w, 404, "not_found", "", "no route")
	}
}

// fakePushItem is what the fake servers read of a pushed item.
type fakePushItem struct {
	TransactionID string          `json:"transactionId"`
	Payload       json.RawMessage `json:"payload"`
}

// decodeFakePush reads a push request's items, answering 400 when it
// cannot.
func decodeFakePush(w http.ResponseWriter, r *http.Request) ([]fakePushItem, bool) {
	var req struct {
		Items []fakePushItem `json:"items"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiErr(w, 400, "invalid_json", "", err.Error())
		return nil, false
	}
	return req.Items, true
}

// ackAllSucceeded answers an ack/batch with every acknowledgment applied.
func ackAllSucceeded(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Acknowledgments []map[string]any `json:"acknowledgments"`
	}
	json.NewDecoder(r.Body).Decode(&req)
	res := make([]map[string]any, 0, len(req.Acknowledgments))
	for i := range req.Acknowledgments {
		res = append(res, map[string]any{"index": i, "success": true, "error": nil})
	}
	writeJSONTest(w, 200, res)
}

func TestBenchRetriesPushes(t *testing.T) {
	f := &fakeQueen{seen: map[string]bool{}, fail503: 3}
	srv := httptest.NewServer(f)
	defer srv.Close()
	rep, code, stderr := runBench(t, "--url", srv.URL, "--json", "bench", "run", "--count", "500",
		"--producers", "2", "--consumers", "2", "--progress", "off", "--idle-timeout", "1s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	checkExactlyOnce(t, rep, 1, 500)
	if rep.Errors.Push != 3 || rep.Errors.PushDupes == 0 {
		t.Errorf("errors %+v", rep.Errors)
	}

	// A 4xx stops the run at once.
	f = &fakeQueen{seen: map[string]bool{}, status4x: true}
	srv2 := httptest.NewServer(f)
	defer srv2.Close()
	rep, code, _ = runBench(t, "--url", srv2.URL, "--json", "bench", "run", "--count", "500", "--progress", "off")
	if code != exitError || rep.OK || len(rep.Problems) == 0 || !strings.Contains(rep.Problems[0], "limit_exceeded") {
		t.Fatalf("4xx: exit %d %+v", code, rep.Problems)
	}
}

// TestBenchProduceHint checks the consume command a produce run prints:
// its --count must let the consume run verify what was produced, also when
// the producers did not each send an even share of --count (--duration).
func TestBenchProduceHint(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		wantCount string
	}{
		{"count", []string{"--count", "500"}, "--count 500 "},
		{"duration", []string{"--count", "0", "--duration", "200ms", "--push-batch", "7"}, "--count 0 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(&fakeQueen{seen: map[string]bool{}})
			defer srv.Close()
			args := append([]string{"--url", srv.URL, "--json", "bench", "run", "--mode", "produce", "--producers", "3",
				"--progress", "off"}, tc.args...)
			rep, code, stderr := runBench(t, args...)
			if code != 0 || rep.Produce == nil {
				t.Fatalf("produce: exit %d: %s", code, stderr)
			}
			_, hint, ok := strings.Cut(stderr, "to consume these: crownctl ")
			if !ok || !strings.Contains(hint, tc.wantCount) {
				t.Fatalf("hint %q lacks %q", hint, tc.wantCount)
			}
			hint = strings.TrimSpace(hint)
			rep, code, stderr = runBench(t, append(append([]string{"--json"}, strings.Fields(hint)...),
				"--progress", "off", "--idle-timeout", "500ms")...)
			if code != 0 {
				t.Fatalf("consume with the hint %q: exit %d: %s %+v", hint, code, stderr, rep.Verification)
			}
			checkExactlyOnce(t, rep, 1, rep.Verification[0].Expected)
			if got := rep.Verification[0].Unique; got == 0 || got != rep.Consume.Messages {
				t.Errorf("consumed %d unique of %d deliveries", got, rep.Consume.Messages)
			}
		})
	}
}

func TestBenchUsageAndCompare(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "run", "--mode", "sideways"},
		{"bench", "run", "--mode", "consume"}, // no --run-id
		{"bench", "run", "--queue-mode", "--groups", "2"},
		{"bench", "run", "--push-batch", "0"},
		{"bench", "run", "extra"},
		{"bench", "compare", "one.json"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb, func(string) string { return "" }); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "run", "--help"}, &out, &errb, func(string) string { return "" }); code != 0 ||
		!strings.Contains(out.String(), "--pop-batch") || !strings.Contains(out.String(), "--queue-mode") {
		t.Fatalf("help: exit %d %s", code, out.String())
	}
	// Nothing listening: the preflight fails fast.
	if code := run([]string{"--url", "http://127.0.0.1:1", "bench", "run"}, &out, &errb, func(string) string { return "" }); code != exitError {
		t.Errorf("unreachable node: exit %d", code)
	}

	dir := t.TempDir()
	write := func(name string, r *benchkit.Report) string {
		p := filepath.Join(dir, name)
		var b bytes.Buffer
		if err := r.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wl := benchkit.Config{Mode: "both", Count: 1000, PayloadSize: 256, PushBatch: 100, PopBatch: 100,
		Partitions: 8, Queues: 1, Groups: 1, Producers: 8, Consumers: 8, RunID: "x"}
	a := &benchkit.Report{Broker: "crown", Workload: wl, OK: true,
		Produce: benchkit.NewThroughput(1000, 256000, 10, 1e9), Consume: benchkit.NewThroughput(1000, 256000, 10, 2e9),
		Latency: map[string]benchkit.Summary{"push": {Count: 10, P50Ms: 4, P90Ms: 5, P99Ms: 6, MaxMs: 7}}}
	b := &benchkit.Report{Broker: "jetstream", Workload: wl, OK: true,
		Produce: benchkit.NewThroughput(1000, 256000, 10, 5e8), Consume: benchkit.NewThroughput(1000, 256000, 10, 1e9),
		Latency: map[string]benchkit.Summary{"push": {Count: 10, P50Ms: 2, P90Ms: 5, P99Ms: 12, MaxMs: 14}}}
	pa, pb := write("a.json", a), write("b.json", b)
	out.Reset()
	if code := run([]string{"bench", "compare", pa, pb}, &out, &errb, func(string) string { return "" }); code != 0 {
		t.Fatalf("compare: exit %d %s", code, errb.String())
	}
	table := out.String()
	for _, want := range []string{"crown/jetstream", "produce msg/s", "1000", "2000", "0.50", "push p50 ms", "2.00", "push p99 ms", "crown: verification OK"} {
		if !strings.Contains(table, want) {
			t.Errorf("compare table lacks %q:\n%s", want, table)
		}
	}
	out.Reset()
	if code := run([]string{"bench", "compare", "--json", pa, pb}, &out, &errb, func(string) string { return "" }); code != 0 {
		t.Fatalf("compare --json: exit %d", code)
	}
	var cmp benchkit.Comparison
	if err := json.Unmarshal(out.Bytes(), &cmp); err != nil || cmp.A != "crown" || len(cmp.Rows) == 0 ||
		cmp.Rows[0].Name != "produce msg/s" || cmp.Rows[0].Ratio == nil || *cmp.Rows[0].Ratio != 0.5 {
		t.Fatalf("compare --json: %v %+v", err, cmp)
	}
	if code := run([]string{"bench", "compare", pa, filepath.Join(dir, "missing.json")}, &out, &errb, func(string) string { return "" }); code != exitError {
		t.Errorf("missing file: exit %d", code)
	}
	// The produce-only table does not print a "lost 0" nor "verification
	// OK" it never checked; the consume-only one does, saying how it got
	// its expected count.
	compare := func(a, b *benchkit.Report) string {
		t.Helper()
		out.Reset()
		if code := run([]string{"bench", "compare", write("a.json", a), write("b.json", b)}, &out, &errb, func(string) string { return "" }); code != 0 {
			t.Fatalf("compare: exit %d %s", code, errb.String())
		}
		return out.String()
	}
	wl.Mode = "produce"
	a.Workload, b.Workload, a.Consume, b.Consume = wl, wl, nil, nil
	table = compare(a, b)
	for _, want := range []string{"mode produce", "produce msg/s", "crown: produce run OK (nothing consumed: no delivery check)"} {
		if !strings.Contains(table, want) {
			t.Errorf("produce-only compare table lacks %q:\n%s", want, table)
		}
	}
	for _, bad := range []string{"lost", "duplicates", "verification", "consume msg/s"} {
		if strings.Contains(table, bad) {
			t.Errorf("produce-only compare table has %q:\n%s", bad, table)
		}
	}
	wl.Mode = "consume"
	a = &benchkit.Report{Broker: "crown", Workload: wl, OK: true, Consume: benchkit.NewThroughput(1000, 256000, 10, 1e9),
		Verification: []benchkit.GroupResult{{Group: "bench-g0", Expected: 1000, Unique: 1000, OK: true}}}
	b = &benchkit.Report{Broker: "jetstream", Workload: wl, OK: false, Consume: benchkit.NewThroughput(1000, 256000, 10, 1e9),
		Verification: []benchkit.GroupResult{{Group: "bench-g0", Expected: 1000, Unique: 998, Lost: 2, Inferred: true}}}
	table = compare(a, b)
	for _, want := range []string{"mode consume", "consume msg/s", "lost", "crown: verification OK\n",
		"jetstream: verification FAILED (expected count inferred from the deliveries)"} {
		if !strings.Contains(table, want) {
			t.Errorf("consume-only compare table lacks %q:\n%s", want, table)
		}
	}
}

// An acknowledgment that gets no answer or a 5xx is an error the harness
// sends again (benchkit's TestRunRetriesFailedAcks), not a fatal one, and
// each attempt goes to the next --url: given up, it left its batch leased
// for the queue's whole leaseTime. Stopping the leader of a three-node
// cluster (SIGTERM) during `crownctl bench run --duration 15s` against all
// three nodes stopped consumption for the rest of the run and the run failed
// with 525,186 messages "lost" that were still queued.
func TestBenchAckFailuresAreRetriedOnTheNextNode(t *testing.T) {
	var acks atomic.Int32
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if acks.Add(1) == 1 {
			apiErr(w, 503, "no_leader", "", "no leader")
			return
		}
		ackAllSucceeded(w, r)
	}))
	defer live.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // its port now refuses connections
	cfg := &benchkit.Config{Producers: 1, Groups: 1, Consumers: 1, Queues: 1, PopBatch: 10}
	// base() starts at urls[1]: the stopped node, then the live node's 503,
	// the stopped node again, then the live node's answer.
	d := newCrownBench([]string{live.URL, down.URL}, 5*time.Second, cfg, false, 0)
	cc, err := d.Consumer(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	ds := []benchkit.Delivery{{TxnID: "t1", Handle: &crownHandle{partitionID: "p", leaseID: "l"}}}
	for i, want := range []string{"refused", "503", "refused", ""} {
		failed, err := cc.Ack(context.Background(), ds)
		switch {
		case want == "" && (err != nil || failed != nil):
			t.Fatalf("attempt %d on the live node: failed %v, err %v; want it acknowledged", i+1, failed, err)
		case want != "" && (err == nil || benchkit.IsFatal(err)):
			t.Fatalf("attempt %d (%s): err %v; want an error the harness retries", i+1, want, err)
		}
	}
	if n := acks.Load(); n != 2 {
		t.Errorf("the live node saw %d acknowledgments, want 2 (every other attempt)", n)
	}
}
