// Command natsbench runs the `crownctl bench run` workload against a NATS
// JetStream cluster, for scripts/bench-vs-nats.sh. It shares the workload,
// the measuring harness and the report with crownctl through
// cmd/internal/benchkit, so both brokers are measured the same way; it is a
// separate binary so that crownctl does not carry the NATS client.
//
// Mapping: queue i is stream PREFIX-qi with subjects PREFIX.qi.p0..pN-1 (a
// partition is a subject), R3 file storage by default; consumer group g is
// the durable pull consumer PREFIX-gg with explicit acks (work-queue
// retention for one group, interest retention for several). A push batch is
// one async publish per message with Nats-Msg-Id = the transaction id
// (deduplicated, so retries are idempotent), finished when every PubAck
// arrived. A pop is a no-wait fetch of up to --pop-batch messages; when
// nothing is pending it long-polls (1 s) for the first message and tops up
// without waiting, like a Crown pop. An ack batch is Ack() for every message
// and AckSync() for the last, finished when the server confirmed it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crownmq/crown/cmd/internal/benchkit"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	cfg      benchkit.Config
	urls     string
	json     bool
	timeout  time.Duration
	replicas int
	keep     bool
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("natsbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	benchkit.RegisterFlags(fs, &o.cfg)
	fs.StringVar(&o.urls, "url", "nats://127.0.0.1:4222", "comma-separated NATS server URLs; producers and consumers connect to them in turn")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "timeout of each request (a publish batch, a fetch, an ack)")
	fs.IntVar(&o.replicas, "replicas", 0, "stream replicas (default: the number of --url, at most 3)")
	fs.BoolVar(&o.keep, "keep", false, "keep existing streams (default: produce and both runs delete and recreate them)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: natsbench [flags]

Runs the workload of 'crownctl bench run' against NATS JetStream and prints
the same report (see the package comment for how queues, partitions and
groups map onto streams, subjects and durable pull consumers).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "natsbench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := o.cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "natsbench: %v\n", err)
		return 2
	}
	var urls []string
	for _, u := range strings.Split(o.urls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		fmt.Fprintln(stderr, "natsbench: --url is empty")
		return 2
	}
	if o.replicas == 0 {
		o.replicas = min(len(urls), 3)
	}

	ctx, reraise := benchkit.Interruptible(context.Background())
	defer reraise()
	d := &driver{cfg: &o.cfg, urls: urls, timeout: o.timeout}
	// A cluster that just started may have no JetStream meta leader yet.
	var notes []string
	var err error
	for deadline := time.Now().Add(60 * time.Second); ; {
		if notes, err = d.setup(ctx, o.replicas, o.keep); err == nil {
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			fmt.Fprintf(stderr, "natsbench: set-up: %v\n", err)
			return 1
		}
		time.Sleep(time.Second)
	}
	fmt.Fprintf(stderr, "jetstream bench: %s\n", o.cfg.Describe())
	var counters benchkit.Counters
	prog := benchkit.StartProgress(stderr, &counters, o.cfg.Progress)
	rep := benchkit.Run(ctx, &o.cfg, d, &counters)
	prog.Stop()
	rep.Broker = "jetstream"
	rep.Targets = urls
	rep.Notes = append(rep.Notes, notes...)
	if o.json {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.Render(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "natsbench: %v\n", err)
		return 1
	}
	if !rep.OK {
		fmt.Fprintln(stderr, "natsbench: bench failed (see the report)")
		return 1
	}
	return 0
}

type driver struct {
	cfg     *benchkit.Config
	urls    []string
	timeout time.Duration
}

func (d *driver) streamName(q int) string { return d.cfg.QueueName(q) }

func (d *driver) subject(q, p int) string {
	return fmt.Sprintf("%s.q%d.%s", d.cfg.Prefix, q, benchkit.PartitionName(p))
}

// connect opens a connection that prefers server i (round-robin over the
// URLs), failing over to the others.
func (d *driver) connect(i int, name string) (*nats.Conn, error) {
	n := len(d.urls)
	servers := make([]string, 0, n)
	for k := 0; k < n; k++ {
		servers = append(servers, d.urls[(i+k)%n])
	}
	return nats.Connect(strings.Join(servers, ","), nats.DontRandomize(), nats.Name(name),
		nats.Timeout(5*time.Second), nats.MaxReconnects(-1))
}

// setup creates the streams and durable consumers (produce and both runs
// start from empty streams unless keep) and returns notes for the report.
func (d *driver) setup(ctx context.Context, replicas int, keep bool) ([]string, error) {
	nc, err := d.connect(0, "natsbench-setup")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	retention, retName := jetstream.WorkQueuePolicy, "work-queue"
	if d.cfg.Groups > 1 {
		retention, retName = jetstream.InterestPolicy, "interest"
	}
	for q := 0; q < d.cfg.Queues; q++ {
		name := d.streamName(q)
		if d.cfg.Mode != benchkit.ModeConsume {
			if !keep {
				if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
					return nil, fmt.Errorf("delete stream %s: %w", name, err)
				}
			}
			_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
				Name:       name,
				Subjects:   []string{fmt.Sprintf("%s.q%d.*", d.cfg.Prefix, q)},
				Retention:  retention,
				Storage:    jetstream.FileStorage,
				Replicas:   replicas,
				Duplicates: 2 * time.Minute,
				Discard:    jetstream.DiscardOld,
			})
			if err != nil {
				return nil, fmt.Errorf("create stream %s: %w", name, err)
			}
		}
		for g := 0; g < d.cfg.Groups; g++ {
			_, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
				Durable:       d.cfg.GroupName(g),
				AckPolicy:     jetstream.AckExplicitPolicy,
				AckWait:       60 * time.Second, // Crown's default lease
				MaxAckPending: max(20000, 4*d.cfg.Consumers*d.cfg.PopBatch),
				DeliverPolicy: jetstream.DeliverAllPolicy,
				Replicas:      replicas,
			})
			if err != nil {
				return nil, fmt.Errorf("create consumer %s on %s: %w", d.cfg.GroupName(g), name, err)
			}
		}
	}
	notes := []string{fmt.Sprintf("nats-server %s; streams R%d file storage, %s retention, durable pull consumers with explicit acks",
		nc.ConnectedServerVersion(), replicas, retName)}
	if v := nc.ConnectedServerVersion(); strings.HasPrefix(v, "2.9.") || strings.HasPrefix(v, "2.8.") {
		notes = append(notes, "nats-server before 2.10 has no sync_interval: JetStream does not fsync each write (Crown fsyncs every Raft append)")
	}
	return notes, nil
}

func (d *driver) Producer(p int) (benchkit.Producer, error) {
	nc, err := d.connect(p, fmt.Sprintf("natsbench-producer-%d", p))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(4*d.cfg.PushBatch, 256)),
		jetstream.WithPublishAsyncTimeout(d.timeout))
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &producer{d: d, nc: nc, js: js}, nil
}

type producer struct {
	d  *driver
	nc *nats.Conn
	js jetstream.JetStream
}

func (p *producer) Close() { p.nc.Close() }

func (p *producer) Push(ctx context.Context, items []benchkit.Item) (int, error) {
	futures := make([]jetstream.PubAckFuture, 0, len(items))
	for _, it := range items {
		m := &nats.Msg{Subject: p.d.subject(it.Queue, it.Partition), Data: append([]byte(nil), it.Payload...)}
		f, err := p.js.PublishMsgAsync(m, jetstream.WithMsgID(it.TxnID))
		if err != nil {
			return 0, err
		}
		futures = append(futures, f)
	}
	ctx, cancel := context.WithTimeout(ctx, p.d.timeout)
	defer cancel()
	dupes := 0
	var firstErr error
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				dupes++
			}
		case err := <-f.Err():
			if firstErr == nil {
				firstErr = err
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if firstErr != nil {
		return 0, firstErr
	}
	return dupes, nil
}

// Consumer c of group g reads stream c%Q when there are at least as many
// consumers as queues, else every stream q with q%C == c (as crownctl does).
func (d *driver) Consumer(g, c int) (benchkit.Consumer, error) {
	nc, err := d.connect(g*d.cfg.Consumers+c, fmt.Sprintf("natsbench-consumer-%d-%d", g, c))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	cs := &consumer{d: d, nc: nc}
	for q := 0; q < d.cfg.Queues; q++ {
		if (d.cfg.Consumers >= d.cfg.Queues && q == c%d.cfg.Queues) || (d.cfg.Consumers < d.cfg.Queues && q%d.cfg.Consumers == c) {
			cons, err := js.Consumer(ctx, d.streamName(q), d.cfg.GroupName(g))
			if err != nil {
				nc.Close()
				return nil, fmt.Errorf("consumer %s on %s: %w", d.cfg.GroupName(g), d.streamName(q), err)
			}
			cs.cons = append(cs.cons, cons)
		}
	}
	return cs, nil
}

type consumer struct {
	d     *driver
	nc    *nats.Conn
	cons  []jetstream.Consumer // one per stream this consumer reads
	queue int
	empty int
}

func (c *consumer) Close() { c.nc.Close() }

func collect(out []benchkit.Delivery, b jetstream.MessageBatch, err error) ([]benchkit.Delivery, error) {
	if err != nil {
		return out, err
	}
	for m := range b.Messages() {
		out = append(out, benchkit.Delivery{TxnID: m.Headers().Get(jetstream.MsgIDHeader), Bytes: len(m.Data()), Handle: m})
	}
	if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		return out, err
	}
	return out, nil
}

// Pop fetches what is pending without waiting; when a whole round of
// streams had nothing it long-polls one stream (1 s) for a first message and
// tops the batch up without waiting.
func (c *consumer) Pop(ctx context.Context) ([]benchkit.Delivery, error) {
	batch := c.d.cfg.PopBatch
	for {
		cons := c.cons[c.queue]
		if c.empty < len(c.cons) {
			b, err := cons.FetchNoWait(batch)
			ds, err := collect(nil, b, err)
			if err != nil || len(ds) > 0 {
				c.empty = 0
				return ds, err
			}
			c.empty++
			c.queue = (c.queue + 1) % len(c.cons)
			continue
		}
		c.empty = 0
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		b, err := cons.Fetch(1, jetstream.FetchContext(wctx))
		ds, err := collect(nil, b, err)
		cancel()
		if err != nil || len(ds) == 0 {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return ds, err
		}
		if batch > 1 {
			b, err = cons.FetchNoWait(batch - 1)
			ds, err = collect(ds, b, err)
		}
		return ds, err
	}
}

func (c *consumer) Ack(ctx context.Context, ds []benchkit.Delivery) ([]bool, error) {
	var failed []bool
	for i, d := range ds[:len(ds)-1] {
		if err := d.Handle.(jetstream.Msg).Ack(); err != nil {
			if failed == nil {
				failed = make([]bool, len(ds))
			}
			failed[i] = true
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.d.timeout)
	defer cancel()
	if err := ds[len(ds)-1].Handle.(jetstream.Msg).DoubleAck(ctx); err != nil {
		return nil, err
	}
	return failed, nil
}
