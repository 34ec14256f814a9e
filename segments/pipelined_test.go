package segments

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// A pipelined update's writes are what every later use of the store sees,
// though its commit finishes after UpdatePipelined returned: a View begun
// while the commit is held back waits for it, and then sees the segment and
// the partition record the update wrote, both through the cache (the next
// write) and from the bucket (the View).
func TestUpdatePipelinedIsSeenByWhatFollows(t *testing.T) {
	s := openStore(t)
	pid := seedPartition(t, s, 1, "a")

	release := make(chan struct{})
	committed := make(chan error, 1)
	err := s.UpdatePipelined(func(tx *Tx) error {
		p, err := tx.PartitionByID(pid)
		if err != nil {
			return err
		}
		appendMsgs(t, tx, p, 2, "b", "c")
		return tx.SetApplied(7)
	}, func(err error) {
		committed <- err
		<-release // hold the commit back: it counts as finished only after done
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-committed; err != nil {
		t.Fatalf("commit: %v", err)
	}

	viewed := make(chan []string, 1)
	go func() {
		var got []string
		if err := s.View(func(tx *Tx) error {
			if tx.Applied() != 7 {
				t.Errorf("applied index %d in a view after the update, want 7", tx.Applied())
			}
			got = scan(t, tx, pid, 0)
			return nil
		}); err != nil {
			t.Error(err)
		}
		viewed <- got
	}()
	select {
	case got := <-viewed:
		t.Fatalf("a view ran while the commit before it was still finishing: %v", got)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if got, want := <-viewed, []string{"1:a", "2:b", "3:c"}; !slices.Equal(got, want) {
		t.Fatalf("view after the pipelined update: %v, want %v", got, want)
	}

	// The next write waits for the commit too, and loads the record it
	// stored (VerifyCache compares every cache hit with the bucket).
	update(t, s, func(tx *Tx) error {
		p, err := tx.PartitionByID(pid)
		if err != nil {
			return err
		}
		if p.NextOffset != 4 || p.Messages != 3 {
			t.Errorf("record after the pipelined update: next %d, messages %d; want 4, 3", p.NextOffset, p.Messages)
		}
		appendMsgs(t, tx, p, 3, "d")
		return nil
	})
	view(t, s, func(tx *Tx) error {
		if got, want := scan(t, tx, pid, 0), []string{"1:a", "2:b", "3:c", "4:d"}; !slices.Equal(got, want) {
			t.Errorf("after the next update: %v, want %v", got, want)
		}
		return nil
	})
}

// An error from fn rolls the transaction back at once and never reaches
// done; an error at the commit reaches done and leaves nothing behind.
func TestUpdatePipelinedFailures(t *testing.T) {
	s := openStore(t)
	pid := seedPartition(t, s, 1, "a")
	boom := errors.New("boom")

	err := s.UpdatePipelined(func(tx *Tx) error {
		p, err := tx.PartitionByID(pid)
		if err != nil {
			return err
		}
		appendMsgs(t, tx, p, 2, "b")
		return boom
	}, func(err error) { t.Errorf("done called after fn failed: %v", err) })
	if !errors.Is(err, boom) {
		t.Fatalf("UpdatePipelined with a failing fn: %v, want %v", err, boom)
	}

	done := make(chan error, 1)
	if err := s.UpdatePipelined(func(tx *Tx) error {
		p, err := tx.PartitionByID(pid)
		if err != nil {
			return err
		}
		appendMsgs(t, tx, p, 3, "c")
		tx.failed = boom // what a write that failed after a savepoint leaves for the commit
		return nil
	}, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, boom) {
		t.Fatalf("done got %v, want %v", err, boom)
	}

	view(t, s, func(tx *Tx) error {
		if got, want := scan(t, tx, pid, 0), []string{"1:a"}; !slices.Equal(got, want) {
			t.Errorf("after two failed updates: %v, want %v", got, want)
		}
		return nil
	})
	// The cache holds the committed record, not the failed ones'.
	update(t, s, func(tx *Tx) error {
		p, err := tx.PartitionByID(pid)
		if err != nil {
			return err
		}
		if p.NextOffset != 2 {
			t.Errorf("next offset %d after two failed updates, want 2", p.NextOffset)
		}
		appendMsgs(t, tx, p, 4, "d")
		return nil
	})
	view(t, s, func(tx *Tx) error {
		if got, want := scan(t, tx, pid, 0), []string{"1:a", "2:d"}; !slices.Equal(got, want) {
			t.Errorf("after a good update: %v, want %v", got, want)
		}
		return nil
	})
}

// Close waits for a pipelined commit, so the file it leaves holds it.
func TestClosePersistsAPipelinedCommit(t *testing.T) {
	path := t.TempDir() + "/state.db"
	s, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	pid := seedPartition(t, s, 1, "a")
	if err := s.UpdatePipelined(func(tx *Tx) error {
		p, err := tx.PartitionByID(pid)
		if err != nil {
			return err
		}
		appendMsgs(t, tx, p, 2, "b")
		return tx.SetApplied(9)
	}, func(err error) {
		if err != nil {
			t.Errorf("commit: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // a slow commit: Close must wait for it
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, StoreOptions{NoSync: true, VerifyCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	view(t, s, func(tx *Tx) error {
		if tx.Applied() != 9 {
			t.Errorf("applied %d after reopening, want 9", tx.Applied())
		}
		if got, want := scan(t, tx, pid, 0), []string{"1:a", "2:b"}; !slices.Equal(got, want) {
			t.Errorf("after reopening: %v, want %v", got, want)
		}
		return nil
	})
}
