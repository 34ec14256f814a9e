package segments

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestDiscoveryKeyRoundTripsAndIsUnambiguous(t *testing.T) {
	scopes := [][3]string{
		{"ab", "c", ""},
		{"a", "bc", ""},
		{"a", "b", "c"},
		{"a", "", "bc"},
		{"", "a", "bc"},
		{"", "", ""},
		{"g\x00", "\x01", "\xff"},
	}
	seen := map[string]int{}
	for i, s := range scopes {
		k := discoveryKey(s[0], s[1], s[2])
		if j, dup := seen[string(k)]; dup {
			t.Fatalf("scopes %q and %q share key %x", scopes[j], s, k)
		}
		seen[string(k)] = i
		g, ns, task, err := parseDiscoveryKey(k)
		if err != nil || g != s[0] || ns != s[1] || task != s[2] {
			t.Fatalf("key of %q parses as %q %q %q, %v", s, g, ns, task, err)
		}
		// Every key of a group starts with its own prefix, and no other
		// group's prefix.
		for _, o := range scopes {
			if has := bytes.HasPrefix(k, appendName(nil, o[0])); has != (o[0] == s[0]) {
				t.Fatalf("key of %q against group %q's prefix: %v", s, o[0], has)
			}
		}
	}
	for _, bad := range [][]byte{nil, {5, 'a'}, append(discoveryKey("g", "n", "t"), 0), discoveryKey("g", "n", "t")[:4]} {
		if _, _, _, err := parseDiscoveryKey(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("key %x: %v, want ErrCorrupt", bad, err)
		}
	}
}

// discoveryRows lists a group's pointers as "namespace/task=from".
func discoveryRows(t *testing.T, s *Store, group string) []string {
	t.Helper()
	var out []string
	view(t, s, func(tx *Tx) error {
		return tx.ForEachDiscoveryFrom(group, func(ns, task, from string) (bool, error) {
			out = append(out, ns+"/"+task+"="+from)
			return true, nil
		})
	})
	return out
}

func TestDiscoveryPointersStoreWalkAndDeleteByGroup(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		if got := tx.DiscoveryFrom("g", "n", ""); got != "" {
			t.Fatalf("pointer before any write: %q", got)
		}
		for _, r := range [][4]string{
			{"g", "n", "", "q.b\x00"}, {"g", "", "t", "a\x00"}, {"g", "n", "", "q.c\x00"},
			{"gg", "n", "", "x\x00"}, {"", "n", "", "y\x00"},
		} {
			if err := tx.PutDiscoveryFrom(r[0], r[1], r[2], r[3]); err != nil {
				return err
			}
		}
		return nil
	})
	view(t, s, func(tx *Tx) error {
		if got := tx.DiscoveryFrom("g", "n", ""); got != "q.c\x00" {
			t.Fatalf("pointer %q, want the last one written", got)
		}
		if got := tx.DiscoveryFrom("g", "n", "t"); got != "" {
			t.Fatalf("another scope's pointer: %q", got)
		}
		return nil
	})
	if got, want := discoveryRows(t, s, "g"), []string{"/t=a\x00", "n/=q.c\x00"}; !slices.Equal(got, want) {
		t.Fatalf("group g rows %q, want %q", got, want)
	}
	update(t, s, func(tx *Tx) error { return tx.DeleteDiscoveryFrom("g") })
	if got := discoveryRows(t, s, "g"); len(got) != 0 {
		t.Fatalf("rows left after deleting group g: %q", got)
	}
	if got := discoveryRows(t, s, "gg"); len(got) != 1 {
		t.Fatalf("group gg rows %q after deleting group g", got)
	}
	if got := discoveryRows(t, s, ""); len(got) != 1 {
		t.Fatalf("group \"\" rows %q after deleting group g", got)
	}
}

func TestDiscoveryPointerIsStateInTheDigestAndSavepoints(t *testing.T) {
	s := openStore(t)
	_, before, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx *Tx) error {
		sp := tx.Savepoint()
		if err := tx.PutDiscoveryFrom("g", "n", "", "q\x00"); err != nil {
			return err
		}
		return tx.RollbackTo(sp)
	})
	if _, d, _ := s.Digest(); d != before {
		t.Fatal("a rolled-back pointer changed the digest")
	}
	update(t, s, func(tx *Tx) error { return tx.PutDiscoveryFrom("g", "n", "", "q\x00") })
	if _, d, _ := s.Digest(); d == before {
		t.Fatal("a pointer is not in the digest")
	}
}

// A state file or snapshot written before the bucket existed is whole:
// opening it creates the bucket empty, and the state digests as a store
// that never had a pointer.
func TestStateWithoutDiscoveryBucketOpensAndRestores(t *testing.T) {
	path, s, _ := filledStore(t, 3)
	_, want, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(btx *bolt.Tx) error { return btx.DeleteBucket(bucketDiscoveryRR) }); err != nil {
		t.Fatal(err)
	}
	stream := snapshotOf(t, s)
	restored := restoreInto(t, stream, filepath.Join(t.TempDir(), "restored.db"), 0)
	s.Close()
	reopened, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	for name, st := range map[string]*Store{"restored": restored, "reopened": reopened} {
		if _, d, err := st.Digest(); err != nil || d != want {
			t.Fatalf("%s: digest err %v, same as before %v", name, err, d == want)
		}
		update(t, st, func(tx *Tx) error { return tx.PutDiscoveryFrom("g", "n", "", "q\x00") })
		view(t, st, func(tx *Tx) error {
			if got := tx.DiscoveryFrom("g", "n", ""); got != "q\x00" {
				t.Fatalf("%s: pointer %q", name, got)
			}
			return nil
		})
	}
}
