package history

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTxnRoundTrip(t *testing.T) {
	for _, seq := range []int64{0, 7, 1234567, 99999999} {
		got, ok := ParseTxn(Txn("r1", "chaos-q1", "p3", seq))
		if !ok || got != seq {
			t.Fatalf("seq %d: got %d %v", seq, got, ok)
		}
	}
	for _, bad := range []string{"", "x", "a.b.", "a.b.1x", "probe.node1"} {
		if _, ok := ParseTxn(bad); ok {
			t.Fatalf("%q parsed", bad)
		}
	}
}

func TestWriteAndReadTornFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	w, err := Create(path, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w.Write(&Op{Kind: KindPush, Start: w.Now(), Outcome: OK, Items: []Item{{Partition: "p", Seq: 1, Txn: "t.1"}}})
	w.Write(&Op{Kind: KindNote, Label: "x"})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ops, err := ReadFile(path)
	if err != nil || len(ops) != 2 || ops[0].ID != 1 || ops[1].ID != 2 || ops[0].Items[0].Seq != 1 {
		t.Fatalf("%v %+v", err, ops)
	}
	// A run killed mid-write leaves a torn last line: the rest still reads.
	torn := `{"id":1,"k":"push","t0":5}` + "\n" + `{"id":2,"k":"po`
	ops, err = Read(strings.NewReader(torn))
	if err != nil || len(ops) != 1 {
		t.Fatalf("%v %+v", err, ops)
	}
	if _, err := Read(strings.NewReader("not json\n")); err == nil {
		t.Fatal("garbage read without error")
	}
}

// FuzzRead reads a history file as a killed or damaged run may leave it:
// an error or the records before the damage, never a panic, and a torn
// last line loses that line only.
func FuzzRead(f *testing.F) {
	whole := `{"id":1,"k":"push","t0":5,"items":[{"p":"p","seq":1,"txn":"t.1"}]}` + "\n" + `{"id":2,"k":"note","label":"x"}` + "\n"
	for _, s := range []string{whole, whole[:len(whole)-9], "", "not json\n", `{"id":1}` + "\n" + `[`, "1\n2\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ops, err := Read(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, cut := range []int{1, 2} {
			if len(s) > cut {
				torn, terr := Read(strings.NewReader(s[:len(s)-cut]))
				if terr == nil && len(torn) > len(ops) {
					t.Fatalf("%d records whole, %d torn", len(ops), len(torn))
				}
			}
		}
	})
}
