package nemesis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"
)

// This file is the fallback for `tc qdisc ... netem` on kernels built
// without sch_netem: an NFQUEUE consumer that holds each queued packet for
// the configured delay (plus a random jitter) before accepting it, and drops
// a share of them. It speaks the nfnetlink_queue protocol directly over a
// netlink socket (no cgo, no library), in whatever network namespace the
// process runs in; the runner starts it with `ip netns exec NS crown-chaos
// nfq-delay ...` and adds an iptables NFQUEUE rule (with --queue-bypass, so
// traffic flows untouched when no consumer is bound) to the node's OUTPUT.
//
// Differences from netem, documented in DESIGN.md: packets are released in
// arrival order (jitter never reorders), and the delay applies where the
// rule is (the node's egress), like netem on the node's interface.

const (
	netlinkNetfilter = 12 // NETLINK_NETFILTER
	solNetlink       = 270
	netlinkNoENOBUFS = 5

	nfnlSubsysQueue = 3
	nfqnlMsgPacket  = 0
	nfqnlMsgVerdict = 1
	nfqnlMsgConfig  = 2

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2

	nfqaCfgCmd      = 1
	nfqaCfgParams   = 2
	nfqaCfgQueueMax = 3
	nfqaCfgMask     = 4
	nfqaCfgFlags    = 5

	nfqnlCfgCmdBind   = 1
	nfqnlCfgCmdUnbind = 2
	nfqnlCopyMeta     = 1
	nfqaCfgFFailOpen  = 1
	nfqaCfgFGSO       = 4

	nfDrop   = 0
	nfAccept = 1
)

// DelayConfig is what one nfq-delay process does to the packets it gets.
type DelayConfig struct {
	Queue  uint16
	Delay  time.Duration
	Jitter time.Duration
	Loss   float64 // 0..1
	Seed   uint64
}

type nfq struct {
	fd    int
	queue uint16
	seq   uint32
	mu    sync.Mutex // serialises sends
}

func nlAttr(typ uint16, data []byte) []byte {
	l := 4 + len(data)
	b := make([]byte, (l+3)&^3)
	binary.NativeEndian.PutUint16(b[0:], uint16(l))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[4:], data)
	return b
}

func (q *nfq) send(msgType uint16, flags uint16, attrs ...[]byte) error {
	body := []byte{syscall.AF_UNSPEC, 0, 0, 0} // nfgenmsg: family, version, res_id (BE)
	binary.BigEndian.PutUint16(body[2:], q.queue)
	for _, a := range attrs {
		body = append(body, a...)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	hdr := make([]byte, syscall.NLMSG_HDRLEN)
	binary.NativeEndian.PutUint32(hdr[0:], uint32(len(hdr)+len(body)))
	binary.NativeEndian.PutUint16(hdr[4:], nfnlSubsysQueue<<8|msgType)
	binary.NativeEndian.PutUint16(hdr[6:], syscall.NLM_F_REQUEST|flags)
	binary.NativeEndian.PutUint32(hdr[8:], q.seq)
	return syscall.Sendto(q.fd, append(hdr, body...), 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK})
}

// config sends a configuration message and waits for the kernel's ack.
func (q *nfq) config(attrs ...[]byte) error {
	if err := q.send(nfqnlMsgConfig, syscall.NLM_F_ACK, attrs...); err != nil {
		return err
	}
	buf := make([]byte, 65536)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		n, _, err := syscall.Recvfrom(q.fd, buf, 0)
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Type == syscall.NLMSG_ERROR && len(m.Data) >= 4 {
				if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
					return syscall.Errno(-e)
				}
				return nil
			}
		}
	}
	return errors.New("no answer from the kernel")
}

func openNFQ(queue uint16) (*nfq, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, netlinkNetfilter)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	q := &nfq{fd: fd, queue: queue}
	fail := func(what string, err error) (*nfq, error) {
		syscall.Close(fd)
		return nil, fmt.Errorf("nfqueue %s: %w", what, err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return fail("bind", err)
	}
	_ = syscall.SetsockoptInt(fd, solNetlink, netlinkNoENOBUFS, 1)
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 8<<20)
	tv := syscall.NsecToTimeval(int64(200 * time.Millisecond))
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return fail("timeout", err)
	}
	be32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	if err := q.config(nlAttr(nfqaCfgCmd, []byte{nfqnlCfgCmdBind, 0, 0, 0})); err != nil {
		return fail("bind queue (is another consumer bound to it?)", err)
	}
	params := append(be32(0), nfqnlCopyMeta)
	if err := q.config(nlAttr(nfqaCfgParams, params)); err != nil {
		return fail("copy mode", err)
	}
	_ = q.config(nlAttr(nfqaCfgQueueMax, be32(16384)))
	_ = q.config(nlAttr(nfqaCfgMask, be32(nfqaCfgFFailOpen|nfqaCfgFGSO)), nlAttr(nfqaCfgFlags, be32(nfqaCfgFFailOpen|nfqaCfgFGSO)))
	return q, nil
}

func (q *nfq) verdict(id uint32, v uint32) error {
	data := binary.BigEndian.AppendUint32(nil, v)
	data = binary.BigEndian.AppendUint32(data, id)
	return q.send(nfqnlMsgVerdict, 0, nlAttr(nfqaVerdictHdr, data))
}

func (q *nfq) close() {
	_ = q.send(nfqnlMsgConfig, 0, nlAttr(nfqaCfgCmd, []byte{nfqnlCfgCmdUnbind, 0, 0, 0}))
	syscall.Close(q.fd)
}

// packetIDs extracts the packet ids of the NFQNL_MSG_PACKET messages in buf.
func packetIDs(buf []byte, out []uint32) []uint32 {
	msgs, err := syscall.ParseNetlinkMessage(buf)
	if err != nil {
		return out
	}
	for _, m := range msgs {
		if m.Header.Type != nfnlSubsysQueue<<8|nfqnlMsgPacket || len(m.Data) < 4 {
			continue
		}
		attrs := m.Data[4:]
		for len(attrs) >= 4 {
			l := int(binary.NativeEndian.Uint16(attrs[0:]))
			t := binary.NativeEndian.Uint16(attrs[2:]) & 0x3fff
			if l < 4 || l > len(attrs) {
				break
			}
			if t == nfqaPacketHdr && l >= 8 {
				out = append(out, binary.BigEndian.Uint32(attrs[4:]))
				break
			}
			attrs = attrs[min((l+3)&^3, len(attrs)):]
		}
	}
	return out
}

type held struct {
	id  uint32
	due time.Time
}

// RunDelayer consumes NFQUEUE queue c.Queue in the current network
// namespace until ctx ends; then it accepts every packet it still holds and
// unbinds. ready is called once the queue is bound.
func RunDelayer(ctx context.Context, c DelayConfig, ready func()) error {
	q, err := openNFQ(c.Queue)
	if err != nil {
		return err
	}
	defer q.close()
	if ready != nil {
		ready()
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x6e6671))
	pending := make(chan held, 1<<16)
	released := make(chan struct{})
	go func() {
		defer close(released)
		for {
			select {
			case h := <-pending:
				if d := time.Until(h.due); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
					}
				}
				_ = q.verdict(h.id, nfAccept)
			case <-ctx.Done():
				for {
					select {
					case h := <-pending:
						_ = q.verdict(h.id, nfAccept)
					default:
						return
					}
				}
			}
		}
	}()
	buf := make([]byte, 1<<20)
	var ids []uint32
	var last time.Time
	for ctx.Err() == nil {
		n, _, err := syscall.Recvfrom(q.fd, buf, 0)
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.ENOBUFS) {
			continue
		}
		if err != nil {
			return fmt.Errorf("nfqueue recv: %w", err)
		}
		ids = packetIDs(buf[:n], ids[:0])
		now := time.Now()
		for _, id := range ids {
			if c.Loss > 0 && rng.Float64() < c.Loss {
				_ = q.verdict(id, nfDrop)
				continue
			}
			d := c.Delay
			if c.Jitter > 0 {
				d += time.Duration(rng.Int64N(int64(2*c.Jitter)+1)) - c.Jitter
			}
			due := now.Add(max(d, 0))
			if due.Before(last) { // keep arrival order
				due = last
			}
			last = due
			select {
			case pending <- held{id: id, due: due}:
			default:
				_ = q.verdict(id, nfAccept) // never block the kernel queue
			}
		}
	}
	<-released
	return nil
}
