package fsm

import (
	"github.com/crownmq/crown/segments"
)

// adminPartitions lists a queue's partitions in name order. Callers collect
// before they write: a bbolt cursor must not walk a bucket being modified.
func adminPartitions(tx *segments.Tx, qid uint64) []*segments.Partition {
	var out []*segments.Partition
	must(tx.ForEachPartition(qid, "", func(p *segments.Partition) (bool, error) {
		out = append(out, p)
		return true, nil
	}))
	return out
}

func applyDeleteGroup(a *applier, c *DeleteGroup) any {
	res := &DeleteGroupResult{}
	var queues []*segments.Queue
	if c.OneQueue {
		if q := must1(a.tx.Queue(c.Queue)); q != nil {
			queues = append(queues, q)
		}
	} else {
		must(a.tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
			queues = append(queues, q)
			return true, nil
		}))
	}
	for _, q := range queues {
		n := uint64(0)
		for _, p := range adminPartitions(a.tx, q.ID) {
			if must1(a.tx.DeleteGroupState(p.ID, c.Group)) {
				n++
			}
		}
		// The round-robin pointer is the group's state on the queue too;
		// without it the group is unknown to the queue's listings.
		if must1(a.tx.QueueGroup(q.ID, c.Group)) != nil {
			must(a.tx.DeleteQueueGroup(q.ID, c.Group))
		}
		if n > 0 {
			res.Partitions += n
			// A position reset can make messages deliverable again, and a
			// released lease frees its partition.
			a.events.touch(q.Name)
		}
	}
	if !c.OneQueue {
		// Its round-robin pointers across the queues of discovery scopes:
		// they name queues rather than belong to one, so deleting the group
		// on one queue leaves them, like its discovery subscriptions.
		must(a.tx.DeleteDiscoveryFrom(c.Group))
	}
	if c.DeleteMetadata {
		// Records are keyed by names, not ids, so those naming a deleted
		// (or not yet created) queue go too.
		var doomed [][]byte
		must(a.tx.ForEachSubscription(c.Group, func(key []byte, _ *segments.Subscription) (bool, error) {
			if c.OneQueue {
				scope := must1(segments.ParseSubKey(key))
				// Discovery records cover every queue with their tags:
				// deleting the group on one queue leaves them alone.
				if scope.Kind == segments.SubDiscovery || scope.A != c.Queue {
					return true, nil
				}
			}
			doomed = append(doomed, key)
			return true, nil
		}))
		for _, k := range doomed {
			must(a.tx.DeleteSubscription(k))
		}
		res.Subscriptions = uint64(len(doomed))
	}
	return res
}

func applyRewriteSubscription(a *applier, c *RewriteSubscription) any {
	type rec struct {
		key []byte
		s   *segments.Subscription
	}
	var recs []rec
	must(a.tx.ForEachSubscription(c.Group, func(key []byte, s *segments.Subscription) (bool, error) {
		recs = append(recs, rec{key, s})
		return true, nil
	}))
	for _, r := range recs {
		r.s.Start = c.Start
		must(a.tx.PutSubscription(r.key, r.s))
		// An earlier start can make messages deliverable to a parked pop of
		// the group on a partition it has not read yet.
		scope := must1(segments.ParseSubKey(r.key))
		if scope.Kind == segments.SubDiscovery {
			a.events.All = true
		} else {
			a.events.touch(scope.A)
		}
	}
	return &RewriteSubscriptionResult{Updated: uint64(len(recs))}
}

func applySeek(a *applier, c *Seek) any {
	res := &SeekResult{}
	q := must1(a.tx.Queue(c.Queue))
	if q == nil {
		return res
	}
	for _, p := range adminPartitions(a.tx, q.ID) {
		g := must1(a.tx.Group(p.ID, c.Group))
		if g == nil {
			// No state: the group starts here per its subscription (4.20).
			continue
		}
		releaseForSeek(a, p, c.Group, g)
		if c.ToEnd {
			g.Next = p.NextOffset
		} else {
			g.Next = firstAfter(a.tx, p, c.Timestamp)
		}
		// A range an OJS purge removed for the group stays removed: a
		// seek before it reads up to it, then past it.
		g.PassSkipped()
		must(a.tx.PutGroup(p.ID, c.Group, g))
		res.Partitions++
	}
	if res.Partitions > 0 {
		a.events.touch(q.Name)
	}
	return res
}

func applySeekPartition(a *applier, c *SeekPartition) any {
	q := must1(a.tx.Queue(c.Queue))
	if q == nil {
		return &SeekPartitionResult{}
	}
	p := must1(a.tx.Partition(q.ID, c.Partition))
	if p == nil {
		return &SeekPartitionResult{}
	}
	g := must1(a.tx.Group(p.ID, c.Group))
	if g == nil {
		g = &segments.Group{}
		a.touchQueueGroup(q.ID, c.Group, nil)
	} else {
		releaseForSeek(a, p, c.Group, g)
	}
	g.Next = p.NextOffset
	g.PassSkipped()
	must(a.tx.PutGroup(p.ID, c.Group, g))
	a.events.touch(q.Name)
	return &SeekPartitionResult{Found: true, MovedTo: p.LastCreatedAt}
}

// releaseForSeek ends the group's lease and batch on the partition: the
// delivered messages are no longer what the position says is next, so acks
// of them must not move the new position. The retry counter is kept (4.20).
func releaseForSeek(a *applier, p *segments.Partition, group string, g *segments.Group) {
	if g.HasLease() {
		must(a.tx.UnindexLease(g.LeaseID, p.ID, group))
	}
	g.EndBatch()
}

// firstAfter is the first offset whose commit time is after t: the position
// just after the last message created at or before t, or the oldest stored
// offset when no stored message is that old. Commit times only grow along a
// partition, so the walk from the newest end stops at the first segment at
// or before t.
func firstAfter(tx *segments.Tx, p *segments.Partition, t int64) uint64 {
	if p.Messages == 0 || p.LastCreatedAt <= t {
		return p.NextOffset
	}
	pos := p.FirstOffset
	must(tx.SegmentsReverse(p, func(si segments.SegmentInfo) (bool, error) {
		if si.CreatedAt <= t {
			pos = si.First + si.Count
			return false, nil
		}
		return true, nil
	}))
	return pos
}
