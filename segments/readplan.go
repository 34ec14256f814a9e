package segments

import (
	"cmp"
	"fmt"
	"slices"
)

// A pop claims several partitions and returns their next messages. Read
// one segment at a time, that is a pread per segment, and over many
// partitions nearly every message is a segment of its own (a push of 100
// messages over 100 partitions writes 100 one-message segments, side by side
// in one blob file): profiles of a consume run over 10,000 partitions showed
// half of the leader's apply time in those preads. A ReadPlan first collects
// the references of every segment a pop will return, then reads them in
// file order, one pread for each run of segments lying close together. Where
// nothing lies together it costs a sort of a few references.
const (
	// planGap is how far apart two planned segments of one file may lie and
	// still be read by one pread, the bytes between them included. On the
	// 2-core test machine a pread costs about 4 µs plus 46 ns a KiB copied
	// (docs/performance.md, lesson 38), so a gap up to some 80 KiB would
	// still read faster than a second call; but the gap is allocated with
	// the run and kept alive by the payloads that alias it until the answer
	// is sent, so a wider gap trades one system call for garbage. 4 KiB
	// joins neighbours without that.
	planGap = 4 << 10
	// planRun bounds one read, so that a run's buffer, which the payloads
	// of the pop's answer alias until it is sent, stays small.
	planRun = 256 << 10
)

// ReadPlan is the ranges of messages a caller will read together
// (Tx.PlanRead, Tx.ReadPlanned). The zero value is empty.
type ReadPlan struct {
	segs   []plannedSegment // in the order planned: by range, then offset
	ranges int
}

type plannedSegment struct {
	rng      int
	first    uint64 // the segment's first offset
	from, to uint64 // the offsets the range wants of it, inclusive
	ref      blobRef
	blob     []byte
}

// Len is the number of ranges planned.
func (rp *ReadPlan) Len() int { return rp.ranges }

// PlanRead adds the stored messages of p from offset from to offset last,
// both inclusive, to rp and returns the range's number (0 for the first
// range planned, then 1...). Offsets in between that hold no message (a
// deleted one's) are skipped, as Scan skips them. It reads references only.
func (t *Tx) PlanRead(rp *ReadPlan, p *Partition, from, last uint64) (int, error) {
	rng := rp.ranges
	err := t.walkSegments(p, from, func(first uint64, ref blobRef) (bool, error) {
		if first > last {
			return false, nil
		}
		if ref.Count == 0 {
			return true, nil
		}
		rp.segs = append(rp.segs, plannedSegment{
			rng: rng, first: first, ref: ref,
			from: max(first, from), to: min(first+uint64(ref.Count)-1, last),
		})
		return first+uint64(ref.Count)-1 < last, nil
	})
	if err != nil {
		return 0, fmt.Errorf("plan a read of partition %d: %w", p.ID, err)
	}
	rp.ranges++
	return rng, nil
}

// ReadPlanned reads every segment rp names and calls fn with each planned
// message: range by range in the order they were planned, each in offset
// order. The transaction must not have changed those segments since they
// were planned. As with Scan, a payload aliases a buffer of its own (or the
// transaction's pending appends) that stays as it is after the transaction
// ends, and must not be modified; sm is reused between calls.
func (t *Tx) ReadPlanned(rp *ReadPlan, fn func(rng int, sm *StoredMessage) error) error {
	if err := t.readPlanned(rp); err != nil {
		return err
	}
	var sm StoredMessage
	for i := range rp.segs {
		s := &rp.segs[i]
		n, _, err := eachMessage(s.blob, s.first, s.from, s.to, &sm, func(sm *StoredMessage) (bool, error) {
			return true, fn(s.rng, sm)
		})
		if err != nil {
			return fmt.Errorf("segment %d: %w", s.first, err)
		}
		if want := s.to - s.from + 1; n != want {
			return fmt.Errorf("segment %d holds %d of the %d messages its reference counts there: %w", s.first, n, want, ErrCorrupt)
		}
	}
	return nil
}

// readPlanned fills each planned segment's blob: from the transaction's
// pending appends, or by one pread for each run of segments of one file
// that lie within planGap of each other.
func (t *Tx) readPlanned(rp *ReadPlan) error {
	order := make([]*plannedSegment, 0, len(rp.segs))
	for i := range rp.segs {
		s := &rp.segs[i]
		b, ok, err := t.pendingBlob(s.ref, int(s.ref.Len))
		switch {
		case err != nil:
			return err
		case ok:
			s.blob = b
		default:
			order = append(order, s)
		}
	}
	slices.SortFunc(order, func(a, b *plannedSegment) int {
		return cmp.Or(cmp.Compare(a.ref.File, b.ref.File), cmp.Compare(a.ref.Pos, b.ref.Pos))
	})
	for len(order) > 0 {
		run := blobRef{File: order[0].ref.File, Pos: order[0].ref.Pos}
		end, n := order[0].ref.Pos+int64(order[0].ref.Len), 1
		for ; n < len(order); n++ {
			next := order[n].ref
			nextEnd := max(end, next.Pos+int64(next.Len))
			if next.File != run.File || next.Pos > end+planGap || nextEnd-run.Pos > planRun {
				break
			}
			end = nextEnd
		}
		run.Len = uint32(end - run.Pos)
		buf := make([]byte, run.Len) // never pooled: payloads alias it (Tx.Scan)
		if err := t.store.blobs.readInto(run, buf); err != nil {
			return err
		}
		for _, s := range order[:n] {
			at := s.ref.Pos - run.Pos
			s.blob = buf[at : at+int64(s.ref.Len) : at+int64(s.ref.Len)]
		}
		order = order[n:]
	}
	return nil
}
