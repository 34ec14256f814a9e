package fsm

import (
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/crownmq/crown/segments"
)

// TypeAckAt is an acknowledgment batch in the packed format whose items may
// carry the offset of the message they name (AckItem.At).
const TypeAckAt Type = 39

// AckAt is an AckPacked whose items carry, where the leader knows it, the
// offset of the message each one names; it applies exactly as that Ack.
//
// Why: an acknowledgment names its message by transaction id, and every
// node resolved each one with a lookup in the transaction-id index, a
// B+tree search through the largest bucket of the state file: in a consume
// run a tenth of every node's CPU, nine tenths of applying the acks
// (docs/performance.md, lesson 42). The leader proposed the pop that
// delivered the message and read it there, offset and id; it remembers them
// (httpapi's delivery memory) and writes the offset into the ack, so the
// lookup is skipped on every node.
//
// The apply trusts one fact from the leader: the message stored at At in
// the item's partition has the item's transaction id. It is a fact about
// the log, true for good once true: a partition's offsets are never reused
// (NextOffset only grows, and a partition made again gets a new UUID) and a
// stored message's id never changes (a cut rewrites the segment with the
// same ids). From it, At is the index's answer whenever At is still stored
// and at or after the partition's IDsIndexedFrom (segments/idmark.go: every
// message stored there is the occurrence of its id the index names). When
// either does not hold (the message was deleted, or a later append may have
// repeated its id), the apply looks the id up as before. Config.VerifyAcks
// makes the apply look every offset up and stop on a disagreement; tests
// and the chaos runs use it.
//
// Wire format: AckPacked's three fields, then the offsets:
//
//	[]                       no item carries one, or
//	[base, d0, d1, ...]      one d per item: 0 none, else At = base + d - 1
//
// with base the smallest offset carried, so the offsets of one delivered
// batch take a byte each. Offsets are at most 2^63-1, as every integer the
// decoder reads.
type AckAt struct {
	Ack
}

func (*AckAt) Type() Type { return TypeAckAt }

func applyAckAt(a *applier, c *AckAt) any { return applyAck(a, &c.Ack) }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (c *AckAt) EncodeMsgpack(enc *msgpack.Encoder) error { return encodePacked(enc, &c.Ack, true) }

func (c *AckAt) decodeFrom(r *mpReader) error { return decodePacked(r, &c.Ack, true) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (c *AckAt) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeVia(dec, c.decodeFrom) }

func encodeOffsets(enc *msgpack.Encoder, items []AckItem) error {
	base, carried := uint64(math.MaxInt64), false
	for i := range items {
		if at := items[i].At; at != 0 {
			if at > math.MaxInt64 {
				return fmt.Errorf("acknowledgment of %q: offset %d past the largest an entry holds", items[i].TxID, at)
			}
			base, carried = min(base, at), true
		}
	}
	if !carried {
		return enc.EncodeArrayLen(0)
	}
	if err := errors.Join(enc.EncodeArrayLen(len(items)+1), enc.EncodeUint(base)); err != nil {
		return err
	}
	for i := range items {
		d := uint64(0)
		if at := items[i].At; at != 0 {
			d = at - base + 1
		}
		if err := enc.EncodeUint(d); err != nil {
			return err
		}
	}
	return nil
}

func decodeOffsets(r *mpReader, items []AckItem) error {
	n, err := r.arrayLen()
	if err != nil || (n != 0 && n != len(items)+1) {
		return r.fail("acknowledgment offsets")
	}
	if n == 0 {
		return nil
	}
	base, err := r.uint()
	if err != nil || base == 0 {
		return r.fail("acknowledgments' base offset")
	}
	for i := range items {
		d, err := r.uint()
		if err != nil || (d != 0 && d-1 > math.MaxInt64-base) {
			return r.fail("acknowledgment offset")
		}
		if d != 0 {
			items[i].At = base + d - 1
		}
	}
	return nil
}

// storedAt reports whether c's partition stores a message at off. The
// stored runs are read from the segment references (no blob) from the
// first offset asked about, and read again only when an offset outside them
// is asked about: the offsets of one acknowledged batch are neighbours.
func (c *groupCursor) storedAt(tx *segments.Tx, off uint64) bool {
	if off < c.runsFrom || off >= c.runsTo {
		c.runs = c.runs[:0]
		c.runsFrom, c.runsTo = off, off
		must(tx.ScanRanges(c.part, off, func(first, end uint64, _ int64) (bool, error) {
			c.runs = append(c.runs, [2]uint64{first, end})
			c.runsTo = end
			return len(c.runs) < maxStoredRuns && end-off < maxStoredSpan, nil
		}))
		if c.runsTo == off {
			c.runsTo = off + 1 // nothing stored from off on: remember off alone
		}
	}
	for _, r := range c.runs {
		if off < r[0] {
			return false
		}
		if off < r[1] {
			return true
		}
	}
	return false
}

// maxStoredRuns and maxStoredSpan bound the runs storedAt reads at once,
// in number and in offsets: a batch of 100 messages pushed over 8
// partitions spans about 8 runs and 100 offsets, over 10,000 partitions up
// to 100 runs, and a partition holds many more after it. A larger batch
// reads its runs in several walks.
const (
	maxStoredRuns = 128
	maxStoredSpan = 256
)

// indexAnswer is what the transaction-id index gives for the item's id in
// c's partition: its offset, from AckItem.At without a lookup when At is
// provably that answer (see AckAt).
func (s *ackSession) indexAnswer(c *groupCursor, it *AckItem) (uint64, bool) {
	p := c.part
	if at := it.At; at != 0 && p.IDsIndexed(at) && c.storedAt(s.a.tx, at) {
		if s.a.verifyAcks {
			off, ok := must2(s.a.tx.TxIDOffset(p.QueueID, p.ID, it.TxID))
			if !ok || off != at {
				must(fmt.Errorf("VerifyAcks: ack of %q in partition %d carries offset %d, the index gives %d (found %t)",
					it.TxID, p.ID, at, off, ok))
			}
		}
		s.a.acks.byOffset.Add(1)
		return at, true
	}
	s.a.acks.byIndex.Add(1)
	if it.At != 0 {
		s.a.acks.refused.Add(1)
	}
	return must2(s.a.tx.TxIDOffset(p.QueueID, p.ID, it.TxID))
}
