package segments

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// A partition keeps the references of its newest segments in its own record
// and moves them to the segments bucket recentMax at a time.
//
// Why: the segments bucket is keyed partition then offset, so when pushes
// spread over many partitions, each new segment is an insert into a random
// leaf of a large B+tree, and bbolt rewrites every leaf a transaction
// touches. With 10,000 partitions nearly every message is a segment of its
// own, and those inserts were about half the cost of applying a push. The
// partition record is rewritten by every push to it anyway, so a reference
// kept there costs a few bytes of a leaf already being written; and when
// recentMax of them move to the bucket together they are neighbours, one
// leaf. Keeping 4, 8 or 16 took 0.70, 0.63 and 0.58 of the time to apply a
// push over 10,000 partitions (BenchmarkApplyPush), and changed nothing over
// 8. On disk the references are packed to about 11 bytes each
// (recentpack.go); in memory each takes recentEntry bytes.
//
// Invariant: every reference in a partition's record is of a newer segment
// (a higher first offset) than every reference of that partition in the
// bucket, so walks read the bucket, then the record.
const (
	recentMax   = 16
	recentEntry = 8 + refSize // first offset(8), then the reference
)

// recentCount is how many segment references p's record holds.
func (p *Partition) recentCount() int { return len(p.recent) / recentEntry }

// recentAt is the i-th (oldest first) reference p's record holds and the
// first offset of its segment.
func (p *Partition) recentAt(i int) (first uint64, ref []byte) {
	e := p.recent[i*recentEntry : (i+1)*recentEntry]
	return u64(e), e[8:]
}

// recentIndex is the position in p's record of the reference of the segment
// starting at first, or -1.
func (p *Partition) recentIndex(first uint64) int {
	for i := range p.recentCount() {
		if f, _ := p.recentAt(i); f == first {
			return i
		}
	}
	return -1
}

// The edits below build a new slice each time: a Partition copied by value
// shares p.recent, and references flushed to the bucket are handed to bbolt,
// which keeps them until the commit.

func (p *Partition) recentAppend(first uint64, ref []byte) {
	n := make([]byte, len(p.recent), len(p.recent)+recentEntry)
	copy(n, p.recent)
	p.recent = append(binary.BigEndian.AppendUint64(n, first), ref...)
}

func (p *Partition) recentReplace(i int, ref []byte) {
	n := bytes.Clone(p.recent)
	copy(n[i*recentEntry+8:(i+1)*recentEntry], ref)
	p.recent = n
}

func (p *Partition) recentDrop(i int) {
	n := make([]byte, 0, len(p.recent)-recentEntry)
	n = append(n, p.recent[:i*recentEntry]...)
	p.recent = append(n, p.recent[(i+1)*recentEntry:]...)
}

// checkRecent validates the references section of a partition record.
func checkRecent(pid uint64, b []byte) error {
	if len(b)%recentEntry != 0 || len(b)/recentEntry > recentMax {
		return fmt.Errorf("partition %d record holds %d bytes of segment references: %w", pid, len(b), ErrCorrupt)
	}
	var prev uint64
	for i := 0; i < len(b); i += recentEntry {
		first := u64(b[i:])
		if first <= prev {
			return fmt.Errorf("partition %d record holds segment %d after %d: %w", pid, first, prev, ErrCorrupt)
		}
		if _, err := decodeRef(b[i+8 : i+recentEntry]); err != nil {
			return fmt.Errorf("partition %d segment %d: %w", pid, first, err)
		}
		prev = first
	}
	return nil
}

// addSegmentRef records the reference of p's newest segment (the caller
// stores p). A full record first moves its references to the bucket.
func (t *Tx) addSegmentRef(p *Partition, first uint64, ref []byte) error {
	if p.recentCount() >= recentMax {
		if err := t.flushRecent(p); err != nil {
			return err
		}
	}
	p.recentAppend(first, ref)
	return nil
}

// insertSegmentRef records the reference of a segment of p that starts at
// first, between stored segments (DeleteMessage's cut; the caller stores p).
// It goes where the invariant puts it: into the record when the record holds
// an older segment, else into the bucket.
func (t *Tx) insertSegmentRef(p *Partition, first uint64, ref []byte) error {
	n := p.recentCount()
	if n == 0 || first < u64(p.recent) {
		return t.insertBucketRef(p.ID, first, ref)
	}
	if n >= recentMax {
		if err := t.flushRecent(p); err != nil {
			return err
		}
		return t.insertBucketRef(p.ID, first, ref)
	}
	i := 0
	for ; i < n; i++ {
		if f, _ := p.recentAt(i); f > first {
			break
		}
	}
	b := make([]byte, 0, len(p.recent)+recentEntry)
	b = append(b, p.recent[:i*recentEntry]...)
	b = binary.BigEndian.AppendUint64(b, first)
	b = append(b, ref...)
	p.recent = append(b, p.recent[i*recentEntry:]...)
	return nil
}

// flushRecent moves the references p's record holds to the segments
// bucket, as one block (refblock.go; the caller stores p).
func (t *Tx) flushRecent(p *Partition) error {
	if len(p.recent) == 0 {
		return nil
	}
	if err := t.put(bSegments, key88(p.ID, u64(p.recent)), packBlock(p.recent)); err != nil {
		return err
	}
	p.recent = nil
	return nil
}

// segmentRef is the stored reference of p's segment starting at first, or
// nil when there is none.
func (t *Tx) segmentRef(p *Partition, first uint64) ([]byte, error) {
	if i := p.recentIndex(first); i >= 0 {
		_, v := p.recentAt(i)
		return v, nil
	}
	return t.bucketRef(p.ID, first)
}

// replaceSegmentRef points p's existing segment starting at first at another
// blob (the caller stores p).
func (t *Tx) replaceSegmentRef(p *Partition, first uint64, ref []byte) error {
	if i := p.recentIndex(first); i >= 0 {
		p.recentReplace(i, ref)
		return nil
	}
	found, err := t.editBucketRef(p.ID, first, ref)
	if err == nil && !found {
		err = fmt.Errorf("partition %d has no segment %d to point at another blob: %w", p.ID, first, ErrCorrupt)
	}
	return err
}

// deleteSegmentRef removes the reference of p's segment starting at first,
// if one is stored (the caller stores p).
func (t *Tx) deleteSegmentRef(p *Partition, first uint64) error {
	if i := p.recentIndex(first); i >= 0 {
		p.recentDrop(i)
		return nil
	}
	_, err := t.editBucketRef(p.ID, first, nil)
	return err
}

// walkSegments calls fn with each segment of the partition that holds an
// offset >= from, oldest first, until fn returns false.
func (t *Tx) walkSegments(p *Partition, from uint64, fn func(first uint64, ref blobRef) (bool, error)) error {
	recent := p.recent // edits during the walk build a new slice
	if len(recent) == 0 || from < u64(recent) {
		more, err := t.walkBucketSegments(p.ID, from, fn)
		if err != nil || !more {
			return err
		}
	}
	for i := 0; i < len(recent); i += recentEntry {
		if more, err := visitSegment(p.ID, u64(recent[i:]), from, recent[i+8:i+recentEntry], fn); err != nil || !more {
			return err
		}
	}
	return nil
}

// visitSegment calls fn with the segment starting at first, whose reference
// is v, unless it ends before from (then it reports more).
func visitSegment(pid, first, from uint64, v []byte, fn func(first uint64, ref blobRef) (bool, error)) (bool, error) {
	ref, err := decodeRef(v)
	if err != nil {
		return false, fmt.Errorf("partition %d segment %d: %w", pid, first, err)
	}
	return visitFrom(first, from, ref, fn)
}

// visitFrom calls fn with the segment starting at first unless it ends
// before from (then it reports more).
func visitFrom(first, from uint64, ref blobRef, fn func(first uint64, ref blobRef) (bool, error)) (bool, error) {
	if first+uint64(ref.Count) <= from {
		return true, nil
	}
	return fn(first, ref)
}

// walkBucketSegments is walkSegments over the segments bucket alone. It
// reports whether fn asked for more.
func (t *Tx) walkBucketSegments(pid, from uint64, fn func(first uint64, ref blobRef) (bool, error)) (bool, error) {
	c := t.bucket(bSegments).Cursor()
	prefix := be64(pid)
	k, v := c.Seek(key88(pid, from))
	// The segment holding `from` may start before it.
	if k == nil || !bytes.HasPrefix(k, prefix) || u64(k[8:]) > from {
		if pk, pv := c.Prev(); pk != nil && bytes.HasPrefix(pk, prefix) {
			k, v = pk, pv
		} else {
			k, v = c.Seek(key88(pid, from))
		}
	}
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		more, err := eachRef(pid, u64(k[8:]), v, func(first uint64, ref blobRef) (bool, error) {
			return visitFrom(first, from, ref, fn)
		})
		if err != nil || !more {
			return false, err
		}
	}
	return true, nil
}
