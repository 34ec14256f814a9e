package fsm

import (
	"fmt"
	"sort"

	"github.com/crownmq/crown/segments"
)

// Status and analytics views (queen-api.md 3.14). The state keeps no
// per-minute metrics: time series are derived from what carries a time,
// segment commit times (messages ingested) and dead-letter failure times.
// Pops, acks and lag have no per-time record, so their series are zero.

// MaxBuckets caps the points of a time series; a range that would need
// more is refused rather than truncated.
const MaxBuckets = 10_000

// Buckets is a series of equal time buckets: Count buckets of Size µs, the
// first starting at Start (aligned to Size since the Unix epoch, so day
// buckets start at midnight UTC).
type Buckets struct {
	Start, Size int64
	Count       int
}

// NewBuckets covers [from, to] with buckets of size µs, ok false when that
// takes more than MaxBuckets.
func NewBuckets(from, to, size int64) (Buckets, bool) {
	floor := func(t int64) int64 {
		r := t % size
		if r < 0 {
			r += size
		}
		return t - r
	}
	start, last := floor(from), floor(to)
	if last < start {
		last = start
	}
	n := (last-start)/size + 1
	if n > MaxBuckets {
		return Buckets{}, false
	}
	return Buckets{Start: start, Size: size, Count: int(n)}, true
}

// End is the exclusive end of the last bucket.
func (b Buckets) End() int64 { return b.Start + int64(b.Count)*b.Size }

func (b Buckets) index(t int64) (int, bool) {
	if t < b.Start || t >= b.End() {
		return 0, false
	}
	return int((t - b.Start) / b.Size), true
}

// Scope selects queues by name and tags; empty strings match everything.
type Scope struct {
	Queue, Namespace, Task string
}

// CreatedPerBucket counts the messages committed in each bucket, over the
// queues in scope, from segment commit times (messages retention removed
// are no longer counted).
func (f *FSM) CreatedPerBucket(s Scope, b Buckets) ([]uint64, error) {
	out := make([]uint64, b.Count)
	if err := f.countCommits(s, b, out); err != nil {
		return nil, fmt.Errorf("messages per bucket: %w", err)
	}
	return out, nil
}

// commitChunk bounds the segment references one read transaction of a
// range walk reads. A read transaction holds the pages it can see from
// reuse and delays a remap of a growing file, so a dashboard asking for
// years of history must not hold one for all of it: the walk goes a chunk at
// a time, each partition resuming below the last segment it counted. The
// counts of a walk that spans commits may mix instants; they are statistics.
const commitChunk = 4096

// countCommits adds the messages committed in each bucket over the
// partitions in scope into into, commitChunk segments per read transaction.
func (f *FSM) countCommits(s Scope, b Buckets, into []uint64) error {
	var parts []uint64
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		for _, q := range scopeQueues(tx, s.Queue, s.Namespace, s.Task) {
			forEachScopePartition(tx, q, "", func(p *segments.Partition) { parts = append(parts, p.ID) })
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, pid := range parts {
		maxFirst, started := ^uint64(0), false
		for more := true; more; {
			more = false
			err := f.View(func(tx *segments.Tx) (err error) {
				defer recoverStorage(&err)
				p := must1(tx.PartitionByID(pid))
				if p == nil {
					return nil // deleted meanwhile
				}
				n := 0
				forEachCommitFrom(tx, p, b.Start, b.End(), maxFirst, started, func(si segments.SegmentInfo) bool {
					if n == commitChunk {
						maxFirst, more = si.First, true
						return false
					}
					n++
					if i, ok := b.index(si.CreatedAt); ok {
						into[i] += si.Count
					}
					return true
				})
				started = true
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// StatusPoint is one bucket of the status throughput series.
type StatusPoint struct {
	Start    int64
	Ingested uint64 // messages committed in the bucket
	DLQ      uint64 // dead-letter entries written in the bucket
}

// StatusQueue is one queue of the status summary.
type StatusQueue struct {
	Queue         QueueInfo
	Partitions    int
	TotalConsumed uint64 // summed over every group on every partition
}

// LeaseSummary describes the live leases in scope.
type LeaseSummary struct {
	Active               int    // distinct live lease ids
	PartitionsWithLeases int    // partitions with at least one live lease
	TotalBatchSize       uint64 // messages the live leases delivered
	TotalAcked           uint64 // of those, already consumed
}

// ErrorCount is how many dead letters carry one error text.
type ErrorCount struct {
	Error string
	Count uint64
}

// DLQSummary describes the dead letters in scope.
type DLQSummary struct {
	Total              uint64
	AffectedPartitions int
	TopErrors          []ErrorCount // most frequent first, at most TopErrors
}

// TopErrors is how many error texts the status summary lists; at most
// maxErrorTexts distinct texts are tallied, so a dead-letter queue whose
// every error is unique costs bounded memory (texts past that are not
// ranked).
const (
	TopErrors     = 5
	maxErrorTexts = 10_000
)

// Status is the summary behind GET /api/v1/status.
type Status struct {
	Points   []StatusPoint // newest first
	Queues   []StatusQueue // in name order
	Stats    MessageStats
	Counters Counters // cluster-wide: the counters have no per-queue split
	Leases   LeaseSummary
	DLQ      DLQSummary
}

// Status computes the status summary for the queues in scope at now.
func (f *FSM) Status(s Scope, b Buckets, now int64) (*Status, error) {
	out := &Status{Points: make([]StatusPoint, b.Count), Queues: []StatusQueue{}}
	// The ingested series walks segment references, a chunk per read
	// transaction (countCommits); the rest is one consistent view.
	ingested := make([]uint64, b.Count)
	if err := f.countCommits(s, b, ingested); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		out.Counters = loadCounters(tx)
		dlq := make([]uint64, b.Count)
		leases := map[[16]byte]bool{}
		errs := map[string]uint64{}
		affected := map[uint64]bool{}
		for _, q := range scopeQueues(tx, s.Queue, s.Namespace, s.Task) {
			sq := StatusQueue{Queue: *q}
			dead := func(d *segments.DeadLetterSummary) {
				out.DLQ.Total++
				affected[d.PartitionID] = true
				if _, ok := errs[d.Error]; ok || len(errs) < maxErrorTexts {
					errs[d.Error]++
				}
				if i, ok := b.index(d.FailedAt); ok {
					dlq[i]++
				}
			}
			v := queueScan(tx, q, now, func(p *segments.Partition, pv PartitionView) {
				sq.TotalConsumed += pv.Consumed
				live := false
				must(tx.ForEachGroup(p.ID, func(_ string, g *segments.Group) (bool, error) {
					if !g.LeaseLive(now) {
						return true, nil
					}
					live = true
					leases[g.LeaseID] = true
					out.Leases.TotalBatchSize += g.LeaseDelivered
					left := uint64(0)
					if g.Next <= g.LeaseLast {
						left = min(g.LeaseLast+1-g.Next, g.LeaseDelivered)
					}
					out.Leases.TotalAcked += g.LeaseDelivered - left
					return true, nil
				}))
				if live {
					out.Leases.PartitionsWithLeases++
				}
			}, dead)
			sq.Partitions = v.PartitionCount
			out.Stats.add(v.Stats)
			out.Queues = append(out.Queues, sq)
		}
		out.Leases.Active = len(leases)
		out.DLQ.AffectedPartitions = len(affected)
		out.DLQ.TopErrors = topErrors(errs)
		// Newest first, as queen-api.md 3.14 orders the series.
		for i := range out.Points {
			j := b.Count - 1 - i
			out.Points[i].Start = b.Start + int64(j)*b.Size
			out.Points[i].Ingested, out.Points[i].DLQ = ingested[j], dlq[j]
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	sort.Slice(out.Queues, func(i, j int) bool { return out.Queues[i].Queue.Name < out.Queues[j].Queue.Name })
	return out, nil
}

func topErrors(m map[string]uint64) []ErrorCount {
	out := make([]ErrorCount, 0, len(m))
	for e, n := range m {
		out = append(out, ErrorCount{e, n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Error < out[j].Error
	})
	return out[:min(len(out), TopErrors)]
}

// MaxStatusQueues caps a page of GET /api/v1/status/queues.
const MaxStatusQueues = 1000

// StatusQueues pages the queues matching the tags, newest first then by
// name, computing figures only for the queues of the page.
func (f *FSM) StatusQueues(namespace, task string, limit, offset int, now int64) ([]QueueView, error) {
	limit = min(max(limit, 0), MaxStatusQueues)
	offset = max(offset, 0)
	out := []QueueView{}
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		qs := scopeQueues(tx, "", namespace, task)
		sort.SliceStable(qs, func(i, j int) bool {
			if qs[i].CreatedAt != qs[j].CreatedAt {
				return qs[i].CreatedAt > qs[j].CreatedAt
			}
			return qs[i].Name < qs[j].Name
		})
		if offset >= len(qs) {
			return nil
		}
		qs = qs[offset:]
		for _, q := range qs[:min(limit, len(qs))] {
			out = append(out, queueScan(tx, q, now, nil, nil))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("status queues: %w", err)
	}
	return out, nil
}
