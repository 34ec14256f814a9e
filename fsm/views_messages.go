package fsm

import (
	"bytes"
	"container/heap"
	"fmt"
	"math"
	"sort"

	"github.com/crownmq/crown/segments"
)

// Message browsing (queen-api.md 3.12 and 3.14's queue message list).
//
// A listing is newest first across partitions, ordered by (createdAt, id).
// It merges one cursor per partition, each walking its segments backwards
// from the newest one in range; a segment's blob is read only when its
// commit time reaches the head of the merge, so a page costs the segments it
// shows (plus ties), not the partitions. A status filter narrows each
// cursor to the offsets that can have that status (statuses follow the
// consumer cursors, which are offsets), so a filtered page does not wade
// through messages of other statuses either.

// Message statuses as the browsing views report them.
const (
	StatusPending    = "pending"
	StatusProcessing = "processing"
	StatusCompleted  = "completed"
	StatusDeadLetter = "dead_letter"
)

// Caps of the browsing views. A page is at most MaxBrowseLimit messages and
// starts at most MaxBrowseOffset matches in: the walk is proportional to
// offset + limit, and deeper pages are what the time filters are for.
const (
	MaxBrowseLimit  = 1000
	MaxBrowseOffset = 100_000
)

// ValidStatus reports whether s is a status a listing can filter on.
func ValidStatus(s string) bool {
	switch s {
	case StatusPending, StatusProcessing, StatusCompleted, StatusDeadLetter:
		return true
	}
	return false
}

// MessageQuery selects messages to list. Empty strings match everything.
type MessageQuery struct {
	Queue     string
	Partition string
	Namespace string
	Task      string
	Status    string // "" or a Status* constant
	From      int64  // unix µs, inclusive
	Before    int64  // unix µs, exclusive
	Limit     int
	Offset    int
}

// BrowseMode tells which kinds of readers a set of partitions has.
type BrowseMode struct {
	HasQueueMode bool
	BusGroups    int // distinct named groups
	// ConsumedBy is, for one message, how many named groups consumed it.
	ConsumedBy int
}

// Type is "queue", "bus", "hybrid" or "none".
func (m BrowseMode) Type() string {
	switch {
	case m.HasQueueMode && m.BusGroups > 0:
		return "hybrid"
	case m.HasQueueMode:
		return "queue"
	case m.BusGroups > 0:
		return "bus"
	}
	return "none"
}

// MessageSummary is one listed message.
type MessageSummary struct {
	ID          [16]byte
	TxID        string
	PartUUID    [16]byte
	Queue       string
	Partition   string
	Namespace   string
	Task        string
	Priority    int64
	TraceID     [16]byte
	HasTrace    bool
	ProducerSub string
	CreatedAt   int64
	// Status is the message's status (dead letters included); QueueStatus
	// its status for the queue-mode cursor alone.
	Status      string
	QueueStatus string
	// LeaseExpiresAt is the queue-mode lease's expiry while it holds the
	// message (Status processing), else 0.
	LeaseExpiresAt int64
	// ConsumedBy of TotalGroups named groups on the partition consumed it.
	ConsumedBy  int
	TotalGroups int
}

// MessageList is a page of messages and the reader mode of their scope.
type MessageList struct {
	Messages []MessageSummary
	Mode     BrowseMode
}

// partState is what deciding a partition's message statuses needs.
type partState struct {
	q        *segments.Queue
	p        *segments.Partition
	qm       *segments.Group // queue-mode cursor, nil if none
	named    []namedCursor   // in name order
	minNamed uint64          // slowest named group's Next
	// skips: some group holds a range an OJS purge removed for it, so a
	// status is not a matter of offset bounds alone (Group.Passed).
	skips bool
	// dlq maps offsets dead-lettered (for any group) to their newest entry;
	// only entries of messages in the query's window are loaded.
	dlq map[uint64]*segments.DeadLetterSummary
}

type namedCursor struct {
	name string
	g    *segments.Group
}

func loadPartState(tx *segments.Tx, q *segments.Queue, p *segments.Partition) *partState {
	ps := &partState{q: q, p: p}
	must(tx.ForEachGroup(p.ID, func(name string, g *segments.Group) (bool, error) {
		ps.skips = ps.skips || g.HasSkip()
		if name == QueueMode {
			ps.qm = g
			return true, nil
		}
		if len(ps.named) == 0 || g.Next < ps.minNamed {
			ps.minNamed = g.Next
		}
		ps.named = append(ps.named, namedCursor{name, g})
		return true, nil
	}))
	return ps
}

// queueStatus is the status of the message at off for the queue-mode
// cursor alone, with the lease expiry when its live lease holds it.
func (ps *partState) queueStatus(off uint64, now int64) (string, int64) {
	switch qm := ps.qm; {
	case qm == nil:
		return StatusPending, 0
	case qm.Passed(off):
		return StatusCompleted, 0
	case qm.LeaseLive(now) && off <= qm.LeaseLast:
		return StatusProcessing, qm.LeaseExpiry
	}
	return StatusPending, 0
}

// status applies the rule of queen-api.md 3.12: a dead-letter entry wins;
// then the queue-mode cursor decides if there is one; else the message is
// completed once every named group consumed it.
func (ps *partState) status(off uint64, now int64) (string, int64) {
	if _, ok := ps.dlq[off]; ok {
		return StatusDeadLetter, 0
	}
	if ps.qm != nil {
		return ps.queueStatus(off, now)
	}
	if len(ps.named) > 0 && (off < ps.minNamed || ps.skips && ps.passedByAll(off)) {
		return StatusCompleted, 0
	}
	return StatusPending, 0
}

// passedByAll reports whether every named group passed off.
func (ps *partState) passedByAll(off uint64) bool {
	for _, n := range ps.named {
		if !n.g.Passed(off) {
			return false
		}
	}
	return true
}

// offsets is the inclusive offset range of the partition's stored messages
// that can have the status (all of them for ""), ok false when none can.
// Dead-lettered offsets inside it are excluded by the caller, and so are
// those of another status when ps.skips: a skip range makes messages past
// the slowest position completed too.
func (ps *partState) offsets(status string, now int64) (lo, hi uint64, ok bool) {
	p := ps.p
	if p.Messages == 0 || p.NextOffset <= p.FirstOffset {
		return 0, 0, false
	}
	lo, hi = p.FirstOffset, p.NextOffset-1
	qm := ps.qm
	processing := qm != nil && qm.LeaseLive(now) && qm.LeaseLast >= qm.Next
	below := func(next uint64) { // completed: offsets < next
		if ps.skips {
			return
		}
		if next == 0 {
			hi, ok = 0, false
			return
		}
		hi = min(hi, next-1)
	}
	ok = true
	switch status {
	case "":
	case StatusCompleted:
		switch {
		case qm != nil:
			below(qm.Next)
		case len(ps.named) > 0:
			below(ps.minNamed)
		default:
			return 0, 0, false
		}
	case StatusProcessing:
		if !processing {
			return 0, 0, false
		}
		lo, hi = max(lo, qm.Next), min(hi, qm.LeaseLast)
	case StatusPending:
		switch {
		case processing:
			lo = max(lo, qm.LeaseLast+1)
		case qm != nil:
			lo = max(lo, qm.Next)
		case len(ps.named) > 0:
			lo = max(lo, ps.minNamed)
		}
	default:
		return 0, 0, false
	}
	return lo, hi, ok && lo <= hi
}

func (ps *partState) summary(it *browseItem, now int64) MessageSummary {
	st, exp := ps.status(it.off, now)
	qs, _ := ps.queueStatus(it.off, now)
	s := MessageSummary{
		ID: it.id, TxID: it.txID, PartUUID: ps.p.UUID, Queue: ps.q.Name, Partition: ps.p.Name,
		Namespace: ps.q.Namespace, Task: ps.q.Task, Priority: ps.q.Options.Priority,
		TraceID: it.trace, HasTrace: it.hasTrace, ProducerSub: it.sub, CreatedAt: it.createdAt,
		Status: st, QueueStatus: qs, LeaseExpiresAt: exp, TotalGroups: len(ps.named),
	}
	for _, n := range ps.named {
		if n.g.Passed(it.off) {
			s.ConsumedBy++
		}
	}
	return s
}

// browseItem is one message as a listing keeps it (no payload).
type browseItem struct {
	off       uint64
	id        [16]byte
	createdAt int64
	txID      string
	trace     [16]byte
	hasTrace  bool
	sub       string
}

func itemOf(sm *segments.StoredMessage) browseItem {
	return browseItem{off: sm.Offset, id: sm.ID, createdAt: sm.CreatedAt, txID: sm.TxID,
		trace: sm.TraceID, hasTrace: sm.HasTrace, sub: sm.ProducerSub}
}

// newer orders messages newest first: by commit time, then by id (whose
// sequence is cluster-wide, so it orders messages of one commit time across
// partitions too).
func newer(at int64, id [16]byte, bt int64, bid [16]byte) bool {
	if at != bt {
		return at > bt
	}
	return bytes.Compare(id[:], bid[:]) > 0
}

var maxID = [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// browseCursor walks one partition's messages in [lo, hi] newest first.
// Until its current segment is read it sorts as the newest message the
// segment could hold, so no message of it can be passed over.
type browseCursor struct {
	ps     *partState
	lo, hi uint64
	from   int64
	seg    segments.SegmentInfo
	msgs   []browseItem // the read segment's messages in range, newest first
	read   bool
}

func (c *browseCursor) key() (int64, [16]byte) {
	if !c.read {
		return c.seg.CreatedAt, maxID
	}
	return c.msgs[0].createdAt, c.msgs[0].id
}

// load reads the current segment.
func (c *browseCursor) load(tx *segments.Tx) {
	c.msgs = c.msgs[:0]
	must(tx.ReadSegment(c.ps.p, c.seg.First, func(sm *segments.StoredMessage) (bool, error) {
		if sm.Offset > c.hi {
			return false, nil
		}
		if sm.Offset >= c.lo {
			c.msgs = append(c.msgs, itemOf(sm))
		}
		return true, nil
	}))
	for i, j := 0, len(c.msgs)-1; i < j; i, j = i+1, j-1 {
		c.msgs[i], c.msgs[j] = c.msgs[j], c.msgs[i]
	}
	c.read = true
}

// older moves to the previous segment; false when the range is exhausted.
func (c *browseCursor) older(tx *segments.Tx) bool {
	if c.seg.First <= c.lo || c.seg.First == 0 {
		return false
	}
	s, ok := must2(tx.SegmentAt(c.ps.p, c.seg.First-1))
	if !ok || s.CreatedAt < c.from || s.First+s.Count <= c.lo {
		return false
	}
	c.seg, c.read, c.msgs = s, false, c.msgs[:0]
	return true
}

type cursorHeap []*browseCursor

func (h cursorHeap) Len() int { return len(h) }
func (h cursorHeap) Less(i, j int) bool {
	at, aid := h[i].key()
	bt, bid := h[j].key()
	if at == bt && aid == bid {
		return h[i].ps.p.ID > h[j].ps.p.ID
	}
	return newer(at, aid, bt, bid)
}
func (h cursorHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *cursorHeap) Push(x any)   { *h = append(*h, x.(*browseCursor)) }
func (h *cursorHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// browseHit is a message a merge emitted.
type browseHit struct {
	ps   *partState
	item browseItem
}

// browse merges the partitions' messages committed in [from, before),
// within each partition's offsets for status, newest first; skips offset
// matches (skip reports messages that do not match), and returns up to
// limit.
func browse(tx *segments.Tx, parts []*partState, status string, now, from, before int64, offset, limit int,
	skip func(*partState, uint64) bool) []browseHit {
	var h cursorHeap
	for _, ps := range parts {
		lo, hi, ok := ps.offsets(status, now)
		if !ok || ps.p.LastCreatedAt < from {
			continue
		}
		seg, ok := must2(tx.LastSegmentBefore(ps.p, hi, before))
		if !ok || seg.CreatedAt < from || seg.First+seg.Count <= lo {
			continue
		}
		h = append(h, &browseCursor{ps: ps, lo: lo, hi: hi, from: from, seg: seg})
	}
	heap.Init(&h)
	var out []browseHit
	for h.Len() > 0 && len(out) < limit {
		c := h[0]
		if !c.read {
			c.load(tx)
		} else {
			it := c.msgs[0]
			c.msgs = c.msgs[1:]
			if skip == nil || !skip(c.ps, it.off) {
				if offset > 0 {
					offset--
				} else {
					out = append(out, browseHit{c.ps, it})
				}
			}
		}
		if c.read && len(c.msgs) == 0 && !c.older(tx) {
			heap.Pop(&h)
			continue
		}
		heap.Fix(&h, 0)
	}
	return out
}

// scopeQueues lists the queues a query covers, in name order.
func scopeQueues(tx *segments.Tx, name, namespace, task string) []*segments.Queue {
	match := func(q *segments.Queue) bool {
		return (namespace == "" || q.Namespace == namespace) && (task == "" || q.Task == task)
	}
	if name != "" {
		if q := must1(tx.Queue(name)); q != nil && match(q) {
			return []*segments.Queue{q}
		}
		return nil
	}
	// The tag index holds the matching queues alone, in name order.
	var out []*segments.Queue
	must(tx.ForEachTaggedQueue(namespace, task, "", func(q *segments.Queue) (bool, error) {
		out = append(out, q)
		return true, nil
	}))
	return out
}

// forEachScopePartition visits the queue's partitions (one when name is set).
func forEachScopePartition(tx *segments.Tx, q *segments.Queue, name string, fn func(*segments.Partition)) {
	if name != "" {
		if p := must1(tx.Partition(q.ID, name)); p != nil {
			fn(p)
		}
		return
	}
	must(tx.ForEachPartition(q.ID, "", func(p *segments.Partition) (bool, error) {
		fn(p)
		return true, nil
	}))
}

// windowDeadLetters loads, per partition, the queue's dead-letter entries of
// messages committed in [from, before). A message is dead-lettered after it
// was committed and entries are numbered in failure order, so the walk
// stops at the first entry that failed before from.
func windowDeadLetters(tx *segments.Tx, qid uint64, partition string, from, before int64) map[uint64]map[uint64]*segments.DeadLetterSummary {
	out := map[uint64]map[uint64]*segments.DeadLetterSummary{}
	var pid uint64
	if partition != "" {
		p := must1(tx.Partition(qid, partition))
		if p == nil {
			return out
		}
		pid = p.ID
	}
	must(tx.ForEachDeadLetterSummary(qid, func(d *segments.DeadLetterSummary) (bool, error) {
		if d.FailedAt < from {
			return false, nil
		}
		if d.CreatedAt < from || d.CreatedAt >= before || (pid != 0 && d.PartitionID != pid) {
			return true, nil
		}
		m := out[d.PartitionID]
		if m == nil {
			m = map[uint64]*segments.DeadLetterSummary{}
			out[d.PartitionID] = m
		}
		if _, seen := m[d.Offset]; !seen { // the walk is newest first
			m[d.Offset] = d
		}
		return true, nil
	}))
	return out
}

// stored reports whether the message at off is still stored.
func stored(tx *segments.Tx, p *segments.Partition, off uint64) bool {
	if off < p.FirstOffset || off >= p.NextOffset {
		return false
	}
	s, ok := must2(tx.SegmentAt(p, off))
	return ok && off < s.First+s.Count
}

// ListMessages lists messages newest first (queen-api.md 3.12).
func (f *FSM) ListMessages(q MessageQuery, now int64) (*MessageList, error) {
	q.Limit = min(max(q.Limit, 0), MaxBrowseLimit)
	q.Offset = min(max(q.Offset, 0), MaxBrowseOffset)
	out := &MessageList{Messages: []MessageSummary{}}
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		bus := map[string]struct{}{}
		var parts []*partState
		for _, qu := range scopeQueues(tx, q.Queue, q.Namespace, q.Task) {
			dlq := windowDeadLetters(tx, qu.ID, q.Partition, q.From, q.Before)
			forEachScopePartition(tx, qu, q.Partition, func(p *segments.Partition) {
				ps := loadPartState(tx, qu, p)
				out.Mode.HasQueueMode = out.Mode.HasQueueMode || ps.qm != nil
				for _, n := range ps.named {
					bus[n.name] = struct{}{}
				}
				ps.dlq = dlq[p.ID]
				// Keep only partitions with something in the window, so
				// memory follows the window, not the queue.
				if p.Messages > 0 && p.LastCreatedAt >= q.From || len(ps.dlq) > 0 {
					parts = append(parts, ps)
				}
			})
		}
		out.Mode.BusGroups = len(bus)
		var hits []browseHit
		if q.Status == StatusDeadLetter {
			hits = deadLetterHits(tx, parts, q.Offset, q.Limit)
		} else {
			var skip func(*partState, uint64) bool
			if q.Status != "" {
				skip = func(ps *partState, off uint64) bool {
					if _, dead := ps.dlq[off]; dead {
						return true
					}
					if !ps.skips {
						return false // offsets bounded the status exactly
					}
					st, _ := ps.status(off, now)
					return st != q.Status
				}
			}
			hits = browse(tx, parts, q.Status, now, q.From, q.Before, q.Offset, q.Limit, skip)
		}
		for i := range hits {
			out.Messages = append(out.Messages, hits[i].ps.summary(&hits[i].item, now))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list messages: %w", err)
	}
	return out, nil
}

// deadLetterHits pages the dead-lettered messages still stored, newest
// first. The entries carry what a listing shows, so no blob is read.
func deadLetterHits(tx *segments.Tx, parts []*partState, offset, limit int) []browseHit {
	var all []browseHit
	for _, ps := range parts {
		for off, d := range ps.dlq {
			if stored(tx, ps.p, off) {
				all = append(all, browseHit{ps, browseItem{off: off, id: d.MessageID, createdAt: d.CreatedAt,
					txID: d.TxID, trace: d.TraceID, hasTrace: d.HasTrace, sub: d.ProducerSub}})
			}
		}
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := &all[i].item, &all[j].item
		return newer(a.createdAt, a.id, b.createdAt, b.id)
	})
	if offset >= len(all) {
		return nil
	}
	all = all[offset:]
	return all[:min(limit, len(all))]
}

// QueueMessages lists a queue's messages newest first with their status for
// the queue-mode cursor (queen-api.md 3.14); ok is false when the queue does
// not exist.
func (f *FSM) QueueMessages(queue string, limit, offset int, now int64) (out []MessageSummary, ok bool, err error) {
	limit = min(max(limit, 0), MaxBrowseLimit)
	offset = min(max(offset, 0), MaxBrowseOffset)
	out = []MessageSummary{}
	err = f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		q := must1(tx.Queue(queue))
		if q == nil {
			return nil
		}
		ok = true
		var parts []*partState
		forEachScopePartition(tx, q, "", func(p *segments.Partition) {
			if p.Messages > 0 {
				parts = append(parts, loadPartState(tx, q, p))
			}
		})
		for _, h := range browse(tx, parts, "", now, 0, math.MaxInt64, offset, limit, nil) {
			s := h.ps.summary(&h.item, now)
			s.Status = s.QueueStatus
			out = append(out, s)
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("queue messages of %q: %w", queue, err)
	}
	return out, ok, nil
}

// GroupOnMessage is one consumer group's view of one message.
type GroupOnMessage struct {
	Name     string
	Consumed bool
	// LeaseExpiresAt is the expiry of the group's live lease when it holds
	// the message, else 0.
	LeaseExpiresAt int64
}

// MessageDetail is one message with its payload (queen-api.md 3.12).
type MessageDetail struct {
	MessageSummary
	Payload   []byte
	Encrypted bool
	Options   Options
	// Error and RetryCount come from the message's newest dead-letter
	// entry, when HasDeadLetter.
	HasDeadLetter bool
	Error         string
	RetryCount    uint64
	Mode          BrowseMode
	Groups        []GroupOnMessage // in name order
}

// Message returns the message with the transaction id in the partition
// (its newest occurrence), or nil.
func (f *FSM) Message(partition [16]byte, txID string, now int64) (*MessageDetail, error) {
	var out *MessageDetail
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		p := must1(tx.PartitionByUUID(partition))
		if p == nil {
			return nil
		}
		q := must1(tx.QueueByID(p.QueueID))
		if q == nil {
			return nil
		}
		off, found := must2(tx.TxIDOffset(q.ID, p.ID, txID))
		if !found {
			return nil
		}
		sm := must1(tx.MessageAt(p, off))
		if sm == nil {
			return nil
		}
		ps := loadPartState(tx, q, p)
		d := &MessageDetail{Payload: sm.Payload, Encrypted: sm.Encrypted, Options: q.Options}
		must(tx.ForEachDeadLetterSummary(q.ID, func(e *segments.DeadLetterSummary) (bool, error) {
			if e.FailedAt < sm.CreatedAt {
				return false, nil
			}
			if e.PartitionID == p.ID && e.Offset == off {
				d.HasDeadLetter, d.Error, d.RetryCount = true, e.Error, e.RetryCount
				ps.dlq = map[uint64]*segments.DeadLetterSummary{off: e}
				return false, nil
			}
			return true, nil
		}))
		it := itemOf(sm)
		d.MessageSummary = ps.summary(&it, now)
		d.Mode = BrowseMode{HasQueueMode: ps.qm != nil, BusGroups: len(ps.named), ConsumedBy: d.ConsumedBy}
		must(tx.ForEachGroup(p.ID, func(name string, g *segments.Group) (bool, error) {
			gm := GroupOnMessage{Name: name, Consumed: g.Passed(off)}
			if !gm.Consumed && g.LeaseLive(now) && off <= g.LeaseLast {
				gm.LeaseExpiresAt = g.LeaseExpiry
			}
			d.Groups = append(d.Groups, gm)
			return true, nil
		}))
		out = d
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read message: %w", err)
	}
	return out, nil
}
