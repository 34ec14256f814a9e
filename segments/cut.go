package segments

import (
	"bytes"
	"fmt"
)

// Cutting messages out of a segment. A segment's offsets are contiguous, so
// removing messages from its end (TruncateSegment) or its middle
// (DeleteMessage) rewrites what is kept as new blobs with the original commit
// time and ids, and leaves the removed offsets as a gap, which every reader
// skips as it skips a prefix retention removed.

// segmentMessages reads the segment of p starting at first, whose stored
// reference is v, into messages that own their bytes.
func (t *Tx) segmentMessages(p *Partition, first uint64, v []byte) (blobRef, SegmentHeader, []Message, error) {
	ref, blob, err := t.segmentBlob(v)
	if err != nil {
		return blobRef{}, SegmentHeader{}, nil, fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
	}
	r, err := NewSegmentReader(blob)
	if err != nil {
		return blobRef{}, SegmentHeader{}, nil, fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
	}
	msgs := make([]Message, 0, r.Header.Count)
	for {
		var m Message
		_, ok, err := r.Next(&m)
		if err != nil {
			return blobRef{}, SegmentHeader{}, nil, fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
		}
		if !ok {
			return ref, r.Header, msgs, nil
		}
		m.TxID = string(m.TxID)
		m.ProducerSub = string(m.ProducerSub)
		m.Payload = bytes.Clone(m.Payload)
		msgs = append(msgs, m)
	}
}

// TruncateSegment keeps only the first keep messages of the segment that
// starts at first (keep 0 deletes it), updating p (the caller stores p). The
// offsets after them become a gap. It returns the number of messages removed.
func (t *Tx) TruncateSegment(p *Partition, first uint64, keep uint64) (uint64, error) {
	if keep == 0 {
		return t.DeleteSegment(p, first)
	}
	v, err := t.segmentRef(p, first)
	if v == nil {
		return 0, err
	}
	old, hdr, msgs, err := t.segmentMessages(p, first, v)
	if err != nil {
		return 0, err
	}
	count := uint64(len(msgs))
	if keep >= count {
		return 0, nil
	}
	var droppedBytes uint64
	for i, m := range msgs[keep:] {
		off := first + keep + uint64(i)
		if err := t.delTxIDIfAt(p.QueueID, p.ID, m.TxID, off, off+1); err != nil {
			return 0, err
		}
		droppedBytes += uint64(len(m.Payload))
	}
	// The dropped messages' trace events go with them, as DeleteSegment's
	// do: a later deletion of the kept head covers only its own offsets.
	if err := t.deleteTraces(p.ID, first+keep, first+count); err != nil {
		return 0, err
	}
	ref, err := t.appendSegmentBlob(hdr.CreatedAt, hdr.BaseSeq, msgs[:keep])
	if err != nil {
		return 0, err
	}
	if err := t.replaceSegmentRef(p, first, ref.encode()); err != nil {
		return 0, err
	}
	if err := t.freeBlob(old); err != nil {
		return 0, err
	}
	removed := count - keep
	p.Messages -= removed
	p.Bytes -= droppedBytes
	return removed, nil
}

// DeleteMessage removes the message stored at off from p, updating p (the
// caller stores p), and reports whether one was stored there. Its segment is
// cut in two around it: the messages before it keep the segment's key, those
// after it become a segment starting at off+1, both with the original commit
// time and ids. The message's transaction-id index entry (if it still points
// at off) and its trace events go with it.
func (t *Tx) DeleteMessage(p *Partition, off uint64) (bool, error) {
	var (
		first, count uint64
		found        bool
	)
	err := t.walkSegments(p, off, func(f uint64, ref blobRef) (bool, error) {
		first, count, found = f, uint64(ref.Count), f <= off
		return false, nil
	})
	if err != nil || !found {
		return false, err
	}
	if count == 1 {
		_, err := t.DeleteSegment(p, first)
		return err == nil, err
	}
	v, err := t.segmentRef(p, first)
	if err != nil {
		return false, err
	}
	old, hdr, msgs, err := t.segmentMessages(p, first, v)
	if err != nil {
		return false, err
	}
	if uint64(len(msgs)) != count {
		return false, fmt.Errorf("partition %d segment %d holds %d messages, its reference %d: %w", p.ID, first, len(msgs), count, ErrCorrupt)
	}
	k := off - first
	head, gone, tail := msgs[:k], msgs[k], msgs[k+1:]
	if err := t.delTxIDIfAt(p.QueueID, p.ID, gone.TxID, off, off+1); err != nil {
		return false, err
	}
	if err := t.deleteTraces(p.ID, off, off+1); err != nil {
		return false, err
	}
	if len(head) > 0 {
		ref, err := t.appendSegmentBlob(hdr.CreatedAt, hdr.BaseSeq, head)
		if err == nil {
			err = t.replaceSegmentRef(p, first, ref.encode())
		}
		if err != nil {
			return false, err
		}
	} else if err := t.deleteSegmentRef(p, first); err != nil {
		return false, err
	}
	if len(tail) > 0 {
		ref, err := t.appendSegmentBlob(hdr.CreatedAt, hdr.BaseSeq+k+1, tail)
		if err == nil {
			err = t.insertSegmentRef(p, off+1, ref.encode())
		}
		if err != nil {
			return false, err
		}
	}
	if err := t.freeBlob(old); err != nil {
		return false, err
	}
	p.Messages--
	p.Bytes -= uint64(len(gone.Payload))
	if len(head) > 0 && len(tail) > 0 {
		p.Segments++
	}
	if first == p.FirstOffset && len(head) == 0 {
		p.FirstOffset = off + 1
	}
	return true, nil
}
