package segments

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkTxIDLookup: resolving a transaction id in a partition of 100,000
// messages stored in segments of 100. A miss (a fresh push's dedup check,
// the common case) is one B+tree lookup; a hit (a duplicate push, an ack
// outside the lease) also reads the message's segment for its time and id
// sequence, which the index no longer stores (schema 3).
func BenchmarkTxIDLookup(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "state.db"), StoreOptions{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const segs, per = 1000, 100
	var p *Partition
	payload := make([]byte, 256)
	err = s.Update(func(tx *Tx) error {
		q := &Queue{Name: "q", UUID: [16]byte{1}}
		if err := tx.CreateQueue(q); err != nil {
			return err
		}
		p = &Partition{QueueID: q.ID, Name: "p", UUID: [16]byte{2}}
		if err := tx.CreatePartition(p); err != nil {
			return err
		}
		for i := range segs {
			msgs := make([]Message, per)
			for j := range msgs {
				msgs[j] = Message{TxID: fmt.Sprintf("run-1-%d", i*per+j), Payload: payload}
			}
			seq, err := tx.ReserveIDs(per)
			if err != nil {
				return err
			}
			if _, err := tx.AppendSegment(p, int64(i), seq, msgs, false); err != nil {
				return err
			}
		}
		return tx.PutPartition(p)
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		id   func(i int) string
		want bool
	}{
		{"miss", func(i int) string { return fmt.Sprintf("run-2-%d", i%(segs*per)) }, false},
		{"hit", func(i int) string { return fmt.Sprintf("run-1-%d", (i*7919)%(segs*per)) }, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			ids := make([]string, 4096)
			for i := range ids {
				ids[i] = c.id(i)
			}
			b.ReportAllocs()
			err := s.View(func(tx *Tx) error {
				i := 0
				for b.Loop() {
					_, ok, err := tx.TxID(p, ids[i%len(ids)])
					if err != nil || ok != c.want {
						return fmt.Errorf("%s: found %v, %v", ids[i%len(ids)], ok, err)
					}
					i++
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
