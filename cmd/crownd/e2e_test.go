package main_test

// End-to-end durability tests against real crownd processes (see
// cmd/internal/testcluster). They run under `make test`, which builds
// bin/crownd and sets CROWN_BIN; without CROWN_BIN the harness builds
// ./cmd/crownd itself.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

const (
	durQueue      = "durability"
	durPartitions = 10
	durPerPart    = 1000
	durTotal      = durPartitions * durPerPart
	durPushBatch  = 100
	durPopBatch   = 50
	durLease      = 5 // seconds: a lease lost in the crash is redelivered this long after
	durConsumers  = 2 // per group
	durKillAfter  = 5000
)

var durGroups = []string{"billing", "audit"}

// durPayload is what every message carries: its partition and its
// sequence number within the partition (the push order).
type durPayload struct {
	P int `json:"p"`
	S int `json:"s"`
}

func durTxID(p, s int) string     { return fmt.Sprintf("p%d-s%d", p, s) }
func durPartition(p int) string   { return fmt.Sprintf("part-%d", p) }
func durKey(p, s int) int         { return p*durPerPart + s }
func durSplit(k int) (p, s int)   { return k / durPerPart, k % durPerPart }
func durKeyName(k int) string     { p, s := durSplit(k); return durTxID(p, s) }
func elapsed(t0 time.Time) string { return time.Since(t0).Round(time.Millisecond).String() }

// violations collects invariant failures from any goroutine; the test
// goroutine reports them.
type violations struct {
	mu   sync.Mutex
	list []string
}

func (v *violations) add(format string, args ...any) {
	v.mu.Lock()
	v.list = append(v.list, fmt.Sprintf(format, args...))
	v.mu.Unlock()
}

func (v *violations) report(t *testing.T) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, s := range v.list {
		if i == 30 {
			t.Errorf("... and %d more violations", len(v.list)-i)
			break
		}
		t.Error(s)
	}
}

// delivery is one delivery of one message to a group.
type delivery struct {
	id    string
	lease string
	epoch int32 // 0 before the SIGKILL, 1 after the restart
}

// batchRec is one pop's messages from one partition, in recorded order.
type batchRec struct {
	lease string
	seqs  []int
	epoch int32
}

// resolution of a message for a group, from the consumer's point of view.
const (
	unresolved = iota
	completed  // an ack/batch answered success for it
	uncertain  // its ack's outcome is unknown (the answer was lost in the crash) and a retry was refused
)

type ackInfo struct {
	lease string
	epoch int32
}

// groupLog is everything one consumer group saw.
type groupLog struct {
	name string

	mu          sync.Mutex
	deliveries  map[int][]delivery
	batches     [durPartitions][]batchRec
	state       map[int]int // key -> completed / uncertain
	completedBy map[int]ackInfo
	resolved    int // messages completed or uncertain
	nCompleted  int
	// deliveries after the restart of messages whose completion was
	// acknowledged before the SIGKILL (must stay 0)
	redeliveredAfterRestart int
	failedAcks              int // items answered success=false on a first attempt
	ackRetries              int
	popErrors               int
}

func newGroupLog(name string) *groupLog {
	return &groupLog{name: name, deliveries: map[int][]delivery{}, state: map[int]int{}, completedBy: map[int]ackInfo{}}
}

func (g *groupLog) done() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.resolved == durTotal
}

func (g *groupLog) completedCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.nCompleted
}

// recordPop checks and records one pop answer. It returns the keys.
func (g *groupLog) recordPop(v *violations, msgs []tc.Message, epoch int32) []int {
	keys := make([]int, len(msgs))
	part := -1
	var seqs []int
	for i, m := range msgs {
		var pl durPayload
		if err := json.Unmarshal(m.Data, &pl); err != nil {
			v.add("%s: message %s has undecodable data %s: %v", g.name, m.TransactionID, m.Data, err)
			continue
		}
		if pl.P < 0 || pl.P >= durPartitions || pl.S < 0 || pl.S >= durPerPart {
			v.add("%s: message %s carries out-of-range payload %+v", g.name, m.TransactionID, pl)
			continue
		}
		if m.TransactionID != durTxID(pl.P, pl.S) || m.Partition != durPartition(pl.P) || m.Queue != durQueue {
			v.add("%s: message txid %s partition %s queue %s does not match its payload %+v",
				g.name, m.TransactionID, m.Partition, m.Queue, pl)
		}
		if m.LeaseID == "" || m.LeaseID != msgs[0].LeaseID {
			v.add("%s: message %s lease %q, first message lease %q", g.name, m.TransactionID, m.LeaseID, msgs[0].LeaseID)
		}
		if part == -1 {
			part = pl.P
		} else if pl.P != part {
			v.add("%s: one pop (partitions=1) delivered partitions %d and %d", g.name, part, pl.P)
		}
		keys[i] = durKey(pl.P, pl.S)
		seqs = append(seqs, pl.S)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range keys {
		if ai, ok := g.completedBy[k]; ok {
			v.add("%s: %s delivered again (epoch %d, lease %s) after its completion was acknowledged (epoch %d, lease %s)",
				g.name, durKeyName(k), epoch, msgs[0].LeaseID, ai.epoch, ai.lease)
			if ai.epoch == 0 && epoch == 1 {
				g.redeliveredAfterRestart++
			}
		}
	}
	for i, k := range keys {
		g.deliveries[k] = append(g.deliveries[k], delivery{id: msgs[i].ID, lease: msgs[0].LeaseID, epoch: epoch})
	}
	if part >= 0 {
		g.batches[part] = append(g.batches[part], batchRec{lease: msgs[0].LeaseID, seqs: seqs, epoch: epoch})
	}
	return keys
}

// recordAck records an ack/batch answer. retried reports that an earlier
// attempt of the same request failed with an unknown outcome.
func (g *groupLog) recordAck(v *violations, keys []int, lease string, res []tc.AckResult, retried bool, epoch int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, r := range res {
		k := keys[i]
		switch {
		case r.Success:
			if r.Error != nil {
				v.add("%s: ack of %s succeeded with error %q", g.name, durKeyName(k), *r.Error)
			}
			if _, dup := g.completedBy[k]; dup {
				v.add("%s: %s completed twice (leases %s and %s)", g.name, durKeyName(k), g.completedBy[k].lease, lease)
			}
			// The delivery under this lease must be the message's last: no
			// redelivery can follow an acknowledged completion.
			ds := g.deliveries[k]
			for j := len(ds) - 1; j >= 0 && ds[j].lease != lease; j-- {
				v.add("%s: %s was delivered again (lease %s) after the delivery (lease %s) whose completion was acknowledged",
					g.name, durKeyName(k), ds[j].lease, lease)
			}
			g.completedBy[k] = ackInfo{lease: lease, epoch: epoch}
			g.nCompleted++
			if g.state[k] == unresolved {
				g.resolved++
			}
			g.state[k] = completed
		case retried:
			// The lost first attempt may have applied and released the
			// lease, so the retry finds it invalid: the outcome is unknown.
			if g.state[k] == unresolved {
				g.resolved++
				g.state[k] = uncertain
			}
		default:
			// E.g. the lease expired (the consumer was slower than the
			// lease): the message must be redelivered.
			g.failedAcks++
		}
	}
}

// TestDurabilityAcrossSIGKILL is the durability end-to-end test: one real
// crownd, 10,000 messages pushed over 10 partitions, two consumer groups
// popping and acking concurrently, a SIGKILL and a restart on the same data
// directory in the middle. It proves, per group: no message whose
// completion was acknowledged is ever delivered again (in particular not
// after the restart), every acknowledged push is delivered (all 10,000
// resolved), and deliveries within each (partition, group) follow the push
// order, restarting only at unacknowledged messages.
func TestDurabilityAcrossSIGKILL(t *testing.T) { runDurability(t, 1) }

// TestDurabilityAcrossLeaderSIGKILL is the same scenario on a three-node
// cluster: clients talk to a follower (which forwards to the leader) and
// the leader is SIGKILLed and restarted; the survivors elect a new leader.
func TestDurabilityAcrossLeaderSIGKILL(t *testing.T) { runDurability(t, 3) }

func runDurability(t *testing.T, size int) {
	t0 := time.Now()
	c := tc.Start(t, size)
	victim := c.Leader()
	node := victim // the node the clients use
	for _, n := range c.Nodes() {
		if n != victim {
			node = n
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	if err := node.Client().Configure(ctx, durQueue, map[string]any{"leaseTime": durLease}); err != nil {
		t.Fatal(err)
	}

	var (
		viol    violations
		epoch   atomic.Int32
		stop    atomic.Bool // set when the test gives up; every loop exits
		wg      sync.WaitGroup
		groups  = make([]*groupLog, len(durGroups))
		pushMu  sync.Mutex
		pushIDs = map[int]string{} // key -> message_id from the push answer
		pushed  atomic.Int64
	)
	defer stop.Store(true)
	client := node.Client()
	sleep := func() { time.Sleep(20 * time.Millisecond) }

	// Producer: one goroutine, batches of 100 (10 per partition), each
	// retried with the same transactionIds until answered, so pushes
	// interrupted by the crash are deduplicated.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for b := 0; b < durTotal/durPushBatch && !stop.Load(); b++ {
			per := durPushBatch / durPartitions
			var items []tc.PushItem
			var keys []int
			for j := range per {
				for p := range durPartitions {
					s := b*per + j
					items = append(items, tc.PushItem{Queue: durQueue, Partition: durPartition(p),
						Payload: durPayload{P: p, S: s}, TransactionID: durTxID(p, s)})
					keys = append(keys, durKey(p, s))
				}
			}
			retried := false
			for !stop.Load() {
				res, err := client.Push(ctx, items)
				if err != nil {
					if tc.Retryable(err) {
						retried = true
						sleep()
						continue
					}
					viol.add("push batch %d: %v", b, err)
					stop.Store(true)
					return
				}
				pushMu.Lock()
				for i, r := range res {
					switch {
					case r.Status == "queued", r.Status == "duplicate" && retried:
					default:
						viol.add("push %s: status %q (retried %v)", items[i].TransactionID, r.Status, retried)
					}
					if r.TransactionID != items[i].TransactionID || r.MessageID == "" {
						viol.add("push %s: answer %+v", items[i].TransactionID, r)
					}
					pushIDs[keys[i]] = r.MessageID
				}
				pushMu.Unlock()
				pushed.Add(int64(len(items)))
				break
			}
		}
	}()

	consume := func(g *groupLog) {
		defer wg.Done()
		for !g.done() && !stop.Load() {
			msgs, err := client.Pop(ctx, durQueue, tc.PopParams{ConsumerGroup: g.name, Batch: durPopBatch,
				Wait: true, Timeout: time.Second})
			if err != nil {
				if tc.Retryable(err) && ctx.Err() == nil {
					g.mu.Lock()
					g.popErrors++
					g.mu.Unlock()
					sleep()
					continue
				}
				viol.add("%s: pop: %v", g.name, err)
				stop.Store(true)
				return
			}
			if len(msgs) == 0 {
				continue
			}
			keys := g.recordPop(&viol, msgs, epoch.Load())
			acks := make([]tc.Ack, len(msgs))
			for i, m := range msgs {
				acks[i] = tc.AckFor(m, "completed")
			}
			retried := false
			for !stop.Load() {
				res, err := client.AckBatch(ctx, g.name, acks)
				if err != nil {
					if tc.Retryable(err) && ctx.Err() == nil {
						retried = true
						g.mu.Lock()
						g.ackRetries++
						g.mu.Unlock()
						sleep()
						continue
					}
					viol.add("%s: ack: %v", g.name, err)
					stop.Store(true)
					return
				}
				g.recordAck(&viol, keys, msgs[0].LeaseID, res, retried, epoch.Load())
				break
			}
		}
	}
	for i, name := range durGroups {
		groups[i] = newGroupLog(name)
		for range durConsumers {
			wg.Add(1)
			go consume(groups[i])
		}
	}

	// SIGKILL once both groups have completed about half of the messages.
	for {
		if groups[0].completedCount() >= durKillAfter && groups[1].completedCount() >= durKillAfter {
			break
		}
		if stop.Load() || ctx.Err() != nil {
			viol.report(t)
			t.Fatalf("consumers did not reach %d completions: %d, %d (pushed %d)", durKillAfter,
				groups[0].completedCount(), groups[1].completedCount(), pushed.Load())
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Each group also abandons one popped batch across the crash (a
	// consumer that died with the broker): its lease survives the restart,
	// expires, and the batch must be redelivered from the group's position.
	abandoned := make([][]int, len(groups))
	for i, g := range groups {
		msgs, err := client.Pop(ctx, durQueue, tc.PopParams{ConsumerGroup: g.name, Batch: durPopBatch})
		if err != nil {
			t.Fatalf("%s: pop to abandon: %v", g.name, err)
		}
		if len(msgs) > 0 {
			abandoned[i] = g.recordPop(&viol, msgs, 0)
		}
	}
	victim.Kill()
	killedAt := time.Now()
	epoch.Store(1)
	t.Logf("%s: SIGKILL of %s with %d pushed; completed %s=%d %s=%d; abandoned leases on %d and %d messages", elapsed(t0),
		victim.ID(), pushed.Load(), groups[0].name, groups[0].completedCount(), groups[1].name, groups[1].completedCount(),
		len(abandoned[0]), len(abandoned[1]))
	if size > 1 {
		// Let the survivors elect a new leader and serve for a while
		// before the old leader comes back as a follower.
		leader, err := c.WaitLeader(tc.LeaderTimeout)
		if err != nil {
			t.Fatal(err)
		}
		base := groups[0].completedCount()
		for groups[0].completedCount() < base+500 && !stop.Load() && ctx.Err() == nil && !groups[0].done() {
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("%s: %s leads; completed %s=%d", elapsed(t0), leader.ID(), groups[0].name, groups[0].completedCount())
	}
	victim.Restart()
	leader, err := c.WaitLeader(tc.LeaderTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s restarted; %s leads", elapsed(t0), victim.ID(), leader.ID())

	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		stop.Store(true)
		<-finished
		viol.report(t)
		for _, g := range groups {
			g.mu.Lock()
			t.Errorf("%s: resolved %d of %d", g.name, g.resolved, durTotal)
			g.mu.Unlock()
		}
		t.Fatal("consumers did not finish in time")
	}
	t.Logf("%s: consumers done", elapsed(t0))
	if viol.report(t); t.Failed() {
		t.FailNow()
	}

	// Drain: leases lost in the crash (pops whose answer died with the
	// process) expire durLease seconds after it; then whatever is still
	// deliverable must be a message whose ack outcome was unknown, never one
	// whose completion was acknowledged.
	time.Sleep(time.Until(killedAt.Add(durLease*time.Second + time.Second)))
	for _, g := range groups {
		for range 1000 {
			msgs, err := client.Retrying(10*time.Second).Pop(ctx, durQueue, tc.PopParams{ConsumerGroup: g.name, Batch: 1000})
			if err != nil {
				t.Fatalf("%s: drain pop: %v", g.name, err)
			}
			if len(msgs) == 0 {
				break
			}
			keys := g.recordPop(&viol, msgs, 1)
			g.mu.Lock()
			for _, k := range keys {
				if g.state[k] != uncertain {
					viol.add("%s: drain delivered %s, whose state is %d (only messages with an unknown ack outcome may remain)",
						g.name, durKeyName(k), g.state[k])
				}
			}
			g.mu.Unlock()
			acks := make([]tc.Ack, len(msgs))
			for i, m := range msgs {
				acks[i] = tc.AckFor(m, "completed")
			}
			res, err := client.Retrying(10*time.Second).AckBatch(ctx, g.name, acks)
			if err != nil {
				t.Fatalf("%s: drain ack: %v", g.name, err)
			}
			g.recordAck(&viol, keys, msgs[0].LeaseID, res, false, 1)
		}
	}

	// Final analysis.
	for _, g := range groups {
		g.mu.Lock()
		var neverDelivered, unresolvedKeys []string
		uncertainN := 0
		for k := range durTotal {
			ds := g.deliveries[k]
			if len(ds) == 0 {
				neverDelivered = append(neverDelivered, durKeyName(k))
				continue
			}
			pushMu.Lock()
			id := pushIDs[k]
			pushMu.Unlock()
			if id == "" {
				viol.add("%s: %s delivered but never answered by a push", g.name, durKeyName(k))
			}
			for _, d := range ds {
				if d.id != id {
					viol.add("%s: %s delivered with id %s, its push answered %s", g.name, durKeyName(k), d.id, id)
				}
			}
			switch g.state[k] {
			case unresolved:
				unresolvedKeys = append(unresolvedKeys, durKeyName(k))
			case uncertain:
				uncertainN++
			}
		}
		if len(neverDelivered) > 0 {
			viol.add("%s: %d acknowledged pushes never delivered (lost), e.g. %v", g.name, len(neverDelivered), first(neverDelivered, 10))
		}
		if len(unresolvedKeys) > 0 {
			viol.add("%s: %d messages delivered but never completed and no longer delivered (skipped), e.g. %v",
				g.name, len(unresolvedKeys), first(unresolvedKeys, 10))
		}
		if g.redeliveredAfterRestart > 0 {
			viol.add("%s: %d deliveries after the restart of messages whose completion was acknowledged before the SIGKILL",
				g.name, g.redeliveredAfterRestart)
		}
		// Order within (partition, group): each batch is contiguous in
		// push order and starts at or before the frontier (the highest
		// sequence delivered so far, plus one): starting after it would
		// skip messages, starting before it is a redelivery, which is only
		// allowed for messages without an acknowledged completion (checked
		// in recordPop and recordAck).
		redeliveries := 0
		for p := range durPartitions {
			frontier := 0
			for _, b := range g.batches[p] {
				for i := 1; i < len(b.seqs); i++ {
					if b.seqs[i] != b.seqs[i-1]+1 {
						viol.add("%s/%s: batch under lease %s not in order: %v", g.name, durPartition(p), b.lease, b.seqs)
						break
					}
				}
				if len(b.seqs) == 0 {
					continue
				}
				if b.seqs[0] > frontier {
					viol.add("%s/%s: batch under lease %s starts at %d, skipping %d..%d", g.name, durPartition(p),
						b.lease, b.seqs[0], frontier, b.seqs[0]-1)
				}
				if b.seqs[0] < frontier {
					redeliveries++
					for _, s := range b.seqs {
						if s >= frontier {
							break
						}
						if ai, ok := g.completedBy[durKey(p, s)]; ok && ai.lease != b.lease {
							viol.add("%s/%s: redelivery of %d under lease %s, completed under lease %s",
								g.name, durPartition(p), s, b.lease, ai.lease)
						}
					}
				}
				frontier = max(frontier, b.seqs[len(b.seqs)-1]+1)
			}
			if frontier != durPerPart {
				viol.add("%s/%s: deliveries end at %d of %d", g.name, durPartition(p), frontier, durPerPart)
			}
		}
		for _, k := range abandoned[slicesIndex(groups, g)] {
			if n := len(g.deliveries[k]); n < 2 {
				viol.add("%s: %s was abandoned under a lease before the SIGKILL but delivered %d time(s)", g.name, durKeyName(k), n)
			}
		}
		t.Logf("%s: %d completed, %d with an unknown ack outcome, %d redelivered batches, %d acks refused on first attempt, %d ack retries, %d pop errors",
			g.name, g.nCompleted, uncertainN, redeliveries, g.failedAcks, g.ackRetries, g.popErrors)
		g.mu.Unlock()
	}
	viol.report(t)
	if _, err := c.WaitConverged(10 * time.Second); err != nil {
		t.Error(err)
	}
	t.Logf("%s: done", elapsed(t0))
}

func slicesIndex(groups []*groupLog, g *groupLog) int {
	for i := range groups {
		if groups[i] == g {
			return i
		}
	}
	return -1
}

func first(s []string, n int) []string {
	sort.Strings(s)
	return s[:min(n, len(s))]
}

// TestAcknowledgedPushSurvivesSIGKILL: a push answered 201 is durable: the
// process is SIGKILLed the moment the answer arrives, restarted on the same
// data directory, and the message is there (same id, same data, in order).
func TestAcknowledgedPushSurvivesSIGKILL(t *testing.T) {
	c := tc.Start(t, 1)
	node := c.Node(0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const queue = "kill-push"
	type want struct{ id, txid, data string }
	var all []want
	rounds := [][]tc.PushItem{
		{{Queue: queue, Partition: "p0", Payload: map[string]any{"round": 0}, TransactionID: "r0"}},
		nil, // a batch of 100 over 10 partitions
		{{Queue: queue, Partition: "p3", Payload: "last", TransactionID: "r2"}},
	}
	for i := range 100 {
		rounds[1] = append(rounds[1], tc.PushItem{Queue: queue, Partition: fmt.Sprintf("p%d", i%10),
			Payload: map[string]any{"round": 1, "i": i}, TransactionID: fmt.Sprintf("r1-%d", i)})
	}
	for round, items := range rounds {
		res, err := node.Client().Push(ctx, items)
		if err != nil {
			t.Fatalf("round %d: push: %v", round, err)
		}
		node.Kill() // immediately after the 201
		for i, r := range res {
			if r.Status != "queued" {
				t.Fatalf("round %d: push item %d: %+v", round, i, r)
			}
			b, _ := json.Marshal(items[i].Payload)
			all = append(all, want{id: r.MessageID, txid: items[i].TransactionID, data: string(b)})
		}
		node.Restart()
		if _, err := c.WaitLeader(tc.LeaderTimeout); err != nil {
			t.Fatal(err)
		}
		// A fresh consumer group sees everything pushed so far, each
		// partition in push order.
		got := map[string]tc.Message{}
		var order []tc.Message
		for {
			msgs, err := node.Client().Pop(ctx, queue, tc.PopParams{ConsumerGroup: fmt.Sprintf("check-%d", round),
				Batch: 1000, Partitions: 100, AutoAck: true})
			if err != nil {
				t.Fatalf("round %d: pop: %v", round, err)
			}
			if len(msgs) == 0 {
				break
			}
			for _, m := range msgs {
				got[m.TransactionID] = m
				order = append(order, m)
			}
		}
		if len(got) != len(all) {
			t.Fatalf("round %d: after SIGKILL and restart %d of %d acknowledged messages remain", round, len(got), len(all))
		}
		for _, w := range all {
			m, ok := got[w.txid]
			if !ok {
				t.Fatalf("round %d: acknowledged push %s lost by SIGKILL", round, w.txid)
			}
			if m.ID != w.id || compactJSON(t, m.Data) != w.data {
				t.Fatalf("round %d: %s came back as id %s data %s, pushed as id %s data %s", round, w.txid, m.ID, m.Data, w.id, w.data)
			}
		}
		last := map[string]int{}
		pos := map[string]int{}
		for i, w := range all {
			pos[w.txid] = i
		}
		for _, m := range order {
			if p, ok := last[m.Partition]; ok && pos[m.TransactionID] < p {
				t.Fatalf("round %d: partition %s delivered %s after a later message", round, m.Partition, m.TransactionID)
			}
			last[m.Partition] = pos[m.TransactionID]
		}
	}
}

func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("data %s: %v", raw, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestGracefulShutdownSIGTERM: SIGTERM answers a parked long-poll with 204,
// exits 0, and the restarted node has exactly the state (applied index and
// digest) it had before the shutdown.
func TestGracefulShutdownSIGTERM(t *testing.T) {
	c := tc.Start(t, 1)
	node := c.Node(0)
	cl := node.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := cl.Configure(ctx, "graceful", map[string]any{"leaseTime": 60}); err != nil {
		t.Fatal(err)
	}
	var items []tc.PushItem
	for i := range 200 {
		items = append(items, tc.PushItem{Queue: "graceful", Partition: fmt.Sprintf("p%d", i%4), Payload: i,
			TransactionID: fmt.Sprintf("g-%d", i)})
	}
	if _, err := cl.Push(ctx, items); err != nil {
		t.Fatal(err)
	}
	// One group completes a batch, another holds a lease across the restart.
	msgs, err := cl.Pop(ctx, "graceful", tc.PopParams{ConsumerGroup: "done", Batch: 50})
	if err != nil || len(msgs) == 0 {
		t.Fatalf("pop: %v (%d messages)", err, len(msgs))
	}
	acks := make([]tc.Ack, len(msgs))
	for i, m := range msgs {
		acks[i] = tc.AckFor(m, "")
	}
	if res, err := cl.AckBatch(ctx, "done", acks); err != nil || !res[len(res)-1].Success {
		t.Fatalf("ack: %v %+v", err, res)
	}
	if _, err := cl.Pop(ctx, "graceful", tc.PopParams{ConsumerGroup: "leased", Batch: 50}); err != nil {
		t.Fatal(err)
	}

	// A long-poll parked on an empty queue (queue mode records nothing).
	type popOut struct {
		msgs []tc.Message
		err  error
		took time.Duration
	}
	parked := make(chan popOut, 1)
	go func() {
		start := time.Now()
		m, err := cl.Pop(ctx, "graceful-empty", tc.PopParams{Wait: true, Timeout: 60 * time.Second})
		parked <- popOut{m, err, time.Since(start)}
	}()
	before := stableDigest(t, cl)

	stopStart := time.Now()
	if err := node.Stop(); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	t.Logf("SIGTERM to exit: %v", time.Since(stopStart).Round(time.Millisecond))
	if code := node.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	select {
	case p := <-parked:
		if p.err != nil || len(p.msgs) != 0 {
			t.Errorf("parked long-poll on SIGTERM: %v %d messages (want a 204)", p.err, len(p.msgs))
		}
		if p.took > 30*time.Second {
			t.Errorf("parked long-poll answered after %v", p.took)
		}
	case <-time.After(10 * time.Second):
		t.Error("parked long-poll not answered 10s after the process exited")
	}
	if b, err := os.ReadFile(node.LogPath()); err != nil || !strings.Contains(string(b), "msg=stopped") {
		t.Errorf("log does not record a clean stop (err %v)", err)
	}

	node.Restart()
	// Before any election: the state file as the clean shutdown left it.
	d, err := cl.Retrying(10 * time.Second).Digest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.AppliedIndex != before.AppliedIndex || d.Digest != before.Digest {
		t.Errorf("state after graceful restart (before election) %d/%s, before shutdown %d/%s",
			d.AppliedIndex, d.Digest, before.AppliedIndex, before.Digest)
	}
	if _, err := c.WaitLeader(tc.LeaderTimeout); err != nil {
		t.Fatal(err)
	}
	after := stableDigest(t, cl)
	if after.AppliedIndex != before.AppliedIndex || after.Digest != before.Digest {
		t.Errorf("state after graceful restart (leading) %d/%s, before shutdown %d/%s",
			after.AppliedIndex, after.Digest, before.AppliedIndex, before.Digest)
	}
	// The lease held across the restart still excludes its group.
	if m, err := cl.Pop(ctx, "graceful", tc.PopParams{ConsumerGroup: "leased", Batch: 200}); err != nil {
		t.Fatal(err)
	} else if n := countPartitions(m); n > 3 {
		t.Errorf("group with a live lease on one partition got %d partitions", n)
	}
}

func countPartitions(msgs []tc.Message) int {
	seen := map[string]bool{}
	for _, m := range msgs {
		seen[m.PartitionID] = true
	}
	return len(seen)
}

// stableDigest reads the digest until two reads 500 ms apart agree.
func stableDigest(t *testing.T, cl *tc.Client) tc.Digest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prev, err := cl.Digest(ctx)
	for err == nil {
		time.Sleep(500 * time.Millisecond)
		var d tc.Digest
		if d, err = cl.Digest(ctx); err == nil && d == prev {
			return d
		}
		prev = d
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("state digest did not settle")
	}
	t.Fatal(err)
	return tc.Digest{}
}

// TestClusterSurvivesSIGKILLOfAllNodes: in a three-node cluster, writes
// acknowledged through any node (followers forward) survive SIGKILL of every
// node at once (README, Durability); after the restart the replicas
// converge to one state, acknowledged completions stay completed, and the
// rest is delivered in order.
func TestClusterSurvivesSIGKILLOfAllNodes(t *testing.T) {
	c := tc.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const queue, total, parts = "cluster-kill", 300, 3
	nodes := c.Nodes()
	if err := nodes[1].Client().Configure(ctx, queue, map[string]any{"leaseTime": 30}); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for b := range total / 30 {
		var items []tc.PushItem
		for i := range 30 {
			n := b*30 + i
			items = append(items, tc.PushItem{Queue: queue, Partition: fmt.Sprintf("p%d", n%parts), Payload: n,
				TransactionID: fmt.Sprintf("m%d", n)})
		}
		res, err := nodes[b%3].Client().Push(ctx, items)
		if err != nil {
			t.Fatalf("push via %s: %v", nodes[b%3].ID(), err)
		}
		for i, r := range res {
			if r.Status != "queued" {
				t.Fatalf("push %s: %+v", items[i].TransactionID, r)
			}
			ids[r.TransactionID] = r.MessageID
		}
	}
	// Group "g" completes some batches through different nodes.
	acked := map[string]bool{}
	for i := range 4 {
		cl := nodes[i%3].Client()
		msgs, err := cl.Pop(ctx, queue, tc.PopParams{ConsumerGroup: "g", Batch: 40})
		if err != nil || len(msgs) == 0 {
			t.Fatalf("pop via %s: %v (%d)", nodes[i%3].ID(), err, len(msgs))
		}
		acks := make([]tc.Ack, len(msgs))
		for j, m := range msgs {
			acks[j] = tc.AckFor(m, "")
		}
		res, err := cl.AckBatch(ctx, "g", acks)
		if err != nil {
			t.Fatal(err)
		}
		for j, r := range res {
			if !r.Success {
				t.Fatalf("ack %s: %+v", msgs[j].TransactionID, r)
			}
			acked[msgs[j].TransactionID] = true
		}
	}
	for _, n := range nodes {
		n.Kill()
	}
	for _, n := range nodes {
		n.Restart()
	}
	if _, err := c.WaitLeader(tc.LeaderTimeout); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := n.WaitHealthy(tc.LeaderTimeout); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.WaitConverged(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	// A fresh group sees every acknowledged push; group g sees exactly the
	// messages it did not complete, each partition in push order.
	for _, group := range []string{"fresh", "g"} {
		seen := map[string]bool{}
		last := map[string]int{}
		for i := 0; ; i++ {
			msgs, err := nodes[i%3].Client().Retrying(10*time.Second).Pop(ctx, queue,
				tc.PopParams{ConsumerGroup: group, Batch: 100, AutoAck: true})
			if err != nil {
				t.Fatalf("%s: pop: %v", group, err)
			}
			if len(msgs) == 0 {
				break
			}
			for _, m := range msgs {
				var n int
				if err := json.Unmarshal(m.Data, &n); err != nil || m.ID != ids[m.TransactionID] {
					t.Fatalf("%s: message %+v does not match its push (id %s)", group, m, ids[m.TransactionID])
				}
				if p, ok := last[m.Partition]; ok && n <= p {
					t.Fatalf("%s: partition %s delivered %d after %d", group, m.Partition, n, p)
				}
				last[m.Partition] = n
				if group == "g" && acked[m.TransactionID] {
					t.Fatalf("g: %s delivered again after its completion was acknowledged", m.TransactionID)
				}
				seen[m.TransactionID] = true
			}
		}
		want := total
		if group == "g" {
			want = total - len(acked)
		}
		if len(seen) != want {
			t.Fatalf("%s: %d messages delivered after the restart, want %d", group, len(seen), want)
		}
	}
	if _, err := c.WaitConverged(20 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestAcknowledgedAckAndLeaseSurviveSIGKILL: an ack/batch answered 200 and a
// lease granted by a pop answered 200 are durable: SIGKILL right after the
// answer, restart, and the acked messages are never delivered again while
// the leased partition stays leased until its lease expires, after which
// exactly the unacknowledged messages are redelivered in order.
func TestAcknowledgedAckAndLeaseSurviveSIGKILL(t *testing.T) {
	c := tc.Start(t, 1)
	node := c.Node(0)
	cl := node.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const queue, lease = "kill-ack", 5
	if err := cl.Configure(ctx, queue, map[string]any{"leaseTime": lease}); err != nil {
		t.Fatal(err)
	}
	var items []tc.PushItem
	for i := range 30 {
		items = append(items, tc.PushItem{Queue: queue, Partition: "p", Payload: i, TransactionID: fmt.Sprintf("a%d", i)})
	}
	if _, err := cl.Push(ctx, items); err != nil {
		t.Fatal(err)
	}
	restart := func() {
		node.Restart()
		if _, err := c.WaitLeader(tc.LeaderTimeout); err != nil {
			t.Fatal(err)
		}
	}
	seqs := func(msgs []tc.Message) []int {
		out := make([]int, len(msgs))
		for i, m := range msgs {
			if err := json.Unmarshal(m.Data, &out[i]); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	pop := func(batch int) []tc.Message {
		t.Helper()
		msgs, err := cl.Pop(ctx, queue, tc.PopParams{ConsumerGroup: "g", Batch: batch})
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	wantSeqs := func(what string, msgs []tc.Message, from, n int) {
		t.Helper()
		got := seqs(msgs)
		ok := len(got) == n
		for i := 0; ok && i < n; i++ {
			ok = got[i] == from+i
		}
		if !ok {
			t.Fatalf("%s: delivered %v, want %d..%d", what, got, from, from+n-1)
		}
	}

	// 1. Ack answered, then SIGKILL: the acked batch stays consumed.
	msgs := pop(10)
	wantSeqs("first pop", msgs, 0, 10)
	acks := make([]tc.Ack, len(msgs))
	for i, m := range msgs {
		acks[i] = tc.AckFor(m, "completed")
	}
	res, err := cl.AckBatch(ctx, "g", acks)
	node.Kill()
	if err != nil || !res[9].Success || !res[9].LeaseReleased {
		t.Fatalf("ack: %v %+v", err, res)
	}
	restart()

	// 2. Pop answered, then SIGKILL: the lease survives the restart.
	msgs = pop(10)
	wantSeqs("pop after ack and restart", msgs, 10, 10)
	leasedAt := time.Now()
	node.Kill()
	restart()
	if time.Since(leasedAt) < lease*time.Second-500*time.Millisecond {
		if m := pop(10); len(m) != 0 {
			t.Fatalf("the lease granted before SIGKILL was lost: delivered %v %.1fs after the pop", seqs(m),
				time.Since(leasedAt).Seconds())
		}
	} else {
		t.Logf("restart took %v, longer than the lease: lease survival not checked", time.Since(leasedAt))
	}

	// 3. After the lease expires, exactly the unacknowledged messages come back.
	msgs, err = cl.Pop(ctx, queue, tc.PopParams{ConsumerGroup: "g", Batch: 100, Wait: true, Timeout: 2 * lease * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wantSeqs("redelivery after the lease expired", msgs, 10, 20)
}
