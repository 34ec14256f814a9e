package fsm

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// EncodeMsgpack implements msgpack.CustomEncoder: [Grace, Max] for a sweep
// from the start of the lease index, the entry builds before From wrote
// and read, and [Grace, Max, From] otherwise.
func (c *ExpireLeases) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 2
	if c.From != ([16]byte{}) {
		n = 3
	}
	if err := errors.Join(enc.EncodeArrayLen(n), enc.EncodeInt(c.Grace), enc.EncodeUint(uint64(c.Max))); err != nil {
		return err
	}
	if n == 3 {
		return enc.EncodeBytes(c.From[:])
	}
	return nil
}

// DecodeMsgpack implements msgpack.CustomDecoder for both forms.
func (c *ExpireLeases) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return fmt.Errorf("expire_leases: %w", err)
	}
	if n != 2 && n != 3 {
		return fmt.Errorf("expire_leases: %d elements, want 2 or 3", n)
	}
	if c.Grace, err = dec.DecodeInt64(); err != nil {
		return fmt.Errorf("expire_leases grace: %w", err)
	}
	if c.Max, err = dec.DecodeUint32(); err != nil {
		return fmt.Errorf("expire_leases max: %w", err)
	}
	c.From = [16]byte{}
	if n == 2 {
		return nil
	}
	// The length is read before anything is allocated: untrusted bytes
	// cannot ask for a large buffer.
	l, err := dec.DecodeBytesLen()
	if err != nil {
		return fmt.Errorf("expire_leases from: %w", err)
	}
	if l != len(c.From) {
		return fmt.Errorf("expire_leases from: %d bytes, want %d", l, len(c.From))
	}
	if err := dec.ReadFull(c.From[:]); err != nil {
		return fmt.Errorf("expire_leases from: %w", err)
	}
	return nil
}
