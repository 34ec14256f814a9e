package segments

import (
	"encoding/binary"
	"fmt"
)

// recentPacked starts a partition record's references section as this
// build stores it (schema 5). A schema 4 section starts with the high byte
// of a big-endian first offset, which is 0xFF only past 2^63 offsets.
const recentPacked = 0xFF

// packedEntryHint is the room marshal makes for a packed reference: about
// 11 bytes each in the runs measured, so a record is sized once, not for
// the 41 bytes a reference takes in memory; a larger one grows the buffer.
const packedEntryHint = 16

// packRecent appends p's references section as stored: the marker, then
// for each reference its first offset, file, position in the file, length,
// time and message count as varints, the offset, file and time as signed
// differences from the reference before (the first reference's from the
// record's NextOffset, 0 and LastCreatedAt). A reference takes about 11
// bytes instead of its 41 in memory, and the record about a third of the
// leaf space, so a transaction over many partitions dirties fewer leaves.
// Nothing is appended when p holds no reference.
func (p *Partition) packRecent(b []byte) []byte {
	if len(p.recent) == 0 {
		return b
	}
	b = append(b, recentPacked)
	prevFirst, prevFile, prevAt := p.NextOffset, uint64(0), p.LastCreatedAt
	for i := range p.recentCount() {
		first, ref := p.recentAt(i)
		file := binary.BigEndian.Uint64(ref[1:])
		at := int64(binary.BigEndian.Uint64(ref[21:]))
		b = binary.AppendVarint(b, int64(first-prevFirst))
		b = binary.AppendVarint(b, int64(file-prevFile))
		b = binary.AppendUvarint(b, binary.BigEndian.Uint64(ref[9:]))          // position
		b = binary.AppendUvarint(b, uint64(binary.BigEndian.Uint32(ref[17:]))) // length
		b = binary.AppendVarint(b, at-prevAt)
		b = binary.AppendUvarint(b, uint64(binary.BigEndian.Uint32(ref[29:]))) // count
		prevFirst, prevFile, prevAt = first, file, at
	}
	return b
}

// unpackRecent decodes a packed references section into p.recent, after
// p's fields (NextOffset and LastCreatedAt are its bases). The caller
// checks the order of the references (checkRecent).
func (p *Partition) unpackRecent(b []byte) error {
	bad := func(what string) error {
		return fmt.Errorf("partition %d record: packed segment references: %s: %w", p.ID, what, ErrCorrupt)
	}
	if len(b) < 2 || b[0] != recentPacked {
		return bad("no marker, or a marker and no reference") // packRecent writes neither
	}
	b = b[1:]
	signed := func() (int64, bool) {
		v, n := binary.Varint(b)
		b = b[max(n, 0):]
		return v, n > 0
	}
	unsigned := func(limit uint64) (uint64, bool) {
		v, n := binary.Uvarint(b)
		b = b[max(n, 0):]
		return v, n > 0 && v <= limit
	}
	out := make([]byte, 0, recentMax*recentEntry)
	prevFirst, prevFile, prevAt := p.NextOffset, uint64(0), p.LastCreatedAt
	for len(b) > 0 {
		if len(out) == recentMax*recentEntry {
			return bad(fmt.Sprintf("more than the %d a record holds", recentMax))
		}
		dFirst, ok1 := signed()
		dFile, ok2 := signed()
		pos, ok3 := unsigned(1<<63 - 1)
		ln, ok4 := unsigned(1<<32 - 1)
		dAt, ok5 := signed()
		count, ok6 := unsigned(1<<32 - 1)
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
			return bad("a varint cut short or out of its field's range")
		}
		first, file, at := prevFirst+uint64(dFirst), prevFile+uint64(dFile), prevAt+dAt
		out = binary.BigEndian.AppendUint64(out, first)
		out = blobRef{File: file, Pos: int64(pos), Len: uint32(ln), CreatedAt: at, Count: uint32(count)}.appendTo(out)
		prevFirst, prevFile, prevAt = first, file, at
	}
	p.recent = out
	return nil
}
