package segments

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// tagModel is what the tag index must answer: every queue's tags, walked by
// brute force as discovery pops walked every queue before the index.
type tagModel map[string][2]string

// walk is the names of the queues matching namespace and task (empty: any),
// in name order rotated to start at the first name at or after from.
func (m tagModel) walk(namespace, task, from string) []string {
	var names []string
	for name, tg := range m {
		if (namespace == "" || tg[0] == namespace) && (task == "" || tg[1] == task) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if i := slices.IndexFunc(names, func(s string) bool { return s >= from }); i > 0 {
		names = append(names[i:], names[:i]...)
	}
	return names
}

func taggedWalk(t *testing.T, tx *Tx, namespace, task, from string) []string {
	t.Helper()
	var names []string
	must(t, tx.ForEachTaggedQueue(namespace, task, from, func(q *Queue) (bool, error) {
		names = append(names, q.Name)
		return true, nil
	}))
	return names
}

// Names and tags that sort around each other and around their length
// prefixes: a tag that is a prefix of another, a name that is a prefix of
// another, the empty string, bytes 0 and 0xff.
var (
	tagNames = []string{"", "a", "a\x00", "a.b", "ab", "b", "b\xff", "\x01", "n.x", "n.xy"}
	tagTags  = []string{"", "a", "ab", "a\x00", "\x01a", "n"}
)

// checkTagWalks compares every walk the index serves with the model.
func checkTagWalks(t *testing.T, s *Store, m tagModel, when string) {
	t.Helper()
	view(t, s, func(tx *Tx) error {
		if err := tx.CheckQueueTagIndex(); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		froms := append([]string{"a\x00\x00", "zz"}, tagNames...)
		for _, ns := range tagTags {
			for _, task := range tagTags {
				var heads []string
				must(t, tx.ForEachTaggedQueueHead(ns, task, func(name string, created int64) bool {
					if q, _ := tx.Queue(name); q == nil || q.CreatedAt != created {
						t.Errorf("%s: head of %q: created %d, record %+v", when, name, created, q)
					}
					heads = append(heads, name)
					return true
				}))
				if want := m.walk(ns, task, ""); !slices.Equal(heads, want) {
					t.Fatalf("%s: heads of %q/%q: %q, want %q", when, ns, task, heads, want)
				}
				for _, from := range froms {
					got, want := taggedWalk(t, tx, ns, task, from), m.walk(ns, task, from)
					if !slices.Equal(got, want) {
						t.Fatalf("%s: walk of %q/%q from %q: %q, want %q", when, ns, task, from, got, want)
					}
				}
			}
		}
		return nil
	})
}

// The index follows queue creation, tag changes, deletion and savepoint
// rollbacks, and every walk, from any pointer, is the brute-force walk.
func TestTagIndexFollowsTheQueues(t *testing.T) {
	s := openStore(t)
	m := tagModel{}
	rng := rand.New(rand.NewPCG(7, 9))
	pick := func(l []string) string { return l[rng.IntN(len(l))] }
	for step := range 300 {
		name, ns, task := pick(tagNames), pick(tagTags), pick(tagTags)
		rollback := rng.IntN(5) == 0
		update(t, s, func(tx *Tx) error {
			sp := tx.Savepoint()
			q, err := tx.Queue(name)
			if err != nil {
				return err
			}
			deleted := false
			switch {
			case q == nil:
				err = tx.CreateQueue(&Queue{Name: name, Namespace: ns, Task: task, CreatedAt: int64(step)})
			case rng.IntN(3) == 0:
				err, deleted = tx.DeleteQueue(q), true
			default:
				q.Namespace, q.Task = ns, task
				err = tx.PutQueue(q)
			}
			if err != nil {
				return err
			}
			if rollback {
				return tx.RollbackTo(sp)
			}
			tx.Release(sp)
			if deleted {
				delete(m, name)
			} else {
				m[name] = [2]string{ns, task}
			}
			return nil
		})
		if step%10 == 0 || step == 299 {
			checkTagWalks(t, s, m, fmt.Sprintf("step %d", step))
		}
	}
}

// A walk's callback may write the transaction, deleting the queue it is
// given included: the walk goes on with the next name.
func TestTagWalkSurvivesWritesInItsCallback(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		for _, n := range []string{"a", "b", "c", "d"} {
			must(t, tx.CreateQueue(&Queue{Name: n, Namespace: "n"}))
		}
		var seen []string
		err := tx.ForEachTaggedQueue("n", "", "c", func(q *Queue) (bool, error) {
			seen = append(seen, q.Name)
			for _, n := range []string{"x" + q.Name, "c" + q.Name} {
				if err := tx.CreateQueue(&Queue{Name: n, Namespace: "other"}); err != nil {
					return false, err
				}
			}
			return true, tx.DeleteQueue(q)
		})
		if want := []string{"c", "d", "a", "b"}; !slices.Equal(seen, want) {
			t.Errorf("walked %q, want %q", seen, want)
		}
		return err
	})
	view(t, s, func(tx *Tx) error { return tx.CheckQueueTagIndex() })
}

// asSchema8 makes s's file what a schema 8 build left: no tag index, schema
// 8 recorded. It returns the digest before, which the index does not touch.
func asSchema8(t *testing.T, s *Store) string {
	t.Helper()
	_, d, err := s.Digest()
	must(t, err)
	must(t, s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range derivedBuckets {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaSchema, be64(8))
	}))
	return d
}

func fillTagged(t *testing.T, s *Store) tagModel {
	t.Helper()
	m := tagModel{}
	update(t, s, func(tx *Tx) error {
		for i, name := range tagNames {
			ns, task := tagTags[i%len(tagTags)], tagTags[(i*5+1)%len(tagTags)]
			m[name] = [2]string{ns, task}
			must(t, tx.CreateQueue(&Queue{Name: name, Namespace: ns, Task: task}))
		}
		return nil
	})
	return m
}

// A schema 8 state file, which has no tag index, opens as schema 9 with the
// index built from its queue records, and its digest is unchanged: the
// index is not state. The file left before the migration's commit (here:
// the same file opened again) builds it again.
func TestSchema8FileBuildsTheTagIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openSized(t, path, 0)
	m := fillTagged(t, s)
	digest := asSchema8(t, s)
	must(t, s.Close())
	s = openSized(t, path, 0)
	view(t, s, func(tx *Tx) error {
		if v := tx.tx.Bucket(bucketMeta).Get(metaSchema); u64(v) != schemaVersion {
			t.Fatalf("schema %d after opening a schema 8 file", u64(v))
		}
		return nil
	})
	if _, d, _ := s.Digest(); d != digest {
		t.Fatal("building the tag index changed the digest")
	}
	checkTagWalks(t, s, m, "opened schema 8 file")
	// A store that kept its index from the start has the same digest.
	fresh := openStore(t)
	fillTagged(t, fresh)
	sameDigest(t, s, fresh, "a store with the index built on open and one that kept it differ")
}

// A snapshot of a schema 8 state (a leader not yet upgraded) is received
// without the index buckets, and the store opened on it builds them.
func TestSchema8SnapshotBuildsTheTagIndex(t *testing.T) {
	s := openSized(t, filepath.Join(t.TempDir(), "old.db"), 0)
	m := fillTagged(t, s)
	digest := asSchema8(t, s)
	stream := snapshotOf(t, s)
	restored := restoreInto(t, stream, filepath.Join(t.TempDir(), "state.db"), 0)
	if _, d, _ := restored.Digest(); d != digest {
		t.Fatal("restored schema 8 snapshot has another digest")
	}
	checkTagWalks(t, restored, m, "restored schema 8 snapshot")
}

// A snapshot of this schema lacking an index bucket is damaged, not old.
func TestSchema9SnapshotWithoutTheTagIndexIsRefused(t *testing.T) {
	s := openSized(t, filepath.Join(t.TempDir(), "old.db"), 0)
	fillTagged(t, s)
	must(t, s.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketQueueTask) }))
	if _, err := ReceiveSnapshot(bytes.NewReader(snapshotOf(t, s)), filepath.Join(t.TempDir(), "state.db")); err == nil {
		t.Fatal("a schema 9 snapshot without queue_task was accepted")
	}
}

// A schema 9 file missing an index bucket (damage: the index is derived)
// gets the index rebuilt when it opens. It used to open with that bucket
// created empty, which hid its queues from discovery pops and listings.
func TestSchema9FileWithoutTheTagIndexRebuildsIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openSized(t, path, 0)
	m := fillTagged(t, s)
	must(t, s.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketQueueTask) }))
	must(t, s.Close())
	s = openSized(t, path, 0)
	view(t, s, func(tx *Tx) error { return tx.CheckQueueTagIndex() })
	checkTagWalks(t, s, m, "reopened schema 9 file without queue_task")
}

// A state file of a newer schema is refused, as before.
func TestNewerSchemaIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openSized(t, path, 0)
	must(t, s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(metaSchema, be64(schemaVersion+1))
	}))
	must(t, s.Close())
	if s, err := Open(path, StoreOptions{NoSync: true}); err == nil {
		s.Close()
		t.Fatal("a file of a newer schema opened")
	}
}

// BenchmarkTagIndexBuild times building the tag index of a file from an
// older schema, as the first open on a new build does, at two sizes: the
// time per queue should stay about the same. Inserted in queue-name order,
// where the tags interleave, bbolt moved the rest of the new bucket's one
// node on almost every insert, and 100,001 queues took 12.2 s (0.42 s
// sorted); 4 times the queues took 31 times as long.
func BenchmarkTagIndexBuild(b *testing.B) {
	for _, n := range []int{10000, 40000} {
		b.Run(fmt.Sprintf("queues=%d", n), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "state.db"), StoreOptions{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for from := 0; from < n; from += 2000 {
				if err := s.Update(func(tx *Tx) error {
					for i := from; i < min(from+2000, n); i++ {
						q := &Queue{Name: fmt.Sprintf("q%07d", i), Namespace: fmt.Sprint("ns", i%13), Task: fmt.Sprint("t", i%97)}
						if err := tx.CreateQueue(q); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			errUndo := errors.New("undo")
			b.ResetTimer()
			for b.Loop() {
				err := s.db.Update(func(btx *bolt.Tx) error {
					if got, err := rebuildQueueTagIndex(btx); err != nil || got != n {
						return fmt.Errorf("indexed %d queues of %d: %v", got, n, err)
					}
					return errUndo // nothing kept: every round builds from scratch
				})
				if err != errUndo {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/queue")
		})
	}
}
