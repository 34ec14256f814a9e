package segments

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func openDeferred(t *testing.T, path string, d DeferOptions) *Store {
	t.Helper()
	s, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true, BlobFileSize: 1 << 10, Defer: d})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// applyDeferred applies crash-log entries from..to, each as one
// UpdateDeferred call recording its index, as the state machine applies a
// batch.
func applyDeferred(t *testing.T, s *Store, from, to uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		if err := s.UpdateDeferred(func(tx *Tx) error {
			if err := crashLogEntry(tx, i); err != nil {
				return err
			}
			return tx.SetApplied(i)
		}); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
}

// referenceDigest is the digest of a store that committed crash-log entries
// 1..n one by one.
func referenceDigest(t *testing.T, n uint64) string {
	t.Helper()
	ref := openSized(t, filepath.Join(t.TempDir(), "ref.db"), 1<<10)
	for i := uint64(1); i <= n; i++ {
		update(t, ref, func(tx *Tx) error {
			if err := crashLogEntry(tx, i); err != nil {
				return err
			}
			return tx.SetApplied(i)
		})
	}
	_, d, err := ref.Digest()
	must(t, err)
	return d
}

// committedApplied reads the applied index the state file holds, in a read
// transaction of bbolt's own, without committing the open transaction as
// View would.
func committedApplied(t *testing.T, s *Store) uint64 {
	t.Helper()
	var applied uint64
	err := s.db.View(func(btx *bolt.Tx) error {
		applied = newTx(btx, s).Applied()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return applied
}

// A deferred transaction commits after DeferOptions.Uses writes, not
// before; ViewLatest sees its writes without committing it, View commits it
// first, and the state it leaves is the state of committing every entry.
func TestUpdateDeferredCommitsOnUsesAndReads(t *testing.T) {
	s := openDeferred(t, filepath.Join(t.TempDir(), "state.db"), DeferOptions{Uses: 4})

	applyDeferred(t, s, 1, 3)
	if c := s.commits.Load(); c != 0 {
		t.Fatalf("after 3 of 4 uses: %d commits, want 0", c)
	}
	if a := committedApplied(t, s); a != 0 {
		t.Fatalf("the file holds applied %d before the commit, want 0", a)
	}
	var latest uint64
	must(t, s.ViewLatest(func(tx *Tx) error { latest = tx.Applied(); return nil }))
	if latest != 3 || s.commits.Load() != 0 {
		t.Fatalf("ViewLatest read applied %d with %d commits, want 3 and none", latest, s.commits.Load())
	}
	applyDeferred(t, s, 4, 4)
	if c, a := s.commits.Load(), committedApplied(t, s); c != 1 || a != 4 {
		t.Fatalf("after the 4th use: %d commits, file at %d; want 1 and 4", c, a)
	}

	applyDeferred(t, s, 5, 6)
	var seen uint64
	view(t, s, func(tx *Tx) error { seen = tx.Applied(); return nil })
	if seen != 6 || s.commits.Load() != 2 {
		t.Fatalf("View read applied %d after %d commits, want 6 after 2", seen, s.commits.Load())
	}

	applyDeferred(t, s, 7, 40)
	want := referenceDigest(t, 40)
	if _, got, err := s.Digest(); err != nil || got != want {
		t.Fatalf("digest after deferred commits %s (%v), want %s as committed one by one", got, err, want)
	}
	checkAccounting(t, s)
}

// ErrUnchanged leaves the open transaction as it was; any other error rolls
// back every entry it held, which is why the state machine stops then.
func TestUpdateDeferredErrors(t *testing.T) {
	s := openDeferred(t, filepath.Join(t.TempDir(), "state.db"), DeferOptions{Uses: 100})
	applyDeferred(t, s, 1, 3)
	view(t, s, func(*Tx) error { return nil }) // commits 1..3
	applyDeferred(t, s, 4, 5)
	if err := s.UpdateDeferred(func(*Tx) error { return ErrUnchanged }); !errors.Is(err, ErrUnchanged) {
		t.Fatalf("ErrUnchanged came back as %v", err)
	}
	var latest uint64
	must(t, s.ViewLatest(func(tx *Tx) error { latest = tx.Applied(); return nil }))
	if latest != 5 {
		t.Fatalf("after ErrUnchanged the open transaction reads applied %d, want 5", latest)
	}
	boom := errors.New("boom")
	err := s.UpdateDeferred(func(tx *Tx) error {
		if err := crashLogEntry(tx, 6); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("the failing write returned %v", err)
	}
	var applied uint64
	view(t, s, func(tx *Tx) error { applied = tx.Applied(); return nil })
	if applied != 3 {
		t.Fatalf("after a failed write the state is at %d, want 3: the open transaction's entries go with it", applied)
	}
	checkAccounting(t, s)
	// The store goes on: replaying 4.. gives the state of the reference.
	applyDeferred(t, s, 4, 20)
	want := referenceDigest(t, 20)
	if _, got, err := s.Digest(); err != nil || got != want {
		t.Fatalf("digest after the replay %s (%v), want %s", got, err, want)
	}
}

// The linger commits an open transaction nobody reads, and Close commits
// what is open, so a clean shutdown replays nothing.
func TestUpdateDeferredLingerAndClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, StoreOptions{NoSync: true, Defer: DeferOptions{Uses: 1000, Linger: 20 * time.Millisecond}})
	must(t, err)
	applyDeferred(t, s, 1, 5)
	deadline := time.Now().Add(10 * time.Second)
	for committedApplied(t, s) != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("the linger never committed: file at %d", committedApplied(t, s))
		}
		time.Sleep(5 * time.Millisecond)
	}
	applyDeferred(t, s, 6, 9)
	s.deferred.Linger = 0 // no timer for the next transaction: Close alone commits it
	applyDeferred(t, s, 10, 12)
	must(t, s.Close())
	s, err = Open(path, StoreOptions{NoSync: true})
	must(t, err)
	defer s.Close()
	var applied uint64
	view(t, s, func(tx *Tx) error { applied = tx.Applied(); return nil })
	if applied != 12 {
		t.Fatalf("after Close the file holds applied %d, want 12", applied)
	}
}

// A panic inside an update (recovered by the caller) rolls the open
// transaction back as an error does and releases bbolt's writer: the next
// update and read go on from the last commit.
func TestUpdateDeferredPanicRollsBack(t *testing.T) {
	s := openDeferred(t, filepath.Join(t.TempDir(), "state.db"), DeferOptions{Uses: 100})
	applyDeferred(t, s, 1, 2)
	view(t, s, func(*Tx) error { return nil }) // commits 1..2
	applyDeferred(t, s, 3, 4)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not come through")
			}
		}()
		_ = s.UpdateDeferred(func(tx *Tx) error {
			if err := crashLogEntry(tx, 5); err != nil {
				return err
			}
			panic("inside the apply")
		})
	}()
	var applied uint64
	view(t, s, func(tx *Tx) error { applied = tx.Applied(); return nil })
	if applied != 2 {
		t.Fatalf("after a panic the state is at %d, want 2", applied)
	}
	update(t, s, func(tx *Tx) error { return tx.SetApplied(2) }) // the writer lock was released
	applyDeferred(t, s, 3, 9)
	checkAccounting(t, s)
}
