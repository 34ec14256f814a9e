package raftnode

import (
	"bytes"
	"testing"
)

// FuzzParsePieceHead feeds arbitrary bytes to the header parser, which
// reads what the disk holds: it never panics, what it accepts is
// consistent, and a header it writes parses back.
func FuzzParsePieceHead(f *testing.F) {
	f.Add(appendPieceHead(nil, 1, 3), []byte("abc"))
	f.Add(appendPieceHead(nil, 10, 160<<10), bytes.Repeat([]byte{1}, pieceMin))
	f.Add([]byte{pieceVersion, 0x80}, []byte{})
	f.Add([]byte{pieceVersion, 17, 1}, []byte{0})
	f.Fuzz(func(t *testing.T, head, body []byte) {
		b := append(bytes.Clone(head), body...)
		n, total, rest, err := parsePieceHead(b)
		if err == nil {
			if n < 1 || n > pieceSlots || uint64(len(rest)) > total || (n == 1 && uint64(len(rest)) != total) {
				t.Fatalf("accepted %d pieces, %d of %d bytes", n, len(rest), total)
			}
			if !bytes.HasSuffix(b, rest) {
				t.Fatal("rest is not the input's tail")
			}
		}
		if len(body) <= 1<<20 {
			for _, pieces := range []int{1, pieceSlots} {
				total := len(body)
				if pieces > 1 {
					total += 1
				}
				n, tot, rest, err := parsePieceHead(append(appendPieceHead(nil, pieces, total), body...))
				if err != nil || n != pieces || tot != uint64(total) || !bytes.Equal(rest, body) {
					t.Fatalf("own header of %d pieces, %d bytes: %d, %d, %v", pieces, total, n, tot, err)
				}
			}
		}
	})
}
