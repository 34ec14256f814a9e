package segments

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// heldReader is a read transaction kept open across the writer's commits,
// as a snapshot stream or a slow view keeps one.
type heldReader struct {
	req  chan func(*Tx)
	done chan error
}

func holdReader(s *Store) *heldReader {
	h := &heldReader{req: make(chan func(*Tx)), done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		h.done <- s.View(func(tx *Tx) error {
			close(ready)
			for fn := range h.req {
				fn(tx)
			}
			return nil
		})
	}()
	<-ready
	return h
}

// do runs fn in the held transaction and waits for it.
func (h *heldReader) do(fn func(*Tx)) {
	ran := make(chan struct{})
	h.req <- func(tx *Tx) { fn(tx); close(ran) }
	<-ran
}

func (h *heldReader) close(t *testing.T) {
	close(h.req)
	must(t, <-h.done)
}

// partitionsSeen lists what tx reads of queue q's partitions: each record's
// fields (in the digest's form) and messages, by a walk and by a load of
// each, which must agree. References are left out: where a blob lies is a
// store's own.
func partitionsSeen(tx *Tx) (string, error) {
	q, err := tx.Queue("q")
	if err != nil || q == nil {
		return "", err
	}
	var b strings.Builder
	err = tx.ForEachPartition(q.ID, "", func(p *Partition) (bool, error) {
		l, err := tx.Partition(q.ID, p.Name)
		if err != nil {
			return false, err
		}
		if l == nil || !bytes.Equal(l.marshal(), p.marshal()) {
			return false, fmt.Errorf("walk read %+v, a load %+v", p, l)
		}
		fmt.Fprintf(&b, "%s %x:", p.Name, p.appendSchema7Fields(nil))
		err = tx.Scan(p, 0, func(m *StoredMessage) (bool, error) {
			fmt.Fprintf(&b, " %d=%s", m.Offset, m.TxID)
			return true, nil
		})
		b.WriteByte('\n')
		return err == nil, err
	})
	return b.String(), err
}

// checkJournal checks the journal's bookkeeping; without readers, nothing
// folded may stay in memory.
func checkJournal(t *testing.T, s *Store, readers bool) {
	t.Helper()
	j := s.journal
	entries, versions := 0, 0
	for _, q := range j.seqs {
		entries += len(q.keys)
		if !slices.IsSorted(q.keys) {
			t.Fatalf("journaled transaction %d's keys out of order", q.seq)
		}
	}
	if entries != j.entries {
		t.Fatalf("journal counts %d entries, holds %d", j.entries, entries)
	}
	for k, vs := range j.vers {
		if len(vs) == 0 {
			t.Fatalf("key %q kept without versions", k)
		}
		for i := 1; i < len(vs); i++ {
			if vs[i].seq <= vs[i-1].seq {
				t.Fatalf("key %q: versions out of order %+v", k, vs)
			}
		}
		versions += len(vs)
		if readers {
			continue
		}
		for _, v := range vs {
			if v.folded != 0 || !slices.ContainsFunc(j.seqs, func(q jseq) bool { return q.seq == v.seq }) {
				t.Fatalf("key %q: version %+v kept with no reader to see it", k, v)
			}
		}
	}
	if !readers && versions > entries {
		t.Fatalf("%d versions in memory, %d journaled", versions, entries)
	}
	if !readers && len(j.prune) != 0 {
		t.Fatalf("%d keys left to prune with no reader open", len(j.prune))
	}
	if len(j.seqs) > j.max+1 && j.entries <= j.maxEntries {
		t.Fatalf("%d transactions journaled, bound %d", len(j.seqs), j.max)
	}
}

// Random pushes, failed transactions, savepoint rollbacks, walks, deleted
// queues and reopenings, over a journal folded every few transactions:
// after every round the journaled store must digest like one that writes
// every record to the bucket, and readers held open across rounds must go
// on reading the state of the round they began in.
func TestJournalRandomized(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.db")
	opts := StoreOptions{NoSync: true, VerifyCache: true, MmapSize: 64 << 20, BlobFileSize: 4 << 10}
	open := func() *Store {
		s, err := Open(path, opts)
		must(t, err)
		s.parts = newPartCache(8)
		s.journal.max, s.journal.maxEntries = 3, 12
		return s
	}
	js := open()
	defer func() { js.Close() }()
	plain, err := Open(filepath.Join(dir, "b.db"), StoreOptions{NoSync: true})
	must(t, err)
	defer plain.Close()
	plain.parts = nil // no overlay: every record goes to the bucket at once

	type held struct {
		r    *heldReader
		want string
		from int
	}
	var readers []held
	defer func() { // before the store closes, which waits for its readers
		for _, h := range readers {
			close(h.r.req)
			<-h.r.done
		}
	}()
	checkHeld := func(round int) {
		for _, h := range readers {
			var got string
			var err error
			h.r.do(func(tx *Tx) { got, err = partitionsSeen(tx) })
			if err != nil || got != h.want {
				t.Fatalf("round %d, reader from round %d: read (%v)\n%s\nwant\n%s", round, h.from, err, got, h.want)
			}
		}
	}
	const parts = 12
	rng := rand.New(rand.NewPCG(7, 9))
	seq, folded := 0, 0 // rounds that folded
	for round := range 400 {
		ops := randomPartOps(rng, parts, 5, 6)
		fail := rng.IntN(6) == 0
		apply := applyPartOps(t, round, seq, ops, rng.IntN(40) == 0, fail)
		foldsBefore := js.journal.folded
		if err := js.Update(apply); err != nil && !fail {
			t.Fatalf("round %d, journaled store: %v", round, err)
		}
		if js.journal.folded > foldsBefore {
			folded++
		}
		if err := plain.Update(apply); err != nil && !fail {
			t.Fatalf("round %d, plain store: %v", round, err)
		}
		if !fail {
			for _, o := range ops {
				seq += o.n
			}
		}
		sameDigest(t, js, plain, "round %d: digests differ", round)
		checkHeld(round)
		checkJournal(t, js, len(readers) > 0)

		switch k := rng.IntN(10); {
		case k == 0 && len(readers) < 4:
			var want string
			view(t, plain, func(tx *Tx) (err error) { want, err = partitionsSeen(tx); return err })
			readers = append(readers, held{r: holdReader(js), want: want, from: round})
		case k == 1 && len(readers) > 0:
			i := rng.IntN(len(readers))
			readers[i].r.close(t)
			readers = slices.Delete(readers, i, i+1)
		case k == 2 && len(readers) == 0:
			// Closing leaves the journal in the file; opening folds it.
			if len(js.journal.seqs) > 0 {
				must(t, js.Close())
				js = open()
				if len(js.journal.seqs) != 0 || len(js.journal.vers) != 0 {
					t.Fatalf("round %d: reopened store journals %d transactions", round, len(js.journal.seqs))
				}
				view(t, js, func(tx *Tx) error {
					if k, _ := tx.bucket(bPJournal).Cursor().First(); k != nil {
						t.Fatalf("round %d: the journal bucket is not empty after opening", round)
					}
					return nil
				})
				sameDigest(t, js, plain, "round %d, reopened: digests differ", round)
				checkAccounting(t, js)
			}
		}
	}
	for _, h := range readers {
		h.r.close(t)
	}
	readers = nil
	checkAccounting(t, js)
	if folded < 100 {
		t.Fatalf("only %d of 400 rounds folded: the bound is not exercised", folded)
	}
}

// A transaction over more records than the entry bound folds two journaled
// transactions at most, and the journal comes back under its bounds.
func TestJournalFoldsAtMostTwoATransaction(t *testing.T) {
	s := openStore(t)
	s.journal.max, s.journal.maxEntries = 4, 50
	pids := newPartitions(t, s, 40)
	for round := range 30 {
		before := len(s.journal.seqs)
		update(t, s, func(tx *Tx) error {
			for _, pid := range pids[:10+round%30] {
				appendMsgs(t, tx, &Partition{ID: pid}, int64(round), fmt.Sprintf("m%d-%d", round, pid))
			}
			return nil
		})
		if got := len(s.journal.seqs); got < before-1 {
			t.Fatalf("round %d: %d journaled transactions, %d before: more than two folded", round, got, before)
		}
		checkJournal(t, s, false)
	}
	if n, e := len(s.journal.seqs), s.journal.entries; n > 5 || e > 50+40 {
		t.Fatalf("journal of %d transactions, %d entries, past its bounds", n, e)
	}
}

func TestJournalBlobRoundTrip(t *testing.T) {
	keys := []string{"a", "bb", strings.Repeat("k", 300)}
	recs := [][]byte{{recordCompact, 1, 2}, nil, bytes.Repeat([]byte{7}, 1000)}
	blob, held := journalBlob(keys, recs)
	for i := range recs {
		if !bytes.Equal(held[i], recs[i]) || (held[i] == nil) != (recs[i] == nil) {
			t.Fatalf("entry %d held as %x, want %x", i, held[i], recs[i])
		}
	}
	gk, gr, err := parseJournalBlob(blob)
	must(t, err)
	if len(gk) != len(keys) {
		t.Fatalf("%d entries, want %d", len(gk), len(keys))
	}
	for i := range keys {
		if string(gk[i]) != keys[i] || !bytes.Equal(gr[i], recs[i]) || (gr[i] == nil) != (recs[i] == nil) {
			t.Fatalf("entry %d: %q %x, want %q %x", i, gk[i], gr[i], keys[i], recs[i])
		}
	}
	for cut := range len(blob) {
		if _, _, err := parseJournalBlob(blob[:cut]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("blob cut at %d: %v, want ErrCorrupt", cut, err)
		}
	}
	for i := range blob {
		bad := bytes.Clone(blob)
		bad[i] ^= 0x40
		if _, _, err := parseJournalBlob(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v, want ErrCorrupt", i, err)
		}
	}
}

func FuzzJournalBlob(f *testing.F) {
	b, _ := journalBlob([]string{"q", "qq"}, [][]byte{{recordCompact}, nil})
	f.Add(b)
	f.Add([]byte("J\x01\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, recs, err := parseJournalBlob(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		ks := make([]string, len(keys))
		for i, k := range keys {
			ks[i] = string(k)
		}
		again, _ := journalBlob(ks, recs)
		if !bytes.Equal(again, b) {
			t.Fatalf("%x re-encodes as %x", b, again)
		}
	})
}
