package segments

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Trace events (queen-api.md 3.16) are keyed by the message they describe,
// partition then offset, so that whatever deletes a message's segment
// (retention, maxWait, an OJS purge) or its partition (queue deletion)
// deletes its events in the same range walk: DeleteSegment and
// deletePartitionData call deleteTraces. Two indexes serve the other reads:
// trace_order lists every event oldest first (the global bound evicts from
// its head) and trace_names lists each name's events oldest first. How many
// events are kept is the state machine's rule; this file only keeps the
// rows, the indexes and the totals consistent.

// TraceEvent is one event a consumer attached to a stored message.
type TraceEvent struct {
	Seq         uint64   `msgpack:"seq"` // orders events; the id's sequence
	ID          [16]byte `msgpack:"id"`
	PartitionID uint64   `msgpack:"pid"`
	Offset      uint64   `msgpack:"off"`
	TxID        string   `msgpack:"tx"`
	Group       string   `msgpack:"group"`
	Worker      string   `msgpack:"worker"`
	EventType   string   `msgpack:"type"`
	Names       []string `msgpack:"names"`
	Data        []byte   `msgpack:"data"` // a JSON value as sent
	CreatedAt   int64    `msgpack:"created"`
}

// TraceNameRef is one row of the name index.
type TraceNameRef struct {
	Name        string
	Seq         uint64
	PartitionID uint64
	Offset      uint64
	CreatedAt   int64
}

// Keys of the meta bucket for the trace totals.
var (
	metaTraceCount = []byte("trace_count") // events stored
	metaTraceBytes = []byte("trace_bytes") // sum of their encoded records
)

func traceKey(pid, off, seq uint64) []byte {
	k := make([]byte, 24)
	putU64(k, pid)
	putU64(k[8:], off)
	putU64(k[16:], seq)
	return k
}

func traceNameKey(name string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(appendName(nil, name), seq)
}

// TraceTotals reports how many trace events are stored and their size.
func (t *Tx) TraceTotals() (count, size uint64) {
	return t.metaU64(metaTraceCount), t.metaU64(metaTraceBytes)
}

// AddTrace stores ev (Seq, PartitionID and Offset set) with its index rows.
func (t *Tx) AddTrace(ev *TraceEvent) error {
	v := marshalMsgpack(ev)
	if err := t.put(bTraces, traceKey(ev.PartitionID, ev.Offset, ev.Seq), v); err != nil {
		return err
	}
	loc := key88(ev.PartitionID, ev.Offset)
	if err := t.put(bTraceOrder, be64(ev.Seq), loc); err != nil {
		return err
	}
	for _, name := range ev.Names {
		ref := binary.BigEndian.AppendUint64(key88(ev.PartitionID, ev.Offset), uint64(ev.CreatedAt))
		if err := t.put(bTraceNames, traceNameKey(name, ev.Seq), ref); err != nil {
			return err
		}
	}
	count, size := t.TraceTotals()
	if err := t.putMetaU64(metaTraceCount, count+1); err != nil {
		return err
	}
	return t.putMetaU64(metaTraceBytes, size+uint64(len(v)))
}

// MessageTraces walks the events of the message at (pid, off), oldest
// first, until fn returns false.
func (t *Tx) MessageTraces(pid, off uint64, fn func(*TraceEvent) (bool, error)) error {
	prefix := key88(pid, off)
	return forEachRecord(t, bTraces, prefix, prefix, func(_ []byte, ev *TraceEvent) (bool, error) { return fn(ev) })
}

// Trace loads one event, nil when it is not stored.
func (t *Tx) Trace(pid, off, seq uint64) (*TraceEvent, error) {
	v := t.get(bTraces, traceKey(pid, off, seq))
	if v == nil {
		return nil, nil
	}
	ev := new(TraceEvent)
	if err := unmarshalMsgpack(v, ev); err != nil {
		return nil, fmt.Errorf("trace event %d of partition %d offset %d: %w", seq, pid, off, err)
	}
	return ev, nil
}

// OldestTrace locates the oldest stored event; ok is false when none is.
func (t *Tx) OldestTrace() (pid, off, seq uint64, ok bool, err error) {
	k, v := t.bucket(bTraceOrder).Cursor().First()
	if k == nil {
		return 0, 0, 0, false, nil
	}
	if len(k) != 8 || len(v) != 16 {
		return 0, 0, 0, false, fmt.Errorf("trace order row %x: %w", k, ErrCorrupt)
	}
	return u64(v), u64(v[8:]), u64(k), true, nil
}

// DeleteTrace removes one event and its index rows; a missing one is no error.
func (t *Tx) DeleteTrace(pid, off, seq uint64) error {
	key := traceKey(pid, off, seq)
	v := t.get(bTraces, key)
	if v == nil {
		return nil
	}
	size := uint64(len(v))
	ev := new(TraceEvent)
	if err := unmarshalMsgpack(v, ev); err != nil {
		return fmt.Errorf("trace event %d of partition %d offset %d: %w", seq, pid, off, err)
	}
	for _, name := range ev.Names {
		if err := t.del(bTraceNames, traceNameKey(name, seq)); err != nil {
			return err
		}
	}
	if err := t.del(bTraceOrder, be64(seq)); err != nil {
		return err
	}
	if err := t.del(bTraces, key); err != nil {
		return err
	}
	count, total := t.TraceTotals()
	if count == 0 || total < size {
		return fmt.Errorf("trace totals %d events, %d bytes, below a stored event: %w", count, total, ErrCorrupt)
	}
	if err := t.putMetaU64(metaTraceCount, count-1); err != nil {
		return err
	}
	return t.putMetaU64(metaTraceBytes, total-size)
}

// deleteTraces removes the events of partition pid's offsets [from, to).
// A partition without events costs one seek.
func (t *Tx) deleteTraces(pid, from, to uint64) error {
	var keys [][3]uint64
	c := t.bucket(bTraces).Cursor()
	for k, _ := c.Seek(key88(pid, from)); k != nil; k, _ = c.Next() {
		if len(k) != 24 {
			return fmt.Errorf("trace key %x: %w", k, ErrCorrupt)
		}
		if u64(k) != pid || u64(k[8:]) >= to {
			break
		}
		keys = append(keys, [3]uint64{pid, u64(k[8:]), u64(k[16:])})
	}
	for _, k := range keys {
		if err := t.DeleteTrace(k[0], k[1], k[2]); err != nil {
			return err
		}
	}
	return nil
}

// TracesByName walks the events carrying name, oldest first, and reports
// how many there are: fn sees those from position offset on, until it
// returns false (the count goes on).
func (t *Tx) TracesByName(name string, offset int, fn func(*TraceEvent) (bool, error)) (total int, err error) {
	prefix := appendName(nil, name)
	c := t.bucket(bTraceNames).Cursor()
	more := true
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if len(k) != len(prefix)+8 || len(v) != 24 {
			return 0, fmt.Errorf("trace name row %x: %w", k, ErrCorrupt)
		}
		total++
		if !more || total <= offset {
			continue
		}
		ev, err := t.Trace(u64(v), u64(v[8:]), u64(k[len(prefix):]))
		if err != nil {
			return 0, err
		}
		if ev == nil {
			return 0, fmt.Errorf("trace name %q indexes missing event %d: %w", name, u64(k[len(prefix):]), ErrCorrupt)
		}
		if more, err = fn(ev); err != nil {
			return 0, err
		}
	}
	return total, nil
}

// ForEachTraceName walks the whole name index: by name, each name's rows
// oldest first.
func (t *Tx) ForEachTraceName(fn func(TraceNameRef) error) error {
	c := t.bucket(bTraceNames).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		name, seq, err := readBytes(k)
		if err != nil || len(seq) != 8 || len(v) != 24 {
			return fmt.Errorf("trace name row %x: %w", k, ErrCorrupt)
		}
		ref := TraceNameRef{Name: string(name), Seq: u64(seq),
			PartitionID: u64(v), Offset: u64(v[8:]), CreatedAt: int64(u64(v[16:]))}
		if err := fn(ref); err != nil {
			return err
		}
	}
	return nil
}

// MessageTraceSeqs lists the numbers of the message's events, oldest first,
// without decoding them.
func (t *Tx) MessageTraceSeqs(pid, off uint64) []uint64 {
	var out []uint64
	prefix := key88(pid, off)
	c := t.bucket(bTraces).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if len(k) == 24 {
			out = append(out, u64(k[16:]))
		}
	}
	return out
}
