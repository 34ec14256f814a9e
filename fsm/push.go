package fsm

import (
	"github.com/crownmq/crown/segments"
)

func applyPush(a *applier, c *Push) any {
	return &PushResult{Items: a.push(c.Items)}
}

// pushTarget gathers the queued items of one request for one partition: they
// become one segment.
type pushTarget struct {
	queue *segments.Queue
	part  *segments.Partition
	msgs  []segments.Message
	items []int // result index of each queued message
	seen  map[string]int
}

// push stores items as one atomic step: every partition touched gets one
// segment holding its queued items in request order. Duplicates (by
// transaction id inside the queue's dedup window, or repeated inside the
// request) write nothing and point at the original message.
func (a *applier) push(items []PushItem) []PushItemResult {
	results := make([]PushItemResult, len(items))
	queues := make(map[string]*segments.Queue)
	type partKey struct {
		qid  uint64
		name string
	}
	index := make(map[partKey]int)
	var targets []*pushTarget
	var dups [][2]int // (result index, earlier result index in this request)

	for i := range items {
		it := &items[i]
		q, ok := queues[it.Queue]
		if !ok {
			q = a.queueForPush(it.Queue)
			queues[it.Queue] = q
		}
		k := partKey{q.ID, it.Partition}
		ti, ok := index[k]
		if !ok {
			ti = len(targets)
			index[k] = ti
			targets = append(targets, &pushTarget{queue: q, part: a.partitionForPush(q, it.Partition)})
		}
		t := targets[ti]
		results[i].PartitionID = t.part.UUID
		if window := q.Options.DedupWindowSeconds; window > 0 {
			if j, ok := t.seen[it.TxID]; ok {
				results[i].Status = PushDuplicate
				dups = append(dups, [2]int{i, j})
				continue
			}
			if ref, ok := a.tx.TxID(t.part.ID, it.TxID); ok && ref.PushedAt >= a.now-window*1e6 {
				results[i].Status = PushDuplicate
				results[i].MessageID = ref.MessageID()
				continue
			}
			if t.seen == nil {
				t.seen = make(map[string]int)
			}
			t.seen[it.TxID] = i
		}
		results[i].Status = PushQueued
		t.msgs = append(t.msgs, segments.Message{
			TxID: it.TxID, TraceID: it.TraceID, HasTrace: it.HasTrace,
			ProducerSub: it.ProducerSub, Payload: it.Payload, Encrypted: it.Encrypted,
		})
		t.items = append(t.items, i)
	}

	for _, t := range targets {
		if len(t.msgs) == 0 {
			continue
		}
		n := uint64(len(t.msgs))
		base := must1(a.tx.ReserveIDs(n))
		must1(a.tx.AppendSegment(t.part, a.now, base, t.msgs))
		markWindow(t.part, t.queue.Options.WindowBuffer, a.now, t.part.NextOffset-n, n)
		must(a.tx.PutPartition(t.part))
		for k, ri := range t.items {
			results[ri].MessageID = segments.MessageID(a.now, base+uint64(k))
		}
		a.events.touch(t.queue.Name)
	}
	for _, d := range dups {
		results[d[0]].MessageID = results[d[1]].MessageID
	}
	return results
}

// markWindow tracks the windowBuffer burst of a partition: a push after the
// previous burst's window has passed starts a new one at its first offset.
func markWindow(p *segments.Partition, windowSeconds, now int64, first, n uint64) {
	if windowSeconds <= 0 {
		p.WindowMark, p.WindowCount, p.WindowFirst = 0, 0, 0
		return
	}
	if p.WindowMark == 0 || now >= p.WindowMark+windowSeconds*1e6 {
		p.WindowMark, p.WindowCount, p.WindowFirst = now, n, first
		return
	}
	p.WindowCount += n
}

// queueForPush loads a queue, creating it with push defaults and derived
// tags when it does not exist (implicit creation).
func (a *applier) queueForPush(name string) *segments.Queue {
	q := must1(a.tx.Queue(name))
	if q != nil {
		return q
	}
	ns, task := DeriveTags(name)
	q = &segments.Queue{
		UUID:      a.newID(),
		Name:      name,
		Namespace: ns,
		Task:      task,
		CreatedAt: a.now,
		Origin:    segments.OriginPush,
		Options:   DefaultOptions(segments.OriginPush),
	}
	must(a.tx.CreateQueue(q))
	return q
}

// partitionForPush loads a partition, creating it on first use.
func (a *applier) partitionForPush(q *segments.Queue, name string) *segments.Partition {
	p := must1(a.tx.Partition(q.ID, name))
	if p != nil {
		return p
	}
	p = &segments.Partition{QueueID: q.ID, UUID: a.newID(), Name: name, CreatedAt: a.now}
	must(a.tx.CreatePartition(p))
	return p
}
