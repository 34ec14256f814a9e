package jsonscan

import (
	"strings"
	"testing"
)

// BenchmarkSkipString validates strings of the shapes the hot path meets:
// a member name, a UUID, a benchmark payload's padding, and text with
// multi-byte characters and an escape.
func BenchmarkSkipString(b *testing.B) {
	for _, c := range []struct{ name, s string }{
		{"name", `"transactionId"`},
		{"uuid", `"01a24a7e-03d0-7000-8000-00000046e47c"`},
		{"pad220", `"` + strings.Repeat("x", 220) + `"`},
		{"text", `"` + strings.Repeat("héllo wörld, ", 16) + `\"q\""`},
	} {
		in := []byte(c.s)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if end, err := skipString(in, 0); err != nil || end != len(in) {
					b.Fatal(end, err)
				}
			}
		})
	}
}
