package segments

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// Streams (queen-api.md 3.18): registered queries and the operator state
// each keeps per (query, source partition). Four buckets:
//
//	stream_queries  id(16)                          -> StreamQuery (msgpack map)
//	stream_names    name                            -> id(16)
//	stream_sources  uvarint len, source name, id(16) -> empty
//	stream_state    id(16) partition uuid(16) key    -> state row (below)
//
// State rows are keyed by the query's id and the partition's UUID, not its
// number: the request names both by UUID, and a reset deletes a query's
// rows as one prefix. The source index finds the queries whose state goes
// when their source queue is deleted (DeleteQueue).
//
// A state row is fixed binary, then the value verbatim:
//
//	version(1)=1 flags(1) updatedAt(8) windowEnd(8, float64 bits) value
//
// flags bit 0 says the value is an object with a numeric windowEnd member,
// whose value the writer extracted: state reads filter on it
// (ripe_at_or_before) without parsing every value.

// StreamQuery is a registered streams query. Query names are required and
// non-empty, so they key rows directly.
type StreamQuery struct {
	ID         [16]byte `msgpack:"id"`
	Name       string   `msgpack:"name"`
	Source     string   `msgpack:"source"`
	Sink       string   `msgpack:"sink"`
	ConfigHash string   `msgpack:"hash"`
	CreatedAt  int64    `msgpack:"created"`
	UpdatedAt  int64    `msgpack:"updated"`
}

// StreamRow is one state value.
type StreamRow struct {
	UpdatedAt    int64
	HasWindowEnd bool
	WindowEnd    float64
	// Value is the JSON value as written. Rows handed to a ForEachStreamState
	// callback alias the database: valid only during the call.
	Value []byte
}

const streamRowHeader = 18

func (r *StreamRow) encode() []byte {
	b := make([]byte, streamRowHeader+len(r.Value))
	b[0] = 1
	if r.HasWindowEnd {
		b[1] = 1
	}
	putU64(b[2:], uint64(r.UpdatedAt))
	putU64(b[10:], math.Float64bits(r.WindowEnd))
	copy(b[streamRowHeader:], r.Value)
	return b
}

func decodeStreamRow(b []byte) (*StreamRow, error) {
	if len(b) < streamRowHeader || b[0] != 1 {
		return nil, fmt.Errorf("stream state row of %d bytes: %w", len(b), ErrCorrupt)
	}
	return &StreamRow{
		UpdatedAt:    int64(u64(b[2:])),
		HasWindowEnd: b[1]&1 != 0,
		WindowEnd:    math.Float64frombits(u64(b[10:])),
		Value:        b[streamRowHeader:],
	}, nil
}

func streamStatePrefix(query, part [16]byte) []byte {
	k := make([]byte, 32, 32+64)
	copy(k, query[:])
	copy(k[16:], part[:])
	return k
}

func streamStateKey(query, part [16]byte, key string) []byte {
	return append(streamStatePrefix(query, part), key...)
}

func streamSourceKey(source string, id [16]byte) []byte {
	k := binary.AppendUvarint(make([]byte, 0, 2+len(source)+16), uint64(len(source)))
	k = append(k, source...)
	return append(k, id[:]...)
}

// StreamQuery loads a query by id, nil when unknown.
func (t *Tx) StreamQuery(id [16]byte) (*StreamQuery, error) {
	v := t.get(bStreamQueries, id[:])
	if v == nil {
		return nil, nil
	}
	q := &StreamQuery{}
	if err := unmarshalMsgpack(v, q); err != nil {
		return nil, fmt.Errorf("stream query %x: %w", id, err)
	}
	return q, nil
}

// StreamQueryByName loads a query by name, nil when unknown.
func (t *Tx) StreamQueryByName(name string) (*StreamQuery, error) {
	if name == "" {
		return nil, nil // bbolt has no empty key; no query has an empty name
	}
	v := t.get(bStreamNames, []byte(name))
	if v == nil {
		return nil, nil
	}
	if len(v) != 16 {
		return nil, fmt.Errorf("stream query name %q maps to %d bytes: %w", name, len(v), ErrCorrupt)
	}
	return t.StreamQuery([16]byte(v))
}

// PutStreamQuery creates or replaces a query and keeps its name and source
// index rows in step with the record (a replaced source moves its index row).
func (t *Tx) PutStreamQuery(q *StreamQuery) error {
	if q.Name == "" {
		return fmt.Errorf("stream query with an empty name")
	}
	old, err := t.StreamQuery(q.ID)
	if err != nil {
		return err
	}
	if old != nil && old.Source != q.Source {
		if err := t.del(bStreamSources, streamSourceKey(old.Source, old.ID)); err != nil {
			return err
		}
	}
	if old != nil && old.Name != q.Name {
		if err := t.del(bStreamNames, []byte(old.Name)); err != nil {
			return err
		}
	}
	if err := t.put(bStreamQueries, bytes.Clone(q.ID[:]), marshalMsgpack(q)); err != nil {
		return err
	}
	if err := t.put(bStreamNames, []byte(q.Name), bytes.Clone(q.ID[:])); err != nil {
		return err
	}
	return t.put(bStreamSources, streamSourceKey(q.Source, q.ID), []byte{})
}

// PutStreamState writes one state row.
func (t *Tx) PutStreamState(query, part [16]byte, key string, r *StreamRow) error {
	return t.put(bStreamState, streamStateKey(query, part, key), r.encode())
}

// DeleteStreamState deletes one state row; deleting an absent key is a no-op.
func (t *Tx) DeleteStreamState(query, part [16]byte, key string) error {
	return t.del(bStreamState, streamStateKey(query, part, key))
}

// StreamState loads one state row, nil when absent. Its value is a copy.
func (t *Tx) StreamState(query, part [16]byte, key string) (*StreamRow, error) {
	v := t.get(bStreamState, streamStateKey(query, part, key))
	if v == nil {
		return nil, nil
	}
	r, err := decodeStreamRow(v)
	if err != nil {
		return nil, err
	}
	r.Value = bytes.Clone(r.Value)
	return r, nil
}

// ForEachStreamState walks a (query, partition)'s rows whose key starts
// with prefix, in key order. The row's value is valid only during fn.
func (t *Tx) ForEachStreamState(query, part [16]byte, prefix string, fn func(key string, r *StreamRow) (bool, error)) error {
	p := append(streamStatePrefix(query, part), prefix...)
	c := t.bucket(bStreamState).Cursor()
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
		r, err := decodeStreamRow(v)
		if err != nil {
			return fmt.Errorf("stream state %x: %w", k, err)
		}
		if more, err := fn(string(k[32:]), r); err != nil || !more {
			return err
		}
	}
	return nil
}

// ClearStreamState deletes every state row of a query and reports how many
// it deleted.
func (t *Tx) ClearStreamState(query [16]byte) (uint64, error) {
	var n uint64
	c := t.bucket(bStreamState).Cursor()
	for k, _ := c.Seek(query[:]); k != nil && bytes.HasPrefix(k, query[:]); k, _ = c.Next() {
		n++
	}
	if n == 0 {
		return 0, nil
	}
	return n, t.deletePrefix(bStreamState, query[:])
}

// deleteStreamStateOf deletes the state of every query reading the source
// queue, which is being deleted: its partitions, and so the UUIDs that key
// the rows, never come back (a queue created again under the name has new
// ones). The queries stay registered, so re-registering is idempotent and
// the state starts empty.
func (t *Tx) deleteStreamStateOf(source string) error {
	prefix := binary.AppendUvarint(nil, uint64(len(source)))
	prefix = append(prefix, source...)
	var ids [][16]byte
	c := t.bucket(bStreamSources).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if len(k) != len(prefix)+16 {
			return fmt.Errorf("stream source key %x: %w", k, ErrCorrupt)
		}
		ids = append(ids, [16]byte(k[len(prefix):]))
	}
	for _, id := range ids {
		if _, err := t.ClearStreamState(id); err != nil {
			return fmt.Errorf("delete stream state of query %x: %w", id, err)
		}
	}
	return nil
}
