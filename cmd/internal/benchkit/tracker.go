package benchkit

import (
	"sync"
	"sync/atomic"
)

// Delivery states of one message for one consumer group.
const (
	stUnseen       = 0
	stDelivered    = 1 // delivered, its ack not answered yet; every earlier delivery settled
	stAcked        = 2 // an ack succeeded: final, whatever other acks of it answer
	stAckFailed    = 3 // its ack failed (none succeeded): a redelivery is expected
	stThisBatch    = 4 // delivered in the batch being recorded (transient)
	stOverlap      = 5 // delivered again while an ack was pending: see groupTrack.overlaps
	stOverlapBatch = 6 // stOverlap, delivered in the batch being recorded (transient)
)

// Outcomes of the ack of one delivery of an overlap.
const (
	ackPending = 0
	ackOK      = 1
	ackFailed  = 2
)

// maxSeq and maxProducers bound what a malformed transaction id can make
// the tracker allocate.
const (
	maxSeq       = 1 << 32
	maxProducers = 1 << 16
)

// Tracker does the exactly-once accounting: for every consumer group it
// records each (producer, seq) delivered and acknowledged, and compares them
// with what the producers had confirmed.
//
// Delivery is at-least-once with explicit acks (queen-api.md 4.19): a
// message comes back until an ack resolves it. A delivery is therefore a
// redelivery when the ack of the delivery before it failed, and a duplicate
// when nothing excused it: after an ack of the message succeeded, twice in
// one batch, or while the previous delivery's ack was pending when that ack
// then succeeds (or never comes back). A delivery while the previous one's
// ack is pending is what a lease that expired before the ack looks like
// (queen-api.md 4.5: the messages go to the next pop, and the late ack is
// refused), so it is settled only when that ack is answered. A confirmed
// message never delivered is lost.
type Tracker struct {
	run    string
	infer  bool // consume run without a count: expect 0..highest seq seen
	prods  []*producerState
	groups []*groupTrack
}

type producerState struct {
	attempted atomic.Int64 // seqs below were sent at least once
	confirmed atomic.Int64 // seqs below were confirmed by the broker
}

type groupTrack struct {
	mu   sync.Mutex
	seen [][]uint8 // [producer][seq] -> state
	// overlaps follows the messages in state stOverlap: rare (a lease
	// expired before its ack), so they do not cost every message more
	// than a byte.
	overlaps    map[msgKey]*overlap
	unique      atomic.Int64
	deliveries  int64
	redelivered int64
	duplicates  int64
	unexpected  int64
	foreign     int64
}

type msgKey struct {
	producer int
	seq      int64
}

// overlap is a message delivered again while the ack of an earlier delivery
// was pending. Whether that delivery was excused shows only when the ack is
// answered, in whatever order the acks of the overlapping deliveries come
// back: refused (the lease had expired: a redelivery) or applied (the lease
// was live: a duplicate).
type overlap struct {
	// acks is the ack outcome of each delivery of the overlap, in delivery
	// order; acks[0] is the one whose ack was pending when it began.
	acks  []uint8
	acked bool // an ack of the message succeeded
}

// pending reports whether an ack of the overlap is still unanswered.
func (ov *overlap) pending() bool {
	for _, a := range ov.acks {
		if a == ackPending {
			return true
		}
	}
	return false
}

// unsettled is the number of deliveries whose previous delivery's ack is
// still unanswered: nothing excused them (yet).
func (ov *overlap) unsettled() int64 {
	var n int64
	for k := 1; k < len(ov.acks); k++ {
		if ov.acks[k-1] == ackPending {
			n++
		}
	}
	return n
}

// Msg is one delivered message, as the tracker understood its transaction id.
type Msg struct {
	Own      bool // of this run
	Producer int
	Seq      int64
	nth      int  // its index among the deliveries of an overlap (0: the first, or none)
	repeat   bool // repeated within its batch: its ack is the first one's
}

// NewTracker prepares the accounting for c. In consume mode the expected
// messages are those of the produce run with c.Count (or, when it is 0, are
// inferred per producer from the highest sequence number delivered).
func NewTracker(c *Config) *Tracker {
	t := &Tracker{run: c.RunID, infer: c.Mode == ModeConsume && c.Count == 0}
	for p := 0; p < c.Producers; p++ {
		ps := &producerState{}
		if c.Mode == ModeConsume && c.Count > 0 {
			n := c.ProducerCount(p)
			ps.attempted.Store(n)
			ps.confirmed.Store(n)
		}
		t.prods = append(t.prods, ps)
	}
	for g := 0; g < c.Groups; g++ {
		t.groups = append(t.groups, &groupTrack{})
	}
	return t
}

// Attempted records that producer p has sent (or is sending) every seq below n.
func (t *Tracker) Attempted(p int, n int64) { t.prods[p].attempted.Store(n) }

// Confirmed records that the broker confirmed every seq of producer p below n.
func (t *Tracker) Confirmed(p int, n int64) { t.prods[p].confirmed.Store(n) }

// TotalConfirmed is the number of messages the producers had confirmed.
func (t *Tracker) TotalConfirmed() int64 {
	var n int64
	for _, ps := range t.prods {
		n += ps.confirmed.Load()
	}
	return n
}

// Unique is the number of distinct messages of this run group g received.
func (t *Tracker) Unique(g int) int64 { return t.groups[g].unique.Load() }

// Done reports whether group g has received as many distinct messages as
// the producers confirmed; never in consume mode without a count.
func (t *Tracker) Done(g int) bool {
	return !t.infer && t.Unique(g) >= t.TotalConfirmed()
}

// Delivered accounts for a batch delivered to group g and returns how each
// transaction id was understood, in order.
func (t *Tracker) Delivered(g int, txnIDs []string) []Msg {
	gt := t.groups[g]
	out := make([]Msg, len(txnIDs))
	gt.mu.Lock()
	defer gt.mu.Unlock()
	for i, id := range txnIDs {
		run, p, s, ok := ParseTxnID(id)
		if !ok || run != t.run {
			gt.foreign++
			continue
		}
		gt.deliveries++
		if p >= maxProducers || s >= maxSeq || (!t.infer && (p >= len(t.prods) || s >= t.prods[p].attempted.Load())) {
			gt.unexpected++
			continue
		}
		out[i] = Msg{Own: true, Producer: p, Seq: s}
		for len(gt.seen) <= p {
			gt.seen = append(gt.seen, nil)
		}
		row := gt.seen[p]
		if int64(len(row)) <= s {
			row = append(row, make([]uint8, int(s)+1-len(row)+len(row)/2)...)
			gt.seen[p] = row
		}
		switch row[s] {
		case stUnseen:
			row[s] = stThisBatch
			gt.unique.Add(1)
		case stAckFailed:
			row[s] = stThisBatch
			gt.redelivered++
		case stDelivered:
			// Its previous delivery's ack is pending: settled when that
			// ack is answered.
			if gt.overlaps == nil {
				gt.overlaps = map[msgKey]*overlap{}
			}
			gt.overlaps[msgKey{p, s}] = &overlap{acks: []uint8{ackPending, ackPending}}
			row[s] = stOverlapBatch
			out[i].nth = 1
		case stOverlap:
			ov := gt.overlaps[msgKey{p, s}]
			k := len(ov.acks)
			ov.acks = append(ov.acks, ackPending)
			out[i].nth = k
			row[s] = stOverlapBatch
			switch ov.acks[k-1] {
			case ackFailed:
				gt.redelivered++
			case ackOK:
				gt.duplicates++
			}
		case stThisBatch, stOverlapBatch:
			// Twice in one pop: no lease expiry excuses it, and the
			// batch's ack resolves both deliveries at once.
			gt.duplicates++
			out[i].repeat = true
		default: // stAcked: resolved already
			gt.duplicates++
		}
	}
	for _, m := range out {
		if !m.Own {
			continue
		}
		switch row := gt.seen[m.Producer]; row[m.Seq] {
		case stThisBatch:
			row[m.Seq] = stDelivered
		case stOverlapBatch:
			row[m.Seq] = stOverlap
		}
	}
	return out
}

// Acked records the outcome of the acks of msgs (as returned by Delivered)
// for group g: failed[i] tells that msgs[i]'s ack failed (nil: none did).
func (t *Tracker) Acked(g int, msgs []Msg, failed []bool) {
	gt := t.groups[g]
	gt.mu.Lock()
	defer gt.mu.Unlock()
	for i, m := range msgs {
		if !m.Own || m.repeat || m.Producer >= len(gt.seen) || m.Seq >= int64(len(gt.seen[m.Producer])) {
			continue
		}
		ok := i >= len(failed) || !failed[i]
		row := gt.seen[m.Producer]
		switch row[m.Seq] {
		case stDelivered:
			row[m.Seq] = stAckFailed
			if ok {
				row[m.Seq] = stAcked
			}
		case stOverlap:
			gt.overlapAcked(m, ok)
		}
		// stAcked stays: a message acknowledged once is resolved, and a
		// later refusal (the ack of a delivery counted as a duplicate)
		// does not make it expected again.
	}
}

// overlapAcked records the ack outcome of delivery m.nth of an overlap,
// which settles the delivery after it, and ends the overlap once every ack
// of it was answered.
func (gt *groupTrack) overlapAcked(m Msg, ok bool) {
	key := msgKey{m.Producer, m.Seq}
	ov := gt.overlaps[key]
	if m.nth >= len(ov.acks) || ov.acks[m.nth] != ackPending {
		return
	}
	ov.acks[m.nth] = ackFailed
	if ok {
		ov.acks[m.nth] = ackOK
		ov.acked = true
	}
	if m.nth+1 < len(ov.acks) {
		// The next delivery came while this ack was pending: refused, the
		// lease had expired and the broker rightly delivered it again;
		// applied, the lease was live and it should not have.
		if ok {
			gt.duplicates++
		} else {
			gt.redelivered++
		}
	}
	if !ov.pending() {
		delete(gt.overlaps, key)
		gt.seen[m.Producer][m.Seq] = stAckFailed
		if ov.acked {
			gt.seen[m.Producer][m.Seq] = stAcked
		}
	}
}

// GroupResult is the verification of one consumer group.
type GroupResult struct {
	Group       string `json:"group"`
	Expected    int64  `json:"expected"`    // messages the producers confirmed
	Deliveries  int64  `json:"deliveries"`  // messages of this run delivered, counting repeats
	Unique      int64  `json:"unique"`      // distinct expected messages delivered
	Lost        int64  `json:"lost"`        // expected, never delivered
	Duplicates  int64  `json:"duplicates"`  // delivered again although nothing excused it (see Tracker)
	Redelivered int64  `json:"redelivered"` // delivered again after the previous delivery's ack failed (at-least-once)
	Unacked     int64  `json:"unacked"`     // delivered, ack never succeeded
	Unconfirmed int64  `json:"unconfirmed"` // delivered although their push was never confirmed
	Unexpected  int64  `json:"unexpected"`  // of this run but never sent
	Foreign     int64  `json:"foreign"`     // of another run (or not a bench message)
	Inferred    bool   `json:"inferred,omitempty"`
	OK          bool   `json:"ok"`
}

// Results verifies every group; names gives the group names.
func (t *Tracker) Results(names func(g int) string) []GroupResult {
	var out []GroupResult
	// The expected range per producer: what was confirmed, or inferred.
	var inferred []int64
	if t.infer {
		for _, gt := range t.groups {
			gt.mu.Lock()
			for p, row := range gt.seen {
				for len(inferred) <= p {
					inferred = append(inferred, 0)
				}
				for s := len(row) - 1; s >= 0; s-- {
					if row[s] != stUnseen {
						inferred[p] = max(inferred[p], int64(s)+1)
						break
					}
				}
			}
			gt.mu.Unlock()
		}
	}
	for g, gt := range t.groups {
		gt.mu.Lock()
		r := GroupResult{Group: names(g), Deliveries: gt.deliveries, Redelivered: gt.redelivered,
			Duplicates: gt.duplicates, Unexpected: gt.unexpected, Foreign: gt.foreign, Inferred: t.infer}
		// A delivery still waiting for the previous one's ack (the run
		// ended before it was answered) was not excused.
		for _, ov := range gt.overlaps {
			r.Duplicates += ov.unsettled()
		}
		nprod := len(t.prods)
		if t.infer {
			nprod = len(inferred)
		}
		for p := 0; p < nprod; p++ {
			var conf, att int64
			if t.infer {
				conf, att = inferred[p], inferred[p]
			} else {
				conf, att = t.prods[p].confirmed.Load(), t.prods[p].attempted.Load()
			}
			r.Expected += conf
			var row []uint8
			if p < len(gt.seen) {
				row = gt.seen[p]
			}
			for s := int64(0); s < att; s++ {
				st := uint8(stUnseen)
				if s < int64(len(row)) {
					st = row[s]
				}
				switch {
				case s >= conf:
					if st != stUnseen {
						r.Unconfirmed++
					}
				case st == stUnseen:
					r.Lost++
				default:
					r.Unique++
					if st == stDelivered || st == stAckFailed || st == stOverlap && !gt.overlaps[msgKey{p, s}].acked {
						r.Unacked++
					}
				}
			}
		}
		gt.mu.Unlock()
		r.OK = r.Lost == 0 && r.Duplicates == 0 && r.Unexpected == 0
		out = append(out, r)
	}
	return out
}
