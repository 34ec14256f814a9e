package segments

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// sectionMarked starts the section after a partition record's name as
// this build stores it (schema 6): the marker, IDsIndexedFrom as a uvarint,
// then the segment references packed (none or more). A record always has
// one, so that a record without it is known to be older.
const sectionMarked = 0xFE

// recentPacked started the section in schema 5: the marker, then at least
// one packed reference. A schema 4 section starts with the high byte of a
// big-endian first offset, which is 0xFE or 0xFF only past 2^63 offsets.
const recentPacked = 0xFF

// sectionHead is the most the section takes before its references: the
// marker and IDsIndexedFrom.
const sectionHead = 1 + binary.MaxVarintLen64

// packedEntryHint is the room marshal makes for a packed reference: about
// 11 bytes each in the runs measured, so a record is sized once, not for
// the 41 bytes a reference takes in memory; a larger one grows the buffer.
const packedEntryHint = 16

// packSection appends the section that follows p's name: the marker,
// IDsIndexedFrom, and p's references packed (packRefs).
func (p *Partition) packSection(b []byte) []byte {
	b = append(b, sectionMarked)
	b = binary.AppendUvarint(b, p.IDsIndexedFrom)
	return p.packRefs(b)
}

// packRefs appends p's references: for each its first offset, file,
// position in the file, length, time and message count as varints, the
// offset, file and time as signed differences from the reference before
// (the first reference's from the record's NextOffset, 0 and
// LastCreatedAt). A reference takes about 11 bytes instead of its 41 in
// memory, and the record about a third of the leaf space, so a transaction
// over many partitions dirties fewer leaves.
func (p *Partition) packRefs(b []byte) []byte {
	return packRefList(b, p.recent, p.NextOffset, p.LastCreatedAt)
}

// packRefList appends refs (in the record's in-memory form, recentEntry
// bytes each) packed as packRefs describes, the first reference's offset
// and time as differences from baseFirst and baseAt.
func packRefList(b, refs []byte, baseFirst uint64, baseAt int64) []byte {
	prevFirst, prevFile, prevAt := baseFirst, uint64(0), baseAt
	for i := 0; i < len(refs); i += recentEntry {
		first := u64(refs[i:])
		r := refFields(refs[i+8 : i+recentEntry]) // checked when the record was read or the reference made
		b = binary.AppendVarint(b, int64(first-prevFirst))
		b = binary.AppendVarint(b, int64(r.File-prevFile))
		b = binary.AppendUvarint(b, uint64(r.Pos))
		b = binary.AppendUvarint(b, uint64(r.Len))
		b = binary.AppendVarint(b, r.CreatedAt-prevAt)
		b = binary.AppendUvarint(b, uint64(r.Count))
		prevFirst, prevFile, prevAt = first, r.File, r.CreatedAt
	}
	return b
}

func (p *Partition) corruptSection(what string) error {
	return fmt.Errorf("partition %d record, after its name: %s: %w", p.ID, what, ErrCorrupt)
}

// unpackSection decodes a schema 6 section (packSection) into
// IDsIndexedFrom and p.recent, after p's fields (NextOffset and
// LastCreatedAt are the references' bases). The caller checks the order of
// the references (checkRecent).
func (p *Partition) unpackSection(b []byte) error {
	if len(b) < 2 || b[0] != sectionMarked {
		return p.corruptSection("no marker, or no IDsIndexedFrom") // packSection writes both
	}
	v, n := binary.Uvarint(b[1:])
	if n <= 0 || v > p.NextOffset {
		return p.corruptSection("IDsIndexedFrom cut short or past the next offset")
	}
	p.IDsIndexedFrom = v
	if refs := b[1+n:]; len(refs) > 0 {
		return p.unpackRefs(refs)
	}
	return nil
}

// unpackRecent decodes a schema 5 section (the marker, then one or more
// packed references) into p.recent.
func (p *Partition) unpackRecent(b []byte) error {
	if len(b) < 2 || b[0] != recentPacked {
		return p.corruptSection("no marker, or a marker and no reference") // schema 5 wrote neither
	}
	return p.unpackRefs(b[1:])
}

// unpackRefs decodes packed references (packRefs) into p.recent.
func (p *Partition) unpackRefs(b []byte) error {
	out, err := unpackRefList(b, p.NextOffset, p.LastCreatedAt, recentMax)
	if err != nil {
		return p.corruptSection(err.Error())
	}
	p.recent = out
	return nil
}

// unpackRefList decodes references packed by packRefList with the same
// bases into the in-memory form, refusing more than limit of them. The
// caller checks their order and the references themselves.
func unpackRefList(b []byte, baseFirst uint64, baseAt int64, limit int) ([]byte, error) {
	// About 11 bytes a packed reference: sized once for what b can hold.
	out := make([]byte, 0, min(limit, len(b)/6+1)*recentEntry)
	r := refReader{b: b, first: baseFirst, at: baseAt}
	for {
		first, ref, ok, err := r.next()
		if err != nil || !ok {
			return out, err
		}
		if len(out) == limit*recentEntry {
			return nil, fmt.Errorf("more than the %d references it may hold", limit)
		}
		out = binary.BigEndian.AppendUint64(out, first)
		out = ref.appendTo(out)
	}
}

// refReader reads references packed by packRefList one at a time: first,
// file and at hold the previous reference's fields, the bases before the
// first.
type refReader struct {
	b           []byte
	first, file uint64
	at          int64
}

// next decodes the next reference; ok is false once b is used up.
func (r *refReader) next() (first uint64, ref blobRef, ok bool, err error) {
	if len(r.b) == 0 {
		return 0, blobRef{}, false, nil
	}
	signed := func() (int64, bool) {
		v, n := binary.Varint(r.b)
		r.b = r.b[max(n, 0):]
		return v, n > 0
	}
	unsigned := func(limit uint64) (uint64, bool) {
		v, n := binary.Uvarint(r.b)
		r.b = r.b[max(n, 0):]
		return v, n > 0 && v <= limit
	}
	dFirst, ok1 := signed()
	dFile, ok2 := signed()
	pos, ok3 := unsigned(1<<63 - 1)
	ln, ok4 := unsigned(1<<32 - 1)
	dAt, ok5 := signed()
	count, ok6 := unsigned(1<<32 - 1)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
		return 0, blobRef{}, false, errors.New("a packed reference's varint cut short or out of its field's range")
	}
	r.first, r.file, r.at = r.first+uint64(dFirst), r.file+uint64(dFile), r.at+dAt
	return r.first, blobRef{File: r.file, Pos: int64(pos), Len: uint32(ln), CreatedAt: r.at, Count: uint32(count)}, true, nil
}
