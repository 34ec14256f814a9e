package fsm

import (
	"cmp"
	"slices"

	"github.com/crownmq/crown/segments"
)

// span is an inclusive range of offsets.
type span struct{ first, last uint64 }

// idleBacklog is what of a partition's backlog a purge removes, or a move
// with active jobs takes (ojs-queues.md 6.5 and 6.7: leased jobs are left
// to finish): every stored offset from from on outside the live leased
// batches.
//
// The groups share one log, so the batches are ranges of it, and what lies
// between them is removed too: a group whose batch ends must not be handed
// the messages after it that another group had consumed. Below from (the
// slowest cursor, and past the end of the earliest live batch) each group
// has consumed a message or holds it in its batch; the groups without a
// live lease are moved to the end by the purge. What a live batch holds
// stays stored for its redelivery, so a purge gives each group with a live
// batch the range after it to skip (Group.SkipFrom, SkipTo): a group behind
// another's batch does not read that batch's messages once its own ends.
type idleBacklog struct {
	from    uint64
	batches []span // live leased batches, sorted by first offset
}

// idleOf is the idle backlog of partition p at now.
func idleOf(tx *segments.Tx, p *segments.Partition, now int64) idleBacklog {
	ib := idleBacklog{from: slowest(tx, p)}
	must(tx.ForEachGroup(p.ID, func(_ string, g *segments.Group) (bool, error) {
		if g.LeaseLive(now) && g.HasBatch() {
			ib.batches = append(ib.batches, span{g.Next, g.LeaseLast})
		}
		return true, nil
	}))
	if len(ib.batches) == 0 {
		return ib
	}
	minLast := ib.batches[0].last
	for _, b := range ib.batches {
		minLast = min(minLast, b.last)
	}
	ib.from = max(ib.from, minLast+1)
	slices.SortFunc(ib.batches, func(x, y span) int {
		return cmp.Or(cmp.Compare(x.first, y.first), cmp.Compare(x.last, y.last))
	})
	return ib
}

// leased reports whether off is in a live leased batch.
func (ib idleBacklog) leased(off uint64) bool {
	for _, b := range ib.batches {
		if off >= b.first && off <= b.last {
			return true
		}
	}
	return false
}

// gaps lists the idle ranges inside sg, in order.
func (ib idleBacklog) gaps(sg span) []span {
	var out []span
	next := max(sg.first, ib.from) // first offset not yet placed
	for _, b := range ib.batches {
		if next > sg.last {
			break
		}
		if b.last < next {
			continue
		}
		if b.first > next {
			out = append(out, span{next, min(b.first-1, sg.last)})
		}
		next = max(next, b.last+1)
	}
	if next <= sg.last {
		out = append(out, span{next, sg.last})
	}
	return out
}
