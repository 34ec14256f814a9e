package fsm

import (
	"fmt"
	"strings"

	"github.com/crownmq/crown/segments"
)

// Read views of the OJS surface. Like the other views they read the local
// state; the OJS handlers run a read barrier first (ojs-queues.md 0.3).

// popBlocked reports whether the OJS rules close q to a pop by principal at
// now (paused, deleting, max_concurrency reached), and whether the access
// list refuses it. wake receives the earliest lease expiry that may reopen it.
// room is how many more partitions max_concurrency lets one pop take from
// q, as popGate computes it (-1: no limit).
func popBlocked(tx *segments.Tx, q *segments.Queue, principal string, now int64, wake func(int64)) (blocked, denied bool, room int64) {
	s := q.OJS
	if !allowed(s.Limits.RestrictConsumers, s.Limits.Consumers, principal) {
		return true, true, 0
	}
	if s.State == segments.OJSPaused || s.Deletion != nil {
		return true, false, 0
	}
	if s.Limits.MaxConcurrency > 0 {
		n, next := liveLeases(tx, q, now)
		if n >= s.Limits.MaxConcurrency {
			wake(next)
			return true, false, 0
		}
		return false, false, s.Limits.MaxConcurrency - n
	}
	return false, false, -1
}

// OJSQueueView is a queue as the OJS API shows it.
type OJSQueueView struct {
	Queue        QueueInfo
	Config       EffectiveConfig
	Depth        uint64 // unconsumed backlog (available + active)
	Available    uint64
	Active       uint64
	Completed    uint64 // consumed by every group and still stored
	DeadLettered uint64
	SizeBytes    uint64
	OldestAt     int64 // commit time of the oldest available message, 0 if none
}

func ojsView(tx *segments.Tx, q *segments.Queue, now int64) OJSQueueView {
	v := OJSQueueView{Queue: *q, Config: effective(tx, q)}
	must(tx.ForEachPartition(q.ID, "", func(p *segments.Partition) (bool, error) {
		backlog := partitionBacklog(tx, p)
		v.Depth += backlog
		v.Completed += p.Messages - backlog
		v.SizeBytes += partitionBacklogBytes(tx, p)
		// The live batches of several groups may overlap (the same
		// messages leased by two groups) or not: a message is active
		// when some group holds it.
		var leased []*segments.Group
		// availFrom is the first offset some group could still be handed:
		// past its cursor and past its live leased batch, if any.
		availFrom, groups := uint64(0), false
		must(tx.ForEachGroup(p.ID, func(_ string, g *segments.Group) (bool, error) {
			from := g.Next
			if g.LeaseLive(now) && g.LeaseLast >= g.Next {
				leased = append(leased, g)
				from = g.LeaseLast + 1
			}
			if g.HasSkip() && from >= g.SkipFrom {
				from = max(from, g.SkipTo)
			}
			if !groups || from < availFrom {
				availFrom = from
			}
			groups = true
			return true, nil
		}))
		if !groups || availFrom < p.FirstOffset {
			availFrom = p.FirstOffset
		}
		active := min(storedIn(tx, p, leasedSpans(leased)), backlog)
		v.Active += active
		if backlog > active {
			v.Available += backlog - active
		}
		if backlog > active && availFrom < p.NextOffset {
			must(tx.Scan(p, availFrom, func(sm *segments.StoredMessage) (bool, error) {
				if v.OldestAt == 0 || sm.CreatedAt < v.OldestAt {
					v.OldestAt = sm.CreatedAt
				}
				return false, nil
			}))
		}
		return true, nil
	}))
	v.DeadLettered = tx.DeadLetterCount(q.ID)
	return v
}

// OJSQueue returns the OJS view of one queue, or nil.
func (f *FSM) OJSQueue(name string, now int64) (*OJSQueueView, error) {
	var out *OJSQueueView
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		if q := must1(tx.Queue(name)); q != nil {
			v := ojsView(tx, q, now)
			out = &v
		}
		return nil
	})
	return out, err
}

// OJSQueues lists every queue in name-byte order, filtered by keep (which
// sees the record before the counts are computed).
func (f *FSM) OJSQueues(now int64, keep func(*QueueInfo) bool) ([]OJSQueueView, error) {
	var out []OJSQueueView
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		return tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
			if keep == nil || keep(q) {
				out = append(out, ojsView(tx, q, now))
			}
			return true, nil
		})
	})
	return out, err
}

// OJSQueuePage lists the queues whose names start with prefix and that
// keep accepts (nil: all), in name order, and builds the views of only
// those from start to end, which page picks knowing their names. Without
// keep the names are read from the keys alone, and only the page's
// records are decoded and viewed (a view walks the queue's partitions and
// groups): a page of 50 over 10,000 queues no longer pays for all of them.
func (f *FSM) OJSQueuePage(now int64, prefix string, keep func(*QueueInfo) bool, page func(names []string) (start, end int)) (total int, views []OJSQueueView, err error) {
	err = f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		var names []string
		if keep == nil {
			tx.ForEachQueueName(prefix, func(name string) bool {
				names = append(names, name)
				return true
			})
		} else if err := tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
			if strings.HasPrefix(q.Name, prefix) && keep(q) {
				names = append(names, q.Name)
			}
			return true, nil
		}); err != nil {
			return err
		}
		total = len(names)
		start, end := page(names)
		start, end = max(0, min(start, total)), max(0, min(end, total))
		for _, name := range names[start:max(start, end)] {
			q := must1(tx.Queue(name))
			if q == nil {
				return fmt.Errorf("queue %q listed but not found: %w", name, segments.ErrCorrupt)
			}
			views = append(views, ojsView(tx, q, now))
		}
		return nil
	})
	return total, views, err
}

// Policies lists the named policies in name order, and the _default policy
// (nil when never set).
func (f *FSM) Policies() (named []Policy, def *Policy, err error) {
	err = f.View(func(tx *segments.Tx) error {
		return tx.ForEachPolicy(func(p *segments.Policy) (bool, error) {
			if p.Name == DefaultPolicyName {
				def = p
			} else {
				named = append(named, *p)
			}
			return true, nil
		})
	})
	return named, def, err
}

// DefaultEffective resolves the system defaults under the _default policy,
// as the OJS API shows them for an OJS-born queue.
func (f *FSM) DefaultEffective() (EffectiveConfig, error) {
	var e EffectiveConfig
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		q := &segments.Queue{Origin: segments.OriginOJS, Options: DefaultOptionsOJS(), OJS: &segments.OJSState{}}
		resolve(tx, q)
		e = effective(tx, q)
		return nil
	})
	return e, err
}

// QueueEvents lists up to limit events numbered above after that keep
// accepts, oldest first, and whether more follow.
func (f *FSM) QueueEvents(after uint64, limit int, keep func(*QueueEvent) bool) (out []QueueEvent, more bool, err error) {
	err = f.View(func(tx *segments.Tx) error {
		return tx.ForEachQueueEvent(after, func(e *segments.QueueEvent) (bool, error) {
			if keep != nil && !keep(e) {
				return true, nil
			}
			if len(out) == limit {
				more = true
				return false, nil
			}
			out = append(out, *e)
			return true, nil
		})
	})
	return out, more, err
}

// OJSCounters reads the lifetime counts of created and deleted queues and
// of capacity refusals.
func (f *FSM) OJSCounters() (created, deleted, overflow uint64, err error) {
	err = f.View(func(tx *segments.Tx) error {
		v := tx.Setting(ojsCountersKey)
		get := func(i int) uint64 {
			if len(v) < (i+1)*8 {
				return 0
			}
			var n uint64
			for _, b := range v[i*8 : i*8+8] {
				n = n<<8 | uint64(b)
			}
			return n
		}
		created, deleted, overflow = get(ojsCreated), get(ojsDeleted), get(ojsOverflow)
		return nil
	})
	return
}

// OJSSweepTargets lists, in name order, the queues the leader's OJS sweep
// must visit: draining ones (to finish) and those with dead-letter caps.
func (f *FSM) OJSSweepTargets() ([]string, error) {
	var out []string
	err := f.View(func(tx *segments.Tx) error {
		return tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
			if s := q.OJS; s != nil && (s.State == segments.OJSDraining || s.Limits.DLQMaxAge > 0 || s.Limits.DLQMaxCount > 0) {
				out = append(out, q.Name)
			}
			return true, nil
		})
	})
	return out, err
}
