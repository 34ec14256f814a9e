package segments

import (
	"bytes"
	"fmt"
	"log/slog"
)

// The transaction-id index answers "which stored message of this partition
// carries this transaction id, newest first" for push deduplication and for
// acks that name a message outside the caller's lease.
//
// A key is pid(8) txid, its value the offset(8) of the id's newest
// occurrence. Schema 2 also kept the message's push time and id sequence in
// the value (24 bytes), so that a duplicate was answered without reading its
// segment; but the index is the bulk of the state file, which every
// snapshot copies, and the lookups that find something are the rare ones (a
// duplicate push, an ack outside the lease). So the value is the offset
// alone, and a lookup that finds one reads the message's segment for the
// rest. Keys keep the id itself: ids are usually sequential per producer
// (counters, UUIDv7), which makes an insert an append to a leaf bbolt has
// dirtied already, where a hashed key would dirty a random leaf per message
// (BenchmarkApplyPush ran three times slower with hashed keys).

// TxRef is a stored message a transaction id resolved to: its offset, when
// it was pushed, and its id sequence.
type TxRef struct {
	Offset   uint64
	PushedAt int64
	Seq      uint64
}

// MessageID is the id of the referenced message.
func (r TxRef) MessageID() [16]byte { return MessageID(r.PushedAt, r.Seq) }

// putTxID points txid at the message at off, its newest occurrence.
func (t *Tx) putTxID(pid uint64, txid string, off uint64) error {
	v := t.value(8)
	putU64(v, off)
	return t.put(bTxIDs, t.scratchKey8(pid, txid), v)
}

// txIDOffset is the offset txid points at, if any.
func (t *Tx) txIDOffset(pid uint64, txid string) (uint64, bool, error) {
	v := t.get(bTxIDs, t.scratchKey8(pid, txid))
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
func (t *Tx) delTxIDIfAt(pid uint64, txid string, from, to uint64) error {
	off, ok, err := t.txIDOffset(pid, txid)
	if err != nil || !ok || off < from || off >= to {
		return err
	}
	return t.del(bTxIDs, t.scratchKey8(pid, txid))
}

// TxID resolves a transaction id in a partition to its newest stored
// occurrence, reading that message's segment for its time and sequence.
func (t *Tx) TxID(pid uint64, txid string) (TxRef, bool, error) {
	off, ok, err := t.txIDOffset(pid, txid)
	if err != nil || !ok {
		return TxRef{}, false, err
	}
	var (
		ref    TxRef
		stored bool
	)
	err = t.walkSegments(pid, off, func(first uint64, _ blobRef, v []byte) (bool, error) {
		if first > off {
			return false, nil
		}
		_, blob, err := t.segmentBlob(v)
		if err != nil {
			return false, err
		}
		r, err := NewSegmentReader(blob)
		if err != nil {
			return false, err
		}
		if off-first < uint64(r.Header.Count) {
			stored = true
			ref = TxRef{Offset: off, PushedAt: r.Header.CreatedAt, Seq: r.Header.BaseSeq + (off - first)}
		}
		return false, nil
	})
	if err != nil {
		return TxRef{}, false, fmt.Errorf("partition %d offset %d: %w", pid, off, err)
	}
	if !stored {
		return TxRef{}, false, fmt.Errorf("transaction-id index points at partition %d offset %d, which is not stored: %w", pid, off, ErrCorrupt)
	}
	return ref, true, nil
}

// migrateTxIDs rewrites a schema 2 transaction-id index (offset, time and
// sequence in each value) to schema 3 (the offset alone), batch keys per
// transaction, and records schema 3 last. Values already 8 bytes long are
// left, so a migration a crash interrupts simply carries on.
func (s *Store) migrateTxIDs(log *slog.Logger, batch int) error {
	log.Info("state file has schema 2: rewriting the transaction-id index")
	next := []byte{} // first key of the next batch; nil once done
	n := 0
	for next != nil {
		err := s.Update(func(t *Tx) error {
			// Collect, then write: a bbolt cursor is not valid across writes.
			var keys, vals [][]byte
			c := t.bucket(bTxIDs).Cursor()
			k, v := c.Seek(next)
			for i := 0; k != nil && i < batch; i++ {
				switch len(v) {
				case 8:
				case 24:
					keys, vals = append(keys, bytes.Clone(k)), append(vals, bytes.Clone(v[:8]))
				default:
					return fmt.Errorf("transaction-id index value of %d bytes at %x: %w", len(v), k, ErrCorrupt)
				}
				k, v = c.Next()
			}
			if k != nil {
				next = bytes.Clone(k)
			} else {
				next = nil
			}
			for i := range keys {
				if err := t.put(bTxIDs, keys[i], vals[i]); err != nil {
					return err
				}
			}
			n += len(keys)
			if next == nil {
				return t.tx.Bucket(bucketMeta).Put(metaSchema, be64(schemaVersion))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("migrate the transaction-id index to schema %d: %w", schemaVersion, err)
		}
		if next != nil {
			log.Info("rewriting the transaction-id index", "entries", n)
		}
	}
	log.Info("transaction-id index rewritten; state file now has schema 3", "entries", n)
	return nil
}
