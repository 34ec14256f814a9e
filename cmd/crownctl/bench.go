package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/crownmq/crown/cmd/internal/benchkit"
)

// The bench command group: a load generator with an exactly-once check.
// The workload, the measuring harness and the report are shared with the
// JetStream driver (cmd/internal/natsbench) through cmd/internal/benchkit;
// this file is the Crown side: push, pop and batch ack over HTTP.

func init() { groups = append(groups, benchGroup) }

var benchGroup = &group{
	name:    "bench",
	summary: "load-test a cluster: throughput, latency and an exactly-once check (run, compare)",
	subs: []subcommand{
		{
			name: "run", summary: "run producers and consumers, print throughput, latency and a delivery verification",
			help: `Producers push batches of --push-batch messages (POST /api/v1/push) with
transaction ids RUN-PRODUCER-SEQ and JSON payloads {"p":P,"s":SEQ,"pad":"x..."}
of --payload-size bytes, spread round-robin over partitions p0.. of queues
PREFIX-q0... Consumers long-poll (GET /api/v1/pop/queue/Q?wait=true&timeout=1000
&batch=--pop-batch&consumerGroup=PREFIX-gN) and acknowledge each popped batch with
one POST /api/v1/ack/batch. Requests go round-robin to every --url. A push
that fails with a 5xx or a transport error is retried with the same
transaction ids (idempotent), and so is an acknowledgment (a completed ack
is idempotent too), each attempt on the next node, up to --retries
attempts; a 4xx stops the run.

The report gives messages/s and MB/s (payload bytes, 10^6) of each side and
p50/p90/p99/max latency of push, pop (only pops that delivered; a pop's
latency includes any long-poll wait) and ack requests, then checks per
consumer group that every confirmed message was consumed exactly once:
lost (never delivered), duplicates (delivered again although nothing
excused it: after its ack succeeded, twice in one batch, or while the
previous delivery's ack was pending when that ack then succeeded or never
came back), redelivered (again after the previous delivery's ack failed, as
when its lease expired before the ack: at-least-once).
The exit code is 1 when the check fails, a push was given up or a 4xx
stopped the run.

--mode produce leaves the messages in place and prints the command for a
later --mode consume, which drains them and checks them against the
produce run's --run-id, --producers and --count.

Examples:
  crownctl bench run --count 100000
  crownctl --url http://127.0.0.1:6632,http://127.0.0.1:6633,http://127.0.0.1:6634 \
      bench run --duration 30s --producers 8 --consumers 8 --json >crown.json`,
			maxArgs: 0, flags: benchFlags, run: benchRun,
		},
		{
			name: "compare", args: "A.json B.json", summary: "compare two reports of bench run --json, with the ratio A/B of each figure",
			help: `Reads two reports written by 'crownctl bench run --json' (or by the
JetStream driver cmd/internal/natsbench) and prints one table: each figure
of both and the ratio A/B. With --json, the rows as JSON. Reports of
--mode produce runs have no delivery check (nothing was consumed): their
table leaves out lost, duplicates and redelivered, which the reports of the
--mode consume runs of the same messages give.`,
			minArgs: 2, maxArgs: 2, run: benchCompare,
		},
	},
}

// benchOptions holds the bench run flags.
type benchOptions struct {
	cfg           benchkit.Config
	queueMode     bool
	popPartitions int
	cpuProfile    string
}

func benchFlags(fs *flag.FlagSet) any {
	benchOpts := &benchOptions{}
	benchkit.RegisterFlags(fs, &benchOpts.cfg)
	fs.BoolVar(&benchOpts.queueMode, "queue-mode", false, "consume in queue mode (no consumerGroup) instead of group PREFIX-g0; needs --groups 1")
	fs.IntVar(&benchOpts.popPartitions, "pop-partitions", 1, "partitions one pop may claim (the pop's partitions parameter)")
	fs.StringVar(&benchOpts.cpuProfile, "cpuprofile", "", "write the load generator's own CPU profile to this file (it shares the machine with the servers)")
	return benchOpts
}

func benchRun(ctx context.Context, e *env, _ []string) error {
	benchOpts := e.opts.(*benchOptions)
	cfg := benchOpts.cfg
	if err := cfg.Validate(); err != nil {
		return usagef("%v", err)
	}
	if benchOpts.queueMode && cfg.Groups != 1 {
		return usagef("--queue-mode needs --groups 1")
	}
	if benchOpts.popPartitions < 1 {
		return usagef("--pop-partitions must be at least 1")
	}
	d := newCrownBench(e.client.URLs, e.timeout, &cfg, benchOpts.queueMode, benchOpts.popPartitions)
	defer d.http.CloseIdleConnections()
	if err := d.preflight(ctx); err != nil {
		return err
	}
	ctx, reraise := benchkit.Interruptible(ctx)
	defer reraise()

	fmt.Fprintf(e.stderr, "crown bench: %s\n", cfg.Describe())
	if benchOpts.cpuProfile != "" {
		f, err := os.Create(benchOpts.cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var counters benchkit.Counters
	prog := benchkit.StartProgress(e.stderr, &counters, cfg.Progress)
	rep := benchkit.Run(ctx, &cfg, d, &counters)
	prog.Stop()
	rep.Broker = "crown"
	rep.Targets = e.client.URLs
	if benchOpts.queueMode {
		rep.Notes = append(rep.Notes, "queue mode (no consumer group)")
		for i := range rep.Verification {
			rep.Verification[i].Group = "__QUEUE_MODE__"
		}
	}
	if e.json {
		if err := rep.WriteJSON(e.stdout); err != nil {
			return err
		}
	} else if err := rep.Render(e.stdout); err != nil {
		return err
	}
	if cfg.Mode == benchkit.ModeProduce && rep.Produce != nil {
		// A consume run with --count N expects producer p to have sent
		// its even share of N: true only when every producer sent all of
		// --count. After --duration or given-up pushes the shares differ,
		// so the consume run must infer them (--count 0).
		count := cfg.Count
		if count == 0 || rep.Produce.Messages != count {
			count = 0
		}
		fmt.Fprintf(e.stderr, "to consume these: crownctl --url %s bench run --mode consume --run-id %s --producers %d --count %d --prefix %s --queues %d\n",
			strings.Join(e.client.URLs, ","), cfg.RunID, cfg.Producers, count, cfg.Prefix, cfg.Queues)
	}
	if !rep.OK {
		return errors.New("bench failed (see the report)")
	}
	return nil
}

func benchCompare(_ context.Context, e *env, args []string) error {
	a, err := benchkit.ReadReport(args[0])
	if err != nil {
		return err
	}
	b, err := benchkit.ReadReport(args[1])
	if err != nil {
		return err
	}
	if e.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(benchkit.Compare(a, b))
	}
	return benchkit.RenderCompare(e.stdout, a, b)
}

// crownBench is the benchkit.Driver for Crown's HTTP API.
type crownBench struct {
	urls          []string
	http          *http.Client
	next          atomic.Uint64
	cfg           *benchkit.Config
	queueMode     bool
	popPartitions int
	answerLimit   int64 // the longest answer read: see answerLimit
}

// popMessageOverhead bounds what a pop answer adds to each message's
// payload: its ids, names, lease, timestamps and counters (about 590 bytes
// in Queen's shape), with room to spare.
const popMessageOverhead = 2048

// crownMaxPayload is the largest payload Crown stores (httpapi's
// MaxPayloadBytes).
const crownMaxPayload = 8 << 20

// answerLimit is how much of an answer the bench reads: enough for a pop
// answer of --pop-batch messages of the largest payload. Crown caps a pop by
// messages, not bytes, so 100 messages of 1 MiB are one answer of over 100
// MiB, and cut short its messages (leased already) would be lost to the run.
// Not --payload-size: a consume run does not know the produce run's, and
// the messages of other runs it drains may be larger.
func answerLimit(cfg *benchkit.Config) int64 {
	payload := max(int64(cfg.PayloadSize), crownMaxPayload)
	batch := max(int64(cfg.PopBatch), 0)
	if payload > math.MaxInt64-popMessageOverhead {
		return math.MaxInt64
	}
	per := payload + popMessageOverhead
	if batch > (math.MaxInt64-maxAnswer)/per {
		return math.MaxInt64
	}
	return batch*per + maxAnswer
}

func newCrownBench(urls []string, timeout time.Duration, cfg *benchkit.Config, queueMode bool, popPartitions int) *crownBench {
	conns := cfg.Producers + cfg.Groups*cfg.Consumers + 8
	tr := &http.Transport{
		Proxy:               nil, // a benchmark talks to the nodes directly
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns * len(urls),
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &crownBench{urls: urls, http: &http.Client{Transport: tr, Timeout: timeout}, cfg: cfg,
		queueMode: queueMode, popPartitions: popPartitions, answerLimit: answerLimit(cfg)}
}

// base picks the next node, round-robin.
func (d *crownBench) base() string {
	return d.urls[int(d.next.Add(1)%uint64(len(d.urls)))]
}

// preflight fails fast when no node answers /health.
func (d *crownBench) preflight(ctx context.Context) error {
	var failures []string
	for _, u := range d.urls {
		status, body, err := d.do(ctx, http.MethodGet, u+"/health", nil, nil)
		if err == nil && status == http.StatusOK {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("HTTP %d: %.200s", status, bytes.TrimSpace(body))
		}
		failures = append(failures, fmt.Sprintf("%s: %v", u, err))
	}
	return fmt.Errorf("no healthy node:\n  %s", strings.Join(failures, "\n  "))
}

// do sends one request and reads the whole answer (so that the connection
// is reused) into answer's storage, which each producer and consumer keeps:
// a consumer reads a 60 KB pop answer many times a second, and io.ReadAll
// would grow a fresh buffer from 512 bytes for each.
func (d *crownBench) do(ctx context.Context, method, u string, body []byte, answer *[]byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, benchkit.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var b []byte
	if answer != nil {
		b = (*answer)[:0]
	}
	b, err = readAnswer(b, resp.Body, resp.ContentLength, d.answerLimit)
	if answer != nil {
		*answer = b
	}
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: read answer: %w", method, u, err)
	}
	return resp.StatusCode, b, nil
}

// readAnswer appends the answer r to b, growing b once to the length the
// server stated (-1 when it stated none), and a byte more: the read that
// finds the end needs room to be asked for. An answer longer than limit
// bytes is an error: cut short, it would parse as a broken answer, or worse
// as a shorter one.
func readAnswer(b []byte, r io.Reader, length, limit int64) ([]byte, error) {
	if length > 0 {
		b = slices.Grow(b, int(min(length, limit))+1)
	}
	lr := io.LimitedReader{R: r, N: limit}
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, 4096)
		}
		n, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return b, err
		}
	}
	if lr.N > 0 {
		return b, nil // the answer's own end
	}
	// The limit's EOF: the answer may go on.
	var one [1]byte
	switch _, err := io.ReadFull(r, one[:]); err {
	case io.EOF:
		return b, nil
	case nil:
		return b, fmt.Errorf("answer longer than %d bytes", limit)
	default:
		return b, err
	}
}

// statusError turns an unexpected status into an error: a 4xx is fatal
// (retrying the same request cannot help), a 5xx is retried.
func statusError(status int, u string, body []byte) error {
	err := decodeError(status, u, body)
	if status >= 400 && status < 500 {
		return benchkit.Fatal(err)
	}
	return err
}

func (d *crownBench) Producer(int) (benchkit.Producer, error) { return &crownProducer{d: d}, nil }

// Consumer c of group g reads queue c%Q when there are at least as many
// consumers as queues, else every queue q with q%C == c.
func (d *crownBench) Consumer(g, c int) (benchkit.Consumer, error) {
	cc := &crownConsumer{d: d}
	if !d.queueMode {
		cc.group = d.cfg.GroupName(g)
	}
	q := url.Values{}
	q.Set("batch", strconv.Itoa(d.cfg.PopBatch))
	q.Set("timeout", "1000")
	if cc.group != "" {
		q.Set("consumerGroup", cc.group)
	}
	if d.popPartitions > 1 {
		q.Set("partitions", strconv.Itoa(d.popPartitions))
	}
	query := q.Encode()
	for i := 0; i < d.cfg.Queues; i++ {
		if (d.cfg.Consumers >= d.cfg.Queues && i == c%d.cfg.Queues) ||
			(d.cfg.Consumers < d.cfg.Queues && i%d.cfg.Consumers == c) {
			cc.paths = append(cc.paths, "/api/v1/pop/queue/"+url.PathEscape(d.cfg.QueueName(i))+"?"+query)
		}
	}
	return cc, nil
}

type crownProducer struct {
	d      *crownBench
	body   []byte // the last push request, reused
	answer []byte // the last answer, its storage reused
}

func (p *crownProducer) Close() {}

// Push sends one POST /api/v1/push; the body is built by hand (the names
// and ids are plain ASCII, the payloads JSON already).
func (p *crownProducer) Push(ctx context.Context, items []benchkit.Item) (int, error) {
	b := append(p.body[:0], `{"items":[`...)
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"queue":"`...)
		b = append(b, p.d.cfg.QueueName(it.Queue)...)
		b = append(b, `","partition":"`...)
		b = append(b, benchkit.PartitionName(it.Partition)...)
		b = append(b, `","transactionId":"`...)
		b = append(b, it.TxnID...)
		b = append(b, `","payload":`...)
		b = append(b, it.Payload...)
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	p.body = b
	u := p.d.base() + "/api/v1/push"
	status, body, err := p.d.do(ctx, http.MethodPost, u, b, &p.answer)
	if err != nil {
		return 0, err
	}
	if status != http.StatusCreated && status != http.StatusOK {
		return 0, statusError(status, u, body)
	}
	results, err := pushResults(body)
	if err != nil {
		return 0, fmt.Errorf("POST %s: answer: %w", u, err)
	}
	if len(results) != len(items) {
		return 0, fmt.Errorf("POST %s: %d results for %d items", u, len(results), len(items))
	}
	dupes := 0
	for i, r := range results {
		switch r.Status {
		case "queued":
		case "buffered":
			// Push maintenance (queen-api.md 3.17): accepted into the
			// replicated side buffer and stored when it is drained, so
			// confirmed; the consumers get it after that.
		case "duplicate":
			dupes++
		default: // failed, or unknown: not stored for sure; retry (idempotent)
			return 0, fmt.Errorf("POST %s: item %d: status %q %s", u, i, r.Status, r.Error)
		}
	}
	return dupes, nil
}

type crownConsumer struct {
	d      *crownBench
	group  string   // "" in queue mode
	paths  []string // one per queue this consumer reads
	queue  int      // index in paths
	empty  int      // empty answers in a row
	body   []byte   // the last ack request, reused
	answer []byte   // the last answer, its storage reused
}

type crownHandle struct{ partitionID, leaseID string }

func (c *crownConsumer) Close() {}

// Pop stays on one queue while it delivers. With several queues it moves on
// after an empty answer, polling without waiting until a whole round of
// queues was empty, and only then long-polls (1 s).
func (c *crownConsumer) Pop(ctx context.Context) ([]benchkit.Delivery, error) {
	for {
		wait := len(c.paths) == 1 || c.empty >= len(c.paths)
		u := c.d.base() + c.paths[c.queue] + "&wait=" + strconv.FormatBool(wait)
		status, body, err := c.d.do(ctx, http.MethodGet, u, nil, &c.answer)
		if err != nil {
			return nil, err
		}
		switch status {
		case http.StatusNoContent:
			c.empty++
			c.queue = (c.queue + 1) % len(c.paths)
			if wait {
				c.empty = 0
				return nil, nil
			}
			continue
		case http.StatusOK:
			c.empty = 0
		default:
			return nil, statusError(status, u, body)
		}
		ds, err := popDeliveries(body, c.d.cfg.PopBatch)
		if err != nil {
			return nil, fmt.Errorf("GET %s: answer: %w", u, err)
		}
		return ds, nil
	}
}

func (c *crownConsumer) Ack(ctx context.Context, ds []benchkit.Delivery) ([]bool, error) {
	b := appendAckBatch(c.body[:0], c.group, ds)
	c.body = b
	// base() moves on at every call, so an attempt the harness sends again
	// after a transport error or a 5xx goes to the next node.
	u := c.d.base() + "/api/v1/ack/batch"
	status, body, err := c.d.do(ctx, http.MethodPost, u, b, &c.answer)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, statusError(status, u, body)
	}
	ok, err := ackResults(body)
	if err != nil {
		return nil, fmt.Errorf("POST %s: answer: %w", u, err)
	}
	if len(ok) != len(ds) {
		return nil, fmt.Errorf("POST %s: %d results for %d acknowledgments", u, len(ok), len(ds))
	}
	var failed []bool
	for i := range ok {
		if !ok[i] {
			if failed == nil {
				failed = make([]bool, len(ds))
			}
			failed[i] = true
		}
	}
	return failed, nil
}
