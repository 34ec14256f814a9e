// Package jsonscan reads and writes JSON on the request hot path without
// reflection or per-field allocations. Reading is a validating scanner that
// hands back the raw bytes of each object member and array element, so a
// push body is walked once, member names are matched exactly (Queen's names
// are case-sensitive, unlike encoding/json's struct decoding), and payloads
// are kept verbatim without a second parse. Writing appends escaped strings
// to a byte slice.
//
// The grammar is RFC 8259. Strings must be valid UTF-8 (a payload is stored
// and returned as is, so invalid bytes are refused at the door rather than
// handed to every consumer). Nesting is limited to MaxDepth.
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds nesting of objects and arrays, as encoding/json does
// (valid JSON deeper than this is refused with ErrTooDeep: a limit, not a
// syntax error).
const MaxDepth = 10000

// ErrTooDeep reports nesting deeper than MaxDepth.
var ErrTooDeep = fmt.Errorf("nesting deeper than %d", MaxDepth)

// SyntaxError reports invalid JSON and where.
type SyntaxError struct {
	Offset int
	Msg    string
	Err    error // ErrTooDeep for a limit; nil for malformed JSON
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("%s at offset %d", e.Msg, e.Offset) }

func (e *SyntaxError) Unwrap() error { return e.Err }

func tooDeep(i int) error { return &SyntaxError{Offset: i, Msg: ErrTooDeep.Error(), Err: ErrTooDeep} }

func syntaxErr(i int, format string, args ...any) error {
	return &SyntaxError{Offset: i, Msg: fmt.Sprintf(format, args...)}
}

// ErrNotObject and ErrNotArray report a value of another kind.
var (
	ErrNotObject = errors.New("not an object")
	ErrNotArray  = errors.New("not an array")
)

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// Valid reports whether b is exactly one JSON value (with optional
// surrounding whitespace).
func Valid(b []byte) bool {
	_, err := Value(b)
	return err == nil
}

// Value validates b as one JSON value and returns it without surrounding whitespace.
func Value(b []byte) ([]byte, error) {
	i := skipSpace(b, 0)
	end, err := skip(b, i, 0)
	if err != nil {
		return nil, err
	}
	if j := skipSpace(b, end); j != len(b) {
		return nil, syntaxErr(j, "unexpected data after the value")
	}
	return b[i:end], nil
}

// skip validates the value starting at b[i] and returns the index after it.
func skip(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return i, syntaxErr(i, "unexpected end of input")
	}
	switch c := b[i]; {
	case c == '{':
		return skipObject(b, i, depth+1, nil)
	case c == '[':
		return skipArray(b, i, depth+1, nil)
	case c == '"':
		return skipString(b, i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(b, i)
	default:
		return i, syntaxErr(i, "invalid character %q looking for a value", c)
	}
}

func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, syntaxErr(i, "invalid literal")
	}
	return i + len(lit), nil
}

func skipNumber(b []byte, i int) (int, error) {
	start := i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return start, syntaxErr(i, "invalid number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return start, syntaxErr(i, "invalid number: no digits after the decimal point")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return start, syntaxErr(i, "invalid number: no digits in the exponent")
		}
	}
	return i, nil
}

// skipString validates the string starting at b[i] (the opening quote).
func skipString(b []byte, i int) (int, error) {
	start := i
	i++
	ascii := true
	for i < len(b) {
		// Plain ASCII is most of any string: step over it eight bytes at a
		// time while no byte of the word can end the run, then with one
		// table lookup per byte before looking at what ends it.
		for i+8 <= len(b) && !mayEndRun(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && plainASCII[b[i]] {
			i++
		}
		if i == len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			if !ascii && !utf8.Valid(b[start+1:i]) {
				return start, syntaxErr(start, "invalid UTF-8 in string")
			}
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(b) {
				return start, syntaxErr(i, "unexpected end of input in string escape")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex4(b[i+2:i+6]) {
					return start, syntaxErr(i, "invalid \\u escape")
				}
				i += 6
			default:
				return start, syntaxErr(i, "invalid escape %q", b[i+1])
			}
		case c < 0x20:
			return start, syntaxErr(i, "control character in string")
		default:
			if c >= utf8.RuneSelf {
				ascii = false
			}
			i++
		}
	}
	return start, syntaxErr(i, "unterminated string")
}

// mayEndRun reports whether any of the eight bytes in x is not plain ASCII
// (a control character, the quote, the backslash, or a byte of a multi-byte
// UTF-8 sequence). It may report true for a word of plain bytes that
// follows such a byte in the word (a borrow carries), never false for a
// word holding one: a true only sends the caller to the byte loop.
func mayEndRun(x uint64) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	below := (x - 0x20*ones) & ^x & highs // some byte < 0x20 (or >= 0x80)
	q := x ^ '"'*ones
	quote := (q - ones) & ^q & highs
	bs := x ^ '\\'*ones
	backslash := (bs - ones) & ^bs & highs
	return below|quote|backslash|x&highs != 0
}

// plainASCII marks the bytes a string may hold as they are: printable
// ASCII other than the quote and the backslash.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// skipObject validates the object at b[i]; fn, when given, receives each
// member's raw key (with quotes) and raw value.
func skipObject(b []byte, i, depth int, fn func(key, val []byte) error) (int, error) {
	if depth > MaxDepth {
		return i, tooDeep(i)
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, syntaxErr(i, "expected a member name")
		}
		kend, err := skipString(b, i)
		if err != nil {
			return i, err
		}
		key := b[i:kend]
		i = skipSpace(b, kend)
		if i >= len(b) || b[i] != ':' {
			return i, syntaxErr(i, "expected ':' after a member name")
		}
		i = skipSpace(b, i+1)
		vend, err := skip(b, i, depth)
		if err != nil {
			return i, err
		}
		if fn != nil {
			if err := fn(key, b[i:vend]); err != nil {
				return i, err
			}
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return i, syntaxErr(i, "unexpected end of input in object")
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return i, syntaxErr(i, "expected ',' or '}' in object")
		}
	}
}

func skipArray(b []byte, i, depth int, fn func(elem []byte) error) (int, error) {
	if depth > MaxDepth {
		return i, tooDeep(i)
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		end, err := skip(b, i, depth)
		if err != nil {
			return i, err
		}
		if fn != nil {
			if err := fn(b[i:end]); err != nil {
				return i, err
			}
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return i, syntaxErr(i, "unexpected end of input in array")
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return i + 1, nil
		default:
			return i, syntaxErr(i, "expected ',' or ']' in array")
		}
	}
}

// Object walks the members of the object v (a value as returned by Value,
// Object or Array). The key is decoded; the value is raw and valid. Members
// arrive in document order; a repeated name is seen twice.
func Object(v []byte, fn func(key string, val []byte) error) error {
	if len(v) == 0 || v[0] != '{' {
		return ErrNotObject
	}
	_, err := skipObject(v, 0, 1, func(k, val []byte) error {
		key, ok := Unquote(k)
		if !ok {
			return syntaxErr(0, "invalid member name")
		}
		return fn(key, val)
	})
	return err
}

// Array walks the elements of the array v.
func Array(v []byte, fn func(elem []byte) error) error {
	if len(v) == 0 || v[0] != '[' {
		return ErrNotArray
	}
	_, err := skipArray(v, 0, 1, fn)
	return err
}

// IsNull reports whether a raw value is absent (nil) or null.
func IsNull(v []byte) bool { return len(v) == 0 || string(v) == "null" }

// Unquote decodes a raw JSON string; ok is false for any other kind.
func Unquote(v []byte) (string, bool) {
	b, ok := UnquoteBytes(v)
	if !ok {
		return "", false
	}
	return string(b), true
}

// UnquoteBytes is Unquote without the string: a string with no escape comes
// back as a sub-slice of v, so reading a member that is only compared or
// parsed (a name, a UUID) copies nothing.
func UnquoteBytes(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return nil, false
	}
	in := v[1 : len(v)-1]
	if bytes.IndexByte(in, '\\') < 0 {
		return in, true
	}
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); {
		c := in[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= len(in) {
			return nil, false
		}
		switch in[i+1] {
		case '"', '\\', '/':
			out = append(out, in[i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if i+6 > len(in) {
				return nil, false
			}
			r, err := strconv.ParseUint(string(in[i+2:i+6]), 16, 16)
			if err != nil {
				return nil, false
			}
			i += 6
			ru := rune(r)
			if utf16.IsSurrogate(ru) {
				// A high surrogate followed by a low one is one rune; a lone
				// surrogate becomes U+FFFD, as in encoding/json.
				if i+6 <= len(in) && in[i] == '\\' && in[i+1] == 'u' {
					if r2, err := strconv.ParseUint(string(in[i+2:i+6]), 16, 16); err == nil {
						if dec := utf16.DecodeRune(ru, rune(r2)); dec != utf8.RuneError {
							out = utf8.AppendRune(out, dec)
							i += 6
							continue
						}
					}
				}
				ru = utf8.RuneError
			}
			out = utf8.AppendRune(out, ru)
			continue
		default:
			return nil, false
		}
		i += 2
	}
	return out, true
}

// ---- walking values already validated ----

// fastSkip steps over the value at b[i] of JSON already validated by Value,
// checking only structure (no grammar, no UTF-8): strings are found with
// IndexByte. It never reads out of bounds; on input that was not validated
// it may return a wrong span but reports -1 rather than running off the end.
func fastSkip(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return fastString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = fastString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	default:
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

func fastString(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		// The quote closes the string unless an odd number of backslashes precede it.
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

// ObjectValid is Object for a value already validated (a part of what Value
// returned): it only walks structure, so nested walks do not validate the
// same bytes again.
func ObjectValid(v []byte, fn func(key string, val []byte) error) error {
	return ObjectValidRaw(v, func(key, val []byte) error { return fn(string(key), val) })
}

// ObjectValidRaw is ObjectValid with each member name as unquoted bytes,
// valid only during the call: a caller that only compares names (switch
// string(key)) allocates nothing per member.
func ObjectValidRaw(v []byte, fn func(key, val []byte) error) error {
	if len(v) == 0 || v[0] != '{' {
		return ErrNotObject
	}
	i := skipSpace(v, 1)
	if i < len(v) && v[i] == '}' {
		return nil
	}
	for i < len(v) {
		kend := fastString(v, i)
		if kend < 0 || v[i] != '"' {
			return syntaxErr(i, "expected a member name")
		}
		key, ok := UnquoteBytes(v[i:kend])
		if !ok {
			return syntaxErr(i, "invalid member name")
		}
		i = skipSpace(v, kend)
		if i >= len(v) || v[i] != ':' {
			return syntaxErr(i, "expected ':'")
		}
		i = skipSpace(v, i+1)
		end := fastSkip(v, i)
		if end < 0 {
			return syntaxErr(i, "unterminated value")
		}
		if err := fn(key, v[i:end]); err != nil {
			return err
		}
		i = skipSpace(v, end)
		if i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
			continue
		}
		if i < len(v) && v[i] == '}' {
			return nil
		}
		return syntaxErr(i, "expected ',' or '}'")
	}
	return syntaxErr(i, "unexpected end of object")
}

// ArrayValid is Array for a value already validated.
func ArrayValid(v []byte, fn func(elem []byte) error) error {
	if len(v) == 0 || v[0] != '[' {
		return ErrNotArray
	}
	i := skipSpace(v, 1)
	if i < len(v) && v[i] == ']' {
		return nil
	}
	for i < len(v) {
		end := fastSkip(v, i)
		if end < 0 {
			return syntaxErr(i, "unterminated value")
		}
		if err := fn(v[i:end]); err != nil {
			return err
		}
		i = skipSpace(v, end)
		if i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
			continue
		}
		if i < len(v) && v[i] == ']' {
			return nil
		}
		return syntaxErr(i, "expected ',' or ']'")
	}
	return syntaxErr(i, "unexpected end of array")
}
