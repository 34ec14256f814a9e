package fsm

import (
	"errors"

	"github.com/vmihailenco/msgpack/v5"
)

// TypeAckPacked is an acknowledgment batch written with a table of the
// partitions and leases its items name (AckPacked).
const TypeAckPacked Type = 24

// AckPacked is an Ack in a smaller log format, and applies exactly as the
// Ack it holds.
//
// Why: a batch acknowledges what a pop delivered, so its items almost always
// share one partition and one lease. Written per item (Ack's format), those
// are 36 of the 50-odd bytes an acknowledgment takes, and a consume run's
// entries are mostly acknowledgments, written and fsynced on every node and
// counted towards the next snapshot. The table names each distinct
// (partition, lease) once, in order of first use, and each item refers to it
// by position. A batch of 100 takes 1,762 bytes instead of 5,422 and encodes
// and decodes faster (BenchmarkAck100); a consume run's entries went from
// 10.9 to 3.5 KB (docs/performance.md, lesson 25).
//
// Builds that do not know this type stop at the first such entry and ask to
// be upgraded (fsm/DESIGN.md), so a cluster is upgraded followers first
// (docs/deployments.md, Upgrading). Entries written as TypeAck still apply.
//
// Wire format:
//
//	[ group,
//	  [ [partitionId(bin16), partitionOK, leaseId(bin16|nil), hasLease], ... ],
//	  [ [txid, pair, status, statusText, error], ... ] ]
type AckPacked struct {
	Ack
}

func (*AckPacked) Type() Type { return TypeAckPacked }

func applyAckPacked(a *applier, c *AckPacked) any { return applyAck(a, &c.Ack) }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (c *AckPacked) EncodeMsgpack(enc *msgpack.Encoder) error {
	return encodePacked(enc, &c.Ack, false)
}

// encodePacked writes c in the packed format, with the offsets table of
// AckAt when withOffsets.
func encodePacked(enc *msgpack.Encoder, c *Ack, withOffsets bool) error {
	// Items sharing the previous item's pair are the rule; the map, made
	// once a batch names a second pair, serves batches that mix them.
	var (
		pairs []ackAddress
		index map[ackAddress]int
		refs  = make([]int, len(c.Items))
	)
	for i := range c.Items {
		p := addressOf(&c.Items[i])
		j, ok := 0, false
		switch {
		case i > 0 && p == pairs[refs[i-1]]:
			j, ok = refs[i-1], true
		case index != nil:
			j, ok = index[p]
		}
		if !ok {
			j = len(pairs)
			pairs = append(pairs, p)
			if j == 1 {
				index = map[ackAddress]int{pairs[0]: 0}
			}
			if index != nil {
				index[p] = j
			}
		}
		refs[i] = j
	}
	if err := errors.Join(enc.EncodeArrayLen(packedFields(withOffsets)), enc.EncodeString(c.Group), enc.EncodeArrayLen(len(pairs))); err != nil {
		return err
	}
	for i := range pairs {
		p := &pairs[i]
		err := errors.Join(enc.EncodeArrayLen(4),
			encodeAckAddress(enc, p.partition[:], p.partitionOK, p.lease[:], p.hasLease))
		if err != nil {
			return err
		}
	}
	if err := enc.EncodeArrayLen(len(c.Items)); err != nil {
		return err
	}
	for i := range c.Items {
		it := &c.Items[i]
		err := errors.Join(enc.EncodeArrayLen(5), enc.EncodeString(it.TxID), enc.EncodeUint(uint64(refs[i])),
			encodeAckOutcome(enc, it))
		if err != nil {
			return err
		}
	}
	if withOffsets {
		return encodeOffsets(enc, c.Items)
	}
	return nil
}

func (c *AckPacked) decodeFrom(r *mpReader) error { return decodePacked(r, &c.Ack, false) }

// packedFields is the length of the packed format's top-level array: group,
// pairs and items, then AckAt's offsets table.
func packedFields(withOffsets bool) int {
	if withOffsets {
		return 4
	}
	return 3
}

// decodePacked reads the packed format into c, with the offsets table of
// AckAt when withOffsets.
func decodePacked(r *mpReader, c *Ack, withOffsets bool) error {
	if n, err := r.arrayLen(); err != nil || n != packedFields(withOffsets) {
		return r.fail("packed ack")
	}
	var err error
	if c.Group, err = r.str(); err != nil {
		return err
	}
	// A pair takes at least 7 bytes, an item 6.
	n, err := r.arrayLenOf(7, "partition and lease count")
	if err != nil {
		return err
	}
	pairs := make([]ackAddress, n)
	for i := range pairs {
		if l, err := r.arrayLen(); err != nil || l != 4 {
			return r.fail("partition and lease")
		}
		if pairs[i], err = decodeAckAddress(r); err != nil {
			return err
		}
	}
	m, err := r.arrayLenOf(6, "acknowledgment count")
	if err != nil {
		return err
	}
	c.Items = make([]AckItem, m)
	for i := range c.Items {
		it := &c.Items[i]
		if l, err := r.arrayLen(); err != nil || l != 5 {
			return r.fail("acknowledgment")
		}
		if it.TxID, err = r.str(); err != nil {
			return err
		}
		j, err := r.uint()
		if err != nil || j >= uint64(len(pairs)) {
			return r.fail("acknowledgment's partition and lease")
		}
		pairs[j].setOn(it)
		if err := decodeAckOutcome(r, it); err != nil {
			return err
		}
	}
	if withOffsets {
		return decodeOffsets(r, c.Items)
	}
	return nil
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (c *AckPacked) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeVia(dec, c.decodeFrom) }
