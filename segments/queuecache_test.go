package segments

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// readQueue reads queue name in its own transaction of s (a view, or a write
// transaction when write is set).
func readQueue(t *testing.T, s *Store, name string, write bool) *Queue {
	t.Helper()
	var q *Queue
	fn := func(tx *Tx) error {
		var err error
		q, err = tx.Queue(name)
		return err
	}
	if write {
		update(t, s, fn)
	} else {
		view(t, s, fn)
	}
	return q
}

// decodedQueue is what the stored record of name decodes to, without the
// cache.
func decodedQueue(t *testing.T, s *Store, name string) *Queue {
	t.Helper()
	var q *Queue
	view(t, s, func(tx *Tx) error {
		v := tx.get(bQueues, nameKey(name))
		if v == nil {
			return nil
		}
		q = new(Queue)
		return unmarshalMsgpack(v, q)
	})
	return q
}

// A queue read through the cache is always what its stored record decodes
// to, whoever changed the record, and no reader can change what the next
// one gets.
func TestQueueCacheAnswersWhatIsStored(t *testing.T) {
	s := openStore(t)
	base := Options{LeaseTime: 30, RetryLimit: 3}
	update(t, s, func(tx *Tx) error {
		return tx.CreateQueue(&Queue{Name: "orders", UUID: [16]byte{1}, Options: Options{LeaseTime: 60}, Base: &base})
	})
	want := decodedQueue(t, s, "orders")
	for i := 0; i < 3; i++ { // a miss, then hits, in both kinds of transaction
		for _, write := range []bool{false, true} {
			if got := readQueue(t, s, "orders", write); !reflect.DeepEqual(got, want) {
				t.Fatalf("read %d (write %v): %+v, want %+v", i, write, got, want)
			}
		}
	}

	// A reader that edits its copy, Base included, edits only its copy.
	got := readQueue(t, s, "orders", false)
	got.Options.LeaseTime = 1
	got.Base.RetryLimit = 99
	got.Name = "edited"
	if again := readQueue(t, s, "orders", false); !reflect.DeepEqual(again, want) {
		t.Fatalf("after a reader edited its copy: %+v, want %+v", again, want)
	}

	// Configured again: the next read has the new record at once.
	update(t, s, func(tx *Tx) error {
		q, err := tx.Queue("orders")
		if err != nil {
			return err
		}
		q.Options.LeaseTime = 120
		q.Base = nil
		return tx.PutQueue(q)
	})
	if got := readQueue(t, s, "orders", false); got.Options.LeaseTime != 120 || got.Base != nil {
		t.Fatalf("after the queue was configured again: %+v", got)
	}
	if got, want := readQueue(t, s, "orders", true), decodedQueue(t, s, "orders"); !reflect.DeepEqual(got, want) {
		t.Fatalf("in a write transaction after configure: %+v, want %+v", got, want)
	}
}

// A change that rolls back leaves its record in the cache; the committed
// record, which differs, is decoded again rather than answered from it.
func TestQueueCacheIgnoresRolledBackRecords(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		return tx.CreateQueue(&Queue{Name: "q", UUID: [16]byte{2}, Options: Options{RetryLimit: 1}})
	})
	errAbort := errors.New("abort")
	err := s.Update(func(tx *Tx) error {
		q, err := tx.Queue("q")
		if err != nil {
			return err
		}
		q.Options.RetryLimit = 7
		if err := tx.PutQueue(q); err != nil {
			return err
		}
		if q, err := tx.Queue("q"); err != nil || q.Options.RetryLimit != 7 {
			t.Errorf("inside the transaction that changed it: %+v, %v", q, err)
		}
		return errAbort
	})
	if !errors.Is(err, errAbort) {
		t.Fatalf("update: %v", err)
	}
	if got := readQueue(t, s, "q", false); got.Options.RetryLimit != 1 {
		t.Fatalf("after the rollback: RetryLimit %d, want the committed 1", got.Options.RetryLimit)
	}
}

// A read view that began before a configure committed keeps seeing the
// record of its own snapshot, although the cache has moved on.
func TestQueueCacheKeepsOlderViewsConsistent(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		return tx.CreateQueue(&Queue{Name: "q", UUID: [16]byte{3}, Options: Options{Priority: 1}})
	})
	readQueue(t, s, "q", false) // cached at Priority 1
	old, err := s.db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback()
	update(t, s, func(tx *Tx) error {
		q, err := tx.Queue("q")
		if err != nil {
			return err
		}
		q.Options.Priority = 2
		return tx.PutQueue(q)
	})
	if got := readQueue(t, s, "q", false); got.Options.Priority != 2 {
		t.Fatalf("new view: Priority %d, want 2", got.Options.Priority)
	}
	q, err := (&Tx{tx: old, store: s}).Queue("q")
	if err != nil {
		t.Fatal(err)
	}
	if q.Options.Priority != 1 {
		t.Fatalf("view begun before the change: Priority %d, want its snapshot's 1", q.Options.Priority)
	}
}

// A record with OJS state is not cached (a copy by value would share its
// nested pointers) and still reads back whole.
func TestQueueCacheDecodesOJSRecords(t *testing.T) {
	s := openStore(t)
	depth := int64(10)
	update(t, s, func(tx *Tx) error {
		return tx.CreateQueue(&Queue{Name: "jobs", UUID: [16]byte{4},
			OJS: &OJSState{Policy: "p", Overrides: QueueConfig{MaxDepth: &depth}, Limits: Limits{Producers: []string{"a"}}}})
	})
	want := decodedQueue(t, s, "jobs")
	first := readQueue(t, s, "jobs", false)
	*first.OJS.Overrides.MaxDepth = 99
	first.OJS.Limits.Producers[0] = "edited"
	if got := readQueue(t, s, "jobs", false); !reflect.DeepEqual(got, want) {
		t.Fatalf("second read: %+v, want %+v", got.OJS, want.OJS)
	}
	s.queues.mu.Lock()
	_, cached := s.queues.m[string(nameKey("jobs"))]
	s.queues.mu.Unlock()
	if cached {
		t.Fatal("a record with OJS state was cached")
	}
}

// A full cache is emptied and filled again; every read stays right.
func TestQueueCacheBounded(t *testing.T) {
	s := openStore(t)
	s.queues.max = 4
	names := []string{"a", "b", "c", "d", "e", "f"}
	update(t, s, func(tx *Tx) error {
		for i, n := range names {
			if err := tx.CreateQueue(&Queue{Name: n, UUID: [16]byte{5, byte(i)}, Options: Options{Priority: int64(i)}}); err != nil {
				return err
			}
		}
		return nil
	})
	for round := 0; round < 2; round++ {
		for i, n := range names {
			if got := readQueue(t, s, n, false); got.Options.Priority != int64(i) {
				t.Fatalf("round %d, queue %s: Priority %d, want %d", round, n, got.Options.Priority, i)
			}
			if l := len(s.queues.m); l > 4 {
				t.Fatalf("cache holds %d records, bound 4", l)
			}
		}
	}
}

func BenchmarkQueueLoad(b *testing.B) {
	base := Options{LeaseTime: 30, RetryLimit: 3, RetentionEnabled: true, DedupWindowSeconds: 3600}
	benchQueueCache(b, "", []*Queue{{Name: "bench-q0", UUID: [16]byte{6}, Options: base, Base: &base, Named: 3, ConfiguredAt: 1}},
		func(tx *Tx) error {
			_, err := tx.Queue("bench-q0")
			return err
		})
}

// benchQueueCache stores queues in a fresh store, then runs read in one
// view, with the cache emptied before every call ("decoded") and kept
// ("cached").
func benchQueueCache(b *testing.B, suffix string, queues []*Queue, read func(*Tx) error) {
	s, err := Open(b.TempDir()+"/state.db", StoreOptions{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(func(tx *Tx) error {
		for _, q := range queues {
			if err := tx.CreateQueue(q); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	for _, cached := range []bool{false, true} {
		name := "decoded"
		if cached {
			name = "cached"
		}
		b.Run(name+suffix, func(b *testing.B) {
			b.ReportAllocs()
			if err := s.View(func(tx *Tx) error {
				for b.Loop() {
					if !cached {
						s.queues.mu.Lock()
						clear(s.queues.m)
						s.queues.mu.Unlock()
					}
					if err := read(tx); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// A field added to Queue that a copy by value would share (a pointer, a
// slice, a map) must be copied by cloneShared, or the cache would hand
// every reader the same one: this fails until it is.
func TestQueueCacheCopiesEverySharedField(t *testing.T) {
	copied := map[string]bool{"Base": true, "OJS": true} // OJS: such records are never cached
	typ := reflect.TypeOf(Queue{})
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		switch f.Type.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface, reflect.Chan, reflect.Func:
			if !copied[f.Name] {
				t.Errorf("Queue.%s (%s) is shared by a copy by value: copy it in cloneShared", f.Name, f.Type)
			}
		case reflect.Struct:
			if f.Name != "Options" {
				t.Errorf("Queue.%s is a struct the test does not know: check it for shared fields", f.Name)
			}
		}
	}
	opts := reflect.TypeOf(Options{})
	for i := 0; i < opts.NumField(); i++ {
		switch opts.Field(i).Type.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface, reflect.Struct:
			t.Errorf("Options.%s would be shared by a copy by value: copy it in cloneShared", opts.Field(i).Name)
		}
	}
}

// Readers in views of their own and a writer configuring the queue share
// the cache: every read is one of the records ever stored, whole, and the
// race detector sees every access ordered.
func TestQueueCacheConcurrentReaders(t *testing.T) {
	s := openStore(t)
	base := Options{LeaseTime: 1}
	update(t, s, func(tx *Tx) error {
		return tx.CreateQueue(&Queue{Name: "shared", UUID: [16]byte{7}, Options: Options{LeaseTime: 1}, Base: &base})
	})
	const writes = 50
	done := make(chan struct{})
	errs := make(chan error, 4)
	for r := 0; r < 4; r++ {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				err := s.View(func(tx *Tx) error {
					q, err := tx.Queue("shared")
					if err != nil {
						return err
					}
					// Every record stored has Options.LeaseTime equal to
					// Base.LeaseTime; a torn or shared copy would not.
					if q.Base == nil || q.Base.LeaseTime != q.Options.LeaseTime {
						return fmt.Errorf("read a record that was never stored: %+v, base %+v", q.Options, q.Base)
					}
					q.Base.LeaseTime = -1 // a reader's edit must stay its own
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := 2; i <= writes; i++ {
		update(t, s, func(tx *Tx) error {
			q, err := tx.Queue("shared")
			if err != nil {
				return err
			}
			q.Options.LeaseTime = int64(i)
			q.Base = &Options{LeaseTime: int64(i)}
			return tx.PutQueue(q)
		})
	}
	close(done)
	for r := 0; r < 4; r++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if q := readQueue(t, s, "shared", false); q.Options.LeaseTime != writes || q.Base.LeaseTime != writes {
		t.Fatalf("after the last configure: %+v, base %+v", q.Options, q.Base)
	}
}

// Listing queues goes through the same cache: every record listed is what
// is stored, after a configure too, and a lister's edits stay its own.
func TestQueueCacheServesListings(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		for i, n := range []string{"a", "b", "c"} {
			b := Options{Priority: int64(i)}
			if err := tx.CreateQueue(&Queue{Name: n, UUID: [16]byte{8, byte(i)}, Options: b, Base: &b}); err != nil {
				return err
			}
		}
		return nil
	})
	list := func() []*Queue {
		var qs []*Queue
		view(t, s, func(tx *Tx) error {
			return tx.ForEachQueue(func(q *Queue) (bool, error) {
				qs = append(qs, q)
				return true, nil
			})
		})
		return qs
	}
	check := func(when string) {
		t.Helper()
		got := list()
		if len(got) != 3 {
			t.Fatalf("%s: %d queues listed, want 3", when, len(got))
		}
		for _, q := range got {
			if want := decodedQueue(t, s, q.Name); !reflect.DeepEqual(q, want) {
				t.Fatalf("%s: listed %+v, stored %+v", when, q, want)
			}
			q.Base.Priority = -1 // the next listing must not see this
		}
	}
	check("first listing")
	check("second listing, from the cache")
	readQueue(t, s, "b", false)
	update(t, s, func(tx *Tx) error {
		q, err := tx.Queue("b")
		if err != nil {
			return err
		}
		q.Options.Priority, q.Base.Priority = 9, 9
		return tx.PutQueue(q)
	})
	check("after b was configured")
	if q := readQueue(t, s, "b", false); q.Options.Priority != 9 {
		t.Fatalf("b after configure: Priority %d, want 9", q.Options.Priority)
	}
}

func BenchmarkListQueues(b *testing.B) {
	var queues []*Queue
	for i := 0; i < 100; i++ {
		o := Options{LeaseTime: 30, RetryLimit: 3}
		queues = append(queues, &Queue{Name: fmt.Sprintf("bench-q%d", i), UUID: [16]byte{9, byte(i)}, Options: o, Base: &o})
	}
	benchQueueCache(b, "/queues=100", queues, func(tx *Tx) error {
		return tx.ForEachQueue(func(*Queue) (bool, error) { return true, nil })
	})
}
