package jsonscan

// Reader walks one JSON value in a single validating pass. Value followed by
// ObjectValid and ArrayValid reads a value nested n levels deep n+1 times
// (each walk finds where a member or element ends by stepping over it before
// the caller descends into it); a Reader reads every byte once: the caller
// descends into the members and elements it wants as it meets them, and
// whatever it leaves is validated as it is stepped over. The grammar, UTF-8
// and depth rules are Value's.
//
// A Reader is not safe for concurrent use. Byte slices it hands out alias
// the input.
type Reader struct {
	b     []byte
	i     int // the next value starts here (after whitespace), or past it once read
	depth int
}

// NewReader reads the JSON value b holds; after the value is read, End
// checks that nothing but whitespace follows it.
func NewReader(b []byte) *Reader { return &Reader{b: b, i: skipSpace(b, 0)} }

// Raw validates the next value and returns it as it stands in the input.
func (r *Reader) Raw() ([]byte, error) {
	start := r.i
	end, err := skip(r.b, start, r.depth)
	if err != nil {
		return nil, err
	}
	r.i = end
	return r.b[start:end], nil
}

// Object reads the next value as an object: fn is called with each member's
// name, unquoted (aliasing the input unless it holds escapes; valid during
// the call only), and may read the member's value with one call of Raw,
// Object or Array. A value fn leaves unread is validated and skipped.
// ErrNotObject reports a value of another kind; an error from fn ends the
// walk and is returned as it is.
func (r *Reader) Object(fn func(key []byte) error) error {
	b, i := r.b, r.i
	if i >= len(b) {
		return syntaxErr(i, "unexpected end of input")
	}
	if b[i] != '{' {
		return ErrNotObject
	}
	if r.depth++; r.depth > MaxDepth {
		return tooDeep(i)
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		r.i, r.depth = i+1, r.depth-1
		return nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return syntaxErr(i, "expected a member name")
		}
		kend, err := skipString(b, i)
		if err != nil {
			return err
		}
		key, _ := UnquoteBytes(b[i:kend]) // valid: skipString checked it
		i = skipSpace(b, kend)
		if i >= len(b) || b[i] != ':' {
			return syntaxErr(i, "expected ':' after a member name")
		}
		if i, err = r.value(skipSpace(b, i+1), func() error { return fn(key) }); err != nil {
			return err
		}
		if i >= len(b) {
			return syntaxErr(i, "unexpected end of input in object")
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			r.i, r.depth = i+1, r.depth-1
			return nil
		default:
			return syntaxErr(i, "expected ',' or '}' in object")
		}
	}
}

// Array reads the next value as an array: fn is called for each element and
// may read it with one call of Raw, Object or Array; an element fn leaves
// unread is validated and skipped. ErrNotArray reports a value of another
// kind.
func (r *Reader) Array(fn func() error) error {
	b, i := r.b, r.i
	if i >= len(b) {
		return syntaxErr(i, "unexpected end of input")
	}
	if b[i] != '[' {
		return ErrNotArray
	}
	if r.depth++; r.depth > MaxDepth {
		return tooDeep(i)
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		r.i, r.depth = i+1, r.depth-1
		return nil
	}
	for {
		var err error
		if i, err = r.value(i, fn); err != nil {
			return err
		}
		if i >= len(b) {
			return syntaxErr(i, "unexpected end of input in array")
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			r.i, r.depth = i+1, r.depth-1
			return nil
		default:
			return syntaxErr(i, "expected ',' or ']' in array")
		}
	}
}

// value hands the value at b[i] to fn, steps over it if fn did not read
// it, and returns where the next token starts.
func (r *Reader) value(i int, fn func() error) (int, error) {
	r.i = i
	if err := fn(); err != nil {
		return 0, err
	}
	if r.i == i { // unread: every value is at least one byte
		end, err := skip(r.b, i, r.depth)
		if err != nil {
			return 0, err
		}
		r.i = end
	}
	return skipSpace(r.b, r.i), nil
}

// End reports an error unless only whitespace follows the value read.
func (r *Reader) End() error {
	if j := skipSpace(r.b, r.i); j != len(r.b) {
		return syntaxErr(j, "unexpected data after the value")
	}
	return nil
}
