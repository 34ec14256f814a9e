package segments

import (
	"errors"
	"reflect"
	"testing"
)

func TestSubKeyParsesBack(t *testing.T) {
	for _, sc := range []SubScope{
		{Group: "billing", Kind: SubQueue, A: "orders"},
		{Group: "", Kind: SubQueue, A: ""},
		{Group: "g\x00x", Kind: SubPartition, A: "q", B: "p\x01"},
		{Group: "g", Kind: SubDiscovery, A: "", B: "task"},
	} {
		got, err := ParseSubKey(sc.Key())
		if err != nil || !reflect.DeepEqual(got, sc) {
			t.Errorf("%+v: parsed %+v, %v", sc, got, err)
		}
	}
	good := SubKey("g", SubPartition, "q", "p")
	for _, k := range [][]byte{nil, {5, 'a'}, good[:len(good)-1], append(good, 'x'), SubKey("g", SubQueue, "q", "")[:3]} {
		if _, err := ParseSubKey(k); !errors.Is(err, ErrCorrupt) {
			t.Errorf("key %x: %v, want ErrCorrupt", k, err)
		}
	}
}

func TestDeleteGroupStateUnindexesLease(t *testing.T) {
	s := openStore(t)
	lease := [16]byte{7}
	var pid uint64
	update(t, s, func(tx *Tx) error {
		p := newPartition(t, tx, "q", "p")
		pid = p.ID
		if err := tx.PutGroup(pid, "g", &Group{Next: 3, LeaseID: lease, LeaseExpiry: 9}); err != nil {
			return err
		}
		return tx.IndexLease(lease, pid, "g")
	})
	update(t, s, func(tx *Tx) error {
		for i, want := range []bool{true, false} {
			existed, err := tx.DeleteGroupState(pid, "g")
			if err != nil || existed != want {
				t.Errorf("delete %d: existed %v, %v", i, existed, err)
			}
		}
		return nil
	})
	view(t, s, func(tx *Tx) error {
		if pids, _ := tx.LeaseHolders(lease); len(pids) != 0 {
			t.Errorf("lease index kept %v", pids)
		}
		g, err := tx.Group(pid, "g")
		if g != nil {
			t.Errorf("state kept %+v", g)
		}
		return err
	})
}
