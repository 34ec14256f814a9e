package benchkit

import (
	"sync"
	"sync/atomic"
)

// Delivery states of one message for one consumer group.
const (
	stUnseen    = 0
	stDelivered = 1 // delivered, its ack not answered yet
	stAcked     = 2 // acknowledged successfully
	stAckFailed = 3 // its ack failed: a redelivery is expected
	stThisBatch = 4 // delivered in the batch being recorded (transient)
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
// A delivery of a message whose ack failed is a redelivery (normal
// at-least-once behaviour). Any other repeated delivery is a duplicate: after
// a successful ack, twice in one batch, or while the first delivery's ack
// was still pending (which only a lease that expired before the ack
// excuses). A confirmed message never delivered is lost.
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
	mu          sync.Mutex
	seen        [][]uint8 // [producer][seq] -> state
	unique      atomic.Int64
	deliveries  int64
	redelivered int64
	duplicates  int64
	unexpected  int64
	foreign     int64
}

// Msg is one delivered message, as the tracker understood its transaction id.
type Msg struct {
	Own      bool // of this run
	Producer int
	Seq      int64
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
		default:
			gt.duplicates++
		}
	}
	for _, m := range out {
		if m.Own && gt.seen[m.Producer][m.Seq] == stThisBatch {
			gt.seen[m.Producer][m.Seq] = stDelivered
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
		if m.Own && m.Producer < len(gt.seen) && m.Seq < int64(len(gt.seen[m.Producer])) {
			st := uint8(stAcked)
			if i < len(failed) && failed[i] {
				st = stAckFailed
			}
			gt.seen[m.Producer][m.Seq] = st
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
	Duplicates  int64  `json:"duplicates"`  // delivered again although no ack of it had failed
	Redelivered int64  `json:"redelivered"` // delivered again after its ack failed (at-least-once)
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
					if st == stDelivered || st == stAckFailed {
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
