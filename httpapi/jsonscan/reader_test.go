package jsonscan

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// readAll walks b with a Reader, descending into every object and array,
// and writes what it meets: member names, scalars, and the brackets.
func readAll(b []byte) (string, error) {
	var out bytes.Buffer
	r := NewReader(b)
	var walk func() error
	walk = func() error {
		switch {
		case r.i < len(r.b) && r.b[r.i] == '{':
			out.WriteByte('{')
			err := r.Object(func(key []byte) error {
				out.WriteString(strconvQuote(key) + ":")
				return walk()
			})
			out.WriteByte('}')
			return err
		case r.i < len(r.b) && r.b[r.i] == '[':
			out.WriteByte('[')
			err := r.Array(walk)
			out.WriteByte(']')
			return err
		default:
			v, err := r.Raw()
			out.Write(v)
			out.WriteByte(' ')
			return err
		}
	}
	if err := walk(); err != nil {
		return "", err
	}
	return out.String(), r.End()
}

// walkValidated writes the same as readAll from the walkers that take a
// value Value validated first.
func walkValidated(v []byte) string {
	var out bytes.Buffer
	var walk func(v []byte)
	walk = func(v []byte) {
		switch v[0] {
		case '{':
			out.WriteByte('{')
			ObjectValidRaw(v, func(key, val []byte) error {
				out.WriteString(strconvQuote(key) + ":")
				walk(val)
				return nil
			})
			out.WriteByte('}')
		case '[':
			out.WriteByte('[')
			ArrayValid(v, func(e []byte) error { walk(e); return nil })
			out.WriteByte(']')
		default:
			out.Write(v)
			out.WriteByte(' ')
		}
	}
	walk(v)
	return out.String()
}

func strconvQuote(b []byte) string { return string(AppendString(nil, string(b))) }

// A full walk accepts exactly what Value accepts and meets the same names
// and values as the walkers of validated values; skipping everything at the
// top is Value.
func TestReaderAgreesWithValue(t *testing.T) {
	for _, in := range []string{
		`null`, ` true `, `-12.5e+3`, `"a\u00e9\n"`, `[]`, `{}`, `{"a":[1,{"b":null}]}`, ` [ 1 , "x" , { } , [ ] ] `,
		`{"n\u0061me":"v","":0}`, `"é"`,
		``, ` `, `nul`, `01`, `[1,]`, `[1 2]`, `{"a"}`, `{"a":1,}`, `{a:1}`, `{"a":1}x`, `[1]]`, "\"\xff\"",
		`{"a":1 "b":2}`, `{"a":[}`, `[`, `{"a":`, `{"a":1`, `["x`, "{\"a\\x\":1}",
		strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
		strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
		strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1),
	} {
		got, err := readAll([]byte(in))
		v, verr := Value([]byte(in))
		if (err == nil) != (verr == nil) {
			t.Fatalf("%.40q: reader error %v, Value error %v", in, err, verr)
		}
		if err != nil {
			if errors.Is(verr, ErrTooDeep) != errors.Is(err, ErrTooDeep) {
				t.Fatalf("%.40q: reader error %v, Value error %v", in, err, verr)
			}
			continue
		}
		if want := walkValidated(v); got != want {
			t.Fatalf("%.40q: reader met %s, the validated walk %s", in, got, want)
		}
		r := NewReader([]byte(in))
		raw, err := r.Raw()
		if err != nil || !bytes.Equal(raw, v) || r.End() != nil {
			t.Fatalf("%.40q: Raw %q, %v; want %q", in, raw, err, v)
		}
	}
}

// What a callback leaves unread is validated and stepped over; what it
// reads is not read again.
func TestReaderSkipsWhatIsNotRead(t *testing.T) {
	in := []byte(`{"skip":{"deep":[1,2,{"x":"y"}]},"messages":[{"id":"a","data":{"pad":"xx"}},{"id":"b"}],"tail":null}`)
	var ids, data []string
	r := NewReader(in)
	err := r.Object(func(key []byte) error {
		if string(key) != "messages" {
			return nil
		}
		return r.Array(func() error {
			return r.Object(func(key []byte) error {
				switch string(key) {
				case "id":
					v, err := r.Raw()
					ids = append(ids, string(v))
					return err
				case "data":
					v, err := r.Raw()
					data = append(data, string(v))
					return err
				}
				return nil
			})
		})
	})
	if err != nil || r.End() != nil {
		t.Fatalf("walk: %v, end: %v", err, r.End())
	}
	if strings.Join(ids, ",") != `"a","b"` || strings.Join(data, ",") != `{"pad":"xx"}` {
		t.Fatalf("ids %v, data %v", ids, data)
	}
	// A syntax error inside a member nobody reads still fails the walk.
	bad := NewReader([]byte(`{"skip":[1,,2],"messages":[]}`))
	if err := bad.Object(func([]byte) error { return nil }); err == nil {
		t.Fatal("an unread member's syntax error went unnoticed")
	}
	// So does one after the value.
	trailing := NewReader([]byte(`{} {}`))
	if err := trailing.Object(func([]byte) error { return nil }); err != nil || trailing.End() == nil {
		t.Fatalf("trailing data: %v, end %v", err, trailing.End())
	}
}

func TestReaderKindsAndCallbackErrors(t *testing.T) {
	if err := NewReader([]byte(`[1]`)).Object(func([]byte) error { return nil }); err != ErrNotObject {
		t.Fatalf("object of an array: %v", err)
	}
	if err := NewReader([]byte(`{}`)).Array(func() error { return nil }); err != ErrNotArray {
		t.Fatalf("array of an object: %v", err)
	}
	stop := errors.New("stop")
	if err := NewReader([]byte(`[1,2]`)).Array(func() error { return stop }); err != stop {
		t.Fatalf("callback error: %v", err)
	}
	if err := NewReader([]byte(`{"a":1}`)).Object(func([]byte) error { return stop }); err != stop {
		t.Fatalf("callback error: %v", err)
	}
	// A name with escapes is decoded.
	var name string
	if err := NewReader([]byte(`{"n\u0061me":1}`)).Object(func(k []byte) error { name = string(k); return nil }); err != nil || name != "name" {
		t.Fatalf("name %q, %v", name, err)
	}
}

// FuzzReader: on any input a full walk succeeds exactly when Value does,
// meets what the walkers of validated values meet, and never panics.
func FuzzReader(f *testing.F) {
	for _, s := range []string{`{"items":[{"queue":"q","payload":{"a":[1,2.5e3,"x"]}}]}`, `[1,"2",null,true]`,
		`"\u00e9"`, `{"a":{"b":{}}}`, `{"a":1,"a":2}`, `{"a":[}`, "\"\xff\"", `[[[`, `{"a\"b":"\\"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := readAll(b)
		v, verr := Value(b)
		if (err == nil) != (verr == nil) {
			t.Fatalf("%q: reader error %v, Value error %v", b, err, verr)
		}
		if err == nil {
			if want := walkValidated(v); got != want {
				t.Fatalf("%q: reader met %s, the validated walk %s", b, got, want)
			}
		}
	})
}
