// Package relay carries the HTTP requests a follower forwards to the leader
// over one long-lived TCP connection, many at a time, instead of one
// keep-alive HTTP connection per request in flight.
//
// The connection starts as an HTTP request on the leader's own port
// (GET Path with "Upgrade: crown-relay/1"), so it needs no listener or
// setting of its own, and a leader that does not know the protocol (an
// older version during a rolling upgrade) answers 404: the follower then
// forwards over plain HTTP as before (ErrUnsupported).
//
// Why: a follower relaying consumers' pops and acks spent more CPU on
// net/http's client (a request and two goroutine hand-offs each way per
// request) than on moving the bytes, and the answers to the requests of one
// Raft entry, which complete together, went back in one write a request.
// Over one connection they share the writes: a sender flushes only when no
// other frame waits behind it, so the answers of an entry leave together
// (frameWriter).
//
// What a forwarded request may have done is what matters to the caller
// (httpapi/forward.go): a request that never reached the leader's handlers
// may go to the next leader, one that did may have been applied. Do reports
// the first case as a NotSentError: the dial or upgrade failed, or the
// leader said, in a go-away frame, that it stopped reading before it. Every
// other failure once the frame was written leaves the outcome unknown.
package relay

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Protocol is the Upgrade token; its version changes with the frame format.
const Protocol = "crown-relay/1"

// Path is where the leader accepts the upgrade.
const Path = "/internal/v1/relay"

// Kind is a frame's type.
type Kind byte

const (
	// KindRequest carries one forwarded request (follower to leader).
	KindRequest Kind = 1
	// KindResponse answers the request with the same id (leader to follower).
	KindResponse Kind = 2
	// KindCancel abandons the request with this id: its handler's context
	// ends (follower to leader).
	KindCancel Kind = 3
	// KindGoAway says the leader read no request after this id and will
	// serve none: later ones were not applied (leader to follower).
	KindGoAway Kind = 4
)

// Field is one header line.
type Field struct{ Name, Value string }

// Frame is one message of the protocol. Which fields are used depends on
// Kind: a request has Method, Target (path and query), Fields and Body; a
// response Status, Fields and Body; cancel and go-away only ID.
//
// On the wire: the length of the rest (uint32, big-endian), the kind (one
// byte), the id (uint64), then for a request the method (a byte of length,
// the bytes) and the target (uint16 of length, the bytes), for a response
// the status (uint16); then, for both, the fields (a byte of count; each
// name as the method, each value as the target) and the body (the rest).
type Frame struct {
	Kind   Kind
	ID     uint64
	Method string
	Target string
	Status int
	Fields []Field
	Body   []byte
}

// Limits of the variable parts, from the widths of their lengths.
const (
	maxMethod = 1<<8 - 1
	maxTarget = 1<<16 - 1
	maxFields = 1<<8 - 1
	maxName   = 1<<8 - 1
	maxValue  = 1<<16 - 1
	// fixedHead is the length, kind and id every frame starts with.
	fixedHead = 4 + 1 + 8
)

// ErrMalformed reports bytes that are not a frame.
var ErrMalformed = errors.New("relay: malformed frame")

// ErrEncode reports a frame that cannot be encoded (a part too long): it
// was not written.
var ErrEncode = errors.New("relay: cannot encode frame")

// ErrTooLarge reports a frame longer than the reader accepts.
var ErrTooLarge = errors.New("relay: frame too large")

// appendHead appends everything of f but its body, with the length prefix
// counting the body too, so that the body can be written after it without
// a copy.
func appendHead(dst []byte, f *Frame) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, byte(f.Kind))
	dst = binary.BigEndian.AppendUint64(dst, f.ID)
	switch f.Kind {
	case KindRequest:
		if len(f.Method) > maxMethod || len(f.Target) > maxTarget {
			return nil, fmt.Errorf("%w: method or target too long (%d, %d bytes)", ErrEncode, len(f.Method), len(f.Target))
		}
		dst = append(dst, byte(len(f.Method)))
		dst = append(dst, f.Method...)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(f.Target)))
		dst = append(dst, f.Target...)
	case KindResponse:
		if f.Status < 0 || f.Status > 0xffff {
			return nil, fmt.Errorf("%w: status %d out of range", ErrEncode, f.Status)
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(f.Status))
	case KindCancel, KindGoAway:
		binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
		return dst, nil
	default:
		return nil, fmt.Errorf("%w: kind %d unknown", ErrEncode, f.Kind)
	}
	if len(f.Fields) > maxFields {
		return nil, fmt.Errorf("%w: %d header fields, at most %d", ErrEncode, len(f.Fields), maxFields)
	}
	dst = append(dst, byte(len(f.Fields)))
	for _, h := range f.Fields {
		if len(h.Name) > maxName || len(h.Value) > maxValue {
			return nil, fmt.Errorf("%w: header %.40q too long", ErrEncode, h.Name)
		}
		dst = append(dst, byte(len(h.Name)))
		dst = append(dst, h.Name...)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(h.Value)))
		dst = append(dst, h.Value...)
	}
	n := len(dst) - start - 4 + len(f.Body)
	if uint64(n) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: %d bytes", ErrEncode, n)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(n))
	return dst, nil
}

// AppendFrame appends f's encoding to dst.
func AppendFrame(dst []byte, f *Frame) ([]byte, error) {
	dst, err := appendHead(dst, f)
	if err != nil {
		return nil, err
	}
	if f.Kind == KindRequest || f.Kind == KindResponse {
		dst = append(dst, f.Body...)
	}
	return dst, nil
}

// ReadFrame reads one frame of at most max bytes (the length prefix not
// counted). Its strings are copies; its body is a slice of buf, which
// ReadFrame grows when it is too small and returns for reuse.
func ReadFrame(r *bufio.Reader, max int, buf []byte) (*Frame, []byte, error) {
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return nil, buf, err
	}
	n := binary.BigEndian.Uint32(lb[:])
	if uint64(n) > uint64(max) {
		return nil, buf, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, n, max)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, buf, err
	}
	f, err := ParseFrame(buf)
	return f, buf, err
}

// ParseFrame decodes a frame from b, the bytes after its length prefix.
// The body aliases b; everything else is copied.
func ParseFrame(b []byte) (*Frame, error) {
	if len(b) < fixedHead-4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	}
	f := &Frame{Kind: Kind(b[0]), ID: binary.BigEndian.Uint64(b[1:9])}
	p := parser{b: b[9:]}
	switch f.Kind {
	case KindRequest:
		f.Method = string(p.bytes(int(p.u8())))
		f.Target = string(p.bytes(int(p.u16())))
	case KindResponse:
		f.Status = int(p.u16())
	case KindCancel, KindGoAway:
		if len(p.b) != 0 {
			return nil, fmt.Errorf("%w: %d bytes after a kind %d frame", ErrMalformed, len(p.b), f.Kind)
		}
		return f, nil
	default:
		return nil, fmt.Errorf("%w: kind %d", ErrMalformed, f.Kind)
	}
	if nf := int(p.u8()); nf > 0 && !p.bad {
		f.Fields = make([]Field, 0, min(nf, len(p.b)/3+1))
		for range nf {
			name := string(p.bytes(int(p.u8())))
			value := string(p.bytes(int(p.u16())))
			if p.bad {
				break
			}
			f.Fields = append(f.Fields, Field{name, value})
		}
	}
	if p.bad {
		return nil, fmt.Errorf("%w: kind %d cut short", ErrMalformed, f.Kind)
	}
	f.Body = p.b
	return f, nil
}

// parser reads the variable parts; a read past the end sets bad and
// yields zeros, so ParseFrame checks once.
type parser struct {
	b   []byte
	bad bool
}

func (p *parser) bytes(n int) []byte {
	if p.bad || n > len(p.b) {
		p.bad = true
		return nil
	}
	v := p.b[:n:n]
	p.b = p.b[n:]
	return v
}

func (p *parser) u8() byte {
	if v := p.bytes(1); v != nil {
		return v[0]
	}
	return 0
}

func (p *parser) u16() uint16 {
	if v := p.bytes(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}
