package fsm

import (
	"fmt"
	"sort"

	"github.com/crownmq/crown/segments"
)

// Resource summaries (queen-api.md 3.11): namespaces, tasks and the system
// overview, computed live from the state, so their age is always zero.

// TagView summarises the queues carrying one namespace or task.
type TagView struct {
	Name       string
	Queues     int
	Partitions int
	Stats      MessageStats
}

// Tags lists the namespaces and the tasks in use (empty tags are not
// listed), each sorted by name.
func (f *FSM) Tags(now int64) (namespaces, tasks []TagView, err error) {
	err = f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		ns, ts := map[string]*TagView{}, map[string]*TagView{}
		add := func(m map[string]*TagView, tag string, v *QueueView) {
			if tag == "" {
				return
			}
			t := m[tag]
			if t == nil {
				t = &TagView{Name: tag}
				m[tag] = t
			}
			t.Queues++
			t.Partitions += v.PartitionCount
			t.Stats.add(v.Stats)
		}
		must(tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
			v := queueScan(tx, q, now, nil, nil)
			add(ns, q.Namespace, &v)
			add(ts, q.Task, &v)
			return true, nil
		}))
		namespaces, tasks = sortedTags(ns), sortedTags(ts)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list tags: %w", err)
	}
	return namespaces, tasks, nil
}

func sortedTags(m map[string]*TagView) []TagView {
	out := make([]TagView, 0, len(m))
	for _, t := range m {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// LagStats summarises one lag figure over the partitions that have a reader.
type LagStats struct {
	Avg    float64
	Median int64
	Min    int64
	Max    int64
}

func lagStats(v []int64) LagStats {
	if len(v) == 0 {
		return LagStats{}
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	var sum float64
	for _, x := range v {
		sum += float64(x)
	}
	// The lower median: an integer, like the other figures.
	return LagStats{Avg: sum / float64(len(v)), Median: v[(len(v)-1)/2], Min: v[0], Max: v[len(v)-1]}
}

// ThroughputWindow is the trailing window over which the overview's ingest
// rate is measured.
const ThroughputWindow = 60 // seconds

// Overview is the system summary of queen-api.md 3.11.
type Overview struct {
	Queues, Partitions, Namespaces, Tasks int
	Stats                                 MessageStats
	Counters                              Counters
	// TimeLag (seconds) and OffsetLag (messages) are taken per partition
	// that has a reader, for the cursor its statuses follow (queue mode,
	// else the slowest named group): how old its oldest unconsumed stored
	// message is, and how many stored messages it has not consumed.
	TimeLag, OffsetLag LagStats
	// IngestedPerSecond is the messages committed in the last
	// ThroughputWindow seconds (still stored) divided by the window.
	IngestedPerSecond float64
}

// Overview computes the system summary at now.
func (f *FSM) Overview(now int64) (*Overview, error) {
	o := &Overview{}
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		o.Counters = loadCounters(tx)
		ns, ts := map[string]bool{}, map[string]bool{}
		var timeLag, offLag []int64
		var ingested uint64
		since := now - ThroughputWindow*1_000_000
		must(tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
			o.Queues++
			if q.Namespace != "" {
				ns[q.Namespace] = true
			}
			if q.Task != "" {
				ts[q.Task] = true
			}
			v := queueScan(tx, q, now, func(p *segments.Partition, _ PartitionView) {
				if lag, age, ok := partitionLag(tx, loadPartState(tx, q, p), now); ok {
					offLag = append(offLag, lag)
					timeLag = append(timeLag, age)
				}
				forEachCommit(tx, p, since+1, now+1, func(_ int64, n uint64) { ingested += n })
			}, nil)
			o.Stats.add(v.Stats)
			o.Partitions += v.PartitionCount
			return true, nil
		}))
		o.Namespaces, o.Tasks = len(ns), len(ts)
		o.TimeLag, o.OffsetLag = lagStats(timeLag), lagStats(offLag)
		o.IngestedPerSecond = float64(ingested) / ThroughputWindow
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("overview: %w", err)
	}
	return o, nil
}

// partitionLag is the offset lag (stored messages not consumed) and time
// lag (seconds since the oldest of them was committed, 0 if none) of the
// cursor the partition's statuses follow; ok is false when nobody reads it.
func partitionLag(tx *segments.Tx, ps *partState, now int64) (lag, age int64, ok bool) {
	next := ps.minNamed
	switch {
	case ps.qm != nil:
		next = ps.qm.Next
	case len(ps.named) == 0:
		return 0, 0, false
	}
	n, _, age := cursorLag(tx, ps.p, next, now)
	return int64(n), age, true
}

// queueScan computes a queue's figures in one pass, calling part (if set)
// with each partition and its figures and dead (if set) with each dead
// letter, newest first. Unlike queueView it reads the dead letters without
// their payloads.
func queueScan(tx *segments.Tx, q *segments.Queue, now int64, part func(*segments.Partition, PartitionView),
	dead func(*segments.DeadLetterSummary)) QueueView {
	v := QueueView{Queue: *q}
	dlq := map[uint64]uint64{}
	must(tx.ForEachDeadLetterSummary(q.ID, func(d *segments.DeadLetterSummary) (bool, error) {
		dlq[d.PartitionID]++
		if dead != nil {
			dead(d)
		}
		return true, nil
	}))
	must(tx.ForEachPartition(q.ID, "", func(p *segments.Partition) (bool, error) {
		st, pv := partitionStats(tx, p, now)
		st.DeadLetter = dlq[p.ID]
		pv.Stats = st
		v.Stats.add(st)
		v.PartitionCount++
		if part != nil {
			part(p, pv)
		}
		return true, nil
	}))
	return v
}

// forEachCommit calls fn with the commit time and stored message count of
// each of the partition's segments committed in [from, before), newest
// first. It reads segment references only, never a blob.
func forEachCommit(tx *segments.Tx, p *segments.Partition, from, before int64, fn func(createdAt int64, n uint64)) {
	forEachCommitFrom(tx, p, from, before, ^uint64(0), false, func(si segments.SegmentInfo) bool {
		fn(si.CreatedAt, si.Count)
		return true
	})
}

// forEachCommitFrom is forEachCommit resumable: with resume set it starts at
// the segment whose first offset is at most maxFirst (where an earlier walk
// stopped), and it stops when fn returns false.
func forEachCommitFrom(tx *segments.Tx, p *segments.Partition, from, before int64, maxFirst uint64, resume bool,
	fn func(segments.SegmentInfo) bool) {
	if p.Messages == 0 || p.LastCreatedAt < from {
		return
	}
	if !resume && p.LastCreatedAt >= before {
		seg, ok := must2(tx.LastSegmentBefore(p, p.NextOffset-1, before))
		if !ok {
			return
		}
		maxFirst = seg.First
	}
	must(tx.SegmentsReverseFrom(p, maxFirst, func(si segments.SegmentInfo) (bool, error) {
		if si.CreatedAt < from || si.CreatedAt >= before {
			return si.CreatedAt >= before, nil // newer than the range: skip; older: done
		}
		return fn(si), nil
	}))
}
