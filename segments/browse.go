package segments

import (
	"bytes"
	"fmt"
)

// Reads for the browsing views (message listings, analytics): walks that
// start at a chosen segment and go back in time, so a page of the newest
// messages costs the segments it shows, not the partition.

// SegmentsReverseFrom walks the partition's segments whose first offset is
// at most maxFirst, newest first, until fn returns false. It reads no blob.
func (t *Tx) SegmentsReverseFrom(p *Partition, maxFirst uint64, fn func(SegmentInfo) (bool, error)) error {
	visit := func(first uint64, v []byte) (bool, error) {
		ref, err := decodeRef(v)
		if err != nil {
			return false, fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
		}
		return fn(ref.info(first))
	}
	// The record's references are all newer than the bucket's (recent.go).
	recent := p.recent
	for i := len(recent) - recentEntry; i >= 0; i -= recentEntry {
		first := u64(recent[i:])
		if first > maxFirst {
			continue
		}
		if more, err := visit(first, recent[i+8:i+recentEntry]); err != nil || !more {
			return err
		}
	}
	c := t.bucket(bSegments).Cursor()
	prefix := be64(p.ID)
	k, v := c.Seek(key88(p.ID, maxFirst))
	if k == nil || !bytes.HasPrefix(k, prefix) || u64(k[8:]) > maxFirst {
		k, v = c.Prev()
	}
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Prev() {
		refs, err := entryRefs(p.ID, u64(k[8:]), v)
		if err != nil {
			return err
		}
		for i := len(refs) - recentEntry; i >= 0; i -= recentEntry {
			if first := u64(refs[i:]); first <= maxFirst {
				if more, err := visit(first, refs[i+8:i+recentEntry]); err != nil || !more {
					return err
				}
			}
		}
	}
	return nil
}

// SegmentAt is the newest segment whose first offset is at most off: the
// one holding off, or the one before the gap off falls in. ok is false when
// every stored segment starts after off.
func (t *Tx) SegmentAt(p *Partition, off uint64) (si SegmentInfo, ok bool, err error) {
	err = t.SegmentsReverseFrom(p, off, func(s SegmentInfo) (bool, error) {
		si, ok = s, true
		return false, nil
	})
	return si, ok, err
}

// LastSegmentBefore is the newest segment that starts at or before maxOff
// and was committed before the unix µs time before. A partition's commit
// times never decrease with its offsets (the state machine's clock is
// monotone), so a binary search over the offsets finds it in O(log n)
// seeks: a listing of a past hour does not walk the segments after it.
func (t *Tx) LastSegmentBefore(p *Partition, maxOff uint64, before int64) (SegmentInfo, bool, error) {
	si, ok, err := t.SegmentAt(p, maxOff)
	if err != nil || !ok || si.CreatedAt < before {
		return si, ok, err
	}
	// Invariant: the segment at hi is too new; the answer starts before it.
	lo, hi := p.FirstOffset, si.First
	var best SegmentInfo
	found := false
	for lo < hi {
		mid := lo + (hi-lo)/2
		s, ok, err := t.SegmentAt(p, mid)
		if err != nil {
			return SegmentInfo{}, false, err
		}
		if !ok {
			lo = mid + 1
			continue
		}
		if s.CreatedAt < before {
			best, found = s, true
			lo = s.First + s.Count
			if lo <= mid {
				lo = mid + 1
			}
		} else {
			hi = s.First
		}
	}
	return best, found, nil
}

// ReadSegment calls fn with each message of p's segment that starts at
// first, oldest first, until fn returns false. Reading stops at the
// segment's end, so no other blob is read. Payloads and strings alias a
// buffer of the read's own (see Scan).
func (t *Tx) ReadSegment(p *Partition, first uint64, fn func(*StoredMessage) (bool, error)) error {
	v, err := t.segmentRef(p, first)
	if v == nil {
		return err
	}
	_, blob, err := t.segmentBlob(v)
	if err != nil {
		return fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
	}
	r, err := NewSegmentReader(blob)
	if err != nil {
		return fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
	}
	var sm StoredMessage
	for {
		idx, ok, err := r.Next(&sm.Message)
		if err != nil {
			return fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
		}
		if !ok {
			return nil
		}
		sm.Offset = first + uint64(idx)
		sm.CreatedAt = r.Header.CreatedAt
		sm.ID = MessageID(r.Header.CreatedAt, r.Header.BaseSeq+uint64(idx))
		if more, err := fn(&sm); err != nil || !more {
			return err
		}
	}
}

// DeadLetterHead is what a dead-letter listing filters and orders on,
// decoded without the rest of the entry.
type DeadLetterHead struct {
	Seq           uint64 `msgpack:"seq"`
	PartitionName string `msgpack:"part"`
	Group         string `msgpack:"group"`
	FailedAt      int64  `msgpack:"failed"`
}

// ForEachDeadLetterHead walks the heads of a queue's dead letters newest
// first.
func (t *Tx) ForEachDeadLetterHead(qid uint64, fn func(*DeadLetterHead) (bool, error)) error {
	return forEachDeadLetterNewest(t, qid, fn)
}

// DeadLetterAt reads a queue's dead letter number seq; nil if there is none.
func (t *Tx) DeadLetterAt(qid, seq uint64) (*DeadLetter, error) {
	v := t.bucket(bDLQ).Get(key88(qid, seq))
	if v == nil {
		return nil, nil
	}
	d := new(DeadLetter)
	if err := unmarshalMsgpack(v, d); err != nil {
		return nil, fmt.Errorf("dead letter %d of queue %d: %w", seq, qid, err)
	}
	return d, nil
}

// DeadLetterSummary is a dead-letter entry without its payload: what status
// views need, decoded without copying a payload that may be megabytes.
type DeadLetterSummary struct {
	Seq         uint64   `msgpack:"seq"`
	PartitionID uint64   `msgpack:"pid"`
	Offset      uint64   `msgpack:"off"`
	MessageID   [16]byte `msgpack:"mid"`
	TxID        string   `msgpack:"tx"`
	TraceID     [16]byte `msgpack:"trace"`
	HasTrace    bool     `msgpack:"has_trace"`
	ProducerSub string   `msgpack:"sub"`
	Group       string   `msgpack:"group"`
	Error       string   `msgpack:"err"`
	RetryCount  uint64   `msgpack:"retries"`
	CreatedAt   int64    `msgpack:"created"`
	FailedAt    int64    `msgpack:"failed"`
}

// ForEachDeadLetterSummary walks a queue's dead letters newest first, without
// their payloads, until fn returns false.
func (t *Tx) ForEachDeadLetterSummary(qid uint64, fn func(*DeadLetterSummary) (bool, error)) error {
	return forEachDeadLetterNewest(t, qid, fn)
}
