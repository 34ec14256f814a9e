package segments

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Every field round-trips through the compact form whatever its value and
// its relation to the others (the differences wrap), and decodes alike from
// the schema 7 form.
func TestCompactRecordRoundTrip(t *testing.T) {
	ordinary := Partition{ID: 4711, QueueID: 3, UUID: [16]byte{9, 8, 7}, Name: "p1234",
		CreatedAt: 1_764_950_400_000_000, NextOffset: 31, FirstOffset: 12, Messages: 19, Bytes: 4864,
		Segments: 17, LastCreatedAt: 1_764_950_400_000_000 + 93_000_000, IDsIndexedFrom: 1}
	windowed := ordinary
	windowed.WindowMark, windowed.WindowCount, windowed.WindowFirst = ordinary.LastCreatedAt-5_000, 4, 27
	extreme := Partition{ID: math.MaxUint64, QueueID: math.MaxUint64, UUID: [16]byte{0xff, 0xff}, Name: string([]byte{0, 0xff}),
		CreatedAt: math.MinInt64, NextOffset: math.MaxUint64, FirstOffset: 0, Messages: math.MaxUint64,
		Bytes: math.MaxUint64, Segments: math.MaxUint64, LastCreatedAt: math.MaxInt64,
		WindowMark: math.MinInt64, WindowCount: math.MaxUint64, WindowFirst: math.MaxUint64, IDsIndexedFrom: 0}
	// Offsets and times in orders the state machine never leaves them in.
	disordered := Partition{ID: 1, QueueID: 0, Name: "", CreatedAt: 50, LastCreatedAt: -50, NextOffset: 1,
		FirstOffset: 9, WindowFirst: 7, IDsIndexedFrom: 1}
	onlyCount := Partition{ID: 2, QueueID: 1, Name: "w", NextOffset: 5, FirstOffset: 5, WindowCount: 1, IDsIndexedFrom: 5}
	withRefs := ordinary
	for i := range recentMax {
		withRefs.recentAppend(uint64(15+i), blobRef{File: 3, Pos: int64(4096 * i), Len: 300, CreatedAt: ordinary.LastCreatedAt - int64(1000*(recentMax-i)), Count: 1}.encode())
	}
	for _, tc := range []struct {
		name string
		p    Partition
	}{{"ordinary", ordinary}, {"windowed", windowed}, {"extreme", extreme}, {"disordered", disordered},
		{"window count alone", onlyCount}, {"full of references", withRefs}} {
		t.Run(tc.name, func(t *testing.T) {
			k := key8(tc.p.QueueID, []byte(tc.p.Name))
			for form, b := range map[string][]byte{"compact": tc.p.marshal(), "schema 7": tc.p.marshalSchema7()} {
				var got Partition
				if err := got.unmarshal(k, b); err != nil || !reflect.DeepEqual(got, tc.p) {
					t.Fatalf("%s form %x decodes to %+v (%v), want %+v", form, b, got, err, tc.p)
				}
			}
		})
	}
	// What the form is for: an ordinary record without references takes
	// 39 bytes against 119, one holding 16 references 195 against 275.
	for _, tc := range []struct {
		p    Partition
		most int
	}{{ordinary, 40}, {withRefs, 215}} {
		if n, old := len(tc.p.marshal()), len(tc.p.marshalSchema7()); n > tc.most {
			t.Errorf("compact record of %d bytes (schema 7: %d), want at most %d", n, old, tc.most)
		}
	}
}

// A compact record cut short anywhere before its references, with an
// unknown window flag, or with IDsIndexedFrom past its next offset is
// ErrCorrupt; so is an older record whose fields name another queue or
// partition than its key.
func TestCompactRecordCorrupt(t *testing.T) {
	p := Partition{ID: 300, QueueID: 2, UUID: [16]byte{1}, Name: "p", CreatedAt: 1 << 50, NextOffset: 200,
		FirstOffset: 100, Messages: 100, Bytes: 1 << 20, Segments: 7, LastCreatedAt: 1<<50 + 7,
		WindowMark: 1 << 50, WindowCount: 3, WindowFirst: 190, IDsIndexedFrom: 150}
	k := key8(p.QueueID, []byte(p.Name))
	full := p.marshal()
	var got Partition
	for n := 1; n < len(full); n++ {
		if err := got.unmarshal(k, full[:n]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("record cut to %d of %d bytes: %v", n, len(full), err)
		}
	}
	// The error names the field the record ends in.
	idLen := uvarintLen(p.ID)
	for n, field := range map[int]string{1: "ID", 1 + idLen + 5: "UUID", 1 + idLen + 16: "CreatedAt", len(full) - 1: "WindowFirst"} {
		if err := got.unmarshal(k, full[:n]); err == nil || !strings.Contains(err.Error(), field+" cut short") {
			t.Errorf("record cut to %d bytes: %v, want it to name %s", n, err, field)
		}
	}
	flagAt := len(full) - 1 - varintLen(int64(p.LastCreatedAt-p.WindowMark)) - uvarintLen(p.WindowCount) - varintLen(int64(p.NextOffset-p.WindowFirst))
	if full[flagAt] != 1 {
		t.Fatalf("window flag not at %d of %x", flagAt, full)
	}
	bad := slices.Clone(full)
	bad[flagAt] = 2
	past := p
	past.IDsIndexedFrom = p.NextOffset + 1
	renamed := p
	renamed.Name = "r"
	moved := p
	moved.QueueID = 3
	for _, tc := range []struct {
		name string
		key  []byte
		rec  []byte
	}{
		{"window flag 2", k, bad},
		{"IDsIndexedFrom past the next offset", k, past.marshal()},
		{"schema 7 record of another partition", k, renamed.marshalSchema7()},
		{"schema 7 record of another queue", k, moved.marshalSchema7()},
		{"compact record under a key without a queue number", []byte{2}, full},
	} {
		if err := got.unmarshal(tc.key, tc.rec); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if err := got.unmarshal(k, bad); err == nil || !strings.Contains(err.Error(), "window flag 2 unknown") {
		t.Errorf("window flag 2: %v, want it named", err)
	}
}

func varintLen(v int64) int { return len(binary.AppendVarint(nil, v)) }

func uvarintLen(v uint64) int { return len(binary.AppendUvarint(nil, v)) }

// A schema 7 file opens as this build's schema with nothing to rewrite: its
// records read as they are, each is written compact when next written, and
// at every step its digest is that of a store that never held the older
// form.
func TestSchema7FileOpens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	old, fresh := openSized(t, path, 0), openStore(t)
	each := func(fn func(s *Store, tx *Tx) error) {
		t.Helper()
		for _, s := range []*Store{old, fresh} {
			update(t, s, func(tx *Tx) error { return fn(s, tx) })
		}
	}
	same := func(when string) {
		t.Helper()
		sameDigest(t, old, fresh, "%s: digests differ", when)
	}
	var want [3][]string
	each(func(s *Store, tx *Tx) error {
		for n := range want {
			p := newPartition(t, tx, "q", fmt.Sprintf("p%d", n))
			for i := range recentMax + 3*n {
				m := fmt.Sprintf("%d-%d", n, i)
				appendMsgs(t, tx, p, int64(i), m)
				if s == old {
					want[n] = append(want[n], fmt.Sprintf("%d:%s", i+1, m))
				}
			}
		}
		return nil
	})
	if n := rewriteRecords(t, old, func(p *Partition) []byte { return p.marshalSchema7() }); n != len(want) {
		t.Fatalf("rewrote %d records, want %d", n, len(want))
	}
	same("records in the schema 7 form")
	old = reopenAs(t, old, path, 7)
	same("after opening the schema 7 file")
	each(func(s *Store, tx *Tx) error {
		appendMsgs(t, tx, &Partition{ID: 1}, 100, "new")
		return nil
	})
	want[0] = append(want[0], fmt.Sprintf("%d:new", len(want[0])+1))
	same("after a write to one partition")
	view(t, old, func(tx *Tx) error {
		for n := range want {
			k := key8(1, []byte(fmt.Sprintf("p%d", n)))
			v := tx.tx.Bucket(bucketParts).Get(k)
			if compact := len(v) > 0 && v[0] == recordCompact; compact != (n == 0) {
				t.Errorf("partition p%d stored %x: compact %t, want it compact only once written", n, v, compact)
			}
			if got := scan(t, tx, uint64(n+1), 0); !slices.Equal(got, want[n]) {
				t.Errorf("scan of p%d: %v, want %v", n, got, want[n])
			}
			checkRecentInvariant(t, tx, uint64(n+1))
		}
		return nil
	})
}

// sameDigest fails the test with the message format makes unless stores a
// and b hold the same state.
func sameDigest(t *testing.T, a, b *Store, format string, args ...any) {
	t.Helper()
	_, da, err := a.Digest()
	must(t, err)
	_, db, err := b.Digest()
	must(t, err)
	if da != db {
		t.Fatalf(format, args...)
	}
}
