package segments

import (
	"path/filepath"
	"reflect"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func streamKeys(t *testing.T, tx *Tx, q, p [16]byte, prefix string) []string {
	t.Helper()
	var out []string
	if err := tx.ForEachStreamState(q, p, prefix, func(k string, _ *StreamRow) (bool, error) {
		out = append(out, k)
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestStreamQueryIndexes(t *testing.T) {
	s := openStore(t)
	q := &StreamQuery{ID: [16]byte{1}, Name: "agg", Source: "orders", Sink: "totals", ConfigHash: "h1", CreatedAt: 5}
	update(t, s, func(tx *Tx) error { return tx.PutStreamQuery(q) })
	// A replaced source moves the index row: deleting the old source leaves the state alone.
	moved := *q
	moved.Source = "orders2"
	update(t, s, func(tx *Tx) error {
		if err := tx.PutStreamQuery(&moved); err != nil {
			return err
		}
		return tx.PutStreamState(q.ID, [16]byte{9}, "k", &StreamRow{Value: []byte("1")})
	})
	view(t, s, func(tx *Tx) error {
		got, err := tx.StreamQueryByName("agg")
		if err != nil || !reflect.DeepEqual(got, &moved) {
			t.Fatalf("by name: %+v %v", got, err)
		}
		if got, _ := tx.StreamQueryByName("nope"); got != nil {
			t.Errorf("unknown name found %+v", got)
		}
		if got, _ := tx.StreamQueryByName(""); got != nil {
			t.Errorf("empty name found %+v", got)
		}
		return nil
	})
	update(t, s, func(tx *Tx) error { return tx.deleteStreamStateOf("orders") })
	view(t, s, func(tx *Tx) error {
		if k := streamKeys(t, tx, q.ID, [16]byte{9}, ""); len(k) != 1 {
			t.Errorf("state of a query that no longer reads the deleted queue: %v", k)
		}
		return nil
	})
	update(t, s, func(tx *Tx) error { return tx.deleteStreamStateOf("orders2") })
	view(t, s, func(tx *Tx) error {
		if k := streamKeys(t, tx, q.ID, [16]byte{9}, ""); len(k) != 0 {
			t.Errorf("state survives its source queue: %v", k)
		}
		if got, _ := tx.StreamQuery(q.ID); got == nil {
			t.Errorf("the query itself was deleted with its source's state")
		}
		return nil
	})
}

func TestStreamStateRowsAndClear(t *testing.T) {
	s := openStore(t)
	q1, q2 := [16]byte{1}, [16]byte{2}
	p1, p2 := [16]byte{7}, [16]byte{8}
	update(t, s, func(tx *Tx) error {
		for _, k := range []string{"b", "a", "ab", ""} {
			if err := tx.PutStreamState(q1, p1, k, &StreamRow{UpdatedAt: 3, Value: []byte(`"` + k + `"`)}); err != nil {
				return err
			}
		}
		if err := tx.PutStreamState(q1, p2, "a", &StreamRow{HasWindowEnd: true, WindowEnd: 1.5e12, Value: []byte("{}")}); err != nil {
			return err
		}
		return tx.PutStreamState(q2, p1, "a", &StreamRow{Value: []byte("2")})
	})
	view(t, s, func(tx *Tx) error {
		if got := streamKeys(t, tx, q1, p1, ""); !reflect.DeepEqual(got, []string{"", "a", "ab", "b"}) {
			t.Errorf("keys %q", got)
		}
		if got := streamKeys(t, tx, q1, p1, "a"); !reflect.DeepEqual(got, []string{"a", "ab"}) {
			t.Errorf("prefix keys %q", got)
		}
		r, err := tx.StreamState(q1, p2, "a")
		if err != nil || r == nil || !r.HasWindowEnd || r.WindowEnd != 1.5e12 || string(r.Value) != "{}" {
			t.Errorf("row %+v %v", r, err)
		}
		if r, _ := tx.StreamState(q1, p2, "zz"); r != nil {
			t.Errorf("absent key found %+v", r)
		}
		return nil
	})
	// Rows written under a savepoint go with a rollback.
	update(t, s, func(tx *Tx) error {
		sp := tx.Savepoint()
		if err := tx.PutStreamState(q2, p2, "x", &StreamRow{Value: []byte("1")}); err != nil {
			return err
		}
		if err := tx.DeleteStreamState(q2, p1, "a"); err != nil {
			return err
		}
		return tx.RollbackTo(sp)
	})
	var n uint64
	update(t, s, func(tx *Tx) (err error) {
		n, err = tx.ClearStreamState(q1)
		return err
	})
	if n != 5 {
		t.Errorf("cleared %d rows, want 5", n)
	}
	view(t, s, func(tx *Tx) error {
		if k := streamKeys(t, tx, q1, p1, ""); len(k) != 0 {
			t.Errorf("q1 keeps %q", k)
		}
		if k := streamKeys(t, tx, q2, p1, ""); len(k) != 1 {
			t.Errorf("rolled-back delete lost q2's row: %q", k)
		}
		if k := streamKeys(t, tx, q2, p2, ""); len(k) != 0 {
			t.Errorf("rolled-back upsert kept: %q", k)
		}
		return nil
	})
}

// A queue's deletion takes the state of the queries reading it, and a store
// opened from a file written before the streams buckets existed has them.
func TestStreamStateGoesWithTheSourceQueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	qid := [16]byte{3}
	var part *Partition
	update(t, s, func(tx *Tx) error {
		part = newPartition(t, tx, "orders", "p")
		if err := tx.PutStreamQuery(&StreamQuery{ID: qid, Name: "agg", Source: "orders"}); err != nil {
			return err
		}
		return tx.PutStreamState(qid, part.UUID, "k", &StreamRow{Value: []byte("1")})
	})
	update(t, s, func(tx *Tx) error {
		q, err := tx.Queue("orders")
		if err != nil {
			return err
		}
		return tx.DeleteQueue(q)
	})
	view(t, s, func(tx *Tx) error {
		if k := streamKeys(t, tx, qid, part.UUID, ""); len(k) != 0 {
			t.Errorf("state survives its source queue: %q", k)
		}
		return nil
	})
	// Drop the buckets as an older build's file lacks them; opening creates them.
	if err := s.db.Update(func(btx *bolt.Tx) error {
		for _, b := range [][]byte{bucketStreamQueries, bucketStreamNames, bucketStreamSources, bucketStreamState} {
			if err := btx.DeleteBucket(b); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path, StoreOptions{NoSync: true, VerifyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	view(t, s, func(tx *Tx) error {
		_, err := tx.StreamQueryByName("agg")
		return err
	})
	if _, _, err := s.Digest(); err != nil {
		t.Fatal(err)
	}
}
