package segments

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// recordCompact starts a partition record as this build stores it
// (schema 8): the marker, then every field as a varint, most as a
// difference from a field before it, then the references packed as
// packRefs packs them. A record of an older build starts with the high
// byte of its big-endian partition number, which is 0 below 2^56
// partitions, so the marker tells the two apart.
//
// Why: over many partitions every push rewrites its partition's record,
// and bbolt writes back each leaf a transaction changed. The older form
// spent 112 bytes on fixed-width fields (and repeated the queue number and
// name the key already holds); in this one they take about 40, so records
// fill fewer leaves and a transaction writes fewer pages.
const recordCompact = 0xC8

// compactHint is the room marshal makes before the references: an
// ordinary record's fields take 39 bytes (TestCompactRecordRoundTrip), one
// in a window burst about a dozen more; a larger one grows the buffer.
const compactHint = 52

// marshal encodes p in this build's form. The queue number and the name
// are the key's (qid(8) name), so they are not stored again.
//
// Layout after the marker: ID, UUID (16 bytes), CreatedAt, NextOffset,
// NextOffset-FirstOffset, Messages, Bytes, Segments,
// LastCreatedAt-CreatedAt, NextOffset-IDsIndexedFrom, then a byte saying
// whether a window burst is recorded and, if so, LastCreatedAt-WindowMark,
// WindowCount and NextOffset-WindowFirst; then the references. Differences
// are signed varints computed with wrapping arithmetic, so every value
// round-trips whatever its relation to the others; IDsIndexedFrom never
// passes NextOffset (idmark.go), so its difference is unsigned.
func (p *Partition) marshal() []byte {
	return p.appendMarshal(make([]byte, 0, compactHint+p.recentCount()*packedEntryHint))
}

// appendMarshal appends p's record to b.
func (p *Partition) appendMarshal(b []byte) []byte {
	b = append(b, recordCompact)
	b = binary.AppendUvarint(b, p.ID)
	b = append(b, p.UUID[:]...)
	b = binary.AppendVarint(b, p.CreatedAt)
	b = binary.AppendUvarint(b, p.NextOffset)
	b = binary.AppendVarint(b, int64(p.NextOffset-p.FirstOffset))
	b = binary.AppendUvarint(b, p.Messages)
	b = binary.AppendUvarint(b, p.Bytes)
	b = binary.AppendUvarint(b, p.Segments)
	b = binary.AppendVarint(b, p.LastCreatedAt-p.CreatedAt)
	b = binary.AppendUvarint(b, p.NextOffset-p.IDsIndexedFrom)
	if p.WindowMark == 0 && p.WindowCount == 0 && p.WindowFirst == 0 {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.AppendVarint(b, p.LastCreatedAt-p.WindowMark)
		b = binary.AppendUvarint(b, p.WindowCount)
		b = binary.AppendVarint(b, int64(p.NextOffset-p.WindowFirst))
	}
	return p.packRefs(b)
}

// unmarshalCompact decodes a record marshal wrote under key k (at least 8
// bytes, checked by the caller).
func (p *Partition) unmarshalCompact(k, b []byte) error {
	r := fieldReader{b: b[1:]}
	p.ID = r.uvarint("ID")
	copy(p.UUID[:], r.take(16, "UUID"))
	p.CreatedAt = r.varint("CreatedAt")
	p.NextOffset = r.uvarint("NextOffset")
	p.FirstOffset = p.NextOffset - uint64(r.varint("FirstOffset"))
	p.Messages = r.uvarint("Messages")
	p.Bytes = r.uvarint("Bytes")
	p.Segments = r.uvarint("Segments")
	p.LastCreatedAt = p.CreatedAt + r.varint("LastCreatedAt")
	behind := r.uvarint("IDsIndexedFrom")
	p.IDsIndexedFrom = p.NextOffset - behind
	p.WindowMark, p.WindowCount, p.WindowFirst = 0, 0, 0
	switch w := r.take(1, "window flag"); {
	case r.err != nil:
	case w[0] == 1:
		p.WindowMark = p.LastCreatedAt - r.varint("WindowMark")
		p.WindowCount = r.uvarint("WindowCount")
		p.WindowFirst = p.NextOffset - uint64(r.varint("WindowFirst"))
	case w[0] != 0:
		r.fail(fmt.Sprintf("window flag %d unknown", w[0]))
	}
	if r.err == nil && behind > p.NextOffset {
		r.fail("IDsIndexedFrom past the next offset")
	}
	if r.err != nil {
		return fmt.Errorf("partition record %x: %s: %w", k, r.err, ErrCorrupt)
	}
	p.QueueID, p.Name = u64(k), string(k[8:])
	p.recent = nil
	if len(r.b) > 0 {
		if err := p.unpackRefs(r.b); err != nil {
			return err
		}
	}
	return checkRecent(p.ID, p.recent)
}

// fieldReader reads a record's fields in order; the first failure sticks,
// naming its field, and later reads return zero.
type fieldReader struct {
	b   []byte
	err error
}

func (r *fieldReader) fail(what string) {
	if r.err == nil {
		r.err = errors.New(what)
	}
}

func (r *fieldReader) uvarint(field string) uint64 { return readVar(r, field, binary.Uvarint) }

func (r *fieldReader) varint(field string) int64 { return readVar(r, field, binary.Varint) }

// readVar reads one varint with decode (binary.Uvarint or binary.Varint).
func readVar[T int64 | uint64](r *fieldReader, field string, decode func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := decode(r.b)
	if n <= 0 {
		r.fail(field + " cut short or malformed")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *fieldReader) take(n int, field string) []byte {
	if r.err != nil || len(r.b) < n {
		r.fail(field + " cut short")
		return make([]byte, n)
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// appendSchema7Fields appends p's fields and name as schema 7 and older
// builds laid them out: fixed-width, big-endian. The digest hashes this
// form whatever form a record is stored in, so a node that still holds
// records of an older build and one that rewrote them agree.
func (p *Partition) appendSchema7Fields(b []byte) []byte {
	for _, v := range []uint64{p.ID, p.QueueID} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	b = append(b, p.UUID[:]...)
	for _, v := range []uint64{uint64(p.CreatedAt), p.NextOffset, p.FirstOffset, p.Messages,
		p.Bytes, p.Segments, uint64(p.LastCreatedAt), uint64(p.WindowMark), p.WindowCount, p.WindowFirst} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return append(b, p.Name...)
}
