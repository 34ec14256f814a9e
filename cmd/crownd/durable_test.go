package main

// The durability promise (README, "Durability: when fsync
// happens"): every write acknowledged before a SIGKILL of any node, or of
// all of them, is there exactly once after the restart, on every replica,
// also on a node that rebuilt its state from a snapshot or from an empty
// data directory, and membership changes made with crownctl keep it so.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// durableCtl runs crownctl (from $CROWN_BIN, built beside crownd) with args
// and returns its exit code, stdout and stderr.
func durableCtl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	bin := filepath.Join(filepath.Dir(tc.Binary(t)), "crownctl")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("crownctl not beside crownd (%v): set CROWN_BIN to a directory holding both", err)
	}
	cmd := exec.Command(bin, args...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	cmd.Env = append(os.Environ(), "CROWN_URL=")
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("crownctl %v: %v", args, err)
	}
	return code, so.String(), se.String()
}

var durableAgeRe = regexp.MustCompile(`"(timeLagSeconds|maxTimeLag|time_lag_seconds|lag_hours)":[0-9.]+`)

// durablePusher pushes numbered single-message requests to one partition
// of queue, round-robin through the nodes it is given, retrying each with
// the same transactionId until it is acknowledged (201 queued or
// duplicate). acked lists the acknowledged sequence numbers in order.
type durablePusher struct {
	queue   string
	mu      sync.Mutex
	targets []*tc.Node
	acked   []int
	next    int
	stop    atomic.Bool
	wg      sync.WaitGroup
	errs    []string
}

func (p *durablePusher) setTargets(ns []*tc.Node) {
	p.mu.Lock()
	p.targets = append([]*tc.Node(nil), ns...)
	p.mu.Unlock()
}

func (p *durablePusher) run(ctx context.Context) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for i := 0; !p.stop.Load() && ctx.Err() == nil; i++ {
			seq := p.next
			tx := fmt.Sprintf("%s-%d", p.queue, seq)
			deadline := time.Now().Add(30 * time.Second)
			for try := 0; ; try++ {
				p.mu.Lock()
				n := p.targets[(i+try)%len(p.targets)]
				p.mu.Unlock()
				cctx, cancel := context.WithTimeout(ctx, 8*time.Second)
				res, err := n.Client().Push(cctx, []tc.PushItem{{Queue: p.queue, Partition: "p", Payload: seq, TransactionID: tx}})
				cancel()
				if err == nil && (res[0].Status == "queued" || res[0].Status == "duplicate") {
					p.mu.Lock()
					p.acked = append(p.acked, seq)
					p.mu.Unlock()
					break
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					p.mu.Lock()
					p.errs = append(p.errs, fmt.Sprintf("push %s: %v %+v", tx, err, res))
					p.mu.Unlock()
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			p.next++
			time.Sleep(5 * time.Millisecond)
		}
	}()
}

func (p *durablePusher) finish() []int {
	p.stop.Store(true)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.acked...)
}

// durableDrain pops everything of queue for a fresh group through n
// (autoAck) and returns the payload numbers in delivery order.
func durableDrain(t *testing.T, ctx context.Context, n *tc.Node, queue, group string) []int {
	t.Helper()
	var out []int
	for {
		msgs, err := n.Client().Retrying(20*time.Second).Pop(ctx, queue, tc.PopParams{ConsumerGroup: group, Batch: 1000, AutoAck: true})
		if err != nil {
			t.Fatalf("drain %s via %s: %v", queue, n.ID(), err)
		}
		if len(msgs) == 0 {
			return out
		}
		for _, m := range msgs {
			var v int
			if err := json.Unmarshal(m.Data, &v); err != nil {
				t.Fatalf("payload %s: %v", m.Data, err)
			}
			out = append(out, v)
		}
	}
}

// durableCheckExactlyOnce checks that got holds every acknowledged number
// exactly once, in increasing order (numbers not acknowledged, whose push
// had an unknown outcome, may appear once too).
func durableCheckExactlyOnce(t *testing.T, what string, acked, got []int) {
	t.Helper()
	seen := map[int]int{}
	for i, v := range got {
		seen[v]++
		if i > 0 && v <= got[i-1] {
			t.Errorf("%s: %d delivered after %d (out of order or duplicated)", what, v, got[i-1])
		}
	}
	for _, v := range acked {
		if seen[v] != 1 {
			t.Errorf("%s: acknowledged push %d delivered %d times, want 1", what, v, seen[v])
		}
	}
}

// TestDurableRemoveLeaderViaCrownctl: README "Deployments":
// "`crownctl cluster status|members|add|remove|transfer-leadership`
// manages membership", and docs/deployments.md: "`crownctl cluster remove
// node4` takes it out of the Raft configuration and the node registry";
// README "Durability": an acknowledged write survives. Removing the member
// that happens to lead, while pushes run, must succeed (exit 0), leave two
// voters that elect a leader and keep serving, drop the node from the
// registry, and lose or duplicate no acknowledged push.
func TestDurableRemoveLeaderViaCrownctl(t *testing.T) {
	c := tc.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	leader := c.Leader()
	var rest []*tc.Node
	for _, n := range c.Nodes() {
		if n != leader {
			rest = append(rest, n)
		}
	}
	p := &durablePusher{queue: "rmleader"}
	p.setTargets(rest)
	p.run(ctx)
	time.Sleep(time.Second)

	code, out, errOut := durableCtl(t, "--url", leader.URL(), "--timeout", "15s", "cluster", "remove", leader.ID())
	if code != 0 || !strings.Contains(out, "removed "+leader.ID()) {
		t.Errorf("crownctl cluster remove %s (the leader): exit %d, stdout %q, stderr %q; want exit 0 and %q",
			leader.ID(), code, out, errOut, "removed "+leader.ID())
	}
	time.Sleep(2 * time.Second)
	acked := p.finish()
	if len(p.errs) > 0 {
		t.Errorf("pushes through the remaining nodes failed after the removal: %v", p.errs[:min(3, len(p.errs))])
	}
	// The remaining two agree on a two-voter configuration without it.
	for _, n := range rest {
		var members []tc.Member
		deadline := time.Now().Add(15 * time.Second)
		for {
			var err error
			members, err = n.Client().Members(ctx)
			ok := err == nil && len(members) == 2
			for _, m := range members {
				ok = ok && m.ID != leader.ID() && m.HTTPAddr != ""
			}
			if ok || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if len(members) != 2 {
			t.Errorf("%s lists members %+v after removing %s, want the two others", n.ID(), members, leader.ID())
		}
	}
	// ... and out of the node registry (GET /api/v1/system/shared-state
	// lists it), on every remaining node.
	for _, n := range rest {
		var st struct {
			Nodes []struct {
				ID string `json:"id"`
			} `json:"nodes"`
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := n.Client().Do(ctx, "GET", "/api/v1/system/shared-state", nil, &st)
			still := err != nil
			for _, r := range st.Nodes {
				still = still || r.ID == leader.ID()
			}
			if !still {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s's node registry still lists the removed %s: %+v (%v)", n.ID(), leader.ID(), st.Nodes, err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	leader.Kill()
	got := durableDrain(t, ctx, rest[0], p.queue, "audit")
	t.Logf("%d pushes acknowledged, %d delivered", len(acked), len(got))
	durableCheckExactlyOnce(t, "after removing the leader", acked, got)
	if _, err := c.WaitConverged(20 * time.Second); err != nil {
		t.Errorf("the two remaining nodes do not converge: %v", err)
	}
}

// TestDurableStateRebuiltFromSnapshotIsIdentical: README
// "Durability": "After a machine crash ... they are discarded and rebuilt
// from the newest snapshot plus the log", and the brief: a node restored
// from a snapshot ends identical. A single node with small snapshot
// thresholds takes every kind of write (configure, pushes, pops, acks, a
// transaction, a lease extension, consumer-group seek, OJS queue
// administration and a policy, traces, push maintenance with a buffered
// push, a streams query and cycle, a message delete), is SIGKILLed and
// restarted (same digest), then stopped, its state directory deleted, and
// restarted: it must rebuild the same state (same digest at the same
// index) from its snapshot and log, and serve the same answers.
func TestDurableStateRebuiltFromSnapshotIsIdentical(t *testing.T) {
	c := tc.Start(t, 1, tc.WithArgs("--raft-snapshot-log-bytes", "4096", "--raft-trailing-logs", "4"))
	node := c.Node(0)
	cl := node.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	do := func(method, path string, body any, out any) {
		t.Helper()
		if _, err := cl.Do(ctx, method, path, body, out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	do("POST", "/api/v1/configure", map[string]any{"queue": "snapq", "options": map[string]any{"leaseTime": 300, "retryLimit": 1, "dlqAfterMaxRetries": true}}, nil)
	for b := range 20 {
		var items []tc.PushItem
		for i := range 10 {
			n := b*10 + i
			items = append(items, tc.PushItem{Queue: "snapq", Partition: fmt.Sprintf("p%d", n%3), Payload: map[string]any{"n": n, "pad": strings.Repeat("x", 100)}, TransactionID: fmt.Sprintf("s%d", n)})
		}
		if _, err := cl.Push(ctx, items); err != nil {
			t.Fatal(err)
		}
		if b%4 == 0 {
			time.Sleep(1100 * time.Millisecond) // the log-bytes trigger is checked every second
		}
	}
	msgs, err := cl.Pop(ctx, "snapq", tc.PopParams{ConsumerGroup: "g1", Batch: 5})
	if err != nil || len(msgs) == 0 {
		t.Fatalf("pop: %v %d", err, len(msgs))
	}
	if _, err := cl.AckBatch(ctx, "g1", []tc.Ack{tc.AckFor(msgs[1], "completed")}); err != nil {
		t.Fatal(err)
	}
	leased, err := cl.Pop(ctx, "snapq", tc.PopParams{ConsumerGroup: "g2", Batch: 3})
	if err != nil || len(leased) == 0 {
		t.Fatalf("pop g2: %v", err)
	}
	do("POST", "/api/v1/lease/"+leased[0].LeaseID+"/extend", map[string]any{"seconds": 900}, nil)
	do("POST", "/api/v1/transaction", map[string]any{"operations": []any{
		map[string]any{"type": "ack", "transactionId": leased[0].TransactionID, "partitionId": leased[0].PartitionID, "status": "failed", "consumerGroup": "g2"},
		map[string]any{"type": "push", "items": []any{map[string]any{"queue": "out", "partition": "x", "payload": 1, "transactionId": "t1"}}},
	}}, nil)
	do("POST", "/api/v1/traces", map[string]any{"transactionId": msgs[0].TransactionID, "partitionId": msgs[0].PartitionID, "consumerGroup": "g1", "traceNames": []string{"tn"}, "data": map[string]any{"k": 1}}, nil)
	do("POST", "/api/v1/consumer-groups/g3/queues/snapq/seek", map[string]any{"toEnd": true}, nil)
	if _, err := cl.Pop(ctx, "snapq", tc.PopParams{ConsumerGroup: "g3", Batch: 1}); err != nil {
		t.Fatal(err)
	}
	do("POST", "/api/v1/consumer-groups/g3/queues/snapq/seek", map[string]any{"toEnd": true}, nil)
	do("POST", "/ojs/v1/queues", map[string]any{"name": "ojsq", "capacity": map[string]any{"max_depth": 1000}}, nil)
	do("POST", "/ojs/v1/queues/ojsq/pause", map[string]any{}, nil)
	do("POST", "/ojs/v1/queues/_policies", map[string]any{"name": "batch", "match": "batch.*", "config": map[string]any{"capacity": map[string]any{"max_depth": 50}}}, nil)
	do("DELETE", "/api/v1/messages/"+msgs[4].PartitionID+"/"+msgs[4].TransactionID, nil, nil)
	do("POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}, nil)
	if _, err := cl.Push(ctx, []tc.PushItem{{Queue: "buffered", Partition: "b", Payload: 1, TransactionID: "buf1"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)

	before, err := c.WaitConverged(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	log, _ := node.CurrentLog()
	if !strings.Contains(log, "snapshot") {
		t.Logf("no snapshot in the log so far")
	}
	reads := []string{"/api/v1/resources/queues/snapq", "/api/v1/resources/queues/out", "/api/v1/consumer-groups/g2",
		"/api/v1/system/maintenance", "/ojs/v1/queues/ojsq", "/api/v1/traces/" + msgs[0].PartitionID + "/" + msgs[0].TransactionID,
		"/api/v1/dlq?queue=snapq"}
	snapshotReads := func() map[string]string {
		out := map[string]string{}
		for _, r := range reads {
			var v json.RawMessage
			if _, err := cl.Do(ctx, "GET", r, nil, &v); err != nil {
				out[r] = "error: " + err.Error()
				continue
			}
			// Ages grow with the clock: not state.
			out[r] = durableAgeRe.ReplaceAllString(string(v), `"$1":0`)
		}
		return out
	}
	wantReads := snapshotReads()

	check := func(what string) {
		t.Helper()
		if err := node.WaitHealthy(tc.LeaderTimeout); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		d, err := cl.Digest(ctx)
		if err != nil {
			t.Fatalf("%s: digest: %v", what, err)
		}
		if d.AppliedIndex == before.AppliedIndex && d.Digest != before.Digest {
			t.Errorf("%s: digest at index %d is %.16s, before %.16s", what, d.AppliedIndex, d.Digest, before.Digest)
		}
		if d.AppliedIndex < before.AppliedIndex {
			t.Errorf("%s: applied index %d, before %d: acknowledged writes lost", what, d.AppliedIndex, before.AppliedIndex)
		}
		got := snapshotReads()
		for _, r := range reads {
			if got[r] != wantReads[r] {
				t.Errorf("%s: GET %s\n got %s\nwant %s", what, r, got[r], wantReads[r])
			}
		}
	}
	node.Kill()
	node.Restart()
	check("after SIGKILL")

	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	snaps, _ := filepath.Glob(filepath.Join(node.DataDir(), "raft", "snapshots", "*"))
	t.Logf("snapshots on disk: %v", snaps)
	if err := os.RemoveAll(filepath.Join(node.DataDir(), "state")); err != nil {
		t.Fatal(err)
	}
	node.Restart()
	check("after rebuilding the state from the snapshot and log")
	log, _ = node.CurrentLog()
	if !strings.Contains(log, "restoring") {
		t.Logf("the rebuild did not restore a snapshot (no snapshot was taken?)")
	}

	// Switching maintenance off drains the buffered push, once.
	do("POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil)
	got, err := cl.Pop(ctx, "buffered", tc.PopParams{Batch: 10})
	if err != nil || len(got) != 1 || got[0].TransactionID != "buf1" {
		t.Errorf("the push buffered before the crash and rebuild: pop %v, %+v; want exactly buf1", err, got)
	}
}

// TestDurableKillAllDuringTransactions: README "Durability": "A
// push, ack, pop, transaction or configure is answered only after its log
// entry is committed ... So an acknowledged write survives SIGKILL of any
// node, and of all nodes at once"; queen-api.md 4.15: "Typical use
// (exactly-once hand-off between stages): pop from stage A, compute, then
// one transaction acking the input and pushing the output"; section 6: "a
// client that retries a whole transaction after a lost response gets the
// same outcome twice". Pushes to stage A and pop + transaction hand-offs to
// stage B run through every node while all three nodes are SIGKILLed at
// once and restarted; clients retry 5xx and transport errors with the same
// bodies. Afterwards: every acknowledged push of A is stored once and in
// order, B holds exactly one output per input whose transaction was
// acknowledged (and none twice), no input whose transaction was
// acknowledged is delivered to the group again, and the replicas agree.
func TestDurableKillAllDuringTransactions(t *testing.T) {
	c := tc.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	nodes := c.Nodes()
	if err := nodes[0].Client().Retrying(10*time.Second).Configure(ctx, "stageA", map[string]any{"leaseTime": 3}); err != nil {
		t.Fatal(err)
	}
	p := &durablePusher{queue: "stageA"}
	p.setTargets(nodes)
	p.run(ctx)

	var (
		mu        sync.Mutex
		handedOff = map[int]bool{} // inputs whose transaction was acknowledged
		redeliv   []string
		stop      atomic.Bool
		wg        sync.WaitGroup
		txErrs    []string
	)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load() && ctx.Err() == nil; i++ {
				n := nodes[(i+w)%3]
				cctx, cc := context.WithTimeout(ctx, 5*time.Second)
				msgs, err := n.Client().Pop(cctx, "stageA", tc.PopParams{ConsumerGroup: "g", Batch: 5})
				cc()
				if err != nil || len(msgs) == 0 {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				var ops []any
				var seqs []int
				for _, m := range msgs {
					var v int
					json.Unmarshal(m.Data, &v)
					seqs = append(seqs, v)
					mu.Lock()
					if handedOff[v] {
						redeliv = append(redeliv, fmt.Sprintf("%d via %s", v, n.ID()))
					}
					mu.Unlock()
					ops = append(ops, map[string]any{"type": "ack", "transactionId": m.TransactionID, "partitionId": m.PartitionID,
						"status": "completed", "consumerGroup": "g"},
						map[string]any{"type": "push", "items": []any{map[string]any{"queue": "stageB", "partition": "out",
							"payload": v, "transactionId": "out-" + m.TransactionID}}})
				}
				body := map[string]any{"operations": ops}
				deadline := time.Now().Add(25 * time.Second)
				for try := 0; ; try++ {
					var out struct {
						Success bool   `json:"success"`
						Error   string `json:"error"`
					}
					tn := nodes[(i+w+try)%3]
					cctx, cc := context.WithTimeout(ctx, 8*time.Second)
					_, err := tn.Client().Do(cctx, "POST", "/api/v1/transaction", body, &out)
					cc()
					if err == nil && out.Success {
						mu.Lock()
						for _, v := range seqs {
							handedOff[v] = true
						}
						mu.Unlock()
						break
					}
					if err == nil && !out.Success {
						mu.Lock()
						txErrs = append(txErrs, fmt.Sprintf("transaction for %v via %s (try %d): %s", seqs, tn.ID(), try, out.Error))
						mu.Unlock()
						break
					}
					if time.Now().After(deadline) || ctx.Err() != nil || !tc.Retryable(err) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(2 * time.Second)
	if err := killAllAndRestart(nodes); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	acked := p.finish()
	stop.Store(true)
	wg.Wait()
	if _, err := c.WaitConverged(20 * time.Second); err != nil {
		t.Errorf("replicas do not converge after the kill: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d pushes acknowledged, %d inputs handed off; transaction failures: %d", len(acked), len(handedOff), len(txErrs))
	for _, e := range txErrs[:min(5, len(txErrs))] {
		t.Errorf("a retried hand-off transaction failed: %s", e)
	}
	if len(redeliv) > 0 {
		t.Errorf("inputs delivered to g again after their hand-off transaction was acknowledged: %v", redeliv[:min(10, len(redeliv))])
	}
	gotA := durableDrain(t, ctx, nodes[1], "stageA", "auditA")
	durableCheckExactlyOnce(t, "stage A", acked, gotA)
	gotB := durableDrain(t, ctx, nodes[2], "stageB", "auditB")
	seenB := map[int]int{}
	for _, v := range gotB {
		seenB[v]++
		if seenB[v] == 2 {
			t.Errorf("stage B holds the output of input %d twice", v)
		}
	}
	for v := range handedOff {
		if seenB[v] != 1 {
			t.Errorf("input %d was handed off (transaction acknowledged) but stage B holds %d outputs for it", v, seenB[v])
		}
	}
}

// TestDurableWipedFollowerRejoinsIdentical: README "Durability": an
// acknowledged write survives "as long as a majority's disks survive"; the
// brief: a node restarted with an empty data directory ends identical.
// While pushes, pops and acks run, a follower is SIGKILLed, its data
// directory removed, and it is started again with the same command line
// (with small snapshot thresholds the leader has compacted its log, so it
// must install a snapshot). It must converge to the same digest as the
// others, serve every acknowledged push once and in order, and the group's
// completions must hold on it.
func TestDurableWipedFollowerRejoinsIdentical(t *testing.T) {
	c := tc.Start(t, 3, tc.WithArgs("--raft-snapshot-log-bytes", "8192", "--raft-trailing-logs", "8"))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	leader := c.Leader()
	var fs []*tc.Node
	for _, n := range c.Nodes() {
		if n != leader {
			fs = append(fs, n)
		}
	}
	victim := fs[0]
	p := &durablePusher{queue: "wiped"}
	p.setTargets([]*tc.Node{leader, fs[1]})
	p.run(ctx)
	// Group g consumes part of the stream.
	completed := map[int]bool{}
	consume := func(rounds int) {
		for range rounds {
			msgs, err := leader.Client().Retrying(10*time.Second).Pop(ctx, "wiped", tc.PopParams{ConsumerGroup: "g", Batch: 20})
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) == 0 {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			res, err := leader.Client().Retrying(10*time.Second).AckBatch(ctx, "g", []tc.Ack{tc.AckFor(msgs[len(msgs)-1], "completed")})
			if err != nil || !res[0].Success {
				t.Fatalf("ack: %v %+v", err, res)
			}
			for _, m := range msgs {
				var v int
				json.Unmarshal(m.Data, &v)
				completed[v] = true
			}
		}
	}
	consume(10)
	victim.Kill()
	if err := os.RemoveAll(victim.DataDir()); err != nil {
		t.Fatal(err)
	}
	consume(20)
	time.Sleep(3 * time.Second) // the leader snapshots and compacts meanwhile
	victim.Restart()
	if err := victim.WaitHealthy(tc.LeaderTimeout); err != nil {
		t.Fatal(err)
	}
	consume(10)
	acked := p.finish()
	if len(p.errs) > 0 {
		t.Errorf("pushes failed: %v", p.errs[:min(3, len(p.errs))])
	}
	d, err := c.WaitConverged(30 * time.Second)
	if err != nil {
		t.Fatalf("the wiped follower does not converge: %v", err)
	}
	t.Logf("converged at %d (%.12s); %d pushes acknowledged, %d completed by g", d.AppliedIndex, d.Digest, len(acked), len(completed))
	got := durableDrain(t, ctx, victim, "wiped", "audit")
	durableCheckExactlyOnce(t, "read through the wiped follower", acked, got)
	rest := durableDrain(t, ctx, victim, "wiped", "g")
	for _, v := range rest {
		if completed[v] {
			t.Errorf("%d delivered to g through the wiped follower after g completed it", v)
		}
	}
	if _, err := c.WaitConverged(20 * time.Second); err != nil {
		t.Error(err)
	}
}

// TestDurableRemoveUnknownMemberIs404: docs/deployments.md:
// "`crownctl cluster remove node4` takes it out of the Raft configuration
// and the node registry"; README "Errors": "`not_found` | 404 | Unknown
// route or resource". Removing an id that is not a member (a typo) must
// not report "removed": it is a 404 not_found (as transfer-leadership to
// an unknown id is), and crownctl exits 1, so an operator does not believe
// a node left the quorum while it still counts in it.
func TestDurableRemoveUnknownMemberIs404(t *testing.T) {
	c := tc.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, out, errOut := durableCtl(t, "--url", c.Node(0).URL(), "cluster", "remove", "node33")
	if code != 1 || strings.Contains(out, "removed") {
		t.Errorf("crownctl cluster remove node33 (no such member): exit %d, stdout %q, stderr %q; want exit 1 and a not_found error",
			code, out, errOut)
	}
	_, err := c.Node(1).Client().Do(ctx, "DELETE", "/api/v1/cluster/members/node33", nil, nil)
	var he *tc.HTTPError
	if !errors.As(err, &he) || he.Status != 404 || he.Code != "not_found" {
		t.Errorf("DELETE /api/v1/cluster/members/node33: %v; want 404 not_found", err)
	}
	members, err := c.Node(0).Client().Members(ctx)
	if err != nil || len(members) != 3 {
		t.Errorf("members after removing an unknown id: %+v (%v), want the three nodes", members, err)
	}
}

// TestDurableSingleNodeRepeatedKillsDuringSnapshots: README
// "Durability": an acknowledged write "survives SIGKILL of any node"; "A
// snapshot ... holds a copy of the state file and hard links to the segment
// files that no longer change, with a copy of the one still appended to,
// all fsynced before Raft may drop the log it replaces". A single node
// that snapshots every few KiB of log is SIGKILLed four times while two
// producers push (so kills land inside snapshots and compactions); after
// each restart every acknowledged push is there once and in order, and
// finally a state rebuilt from the newest snapshot and the log (state
// directory removed) has the same digest as the state the node kept.
func TestDurableSingleNodeRepeatedKillsDuringSnapshots(t *testing.T) {
	c := tc.Start(t, 1, tc.WithArgs("--raft-snapshot-log-bytes", "2048", "--raft-trailing-logs", "2"))
	node := c.Node(0)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var ps []*durablePusher
	for i := range 2 {
		p := &durablePusher{queue: fmt.Sprintf("rk%d", i)}
		p.setTargets([]*tc.Node{node})
		p.run(ctx)
		ps = append(ps, p)
	}
	for round := range 4 {
		time.Sleep(time.Duration(1300+round*370) * time.Millisecond)
		node.Kill()
		node.Restart()
		if err := node.WaitHealthy(tc.LeaderTimeout); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	time.Sleep(time.Second)
	for i, p := range ps {
		acked := p.finish()
		if len(p.errs) > 0 {
			t.Errorf("%s: pushes failed: %v", p.queue, p.errs[:min(3, len(p.errs))])
		}
		got := durableDrain(t, ctx, node, p.queue, fmt.Sprintf("audit%d", i))
		t.Logf("%s: %d acknowledged, %d stored", p.queue, len(acked), len(got))
		durableCheckExactlyOnce(t, p.queue+" after four SIGKILLs", acked, got)
	}
	kept, err := node.Client().Digest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(node.DataDir(), "state")); err != nil {
		t.Fatal(err)
	}
	node.Restart()
	if err := node.WaitHealthy(tc.LeaderTimeout); err != nil {
		t.Fatal(err)
	}
	var rebuilt tc.Digest
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		// The rebuild replays the log once the node leads again.
		if rebuilt, err = node.Client().Digest(ctx); err != nil {
			t.Fatal(err)
		}
		if rebuilt.AppliedIndex >= kept.AppliedIndex || time.Now().After(deadline) {
			break
		}
	}
	if rebuilt.AppliedIndex == kept.AppliedIndex && rebuilt.Digest != kept.Digest {
		t.Errorf("state rebuilt from snapshot and log at index %d: digest %.16s, the kept state's %.16s", rebuilt.AppliedIndex, rebuilt.Digest, kept.Digest)
	}
	if rebuilt.AppliedIndex < kept.AppliedIndex {
		t.Errorf("rebuilt state at index %d, behind the kept state's %d", rebuilt.AppliedIndex, kept.AppliedIndex)
	}
	t.Logf("kept %d/%.12s, rebuilt %d/%.12s", kept.AppliedIndex, kept.Digest, rebuilt.AppliedIndex, rebuilt.Digest)
}

// killAllAndRestart SIGKILLs every node at once, as a power cut would, then
// restarts them all and waits until each answers /health with 200.
func killAllAndRestart(nodes []*tc.Node) error {
	for _, n := range nodes {
		n.Kill()
	}
	for _, n := range nodes {
		n.Restart()
	}
	for _, n := range nodes {
		if err := n.WaitHealthy(tc.LeaderTimeout); err != nil {
			return err
		}
	}
	return nil
}
