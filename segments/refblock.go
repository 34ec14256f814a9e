package segments

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Blocks of segment references in the segments bucket (schema 7).
//
// When a partition's record is full its references move to the bucket
// (recent.go). Until schema 6 each went under its own key: sixteen Puts,
// each a search from the root and an insert into a leaf, and sixteen keys
// of 16 bytes with 33-byte values, 65 bytes of leaf a reference. With
// 10,000 partitions every message is a segment of its own, so that was a
// Put a message, and the move was about a sixth of applying a push
// (BenchmarkApplyPush, 10,000 partitions side by side: 3.35-3.75 us a
// message, 2.80-2.91 with one Put a move). So the references move as one
// value, a block, under the key of the oldest: the marker byte, then the
// references packed as a record packs them (recentpack.go), the first
// reference's offset a difference from the key's and its time from zero.
//
// A value that does not start with the marker is a single reference, as
// schema 6 and older stored every one; both read alike, and this build
// writes only blocks (an edit of a single rewrites it as a block of one).
//
// Invariants, over one partition's keys in the bucket: every reference of
// a block is of a segment starting at or after the block's key and before
// the next key, in order; so a walk reads the entries in key order and
// each entry's references in order, and the entry holding the segment that
// starts at f is the one with the greatest key at most f.
const (
	// blockMarker starts a block; a single reference starts with
	// refVersion.
	blockMarker = 0xB7
	// blockMax is the most references a block holds. Moves make blocks of
	// recentMax; an insertion (the tail of DeleteMessage's cut) that would
	// take a block past blockMax splits it in two, so a partition whose
	// messages are deleted one by one from the middle of its segments never
	// rewrites a value larger than this.
	blockMax = 2 * recentMax
)

// packBlock is the bucket value holding refs (the record's in-memory form,
// recentEntry bytes each, oldest first), to be stored under the key of
// the first.
func packBlock(refs []byte) []byte {
	// The first reference's time, a difference from zero, takes a full
	// varint; the others about packedEntryHint bytes each.
	b := make([]byte, 1, 1+binary.MaxVarintLen64+(len(refs)/recentEntry)*packedEntryHint)
	b[0] = blockMarker
	return packRefList(b, refs, u64(refs), 0)
}

// eachRef calls fn with each reference the value v stored under
// key88(pid, first) holds, oldest first, until fn returns false, decoding
// as it goes (what a walk needs: no copy of the block, and none of it
// decoded past where the walk stops). It reports whether fn asked for
// more. A block's references must start at first and increase; a single
// reference's offset must be at least 1, where offsets start.
func eachRef(pid, first uint64, v []byte, fn func(first uint64, ref blobRef) (bool, error)) (bool, error) {
	if len(v) == 0 || v[0] != blockMarker {
		ref, err := decodeRef(v)
		if err == nil && first == 0 {
			err = fmt.Errorf("a segment at offset 0: %w", ErrCorrupt)
		}
		if err != nil {
			return false, fmt.Errorf("partition %d segment %d: %w", pid, first, err)
		}
		return fn(first, ref)
	}
	corrupt := func(what string) error {
		return fmt.Errorf("partition %d block of segment references at %d: %s: %w", pid, first, what, ErrCorrupt)
	}
	r := refReader{b: v[1:], first: first}
	var prev uint64
	for n := 0; ; n++ {
		f, ref, ok, err := r.next()
		switch {
		case err != nil:
			return false, corrupt(err.Error())
		case !ok && n == 0:
			return false, corrupt("no reference")
		case !ok:
			return true, nil
		case n == blockMax:
			return false, corrupt(fmt.Sprintf("more than the %d references it may hold", blockMax))
		case n == 0 && f != first:
			return false, corrupt(fmt.Sprintf("the first starts at %d", f))
		case f <= prev:
			return false, corrupt(fmt.Sprintf("segment %d after %d", f, prev))
		}
		prev = f
		if more, err := fn(f, ref); err != nil || !more {
			return false, err
		}
	}
}

// entryRefs decodes the value v stored under key88(pid, first) into the
// record's in-memory form, checked as eachRef checks it: what an edit or a
// walk backwards needs. The result is the caller's (it aliases nothing of
// bbolt's).
func entryRefs(pid, first uint64, v []byte) ([]byte, error) {
	n := 1 // a single reference
	if len(v) > 0 && v[0] == blockMarker {
		n = min(blockMax, len(v)/6) // a packed reference takes 6 bytes or more
	}
	refs := make([]byte, 0, n*recentEntry)
	_, err := eachRef(pid, first, v, func(f uint64, ref blobRef) (bool, error) {
		refs = ref.appendTo(binary.BigEndian.AppendUint64(refs, f))
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return refs, nil
}

// refIndex is the position in refs (in-memory form) of the reference of
// the segment starting at first, or -1.
func refIndex(refs []byte, first uint64) int {
	for i := 0; i < len(refs); i += recentEntry {
		if u64(refs[i:]) == first {
			return i / recentEntry
		}
	}
	return -1
}

// entryAt is the bucket entry of pid with the greatest key at most first
// (the one that holds the segment starting at first, if the bucket does):
// its key's offset and its references. ok is false when there is none.
func (t *Tx) entryAt(pid, first uint64) (key uint64, refs []byte, ok bool, err error) {
	c := t.cursor(bSegments)
	prefix := be64(pid)
	k, v := c.Seek(key88(pid, first))
	if k == nil || !bytes.HasPrefix(k, prefix) || u64(k[8:]) > first {
		k, v = c.Prev()
	}
	if k == nil || len(k) != 16 || !bytes.HasPrefix(k, prefix) {
		return 0, nil, false, nil
	}
	key = u64(k[8:])
	refs, err = entryRefs(pid, key, v)
	return key, refs, err == nil, err
}

// putEntry stores refs as the entry that was under key88(pid, key): under
// the key of its first reference (deleting the old key when that moved),
// or nowhere when refs is empty.
func (t *Tx) putEntry(pid, key uint64, refs []byte) error {
	if len(refs) == 0 || u64(refs) != key {
		if err := t.del(bSegments, key88(pid, key)); err != nil {
			return err
		}
		if len(refs) == 0 {
			return nil
		}
	}
	return t.put(bSegments, key88(pid, u64(refs)), packBlock(refs))
}

// locate is the bucket entry that would hold pid's segment starting at
// first (entryAt) and the position of that segment's reference in it, -1
// when the bucket holds none.
func (t *Tx) locate(pid, first uint64) (key uint64, refs []byte, i int, err error) {
	key, refs, ok, err := t.entryAt(pid, first)
	if !ok {
		return 0, nil, -1, err
	}
	return key, refs, refIndex(refs, first), nil
}

// bucketRef is the stored reference of pid's segment starting at first in
// the bucket, or nil.
func (t *Tx) bucketRef(pid, first uint64) ([]byte, error) {
	_, refs, i, err := t.locate(pid, first)
	if i < 0 {
		return nil, err
	}
	return refs[i*recentEntry+8 : (i+1)*recentEntry], nil
}

// editBucketRef replaces (ref not nil) or removes the reference of pid's
// segment starting at first in the bucket. It reports whether the bucket
// held one.
func (t *Tx) editBucketRef(pid, first uint64, ref []byte) (bool, error) {
	key, refs, i, err := t.locate(pid, first)
	if i < 0 {
		return false, err
	}
	e := refs[i*recentEntry : (i+1)*recentEntry]
	if ref != nil {
		copy(e[8:], ref)
	} else {
		refs = append(refs[:i*recentEntry], refs[(i+1)*recentEntry:]...)
	}
	return true, t.putEntry(pid, key, refs)
}

// insertBucketRef stores the reference of a new segment of pid starting at
// first into the bucket entry whose range it falls in (a new block when it
// is older than every entry), splitting a block that outgrows blockMax.
func (t *Tx) insertBucketRef(pid, first uint64, ref []byte) error {
	key, refs, ok, err := t.entryAt(pid, first)
	if err != nil {
		return err
	}
	e := append(be64(first), ref...)
	if !ok {
		return t.putEntry(pid, first, e)
	}
	i := 0
	for ; i < len(refs); i += recentEntry {
		if f := u64(refs[i:]); f == first {
			return fmt.Errorf("partition %d segment %d inserted twice: %w", pid, first, ErrCorrupt)
		} else if f > first {
			break
		}
	}
	refs = append(refs[:i], append(e, refs[i:]...)...)
	if n := len(refs) / recentEntry; n > blockMax {
		half := (n / 2) * recentEntry
		if err := t.putEntry(pid, u64(refs[half:]), refs[half:]); err != nil {
			return err
		}
		refs = refs[:half]
	}
	return t.putEntry(pid, key, refs)
}
