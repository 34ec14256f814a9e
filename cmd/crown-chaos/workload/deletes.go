package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

// Message deletion under faults. One worker pushes small batches to a queue
// of its own (DeleteQueue, outside the checked queues: a deleted message is
// meant to be missing, which the history checker would call lost), sometimes
// leases a batch as a group, then deletes one message of each batch through
// whichever node answers, retrying an unanswered delete until one answers
// (an answer of "not found" to a retry means an earlier attempt applied;
// when no earlier attempt can have applied, that the message had vanished).
// After the drain, VerifyDeletes reads every confirmed message back through
// every node with a linearizable read: deleted ones must be gone everywhere,
// the others present. A push attempt whose outcome was unknown may still
// apply after a retry was confirmed and the message deleted; it must then be
// a duplicate (the id is remembered for its dedup window), so that check
// covers deduplication across deletions too. The runner's digest
// checkpoints, meanwhile, compare what the cuts left on each node.

// DeleteQueue is the queue the deletion worker uses.
const DeleteQueue = "chaos-del"

// deleteGroup leases batches of DeleteQueue so that some deletions hit a
// live lease, whose batch the deletion must end or shorten.
const deleteGroup = "chaos-del-g"

// delMsg is one message of DeleteQueue whose push was confirmed.
type delMsg struct {
	txn       string
	partition string // partition id (UUID)
	deleted   bool
	// uncertain: a delete was sent and never answered before the worker
	// stopped, so the message may or may not be stored; not verified.
	uncertain bool
	// mayHaveApplied: a delete attempt got no usable answer, so a later
	// one may find the message already gone.
	mayHaveApplied bool
	// problem: what the deletion itself got wrong, for VerifyDeletes.
	problem string
}

// deletesState is what the deletion worker confirmed, for VerifyDeletes.
type deletesState struct {
	msgs []*delMsg
}

// DeleteCounts summarises the deletion worker's confirmed work.
type DeleteCounts struct {
	Pushed, Deleted int
	Unverified      int // deleted, or maybe deleted, with an outcome not checked
}

// DeleteCounts reports how many messages the deletion worker pushed and deleted.
func (w *Workload) DeleteCounts() DeleteCounts {
	w.progressMu.Lock()
	defer w.progressMu.Unlock()
	c := DeleteCounts{Pushed: len(w.dels.msgs)}
	for _, m := range w.dels.msgs {
		if m.deleted {
			c.Deleted++
		}
		if m.uncertain {
			c.Unverified++
		}
	}
	return c
}

func (w *Workload) deleter(id uint64) {
	defer w.producers.Done()
	rng := rand.New(rand.NewPCG(w.cfg.Seed, id))
	np := &nodePicker{nodes: w.cfg.Nodes, cur: int(id) % len(w.cfg.Nodes), rng: rng}
	for n := 0; !w.stopped(w.stopProduce); n++ {
		part := fmt.Sprintf("d%d", n%2)
		batch := make([]PushItem, 3)
		for i := range batch {
			batch[i] = PushItem{Queue: DeleteQueue, Partition: part, Payload: map[string]int{"n": n, "i": i},
				TransactionID: fmt.Sprintf("%s-del-%d-%d", w.cfg.RunID, n, i)}
		}
		var pid string
		if !w.untilConfirmed(np, rng, func(node Node) bool { pid = w.pushForDelete(node, batch); return pid != "" }) {
			return
		}
		msgs := make([]*delMsg, len(batch))
		for i, it := range batch {
			msgs[i] = &delMsg{txn: it.TransactionID, partition: pid}
		}
		w.progressMu.Lock()
		w.dels.msgs = append(w.dels.msgs, msgs...)
		w.progressMu.Unlock()
		if rng.IntN(2) == 0 {
			// Lease the batch (or part of it): no ack follows, so the
			// lease stays live until it expires or the deletion ends it.
			w.once(np, func(node Node) bool { return w.popForDelete(node, part, 1+rng.IntN(3)) })
		}
		victim := msgs[rng.IntN(len(msgs))]
		w.progressMu.Lock()
		victim.uncertain = true
		w.progressMu.Unlock()
		if !w.untilConfirmed(np, rng, func(node Node) bool { return w.deleteOnce(node, victim) }) {
			return
		}
		w.progressMu.Lock()
		victim.deleted, victim.uncertain = true, false
		w.progressMu.Unlock()
		w.sleep(300*time.Millisecond+time.Duration(rng.Int64N(int64(400*time.Millisecond))), w.stopProduce)
	}
}

// once runs one request through the gate, whatever its outcome.
func (w *Workload) once(np *nodePicker, op func(Node) bool) {
	if !w.gate.Enter(w.ctx) {
		return
	}
	if !op(np.pick()) {
		np.failed()
	}
	w.gate.Leave()
}

func (w *Workload) request(method, u string, body any) Answer {
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.RequestTimeout)
	defer cancel()
	return w.client.do(ctx, method, u, body)
}

// pushForDelete pushes a batch (retries send the same transaction ids, so
// a repeat answers duplicate) and returns its partition's id, or "" when the
// attempt was not confirmed.
func (w *Workload) pushForDelete(node Node, items []PushItem) string {
	a := w.request("POST", node.URL+"/api/v1/push", map[string]any{"items": items})
	if a.Outcome != history.OK {
		return ""
	}
	var res []struct {
		Status      string `json:"status"`
		PartitionID string `json:"partition_id"`
	}
	if err := json.Unmarshal(a.Body, &res); err != nil || len(res) != len(items) {
		return ""
	}
	for _, r := range res {
		if r.Status != "queued" && r.Status != "duplicate" || r.PartitionID == "" || r.PartitionID != res[0].PartitionID {
			return ""
		}
	}
	return res[0].PartitionID
}

func (w *Workload) popForDelete(node Node, part string, batch int) bool {
	q := url.Values{"consumerGroup": {deleteGroup}, "batch": {fmt.Sprint(batch)}, "wait": {"false"},
		"leaseSeconds": {fmt.Sprint(w.cfg.LeaseSeconds)}}
	a := w.request("GET", node.URL+"/api/v1/pop/queue/"+DeleteQueue+"/partition/"+part+"?"+q.Encode(), nil)
	return a.Outcome == history.OK
}

// deleteOnce sends one delete and reports whether it was answered. The
// message was confirmed stored, so an answer of "not found" is right only
// when an earlier attempt may have applied; otherwise the message vanished
// before anyone deleted it, a problem VerifyDeletes reports. Either way the
// message is gone and retrying cannot change that.
func (w *Workload) deleteOnce(node Node, m *delMsg) bool {
	a := w.request("DELETE", node.URL+"/api/v1/messages/"+m.partition+"/"+url.PathEscape(m.txn), nil)
	var res struct {
		Success *bool  `json:"success"`
		Message string `json:"message"`
	}
	answered := a.Outcome == history.OK && json.Unmarshal(a.Body, &res) == nil && res.Success != nil
	w.progressMu.Lock()
	defer w.progressMu.Unlock()
	if !answered {
		// A failed request applied nothing; anything else may have.
		m.mayHaveApplied = m.mayHaveApplied || a.Outcome != history.Fail
		return false
	}
	if !*res.Success && !m.mayHaveApplied {
		m.problem = fmt.Sprintf("delete of confirmed message %s answered %q, and no earlier attempt can have deleted it: "+
			"it was gone before it was deleted", m.txn, res.Message)
	}
	return true
}

// VerifyDeletes reads every confirmed message of DeleteQueue back through
// every node, linearizably, and lists what disagrees with the deletions:
// a deleted message still readable, or a message never deleted missing.
// Call it after the drain, with every node up.
func (w *Workload) VerifyDeletes(ctx context.Context) []string {
	w.progressMu.Lock()
	msgs := make([]delMsg, len(w.dels.msgs))
	for i, m := range w.dels.msgs {
		msgs[i] = *m
	}
	w.progressMu.Unlock()
	var problems []string
	for _, m := range msgs {
		if m.problem != "" {
			problems = append(problems, m.problem)
		}
	}
	for _, node := range w.cfg.Nodes {
		for _, m := range msgs {
			if m.uncertain {
				continue
			}
			status, err := w.readMessage(ctx, node, m)
			switch {
			case err != nil:
				problems = append(problems, fmt.Sprintf("%s: read of %s: %v", node.ID, m.txn, err))
			case m.deleted && status != http.StatusNotFound:
				problems = append(problems, fmt.Sprintf("%s: deleted message %s answers %d", node.ID, m.txn, status))
			case !m.deleted && status != http.StatusOK:
				problems = append(problems, fmt.Sprintf("%s: message %s, never deleted, answers %d", node.ID, m.txn, status))
			}
			if len(problems) >= 20 {
				sort.Strings(problems)
				return append(problems, "(stopped at 20)")
			}
		}
	}
	return problems
}

// readMessage answers the status of a linearizable read of one message,
// retrying transport errors and 5xx answers for up to 10 s.
func (w *Workload) readMessage(ctx context.Context, node Node, m delMsg) (int, error) {
	u := node.URL + "/api/v1/messages/" + m.partition + "/" + url.PathEscape(m.txn) + "?consistency=linearizable"
	deadline := time.Now().Add(10 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, w.cfg.RequestTimeout)
		a := w.client.do(rctx, "GET", u, nil)
		cancel()
		if a.Status == http.StatusOK || a.Status == http.StatusNotFound {
			return a.Status, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("no answer: %s", a.Error)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
