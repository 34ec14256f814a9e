package checker

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

// FuzzCheck: `crown-chaos check` reads history files that may be truncated,
// hand-edited or from another version. Whatever history.Read accepts, the
// checker must judge without panicking.
func FuzzCheck(f *testing.F) {
	for _, b := range []*h{clean(), (&h{}).push(0, 10, history.OK, 0, 1).pop(20, 30, "g1", 1)} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for i := range b.ops {
			if err := enc.Encode(&b.ops[i]); err != nil {
				f.Fatal(err)
			}
		}
		f.Add(buf.Bytes())
	}
	f.Add([]byte(`{"kind":"pop","id":1,"start":5,"end":1,"outcome":"ok","items":[{"seq":-3}]}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ops, err := history.Read(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, opt := range []Options{{}, {RequireFinal: true}} {
			if res := Check(ops, opt); res == nil {
				t.Fatal("no result")
			}
		}
	})
}
