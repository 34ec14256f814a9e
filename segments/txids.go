package segments

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
)

// The transaction-id index answers "which stored message of this partition
// carries this transaction id, newest first" for push deduplication and for
// acks that name a message outside the caller's lease.
//
// A key is qid(8) txid pid(8) len(txid)(2), its value the offset(8) of the
// id's newest occurrence in that partition (the length last makes the
// encoding unambiguous whatever bytes an id holds). Until schema 3 the key
// was pid(8) txid and the value also held the message's push time and id
// sequence, so that a duplicate was answered without reading its segment.
// Two costs changed that:
//
//   - Size. The index is the bulk of the state file, which every snapshot
//     copies, and only a duplicate push needs more than the offset (an ack
//     outside the lease needs the offset alone: TxIDOffset). So the value is
//     the offset, and TxID reads the 21-byte header of the message's segment
//     for the rest (BenchmarkTxIDLookup: a hit 2.6-3.2 us, a miss 0.5 us).
//   - Pages. Ids are usually sequential per producer (counters, UUIDv7), and
//     a producer spreads its messages over the queue's partitions. Keyed by
//     partition first, each message's key landed in its partition's range,
//     one dirty leaf per message once a push spans many partitions; keyed by
//     queue first, a producer's keys are neighbours whatever the partition.
//     (A fixed-size hash of the id would have dirtied a random leaf per
//     message everywhere: BenchmarkApplyPush ran three times slower.)

// TxRef is a stored message a transaction id resolved to: its offset, when
// it was pushed, and its id sequence.
type TxRef struct {
	Offset   uint64
	PushedAt int64
	Seq      uint64
}

// MessageID is the id of the referenced message.
func (r TxRef) MessageID() [16]byte { return MessageID(r.PushedAt, r.Seq) }

// txIDKey is qid(8) txid pid(8) len(2) in the transaction's scratch key.
func (t *Tx) txIDKey(qid, pid uint64, txid string) []byte {
	k := append(t.keyBuf[:0], 0, 0, 0, 0, 0, 0, 0, 0)
	putU64(k, qid)
	k = append(k, txid...)
	k = binary.BigEndian.AppendUint64(k, pid)
	k = binary.BigEndian.AppendUint16(k, uint16(len(txid)))
	t.keyBuf = k
	return k
}

// putTxID points txid at the message at off, its newest occurrence.
func (t *Tx) putTxID(qid, pid uint64, txid string, off uint64) error {
	if len(txid) > maxTxIDLen {
		return fmt.Errorf("transaction id of %d bytes, at most %d: %w", len(txid), maxTxIDLen, ErrCorrupt)
	}
	v := t.value(8)
	putU64(v, off)
	return t.put(bTxIDs, t.txIDKey(qid, pid, txid), v)
}

// maxTxIDLen is what the key's length field holds; the HTTP layer allows 255.
const maxTxIDLen = 1<<16 - 1

// TxIDOffset is the offset of txid's newest occurrence in a partition (of
// queue qid), if one is stored: one index lookup, no read of the message
// (what an ack needs; TxID adds its time and sequence).
func (t *Tx) TxIDOffset(qid, pid uint64, txid string) (uint64, bool, error) {
	if len(txid) > maxTxIDLen {
		return 0, false, nil
	}
	v := t.get(bTxIDs, t.txIDKey(qid, pid, txid))
	if v == nil {
		return 0, false, nil
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("transaction-id index value of %d bytes: %w", len(v), ErrCorrupt)
	}
	return u64(v), true, nil
}

// delTxIDIfAt removes txid's index entry if it points at an offset in
// [from, to): a message being deleted, not a newer occurrence.
func (t *Tx) delTxIDIfAt(qid, pid uint64, txid string, from, to uint64) error {
	off, ok, err := t.TxIDOffset(qid, pid, txid)
	if err != nil || !ok || off < from || off >= to {
		return err
	}
	return t.del(bTxIDs, t.txIDKey(qid, pid, txid))
}

// TxID resolves a transaction id in partition p to its newest
// stored occurrence, reading the header of that message's segment for its
// time and sequence.
func (t *Tx) TxID(p *Partition, txid string) (TxRef, bool, error) {
	off, ok, err := t.TxIDOffset(p.QueueID, p.ID, txid)
	if err != nil || !ok {
		return TxRef{}, false, err
	}
	ref, stored, err := t.TxRefAt(p, off)
	if err == nil && !stored {
		err = fmt.Errorf("transaction-id index points at partition %d offset %d, which is not stored: %w", p.ID, off, ErrCorrupt)
	}
	return ref, stored, err
}

// TxRefAt is the time and id sequence of the message stored at off in p,
// read from its segment's header, and whether one is stored there.
func (t *Tx) TxRefAt(p *Partition, off uint64) (TxRef, bool, error) {
	pid := p.ID
	var (
		ref    TxRef
		stored bool
	)
	err := t.walkSegments(p, off, func(first uint64, seg blobRef) (bool, error) {
		if first > off || off-first >= uint64(seg.Count) {
			return false, nil
		}
		// The reference has the time; the id sequence is in the blob's
		// header: a pread of 21 bytes, not of the segment.
		h, err := t.segmentHeader(seg)
		if err != nil {
			return false, err
		}
		stored = true
		ref = TxRef{Offset: off, PushedAt: seg.CreatedAt, Seq: h.BaseSeq + (off - first)}
		return false, nil
	})
	if err != nil {
		return TxRef{}, false, fmt.Errorf("partition %d offset %d: %w", pid, off, err)
	}
	return ref, stored, nil
}

// migrateTxIDs rebuilds a schema 2 transaction-id index (bucket "txids":
// pid(8) txid -> offset, time, sequence) as the schema 3 one, batch entries
// per transaction, then drops the old bucket and records the current schema in the
// last one. The new bucket is emptied first, so a migration a crash
// interrupts starts over at the next open.
func (s *Store) migrateTxIDs(log *slog.Logger, batch int) error {
	log.Info("state file has schema 2: rebuilding the transaction-id index")
	err := s.Update(func(t *Tx) error {
		if err := t.tx.DeleteBucket(bucketTxIDs); err != nil {
			return err
		}
		_, err := t.tx.CreateBucket(bucketTxIDs)
		return err
	})
	next := []byte{} // first old key of the next batch; nil once done
	n := 0
	qids := map[uint64]uint64{}
	for err == nil && next != nil {
		err = s.Update(func(t *Tx) error {
			old := t.tx.Bucket(bucketTxIDsV2)
			if old == nil {
				return fmt.Errorf("schema 2 state without its %s bucket: %w", bucketTxIDsV2, ErrCorrupt)
			}
			c := old.Cursor()
			k, v := c.Seek(next)
			for i := 0; k != nil && i < batch; i++ {
				if len(k) < 8 || len(v) != 24 {
					return fmt.Errorf("schema 2 transaction-id entry %x: %w", k, ErrCorrupt)
				}
				pid := u64(k)
				qid, ok := qids[pid]
				if !ok {
					rec := t.get(bPartIDs, k[:8])
					if len(rec) < 8 {
						return fmt.Errorf("transaction-id entry of unknown partition %d: %w", pid, ErrCorrupt)
					}
					qid = u64(rec)
					qids[pid] = qid
				}
				// Writes go to the other bucket: this cursor stays valid.
				if err := t.putTxID(qid, pid, string(k[8:]), u64(v)); err != nil {
					return err
				}
				n++
				k, v = c.Next()
			}
			if k != nil {
				next = bytes.Clone(k)
				return nil
			}
			next = nil
			if err := t.tx.DeleteBucket(bucketTxIDsV2); err != nil {
				return err
			}
			return t.tx.Bucket(bucketMeta).Put(metaSchema, be64(schemaVersion))
		})
		if err == nil && next != nil {
			log.Info("rebuilding the transaction-id index", "entries", n)
		}
	}
	if err != nil {
		return fmt.Errorf("migrate the transaction-id index to schema %d: %w", schemaVersion, err)
	}
	log.Info("transaction-id index rebuilt", "schema", schemaVersion, "entries", n)
	return nil
}
