package raftnode

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// pieceLog is the Raft log as Raft sees it, stored in the raft-boltdb log
// below it with each entry cut into pieces under consecutive keys.
//
// Why: bbolt rewrites a leaf whole whenever a key is added to it, keeps at
// least two values in a leaf and splits none of five or fewer, so with one
// key an entry every append rewrote the log's last leaf with the two to four
// group commits already in it: a 160 KiB entry wrote about 1.3 MB. Cut into
// pieces of about 16 KiB, an append rewrites a few pieces of the entries before it
// (BenchmarkLogStoreRound: 0.36 MB, 0.26 MB since pieceSlack). Where the disk's bandwidth is the
// limit, which on cloud volumes it often is, those bytes were the commit's
// latency: with each node's writes held to 50 MB/s the produce rate rose
// from about 28,400 msg/s to 40,900-55,400 (docs/performance.md, lesson 44). Raft still sees one
// entry a group commit: the pieces cost raft-boltdb an encode each, and
// the first piece a copy (its header goes before the data).
//
// Layout: entry i's pieces are the keys pieceKey(i) to pieceKey(i)+n-1,
// n ≤ pieceSlots, so entries keep Raft's order and an entry's pieces are
// neighbours. The first piece carries the entry's term, type, extensions
// and append time, and its data starts with a header (appendPieceHead); the
// others carry data only. Keys start at pieceBase, far above any index a
// log of one key an entry used, so a key says which layout wrote it.
//
// pieceLog holds no state of its own: every answer comes from the store,
// so it is as safe for concurrent use as the store.
type pieceLog struct {
	store raft.LogStore
}

const (
	pieceBase  = uint64(1) << 48
	pieceSlots = 16
	// pieceMin is the size of an entry's pieces but the last, unless the
	// entry needs bigger ones to fit in pieceSlots. An entry of up to
	// pieceMin bytes (a pop, an ack, most small pushes) is one piece.
	pieceMin = 16<<10 - pieceSlack
	// pieceSlack keeps an encoded piece within a power of two. raft-boltdb
	// encodes each piece into a buffer grown from empty by doubling, and
	// bbolt writes a leaf in whole pages: a piece of exactly 16 KiB encodes
	// to 75 bytes over, which took the buffer to 32 KiB (allocating 63 KiB
	// for the piece instead of 31) and a leaf of one or two pieces a page
	// further. 256 bytes cover the encoding of the piece's fields, its
	// header, and bbolt's page and element headers.
	pieceSlack = 256
	// pieceVersion is the header's first byte.
	pieceVersion = 1
	// maxPieceIndex is the largest Raft index the layout can key.
	maxPieceIndex = (^uint64(0)-pieceBase)/pieceSlots - 1
)

var errPieces = errors.New("raft log: entry pieces do not decode")

func newPieceLog(store raft.LogStore) *pieceLog { return &pieceLog{store: store} }

func pieceKey(index uint64) uint64 { return pieceBase + index*pieceSlots }

// pieceIndex is the entry a stored key belongs to.
func pieceIndex(key uint64) (uint64, error) {
	if key < pieceBase {
		return 0, fmt.Errorf("%w: key %d lies below the pieces' range", errPieces, key)
	}
	return (key - pieceBase) / pieceSlots, nil
}

// pieceSize is the size of every piece but the last of an entry of n bytes:
// pieceMin, or for an entry too large for pieceSlots of those, the least
// power of two less pieceSlack that fits it in pieceSlots.
func pieceSize(n int) int {
	size := pieceMin + pieceSlack
	for (size-pieceSlack)*pieceSlots < n {
		size *= 2
	}
	return size - pieceSlack
}

// appendPieceHead appends the first piece's header: the version, the
// number of pieces and the entry's data length, as uvarints.
func appendPieceHead(b []byte, pieces int, total int) []byte {
	b = append(b, pieceVersion)
	b = binary.AppendUvarint(b, uint64(pieces))
	return binary.AppendUvarint(b, uint64(total))
}

// parsePieceHead reads a first piece's data: the number of pieces, the
// entry's data length and the data this piece holds. It reads bytes from
// disk, so it checks everything and never panics (FuzzParsePieceHead).
func parsePieceHead(b []byte) (pieces int, total uint64, rest []byte, err error) {
	if len(b) == 0 || b[0] != pieceVersion {
		return 0, 0, nil, fmt.Errorf("%w: unknown header version", errPieces)
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n < 1 || n > pieceSlots {
		return 0, 0, nil, fmt.Errorf("%w: piece count", errPieces)
	}
	total, m := binary.Uvarint(b[1+k:])
	if m <= 0 {
		return 0, 0, nil, fmt.Errorf("%w: data length", errPieces)
	}
	rest = b[1+k+m:]
	if uint64(len(rest)) > total || (n == 1 && uint64(len(rest)) != total) {
		return 0, 0, nil, fmt.Errorf("%w: first piece holds %d bytes of %d", errPieces, len(rest), total)
	}
	return int(n), total, rest, nil
}

func (p *pieceLog) FirstIndex() (uint64, error) {
	key, err := p.store.FirstIndex()
	if err != nil || key == 0 {
		return 0, err
	}
	return pieceIndex(key)
}

func (p *pieceLog) LastIndex() (uint64, error) {
	key, err := p.store.LastIndex()
	if err != nil || key == 0 {
		return 0, err
	}
	return pieceIndex(key)
}

func (p *pieceLog) StoreLog(l *raft.Log) error { return p.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores every piece of logs with one StoreLogs of the store
// below: one bbolt commit, as before.
func (p *pieceLog) StoreLogs(logs []*raft.Log) error {
	out, err := cutPieces(logs)
	if err != nil {
		return err
	}
	return p.store.StoreLogs(out)
}

// cutPieces is logs as the store below keeps them. Pieces may be of any
// size: GetLog reads an entry's pieces whatever size cut them.
func cutPieces(logs []*raft.Log) ([]*raft.Log, error) {
	out := make([]*raft.Log, 0, len(logs)+len(logs)/2)
	for _, l := range logs {
		if l.Index > maxPieceIndex {
			return nil, fmt.Errorf("raft log: index %d is past what the piece layout keys", l.Index)
		}
		data := l.Data
		size := pieceSize(len(data))
		n := max(1, (len(data)+size-1)/size)
		first := min(size, len(data))
		// The header goes before the first piece's data, so that piece is
		// a copy (at most pieceMin bytes but for huge entries); the others
		// are slices of the entry, which raft-boltdb encodes without
		// keeping.
		head := make([]byte, 0, 1+2*binary.MaxVarintLen64+first)
		head = append(appendPieceHead(head, n, len(data)), data[:first]...)
		key := pieceKey(l.Index)
		out = append(out, &raft.Log{Index: key, Term: l.Term, Type: l.Type, Data: head,
			Extensions: l.Extensions, AppendedAt: l.AppendedAt})
		for j, off := 1, first; j < n; j, off = j+1, off+size {
			out = append(out, &raft.Log{Index: key + uint64(j), Term: l.Term, Type: l.Type,
				Data: data[off:min(off+size, len(data))]})
		}
	}
	return out, nil
}

// GetLog reads an entry's pieces back into one: a read of the store for
// each. Raft reads the log through its cache and the leader's pending
// entries (leaderappend.go), so this runs for entries older than those.
func (p *pieceLog) GetLog(index uint64, out *raft.Log) error {
	if index > maxPieceIndex {
		return raft.ErrLogNotFound
	}
	key := pieceKey(index)
	var first raft.Log
	if err := p.store.GetLog(key, &first); err != nil {
		return err
	}
	n, total, rest, err := parsePieceHead(first.Data)
	if err != nil {
		return fmt.Errorf("entry %d: %w", index, err)
	}
	*out = first
	out.Index = index
	if n == 1 {
		out.Data = rest
		return nil
	}
	data := make([]byte, 0, total)
	data = append(data, rest...)
	for j := uint64(1); j < uint64(n); j++ {
		var piece raft.Log
		if err := p.store.GetLog(key+j, &piece); err != nil {
			return fmt.Errorf("raft log: entry %d, piece %d of %d: %w", index, j+1, n, err)
		}
		if uint64(len(data)+len(piece.Data)) > total {
			return fmt.Errorf("%w: entry %d holds more than its %d bytes", errPieces, index, total)
		}
		data = append(data, piece.Data...)
	}
	if uint64(len(data)) != total {
		return fmt.Errorf("%w: entry %d holds %d bytes of %d", errPieces, index, len(data), total)
	}
	out.Data = data
	return nil
}

// DeleteRange deletes the pieces of entries lo to hi, in one commit.
func (p *pieceLog) DeleteRange(lo, hi uint64) error {
	if lo > hi || lo > maxPieceIndex {
		return nil
	}
	hi = min(hi, maxPieceIndex)
	return p.store.DeleteRange(pieceKey(lo), pieceKey(hi)+pieceSlots-1)
}
