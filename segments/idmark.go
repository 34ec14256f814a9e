package segments

// Partition.IDsIndexedFrom lets an acknowledgment resolve through the
// transaction-id index without reading the segments of its batch.
//
// Why: an acknowledgment names a message by transaction id, and resolves to
// the id's occurrence inside the group's leased batch if there is one, else
// to the newest (queen-api.md 4.12). The state machine finds the first by
// reading the batch's segments and the second by the index. Over many
// partitions a segment is a message or two, so scanning a batch of 100 took
// about 100 reads of blob files: over 10,000 partitions, a third of a
// follower's CPU in a consume run (docs/performance.md, lesson 36).
//
// The invariant: every message stored at IDsIndexedFrom or later is the
// occurrence of its id that the index names. Then, for a batch starting at
// or after it, an id that occurs in the batch occurs there once and the
// index names that occurrence, and an id that does not occur there is
// resolved by the index either way: the index alone gives every answer the
// scan of the batch gives. A caller that decided so and then appends to the
// partition in the same command decides again (fsm/ack.go, reload).
//
// How it holds. An index entry is written only by AppendSegment, which points
// it at the new message, and removed only with the message it points at
// (delTxIDIfAt). So a stored message x stops being named only at the first
// later append of its id, and until that append the entry named x: that
// append found the id in the index. So an append whose caller looked each
// id up and found none (idsNew) unnames nothing and leaves IDsIndexedFrom
// alone; any other append (an id found, outside its dedup window; a queue
// that does not deduplicate, whose pushes do not look; an OJS move) may
// unname messages below NextOffset and moves IDsIndexedFrom to NextOffset,
// past them. Deleting a message unnames no
// other one: an older occurrence of a deleted id was unnamed already, so it
// lies below IDsIndexedFrom. Records written before schema 6 read as
// IDsIndexedFrom = NextOffset, as if every message they hold might repeat
// an id.
//
// It is derived from the log like every field, but the digest does not
// hash it (it lies after the name, with the segment references): two
// values that both keep the invariant give the same answers.

// IDsIndexed reports whether every message p stores at from or later is the
// occurrence of its transaction id that the index names.
func (p *Partition) IDsIndexed(from uint64) bool { return p.IDsIndexedFrom <= from }
