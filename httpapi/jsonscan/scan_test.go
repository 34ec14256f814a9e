package jsonscan

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValidTable(t *testing.T) {
	cases := []struct {
		in   string
		want bool
	}{
		{`null`, true}, {` true `, true}, {`false`, true}, {`0`, true}, {`-0`, true}, {`-12.5e+3`, true},
		{`1E9`, true}, {`"a\u00e9\n"`, true}, {`[]`, true}, {`{}`, true}, {`{"a":[1,{"b":null}]}`, true},
		{`"é"`, true}, {`"\ud83d\ude00"`, true},
		{``, false}, {` `, false}, {`nul`, false}, {`01`, false}, {`1.`, false}, {`.5`, false}, {`1e`, false},
		{`+1`, false}, {`"abc`, false}, {`"a\x"`, false}, {`"\u12"`, false}, {"\"a\x01\"", false},
		{`[1,]`, false}, {`[1 2]`, false}, {`{"a"}`, false}, {`{"a":1,}`, false}, {`{a:1}`, false},
		{`{"a":1}x`, false}, {`[1]]`, false}, {"\"\xff\"", false}, {`{"a":1 "b":2}`, false},
		{strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), true},
		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), false},
	}
	for _, c := range cases {
		if got := Valid([]byte(c.in)); got != c.want {
			t.Errorf("Valid(%.40q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestObjectMembersAndExactNames(t *testing.T) {
	in := []byte(` { "queue" : "q1", "Queue":"other", "payload": {"x": [1, 2]} , "n\u0061me": null } `)
	v, err := Value(in)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	var payload []byte
	err = Object(v, func(k string, val []byte) error {
		keys = append(keys, k)
		if k == "payload" {
			payload = val
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "queue,Queue,payload,name" {
		t.Fatalf("keys %v", keys)
	}
	if string(payload) != `{"x": [1, 2]}` {
		t.Fatalf("payload kept verbatim: %q", payload)
	}
	if Object([]byte(`[1]`), nil) != ErrNotObject || Array([]byte(`{}`), nil) != ErrNotArray {
		t.Fatal("kind errors")
	}
}

func TestUnquote(t *testing.T) {
	for _, s := range []string{`""`, `"plain"`, `"tab\there"`, `"\u00e9\"\\\/\b\f\n\r"`, `"\ud83d\ude00"`, `"\ud800x"`, `"\udc00"`} {
		var want string
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatal(err)
		}
		got, ok := Unquote([]byte(s))
		if !ok || got != want {
			t.Errorf("Unquote(%s) = %q %v, want %q", s, got, ok, want)
		}
	}
	if _, ok := Unquote([]byte(`12`)); ok {
		t.Error("a number unquoted")
	}
}

func TestAppendStringRoundTrip(t *testing.T) {
	for _, s := range []string{"", "a", "quote\" back\\ slash", "ctl\x00\x1f\n\r\t", "é漢字😀", "bad\xffutf8", "\u2028\u2029", "<&>"} {
		b := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q -> %s: %v", s, b, err)
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if back != want {
			t.Errorf("%q -> %s -> %q", s, b, back)
		}
	}
}

// FuzzScanner checks the scanner against encoding/json: it accepts exactly
// what encoding/json accepts, minus invalid UTF-8 (refused on purpose), and
// walks objects to the same members.
// The trusted walkers never run off the end, whatever they are given.
func FuzzTrustedWalkersOnGarbage(f *testing.F) {
	f.Add([]byte(`{"a":"\\"}`))
	f.Add([]byte(`["x\"]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ObjectValid(b, func(string, []byte) error { return nil })
		ArrayValid(b, func([]byte) error { return nil })
	})
}

func FuzzScanner(f *testing.F) {
	for _, s := range []string{`{"items":[{"queue":"q","payload":{"a":[1,2.5e3,"x"]}}]}`, `[1,"2",null,true]`,
		`"\u00e9"`, `{"a":{"b":{}}}`, `-0.0e-0`, "\"\xff\"", `{"a":1,"a":2}`,
		// Strings long enough for the eight-byte step, with what ends a run
		// at and across word boundaries.
		`"0123456789abcdef0123"`, `"01234567\"89abcdef"`, `"0123456789a\\bcdef"`, "\"0123456789\x01abcdef\"",
		"\"01234567é89abcdefgh\"", "\"0123456789abcde\xffgh\"", "\"0123456\xe2\x82\xac789abcdef\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := Valid(b)
		want := json.Valid(b)
		if got && !want {
			t.Fatalf("scanner accepts what encoding/json refuses: %q", b)
		}
		if want && !got && utf8.Valid(b) && bytes.Count(b, []byte("[")) < MaxDepth && bytes.Count(b, []byte("{")) < MaxDepth {
			t.Fatalf("scanner refuses valid JSON: %q", b)
		}
		if !got {
			return
		}
		v, _ := Value(b)
		// The trusted walkers agree with the validating ones on valid input.
		var a, c [][]byte
		if v[0] == '{' {
			Object(v, func(k string, val []byte) error { a = append(a, []byte(k), val); return nil })
			if err := ObjectValid(v, func(k string, val []byte) error { c = append(c, []byte(k), val); return nil }); err != nil {
				t.Fatalf("ObjectValid on valid input: %v", err)
			}
		}
		if v[0] == '[' {
			Array(v, func(e []byte) error { a = append(a, e); return nil })
			if err := ArrayValid(v, func(e []byte) error { c = append(c, e); return nil }); err != nil {
				t.Fatalf("ArrayValid on valid input: %v", err)
			}
		}
		if len(a) != len(c) {
			t.Fatalf("trusted walk found %d parts, validating walk %d", len(c), len(a))
		}
		for i := range a {
			if !bytes.Equal(a[i], c[i]) {
				t.Fatalf("part %d: %q vs %q", i, c[i], a[i])
			}
		}
		if len(v) > 0 && v[0] == '{' {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(v, &m); err != nil {
				t.Fatal(err)
			}
			seen := map[string][]byte{}
			if err := Object(v, func(k string, val []byte) error { seen[k] = val; return nil }); err != nil {
				t.Fatal(err)
			}
			if len(seen) != len(m) {
				t.Fatalf("members %d vs %d", len(seen), len(m))
			}
			for k, raw := range m {
				if !bytes.Equal(bytes.TrimSpace(raw), seen[k]) {
					t.Fatalf("member %q: %q vs %q", k, seen[k], raw)
				}
			}
		}
		if len(v) > 0 && v[0] == '"' {
			var s string
			json.Unmarshal(v, &s)
			if u, ok := Unquote(v); !ok || u != s {
				t.Fatalf("Unquote %q = %q, want %q", v, u, s)
			}
			if u, ok := UnquoteBytes(v); !ok || string(u) != s {
				t.Fatalf("UnquoteBytes %q = %q, want %q", v, u, s)
			}
		}
	})
}

// TestMayEndRun puts every byte value at every position of a word of plain
// letters: the word test must flag exactly the bytes the table does not
// call plain (with one such byte there is no borrow to flag a neighbour).
func TestMayEndRun(t *testing.T) {
	for pos := range 8 {
		for c := range 256 {
			w := []byte("aaaaaaaa")
			w[pos] = byte(c)
			x := binary.LittleEndian.Uint64(w)
			if got, want := mayEndRun(x), !plainASCII[c]; got != want {
				t.Fatalf("byte %#x at %d: mayEndRun %v, want %v", c, pos, got, want)
			}
		}
	}
	if mayEndRun(binary.LittleEndian.Uint64([]byte("plain ok"))) {
		t.Fatal("a word of plain ASCII flagged")
	}
}
