package raftnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// pieceSizes covers every boundary of the cut: empty, one piece, exactly
// pieceMin, one byte into a second piece, a group commit, exactly
// pieceSlots pieces of pieceMin, one byte past (bigger pieces), and an
// entry of megabytes.
var pieceSizes = []int{0, 1, pieceMin - 1, pieceMin, pieceMin + 1, 160 << 10,
	pieceMin * pieceSlots, pieceMin*pieceSlots + 1, 3<<20 + 7}

// entryBytes is entry i's data: n bytes that differ from entry to entry
// and from piece to piece.
func entryBytes(i uint64, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(uint64(j)*31 + i*7 + uint64(j>>14))
	}
	return b
}

func sameLog(t *testing.T, got, want *raft.Log) {
	t.Helper()
	if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
		!bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) ||
		!got.AppendedAt.Equal(want.AppendedAt) {
		t.Fatalf("entry %d read back as index %d term %d type %v, %d bytes (want term %d type %v, %d bytes, equal: %v)",
			want.Index, got.Index, got.Term, got.Type, len(got.Data), want.Term, want.Type, len(want.Data),
			bytes.Equal(got.Data, want.Data))
	}
}

// Entries of every size go in as pieces and come back whole, with every
// field, over an in-memory store and a real raft-boltdb file; deleting a
// prefix (compaction) and a suffix (a conflict) leaves the rest readable.
func TestPieceLogRoundTrip(t *testing.T) {
	bolt, err := openLogStore(filepath.Join(t.TempDir(), logFile))
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	for _, below := range []struct {
		name  string
		store raft.LogStore
	}{{"inmem", raft.NewInmemStore()}, {"boltdb", bolt}} {
		t.Run(below.name, func(t *testing.T) {
			p := newPieceLog(below.store)
			var want []*raft.Log
			at := time.Date(2026, 12, 4, 23, 0, 0, 123456000, time.UTC)
			for i, n := range pieceSizes {
				idx := uint64(10 + i)
				want = append(want, &raft.Log{Index: idx, Term: 3, Type: raft.LogCommand,
					Data: entryBytes(idx, n), Extensions: []byte(fmt.Sprintf("ext%d", i)), AppendedAt: at})
			}
			want[1].Type, want[1].Extensions = raft.LogConfiguration, nil
			// Two appends, as Raft makes them: one entry, then the rest.
			if err := p.StoreLog(want[0]); err != nil {
				t.Fatal(err)
			}
			if err := p.StoreLogs(want[1:]); err != nil {
				t.Fatal(err)
			}
			check := func(first, last uint64) {
				t.Helper()
				checkExtent(t, p, first, last)
				for _, w := range want {
					var got raft.Log
					err := p.GetLog(w.Index, &got)
					if w.Index < first || w.Index > last {
						if !errors.Is(err, raft.ErrLogNotFound) {
							t.Fatalf("deleted entry %d: %v, want ErrLogNotFound", w.Index, err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("entry %d: %v", w.Index, err)
					}
					sameLog(t, &got, w)
				}
			}
			last := want[len(want)-1].Index
			check(10, last)
			// Each entry took as many keys as the cut says, and no more.
			for _, w := range want {
				size := pieceSize(len(w.Data))
				n := max(1, (len(w.Data)+size-1)/size)
				if n > pieceSlots {
					t.Fatalf("entry of %d bytes cut into %d pieces", len(w.Data), n)
				}
				var l raft.Log
				if err := below.store.GetLog(pieceKey(w.Index)+uint64(n-1), &l); err != nil {
					t.Fatalf("entry %d's last piece (%d of %d): %v", w.Index, n, n, err)
				}
				if n == pieceSlots {
					continue // the next key is the next entry's
				}
				if err := below.store.GetLog(pieceKey(w.Index)+uint64(n), &l); !errors.Is(err, raft.ErrLogNotFound) {
					t.Fatalf("entry %d has a piece past its %d: %v", w.Index, n, err)
				}
			}
			if err := p.DeleteRange(0, 12); err != nil {
				t.Fatal(err)
			}
			check(13, last)
			if err := p.DeleteRange(last-1, last); err != nil {
				t.Fatal(err)
			}
			check(13, last-2)
			if err := p.DeleteRange(13, last-2); err != nil {
				t.Fatal(err)
			}
			checkExtent(t, p, 0, 0) // emptied
		})
	}
}

// Each piece, encoded as raft-boltdb encodes it, fits with bbolt's page and
// element headers and its key within the power of two its size was cut
// below (pieceSlack): raft-boltdb's buffer, grown by doubling, stops there,
// and a leaf of one or two pieces takes no page more than the data needs.
func TestPiecesEncodeWithinAPowerOfTwo(t *testing.T) {
	const bboltHeaders = 16 + 16 + 8 // page header, leaf element, key
	handle := &codec.MsgpackHandle{BasicHandle: codec.BasicHandle{TimeNotBuiltin: true}}
	for _, n := range pieceSizes {
		size := pieceSize(n)
		limit := size + pieceSlack
		if limit&(limit-1) != 0 {
			t.Fatalf("entry of %d bytes: pieces of %d bytes are not a power of two less pieceSlack", n, size)
		}
		l := &raft.Log{Index: maxPieceIndex, Term: 1 << 40, Type: raft.LogCommand, Data: entryBytes(1, n),
			AppendedAt: time.Date(2026, 12, 6, 9, 0, 0, 123456789, time.UTC)}
		pieces, err := cutPieces([]*raft.Log{l})
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range pieces {
			var buf bytes.Buffer
			if err := codec.NewEncoder(&buf, handle).Encode(p); err != nil {
				t.Fatal(err)
			}
			if got := buf.Len() + bboltHeaders; got > limit {
				t.Fatalf("entry of %d bytes, piece %d of %d: %d bytes encoded with bbolt's headers, over %d",
					n, i+1, len(pieces), got, limit)
			}
		}
	}
}

// A log cut into pieces of another size (before pieceSlack, every piece
// but the last was 16 KiB) reads back whole: the reader takes each piece
// as it finds it.
func TestPieceLogReadsPiecesOfAnySize(t *testing.T) {
	store := raft.NewInmemStore()
	p := newPieceLog(store)
	want := &raft.Log{Index: 7, Term: 2, Type: raft.LogCommand, Data: entryBytes(7, 160<<10),
		AppendedAt: time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)}
	const old = 16 << 10
	n := (len(want.Data) + old - 1) / old
	head := append(appendPieceHead(nil, n, len(want.Data)), want.Data[:old]...)
	pieces := []*raft.Log{{Index: pieceKey(7), Term: 2, Type: raft.LogCommand, Data: head, AppendedAt: want.AppendedAt}}
	for off := old; off < len(want.Data); off += old {
		pieces = append(pieces, &raft.Log{Index: pieceKey(7) + uint64(len(pieces)), Term: 2, Type: raft.LogCommand,
			Data: want.Data[off:min(off+old, len(want.Data))]})
	}
	if err := store.StoreLogs(pieces); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := p.GetLog(7, &got); err != nil {
		t.Fatal(err)
	}
	sameLog(t, &got, want)
}

// Damaged pieces are errors that say so, never a panic or a short entry.
func TestPieceLogDamagedPieces(t *testing.T) {
	store := raft.NewInmemStore()
	p := newPieceLog(store)
	data := entryBytes(5, 3*pieceMin+10)
	if err := p.StoreLog(&raft.Log{Index: 5, Term: 1, Type: raft.LogCommand, Data: data}); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := p.GetLog(5, &l); err != nil || !bytes.Equal(l.Data, data) {
		t.Fatalf("intact entry: %v", err)
	}
	var second raft.Log
	if err := store.GetLog(pieceKey(5)+1, &second); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		damage func()
		undo   func()
	}{
		{"missing middle piece", func() { store.DeleteRange(pieceKey(5)+1, pieceKey(5)+1) }, func() { store.StoreLog(&second) }},
		{"piece grown", func() {
			big := second
			big.Data = append(bytes.Clone(second.Data), 1, 2, 3)
			store.StoreLog(&big)
		}, func() { store.StoreLog(&second) }},
	} {
		c.damage()
		if err := p.GetLog(5, &l); err == nil {
			t.Errorf("%s: read an entry of %d bytes without an error", c.name, len(l.Data))
		}
		c.undo()
	}
	var first raft.Log
	if err := store.GetLog(pieceKey(5), &first); err != nil {
		t.Fatal(err)
	}
	first.Data = append([]byte{pieceVersion + 1}, first.Data[1:]...)
	store.StoreLog(&first)
	if err := p.GetLog(5, &l); !errors.Is(err, errPieces) {
		t.Fatalf("unknown header version: %v, want errPieces", err)
	}
}

// A log an earlier build kept in raft.db, one key an entry, moves into
// log.db with every entry and stable key; raft.db becomes a note that
// raft-boltdb refuses to open, so an older build stops instead of reading
// the new layout; opening again finds the moved log as it was.
func TestOpenLogMovesLegacyLog(t *testing.T) {
	dir := t.TempDir()
	legacy := filepath.Join(dir, legacyLogFile)
	want := writeLegacyLog(t, legacy, 150, 400)

	store, path, err := openLog(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, logFile) {
		t.Fatalf("log at %s", path)
	}
	checkMovedLog(t, store, want, 150, 400)
	store.Close()
	note, err := os.ReadFile(legacy)
	if err != nil || !bytes.Equal(note, legacyNote) {
		t.Fatalf("raft.db after the move: %q, %v", note, err)
	}
	if old, err := raftboltdb.New(raftboltdb.Options{Path: legacy}); err == nil {
		old.Close()
		t.Fatal("raft-boltdb opened the note an older build would find")
	}
	if again, err := os.ReadFile(legacy); err != nil || !bytes.Equal(again, legacyNote) {
		t.Fatalf("the refused open changed the note: %q, %v", again, err)
	}
	if _, err := os.Stat(filepath.Join(dir, logFile+migratingSuffix)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the migration's file is left: %v", err)
	}

	store, _, err = openLog(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	checkMovedLog(t, store, want, 150, 400)
}

// A move can stop anywhere and the next start finishes it: before the
// rename (an unfinished log.db.migrating, raft.db whole) it starts over;
// after it (log.db whole, raft.db still a log) it only writes the note and
// keeps log.db as it is. A note without log.db is an error.
func TestOpenLogFinishesAnInterruptedMove(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	t.Run("before the rename", func(t *testing.T) {
		dir := t.TempDir()
		want := writeLegacyLog(t, filepath.Join(dir, legacyLogFile), 1, 40)
		if err := os.WriteFile(filepath.Join(dir, logFile+migratingSuffix), []byte("half a bbolt file"), 0o644); err != nil {
			t.Fatal(err)
		}
		store, _, err := openLog(dir, quiet)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		checkMovedLog(t, store, want, 1, 40)
	})
	t.Run("after the rename", func(t *testing.T) {
		dir := t.TempDir()
		legacy := filepath.Join(dir, legacyLogFile)
		writeLegacyLog(t, legacy, 1, 40)
		// The moved log, then an entry only it holds: a second move would
		// lose it.
		store, _, err := openLog(dir, quiet)
		if err != nil {
			t.Fatal(err)
		}
		extra := &raft.Log{Index: 41, Term: 9, Type: raft.LogCommand, Data: []byte("after the move")}
		if err := newPieceLog(store).StoreLog(extra); err != nil {
			t.Fatal(err)
		}
		store.Close()
		writeLegacyLog(t, legacy+".again", 1, 40)
		if err := os.Rename(legacy+".again", legacy); err != nil {
			t.Fatal(err)
		}
		store, _, err = openLog(dir, quiet)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		var got raft.Log
		if err := newPieceLog(store).GetLog(41, &got); err != nil {
			t.Fatalf("the moved log lost an entry: %v", err)
		}
		sameLog(t, &got, extra)
		if note, err := os.ReadFile(legacy); err != nil || !bytes.Equal(note, legacyNote) {
			t.Fatalf("raft.db: %q, %v", note, err)
		}
	})
	t.Run("note without log", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, legacyLogFile), legacyNote, 0o644); err != nil {
			t.Fatal(err)
		}
		if store, _, err := openLog(dir, quiet); err == nil || !strings.Contains(err.Error(), "missing") {
			if store != nil {
				store.Close()
			}
			t.Fatalf("opened a directory whose log is gone: %v", err)
		}
	})
}

// writeLegacyLog writes raft.db as builds before the piece layout did:
// entries first..last under their own index (sizes cycling through
// pieceSizes but the megabytes), Raft's stable keys, and a compacted front.
func writeLegacyLog(t *testing.T, path string, first, last uint64) []*raft.Log {
	t.Helper()
	s, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var logs []*raft.Log
	for i := uint64(1); i <= last; i++ {
		n := pieceSizes[int(i)%(len(pieceSizes)-1)]
		logs = append(logs, &raft.Log{Index: i, Term: 2 + i/100, Type: raft.LogCommand, Data: entryBytes(i, n),
			AppendedAt: time.Unix(1700000000, int64(i)).UTC()})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if first > 1 {
		if err := s.DeleteRange(1, first-1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 6); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("node2")); err != nil {
		t.Fatal(err)
	}
	return logs[first-1:]
}

func checkExtent(t *testing.T, p *pieceLog, first, last uint64) {
	t.Helper()
	if f, err := p.FirstIndex(); err != nil || f != first {
		t.Fatalf("first index %d, %v; want %d", f, err, first)
	}
	if l, err := p.LastIndex(); err != nil || l != last {
		t.Fatalf("last index %d, %v; want %d", l, err, last)
	}
}

func checkMovedLog(t *testing.T, store *raftboltdb.BoltStore, want []*raft.Log, first, last uint64) {
	t.Helper()
	p := newPieceLog(store)
	checkExtent(t, p, first, last)
	for _, w := range want {
		var got raft.Log
		if err := p.GetLog(w.Index, &got); err != nil {
			t.Fatalf("entry %d: %v", w.Index, err)
		}
		sameLog(t, &got, w)
	}
	if term, err := store.GetUint64([]byte("CurrentTerm")); err != nil || term != 6 {
		t.Fatalf("CurrentTerm %d, %v", term, err)
	}
	if cand, err := store.Get([]byte("LastVoteCand")); err != nil || string(cand) != "node2" {
		t.Fatalf("LastVoteCand %q, %v", cand, err)
	}
}

// A node whose log an earlier build wrote starts on this build: the log
// moves, and a state machine rebuilt from nothing replays it to the same
// state (so every entry read back whole), then goes on committing.
func TestNodeStartsOnALegacyLog(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig("n1", freeAddr(t), dir, nil)
	n := startNode(t, cfg)
	waitLeader(t, n)
	// Payloads from a few bytes to 100 KiB: entries of one and of several
	// pieces.
	last, want := proposeThenStop(t, n, 30, func(i int) *fsm.Push {
		return &fsm.Push{Items: []fsm.PushItem{{Queue: "q", Partition: "p", TxID: fmt.Sprintf("t%d", i),
			Payload: []byte(fmt.Sprintf("%q", strings.Repeat("x", i*i*110)))}}}
	})

	// Rewrite the log as an earlier build kept it, and drop the state
	// machine's file so that the restart replays the whole log.
	raftDir := filepath.Join(dir, "raft")
	store, err := openLogStore(filepath.Join(raftDir, logFile))
	if err != nil {
		t.Fatal(err)
	}
	p := newPieceLog(store)
	first, _ := p.FirstIndex()
	lastStored, _ := p.LastIndex()
	old, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir, legacyLogFile)})
	if err != nil {
		t.Fatal(err)
	}
	for i := first; i <= lastStored; i++ {
		var l raft.Log
		if err := p.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if err := old.StoreLog(&l); err != nil {
			t.Fatal(err)
		}
	}
	store.Close() // bbolt's lock: readStableKeys opens the file again
	stable, err := readStableKeys(filepath.Join(raftDir, logFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range stable {
		if err := old.Set(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	old.Close()
	for _, f := range []string{filepath.Join(raftDir, logFile), filepath.Join(dir, "state", "fsm.db")} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}

	n2 := restartReplaying(t, cfg, last, want)
	if note, err := os.ReadFile(filepath.Join(raftDir, legacyLogFile)); err != nil || !bytes.Equal(note, legacyNote) {
		t.Fatalf("raft.db after the start: %.40q, %v", note, err)
	}
	if _, _, err := n2.node.Propose(context.Background(), push("q", "after")); err != nil {
		t.Fatalf("propose after the move: %v", err)
	}
}
