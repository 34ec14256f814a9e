// Package workload drives Crown the way the chaos checker needs: producers
// push unique, sequence-numbered messages to many partitions of several
// queues, retrying after failures and timeouts with the same transactionId
// against whichever node answers, while consumers in several consumer
// groups pop and acknowledge, some of them failing on purpose. Every
// request and its outcome goes to the history.
//
// Sequencing. Each (queue, partition) has exactly one producer, which sends
// sequence numbers in order and moves on only once a push of the current
// batch was answered ok (status queued or duplicate). So the messages of a
// partition are stored in sequence order with no gaps, whatever faults
// happen, and the checker can tell order from the numbers alone.
//
// Deliberate consumer failures (shares of FailureRate): ack the batch
// `failed` (redelivered at once), ack it `retry`, ack only a prefix and
// abandon the rest (redelivered from the position when the lease expires),
// abandon the whole batch (a crashed consumer), or ack only after the lease
// expired (the ack must be rejected and the batch redelivered).
package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

// Config sizes the workload.
type Config struct {
	RunID             string
	Nodes             []Node
	Queues            []string
	Partitions        []string
	Groups            []string // "" is queue mode
	ConsumersPerGroup int      // per queue and group (default 2)
	PushRate          float64  // push requests per second per producer (default 4)
	MaxPushBatch      int      // items per push, 1..MaxPushBatch (default 3)
	PopBatch          int      // largest pop batch (default 10)
	LeaseSeconds      int      // leaseSeconds of every pop (default 5)
	WaitMillis        int      // long-poll timeout (default 1000)
	FailureRate       float64  // share of batches a consumer mishandles on purpose (default 0.15)
	NoFailures        bool     // FailureRate 0 means 0, not the default
	RequestTimeout    time.Duration
	Seed              uint64
	// Deletes runs the message-deletion worker on a queue of its own
	// (deletes.go).
	Deletes bool
}

func (c *Config) defaults() {
	if c.ConsumersPerGroup <= 0 {
		c.ConsumersPerGroup = 2
	}
	if c.PushRate <= 0 {
		c.PushRate = 4
	}
	if c.MaxPushBatch <= 0 {
		c.MaxPushBatch = 3
	}
	if c.PopBatch <= 0 {
		c.PopBatch = 10
	}
	if c.LeaseSeconds <= 0 {
		c.LeaseSeconds = 5
	}
	if c.WaitMillis <= 0 {
		c.WaitMillis = 1000
	}
	if c.FailureRate < 0 {
		c.FailureRate = 0
	}
	if c.FailureRate == 0 && !c.NoFailures {
		c.FailureRate = 0.15
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
}

// Counters are live figures for the progress line.
type Counters struct {
	PushOK, PushFail, PushUnknown atomic.Int64 // push requests
	Pushed                        atomic.Int64 // messages confirmed
	PopOK, PopFail, PopUnknown    atomic.Int64
	Delivered                     atomic.Int64 // messages delivered
	AckOK, AckFail, AckUnknown    atomic.Int64
	Completed                     atomic.Int64 // ack items confirmed completed
}

// Workload is a running workload.
type Workload struct {
	cfg    Config
	hist   *history.Writer
	client *Client
	gate   Gate
	C      Counters

	ctx           context.Context
	cancel        context.CancelFunc
	stopProduce   chan struct{}
	produceDone   chan struct{}
	stopConsume   chan struct{}
	draining      atomic.Bool
	finalPushBy   atomic.Int64 // unix nanos: producers give up retrying after this, once stopped
	producers     sync.WaitGroup
	consumers     sync.WaitGroup
	stopOnce      sync.Once
	consumeOnce   sync.Once
	progressMu    sync.Mutex
	pushedUpTo    map[string]int64 // "q/p" -> highest seq confirmed (contiguous), -1 none
	completedUpTo map[string]int64 // "q/p/g" -> highest seq confirmed completed by g
	dels          deletesState     // the deletion worker's confirmed work (deletes.go)
	// inDoubt holds completed acks no attempt of which was answered: each
	// may have applied, so the message is consumed and never comes again,
	// yet nothing confirmed it. Drain re-sends them until answered (a
	// re-ack of a consumed message answers success; of one whose lease
	// ended, an item error, and the message comes again).
	inDoubt []pendingAck
}

// New prepares a workload; Start runs it.
func New(cfg Config, hist *history.Writer, client *Client) *Workload {
	cfg.defaults()
	w := &Workload{cfg: cfg, hist: hist, client: client, stopProduce: make(chan struct{}),
		produceDone: make(chan struct{}), stopConsume: make(chan struct{}),
		pushedUpTo: map[string]int64{}, completedUpTo: map[string]int64{}}
	for _, q := range cfg.Queues {
		for _, p := range cfg.Partitions {
			w.pushedUpTo[q+"/"+p] = -1
			for _, g := range cfg.Groups {
				w.completedUpTo[q+"/"+p+"/"+g] = -1
			}
		}
	}
	return w
}

// Config is the effective configuration.
func (w *Workload) Config() Config { return w.cfg }

// Start launches the producers and consumers.
func (w *Workload) Start(ctx context.Context) {
	w.ctx, w.cancel = context.WithCancel(ctx)
	id := uint64(0)
	for _, q := range w.cfg.Queues {
		for _, p := range w.cfg.Partitions {
			id++
			w.producers.Add(1)
			go w.produce(q, p, id)
		}
	}
	if w.cfg.Deletes {
		id++
		w.producers.Add(1)
		go w.deleter(id)
	}
	go func() { w.producers.Wait(); close(w.produceDone) }()
	for _, q := range w.cfg.Queues {
		for _, g := range w.cfg.Groups {
			for i := range w.cfg.ConsumersPerGroup {
				id++
				w.consumers.Add(1)
				go w.consume(q, g, i, id)
			}
		}
	}
}

// Pause stops the workload from starting new operations and waits until
// none is in flight (a consumer finishes its pop and acks first).
func (w *Workload) Pause(ctx context.Context) error { return w.gate.Pause(ctx) }

// Resume undoes Pause.
func (w *Workload) Resume() { w.gate.Resume() }

// StopProducers makes every producer finish: a producer with a batch whose
// outcome is still unknown keeps retrying it until it is answered or until
// deadline, then exits. It returns when all producers have exited.
func (w *Workload) StopProducers(deadline time.Time) {
	w.finalPushBy.Store(deadline.UnixNano())
	w.stopOnce.Do(func() { close(w.stopProduce) })
	select {
	case <-w.produceDone:
	case <-w.ctx.Done():
	}
}

// pendingAck is a completed ack whose outcome is still unknown.
type pendingAck struct {
	proc, queue, group, why string
	msgs                    []Message
	acks                    []Ack
}

// Drain switches consumers to acknowledging everything and waits until
// every group has completed every message whose push was confirmed, or
// until timeout. It reports whether the drain completed and, if not, what
// is missing. Completed acks left in doubt are re-sent until answered:
// one that applied consumed its messages, which no consumer sees again,
// and only an answer moves the drain (and the checker) past them.
func (w *Workload) Drain(timeout time.Duration) (bool, string) {
	w.draining.Store(true)
	deadline := time.Now().Add(timeout)
	rng := rand.New(rand.NewPCG(w.cfg.Seed, 0))
	np := &nodePicker{nodes: w.cfg.Nodes, rng: rng}
	for {
		w.resendInDoubt(np)
		missing := w.missing()
		if missing == "" {
			return true, ""
		}
		if time.Now().After(deadline) || w.ctx.Err() != nil {
			return false, missing
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// resendInDoubt sends each completed ack in doubt once more; those still
// not answered stay in doubt.
func (w *Workload) resendInDoubt(np *nodePicker) {
	w.progressMu.Lock()
	todo := w.inDoubt
	w.inDoubt = nil
	w.progressMu.Unlock()
	var left []pendingAck
	for _, p := range todo {
		if w.covered(p) {
			continue // a later completed ack answered success: nothing to learn
		}
		if w.ctx.Err() != nil || !w.ackOnce(p.proc, np, p.queue, p.group, "completed", p.why+"-resent", p.msgs, p.acks) {
			np.failed()
			left = append(left, p)
		}
	}
	w.progressMu.Lock()
	w.inDoubt = append(left, w.inDoubt...)
	w.progressMu.Unlock()
}

// covered reports whether every message of p is at or below what its
// group is known to have completed (acks are cumulative).
func (w *Workload) covered(p pendingAck) bool {
	w.progressMu.Lock()
	defer w.progressMu.Unlock()
	for _, m := range p.msgs[:len(p.acks)] {
		seq, _ := history.ParseTxn(m.TransactionID)
		if v, ok := w.completedUpTo[p.queue+"/"+m.Partition+"/"+p.group]; !ok || seq > v {
			return false
		}
	}
	return true
}

func (w *Workload) missing() string {
	w.progressMu.Lock()
	defer w.progressMu.Unlock()
	n, first := 0, ""
	for _, q := range w.cfg.Queues {
		for _, p := range w.cfg.Partitions {
			want := w.pushedUpTo[q+"/"+p]
			for _, g := range w.cfg.Groups {
				if got := w.completedUpTo[q+"/"+p+"/"+g]; got < want {
					n++
					if first == "" {
						first = fmt.Sprintf("%s/%s group %q completed up to %d of %d", q, p, g, got, want)
					}
				}
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d (partition, group) pairs not drained, e.g. %s", n, first)
}

// StopConsumers stops the consumers and waits for them.
func (w *Workload) StopConsumers() {
	w.consumeOnce.Do(func() { close(w.stopConsume) })
	w.consumers.Wait()
}

// Abort cancels everything in flight.
func (w *Workload) Abort() {
	if w.cancel != nil {
		w.cancel()
	}
}

// Wait waits for every worker after StopProducers/StopConsumers or Abort.
func (w *Workload) Wait() {
	w.producers.Wait()
	w.consumers.Wait()
}

func (w *Workload) stopped(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return w.ctx.Err() != nil
	}
}

// sleep waits d unless ctx ends or ch closes; it reports whether it slept
// the whole time.
func (w *Workload) sleep(d time.Duration, ch <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ch:
		return false
	case <-w.ctx.Done():
		return false
	}
}

// nodePicker walks the nodes: it stays on a node while it answers, moves
// to the next after a failure and sometimes jumps at random, so that every
// node serves traffic.
type nodePicker struct {
	nodes []Node
	cur   int
	rng   *rand.Rand
}

func (np *nodePicker) pick() Node {
	if np.rng.Float64() < 0.05 {
		np.cur = np.rng.IntN(len(np.nodes))
	}
	return np.nodes[np.cur]
}

func (np *nodePicker) failed() { np.cur = (np.cur + 1) % len(np.nodes) }

func (w *Workload) produce(queue, partition string, id uint64) {
	defer w.producers.Done()
	rng := rand.New(rand.NewPCG(w.cfg.Seed, id))
	np := &nodePicker{nodes: w.cfg.Nodes, cur: int(id) % len(w.cfg.Nodes), rng: rng}
	proc := fmt.Sprintf("prod-%s-%s", queue, partition)
	interval := time.Duration(float64(time.Second) / w.cfg.PushRate)
	key := queue + "/" + partition
	var seq int64
	// Spread the producers' phases.
	w.sleep(time.Duration(rng.Int64N(int64(interval)+1)), w.stopProduce)
	for !w.stopped(w.stopProduce) {
		n := 1 + rng.IntN(w.cfg.MaxPushBatch)
		items := make([]PushItem, n)
		for i := range items {
			s := seq + int64(i)
			items[i] = PushItem{Queue: queue, Partition: partition, Payload: map[string]int64{"s": s},
				TransactionID: history.Txn(w.cfg.RunID, queue, partition, s)}
		}
		first := seq
		if !w.untilConfirmed(np, rng, func(node Node) bool { return w.pushOnce(proc, node, items, first) }) {
			return
		}
		seq += int64(n)
		w.progressMu.Lock()
		w.pushedUpTo[key] = seq - 1
		w.progressMu.Unlock()
		w.sleep(interval/2+time.Duration(rng.Int64N(int64(interval)+1)), w.stopProduce)
	}
}

// untilConfirmed runs op through the gate against the node np picks until
// op reports success, moving to the next node after each failure and backing
// off, for as long as the workload runs (and, once producers stop, until
// their final deadline). It reports false when the worker must give up.
func (w *Workload) untilConfirmed(np *nodePicker, rng *rand.Rand, op func(Node) bool) bool {
	backoff := 100 * time.Millisecond
	for {
		if !w.gate.Enter(w.ctx) {
			return false
		}
		ok := op(np.pick())
		w.gate.Leave()
		if ok {
			return true
		}
		np.failed()
		if w.stopped(w.stopProduce) && (w.ctx.Err() != nil || time.Now().UnixNano() > w.finalPushBy.Load()) {
			return false
		}
		if !w.sleep(backoff+time.Duration(rng.Int64N(int64(backoff))), nil) {
			return false
		}
		backoff = min(2*backoff, time.Second)
	}
}

// pushOnce sends one attempt to node and records it; it reports whether
// every item was confirmed.
func (w *Workload) pushOnce(proc string, node Node, items []PushItem, first int64) bool {
	op := &history.Op{Kind: history.KindPush, Proc: proc, Node: node.ID, Queue: items[0].Queue}
	for i, it := range items {
		op.Items = append(op.Items, history.Item{Partition: it.Partition, Seq: first + int64(i), Txn: it.TransactionID})
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.RequestTimeout)
	op.Start = w.hist.Now()
	res, a := w.client.Push(ctx, node.URL, items)
	op.End = w.hist.Now()
	cancel()
	op.Outcome, op.Error = a.Outcome, a.Error
	all := a.Outcome == history.OK
	for i := range res {
		op.Items[i].Status, op.Items[i].MsgID = res[i].Status, res[i].MessageID
		if res[i].Status != "queued" && res[i].Status != "duplicate" {
			all = false
		}
	}
	w.hist.Write(op)
	switch {
	case all:
		w.C.PushOK.Add(1)
		w.C.Pushed.Add(int64(len(items)))
	case a.Outcome == history.Fail:
		w.C.PushFail.Add(1)
	default:
		w.C.PushUnknown.Add(1)
	}
	return all
}

// behaviour is what a consumer does with one batch.
type behaviour int

const (
	ackAll    behaviour = iota // ack every message completed
	ackFailed                  // ack every message failed: immediate redelivery
	ackRetry                   // ack every message retry: immediate redelivery
	ackPrefix                  // ack a prefix completed, abandon the rest (lease expiry)
	abandon                    // ack nothing (a crashed consumer; lease expiry)
	ackLate                    // ack completed after the lease expired: rejected, redelivered
)

var behaviourNames = [...]string{"completed", "failed", "retry", "prefix", "abandon", "late"}

func (w *Workload) choose(rng *rand.Rand) behaviour {
	if w.draining.Load() || rng.Float64() >= w.cfg.FailureRate {
		return ackAll
	}
	r := rng.Float64()
	switch {
	case r < 0.30:
		return ackFailed
	case r < 0.50:
		return ackRetry
	case r < 0.75:
		return ackPrefix
	case r < 0.95:
		return abandon
	}
	return ackLate
}

func (w *Workload) consume(queue, group string, idx int, id uint64) {
	defer w.consumers.Done()
	rng := rand.New(rand.NewPCG(w.cfg.Seed, id))
	np := &nodePicker{nodes: w.cfg.Nodes, cur: int(id) % len(w.cfg.Nodes), rng: rng}
	gname := group
	if gname == "" {
		gname = "queue-mode"
	}
	proc := fmt.Sprintf("cons-%s-%s-%d", queue, gname, idx)
	partitions := 1
	if idx%2 == 1 {
		partitions = 2
	}
	for !w.stopped(w.stopConsume) {
		if !w.gate.Enter(w.ctx) {
			return
		}
		msgs, ok := w.popOnce(proc, np, queue, group, partitions, rng)
		if !ok {
			w.gate.Leave()
			np.failed()
			w.sleep(time.Duration(100+rng.IntN(200))*time.Millisecond, w.stopConsume)
			continue
		}
		if len(msgs) > 0 {
			w.handle(proc, np, queue, group, msgs, rng)
		}
		w.gate.Leave()
	}
}

func (w *Workload) popOnce(proc string, np *nodePicker, queue, group string, partitions int, rng *rand.Rand) ([]Message, bool) {
	node := np.pick()
	p := PopParams{Group: group, Batch: 1 + rng.IntN(w.cfg.PopBatch), WaitMillis: w.cfg.WaitMillis,
		LeaseSeconds: w.cfg.LeaseSeconds, Partitions: partitions}
	op := &history.Op{Kind: history.KindPop, Proc: proc, Node: node.ID, Queue: queue, Group: group}
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.RequestTimeout+time.Duration(w.cfg.WaitMillis)*time.Millisecond)
	op.Start = w.hist.Now()
	msgs, a := w.client.Pop(ctx, node.URL, queue, p)
	op.End = w.hist.Now()
	cancel()
	op.Outcome, op.Error = a.Outcome, a.Error
	for _, m := range msgs {
		seq, _ := history.ParseTxn(m.TransactionID)
		it := history.Item{Partition: m.Partition, Seq: seq, Txn: m.TransactionID, MsgID: m.ID,
			PartitionID: m.PartitionID, Retry: m.RetryCount, DataSeq: -1}
		var d struct {
			S *int64 `json:"s"`
		}
		if json.Unmarshal(m.Data, &d) == nil && d.S != nil {
			it.DataSeq = *d.S
		}
		op.Items = append(op.Items, it)
		if op.Lease == "" {
			op.Lease = m.LeaseID
		}
	}
	w.hist.Write(op)
	switch a.Outcome {
	case history.OK:
		w.C.PopOK.Add(1)
		w.C.Delivered.Add(int64(len(msgs)))
	case history.Fail:
		w.C.PopFail.Add(1)
	default:
		w.C.PopUnknown.Add(1)
	}
	return msgs, a.Outcome == history.OK
}

func (w *Workload) handle(proc string, np *nodePicker, queue, group string, msgs []Message, rng *rand.Rand) {
	b := w.choose(rng)
	if b == ackAll && rng.Float64() < 0.1 {
		// Some processing time.
		w.sleep(time.Duration(rng.IntN(50))*time.Millisecond, nil)
	}
	var acks []Ack
	status := "completed"
	switch b {
	case ackAll:
		acks = acksFor(msgs, "completed")
	case ackFailed:
		status = "failed"
		acks = acksFor(msgs, status)
	case ackRetry:
		status = "retry"
		acks = acksFor(msgs, status)
	case ackPrefix:
		acks = acksFor(msgs[:rng.IntN(len(msgs))], "completed")
	case abandon:
	case ackLate:
		// A pause request (a checkpoint) cuts the wait short: the batch is
		// then abandoned instead.
		if w.sleep(time.Duration(w.cfg.LeaseSeconds)*time.Second+1500*time.Millisecond, w.gate.Pausing()) {
			acks = acksFor(msgs, "completed")
		}
	}
	if len(acks) == 0 {
		return
	}
	// An ack whose outcome is not ok is retried a few times (acks are
	// idempotent): on a lease that is still live it completes the batch.
	for attempt := 0; attempt < 3 && w.ctx.Err() == nil; attempt++ {
		if w.ackOnce(proc, np, queue, group, status, behaviourNames[b], msgs, acks) {
			return
		}
		np.failed()
		w.sleep(time.Duration(100+rng.IntN(200))*time.Millisecond, nil)
	}
	if status == "completed" {
		w.progressMu.Lock()
		w.inDoubt = append(w.inDoubt, pendingAck{proc: proc, queue: queue, group: group, why: behaviourNames[b], msgs: msgs, acks: acks})
		w.progressMu.Unlock()
	}
}

func acksFor(msgs []Message, status string) []Ack {
	out := make([]Ack, len(msgs))
	for i, m := range msgs {
		out[i] = Ack{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: m.LeaseID, Status: status}
	}
	return out
}

func (w *Workload) ackOnce(proc string, np *nodePicker, queue, group, status, why string, msgs []Message, acks []Ack) bool {
	node := np.pick()
	op := &history.Op{Kind: history.KindAck, Proc: proc, Node: node.ID, Queue: queue, Group: group, Status: status,
		Lease: acks[0].LeaseID, Label: why}
	for i := range acks {
		m := msgs[i]
		seq, _ := history.ParseTxn(m.TransactionID)
		op.Items = append(op.Items, history.Item{Partition: m.Partition, Seq: seq, Txn: m.TransactionID,
			MsgID: m.ID, PartitionID: m.PartitionID})
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.RequestTimeout)
	op.Start = w.hist.Now()
	res, a := w.client.AckBatch(ctx, node.URL, group, acks)
	op.End = w.hist.Now()
	cancel()
	op.Outcome, op.Error = a.Outcome, a.Error
	for i := range res {
		op.Items[i].Success = res[i].Success
		if res[i].Error != nil {
			op.Items[i].Status = *res[i].Error
		}
	}
	w.hist.Write(op)
	switch a.Outcome {
	case history.OK:
		w.C.AckOK.Add(1)
	case history.Fail:
		w.C.AckFail.Add(1)
	default:
		w.C.AckUnknown.Add(1)
	}
	if a.Outcome != history.OK {
		return false
	}
	if status == "completed" {
		w.progressMu.Lock()
		for i, it := range op.Items {
			if res[i].Success {
				w.C.Completed.Add(1)
				k := queue + "/" + it.Partition + "/" + group
				if v, ok := w.completedUpTo[k]; ok && it.Seq > v {
					w.completedUpTo[k] = it.Seq
				}
			}
		}
		w.progressMu.Unlock()
	}
	return true
}
