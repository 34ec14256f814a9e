package fsm

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// fuzzSeeds are real encodings: every sample command alone, all of them in
// one entry, and an empty entry. The committed corpus in
// testdata/fuzz/FuzzDecodeEntry holds the same kind of inputs.
func fuzzSeeds(f *testing.F) [][]byte {
	f.Helper()
	samples := sampleCommands()
	var out [][]byte
	var all []Command
	for ty := Type(1); ty < 255; ty++ {
		c, ok := samples[ty]
		if !ok {
			continue
		}
		all = append(all, c)
		b, err := AppendEntry(nil, &Entry{Stamp: 1778918400000000, Origin: "n1", Commands: []Command{c}})
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	b, err := AppendEntry(nil, &Entry{Stamp: 1, Origin: "n2", Commands: all})
	if err != nil {
		f.Fatal(err)
	}
	empty, _ := AppendEntry(nil, &Entry{})
	return append(out, b, empty, nil, []byte{EntryVersion})
}

func FuzzDecodeEntry(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		if err != nil {
			if e != nil {
				t.Fatalf("entry %+v returned with error %v", e, err)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownType) {
				t.Fatalf("error %v is neither ErrMalformed nor ErrUnknownType", err)
			}
			return
		}
		for _, c := range e.Commands {
			if m, ok := c.(*Malformed); ok {
				if _, known := lookup(m.Of); !known || m.Err == "" {
					t.Fatalf("malformed placeholder %+v", m)
				}
				return
			}
			if _, known := lookup(c.Type()); !known {
				t.Fatalf("decoded a command of unknown type %d", c.Type())
			}
		}
		// What decodes re-encodes, and the encoding is stable.
		b2, err := AppendEntry(nil, e)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", e, err)
		}
		e2, err := DecodeEntry(b2)
		if err != nil {
			t.Fatalf("decode of re-encoded entry: %v", err)
		}
		b3, err := AppendEntry(nil, e2)
		if err != nil || !bytes.Equal(b2, b3) {
			t.Fatalf("encoding not stable (%v)", err)
		}
	})
}

// FuzzApplyEntry applies whatever decodes to a live state machine: a
// command that passed decoding must never stop the state machine (a panic
// here would stop every replica at the same log index). Entries of an
// unknown type stop it by design and are skipped.
func FuzzApplyEntry(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	// One machine per fuzzing process, with some state for the commands to
	// act on. Only m.f and m.index are used inside the target (the
	// machine's helpers report through f, which the target must not use).
	m := newMachine(f)
	m.push(items("orders.eu", "p-1", "tx-1", "t2")...)
	m.pop(Lease{Queue: "orders.eu", Batch: 1})
	var mu sync.Mutex
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := DecodeEntry(b); errors.Is(err, ErrUnknownType) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		m.index++
		l := &raft.Log{Index: m.index, Type: raft.LogCommand, Data: b}
		func() {
			defer func() {
				if r := recover(); r != nil {
					m.index--
					t.Fatalf("apply panicked: %v", r)
				}
			}()
			m.f.ApplyBatch([]*raft.Log{l})
		}()
	})
}
