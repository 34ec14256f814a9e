package segments

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Deduplication outlives a deleted message. A push is a duplicate while its
// transaction id was pushed to the partition within the queue's dedup window
// (queen-api.md 4.13), whether or not that message is still stored: a
// producer retrying after a lost answer must not store it again because a
// retention sweep or a DELETE removed the original meanwhile. The
// transaction-id index holds stored messages only, so a deletion inside the
// window leaves a remembered id here, with the deleted message's time and id
// sequence (a duplicate answers the original's message id) and the time the
// window closes, after which sweeps forget it.
//
// txgone:    qid(8) txid pid(8) len(2) -> createdAt(8) seq(8) expiresAt(8)
// txgone_at: expiresAt(8), then the txgone key -> empty
var (
	bucketTxGone   = []byte("txgone")
	bucketTxGoneAt = []byte("txgone_at")
)

const txGoneValue = 24

// RememberDeletedTxID records that txid's message in partition pid of queue
// qid, pushed at ref.PushedAt with id sequence ref.Seq, was deleted, so that
// a push of the id until expiresAt is still a duplicate. A later deletion of
// the same id replaces the record.
func (t *Tx) RememberDeletedTxID(qid, pid uint64, txid string, ref TxRef, expiresAt int64) error {
	if len(txid) > maxTxIDLen {
		return nil
	}
	key := bytes.Clone(t.txIDKey(qid, pid, txid))
	if _, old, ok, err := t.DeletedTxID(qid, pid, txid); err != nil {
		return err
	} else if ok {
		if err := t.del(bTxGoneAt, append(binary.BigEndian.AppendUint64(nil, uint64(old)), key...)); err != nil {
			return err
		}
	}
	v := make([]byte, 0, txGoneValue)
	v = binary.BigEndian.AppendUint64(v, uint64(ref.PushedAt))
	v = binary.BigEndian.AppendUint64(v, ref.Seq)
	v = binary.BigEndian.AppendUint64(v, uint64(expiresAt))
	if err := t.put(bTxGone, key, v); err != nil {
		return err
	}
	t.goneKnown, t.goneAny = true, true
	return t.put(bTxGoneAt, append(binary.BigEndian.AppendUint64(nil, uint64(expiresAt)), key...), []byte{})
}

// DeletedTxID returns the remembered deletion of txid in partition pid of
// queue qid and when it expires, if there is one. An expired record not yet
// swept is returned too: the caller compares the push time with its window.
func (t *Tx) DeletedTxID(qid, pid uint64, txid string) (TxRef, int64, bool, error) {
	if !t.goneKnown {
		k, _ := t.bucket(bTxGone).Cursor().First()
		t.goneKnown, t.goneAny = true, k != nil
	}
	if !t.goneAny || len(txid) > maxTxIDLen {
		return TxRef{}, 0, false, nil
	}
	v := t.get(bTxGone, t.txIDKey(qid, pid, txid))
	if v == nil {
		return TxRef{}, 0, false, nil
	}
	if len(v) != txGoneValue {
		return TxRef{}, 0, false, fmt.Errorf("deleted transaction id record of %d bytes: %w", len(v), ErrCorrupt)
	}
	return TxRef{PushedAt: int64(u64(v)), Seq: u64(v[8:])}, int64(u64(v[16:])), true, nil
}

// ForgetDeletedTxIDs drops up to max remembered deletions whose window closed
// at or before now, oldest first, and reports how many it dropped and
// whether more are due.
func (t *Tx) ForgetDeletedTxIDs(now int64, max int) (int, bool, error) {
	var due [][]byte
	c := t.bucket(bTxGoneAt).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) < 8 {
			return 0, false, fmt.Errorf("deleted transaction id expiry key %x: %w", k, ErrCorrupt)
		}
		if int64(u64(k)) > now {
			break
		}
		if len(due) == max {
			return t.forgetTxIDs(due)
		}
		due = append(due, bytes.Clone(k))
	}
	n, _, err := t.forgetTxIDs(due)
	return n, false, err
}

// DeletedTxIDsDue reports whether a remembered deletion expired at or
// before now.
func (t *Tx) DeletedTxIDsDue(now int64) (bool, error) {
	k, _ := t.bucket(bTxGoneAt).Cursor().First()
	if k == nil {
		return false, nil
	}
	if len(k) < 8 {
		return false, fmt.Errorf("deleted transaction id expiry key %x: %w", k, ErrCorrupt)
	}
	return int64(u64(k)) <= now, nil
}

// forgetQueueTxIDs drops every remembered deletion of queue qid, whatever
// its expiry. Queue numbers are never reused, so once the queue is deleted no
// push can consult them, and a long dedup window (no bound on it) would keep
// them on disk, and in every snapshot, for that long.
func (t *Tx) forgetQueueTxIDs(qid uint64) error {
	prefix := be64(qid)
	var keys [][]byte
	c := t.bucket(bTxGone).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if len(v) != txGoneValue {
			return fmt.Errorf("deleted transaction id record of %d bytes: %w", len(v), ErrCorrupt)
		}
		// The expiry key is the expiry, then the txgone key (forgetTxIDs).
		keys = append(keys, append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(k)), u64(v[16:])), k...))
	}
	_, _, err := t.forgetTxIDs(keys)
	return err
}

func (t *Tx) forgetTxIDs(keys [][]byte) (int, bool, error) {
	for _, k := range keys {
		if err := t.del(bTxGoneAt, k); err != nil {
			return 0, false, err
		}
		if err := t.del(bTxGone, k[8:]); err != nil {
			return 0, false, err
		}
	}
	return len(keys), true, nil
}

// IndexedTxIDs calls fn with the transaction id and reference of every
// message of p's segment starting at first that its id's index entry names
// (the id's newest occurrence), in offset order: what a deletion of the
// segment takes out of deduplication.
func (t *Tx) IndexedTxIDs(p *Partition, first uint64, fn func(txid string, ref TxRef) error) error {
	v, err := t.segmentRef(p, first)
	if v == nil {
		return err
	}
	ref, err := decodeRef(v)
	if err != nil {
		return fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
	}
	// Only the ids are read: the blob goes through the transaction's
	// scratch buffer, as ScanTxIDs reads it (fn reads no blob).
	blob, err := t.scratchBlob(ref)
	var r SegmentReader
	if err == nil {
		err = r.reset(blob)
	}
	if err != nil {
		return fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
	}
	for {
		idx, txID, ok, err := r.NextTxID()
		if err != nil {
			return fmt.Errorf("partition %d segment %d: %w", p.ID, first, err)
		}
		if !ok {
			return nil
		}
		id, off := string(txID), first+uint64(idx)
		at, indexed, err := t.TxIDOffset(p.QueueID, p.ID, id)
		if err != nil {
			return err
		}
		if !indexed || at != off {
			continue
		}
		if err := fn(id, TxRef{Offset: off, PushedAt: r.Header.CreatedAt, Seq: r.Header.BaseSeq + uint64(idx)}); err != nil {
			return err
		}
	}
}
