package segments

import (
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// The loop kicks the state database and the blob files, and stops with
// the store: no kick after Close returns.
func TestWritebackKicksStateAndBlobFiles(t *testing.T) {
	s := openStore(t)
	update(t, s, func(tx *Tx) error {
		appendMsgs(t, tx, newPartition(t, tx, "q", "p"), 1, "a", "b")
		return nil
	})
	var (
		mu     sync.Mutex
		kicked = map[string]int{}
		closed bool
	)
	w, err := startWritebackLoop(s, time.Millisecond, func(f *os.File) error {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			t.Errorf("kicked %s after the loop stopped", f.Name())
		}
		kicked[filepath.Ext(f.Name())]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		db, seg := kicked[".db"], kicked[".seg"]
		mu.Unlock()
		if db >= 2 && seg >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kicks after 10 s: %v", kicked)
		}
		time.Sleep(time.Millisecond)
	}
	w.close()
	mu.Lock()
	closed = true
	mu.Unlock()
	time.Sleep(5 * time.Millisecond)
}

// The store starts the loop only when it does not fsync itself, and Close
// stops it.
func TestWritebackFollowsOptions(t *testing.T) {
	for _, o := range []StoreOptions{
		{NoSync: true, Writeback: time.Millisecond},
		{NoSync: false, Writeback: time.Millisecond},
		{NoSync: true},
	} {
		s, err := Open(filepath.Join(t.TempDir(), "state.db"), o)
		if err != nil {
			t.Fatal(err)
		}
		want := o.NoSync && o.Writeback > 0 && writebackSupported
		if got := s.writeback != nil; got != want {
			t.Errorf("%+v: writeback running %v, want %v", o, got, want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s.writeback.close() // stopping twice is harmless
		if s.writeback != nil {
			select {
			case <-s.writeback.done:
			default:
				t.Errorf("%+v: writeback still running after Close", o)
			}
		}
	}
}

// startWriteback works on a file with dirty pages, through a read-only
// handle too, and fails cleanly on a closed one.
func TestStartWriteback(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("sync_file_range is Linux only; startWriteback is a no-op elsewhere")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := startWriteback(f); err != nil {
		t.Fatalf("on an open file: %v", err)
	}
	// The loop's handle on the state database is read-only.
	ro, err := os.Open(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("dirty"), 0); err != nil {
		t.Fatal(err)
	}
	if err := startWriteback(ro); err != nil {
		t.Fatalf("on a read-only handle: %v", err)
	}
	ro.Close()
	f.Close()
	if err := startWriteback(f); err == nil {
		t.Fatal("on a closed file: no error")
	}
}
