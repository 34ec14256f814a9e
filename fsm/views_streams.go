package fsm

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/crownmq/crown/segments"
)

// StreamStateQuery selects state rows of one (query, partition).
type StreamStateQuery struct {
	QueryID     [16]byte
	PartitionID [16]byte
	// Keys, when not empty, names the rows wanted (absent ones are simply
	// not returned); otherwise every row is a candidate.
	Keys   []string
	Prefix string
	// With HasRipe, only rows whose value has a numeric windowEnd at or
	// before RipeAtOrBefore.
	HasRipe        bool
	RipeAtOrBefore float64
}

// StreamStateRow is one state value.
type StreamStateRow struct {
	Key       string
	Value     []byte // JSON
	UpdatedAt int64  // unix µs
}

// StateReadTooLargeError reports a state read that matches more rows or
// bytes than one answer carries (MaxStateRows, MaxStateReadBytes).
type StateReadTooLargeError struct{ Rows, Bytes int }

func (e *StateReadTooLargeError) Error() string {
	return fmt.Sprintf("the read matches more than %d rows or %d bytes of values (%d rows, %d bytes so far); "+
		"narrow it with keys, key_prefix or ripe_at_or_before", MaxStateRows, MaxStateReadBytes, e.Rows, e.Bytes)
}

// StreamState answers a state read in key order. found is false when the
// query is unknown; a partition that has no state (or does not exist)
// answers no rows.
func (f *FSM) StreamState(q StreamStateQuery) (rows []StreamStateRow, found bool, err error) {
	err = f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		if must1(tx.StreamQuery(q.QueryID)) == nil {
			return nil
		}
		found = true
		size := 0
		keep := func(key string, r *segments.StreamRow) error {
			if !strings.HasPrefix(key, q.Prefix) || q.HasRipe && (!r.HasWindowEnd || r.WindowEnd > q.RipeAtOrBefore) {
				return nil
			}
			size += len(r.Value)
			if len(rows) == MaxStateRows || size > MaxStateReadBytes {
				return &StateReadTooLargeError{Rows: len(rows), Bytes: size - len(r.Value)}
			}
			rows = append(rows, StreamStateRow{Key: key, Value: bytes.Clone(r.Value), UpdatedAt: r.UpdatedAt})
			return nil
		}
		if len(q.Keys) > 0 {
			keys := append([]string(nil), q.Keys...)
			sort.Strings(keys) // bbolt's byte order: the same order as a walk
			for i, k := range keys {
				if i > 0 && k == keys[i-1] {
					continue
				}
				r := must1(tx.StreamState(q.QueryID, q.PartitionID, k))
				if r == nil {
					continue
				}
				if err := keep(k, r); err != nil {
					return err
				}
			}
			return nil
		}
		return tx.ForEachStreamState(q.QueryID, q.PartitionID, q.Prefix, func(k string, r *segments.StreamRow) (bool, error) {
			return true, keep(k, r)
		})
	})
	if err != nil {
		return nil, false, err
	}
	return rows, found, nil
}
