package fsm

import (
	"cmp"
	"slices"

	"github.com/crownmq/crown/segments"
)

// What of a partition is still to be read. A message is consumed by a
// group once the group has passed it (segments.Group.Passed): its position
// is past it, or an OJS purge removed it for the group while the group held
// a live batch before it (the skip range). Nearly always no group holds a
// range, and the backlog is everything stored from the slowest position on;
// with ranges it is a union of spans, which the functions here compute.

// slowest is the smallest position of any group on the partition, or the
// partition's first stored offset when no group has consumed there.
func slowest(tx *segments.Tx, p *segments.Partition) uint64 {
	from, _ := slowestAndSkips(tx, p)
	return from
}

// slowestAndSkips is slowest, and whether any group holds a skip range.
func slowestAndSkips(tx *segments.Tx, p *segments.Partition) (from uint64, skips bool) {
	found := false
	must(tx.ForEachGroup(p.ID, func(_ string, g *segments.Group) (bool, error) {
		if !found || g.Next < from {
			from = g.Next
		}
		found = true
		skips = skips || g.HasSkip()
		return true, nil
	}))
	if !found || from < p.FirstOffset {
		return p.FirstOffset, skips
	}
	return from, skips
}

// unpassed lists, in order and merged, the spans of p's offsets that at
// least one of gs has not passed. Without groups that is everything stored.
func unpassed(p *segments.Partition, gs []*segments.Group) []span {
	if p.NextOffset <= p.FirstOffset {
		return nil
	}
	end := p.NextOffset - 1
	if len(gs) == 0 {
		return []span{{p.FirstOffset, end}}
	}
	var all []span
	add := func(first, last uint64) {
		if first <= last {
			all = append(all, span{first, last})
		}
	}
	for _, g := range gs {
		from := max(g.Next, p.FirstOffset)
		if g.HasSkip() && from < g.SkipTo {
			if from < g.SkipFrom {
				add(from, g.SkipFrom-1)
			}
			from = g.SkipTo
		}
		if from <= end {
			add(from, end)
		}
	}
	return merged(all)
}

// leasedSpans lists, in order and merged, the batches the groups lease.
func leasedSpans(gs []*segments.Group) []span {
	all := make([]span, 0, len(gs))
	for _, g := range gs {
		if g.LeaseLast >= g.Next {
			all = append(all, span{g.Next, g.LeaseLast})
		}
	}
	return merged(all)
}

// merged sorts spans by first offset and joins those that overlap or
// touch.
func merged(all []span) []span {
	slices.SortFunc(all, func(x, y span) int { return cmp.Compare(x.first, y.first) })
	var out []span
	for _, s := range all {
		if n := len(out); n > 0 && s.first <= out[n-1].last+1 {
			out[n-1].last = max(out[n-1].last, s.last)
			continue
		}
		out = append(out, s)
	}
	return out
}

// storedUnpassed counts the stored messages of p that at least one of gs
// has not passed (everything stored without groups): from the slowest
// position on unless one of them holds a skip range.
func storedUnpassed(tx *segments.Tx, p *segments.Partition, gs []*segments.Group) uint64 {
	from, skips := p.FirstOffset, false
	for i, g := range gs {
		if i == 0 || g.Next < from {
			from = g.Next
		}
		skips = skips || g.HasSkip()
	}
	if skips {
		return storedIn(tx, p, unpassed(p, gs))
	}
	return storedBetween(tx, p, from, p.NextOffset)
}

// storedIn counts the stored messages in spans.
func storedIn(tx *segments.Tx, p *segments.Partition, spans []span) uint64 {
	var n uint64
	for _, s := range spans {
		n += storedBetween(tx, p, s.first, s.last+1)
	}
	return n
}

// groupsOf loads every group's state on the partition.
func groupsOf(tx *segments.Tx, p *segments.Partition) []*segments.Group {
	var gs []*segments.Group
	must(tx.ForEachGroup(p.ID, func(_ string, g *segments.Group) (bool, error) {
		gs = append(gs, g)
		return true, nil
	}))
	return gs
}

// partitionBacklog counts the stored messages some group has still to read
// (every stored message where no group has consumed).
func partitionBacklog(tx *segments.Tx, p *segments.Partition) uint64 {
	if p.Messages == 0 {
		return 0
	}
	// Without a skip range the slowest position decides, found without
	// loading the groups into a slice: this runs for every push to a
	// bounded queue.
	from, skips := slowestAndSkips(tx, p)
	if !skips {
		return storedBetween(tx, p, from, p.NextOffset)
	}
	return storedUnpassed(tx, p, groupsOf(tx, p))
}

// partitionBacklogBytes sums the payload bytes of the backlog, scanning the
// smaller of the backlog and the consumed-but-stored prefix, or, when some
// group holds a skip range, each span of the backlog.
func partitionBacklogBytes(tx *segments.Tx, p *segments.Partition) uint64 {
	if p.Messages == 0 {
		return 0
	}
	from, skips := slowestAndSkips(tx, p)
	if skips {
		var sum uint64
		for _, s := range unpassed(p, groupsOf(tx, p)) {
			must(tx.Scan(p, s.first, func(sm *segments.StoredMessage) (bool, error) {
				if sm.Offset > s.last {
					return false, nil
				}
				sum += uint64(len(sm.Payload))
				return true, nil
			}))
		}
		return sum
	}
	if from <= p.FirstOffset {
		return p.Bytes
	}
	if from >= p.NextOffset {
		return 0
	}
	var sum uint64
	if from-p.FirstOffset < p.NextOffset-from {
		must(tx.Scan(p, p.FirstOffset, func(sm *segments.StoredMessage) (bool, error) {
			if sm.Offset >= from {
				return false, nil
			}
			sum += uint64(len(sm.Payload))
			return true, nil
		}))
		return p.Bytes - min(sum, p.Bytes)
	}
	must(tx.Scan(p, from, func(sm *segments.StoredMessage) (bool, error) {
		sum += uint64(len(sm.Payload))
		return true, nil
	}))
	return sum
}
