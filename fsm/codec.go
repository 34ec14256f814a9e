package fsm

import (
	"bytes"
	"errors"
	"fmt"

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
	buf := bytes.NewBuffer(dst)
	buf.WriteByte(EntryVersion)
	enc := msgpack.NewEncoder(buf)
	err := errors.Join(
		enc.EncodeArrayLen(3),
		enc.EncodeInt(e.Stamp),
		enc.EncodeString(e.Origin),
		enc.EncodeArrayLen(len(e.Commands)),
	)
	if err != nil {
		return nil, fmt.Errorf("encode entry header: %w", err)
	}
	for i, c := range e.Commands {
		t := c.Type()
		if _, ok := lookup(t); !ok {
			return nil, fmt.Errorf("encode command %d: type %d: %w", i, t, ErrUnknownType)
		}
		if err := errors.Join(enc.EncodeArrayLen(2), enc.EncodeUint(uint64(t)), enc.Encode(c)); err != nil {
			return nil, fmt.Errorf("encode command %d (%s): %w", i, registry[t].name, err)
		}
	}
	return buf.Bytes(), nil
}

// EncodeCommand encodes a single command's body (for size estimates and tests).
func EncodeCommand(c Command) ([]byte, error) { return msgpack.Marshal(c) }

// DecodeEntry decodes a log entry. A command whose body does not decode is
// replaced by a *Malformed placeholder, so the other commands of the entry
// still apply and results stay aligned; every node fails the same bytes the
// same way. An unknown command type fails the whole entry with ErrUnknownType.
func DecodeEntry(b []byte) (*Entry, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("empty entry: %w", ErrMalformed)
	}
	if b[0] != EntryVersion {
		return nil, fmt.Errorf("entry version %d (this build reads %d): %w", b[0], EntryVersion, ErrUnknownType)
	}
	rd := bytes.NewReader(b[1:])
	dec := msgpack.NewDecoder(rd)
	n, err := dec.DecodeArrayLen()
	if err != nil || n != 3 {
		return nil, fmt.Errorf("entry header (len %d, %v): %w", n, err, ErrMalformed)
	}
	e := new(Entry)
	if e.Stamp, err = dec.DecodeInt64(); err != nil {
		return nil, fmt.Errorf("entry stamp: %v: %w", err, ErrMalformed)
	}
	if e.Origin, err = dec.DecodeString(); err != nil {
		return nil, fmt.Errorf("entry origin: %v: %w", err, ErrMalformed)
	}
	count, err := dec.DecodeArrayLen()
	// Each command takes at least 3 bytes: bound the count by the input so a
	// hostile length cannot make us allocate.
	if err != nil || count < 0 || count > len(b)/3 {
		return nil, fmt.Errorf("entry command count %d (%v): %w", count, err, ErrMalformed)
	}
	e.Commands = make([]Command, 0, count)
	for i := 0; i < count; i++ {
		if l, err := dec.DecodeArrayLen(); err != nil || l != 2 {
			return nil, fmt.Errorf("command %d framing: %w", i, ErrMalformed)
		}
		t, err := dec.DecodeUint8()
		if err != nil {
			return nil, fmt.Errorf("command %d type: %v: %w", i, err, ErrMalformed)
		}
		raw, err := dec.DecodeRaw()
		if err != nil {
			return nil, fmt.Errorf("command %d body: %v: %w", i, err, ErrMalformed)
		}
		spec, ok := lookup(Type(t))
		if !ok {
			return nil, fmt.Errorf("command %d: type %d: %w", i, t, ErrUnknownType)
		}
		c := spec.newCmd()
		if err := msgpack.Unmarshal(raw, c); err != nil {
			e.Commands = append(e.Commands, &Malformed{Of: Type(t), Err: err.Error()})
			continue
		}
		e.Commands = append(e.Commands, c)
	}
	if rd.Len() != 0 {
		return nil, fmt.Errorf("trailing bytes after entry: %w", ErrMalformed)
	}
	return e, nil
}

// Malformed stands in for a command whose body did not decode. It is never
// encoded; applying it changes nothing and returns an ErrorResult.
type Malformed struct {
	Of  Type
	Err string
}

// Type reports the type the body claimed.
func (m *Malformed) Type() Type { return m.Of }
