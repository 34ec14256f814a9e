package checker

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

// fuzzSeedBadPop is a pop answered before it was sent that delivers a
// negative seq, written in the file's own field names.
const fuzzSeedBadPop = `{"k":"pop","id":1,"t0":5,"t1":1,"o":"ok","items":[{"s":-3}]}` + "\n"

// TestFuzzSeedBadPopDecodes: a seed in other field names decodes to an
// empty record and fuzzes nothing of what it was written for.
func TestFuzzSeedBadPopDecodes(t *testing.T) {
	ops, err := history.Read(bytes.NewReader([]byte(fuzzSeedBadPop)))
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 {
		t.Fatalf("%d records", len(ops))
	}
	op := ops[0]
	if op.Kind != history.KindPop || op.Start != 5 || op.End != 1 || op.Outcome != history.OK || len(op.Items) != 1 || op.Items[0].Seq != -3 {
		t.Fatalf("seed decodes to %+v", op)
	}
	if res := Check(ops, Options{}); res.Deliveries != 1 {
		t.Fatalf("the seed's pop was not judged: %d deliveries", res.Deliveries)
	}
}

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
	f.Add([]byte(fuzzSeedBadPop))
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
