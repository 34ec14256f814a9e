package fsm

import (
	"fmt"
	"math"
)

// mpReader reads msgpack from a byte slice without copying: bin values alias
// the input. It backs the entry framing and the hand-written decoders of
// the hot commands (push, ack), which would otherwise spend most of their
// time in reflection and in copying payloads. Every read is bounds-checked;
// malformed input is an error, never a panic (see FuzzDecodeEntry).
type mpReader struct {
	b []byte
	i int
}

func (r *mpReader) fail(what string) error {
	return fmt.Errorf("msgpack: bad %s at offset %d: %w", what, r.i, ErrMalformed)
}

func (r *mpReader) need(n int) bool { return n >= 0 && len(r.b)-r.i >= n }

func (r *mpReader) byte1() (byte, bool) {
	if r.i >= len(r.b) {
		return 0, false
	}
	c := r.b[r.i]
	r.i++
	return c, true
}

func (r *mpReader) be(n int) (uint64, bool) {
	if !r.need(n) {
		return 0, false
	}
	var v uint64
	for _, c := range r.b[r.i : r.i+n] {
		v = v<<8 | uint64(c)
	}
	r.i += n
	return v, true
}

func (r *mpReader) arrayLen() (int, error) {
	c, ok := r.byte1()
	var n uint64
	switch {
	case !ok:
	case c >= 0x90 && c <= 0x9f:
		return int(c & 0x0f), nil
	case c == 0xdc:
		n, ok = r.be(2)
		if ok {
			return int(n), nil
		}
	case c == 0xdd:
		n, ok = r.be(4)
		if ok && n <= math.MaxInt32 {
			return int(n), nil
		}
	}
	return 0, r.fail("array header")
}

// arrayLenOf reads the header of an array whose elements take at least min
// bytes each, refusing a count the rest of the input cannot hold before
// the caller allocates for it.
func (r *mpReader) arrayLenOf(min int, what string) (int, error) {
	n, err := r.arrayLen()
	if err != nil {
		return 0, err
	}
	if n > (len(r.b)-r.i)/min+1 {
		return 0, r.fail(what)
	}
	return n, nil
}

// uint reads any msgpack integer that is non-negative.
func (r *mpReader) uint() (uint64, error) {
	v, err := r.int()
	if err != nil || v < 0 {
		return 0, r.fail("unsigned integer")
	}
	return uint64(v), nil
}

// uint32 reads an unsigned integer that must fit 32 bits.
func (r *mpReader) uint32() (uint32, error) {
	v, err := r.uint()
	if err != nil || v > 1<<32-1 {
		return 0, r.fail("uint32")
	}
	return uint32(v), nil
}

func (r *mpReader) int() (int64, error) {
	c, ok := r.byte1()
	if !ok {
		return 0, r.fail("integer")
	}
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	}
	var v uint64
	switch c {
	case 0xcc, 0xd0:
		v, ok = r.be(1)
		if ok && c == 0xd0 {
			return int64(int8(v)), nil
		}
	case 0xcd, 0xd1:
		v, ok = r.be(2)
		if ok && c == 0xd1 {
			return int64(int16(v)), nil
		}
	case 0xce, 0xd2:
		v, ok = r.be(4)
		if ok && c == 0xd2 {
			return int64(int32(v)), nil
		}
	case 0xcf, 0xd3:
		v, ok = r.be(8)
		if ok && c == 0xcf && v > math.MaxInt64 {
			return 0, r.fail("integer range")
		}
	default:
		ok = false
	}
	if !ok {
		return 0, r.fail("integer")
	}
	return int64(v), nil
}

func (r *mpReader) bool() (bool, error) {
	c, ok := r.byte1()
	if ok && (c == 0xc2 || c == 0xc3) {
		return c == 0xc3, nil
	}
	return false, r.fail("boolean")
}

// span reads a str or bin header and returns the aliased content.
func (r *mpReader) span(str bool) ([]byte, error) {
	c, ok := r.byte1()
	var n uint64
	switch {
	case !ok:
	case str && c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case (str && c == 0xd9) || (!str && c == 0xc4):
		n, ok = r.be(1)
	case (str && c == 0xda) || (!str && c == 0xc5):
		n, ok = r.be(2)
	case (str && c == 0xdb) || (!str && c == 0xc6):
		n, ok = r.be(4)
	case c == 0xc0: // nil: an empty string or slice
		return nil, nil
	default:
		ok = false
	}
	if !ok || !r.need(int(n)) || n > math.MaxInt32 {
		if str {
			return nil, r.fail("string")
		}
		return nil, r.fail("binary")
	}
	v := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return v, nil
}

func (r *mpReader) str() (string, error) {
	b, err := r.span(true)
	return string(b), err
}

// strFrom is str for a string that repeats across a command's items (a
// queue or partition name): it returns an equal string already in names
// instead of a new one, and remembers new ones up to a small bound.
func (r *mpReader) strFrom(names *[]string) (string, error) {
	b, err := r.span(true)
	if err != nil {
		return "", err
	}
	for _, s := range *names {
		if s == string(b) {
			return s, nil
		}
	}
	s := string(b)
	if len(*names) < maxInterned {
		*names = append(*names, s)
	}
	return s, nil
}

// maxInterned bounds strFrom's list: a linear scan beats a map at this size,
// and a request spread over many partitions just allocates as before.
const maxInterned = 16

func (r *mpReader) bin() ([]byte, error) { return r.span(false) }

func (r *mpReader) uuid() ([16]byte, error) {
	var id [16]byte
	b, err := r.bin()
	if err != nil || (len(b) != 16 && len(b) != 0) {
		return id, r.fail("16-byte id")
	}
	copy(id[:], b)
	return id, nil
}

// skip steps over one value of any type and returns its bytes.
func (r *mpReader) skip() ([]byte, error) {
	start := r.i
	if err := r.skipValue(0); err != nil {
		return nil, err
	}
	return r.b[start:r.i], nil
}

func (r *mpReader) skipValue(depth int) error {
	if depth > 100 {
		return r.fail("nesting")
	}
	c, ok := r.byte1()
	if !ok {
		return r.fail("value")
	}
	skipN := func(n uint64, ok bool) error {
		if !ok || !r.need(int(n)) || n > math.MaxInt32 {
			return r.fail("value length")
		}
		r.i += int(n)
		return nil
	}
	elems := func(n uint64, ok bool) error {
		if !ok || n > uint64(len(r.b)-r.i) {
			return r.fail("container length")
		}
		for k := uint64(0); k < n; k++ {
			if err := r.skipValue(depth + 1); err != nil {
				return err
			}
		}
		return nil
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return nil
	case c >= 0xa0 && c <= 0xbf:
		return skipN(uint64(c&0x1f), true)
	case c >= 0x90 && c <= 0x9f:
		return elems(uint64(c&0x0f), true)
	case c >= 0x80 && c <= 0x8f:
		return elems(2*uint64(c&0x0f), true)
	}
	switch c {
	case 0xcc, 0xd0:
		return skipN(1, true)
	case 0xcd, 0xd1:
		return skipN(2, true)
	case 0xce, 0xd2, 0xca:
		return skipN(4, true)
	case 0xcf, 0xd3, 0xcb:
		return skipN(8, true)
	case 0xd9, 0xc4:
		return skipN(r.be(1))
	case 0xda, 0xc5:
		return skipN(r.be(2))
	case 0xdb, 0xc6:
		return skipN(r.be(4))
	case 0xdc:
		return elems(r.be(2))
	case 0xdd:
		return elems(r.be(4))
	case 0xde:
		n, ok := r.be(2)
		return elems(2*n, ok)
	case 0xdf:
		n, ok := r.be(4)
		return elems(2*n, ok)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16 plus a type byte
		return skipN(1+uint64(1)<<(c-0xd4), true)
	case 0xc7:
		n, ok := r.be(1)
		return skipN(n+1, ok)
	case 0xc8:
		n, ok := r.be(2)
		return skipN(n+1, ok)
	case 0xc9:
		n, ok := r.be(4)
		return skipN(n+1, ok)
	}
	return r.fail("type byte")
}
