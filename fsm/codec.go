package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
)

// EntryVersion is the first byte of every log entry Crown writes. A new
// layout gets a new version and DecodeEntry keeps reading the old ones.
const EntryVersion byte = 1

// Entry is one Raft log entry: the commands of many client requests (group
// commit), stamped once with the leader's time.
type Entry struct {
	Stamp    int64  // leader's wall clock, unix µs
	Origin   string // id of the proposing node: only it builds full results
	Commands []Command
}

// ErrUnknownType reports a command type this build does not know: the log
// was written by a newer version. Applying around it would diverge, so the
// state machine stops instead.
var ErrUnknownType = errors.New("unknown command type")

// ErrMalformed reports an entry that does not decode.
var ErrMalformed = errors.New("malformed log entry")

// AppendEntry encodes e after dst.
func AppendEntry(dst []byte, e *Entry) ([]byte, error) {
	framed := make([][]byte, len(e.Commands))
	for i, c := range e.Commands {
		f, err := FrameCommand(nil, c)
		if err != nil {
			return nil, fmt.Errorf("encode command %d: %w", i, err)
		}
		framed[i] = f
	}
	return AppendFramedEntry(dst, e.Stamp, e.Origin, framed), nil
}

// FrameCommand encodes one command as it sits inside an entry, [type, body],
// after dst. Proposers call it on the requesting goroutine, so commands are
// encoded in parallel and the entry is a concatenation.
func FrameCommand(dst []byte, c Command) ([]byte, error) {
	t := c.Type()
	if _, ok := lookup(t); !ok {
		return nil, fmt.Errorf("type %d: %w", t, ErrUnknownType)
	}
	if h, ok := c.(sizeHinter); ok {
		dst = slices.Grow(dst, frameOverhead+h.encodedSizeHint())
	}
	buf := bytes.NewBuffer(dst)
	enc := msgpack.NewEncoder(buf)
	if err := errors.Join(enc.EncodeArrayLen(2), enc.EncodeUint(uint64(t)), enc.Encode(c)); err != nil {
		return nil, fmt.Errorf("encode %s command: %w", registry[t].name, err)
	}
	return buf.Bytes(), nil
}

// sizeHinter is a command that bounds the length its body encodes to, so
// that FrameCommand allocates once. A push of 100 messages is about 30 KiB,
// and a buffer grown from empty by doubling allocated 80 KiB for it
// (BenchmarkEncodePush100): 15 % of all a leader allocated in a produce run.
type sizeHinter interface{ encodedSizeHint() int }

// frameOverhead bounds the frame around a body: an array header and the type.
const frameOverhead = 1 + 9

// AppendFramedEntry encodes an entry of commands framed by FrameCommand.
func AppendFramedEntry(dst []byte, stamp int64, origin string, framed [][]byte) []byte {
	size := 32 + len(origin)
	for _, f := range framed {
		size += len(f)
	}
	buf := bytes.NewBuffer(slices.Grow(dst, size))
	buf.WriteByte(EntryVersion)
	enc := msgpack.NewEncoder(buf)
	// Writes to a bytes.Buffer cannot fail.
	_ = enc.EncodeArrayLen(3)
	_ = enc.EncodeInt(stamp)
	_ = enc.EncodeString(origin)
	_ = enc.EncodeArrayLen(len(framed))
	for _, f := range framed {
		buf.Write(f)
	}
	return buf.Bytes()
}

// EncodeCommand encodes a single command's body (for size estimates and tests).
func EncodeCommand(c Command) ([]byte, error) { return msgpack.Marshal(c) }

// DecodeEntry decodes a log entry. A command whose body does not decode is
// replaced by a *Malformed placeholder, so the other commands of the entry
// still apply and results stay aligned; every node fails the same bytes the
// same way. An unknown command type fails the whole entry with
// ErrUnknownType. Bodies of push and ack commands are decoded without
// copying: their payloads alias b, which must not change while they are in use.
func DecodeEntry(b []byte) (*Entry, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("empty entry: %w", ErrMalformed)
	}
	if b[0] != EntryVersion {
		return nil, fmt.Errorf("entry version %d (this build reads %d): %w", b[0], EntryVersion, ErrUnknownType)
	}
	r := &mpReader{b: b[1:]}
	if n, err := r.arrayLen(); err != nil || n != 3 {
		return nil, fmt.Errorf("entry header: %w", ErrMalformed)
	}
	e := new(Entry)
	var err error
	if e.Stamp, err = r.int(); err != nil {
		return nil, fmt.Errorf("entry stamp: %w", err)
	}
	if e.Origin, err = r.str(); err != nil {
		return nil, fmt.Errorf("entry origin: %w", err)
	}
	count, err := r.arrayLen()
	// Each command takes at least 3 bytes: bound the count by the input so a
	// hostile length cannot make us allocate.
	if err != nil || count > len(b)/3 {
		return nil, fmt.Errorf("entry command count %d: %w", count, ErrMalformed)
	}
	e.Commands = make([]Command, 0, count)
	for i := 0; i < count; i++ {
		if l, err := r.arrayLen(); err != nil || l != 2 {
			return nil, fmt.Errorf("command %d framing: %w", i, ErrMalformed)
		}
		t, err := r.uint()
		if err != nil || t > 255 {
			return nil, fmt.Errorf("command %d type: %w", i, ErrMalformed)
		}
		body, err := r.skip()
		if err != nil {
			return nil, fmt.Errorf("command %d body: %w", i, err)
		}
		spec, ok := lookup(Type(t))
		if !ok {
			return nil, fmt.Errorf("command %d: type %d: %w", i, t, ErrUnknownType)
		}
		c := spec.newCmd()
		if err := decodeBody(c, body); err != nil {
			e.Commands = append(e.Commands, &Malformed{Of: Type(t), Err: err.Error()})
			continue
		}
		e.Commands = append(e.Commands, c)
	}
	if r.i != len(r.b) {
		return nil, fmt.Errorf("trailing bytes after entry: %w", ErrMalformed)
	}
	return e, nil
}

func decodeBody(c Command, body []byte) error {
	fd, ok := c.(fastDecoder)
	if !ok {
		return msgpack.Unmarshal(body, c)
	}
	br := &mpReader{b: body}
	if err := fd.decodeFrom(br); err != nil {
		return err
	}
	if br.i != len(body) {
		return br.fail("trailing data in command")
	}
	return nil
}

// Malformed stands in for a command whose body did not decode. It is never
// encoded; applying it changes nothing and returns an ErrorResult.
type Malformed struct {
	Of  Type
	Err string
}

// Type reports the type the body claimed.
func (m *Malformed) Type() Type { return m.Of }
