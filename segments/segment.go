package segments

import (
	"encoding/binary"
	"fmt"
)

// A segment is the messages of one commit to one partition: contiguous
// offsets, one createdAt. It is stored as a single value so that a push of N
// messages costs one B+tree insert, a pop reads a batch with one cursor seek,
// and retention deletes whole segments.
//
// Blob layout (version 1):
//
//	u8  version
//	i64 createdAt (unix µs)
//	u64 baseSeq   (message i has id UUIDv7(createdAt ms, baseSeq+i))
//	u32 count
//	count × message:
//	    u8 flags (flagEncrypted, flagTrace, flagSub)
//	    uvarint len, txid
//	    [16] traceId         if flagTrace
//	    uvarint len, sub     if flagSub
//	    uvarint len, payload
const segmentVersion = 1

const segmentHeader = 1 + 8 + 8 + 4

const (
	flagEncrypted = 1 << iota
	flagTrace
	flagSub
)

// Message is one stored message as handed in by a push and out by a read.
// Payload is the JSON value as pushed, or an encryption envelope when
// Encrypted; this package never looks inside it.
type Message struct {
	TxID        string
	TraceID     [16]byte
	HasTrace    bool
	ProducerSub string
	Payload     []byte
	Encrypted   bool
}

// StoredMessage is a message read back with its position and identity.
type StoredMessage struct {
	Message
	Offset    uint64
	ID        [16]byte
	CreatedAt int64
}

// SegmentHeader is the fixed part of a segment.
type SegmentHeader struct {
	CreatedAt int64
	BaseSeq   uint64
	Count     uint32
}

// segmentSize bounds the encoded size of a segment of msgs.
func segmentSize(msgs []Message) int {
	size := segmentHeader
	for i := range msgs {
		size += 1 + 3*binary.MaxVarintLen32 + len(msgs[i].TxID) + 16 + len(msgs[i].ProducerSub) + len(msgs[i].Payload)
	}
	return size
}

// EncodeSegment appends the blob for msgs to dst.
func EncodeSegment(dst []byte, createdAt int64, baseSeq uint64, msgs []Message) []byte {
	if size := segmentSize(msgs); cap(dst)-len(dst) < size {
		n := make([]byte, len(dst), len(dst)+size)
		copy(n, dst)
		dst = n
	}
	dst = append(dst, segmentVersion)
	dst = binary.BigEndian.AppendUint64(dst, uint64(createdAt))
	dst = binary.BigEndian.AppendUint64(dst, baseSeq)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(msgs)))
	for i := range msgs {
		m := &msgs[i]
		var flags byte
		if m.Encrypted {
			flags |= flagEncrypted
		}
		if m.HasTrace {
			flags |= flagTrace
		}
		if m.ProducerSub != "" {
			flags |= flagSub
		}
		dst = append(dst, flags)
		dst = binary.AppendUvarint(dst, uint64(len(m.TxID)))
		dst = append(dst, m.TxID...)
		if m.HasTrace {
			dst = append(dst, m.TraceID[:]...)
		}
		if m.ProducerSub != "" {
			dst = binary.AppendUvarint(dst, uint64(len(m.ProducerSub)))
			dst = append(dst, m.ProducerSub...)
		}
		dst = binary.AppendUvarint(dst, uint64(len(m.Payload)))
		dst = append(dst, m.Payload...)
	}
	return dst
}

// DecodeSegmentHeader reads the fixed part of a blob.
func DecodeSegmentHeader(b []byte) (SegmentHeader, error) {
	if len(b) < segmentHeader || b[0] != segmentVersion {
		return SegmentHeader{}, fmt.Errorf("segment header: %w", ErrCorrupt)
	}
	return SegmentHeader{
		CreatedAt: int64(binary.BigEndian.Uint64(b[1:])),
		BaseSeq:   binary.BigEndian.Uint64(b[9:]),
		Count:     binary.BigEndian.Uint32(b[17:]),
	}, nil
}

// SegmentReader walks the messages of one blob. The slices it returns alias
// the blob (see Tx.Scan for how long a stored blob's bytes stay as they are).
type SegmentReader struct {
	Header SegmentHeader
	b      []byte
	i      uint32
}

// NewSegmentReader validates the header of b.
func NewSegmentReader(b []byte) (*SegmentReader, error) {
	r := new(SegmentReader)
	if err := r.reset(b); err != nil {
		return nil, err
	}
	return r, nil
}

// reset points r at the start of blob b, validating its header.
func (r *SegmentReader) reset(b []byte) error {
	h, err := DecodeSegmentHeader(b)
	if err != nil {
		return err
	}
	*r = SegmentReader{Header: h, b: b[segmentHeader:]}
	return nil
}

// Next decodes the next message into m and returns its index in the segment,
// or ok=false at the end. A malformed blob yields ErrCorrupt.
func (r *SegmentReader) Next(m *Message) (idx uint32, ok bool, err error) {
	var f rawMessage
	if idx, ok, err = r.next(&f); !ok || err != nil {
		return idx, ok, err
	}
	m.TxID = string(f.txID)
	m.HasTrace = f.flags&flagTrace != 0
	m.TraceID = [16]byte{}
	copy(m.TraceID[:], f.trace)
	m.ProducerSub = string(f.sub)
	m.Payload = f.payload
	m.Encrypted = f.flags&flagEncrypted != 0
	return idx, true, nil
}

// NextTxID is Next for a walk that needs only transaction ids: the id
// aliases the blob and nothing is allocated.
func (r *SegmentReader) NextTxID() (idx uint32, txID []byte, ok bool, err error) {
	var f rawMessage
	idx, ok, err = r.next(&f)
	return idx, f.txID, ok, err
}

// rawMessage is one encoded message's fields, aliasing the blob.
type rawMessage struct {
	flags                     byte
	txID, trace, sub, payload []byte
}

func (r *SegmentReader) next(f *rawMessage) (idx uint32, ok bool, err error) {
	if r.i >= r.Header.Count {
		if len(r.b) != 0 {
			return 0, false, fmt.Errorf("segment: %d trailing bytes: %w", len(r.b), ErrCorrupt)
		}
		return 0, false, nil
	}
	b := r.b
	if len(b) < 1 {
		return 0, false, fmt.Errorf("segment: truncated message %d: %w", r.i, ErrCorrupt)
	}
	f.flags = b[0]
	if f.flags&^(flagEncrypted|flagTrace|flagSub) != 0 {
		return 0, false, fmt.Errorf("segment: unknown flags %#x: %w", f.flags, ErrCorrupt)
	}
	b = b[1:]
	if f.txID, b, err = readBytes(b); err != nil {
		return 0, false, err
	}
	if f.flags&flagTrace != 0 {
		if len(b) < 16 {
			return 0, false, fmt.Errorf("segment: truncated trace id: %w", ErrCorrupt)
		}
		f.trace, b = b[:16], b[16:]
	}
	if f.flags&flagSub != 0 {
		if f.sub, b, err = readBytes(b); err != nil {
			return 0, false, err
		}
	}
	if f.payload, b, err = readBytes(b); err != nil {
		return 0, false, err
	}
	r.b = b
	idx = r.i
	r.i++
	return idx, true, nil
}

func readBytes(b []byte) (field, rest []byte, err error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, fmt.Errorf("segment: bad length prefix: %w", ErrCorrupt)
	}
	return b[w : w+int(n)], b[w+int(n):], nil
}

// MessageID builds the UUIDv7-shaped id of the message with sequence seq
// committed at createdAt (unix µs): 48 bits of milliseconds, then the
// sequence in the 74 remaining free bits. Within a partition both parts grow,
// so ids sort in push order; across the cluster the sequence makes them unique.
func MessageID(createdAt int64, seq uint64) [16]byte {
	var id [16]byte
	ms := uint64(createdAt / 1000)
	id[0], id[1], id[2] = byte(ms>>40), byte(ms>>32), byte(ms>>24)
	id[3], id[4], id[5] = byte(ms>>16), byte(ms>>8), byte(ms)
	// rand_a (12 bits) takes the top 2 bits of seq; rand_b (62 bits) the rest.
	id[6] = 0x70
	id[7] = byte(seq >> 62)
	binary.BigEndian.PutUint64(id[8:], seq&(1<<62-1))
	id[8] |= 0x80 // RFC 9562 variant
	return id
}
