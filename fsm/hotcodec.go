package fsm

import (
	"errors"

	"github.com/vmihailenco/msgpack/v5"
)

// Hand-written msgpack for the commands on the hot path. The bytes are
// ordinary msgpack (arrays, strings, bins, booleans, integers); writing them
// by hand avoids reflection, and reading them with mpReader lets payloads
// alias the log entry instead of being copied (the segment encoder copies
// them once into the stored blob).
//
// Push:  [ [ [queue, partition, txid, traceId(bin16|nil), producerSub, payload(bin), encrypted], ... ] ]
// Ack:   [ group, [ [txid, partitionId(bin16), partitionOK, leaseId(bin16|nil), hasLease, status, statusText, error], ... ] ]
// AckPacked and AckAt (what nodes now write for an acknowledgment): ackpacked.go, ackat.go.

func encodeItem(enc *msgpack.Encoder, it *PushItem) error {
	var trace []byte
	if it.HasTrace {
		trace = it.TraceID[:]
	}
	return errors.Join(
		enc.EncodeArrayLen(7),
		enc.EncodeString(it.Queue),
		enc.EncodeString(it.Partition),
		enc.EncodeString(it.TxID),
		enc.EncodeBytes(trace),
		enc.EncodeString(it.ProducerSub),
		enc.EncodeBytes(it.Payload),
		enc.EncodeBool(it.Encrypted),
	)
}

// itemsSizeHint bounds what encodeItems writes: the list's header (at most
// 5 bytes), and for each item its array header (1 byte for 7 fields) and
// its seven fields, each with a msgpack header of at most 5 bytes.
func itemsSizeHint(items []PushItem) int {
	n := 5
	for i := range items {
		it := &items[i]
		n += 1 + 7*5 + len(it.Queue) + len(it.Partition) + len(it.TxID) + len(it.ProducerSub) + len(it.Payload)
		if it.HasTrace {
			n += len(it.TraceID)
		}
	}
	return n
}

func encodeItems(enc *msgpack.Encoder, items []PushItem) error {
	if err := enc.EncodeArrayLen(len(items)); err != nil {
		return err
	}
	for i := range items {
		if err := encodeItem(enc, &items[i]); err != nil {
			return err
		}
	}
	return nil
}

func decodeItems(r *mpReader) ([]PushItem, error) {
	n, err := r.arrayLenOf(8, "item count")
	if err != nil {
		return nil, err
	}
	items := make([]PushItem, n)
	var names []string // queue and partition names seen so far
	for i := range items {
		it := &items[i]
		if l, err := r.arrayLen(); err != nil || l != 7 {
			return nil, r.fail("push item")
		}
		var trace []byte
		if it.Queue, err = r.strFrom(&names); err != nil {
			return nil, err
		}
		if it.Partition, err = r.strFrom(&names); err != nil {
			return nil, err
		}
		if it.TxID, err = r.str(); err != nil {
			return nil, err
		}
		if trace, err = r.bin(); err != nil {
			return nil, err
		}
		switch len(trace) {
		case 0:
		case 16:
			it.HasTrace = true
			copy(it.TraceID[:], trace)
		default:
			return nil, r.fail("trace id")
		}
		if it.ProducerSub, err = r.str(); err != nil {
			return nil, err
		}
		if it.Payload, err = r.bin(); err != nil {
			return nil, err
		}
		if it.Encrypted, err = r.bool(); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// encodedSizeHint bounds the body EncodeMsgpack writes (FrameCommand).
func (c *Push) encodedSizeHint() int { return 1 + itemsSizeHint(c.Items) }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (c *Push) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeArrayLen(1); err != nil {
		return err
	}
	return encodeItems(enc, c.Items)
}

func (c *Push) decodeFrom(r *mpReader) error {
	if n, err := r.arrayLen(); err != nil || n != 1 {
		return r.fail("push")
	}
	items, err := decodeItems(r)
	c.Items = items
	return err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (c *Push) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeVia(dec, c.decodeFrom) }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (c *Ack) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := errors.Join(enc.EncodeArrayLen(2), enc.EncodeString(c.Group), enc.EncodeArrayLen(len(c.Items))); err != nil {
		return err
	}
	for i := range c.Items {
		it := &c.Items[i]
		err := errors.Join(enc.EncodeArrayLen(8), enc.EncodeString(it.TxID),
			encodeAckAddress(enc, it.PartitionID[:], it.PartitionOK, it.LeaseID[:], it.HasLease),
			encodeAckOutcome(enc, it))
		if err != nil {
			return err
		}
	}
	return nil
}

// ackAddress is the partition and lease an acknowledgment names; both formats write
// it as partitionId(bin16), partitionOK, leaseId(bin16|nil), hasLease.
type ackAddress struct {
	partition   [16]byte
	partitionOK bool
	lease       [16]byte
	hasLease    bool
}

func addressOf(it *AckItem) ackAddress {
	t := ackAddress{partition: it.PartitionID, partitionOK: it.PartitionOK, hasLease: it.HasLease}
	if it.HasLease {
		t.lease = it.LeaseID
	}
	return t
}

func (t *ackAddress) setOn(it *AckItem) {
	it.PartitionID, it.PartitionOK, it.LeaseID, it.HasLease = t.partition, t.partitionOK, t.lease, t.hasLease
}

// encodeAckAddress takes the fields as slices of the caller's arrays, so
// that encoding an item copies nothing to the heap.
func encodeAckAddress(enc *msgpack.Encoder, partition []byte, partitionOK bool, lease []byte, hasLease bool) error {
	if !hasLease {
		lease = nil
	}
	return errors.Join(enc.EncodeBytes(partition), enc.EncodeBool(partitionOK), enc.EncodeBytes(lease),
		enc.EncodeBool(hasLease))
}

func decodeAckAddress(r *mpReader) (t ackAddress, err error) {
	if t.partition, err = r.uuid(); err != nil {
		return t, err
	}
	if t.partitionOK, err = r.bool(); err != nil {
		return t, err
	}
	if t.lease, err = r.uuid(); err != nil {
		return t, err
	}
	t.hasLease, err = r.bool()
	return t, err
}

// An acknowledgment ends, in both formats, with status, statusText, error.
func encodeAckOutcome(enc *msgpack.Encoder, it *AckItem) error {
	return errors.Join(enc.EncodeUint(uint64(it.Status)), enc.EncodeString(it.StatusText), enc.EncodeString(it.Error))
}

func decodeAckOutcome(r *mpReader, it *AckItem) error {
	st, err := r.uint()
	if err != nil || st > 255 {
		return r.fail("ack status")
	}
	it.Status = uint8(st)
	if it.StatusText, err = r.str(); err != nil {
		return err
	}
	it.Error, err = r.str()
	return err
}

func (c *Ack) decodeFrom(r *mpReader) error {
	if n, err := r.arrayLen(); err != nil || n != 2 {
		return r.fail("ack")
	}
	var err error
	if c.Group, err = r.str(); err != nil {
		return err
	}
	n, err := r.arrayLenOf(9, "acknowledgment count")
	if err != nil {
		return err
	}
	c.Items = make([]AckItem, n)
	for i := range c.Items {
		it := &c.Items[i]
		if l, err := r.arrayLen(); err != nil || l != 8 {
			return r.fail("acknowledgment")
		}
		if it.TxID, err = r.str(); err != nil {
			return err
		}
		target, err := decodeAckAddress(r)
		if err != nil {
			return err
		}
		target.setOn(it)
		if err := decodeAckOutcome(r, it); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (c *Ack) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeVia(dec, c.decodeFrom) }

// decodeVia runs a hand-written decoder on the next raw value of dec (a
// fresh copy, so aliasing it is safe).
func decodeVia(dec *msgpack.Decoder, fn func(*mpReader) error) error {
	raw, err := dec.DecodeRaw()
	if err != nil {
		return err
	}
	r := &mpReader{b: raw}
	if err := fn(r); err != nil {
		return err
	}
	if r.i != len(r.b) {
		return r.fail("trailing data")
	}
	return nil
}

// fastDecoder is implemented by commands with a zero-copy decoder.
type fastDecoder interface {
	decodeFrom(r *mpReader) error
}
