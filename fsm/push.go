package fsm

import (
	"sort"

	"github.com/crownmq/crown/segments"
)

func applyPush(a *applier, c *Push) any {
	if br := a.bufferIfMaintenance(c.Items, ""); br != nil {
		return br // push maintenance (system_apply.go)
	}
	res, pressure, ref := a.pushAs(c.Items, "")
	if ref != nil {
		a.recordOverflow(ref)
		return &PushResult{Items: make([]PushItemResult, len(c.Items)), Refused: ref}
	}
	return &PushResult{Items: res, Pressure: pressure}
}

// pushTarget gathers the queued items of one request for one partition: they
// become one segment.
type pushTarget struct {
	queue *segments.Queue
	part  *segments.Partition
	msgs  []segments.Message
	items []int // result index of each queued message
	n     int   // queued messages, counted before msgs is filled
	// repeats: a queued message's id was found in the index (it came back
	// after its dedup window) or not looked up (no dedup), so the append
	// may stop the index naming an older message (segments/idmark.go).
	repeats bool
}

// push stores items as one atomic step: every partition touched gets one
// segment holding its queued items in request order. Duplicates (by
// transaction id inside the queue's dedup window, or repeated inside the
// request) write nothing and point at the original message. A queue with
// OJS rules (docs/queues.md) can refuse the whole request: then nothing is
// written and the refusal is returned. A push that leaves a bounded queue
// near a bound reports its pressure.
func (a *applier) pushAs(items []PushItem, principal string) ([]PushItemResult, *Pressure, *Refusal) {
	return a.pushWith(items, principal, gateAll)
}

// Which OJS gates a push passes (checkIntake, checkCapacity).
const (
	// gateAll: a push as it arrives.
	gateAll = iota
	// gateDeletion: a push admitted earlier (buffered during push
	// maintenance, when its state and access rules were checked) meets
	// only a deletion begun since; capacity does not refuse what was
	// already accepted.
	gateDeletion
)

func (a *applier) pushWith(items []PushItem, principal string, gates int) ([]PushItemResult, *Pressure, *Refusal) {
	results := make([]PushItemResult, len(items))
	queues := make(map[string]*segments.Queue)
	type partKey struct {
		qid  uint64
		name string
	}
	// An item's target is found by a scan of the first few targets' keys
	// (a request over a few partitions never makes a map), then by a map
	// made at the size the rest of the request may need: over 10,000
	// partitions nearly every item is a target of its own, and a map grown
	// from empty rehashed its way to a hundred.
	var few [8]partKey
	keys := few[:0]
	var index map[partKey]int
	// targets is appended to while items are classified: take &targets[i]
	// only for the item at hand. Over many partitions nearly every item is
	// a target of its own, so each allocation saved here is one a message.
	targets := make([]pushTarget, 0, min(len(items), 256))
	queuedTo := make([]int32, len(items)) // each item's target, -1 when not queued
	var dups [][2]int                     // (result index, earlier result index in this request)
	// seen finds a transaction id repeated inside the request (queued
	// items are not in the index yet): one map for the whole request,
	// made on first use at its final size.
	type seenKey struct {
		target int
		txID   string
	}
	var seen map[seenKey]int

	// OJS gates: state and access before anything is written; capacity
	// once the request's messages are counted, under a savepoint.
	bounded := false
	for i := range items {
		name := items[i].Queue
		if i > 0 && items[i-1].Queue == name {
			continue
		}
		if _, ok := queues[name]; ok {
			continue
		}
		q := a.queueForPush(name)
		queues[name] = q
		if gates == gateDeletion {
			if q.OJS != nil && q.OJS.Deletion != nil {
				return nil, nil, &Refusal{Code: RefuseDeleting, Queue: q.Name}
			}
			continue
		}
		if q.OJS != nil && q.OJS.Gate != 0 {
			if r := checkIntake(q, principal); r != nil {
				return nil, nil, r
			}
			bounded = bounded || q.OJS.Gate&segments.GateCapacity != 0
		}
	}
	sp := 0
	if bounded {
		sp = a.tx.Savepoint()
	}

	for i := range items {
		it := &items[i]
		q := queues[it.Queue]
		if q.ID == 0 {
			a.store(q) // implicit creation
		}
		k := partKey{q.ID, it.Partition}
		ti := -1
		if index == nil {
			for j := range keys {
				if keys[j] == k {
					ti = j
					break
				}
			}
		} else if j, ok := index[k]; ok {
			ti = j
		}
		if ti < 0 {
			ti = len(targets)
			if index == nil && len(keys) == len(few) {
				index = make(map[partKey]int, len(keys)+len(items)-i)
				for j, kj := range keys {
					index[kj] = j
				}
			}
			if index == nil {
				keys = append(keys, k)
			} else {
				index[k] = ti
			}
			targets = append(targets, pushTarget{queue: q, part: a.partitionForPush(q, it.Partition)})
		}
		t := &targets[ti]
		queuedTo[i] = -1
		results[i].PartitionID = t.part.UUID
		if window := q.Options.DedupWindowSeconds; window > 0 {
			sk := seenKey{ti, it.TxID}
			if j, ok := seen[sk]; ok {
				results[i].Status = PushDuplicate
				dups = append(dups, [2]int{i, j})
				continue
			}
			ref, ok := must2(a.tx.TxID(t.part, it.TxID))
			indexed := ok
			if !ok {
				// Deleted inside its window, it is still a duplicate (dedup.go).
				var err error
				ref, _, ok, err = a.tx.DeletedTxID(q.ID, t.part.ID, it.TxID)
				must(err)
			}
			if ok && ref.PushedAt >= a.now-Micros(window) {
				results[i].Status = PushDuplicate
				results[i].MessageID = ref.MessageID()
				continue
			}
			if seen == nil {
				seen = make(map[seenKey]int, len(items)-i)
			}
			seen[sk] = i
			t.repeats = t.repeats || indexed
		} else {
			t.repeats = true
		}
		results[i].Status = PushQueued
		queuedTo[i] = int32(ti)
		t.n++
	}
	// Each target's messages and result indexes are windows of two arrays
	// of the request, filled in request order.
	queued := 0
	for ti := range targets {
		queued += targets[ti].n
	}
	msgs, idx := make([]segments.Message, queued), make([]int, queued)
	off := 0
	for ti := range targets {
		t := &targets[ti]
		t.msgs, t.items = msgs[off:off:off+t.n], idx[off:off:off+t.n]
		off += t.n
	}
	for i := range items {
		if queuedTo[i] < 0 {
			continue
		}
		it, t := &items[i], &targets[queuedTo[i]]
		t.msgs = append(t.msgs, segments.Message{
			TxID: it.TxID, TraceID: it.TraceID, HasTrace: it.HasTrace,
			ProducerSub: it.ProducerSub, Payload: it.Payload, Encrypted: it.Encrypted,
		})
		t.items = append(t.items, i)
	}
	var pressure *Pressure
	if bounded {
		var r *Refusal
		if pressure, r = a.checkPushCapacity(queues, targets); r != nil {
			must(a.tx.RollbackTo(sp))
			return nil, nil, r
		}
		a.tx.Release(sp)
	}

	// One reservation of ids for the request, handed out to the targets in
	// order: the same ids, and the same stored counter, as one reservation
	// per target, without a write of the counter per target.
	var base uint64
	if queued > 0 {
		base = must1(a.tx.ReserveIDs(uint64(queued)))
	}
	for ti := range targets {
		t := &targets[ti]
		if len(t.msgs) == 0 {
			continue
		}
		n := uint64(len(t.msgs))
		must1(a.tx.AppendSegment(t.part, a.now, base, t.msgs, !t.repeats))
		markWindow(t.part, t.queue.Options.WindowBuffer, a.now, t.part.NextOffset-n, n)
		must(a.tx.PutPartition(t.part))
		for k, ri := range t.items {
			results[ri].MessageID = segments.MessageID(a.now, base+uint64(k))
		}
		base += n
		a.events.touch(t.queue.Name)
	}
	for _, d := range dups {
		results[d[0]].MessageID = results[d[1]].MessageID
	}
	return results, pressure, nil
}

// checkPushCapacity checks the bounded queues of a push against what the
// request queues for each (duplicates excluded), in queue-name order, and
// reports the fullest one the push leaves near a bound.
func (a *applier) checkPushCapacity(queues map[string]*segments.Queue, targets []pushTarget) (*Pressure, *Refusal) {
	type load struct{ n, size uint64 }
	loads := make(map[string]*load)
	for ti := range targets {
		t := &targets[ti]
		if t.queue.OJS == nil || t.queue.OJS.Gate&segments.GateCapacity == 0 {
			continue
		}
		l := loads[t.queue.Name]
		if l == nil {
			l = &load{}
			loads[t.queue.Name] = l
		}
		l.n += uint64(len(t.msgs))
		for i := range t.msgs {
			l.size += uint64(len(t.msgs[i].Payload))
		}
	}
	names := make([]string, 0, len(loads))
	for n := range loads {
		names = append(names, n)
	}
	sort.Strings(names)
	var fullest *Pressure
	for _, n := range names {
		r, p := a.capacityFill(queues[n], loads[n].n, loads[n].size)
		if r != nil {
			return nil, r
		}
		if p != nil && (fullest == nil || p.Ratio() > fullest.Ratio()) {
			fullest = p
		}
	}
	return fullest, nil
}

// pressureThreshold is the share of a bound from which a push that fits
// reports the queue's pressure (ojs-queues.md 7.1).
const pressureThreshold = 0.8

// capacityFill refuses a push of n messages (size payload bytes) that would
// take q's backlog past a bound; one that fits but leaves the backlog at
// pressureThreshold or more of a bound reports the fullest bound.
func (a *applier) capacityFill(q *segments.Queue, n, size uint64) (*Refusal, *Pressure) {
	l := &q.OJS.Limits
	var depth, bytes uint64
	if q.ID != 0 {
		depth, bytes = queueDepth(a.tx, q, l.MaxSizeBytes > 0)
	}
	if l.MaxDepth > 0 && depth+n > uint64(l.MaxDepth) {
		return &Refusal{Code: RefuseFull, Queue: q.Name, Depth: int64(depth), Bound: l.MaxDepth, BoundType: "depth"}, nil
	}
	if l.MaxSizeBytes > 0 && bytes+size > uint64(l.MaxSizeBytes) {
		return &Refusal{Code: RefuseFull, Queue: q.Name, Depth: int64(bytes), Bound: l.MaxSizeBytes, BoundType: "size"}, nil
	}
	var p *Pressure
	for _, c := range []Pressure{{q.Name, int64(depth + n), l.MaxDepth, "depth"}, {q.Name, int64(bytes + size), l.MaxSizeBytes, "size"}} {
		if c.Bound > 0 && c.Ratio() >= pressureThreshold && (p == nil || c.Ratio() > p.Ratio()) {
			p = &c
		}
	}
	return nil, p
}

// markWindow tracks the windowBuffer burst of a partition: a push after the
// previous burst's window has passed starts a new one at its first offset.
func markWindow(p *segments.Partition, windowSeconds, now int64, first, n uint64) {
	if windowSeconds <= 0 {
		p.WindowMark, p.WindowCount, p.WindowFirst = 0, 0, 0
		return
	}
	if p.WindowMark == 0 || now >= p.WindowMark+Micros(windowSeconds) {
		p.WindowMark, p.WindowCount, p.WindowFirst = now, n, first
		return
	}
	p.WindowCount += n
}

// queueForPush loads a queue or, when it does not exist, builds (without
// storing: q.ID is 0) the queue a push creates implicitly: push defaults,
// derived tags, and the matching policy bound.
func (a *applier) queueForPush(name string) *segments.Queue {
	q := must1(a.tx.Queue(name))
	if q != nil {
		return q
	}
	q, _ = a.newQueue(name, segments.OriginPush, BindAuto, "")
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
