package fsm

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/crownmq/crown/segments"
)

// Read views for the HTTP layer. They read the local state (whatever this
// node has applied) and never write.

// Aliases so that readers need not import the storage package.
type (
	Options    = segments.Options
	QueueInfo  = segments.Queue
	NodeInfo   = segments.Node
	DeadLetter = segments.DeadLetter
)

// PopCheck tells a pop handler whether proposing a pop is worthwhile.
type PopCheck struct {
	// Deliverable counts messages a pop could take now, up to its batch.
	Deliverable uint32
	// NeedsRecord is set when the pop is a named group's first contact
	// with a subscription to record, which a pop must store even when it
	// delivers nothing.
	NeedsRecord bool
	// WakeAt is the earliest unix µs at which something may become
	// deliverable without a new push (lease expiry, delay, window); 0 if none.
	WakeAt int64
	// MinPopWait is the largest minPopWaitTime (ms) of the queues the check
	// walked: the named queue, or for a discovery pop the queues it reaches
	// in its round-robin order before it stops, the ones it would take from.
	MinPopWait int64
	// Denied is set when an access.consumers list refuses the principal.
	Denied bool
	// Maintenance is set while pop maintenance is on (queen-api.md 3.17):
	// every pop answers 204 at once, and nothing else was checked.
	Maintenance bool
	// Encrypted is set when a queue the check walked has encryptionEnabled: a node
	// without the key refuses a pop naming such a queue before leasing.
	Encrypted bool
}

// CheckPop evaluates a pop against the local state at now without changing
// it. It stops at the first deliverable message unless count is set and a
// queue in scope has minPopWaitTime, in which case it counts up to the
// pop's batch (the fill-wait decision needs the number).
func (f *FSM) CheckPop(c *Lease, now int64, count bool) (PopCheck, error) {
	return f.CheckPopAs(c, "", now, count)
}

// CheckPopAs is CheckPop for a pop by principal: queues the OJS rules close
// to it (paused, deleting, max_concurrency reached) count as empty, and
// Denied is set when an access list refuses it (docs/queues.md).
func (f *FSM) CheckPopAs(c *Lease, principal string, now int64, count bool) (PopCheck, error) {
	if c.Scope != ScopeDiscovery {
		// Most looks find a message within a few partitions: read them
		// as applied, in the write transaction a deferred commit left
		// open, rather than commit it for a read view once a pop, which
		// undid the deferral for every consume (fsm/DESIGN.md). The
		// look holds off apply meanwhile, so a long one (nothing to
		// take over many partitions) gives up and reads a committed view.
		pc, inTx, err := f.checkPop(f.viewLatest, c, principal, now, count)
		if !errors.Is(err, errLongCheck) {
			f.looks.count(inTx)
			return pc, err
		}
		f.looks.gaveUp.Add(1)
		pc, _, err = f.checkPop(f.View, c, principal, now, count)
		return pc, err
	}
	pc, _, err := f.checkPop(f.View, c, principal, now, count)
	f.looks.count(false)
	return pc, err
}

// popLooks counts how this node's pop looks read the state (PopLooks);
// it is not part of the state.
type popLooks struct {
	openTx, view, gaveUp atomic.Uint64
}

func (l *popLooks) count(inTx bool) {
	if inTx {
		l.openTx.Add(1)
	} else {
		l.view.Add(1)
	}
}

// PopLooks counts, since this node started, how pops' looks (CheckPopAs)
// read the state. Many looks giving up means pops scanning many partitions
// with nothing to take, each of which commits the state file first.
type PopLooks struct {
	// OpenTx read inside the write transaction a deferred commit left open.
	OpenTx uint64
	// View read a committed view: no transaction was open, or the pop was a
	// discovery pop.
	View uint64
	// GaveUp read checkInOpenTx partitions inside the open transaction,
	// then a committed view (counted here, not in View).
	GaveUp uint64
}

// PopLooks reports how this node's pop looks have read the state.
func (f *FSM) PopLooks() PopLooks {
	return PopLooks{OpenTx: f.looks.openTx.Load(), View: f.looks.view.Load(), GaveUp: f.looks.gaveUp.Load()}
}

// checkInOpenTx is how many partitions a pop's look reads inside the open
// write transaction before it gives up (errLongCheck): apply waits for
// them at most about 0.1 ms (BenchmarkCheckPop/given-up: 69-79 µs on a
// 2-vCPU Xeon).
const checkInOpenTx = 128

// errLongCheck stops a look that reached its partition bound.
var errLongCheck = errors.New("pop check: partition bound reached")

// checkPop is CheckPopAs's look through view, and whether it read a write
// transaction. Inside one it stops with errLongCheck before it reads more
// than checkInOpenTx partitions; a read view, which holds nothing off,
// reads them all.
func (f *FSM) checkPop(view func(func(*segments.Tx) error) error, c *Lease, principal string, now int64, count bool) (pc PopCheck, inTx bool, err error) {
	err = view(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		inTx = tx.Writable()
		bound := checkInOpenTx
		if !inTx {
			bound = 0
		}
		// Read in the same view as the rest: no second transaction per pop.
		if must1(loadSetting(tx, settingPopMaintenance)).On {
			pc.Maintenance = true
			return nil
		}
		if key := firstContactKey(c); key != nil && must1(tx.Subscription(key)) == nil {
			pc.NeedsRecord = true
		}
		limit := func() uint32 {
			if count && pc.MinPopWait > 0 {
				return max(c.Batch, 1)
			}
			return 1
		}
		wake := func(t int64) {
			if t > 0 && (pc.WakeAt == 0 || t < pc.WakeAt) {
				pc.WakeAt = t
			}
		}
		// A pop claims at most maxParts partitions, so the estimate counts
		// what the first maxParts deliverable ones (in the order the pop
		// walks them) hold, not the whole scope.
		maxParts, parts := max(c.MaxPartitions, 1), uint32(0)
		if c.Scope == ScopeSpecific {
			maxParts = 1
		}
		// room is how many more partitions max_concurrency lets the pop
		// take from the queue being walked (-1: no limit): the pop moves on
		// to the next queue once it is used up (popGated), so the count does
		// too.
		blocked, room := false, int64(-1)
		read := 0
		visit := func(q *segments.Queue, part *segments.Partition) bool {
			if read++; bound > 0 && read > bound {
				err = errLongCheck
				return false
			}
			if blocked || room == 0 {
				return true
			}
			e := checkPartition(tx, q, part, c, now)
			if !e.ok {
				wake(e.wakeAt)
				return true
			}
			n, _, delayedAt := e.deliverable(tx, part, limit()-pc.Deliverable, nil)
			pc.Deliverable += n
			if n > 0 {
				parts++
				if room > 0 {
					room--
				}
			}
			switch {
			case delayedAt != 0:
				wake(delayedAt + Micros(q.Options.DelayedProcessing))
			case n == 0 && e.before != 0:
				// Nothing stored before the held burst: it is what
				// becomes deliverable next, when its window ends.
				wake(e.heldUntil)
			}
			return pc.Deliverable < limit() && parts < maxParts
		}
		forEachCandidate(tx, c, func(q *segments.Queue) {
			pc.MinPopWait = max(pc.MinPopWait, q.Options.MinPopWaitTime)
			pc.Encrypted = pc.Encrypted || q.Options.EncryptionEnabled
			blocked, room = false, -1
			if q.OJS != nil && q.OJS.Gate != 0 {
				var denied bool
				blocked, denied, room = popBlocked(tx, q, principal, now, wake)
				pc.Denied = pc.Denied || (denied && c.Scope != ScopeDiscovery)
			}
		}, visit)
		return err
	})
	return pc, inTx, err
}

// forEachCandidate walks the queues and partitions a pop's scope covers
// until part returns false.
func forEachCandidate(tx *segments.Tx, c *Lease, queue func(*segments.Queue), part func(*segments.Queue, *segments.Partition) bool) {
	var single *segments.Queue
	if c.Scope != ScopeDiscovery {
		if single = must1(tx.Queue(c.Queue)); single == nil {
			return
		}
	}
	forEachCandidateQueue(tx, c, single, func(q *segments.Queue) bool {
		queue(q)
		if c.Scope == ScopeSpecific {
			p := must1(tx.Partition(q.ID, c.Partition))
			return p == nil || part(q, p)
		}
		more := true
		forEachPartitionRR(tx, q.ID, c.Group, func(p *segments.Partition) bool {
			more = part(q, p)
			return more
		})
		return more
	})
}

// recoverStorage turns a storage panic raised by must inside a read view
// into an error: a read must not take the node down.
func recoverStorage(err *error) {
	if r := recover(); r != nil {
		if s, ok := r.(storageFailure); ok {
			*err = fmt.Errorf("read the state: %w", s.err)
			return
		}
		if e, ok := r.(error); ok {
			*err = e
			return
		}
		panic(r)
	}
}

// QueueEncryption reports, for each named queue that exists, whether
// encryptionEnabled is set.
func (f *FSM) QueueEncryption(names []string) (map[string]bool, error) {
	out := make(map[string]bool, len(names))
	err := f.viewLatest(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		for _, n := range names {
			if q := must1(tx.Queue(n)); q != nil {
				out[n] = q.Options.EncryptionEnabled
			}
		}
		return nil
	})
	return out, err
}

// Queue returns a queue's record, or nil.
func (f *FSM) Queue(name string) (*QueueInfo, error) {
	var q *segments.Queue
	err := f.View(func(tx *segments.Tx) (err error) {
		q, err = tx.Queue(name)
		return err
	})
	return q, err
}

// MessageStats counts a partition's or queue's messages from the point of
// view of its consumers.
type MessageStats struct {
	Total      uint64
	Pending    uint64
	Processing uint64
	Completed  uint64
	DeadLetter uint64
}

func (s *MessageStats) add(o MessageStats) {
	s.Total += o.Total
	s.Pending += o.Pending
	s.Processing += o.Processing
	s.Completed += o.Completed
	s.DeadLetter += o.DeadLetter
}

// PartitionView describes one partition.
type PartitionView struct {
	ID            [16]byte
	Name          string
	CreatedAt     int64
	Stats         MessageStats
	Oldest        int64 // commit time of the oldest stored message, 0 if none
	Newest        int64 // commit time of the newest message ever pushed, 0 if none
	Consumed      uint64
	Batches       uint64
	LastConsumed  int64
	GroupsWithPos int
}

// QueueView describes a queue and, on request, its partitions.
type QueueView struct {
	Queue          QueueInfo
	PartitionCount int
	Stats          MessageStats
	Partitions     []PartitionView
}

// partitionStats computes a partition's counts at now. With a queue-mode
// cursor, completed and processing follow it; otherwise a message counts as
// completed once every named group consumed it.
func partitionStats(tx *segments.Tx, p *segments.Partition, now int64) (MessageStats, PartitionView) {
	pv := PartitionView{ID: p.UUID, Name: p.Name, CreatedAt: p.CreatedAt}
	st := MessageStats{Total: p.Messages}
	if p.Messages > 0 {
		pv.Newest = p.LastCreatedAt
		must(tx.Segments(p, func(si segments.SegmentInfo) (bool, error) {
			pv.Oldest = si.CreatedAt
			return false, nil
		}))
	}
	// completed counts what every group of gs passed (backlog.go).
	completed := func(gs ...*segments.Group) uint64 {
		return st.Total - min(st.Total, storedUnpassed(tx, p, gs))
	}
	var qm *segments.Group
	var named []*segments.Group
	must(tx.ForEachGroup(p.ID, func(name string, g *segments.Group) (bool, error) {
		pv.GroupsWithPos++
		if name == QueueMode {
			qm = g
		} else {
			named = append(named, g)
		}
		pv.Consumed += g.Consumed
		pv.Batches += g.Batches
		pv.LastConsumed = max(pv.LastConsumed, g.LastConsumedAt)
		return true, nil
	}))
	switch {
	case qm != nil:
		st.Completed = completed(qm)
		if qm.LeaseLive(now) && qm.LeaseLast >= qm.Next {
			st.Processing = min(storedBetween(tx, p, qm.Next, qm.LeaseLast+1), st.Total-st.Completed)
		}
	case len(named) > 0:
		st.Completed = completed(named...)
	}
	st.Pending = st.Total - st.Completed - st.Processing
	return st, pv
}

// QueueView describes one queue, or returns nil when it does not exist.
func (f *FSM) QueueView(name string, now int64, withPartitions bool) (*QueueView, error) {
	var out *QueueView
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		q := must1(tx.Queue(name))
		if q == nil {
			return nil
		}
		out = queueView(tx, q, now, withPartitions)
		return nil
	})
	return out, err
}

func queueView(tx *segments.Tx, q *segments.Queue, now int64, withPartitions bool) *QueueView {
	var parts []PartitionView
	var collect func(*segments.Partition, PartitionView)
	if withPartitions {
		collect = func(_ *segments.Partition, pv PartitionView) { parts = append(parts, pv) }
	}
	v := queueScan(tx, q, now, collect, nil)
	v.Partitions = parts
	return &v
}

// ListQueues lists queues matching the tag filters (empty matches all),
// newest first, then by name, from offset on, at most limit of them (all
// when limit is negative). The order needs only the queues' names and
// creation times, so only the queues of the page are loaded and have their
// statistics computed, which walk every partition: a page of a listing
// over many queues costs little more than the page.
func (f *FSM) ListQueues(namespace, task string, offset, limit int, now int64) ([]QueueView, error) {
	var out []QueueView
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		type head struct {
			name    string
			created int64
		}
		var hs []head
		must(tx.ForEachTaggedQueueHead(namespace, task, func(name string, created int64) bool {
			hs = append(hs, head{name, created})
			return true
		}))
		// In name order already: a stable sort by time keeps it among
		// queues created at the same instant.
		sort.SliceStable(hs, func(i, j int) bool { return hs[i].created > hs[j].created })
		hs = hs[min(max(offset, 0), len(hs)):]
		if limit >= 0 && limit < len(hs) {
			hs = hs[:limit]
		}
		for _, h := range hs {
			q := must1(tx.Queue(h.name))
			if q == nil {
				return fmt.Errorf("queue %q listed but not stored: %w", h.name, segments.ErrCorrupt)
			}
			out = append(out, *queueView(tx, q, now, false))
		}
		return nil
	})
	return out, err
}

// DLQQuery filters dead letters.
type DLQQuery struct {
	Queue     string
	Group     string // "" for all
	Partition string // "" for all
	From, To  int64  // unix µs bounds on the dead-lettering time, 0 = open
	Limit     int
	Offset    int
}

// DeadLetterView is a dead letter with its queue's names.
type DeadLetterView struct {
	DeadLetter
	QueueName string
	Namespace string
	Task      string
	PartUUID  [16]byte
}

// DeadLetters lists dead letters newest first and counts all that match.
func (f *FSM) DeadLetters(q DLQQuery) (out []DeadLetterView, total int, err error) {
	err = f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		var queues []*segments.Queue
		if q.Queue != "" {
			if qu := must1(tx.Queue(q.Queue)); qu != nil {
				queues = append(queues, qu)
			}
		} else {
			must(tx.ForEachQueue(func(qu *segments.Queue) (bool, error) {
				queues = append(queues, qu)
				return true, nil
			}))
		}
		// Newest first across queues (queen-api.md 3.13): the entries'
		// sequence numbers are cluster-wide and grow with failure time, so
		// the matching heads of every queue are sorted by them, and only
		// the page's entries are read whole.
		type hit struct {
			seq uint64
			qu  *segments.Queue
		}
		var hits []hit
		for _, qu := range queues {
			must(tx.ForEachDeadLetterHead(qu.ID, func(d *segments.DeadLetterHead) (bool, error) {
				if (q.Group == "" || d.Group == q.Group) && (q.Partition == "" || d.PartitionName == q.Partition) &&
					(q.From == 0 || d.FailedAt >= q.From) && (q.To == 0 || d.FailedAt <= q.To) {
					hits = append(hits, hit{d.Seq, qu})
				}
				return true, nil
			}))
		}
		if len(queues) > 1 {
			slices.SortFunc(hits, func(a, b hit) int { return cmp.Compare(b.seq, a.seq) })
		}
		total = len(hits)
		lo := min(max(q.Offset, 0), total)
		uuids := map[uint64][16]byte{}
		for _, h := range hits[lo : lo+min(max(q.Limit, 0), total-lo)] { // no lo+Limit: it may overflow
			d := must1(tx.DeadLetterAt(h.qu.ID, h.seq))
			if d == nil {
				return fmt.Errorf("dead letter %d of queue %s vanished inside one read: %w", h.seq, h.qu.Name, segments.ErrCorrupt)
			}
			id, ok := uuids[d.PartitionID]
			if !ok {
				if p := must1(tx.PartitionByID(d.PartitionID)); p != nil {
					id = p.UUID
				}
				uuids[d.PartitionID] = id
			}
			out = append(out, DeadLetterView{DeadLetter: *d, QueueName: h.qu.Name,
				Namespace: h.qu.Namespace, Task: h.qu.Task, PartUUID: id})
		}
		return nil
	})
	return out, total, err
}

// Nodes lists the node registry.
func (f *FSM) Nodes() ([]NodeInfo, error) {
	var out []segments.Node
	err := f.View(func(tx *segments.Tx) (err error) {
		out, err = tx.Nodes()
		return err
	})
	return out, err
}

// Counters reads the cluster-wide lifetime counters.
func (f *FSM) Counters() (Counters, error) {
	var c Counters
	err := f.View(func(tx *segments.Tx) error {
		c = loadCounters(tx)
		return nil
	})
	return c, err
}

// QueueCount is a count for one queue.
type QueueCount struct {
	Queue string
	N     uint64
}

// DeadLetterDepths counts the dead letters of every queue that holds any,
// in name order (a scrape's queen_dlq_depth_by_queue). It walks the keys of
// the dead-letter bucket, decoding nothing.
func (f *FSM) DeadLetterDepths() ([]QueueCount, error) {
	var out []QueueCount
	err := f.View(func(tx *segments.Tx) error {
		return tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
			if n := tx.DeadLetterCount(q.ID); n > 0 {
				out = append(out, QueueCount{Queue: q.Name, N: n})
			}
			return true, nil
		})
	})
	return out, err
}

// SweepTargets lists the queues with at least one deletion rule on, in name order.
func (f *FSM) SweepTargets() ([]string, error) {
	var out []string
	err := f.View(func(tx *segments.Tx) error {
		return tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
			if HasRules(&q.Options) {
				out = append(out, q.Name)
			}
			return true, nil
		})
	})
	return out, err
}
