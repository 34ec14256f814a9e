package segments

import (
	"testing"
)

// TestDeletedTxIDMemory: a remembered deletion answers until forgotten; a
// later deletion of the same id replaces it (and its place in the expiry
// order); forgetting goes oldest expiry first, in bounded steps, and stops
// at the first window still open.
func TestDeletedTxIDMemory(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		if _, _, ok, err := tx.DeletedTxID(1, 2, "a"); err != nil || ok {
			t.Fatalf("empty memory answers %v %v", ok, err)
		}
		must(t, tx.RememberDeletedTxID(1, 2, "a", TxRef{PushedAt: 10, Seq: 7}, 100))
		must(t, tx.RememberDeletedTxID(1, 2, "b", TxRef{PushedAt: 20, Seq: 8}, 200))
		must(t, tx.RememberDeletedTxID(1, 3, "a", TxRef{PushedAt: 30, Seq: 9}, 300))
		// a in partition 2 deleted again, later: its record and expiry move.
		must(t, tx.RememberDeletedTxID(1, 2, "a", TxRef{PushedAt: 40, Seq: 10}, 400))
		return nil
	})
	view(t, s, func(tx *Tx) error {
		ref, exp, ok, err := tx.DeletedTxID(1, 2, "a")
		if err != nil || !ok || ref.PushedAt != 40 || ref.Seq != 10 || exp != 400 {
			t.Fatalf("a in 2: %+v %d %v %v", ref, exp, ok, err)
		}
		if due, _ := tx.DeletedTxIDsDue(199); due {
			t.Fatal("due before the first window closes")
		}
		if due, _ := tx.DeletedTxIDsDue(200); !due {
			t.Fatal("not due when b's window closed")
		}
		return nil
	})
	update(t, s, func(tx *Tx) error {
		n, more, err := tx.ForgetDeletedTxIDs(1000, 2)
		if err != nil || n != 2 || !more {
			t.Fatalf("first step %d %v %v", n, more, err)
		}
		n, more, err = tx.ForgetDeletedTxIDs(1000, 2)
		if err != nil || n != 1 || more {
			t.Fatalf("second step %d %v %v", n, more, err)
		}
		for _, k := range []struct {
			pid  uint64
			txid string
		}{{2, "a"}, {2, "b"}, {3, "a"}} {
			if _, _, ok, _ := tx.DeletedTxID(1, k.pid, k.txid); ok {
				t.Fatalf("%d/%s still remembered", k.pid, k.txid)
			}
		}
		if due, _ := tx.DeletedTxIDsDue(1 << 62); due {
			t.Fatal("expiry entries left behind")
		}
		return nil
	})
	update(t, s, func(tx *Tx) error {
		must(t, tx.RememberDeletedTxID(1, 2, "c", TxRef{PushedAt: 50}, 500))
		if n, more, err := tx.ForgetDeletedTxIDs(499, 10); err != nil || n != 0 || more {
			t.Fatalf("forgot %d of an open window (%v %v)", n, more, err)
		}
		return nil
	})
}
