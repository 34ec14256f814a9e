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
// ErrNotObject reports a value of another kind, which stays unread; an error
// from fn ends the walk and is returned as it is.
func (r *Reader) Object(fn func(key []byte) error) error {
	i, done, err := r.enter('{', '}', ErrNotObject)
	for b := r.b; !done && err == nil; i, done, err = r.next(i, '}', "object") {
		if i >= len(b) || b[i] != '"' {
			return syntaxErr(i, "expected a member name")
		}
		var kend int
		if kend, err = skipString(b, i); err != nil {
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
	}
	return err
}

// Array reads the next value as an array: fn is called for each element and
// may read it with one call of Raw, Object or Array; an element fn leaves
// unread is validated and skipped. ErrNotArray reports a value of another
// kind, which stays unread.
func (r *Reader) Array(fn func() error) error {
	i, done, err := r.enter('[', ']', ErrNotArray)
	for ; !done && err == nil; i, done, err = r.next(i, ']', "array") {
		if i, err = r.value(i, fn); err != nil {
			return err
		}
	}
	return err
}

// enter steps into the object or array that starts at r.i with open, and
// returns where its first member or element starts, or done when it closes
// at once (then r.i is past it).
func (r *Reader) enter(open, close byte, notKind error) (i int, done bool, err error) {
	b, i := r.b, r.i
	if i >= len(b) {
		return i, false, syntaxErr(i, "unexpected end of input")
	}
	if b[i] != open {
		return i, false, notKind
	}
	if r.depth++; r.depth > MaxDepth {
		return i, false, tooDeep(i)
	}
	if i = skipSpace(b, i+1); i < len(b) && b[i] == close {
		r.i, r.depth = i+1, r.depth-1
		return i, true, nil
	}
	return i, false, nil
}

// next reads what follows a member or element at b[i]: a comma, after which
// it returns where the next one starts, or close, which ends the container
// (done, with r.i past it).
func (r *Reader) next(i int, close byte, kind string) (int, bool, error) {
	b := r.b
	if i >= len(b) {
		return i, false, syntaxErr(i, "unexpected end of input in %s", kind)
	}
	switch b[i] {
	case ',':
		return skipSpace(b, i+1), false, nil
	case close:
		r.i, r.depth = i+1, r.depth-1
		return i, true, nil
	}
	return i, false, syntaxErr(i, "expected ',' or '%c' in %s", close, kind)
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
