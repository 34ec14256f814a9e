package fsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// A literal model of one queue's delivery rules (queen-api.md 4.4-4.8, 4.10,
// 4.11, 4.16 with queue-options.md and the section 6 decisions), checked
// step by step against the state machine.

type vmMsg struct {
	tx      string
	at      int64 // createdAt, unix µs
	seg     int   // the push that wrote it (one segment per push and partition)
	deleted bool
}

type vmState struct {
	origin   int // where the group started here, fixed at its first claim
	next     int // index of the first message not consumed
	batch    bool
	last     int // last message of the batch
	leaseID  [16]byte
	leaseExp int64
	retry    uint64
}

func (s *vmState) live(now int64) bool { return s.leaseID != [16]byte{} && s.leaseExp > now }

type vmPart struct {
	name    string
	uuid    [16]byte
	msgs    []vmMsg
	lastAt  int64
	mark    int64 // windowBuffer burst (hot-list rule)
	count   uint64
	first   int
	stateOf map[string]*vmState
}

func (p *vmPart) firstStored() int {
	for i, m := range p.msgs {
		if !m.deleted {
			return i
		}
	}
	return len(p.msgs)
}

type vmSub struct{ start int64 }

type vmModel struct {
	now          int64
	opts         segments.Options
	sqlWindow    bool
	windowBatch  uint64
	parts        map[string]*vmPart
	names        []string          // partition names in name order
	subs         map[string]vmSub  // "group" or "group/partition"
	rrFrom       map[string]string // wildcard round robin per group
	deadLetters  []string
	deliveries   map[string]int // group/tx -> times delivered
	consumedBy   map[string]int // group/tx -> times the position passed it by an ack or autoAck
	segs         int
	leasedOrders []vmHeld
}

type vmHeld struct {
	group   string
	part    string
	leaseID [16]byte
	txs     []string
	idx     []int
}

func (md *vmModel) initial(p *vmPart, group string) int {
	if group == QueueMode {
		return p.firstStored()
	}
	s, ok := md.subs[group+"/"+p.name]
	if !ok {
		s, ok = md.subs[group]
	}
	if !ok {
		return p.firstStored()
	}
	for i, m := range p.msgs {
		if m.at >= s.start {
			return i
		}
	}
	return len(p.msgs)
}

// claimable lists the messages a pop of group may take from p, at most want.
func (md *vmModel) claimable(p *vmPart, group string, want int) (start int, take []int) {
	st := p.stateOf[group]
	if st != nil {
		start = st.next
	} else {
		start = md.initial(p, group)
	}
	start = max(start, p.firstStored())
	if start >= len(p.msgs) {
		return start, nil
	}
	if st != nil && st.live(md.now) {
		return start, nil
	}
	before := len(p.msgs)
	if w := md.opts.WindowBuffer * 1e6; w > 0 {
		if md.sqlWindow {
			if p.firstStored() < len(p.msgs) && md.now < p.lastAt+w {
				return start, nil
			}
		} else if p.mark != 0 && md.now < p.mark+w && p.count < md.windowBatch {
			if start >= p.first {
				return start, nil
			}
			before = p.first
		}
	}
	visible := md.now - md.opts.DelayedProcessing*1e6
	for i := start; i < before && len(take) < want; i++ {
		if p.msgs[i].at > visible {
			break
		}
		take = append(take, i)
	}
	return start, take
}

// An auto-acknowledged message is answered with leaseId "", so its ack
// carries none. Reported failed (or retry) while another consumer of the
// group holds the next batch of the partition, it must change nothing
// (queen-api.md 4.8): not release that batch, not charge its retry budget.
func TestAckFailedForAutoAckedMessageChangesNothing(t *testing.T) {
	for _, status := range []uint8{AckFailed, AckRetry} {
		m := newMachine(t)
		m.push(items("q", "p", "m1")...)
		a := m.mustPop(Lease{Queue: "q", Batch: 1, AutoAck: true})
		m.push(items("q", "p", "m2")...)
		b := m.mustPop(Lease{Queue: "q", Batch: 1})
		lp := a.Partitions[0]
		r := m.ack("", ackOf(lp, lp.Messages[0], a.LeaseID, status))
		if !r.Items[0].Success || r.Items[0].LeaseReleased {
			t.Fatalf("status %d: ack %+v", status, r.Items[0])
		}
		g := m.group("q", "p", QueueMode)
		if g.LeaseID != b.LeaseID || !g.LeaseLive(m.now.UnixMicro()) || g.Retry != 0 {
			t.Fatalf("status %d: the other consumer's batch changed: lease %x (want %x) retry %d", status, g.LeaseID, b.LeaseID, g.Retry)
		}
		if again := m.pop(Lease{Queue: "q", Batch: 1}); again.Count() != 0 {
			t.Fatalf("status %d: leased m2 delivered again: %v", status, txids(again))
		}
	}
}

// Random steps on one queue with three partitions, read in queue mode and by
// two named groups whose pops ask for subscription modes all, new and
// timestamp (wildcard and specific pops, so queue and partition records):
// pushes, pops with batch and partition limits, lease lengths and autoAck,
// acks completed, failed, retry and dlq (whole batches, subsets, prefixes,
// late, without lease id), time passing lease expiry and delayedProcessing
// and windowBuffer boundaries (hot-list and SQL rules), retention sweeps with
// a segment budget, expired-lease sweeps and reconfigures of the delay and
// the retry budget. After every step the pop's messages, their order and
// retryCount, every ack item's result and every (partition, group) record
// equal the model's; at the end each group has consumed every message it is
// owed exactly once, none before its subscription start, and the dead
// letters are the model's.
func TestDeliveryRulesAgainstAModel(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { deliveryModelRun(t, seed) })
	}
}

func deliveryModelRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed*31+7))
	m := newMachine(t)
	md := &vmModel{
		parts: map[string]*vmPart{}, subs: map[string]vmSub{}, rrFrom: map[string]string{},
		deliveries: map[string]int{}, consumedBy: map[string]int{},
	}
	o := DefaultOptions(segments.OriginConfigure)
	o.LeaseTime = 10
	o.RetryLimit = int64(rng.IntN(3))
	if rng.IntN(4) == 0 {
		o.DeadLetterQueue, o.DLQAfterMaxRetries = false, false
	}
	o.DelayedProcessing = []int64{0, 0, 2, 5}[rng.IntN(4)]
	o.WindowBuffer = []int64{0, 0, 3}[rng.IntN(3)]
	md.sqlWindow = rng.IntN(3) == 0
	md.windowBatch = []uint64{4, 100}[rng.IntN(2)]
	o.RetentionEnabled = rng.IntN(2) == 0
	o.RetentionSeconds = []int64{0, 40}[rng.IntN(2)]
	o.CompletedRetentionSeconds = []int64{0, 8}[rng.IntN(2)]
	o.MaxWaitTimeSeconds = []int64{0, 0, 60}[rng.IntN(3)]
	md.opts = o
	m.configure(Configure{Queue: "q", Options: o})
	md.now = m.now.UnixMicro()

	groups := []string{QueueMode, "g1", "g2"}
	prefer := map[string]uint8{"g1": uint8(rng.IntN(3)), "g2": uint8(rng.IntN(3))}
	partNames := []string{"a", "b", "c"}
	txn := 0
	where := func(step int, what string) string {
		return fmt.Sprintf("seed %d step %d (%s), options %+v sql %v batch %d", seed, step, what, md.opts, md.sqlWindow, md.windowBatch)
	}

	for step := 0; step < 400; step++ {
		var what string
		switch k := rng.IntN(100); {
		case k < 22: // push
			what = "push"
			var its []PushItem
			for range 1 + rng.IntN(2) {
				pn := partNames[rng.IntN(len(partNames))]
				for range 1 + rng.IntN(3) {
					txn++
					its = append(its, item("q", pn, fmt.Sprint("t", txn), "0"))
				}
			}
			pr := m.push(its...)
			byPart := map[string][]string{}
			var order []string
			for i, it := range its {
				if pr.Items[i].Status != PushQueued {
					t.Fatalf("%s: push item %d %+v", where(step, what), i, pr.Items[i])
				}
				if _, ok := byPart[it.Partition]; !ok {
					order = append(order, it.Partition)
				}
				byPart[it.Partition] = append(byPart[it.Partition], it.TxID)
			}
			for _, pn := range order {
				p := md.parts[pn]
				if p == nil {
					p = &vmPart{name: pn, uuid: m.partition("q", pn).UUID, stateOf: map[string]*vmState{}}
					md.parts[pn] = p
					md.names = append(md.names, pn)
					slices.Sort(md.names)
				}
				md.segs++
				first := len(p.msgs)
				for _, tx := range byPart[pn] {
					p.msgs = append(p.msgs, vmMsg{tx: tx, at: md.now, seg: md.segs})
				}
				p.lastAt = md.now
				n := uint64(len(byPart[pn]))
				if w := md.opts.WindowBuffer * 1e6; w > 0 {
					if p.mark == 0 || md.now >= p.mark+w {
						p.mark, p.count, p.first = md.now, n, first
					} else {
						p.count += n
					}
				}
			}
		case k < 55: // pop
			what = "pop"
			g := groups[rng.IntN(len(groups))]
			l := Lease{Queue: "q", Group: g, Batch: uint32(1 + rng.IntN(5)), MaxPartitions: uint32(1 + rng.IntN(3)),
				AutoAck: rng.IntN(6) == 0, WindowBatch: md.windowBatch, SQLWindow: md.sqlWindow}
			if rng.IntN(4) == 0 {
				l.LeaseSeconds = 3
			}
			mode := prefer[g]
			if rng.IntN(4) == 0 {
				mode = uint8(rng.IntN(3))
			}
			l.SubMode = mode
			if mode == SubTimestamp {
				l.SubFrom = md.now + int64(rng.IntN(15)-10)*1e6
			}
			specific := rng.IntN(5) == 0
			if specific {
				l.Scope, l.Partition = ScopeSpecific, partNames[rng.IntN(len(partNames))]
			}
			what = fmt.Sprintf("pop %+v", l)
			// First contact (4.7): a record for the scope unless queue mode or "all".
			if g != QueueMode && mode != SubAll {
				key := g
				if specific {
					key = g + "/" + l.Partition
				}
				if _, ok := md.subs[key]; !ok {
					s := vmSub{start: md.now}
					if mode == SubTimestamp {
						s.start = l.SubFrom
					}
					md.subs[key] = s
				}
			}
			var walk []string
			if specific {
				if md.parts[l.Partition] != nil {
					walk = []string{l.Partition}
				}
			} else {
				from := md.rrFrom[g]
				i, _ := slices.BinarySearch(md.names, from)
				walk = slices.Concat(md.names[i:], md.names[:i])
			}
			remaining, maxParts := int(l.Batch), int(l.MaxPartitions)
			if specific {
				maxParts = 1
			}
			type claim struct {
				part string
				idx  []int
			}
			var want []claim
			for _, pn := range walk {
				if remaining == 0 || len(want) >= maxParts {
					break
				}
				p := md.parts[pn]
				start, take := md.claimable(p, g, remaining)
				if len(take) == 0 {
					continue
				}
				st := p.stateOf[g]
				if st == nil {
					st = &vmState{origin: start, next: start}
					p.stateOf[g] = st
				}
				st.batch, st.leaseID, st.leaseExp = false, [16]byte{}, 0
				st.next = max(st.next, start)
				want = append(want, claim{pn, take})
				remaining -= len(take)
			}
			r := m.pop(l)
			var got, exp []string
			for _, lp := range r.Partitions {
				for _, msg := range lp.Messages {
					got = append(got, fmt.Sprintf("%s/%s/r%d", lp.Partition, msg.TxID, msg.RetryCount))
				}
			}
			for _, c := range want {
				p := md.parts[c.part]
				for _, i := range c.idx {
					exp = append(exp, fmt.Sprintf("%s/%s/r%d", c.part, p.msgs[i].tx, p.stateOf[g].retry))
				}
			}
			if !slices.Equal(got, exp) {
				t.Fatalf("%s:\n got  %v\n want %v", where(step, what), got, exp)
			}
			if len(want) > 0 && !specific {
				md.rrFrom[g] = want[len(want)-1].part + "\x00"
			}
			if len(want) > 0 && l.AutoAck != (r.LeaseID == [16]byte{}) {
				t.Fatalf("%s: lease id %x with autoAck %v", where(step, what), r.LeaseID, l.AutoAck)
			}
			secs := leaseSeconds(l.LeaseSeconds, md.opts.LeaseTime)
			for _, c := range want {
				p := md.parts[c.part]
				st := p.stateOf[g]
				last := c.idx[len(c.idx)-1]
				h := vmHeld{group: g, part: c.part, leaseID: r.LeaseID}
				for _, i := range c.idx {
					md.deliveries[g+"/"+p.msgs[i].tx]++
					h.txs = append(h.txs, p.msgs[i].tx)
					h.idx = append(h.idx, i)
				}
				if l.AutoAck {
					// Held too: an ack of an auto-acknowledged message
					// carries the pop's empty lease id.
					md.leasedOrders = append(md.leasedOrders, h)
					for i := st.next; i <= last; i++ {
						md.consumedBy[g+"/"+p.msgs[i].tx]++
					}
					st.next, st.retry = last+1, 0
					continue
				}
				st.batch, st.last, st.leaseID, st.leaseExp = true, last, r.LeaseID, md.now+secs*1e6
				md.leasedOrders = append(md.leasedOrders, h)
			}
			if n := len(md.leasedOrders); n > 16 {
				md.leasedOrders = md.leasedOrders[n-16:]
			}
		case k < 80: // ack one held delivery of one partition
			if len(md.leasedOrders) == 0 {
				continue
			}
			// Mostly the newest deliveries, sometimes an old one (a late ack).
			hi := len(md.leasedOrders) - 1 - min(rng.IntN(len(md.leasedOrders)), rng.IntN(4))
			h := md.leasedOrders[hi]
			type ackStep struct {
				i      int
				status uint8
			}
			var plan []ackStep
			n := len(h.txs)
			switch kind := rng.IntN(7); kind {
			case 0, 1: // completed, every message
				for i := range n {
					plan = append(plan, ackStep{i, AckCompleted})
				}
			case 2: // completed, a random subset (acks are cumulative)
				for i := range n {
					if rng.IntN(2) == 0 {
						plan = append(plan, ackStep{i, AckCompleted})
					}
				}
			case 3: // the whole batch failed
				for i := range n {
					plan = append(plan, ackStep{i, AckFailed})
				}
			case 4: // a completed prefix, then failed
				c := rng.IntN(n + 1)
				for i := range n {
					s := AckCompleted
					if i >= c {
						s = AckFailed
					}
					plan = append(plan, ackStep{i, s})
				}
			case 5: // retry
				for i := range 1 + rng.IntN(n) {
					plan = append(plan, ackStep{i, AckRetry})
				}
			case 6: // one dead-lettered, the rest completed
				d := rng.IntN(n)
				for i := range n {
					s := AckCompleted
					if i == d {
						s = AckDLQ
					}
					plan = append(plan, ackStep{i, s})
				}
			}
			if len(plan) == 0 {
				continue
			}
			what = fmt.Sprintf("ack %s/%s lease %x %v %v", h.group, h.part, h.leaseID[:4], h.txs, plan)
			// Some acks carry no lease id, as a client may send them.
			lease := h.leaseID
			if rng.IntN(6) == 0 {
				lease = [16]byte{}
			}
			hasLease := lease != [16]byte{}
			what += fmt.Sprint(" with lease ", hasLease)
			p := md.parts[h.part]
			var its []AckItem
			for _, s := range plan {
				its = append(its, ackTx(p.uuid, h.txs[s.i], lease, s.status))
			}
			// Apply per item, in message order (the plan is in order).
			st := p.stateOf[h.group]
			var atStart [16]byte
			if st != nil && st.live(md.now) {
				atStart = st.leaseID
			}
			charged, released := false, false
			advance := func(i int) bool {
				if i+1 > st.next {
					for j := st.next; j <= i; j++ {
						if !p.msgs[j].deleted {
							md.consumedBy[h.group+"/"+p.msgs[j].tx]++
						}
					}
					st.next = i + 1
				}
				if st.batch && st.next > st.last {
					live := st.live(md.now)
					st.batch, st.leaseID, st.leaseExp, st.retry = false, [16]byte{}, 0, 0
					return live
				}
				return false
			}
			var exp []AckItemResult
			for _, s := range plan {
				i := h.idx[s.i]
				r := AckItemResult{}
				if p.msgs[i].deleted {
					exp = append(exp, AckItemResult{Error: ErrUnresolvable})
					continue
				}
				resolved := st != nil && i < st.next
				switch {
				case resolved && (s.status == AckCompleted || s.status == AckDLQ):
					r.Success = true
				case resolved && !hasLease && (s.status == AckFailed || s.status == AckRetry):
					// 4.8: an ack for an auto-acknowledged (consumed)
					// message changes nothing.
					r.Success = true
				case hasLease && (lease != atStart || atStart == [16]byte{}):
					r.Error = ErrInvalidLease
				case hasLease && released:
					if s.status == AckFailed || s.status == AckRetry {
						r.Success = true
					} else {
						r.Error = ErrInvalidLease
					}
				default:
					r.Success = true
					switch s.status {
					case AckCompleted:
						r.LeaseReleased = advance(i)
					case AckFailed:
						if charged {
							break
						}
						if st.retry < uint64(max(md.opts.RetryLimit, 0)) {
							if st.live(md.now) {
								st.retry++
								st.leaseID, st.leaseExp = [16]byte{}, 0
								r.LeaseReleased, charged, released = true, true, true
							}
							break
						}
						if resolved {
							break
						}
						if md.opts.DeadLetterQueue || md.opts.DLQAfterMaxRetries {
							md.deadLetters = append(md.deadLetters, fmt.Sprintf("%s/%s/%s/r%d", h.group, h.part, p.msgs[i].tx, st.retry))
							r.DLQ = true
						} else {
							r.Dropped = true
						}
						r.LeaseReleased = advance(i)
					case AckDLQ:
						md.deadLetters = append(md.deadLetters, fmt.Sprintf("%s/%s/%s/r%d", h.group, h.part, p.msgs[i].tx, st.retry))
						r.DLQ = true
						r.LeaseReleased = advance(i)
					case AckRetry:
						if st.live(md.now) {
							st.leaseID, st.leaseExp = [16]byte{}, 0
							r.LeaseReleased, released = true, true
						}
					}
				}
				exp = append(exp, r)
			}
			ar := m.ack(h.group, its...)
			for j := range exp {
				g := ar.Items[j]
				g.Queue, g.Partition, g.Resolved = "", "", false
				if g != exp[j] {
					t.Fatalf("%s: item %d got %+v want %+v", where(step, what), j, ar.Items[j], exp[j])
				}
			}
		case k < 90: // time passes
			d := []time.Duration{0, 300 * time.Millisecond, time.Second, 2500 * time.Millisecond, 4 * time.Second, 11 * time.Second}[rng.IntN(6)]
			what = fmt.Sprint("advance ", d)
			m.advance(d)
			md.now = m.now.UnixMicro()
		case k < 95: // retention sweep
			budget := []uint32{1, 100}[rng.IntN(2)]
			what = fmt.Sprint("sweep ", budget)
			m.apply(&Sweep{Queue: "q", MaxSegments: budget})
			md.sweep(int(budget))
		case k < 97: // expired lease records cleared
			grace := int64(rng.IntN(3)) * 1e6
			what = "expire leases"
			m.apply(&ExpireLeases{Grace: grace, Max: 100})
			for _, p := range md.parts {
				for _, st := range p.stateOf {
					if st.leaseID != ([16]byte{}) && st.leaseExp <= md.now-grace {
						st.leaseID, st.leaseExp = [16]byte{}, 0
					}
				}
			}
		default: // reconfigure (a full replace): delay, retry budget and dead-letter flags
			what = "configure"
			o := md.opts
			o.DelayedProcessing = []int64{0, 2, 5}[rng.IntN(3)]
			o.RetryLimit = int64(rng.IntN(3))
			both := rng.IntN(4) != 0
			o.DeadLetterQueue, o.DLQAfterMaxRetries = both || rng.IntN(2) == 0, both
			md.opts = o
			m.configure(Configure{Queue: "q", Options: o})
		}
		md.compareStates(t, m, where(step, what))
	}

	// Drain: once every delay, window and lease has passed, each group
	// consumes everything it is owed.
	m.advance(time.Minute)
	md.now = m.now.UnixMicro()
	for _, g := range groups {
		for range 200 {
			r := m.pop(Lease{Queue: "q", Group: g, Batch: 10, MaxPartitions: 3, WindowBatch: md.windowBatch, SQLWindow: md.sqlWindow})
			if r.Count() == 0 {
				break
			}
			for _, lp := range r.Partitions {
				p := md.parts[lp.Partition]
				st := p.stateOf[g]
				if st == nil {
					start := max(md.initial(p, g), p.firstStored())
					st = &vmState{origin: start, next: start}
					p.stateOf[g] = st
				}
				// Every delay, window and lease has passed: the batch is the
				// stored messages right after the position, in order.
				i := max(st.next, p.firstStored())
				for _, msg := range lp.Messages {
					if i >= len(p.msgs) || p.msgs[i].tx != msg.TxID {
						t.Fatalf("seed %d drain %s: %s delivered out of order (position %d)", seed, g, msg.TxID, i)
					}
					md.deliveries[g+"/"+msg.TxID]++
					md.consumedBy[g+"/"+msg.TxID]++
					i++
				}
				st.next = i
				st.batch, st.leaseID, st.leaseExp, st.retry = false, [16]byte{}, 0, 0
			}
			for _, it := range ackAll(r, AckCompleted) {
				if res := m.ack(g, it); !res.Items[0].Success {
					t.Fatalf("seed %d drain %s: ack %+v", seed, g, res.Items[0])
				}
			}
			md.compareStates(t, m, fmt.Sprintf("seed %d drain %s", seed, g))
		}
		// Every stored message the group is owed was consumed exactly once
		// (acked, dead-lettered, dropped or auto-acknowledged), and each
		// one delivered at least once unless retention took it first.
		for _, pn := range md.names {
			p := md.parts[pn]
			from := md.initial(p, g)
			if st := p.stateOf[g]; st != nil {
				from = st.origin
			}
			for i, msg := range p.msgs {
				key := g + "/" + msg.tx
				owed := i >= from
				switch {
				case md.consumedBy[key] > 1:
					t.Fatalf("seed %d: %s consumed %d times", seed, key, md.consumedBy[key])
				case msg.deleted:
				case owed && md.consumedBy[key] != 1:
					t.Fatalf("seed %d: %s owed, consumed %d times (delivered %d)", seed, key, md.consumedBy[key], md.deliveries[key])
				case owed && md.deliveries[key] == 0:
					t.Fatalf("seed %d: %s consumed, never delivered", seed, key)
				case !owed && md.deliveries[key] != 0:
					t.Fatalf("seed %d: %s before the subscription start delivered", seed, key)
				}
			}
		}
	}
	var dl []string
	for _, d := range m.deadLetters("q") {
		dl = append(dl, fmt.Sprintf("%s/%s/%s/r%d", d.Group, d.PartitionName, d.TxID, d.RetryCount))
	}
	slices.Sort(dl)
	slices.Sort(md.deadLetters)
	if !slices.Equal(dl, md.deadLetters) {
		t.Fatalf("seed %d dead letters:\n got  %v\n want %v", seed, dl, md.deadLetters)
	}
	md.compareStates(t, m, fmt.Sprintf("seed %d end", seed))
}

// sweep applies the deletion rules of 4.16: whole segments, a prefix of each
// partition, the completed rule capped by the slowest group with state.
func (md *vmModel) sweep(budget int) {
	o := md.opts
	var cutRet, cutDone, cutMax int64
	if o.RetentionEnabled && o.RetentionSeconds > 0 {
		cutRet = md.now - o.RetentionSeconds*1e6
	}
	if o.RetentionEnabled && o.CompletedRetentionSeconds > 0 {
		cutDone = md.now - o.CompletedRetentionSeconds*1e6
	}
	if o.MaxWaitTimeSeconds > 0 {
		cutMax = md.now - o.MaxWaitTimeSeconds*1e6
	}
	if cutRet == 0 && cutDone == 0 && cutMax == 0 {
		return
	}
	for _, pn := range md.names {
		p := md.parts[pn]
		if p.firstStored() == len(p.msgs) {
			continue
		}
		if budget == 0 {
			return
		}
		slowest, groups := 0, 0
		for _, st := range p.stateOf {
			if groups == 0 || st.next < slowest {
				slowest = st.next
			}
			groups++
		}
		deleted := 0
		for i := p.firstStored(); i < len(p.msgs); {
			j := i
			for j < len(p.msgs) && p.msgs[j].seg == p.msgs[i].seg {
				j++
			}
			at := p.msgs[i].at
			doomed := (cutMax != 0 && at < cutMax) || (cutRet != 0 && at < cutRet) ||
				(cutDone != 0 && at < cutDone && groups > 0 && j <= slowest)
			if !doomed || deleted == budget {
				break
			}
			for k := i; k < j; k++ {
				p.msgs[k].deleted = true
			}
			deleted++
			i = j
		}
		if deleted == 0 {
			continue
		}
		budget -= deleted
		first := p.firstStored()
		for _, st := range p.stateOf {
			if st.batch && st.last < first {
				st.batch, st.leaseID, st.leaseExp, st.retry = false, [16]byte{}, 0, 0
			}
		}
	}
}

// compareStates checks every (partition, group) record against the model.
func (md *vmModel) compareStates(t *testing.T, m *machine, where string) {
	t.Helper()
	var diffs []string
	for _, pn := range md.names {
		p := md.parts[pn]
		for _, g := range []string{QueueMode, "g1", "g2"} {
			st := p.stateOf[g]
			got := m.group("q", pn, g)
			if (st == nil) != (got == nil) {
				diffs = append(diffs, fmt.Sprintf("%s/%s: state %v, model %v", pn, g, got != nil, st != nil))
				continue
			}
			if st == nil {
				continue
			}
			want := segments.Group{Next: uint64(st.next) + 1, LeaseID: st.leaseID, LeaseExpiry: st.leaseExp, Retry: st.retry}
			if st.batch {
				want.LeaseLast = uint64(st.last) + 1
			}
			if got.Next != want.Next || got.LeaseID != want.LeaseID || got.LeaseExpiry != want.LeaseExpiry ||
				got.Retry != want.Retry || got.LeaseLast != want.LeaseLast {
				diffs = append(diffs, fmt.Sprintf("%s/%s: next %d lease %x exp %d last %d retry %d; model next %d lease %x exp %d last %d retry %d",
					pn, g, got.Next, got.LeaseID[:4], got.LeaseExpiry, got.LeaseLast, got.Retry,
					want.Next, want.LeaseID[:4], want.LeaseExpiry, want.LeaseLast, want.Retry))
			}
		}
	}
	if len(diffs) > 0 {
		t.Fatalf("%s:\n%s", where, strings.Join(diffs, "\n"))
	}
}
