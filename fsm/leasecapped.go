package fsm

// TypeLeaseCapped is a pop whose answer is also bounded in bytes.
const TypeLeaseCapped Type = 40

// LeaseCapped is a Lease (by Principal, "" when anonymous, as LeaseAs) that
// stops claiming once the messages it took hold about MaxBytes of stored
// segment (payloads with their ids and headers); it always takes at least
// one message, however large.
//
// Why: a pop's answer is built in memory on the node answering it, several
// times its size at its peak, and a batch of 10,000 with payloads of up to
// 8 MiB could ask for 80 GB: a review measured one pop of thirty 8 MiB
// messages taking a leader to 2.2 GB. Batch alone cannot bound that. The
// bound is decided in the apply, from the segment references every node
// holds (no payload is read), so every node claims the same messages: the
// leader stamps MaxBytes into the command, as it stamps the window rules.
//
// What a message costs is its segment's stored length divided among the
// segment's messages, rounded up: exact for a segment of one message, an
// even share of a group-committed one. The claim stops at the first
// message that no longer fits, so a pop walks no further partitions once
// it is full.
type LeaseCapped struct {
	_msgpack  struct{} `msgpack:",as_array"`
	Lease     Lease
	Principal string
	MaxBytes  uint64
}

func (*LeaseCapped) Type() Type { return TypeLeaseCapped }

// Validate checks the command's limits.
func (c *LeaseCapped) Validate() error { return validateLeaseBy(&c.Lease, c.Principal) }

func applyLeaseCapped(a *applier, c *LeaseCapped) any {
	return a.lease(&c.Lease, c.Principal, c.MaxBytes)
}

// byteBudget is what is left of a capped pop's MaxBytes.
type byteBudget struct {
	capped bool
	left   uint64
	// took: the pop has claimed a message, so the next one must fit.
	took bool
	// full: a message did not fit; the pop claims nothing more.
	full bool
}

// fit is how many of take messages of msgBytes each the budget admits, and
// takes them from it.
func (b *byteBudget) fit(take, msgBytes uint64) uint64 {
	if !b.capped || take == 0 {
		return take
	}
	per := max(msgBytes, 1)
	n := min(take, b.left/per)
	if n == 0 && !b.took {
		n = 1 // the first message goes, however large
	}
	if n < take {
		b.full = true
	}
	b.left -= min(b.left, n*per)
	b.took = b.took || n > 0
	return n
}
