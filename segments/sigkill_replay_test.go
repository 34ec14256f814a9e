package segments

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// crashLogEntry applies entry i of a deterministic stand-in for the Raft
// log: appends of one to three messages of varying size over three
// partitions, retention of a partition's oldest segment and cuts of one
// message out of a segment, so that blobs are appended, rewritten and
// freed and whole files die. Everything it stores is derived from i alone,
// so any two stores that applied entries 1..n hold the same digest.
func crashLogEntry(tx *Tx, i uint64) error {
	names := []string{"a", "b", "c"}
	if i == 1 {
		q := &Queue{Name: "q", UUID: [16]byte{1}}
		if err := tx.CreateQueue(q); err != nil {
			return err
		}
		for k, n := range names {
			if err := tx.CreatePartition(&Partition{QueueID: q.ID, Name: n, UUID: [16]byte{2, byte(k)}}); err != nil {
				return err
			}
		}
		return nil
	}
	q, err := tx.Queue("q")
	if err != nil || q == nil {
		return fmt.Errorf("queue q: %v", err)
	}
	p, err := tx.Partition(q.ID, names[i%3])
	if err != nil || p == nil {
		return fmt.Errorf("partition %s: %v", names[i%3], err)
	}
	switch {
	case i%7 == 0 && p.Messages > 0:
		if _, err := tx.DeleteSegment(p, p.FirstOffset); err != nil {
			return err
		}
	case i%11 == 0 && p.Messages > 2:
		var offs []uint64
		if err := tx.Scan(p, 0, func(sm *StoredMessage) (bool, error) {
			offs = append(offs, sm.Offset)
			return true, nil
		}); err != nil {
			return err
		}
		if ok, err := tx.DeleteMessage(p, offs[len(offs)/2]); err != nil || !ok {
			return fmt.Errorf("delete %d: %v %v", offs[len(offs)/2], ok, err)
		}
	default:
		msgs := make([]Message, 1+i%3)
		for k := range msgs {
			msgs[k] = Message{TxID: fmt.Sprintf("m%d.%d", i, k), Payload: bytes.Repeat([]byte{byte('a' + i%26)}, int(i*37%300))}
		}
		seq, err := tx.ReserveIDs(uint64(len(msgs)))
		if err != nil {
			return err
		}
		if _, err := tx.AppendSegment(p, int64(i), seq, msgs, false); err != nil {
			return err
		}
	}
	return tx.PutPartition(p)
}

const (
	crashChildEnv = "CROWN_SEGMENTS_SIGKILL_CHILD"
	// crashDeferEnv set makes the child apply with UpdateDeferred.
	crashDeferEnv = "CROWN_SEGMENTS_SIGKILL_DEFER"
)

// crashDefer is how a deferring child keeps its transactions open: long
// enough that kills land inside open transactions of several entries.
var crashDefer = DeferOptions{Uses: 7, Linger: 15 * time.Millisecond}

// crashChild is the process the test kills: it applies log entries from
// the store's applied index on, one bbolt transaction each with the index
// recorded in it (as the state machine does), acknowledges each on stdout
// after its commit, and now and then seals the active file outside the
// log (as a snapshot does). It stops by itself after a while. A deferring
// child applies each entry with UpdateDeferred and acknowledges only what
// a commit has surely covered: once the commit count moved during the
// apply of entry i, every entry before i.
func crashChild(t *testing.T, path string, deferred bool) {
	o := StoreOptions{NoSync: true, BlobFileSize: 1 << 10}
	if deferred {
		o.Defer = crashDefer
	}
	s, err := Open(path, o)
	if err != nil {
		fmt.Printf("open: %v\n", err)
		os.Exit(3)
	}
	var applied uint64
	must(t, s.View(func(tx *Tx) error { applied = tx.Applied(); return nil }))
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	out := bufio.NewWriter(os.Stdout)
	deadline := time.Now().Add(20 * time.Second)
	for i := applied + 1; time.Now().Before(deadline); i++ {
		apply := s.Update
		if deferred {
			apply = s.UpdateDeferred
		}
		before := s.commits.Load()
		if err := apply(func(tx *Tx) error {
			if err := crashLogEntry(tx, i); err != nil {
				return err
			}
			return tx.SetApplied(i)
		}); err != nil {
			fmt.Printf("apply %d: %v\n", i, err)
			os.Exit(3)
		}
		switch {
		case !deferred:
			fmt.Fprintf(out, "ack %d\n", i)
		case s.commits.Load() != before && i > 1:
			fmt.Fprintf(out, "ack %d\n", i-1)
		}
		out.Flush()
		if rng.IntN(40) == 0 {
			if err := s.SealActive(1); err != nil {
				fmt.Printf("seal: %v\n", err)
				os.Exit(3)
			}
		}
	}
	os.Exit(0)
}

// A writer SIGKILLed at arbitrary points (inside a blob write, between
// the write and the bbolt commit, during a rollover or a seal, before a
// dead file is unlinked) leaves a store that opens, holds exactly the
// entries up to its recorded applied index (at least every acknowledged
// one), accounts for its blob files, and takes the replay of the rest.
//
// README "Durability": "After a process crash the files are intact (the
// page cache survives SIGKILL) and Raft replays every entry after the
// recorded index; segment bytes past a recorded length are cut off."
//
// With deferred commits (UpdateDeferred) a kill mostly lands inside a
// transaction holding several entries: the file must then hold the last
// committed prefix, all of it, and nothing of the open transaction.
func TestSIGKILLedWriterRecoversByReplay(t *testing.T) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(t, filepath.Join(dir, "state.db"), os.Getenv(crashDeferEnv) != "")
		return
	}
	if testing.Short() {
		t.Skip("starts and kills child processes")
	}
	t.Run("commit each", func(t *testing.T) { sigkillRounds(t, false) })
	t.Run("deferred", func(t *testing.T) { sigkillRounds(t, true) })
}

func sigkillRounds(t *testing.T, deferred bool) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	ref := openSized(t, filepath.Join(t.TempDir(), "ref.db"), 0)
	var refApplied uint64
	rng := rand.New(rand.NewPCG(11, 12))
	for round := range 12 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSIGKILLedWriterRecoversByReplay$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		if deferred {
			cmd.Env = append(cmd.Env, crashDeferEnv+"=1")
		}
		stdout, err := cmd.StdoutPipe()
		must(t, err)
		cmd.Stderr = os.Stderr
		must(t, cmd.Start())
		acked := make(chan uint64, 1<<16)
		go func() {
			defer close(acked)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if n, ok := strings.CutPrefix(sc.Text(), "ack "); ok {
					i, _ := strconv.ParseUint(n, 10, 64)
					acked <- i
				} else {
					t.Errorf("round %d: child says %q", round, sc.Text())
				}
			}
		}()
		var last uint64
		first, ok := <-acked
		if !ok {
			cmd.Wait()
			t.Fatalf("round %d: the child acknowledged nothing", round)
		}
		last = first
		time.Sleep(time.Duration(1+rng.IntN(60)) * time.Millisecond)
		must(t, cmd.Process.Kill())
		for i := range acked {
			last = i
		}
		cmd.Wait()

		s, err := Open(path, StoreOptions{NoSync: true, VerifyCache: true, BlobFileSize: 1 << 10})
		if err != nil {
			t.Fatalf("round %d: open after SIGKILL: %v", round, err)
		}
		var applied uint64
		view(t, s, func(tx *Tx) error { applied = tx.Applied(); return nil })
		if applied < last {
			s.Close()
			t.Fatalf("round %d: applied index %d, but %d was acknowledged", round, applied, last)
		}
		for ; refApplied < applied; refApplied++ {
			update(t, ref, func(tx *Tx) error {
				if err := crashLogEntry(tx, refApplied+1); err != nil {
					return err
				}
				return tx.SetApplied(refApplied + 1)
			})
		}
		_, want, err := ref.Digest()
		must(t, err)
		if _, got, err := s.Digest(); err != nil || got != want {
			s.Close()
			t.Fatalf("round %d (applied %d): digest %s (%v), want %s", round, applied, got, err, want)
		}
		checkAccounting(t, s)
		must(t, s.Close())
		t.Logf("round %d: killed after %d acknowledged, state at %d", round, last, applied)
	}
}
