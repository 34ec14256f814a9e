package fsm

import (
	"sort"

	"github.com/crownmq/crown/segments"
)

// Read views of consumer groups for the administration endpoints
// (queen-api.md 3.15). Lag is computed at the caller's now from stored
// commit times; nothing is cached, so there are no statistics to refresh.

// Group states in listings.
const (
	GroupStable  = "Stable"
	GroupLagging = "Lagging"
	GroupDead    = "Dead"
)

// LaggingAfterSeconds is the time lag past which a group is Lagging on a queue.
const LaggingAfterSeconds = 300

// SubscriptionInfo is a subscription record.
type SubscriptionInfo = segments.Subscription

// GroupPartitionState is a consumer group's standing on one partition.
type GroupPartitionState struct {
	Queue          string
	Partition      string
	PartitionID    [16]byte
	Consumed       uint64
	LastConsumedAt int64 // unix µs, 0 if never
	// OffsetLag counts the stored messages after the group's position;
	// OldestUnconsumed is the commit time of the first of them (0 when
	// none) and TimeLag its age in whole seconds.
	OffsetLag        uint64
	OldestUnconsumed int64
	TimeLag          int64
	LeaseActive      bool
}

// GroupQueueSummary is one (group, queue) row of the group listing.
type GroupQueueSummary struct {
	Group             string
	Queue             string
	Members           int   // partitions where the group has state
	PartitionsWithLag int   // of those, partitions with messages after the position
	MaxTimeLag        int64 // seconds, the largest TimeLag among them
	State             string
	// Subscription is the record that decides where the group starts on
	// the queue's unread partitions, nil when none (mode "all", queue mode).
	Subscription *SubscriptionInfo
}

// GroupQueueDetail is a group's state on one queue, partitions in name order.
type GroupQueueDetail struct {
	Queue      string
	Partitions []GroupPartitionState
}

// groupPartitionState measures g on p at now.
func groupPartitionState(tx *segments.Tx, q *segments.Queue, p *segments.Partition, g *segments.Group, now int64) GroupPartitionState {
	st := GroupPartitionState{Queue: q.Name, Partition: p.Name, PartitionID: p.UUID, Consumed: g.Consumed,
		LastConsumedAt: g.LastConsumedAt, LeaseActive: g.LeaseLive(now)}
	st.OffsetLag, st.OldestUnconsumed, st.TimeLag = cursorLag(tx, p, g.Next, now)
	if g.HasSkip() {
		// What an OJS purge removed for the group and other groups' live
		// batches still hold is not the group's to consume.
		st.OffsetLag -= min(st.OffsetLag, storedBetween(tx, p, max(g.Next, g.SkipFrom), g.SkipTo))
	}
	return st
}

// cursorLag measures a cursor whose next offset is next on p: the stored
// messages at or after it, the commit time of the first of them (0 when
// none), and that message's age in whole seconds at now.
func cursorLag(tx *segments.Tx, p *segments.Partition, next uint64, now int64) (lag uint64, oldest, ageSeconds int64) {
	start := max(next, p.FirstOffset)
	if p.Messages == 0 || start >= p.NextOffset {
		return 0, 0, 0
	}
	// Offsets are contiguous unless an OJS purge removed segments from the
	// middle; only then are the remaining ranges counted.
	contiguous := p.NextOffset-p.FirstOffset == p.Messages
	if contiguous {
		lag = p.NextOffset - start
	}
	must(tx.ScanRanges(p, start, func(first, end uint64, createdAt int64) (bool, error) {
		if oldest == 0 {
			oldest = createdAt
		}
		if !contiguous {
			lag += end - first
		}
		return !contiguous, nil
	}))
	if lag > 0 && now > oldest {
		ageSeconds = (now - oldest) / 1e6
	}
	return lag, oldest, ageSeconds
}

// storedBetween counts p's stored messages with offsets in [from, to).
// Offsets are contiguous unless messages were cut out of the middle (an OJS
// purge, a message DELETE); only then are the stored ranges walked, which
// reads segment references, never a blob. Counts kept with the positions
// (consumed, completed, processing, purged) use it so that a gap is never
// counted as a message.
func storedBetween(tx *segments.Tx, p *segments.Partition, from, to uint64) uint64 {
	from, to = max(from, p.FirstOffset), min(to, p.NextOffset)
	if p.Messages == 0 || from >= to {
		return 0
	}
	if p.NextOffset-p.FirstOffset == p.Messages {
		return to - from
	}
	var n uint64
	must(tx.ScanRanges(p, from, func(first, end uint64, _ int64) (bool, error) {
		if first >= to {
			return false, nil
		}
		n += min(end, to) - first
		return true, nil
	}))
	return n
}

// everConsumed reports whether the group's state records any consumption.
func everConsumed(g *segments.Group) bool {
	return g.Consumed > 0 || g.Batches > 0 || g.LastConsumedAt > 0
}

// groupSubs indexes subscription records by group.
type groupSubs map[string][]subRecord

type subRecord struct {
	scope segments.SubScope
	sub   *segments.Subscription
}

func loadGroupSubs(tx *segments.Tx, group string, all bool) groupSubs {
	out := groupSubs{}
	add := func(scope segments.SubScope, s *segments.Subscription) (bool, error) {
		out[scope.Group] = append(out[scope.Group], subRecord{scope, s})
		return true, nil
	}
	if all {
		must(tx.ForEachSubscriptionRecord(add))
	} else {
		must(tx.ForEachSubscription(group, func(key []byte, s *segments.Subscription) (bool, error) {
			return add(must1(segments.ParseSubKey(key)), s)
		}))
	}
	return out
}

// forQueue picks the record that describes the group's subscription on q:
// the queue's own, else a discovery record matching its tags (most specific
// first, as initialPosition does), else the first partition record of q.
func (gs groupSubs) forQueue(group string, q *segments.Queue) *segments.Subscription {
	recs := gs[group]
	find := func(kind byte, a, b string) *segments.Subscription {
		for _, r := range recs {
			if r.scope.Kind == kind && r.scope.A == a && r.scope.B == b {
				return r.sub
			}
		}
		return nil
	}
	if s := find(segments.SubQueue, q.Name, ""); s != nil {
		return s
	}
	for _, tags := range [][2]string{{q.Namespace, q.Task}, {q.Namespace, ""}, {"", q.Task}} {
		if s := find(segments.SubDiscovery, tags[0], tags[1]); s != nil {
			return s
		}
	}
	for _, r := range recs {
		if r.scope.Kind == segments.SubPartition && r.scope.A == q.Name {
			return r.sub
		}
	}
	return nil
}

// namesQueue reports whether a record is scoped to a queue by name.
func (r subRecord) namesQueue() bool {
	return r.scope.Kind == segments.SubQueue || r.scope.Kind == segments.SubPartition
}

// ConsumerGroups lists every (group, queue) pair a group has touched, by
// state on a partition or by a subscription record naming the queue, sorted
// by group then queue.
func (f *FSM) ConsumerGroups(now int64) ([]GroupQueueSummary, error) {
	var out []GroupQueueSummary
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		subs := loadGroupSubs(tx, "", true)
		must(tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
			rows := map[string]*GroupQueueSummary{}
			consumed := map[string]bool{}
			row := func(group string) *GroupQueueSummary {
				r := rows[group]
				if r == nil {
					r = &GroupQueueSummary{Group: group, Queue: q.Name}
					rows[group] = r
				}
				return r
			}
			must(tx.ForEachPartition(q.ID, "", func(p *segments.Partition) (bool, error) {
				return true, tx.ForEachGroup(p.ID, func(name string, g *segments.Group) (bool, error) {
					st := groupPartitionState(tx, q, p, g, now)
					r := row(name)
					r.Members++
					if st.OffsetLag > 0 {
						r.PartitionsWithLag++
						r.MaxTimeLag = max(r.MaxTimeLag, st.TimeLag)
					}
					consumed[name] = consumed[name] || everConsumed(g)
					return true, nil
				})
			}))
			must(tx.ForEachQueueGroup(q.ID, func(group string, _ *segments.QueueGroup) (bool, error) {
				row(group)
				return true, nil
			}))
			for group, recs := range subs {
				for _, rec := range recs {
					if rec.namesQueue() && rec.scope.A == q.Name {
						row(group)
						break
					}
				}
			}
			for group, r := range rows {
				switch {
				case r.MaxTimeLag > LaggingAfterSeconds:
					r.State = GroupLagging
				case consumed[group]:
					r.State = GroupStable
				default:
					r.State = GroupDead
				}
				r.Subscription = subs.forQueue(group, q)
				out = append(out, *r)
			}
			return true, nil
		}))
		return nil
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].Queue < out[j].Queue
	})
	return out, err
}

// ConsumerGroup describes one group on every queue it has touched, in queue
// name order; nil for a group no queue knows.
func (f *FSM) ConsumerGroup(group string, now int64) ([]GroupQueueDetail, error) {
	var out []GroupQueueDetail
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		subs := loadGroupSubs(tx, group, false)
		return tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
			d := GroupQueueDetail{Queue: q.Name, Partitions: []GroupPartitionState{}}
			touched := must1(tx.QueueGroup(q.ID, group)) != nil
			for _, rec := range subs[group] {
				touched = touched || (rec.namesQueue() && rec.scope.A == q.Name)
			}
			for _, p := range adminPartitions(tx, q.ID) {
				if g := must1(tx.Group(p.ID, group)); g != nil {
					d.Partitions = append(d.Partitions, groupPartitionState(tx, q, p, g, now))
				}
			}
			if touched || len(d.Partitions) > 0 {
				out = append(out, d)
			}
			return true, nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out, err
}

// LaggingPartition is a (group, partition) whose oldest unconsumed message
// is at least the asked age.
type LaggingPartition struct {
	Group string
	GroupPartitionState
}

// LaggingPartitions lists the (group, partition) pairs with state whose
// oldest unconsumed message is at least minLagSeconds old at now, most
// lagging first (then by group, queue and partition).
func (f *FSM) LaggingPartitions(minLagSeconds, now int64) ([]LaggingPartition, error) {
	var out []LaggingPartition
	minLag := Micros(minLagSeconds)
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		return tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
			return true, tx.ForEachPartition(q.ID, "", func(p *segments.Partition) (bool, error) {
				if p.Messages == 0 {
					return true, nil
				}
				return true, tx.ForEachGroup(p.ID, func(name string, g *segments.Group) (bool, error) {
					st := groupPartitionState(tx, q, p, g, now)
					if st.OffsetLag > 0 && now-st.OldestUnconsumed >= minLag {
						out = append(out, LaggingPartition{Group: name, GroupPartitionState: st})
					}
					return true, nil
				})
			})
		})
	})
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case a.OldestUnconsumed != b.OldestUnconsumed:
			return a.OldestUnconsumed < b.OldestUnconsumed
		case a.Group != b.Group:
			return a.Group < b.Group
		case a.Queue != b.Queue:
			return a.Queue < b.Queue
		}
		return a.Partition < b.Partition
	})
	return out, err
}
