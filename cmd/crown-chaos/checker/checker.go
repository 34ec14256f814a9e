// Package checker verifies a chaos history (package history) against the
// Queen semantics Crown promises. It needs nothing but the history: the
// operations with their invocation and completion times and outcomes, the
// fault windows, and the final state recorded after healing.
//
// The model, per message m = (queue, partition, seq) and consumer group G:
//
//   - m must exist once some push of it was answered ok (status queued or
//     duplicate); a push whose outcome is unknown may or may not have
//     stored it; a push that failed stored nothing.
//   - A delivery is of m only when it carries the transaction id pushed as
//     m; one with another id at m's place (another partition's, another
//     run's) is unexpected and does not deliver m.
//   - Every ok result and every delivery of m carries the same message id:
//     two ids mean m was stored twice.
//   - G's position on a partition only moves forward, and only through
//     `completed` acks (the workload never dead-letters). An ack answered
//     success moved the position to m or past it before its answer was
//     sent; an ack whose outcome is unknown may have moved it at any time
//     after its invocation; an ack answered with an item error moved nothing.
//   - A pop delivers, per partition, consecutive messages starting right
//     after G's position at the time it is applied. So for a delivery that
//     starts at a, with C the highest m whose success ack was answered
//     before the pop was sent and P the highest m of any ack (success or
//     unknown) sent before the pop was answered: C < a <= P+1. a <= C is a
//     message acknowledged completed and delivered again (duplicated); a >
//     P+1 skips messages nobody consumed (reordered); within a batch any
//     step other than +1 is reordered. Everything else, including going
//     back to an earlier message after a lease expired or a failed/retry
//     ack, is a documented redelivery — provided it has such a cause: two
//     deliveries of m to G are at least the lease time apart or separated
//     by a failed/retry ack (in one order or the other when they overlap).
//     A pop in flight while a success ack of m (or of a later message) was
//     answered delivers m only in violation, whatever the lease time: that
//     ack was another lease's (the pop's consumer had no lease to ack yet),
//     so the pop applied either after m was consumed or while that lease
//     still held m.
//   - After the final drain every group was delivered, and completed (an
//     ack answered success of m or of a later message), every message
//     pushed ok: never delivered is lost, delivered but never completed is
//     never-completed (a message dropped after its delivery shows no gap
//     when nothing follows it). The workload re-sends completed acks left in
//     doubt during the drain, so an ack in doubt is no proof here.
//   - After healing every node of the run (the meta's nodes) reports the
//     same applied index and digest (judged from the recorded states, not
//     only the runner's flag), every node stores the same number of
//     messages in each partition, and that number lies between the messages
//     pushed ok and those pushed ok or with an unknown outcome.
package checker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

// Violation kinds, each counted in one category.
const (
	KindLost          = "lost"                         // Lost
	KindStoredLess    = "stored-count-below-confirmed" // Lost
	KindNotCompleted  = "never-completed"              // Lost
	KindDupDelivery   = "delivered-after-completed"    // Duplicated
	KindStoredTwice   = "stored-twice"                 // Duplicated
	KindStoredMore    = "stored-count-above-pushed"    // Duplicated
	KindSkipped       = "skipped"                      // Reordered
	KindOutOfOrder    = "out-of-order-in-batch"        // Reordered
	KindNoCause       = "redelivered-without-cause"    // Reordered
	KindPhantom       = "never-pushed"                 // Unexpected
	KindFailedApplied = "failed-push-delivered"        // Unexpected
	KindPayload       = "payload-mismatch"             // Unexpected
	KindDivergence    = "divergence"                   // Divergence
	KindNotConverged  = "not-converged"                // Divergence
	KindCountsDiffer  = "stored-count-differs"         // Divergence
)

var category = map[string]string{
	KindLost: "lost", KindStoredLess: "lost", KindNotCompleted: "lost",
	KindDupDelivery: "duplicated", KindStoredTwice: "duplicated", KindStoredMore: "duplicated",
	KindSkipped: "reordered", KindOutOfOrder: "reordered", KindNoCause: "reordered",
	KindPhantom: "unexpected", KindFailedApplied: "unexpected", KindPayload: "unexpected",
	KindDivergence: "divergence", KindNotConverged: "divergence", KindCountsDiffer: "divergence",
}

// Violation is one broken guarantee.
type Violation struct {
	Kind      string  `json:"kind"`
	Queue     string  `json:"queue,omitempty"`
	Partition string  `json:"partition,omitempty"`
	Group     string  `json:"group,omitempty"`
	Seq       int64   `json:"seq"`
	Detail    string  `json:"detail"`
	Ops       []int64 `json:"ops,omitempty"` // history record ids
}

func (v Violation) String() string {
	where := v.Queue
	if v.Partition != "" {
		where += "/" + v.Partition
	}
	switch v.Kind {
	case KindDivergence, KindNotConverged, KindStoredLess, KindStoredMore, KindCountsDiffer:
		// about a node or a partition, not a message
	case KindStoredTwice:
		where += fmt.Sprintf(" seq %d", v.Seq)
	default:
		where += fmt.Sprintf(" group %s seq %d", GroupName(v.Group), v.Seq)
	}
	return fmt.Sprintf("%s: %s: %s (ops %v)", v.Kind, strings.TrimSpace(where), v.Detail, v.Ops)
}

// GroupName prints "" as queue-mode.
func GroupName(g string) string {
	if g == "" {
		return "queue-mode"
	}
	return g
}

// GroupNames is GroupName of each.
func GroupNames(gs []string) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = GroupName(g)
	}
	return out
}

// Counts are the operation counts by kind and outcome.
type Counts struct {
	Total   int `json:"total"`
	OK      int `json:"ok"`
	Fail    int `json:"fail"`
	Unknown int `json:"unknown"`
}

func (c *Counts) add(outcome string) {
	c.Total++
	switch outcome {
	case history.OK:
		c.OK++
	case history.Fail:
		c.Fail++
	default:
		c.Unknown++
	}
}

// Availability is ok / total (1 when there was nothing).
func (c Counts) Availability() float64 {
	if c.Total == 0 {
		return 1
	}
	return float64(c.OK) / float64(c.Total)
}

// Window is a fault window with its availability and recovery.
type Window struct {
	ID           int     `json:"id"`
	Scenario     string  `json:"scenario"`
	Label        string  `json:"label"`
	StartSec     float64 `json:"start_s"`
	EndSec       float64 `json:"end_s"`
	Ops          Counts  `json:"ops"`
	Pushes       Counts  `json:"pushes"`
	Availability float64 `json:"availability"`
	// PushesPerSec is the rate of pushes answered ok among those sent in
	// the window: compare with Result.BaselinePushesPerSec (a paused leader
	// keeps availability high but stalls requests).
	PushesPerSec float64 `json:"pushes_ok_per_s"`
	// Seconds from the heal until every running node was healthy / until a
	// write through every running node succeeded; -1 when not measured or
	// not reached.
	RecoveryHealthySec float64 `json:"recovery_healthy_s"`
	RecoveryWritesSec  float64 `json:"recovery_writes_s"`
	RecoveryNote       string  `json:"recovery_note,omitempty"`
}

// Checkpoint is one convergence check.
type Checkpoint struct {
	AtSec   float64 `json:"at_s"`
	Label   string  `json:"label"`
	Passed  bool    `json:"passed"`
	Applied uint64  `json:"applied_index"`
	Detail  string  `json:"detail,omitempty"`
}

// Result is the verdict on a history.
type Result struct {
	Operations struct {
		All  Counts `json:"all"`
		Push Counts `json:"push"`
		Pop  Counts `json:"pop"`
		Ack  Counts `json:"ack"`
	} `json:"operations"`
	Messages struct {
		Attempted   int `json:"attempted"`    // distinct messages some push tried
		Confirmed   int `json:"confirmed"`    // pushed ok
		UnknownOnly int `json:"unknown_only"` // never confirmed, some push unknown
		FailedOnly  int `json:"failed_only"`  // every push failed
	} `json:"messages"`
	Deliveries   int `json:"deliveries"`   // messages delivered, repeats included
	Redeliveries int `json:"redeliveries"` // deliveries that went back to an unacknowledged message (documented)
	Completions  int `json:"completions"`  // ack items answered success with status completed

	Lost       int `json:"lost"`
	Duplicated int `json:"duplicated"`
	Reordered  int `json:"reordered"`
	Unexpected int `json:"unexpected"`
	Divergence int `json:"divergence"`

	Converged      bool              `json:"converged"`
	FinalApplied   uint64            `json:"final_applied_index"`
	FinalDigests   map[string]string `json:"final_digests,omitempty"`
	HaveFinalState bool              `json:"have_final_state"`
	Checkpoints    []Checkpoint      `json:"checkpoints,omitempty"`
	Windows        []Window          `json:"windows,omitempty"`
	Baseline       Counts            `json:"baseline"` // operations outside every fault window
	// BaselinePushesPerSec is the rate of ok pushes outside fault windows,
	// checkpoints and the final drain (producers run at a fixed rate).
	BaselinePushesPerSec float64        `json:"baseline_pushes_ok_per_s"`
	Notes                []string       `json:"notes,omitempty"`
	Violations           []Violation    `json:"violations,omitempty"` // the first MaxExamples of each kind
	ViolationKinds       map[string]int `json:"violation_kinds,omitempty"`
	DurationSec          float64        `json:"duration_s"`
	OK                   bool           `json:"ok"`
}

// Options tune the checker.
type Options struct {
	// MaxExamples is how many violations of each kind are kept (default 20).
	MaxExamples int
	// RequireFinal fails a history without a final-state record, or
	// without a confirmed push (the runner's histories have both;
	// hand-made test histories may not).
	RequireFinal bool
}

type msgKey struct {
	q, p string
	seq  int64
}

type message struct {
	txn       string
	confirmed bool
	unknown   bool
	pushOps   []int64
	ids       map[string]int64 // message id -> first push op that reported it
	delivered map[string]int64 // message ids seen in deliveries (when no push reported one)
}

type delivery struct {
	op         int64
	start, end int64
	lease      string
	items      []history.Item
}

type ackItem struct {
	op         int64
	start, end int64
	seq        int64
	lease      string
	state      int // ackSuccess, ackUnknown
}

const (
	ackSuccess = iota
	ackUnknown
)

type pgKey struct{ q, p, g string }

type checker struct {
	opt      Options
	res      *Result
	examples map[string]int
	msgs     map[msgKey]*message
	dels     map[pgKey][]*delivery
	acks     map[pgKey][]ackItem
	releases map[pgKey][][2]int64 // failed and retry acks that may have applied: [start, end]
	lease    int64                // ns; 0: unknown (no meta), redelivery causes not checked
	reached  map[pgKey]map[int64]bool
	nodes    map[string]string          // the run's nodes (meta); every state record must show each
	flagged  map[string]bool            // one violation per (kind, message, group)
	seen     map[string]map[string]bool // queue -> groups that popped or acked it
}

// saw records that group g reads queue q.
func (c *checker) saw(q, g string) {
	if c.seen[q] == nil {
		c.seen[q] = map[string]bool{}
	}
	c.seen[q][g] = true
}

func (c *checker) violate(v Violation) {
	k := fmt.Sprintf("%s|%s|%s|%s|%d", category[v.Kind], v.Queue, v.Partition, v.Group, v.Seq)
	switch v.Kind {
	case KindDivergence, KindNotConverged, KindStoredLess, KindStoredMore, KindCountsDiffer:
		k = fmt.Sprintf("%s|%d|%s", v.Kind, len(c.flagged), v.Detail)
	case KindStoredTwice:
		// Once per message, whatever the group: its key must not be the
		// queue-mode group's (""), or it would swallow that group's
		// delivered-after-completed of the same message.
		k = fmt.Sprintf("%s|%s|%s|%d", v.Kind, v.Queue, v.Partition, v.Seq)
	}
	if c.flagged[k] {
		return
	}
	c.flagged[k] = true
	switch category[v.Kind] {
	case "lost":
		c.res.Lost++
	case "duplicated":
		c.res.Duplicated++
	case "reordered":
		c.res.Reordered++
	case "unexpected":
		c.res.Unexpected++
	case "divergence":
		c.res.Divergence++
	}
	c.res.ViolationKinds[v.Kind]++
	if c.examples[v.Kind] < c.opt.MaxExamples {
		c.examples[v.Kind]++
		c.res.Violations = append(c.res.Violations, v)
	}
}

// Check verifies a history.
func Check(ops []history.Op, opt Options) *Result {
	if opt.MaxExamples <= 0 {
		opt.MaxExamples = 20
	}
	c := &checker{opt: opt, res: &Result{ViolationKinds: map[string]int{}}, examples: map[string]int{},
		msgs: map[msgKey]*message{}, dels: map[pgKey][]*delivery{}, acks: map[pgKey][]ackItem{},
		releases: map[pgKey][][2]int64{},
		reached:  map[pgKey]map[int64]bool{}, flagged: map[string]bool{}, seen: map[string]map[string]bool{}}
	sorted := slices.Clone(ops)
	slices.SortStableFunc(sorted, func(a, b history.Op) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.ID, b.ID))
	})
	var meta *history.Meta
	var final *history.Op
	// The meta first: checkpoints are judged against its nodes.
	for i := range sorted {
		if op := &sorted[i]; op.Kind == history.KindMeta && op.Meta != nil {
			c.nodes = op.Meta.Nodes
		}
	}
	for i := range sorted {
		op := &sorted[i]
		c.res.DurationSec = max(c.res.DurationSec, sec(max(op.Start, op.End)))
		switch op.Kind {
		case history.KindMeta:
			meta = op.Meta
			if meta != nil && meta.LeaseSeconds > 0 {
				c.lease = int64(meta.LeaseSeconds) * int64(time.Second)
			}
		case history.KindPush:
			c.res.Operations.Push.add(op.Outcome)
			c.res.Operations.All.add(op.Outcome)
			c.push(op)
		case history.KindPop:
			c.res.Operations.Pop.add(op.Outcome)
			c.res.Operations.All.add(op.Outcome)
		case history.KindAck:
			c.res.Operations.Ack.add(op.Outcome)
			c.res.Operations.All.add(op.Outcome)
		case history.KindFinal:
			final = op
		case history.KindCheckpoint:
			c.checkpoint(op)
		case history.KindNote:
			c.res.Notes = append(c.res.Notes, op.Label)
		}
	}
	// Deliveries and acks after every push is known (an unknown push may
	// be delivered before a retry confirms it; an ack names a message by
	// the transaction id pushed there).
	for i := range sorted {
		switch op := &sorted[i]; {
		case op.Kind == history.KindPop && op.Outcome == history.OK && len(op.Items) > 0:
			c.pop(op)
		case op.Kind == history.KindAck:
			c.ack(op)
		}
	}
	for k, m := range c.msgs {
		c.res.Messages.Attempted++
		switch {
		case m.confirmed:
			c.res.Messages.Confirmed++
		case m.unknown:
			c.res.Messages.UnknownOnly++
		default:
			c.res.Messages.FailedOnly++
		}
		if len(m.ids) > 1 {
			c.violate(Violation{Kind: KindStoredTwice, Queue: k.q, Partition: k.p, Seq: k.seq, Ops: opsOf(m.ids),
				Detail: fmt.Sprintf("transaction %s answered with %d different message ids %v", m.txn, len(m.ids), keysOf(m.ids))})
		}
	}
	for k := range c.dels {
		c.order(k)
	}
	c.lost(meta)
	c.final(final)
	c.windows(sorted)
	slices.SortStableFunc(c.res.Violations, func(a, b Violation) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Queue, b.Queue),
			strings.Compare(a.Partition, b.Partition), strings.Compare(a.Group, b.Group), cmp.Compare(a.Seq, b.Seq))
	})
	if final == nil && opt.RequireFinal {
		c.res.Notes = append(c.res.Notes, "the history has no final state: convergence was not checked")
	}
	// A run none of whose pushes was confirmed checked nothing: every
	// loss, duplicate and reordering is judged against confirmed pushes.
	checked := !opt.RequireFinal || c.res.Messages.Confirmed > 0
	if !checked {
		c.res.Notes = append(c.res.Notes, "no push was confirmed: nothing could be checked")
	}
	c.res.OK = c.res.Lost == 0 && c.res.Duplicated == 0 && c.res.Reordered == 0 && c.res.Unexpected == 0 &&
		c.res.Divergence == 0 && (!opt.RequireFinal || (final != nil && c.res.Converged)) && checked
	return c.res
}

func sec(ns int64) float64 { return float64(ns) / float64(time.Second) }

func opsOf(m map[string]int64) []int64 {
	var out []int64
	for _, id := range m {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func keysOf(m map[string]int64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (c *checker) msg(q, p string, seq int64, txn string) *message {
	k := msgKey{q, p, seq}
	m := c.msgs[k]
	if m == nil {
		m = &message{txn: txn, ids: map[string]int64{}, delivered: map[string]int64{}}
		c.msgs[k] = m
	}
	return m
}

func (c *checker) push(op *history.Op) {
	for _, it := range op.Items {
		m := c.msg(op.Queue, it.Partition, it.Seq, it.Txn)
		m.pushOps = append(m.pushOps, op.ID)
		switch {
		case op.Outcome == history.OK && (it.Status == "queued" || it.Status == "duplicate"):
			m.confirmed = true
			if it.MsgID != "" {
				if _, ok := m.ids[it.MsgID]; !ok {
					m.ids[it.MsgID] = op.ID
				}
			}
		case op.Outcome == history.OK:
			// Answered, but this item was not stored (e.g. a "failed" status).
		case op.Outcome == history.Unknown:
			m.unknown = true
		}
	}
}

func (c *checker) ack(op *history.Op) {
	if op.Outcome == history.OK || op.Outcome == history.Unknown {
		c.saw(op.Queue, op.Group)
	}
	if op.Status != "completed" && op.Status != "" && op.Status != "success" {
		// failed and retry acks never move the position here, but they may
		// release the lease: a cause for redelivery. An answered ack
		// released a partition only where some item succeeded: a rejected
		// item (an expired lease, say) released nothing.
		if op.Outcome == history.OK || op.Outcome == history.Unknown {
			seen := map[string]bool{}
			for _, it := range op.Items {
				if op.Outcome == history.OK && !it.Success {
					continue
				}
				if !seen[it.Partition] {
					seen[it.Partition] = true
					k := pgKey{op.Queue, it.Partition, op.Group}
					c.releases[k] = append(c.releases[k], [2]int64{op.Start, op.End})
				}
			}
		}
		return
	}
	var state int
	switch op.Outcome {
	case history.OK:
		state = ackSuccess
	case history.Unknown:
		state = ackUnknown
	default:
		return // certainly not applied
	}
	for _, it := range op.Items {
		st := state
		if m := c.msgs[msgKey{op.Queue, it.Partition, it.Seq}]; m == nil || m.txn != it.Txn {
			// Not the message pushed at that place (another run's, or an
			// id the workload could not read): the delivery that brought
			// it is unexpected, and acking it must not pass for acking m.
			continue
		}
		if op.Outcome == history.OK {
			if !it.Success {
				continue // an item error: nothing moved
			}
			c.res.Completions++
		}
		k := pgKey{op.Queue, it.Partition, op.Group}
		c.acks[k] = append(c.acks[k], ackItem{op: op.ID, start: op.Start, end: op.End, seq: it.Seq, lease: op.Lease, state: st})
	}
}

func (c *checker) pop(op *history.Op) {
	c.saw(op.Queue, op.Group)
	var cur *delivery
	var curKey pgKey
	for _, it := range op.Items {
		c.res.Deliveries++
		k := pgKey{op.Queue, it.Partition, op.Group}
		base := Violation{Queue: op.Queue, Partition: it.Partition, Group: op.Group, Seq: it.Seq, Ops: []int64{op.ID}}
		if seq, ok := history.ParseTxn(it.Txn); !ok || seq != it.Seq {
			v := base
			v.Kind, v.Detail = KindPhantom, fmt.Sprintf("delivered transaction %q is not one the workload writes", it.Txn)
			c.violate(v)
			continue
		}
		// Only the transaction id names the message: one of another
		// partition, queue or run that carries the same seq is not m. It
		// must neither count as m's delivery (which would hide m's loss)
		// nor take part in m's ordering.
		m := c.msgs[msgKey{op.Queue, it.Partition, it.Seq}]
		if m == nil || it.Txn != m.txn {
			v := base
			v.Kind, v.Detail = KindPhantom, fmt.Sprintf("transaction %s was never pushed to %s/%s", it.Txn, op.Queue, it.Partition)
			c.violate(v)
			continue
		}
		if cur == nil || k != curKey {
			cur = &delivery{op: op.ID, start: op.Start, end: op.End, lease: op.Lease}
			curKey = k
			c.dels[k] = append(c.dels[k], cur)
		}
		cur.items = append(cur.items, it)
		if c.reached[k] == nil {
			c.reached[k] = map[int64]bool{}
		}
		c.reached[k][it.Seq] = true
		if it.DataSeq != it.Seq {
			v := base
			v.Kind, v.Detail = KindPayload, fmt.Sprintf("payload carries seq %d", it.DataSeq)
			c.violate(v)
		}
		if !m.confirmed && !m.unknown {
			v := base
			v.Kind, v.Detail = KindFailedApplied, fmt.Sprintf("every push of %s failed, yet it was delivered", it.Txn)
			v.Ops = append(slices.Clone(v.Ops), m.pushOps...)
			c.violate(v)
		}
		if it.MsgID != "" {
			ref := m.ids
			if len(ref) == 0 {
				ref = m.delivered // only unknown pushes: the first delivery tells the id
			}
			if _, ok := ref[it.MsgID]; !ok {
				if len(ref) > 0 {
					first := keysOf(ref)[0]
					v := base
					v.Kind, v.Group = KindStoredTwice, ""
					v.Detail = fmt.Sprintf("delivered to group %s with message id %s, but %s was stored as %s",
						GroupName(op.Group), it.MsgID, it.Txn, first)
					v.Ops = append(slices.Clone(v.Ops), ref[first])
					c.violate(v)
				}
				m.delivered[it.MsgID] = op.ID
			}
		}
	}
}

// justified reports whether a lease taken by pop x can have ended before pop
// y took the same message: y answered at least the lease time after x was
// sent, or a failed or retry ack was sent in between.
func (c *checker) justified(x, y *delivery, releases [][2]int64) bool {
	if y.end-x.start >= c.lease-leaseSlack {
		return true
	}
	return slices.ContainsFunc(releases, func(r [2]int64) bool { return r[0] >= x.start && r[0] <= y.end })
}

// expiredInFlight reports whether pop d's lease can have ended before the
// lease of success ack a was taken: a pop answered under a's lease (of
// this partition, which one lease holds at a time per group) came back at
// least the lease time after d was sent. d's lease started no earlier than
// d was sent, and only its expiry can end it while d's consumer has not
// heard of it.
func (c *checker) expiredInFlight(d *delivery, a ackItem, byLease map[string][]*delivery) bool {
	if c.lease == 0 || a.lease == "" {
		return false
	}
	return slices.ContainsFunc(byLease[a.lease], func(q *delivery) bool {
		return q != d && q.end-d.start >= c.lease-leaseSlack
	})
}

// leaseSlack allows for the clock readings around a lease: crownd stamps a
// pop after the request was sent and checks expiry before answering.
const leaseSlack = 250 * int64(time.Millisecond)

// order checks the deliveries of one (queue, partition, group) against its acks.
func (c *checker) order(k pgKey) {
	dels := c.dels[k]
	slices.SortStableFunc(dels, func(a, b *delivery) int { return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.op, b.op)) })
	acks := c.acks[k]
	// C(t): highest seq of a success ack answered before t.
	byEnd := slices.Clone(acks)
	byEnd = slices.DeleteFunc(byEnd, func(a ackItem) bool { return a.state != ackSuccess })
	slices.SortFunc(byEnd, func(a, b ackItem) int { return cmp.Compare(a.end, b.end) })
	confMax := make([]int64, len(byEnd))
	confOp := make([]int64, len(byEnd))
	for i, a := range byEnd {
		confMax[i], confOp[i] = a.seq, a.op
		if i > 0 && confMax[i-1] >= a.seq {
			confMax[i], confOp[i] = confMax[i-1], confOp[i-1]
		}
	}
	// P(t): highest seq of any success or unknown ack sent before t.
	byStart := slices.Clone(acks)
	slices.SortFunc(byStart, func(a, b ackItem) int { return cmp.Compare(a.start, b.start) })
	possMax := make([]int64, len(byStart))
	for i, a := range byStart {
		possMax[i] = a.seq
		if i > 0 {
			possMax[i] = max(possMax[i-1], a.seq)
		}
	}
	byLease := map[string][]*delivery{}
	for _, d := range dels {
		if d.lease != "" {
			byLease[d.lease] = append(byLease[d.lease], d)
		}
	}
	var highest int64 = -1
	delivered := map[int64][]*delivery{}
	releases := c.releases[k]
	for _, d := range dels {
		C, cOp := int64(-1), int64(0)
		if i := sort.Search(len(byEnd), func(i int) bool { return byEnd[i].end >= d.start }); i > 0 {
			C, cOp = confMax[i-1], confOp[i-1]
		}
		P := int64(-1)
		if i := sort.Search(len(byStart), func(i int) bool { return byStart[i].start >= d.end }); i > 0 {
			P = possMax[i-1]
		}
		// S: the highest seq of a success ack answered while the pop was in
		// flight. The pop's own consumer cannot ack a lease it has not been
		// told yet, so that ack was another lease's: applied after it, the
		// pop delivered a completed message; applied before it, the pop
		// leased a message the ack's lease still held (its ack succeeded)
		// or that was already consumed. Either way m <= S is a violation,
		// unless the pop's lease can have expired before the ack's lease
		// was taken (expiredInFlight): then the pop was applied first and
		// its answer reached the client late, after its lease had ended
		// (a relaying node paused while holding the answer), and its
		// consumer's ack will be refused: at-least-once, not a duplicate.
		S, sOp, sEnd := int64(-1), int64(0), int64(0)
		for j := sort.Search(len(byEnd), func(i int) bool { return byEnd[i].end >= d.start }); j < len(byEnd) && byEnd[j].end <= d.end; j++ {
			if byEnd[j].seq > S && !c.expiredInFlight(d, byEnd[j], byLease) {
				S, sOp, sEnd = byEnd[j].seq, byEnd[j].op, byEnd[j].end
			}
		}
		a := d.items[0].Seq
		base := Violation{Queue: k.q, Partition: k.p, Group: k.g}
		if a > P+1 {
			v := base
			v.Kind, v.Seq, v.Ops = KindSkipped, a, []int64{d.op}
			v.Detail = fmt.Sprintf("delivery starts at seq %d but no ack sent before it was answered completed past seq %d: seq %d..%d skipped",
				a, P, P+1, a-1)
			c.violate(v)
		}
		for i, it := range d.items {
			if i > 0 && it.Seq != d.items[i-1].Seq+1 {
				v := base
				v.Kind, v.Seq, v.Ops = KindOutOfOrder, it.Seq, []int64{d.op}
				v.Detail = fmt.Sprintf("seq %d delivered right after seq %d in one batch", it.Seq, d.items[i-1].Seq)
				c.violate(v)
			}
			if it.Seq <= C {
				v := base
				v.Kind, v.Seq, v.Ops = KindDupDelivery, it.Seq, []int64{d.op, cOp}
				v.Detail = fmt.Sprintf("delivered by pop #%d (sent at %.3fs) after ack #%d had confirmed completion up to seq %d",
					d.op, sec(d.start), cOp, C)
				c.violate(v)
			} else if it.Seq <= S {
				v := base
				v.Kind, v.Seq, v.Ops = KindDupDelivery, it.Seq, []int64{d.op, sOp}
				v.Detail = fmt.Sprintf("delivered by pop #%d (sent %.3fs, answered %.3fs) while ack #%d, answered at %.3fs, confirmed completion up to seq %d: "+
					"applied after that ack it redelivered a completed message, before it it leased a message another lease held",
					d.op, sec(d.start), sec(d.end), sOp, sec(sEnd), S)
				c.violate(v)
			}
		}
		if a <= highest && a > C {
			c.res.Redeliveries += int(min(highest, d.items[len(d.items)-1].Seq) - a + 1)
		}
		highest = max(highest, d.items[len(d.items)-1].Seq)
		// A message comes again only after the lease that delivered it
		// ended without consuming it: it expired (at least the lease time
		// after that pop was sent, on this machine's clock) or a failed or
		// retry ack released it. Concurrent pops may commit in either
		// order, so a pair of deliveries passes when either order has a
		// cause.
		for _, it := range d.items {
			prevs := delivered[it.Seq]
			delivered[it.Seq] = append(prevs, d)
			if c.lease == 0 || it.Seq <= C {
				continue
			}
			for _, prev := range prevs {
				if c.justified(prev, d, releases) || c.justified(d, prev, releases) {
					continue
				}
				v := base
				v.Kind, v.Seq, v.Ops = KindNoCause, it.Seq, []int64{prev.op, d.op}
				v.Detail = fmt.Sprintf("pops #%d (sent %.3fs, answered %.3fs) and #%d (sent %.3fs, answered %.3fs) both delivered it, "+
					"less than the lease (%ds) apart and with no failed or retry ack between them",
					prev.op, sec(prev.start), sec(prev.end), d.op, sec(d.start), sec(d.end), c.lease/int64(time.Second))
				c.violate(v)
				break
			}
		}
	}
}

func (c *checker) lost(meta *history.Meta) {
	keys := make([]msgKey, 0, len(c.msgs))
	for k, m := range c.msgs {
		if m.confirmed {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b msgKey) int {
		return cmp.Or(strings.Compare(a.q, b.q), strings.Compare(a.p, b.p), cmp.Compare(a.seq, b.seq))
	})
	// Every group of the run reads every queue pushed to, whether or not the
	// meta lists that queue (a queue it forgot must not escape the check),
	// and so does every group seen reading it. Hand-made histories without
	// meta groups: the groups seen on each queue.
	groupsOf := map[string][]string{}
	for _, k := range keys {
		if _, ok := groupsOf[k.q]; ok {
			continue
		}
		gs := map[string]bool{}
		if meta != nil {
			for _, g := range meta.Groups {
				gs[g] = true
			}
		}
		for g := range c.seen[k.q] {
			gs[g] = true
		}
		groupsOf[k.q] = slices.Sorted(maps.Keys(gs))
	}
	// The highest seq each group's success completed acks reached (acks
	// are cumulative): the drain ends once every group completed every
	// message pushed ok, and a message delivered but never completed may
	// have been dropped after its delivery (its partition's last message
	// shows no gap). An ack in doubt is no proof: the drain re-sends those
	// until they are answered.
	done := map[pgKey]int64{}
	doneOp := map[pgKey]int64{}
	for k, acks := range c.acks {
		done[k] = -1
		for _, a := range acks {
			if a.state == ackSuccess && a.seq > done[k] {
				done[k], doneOp[k] = a.seq, a.op
			}
		}
	}
	for _, k := range keys {
		m := c.msgs[k]
		for _, g := range groupsOf[k.q] {
			pg := pgKey{k.q, k.p, g}
			if !c.reached[pg][k.seq] {
				c.violate(Violation{Kind: KindLost, Queue: k.q, Partition: k.p, Group: g, Seq: k.seq, Ops: m.pushOps,
					Detail: fmt.Sprintf("%s was pushed ok but never delivered to the group", m.txn)})
				continue
			}
			if d, ok := done[pg]; !ok || d < k.seq {
				detail := fmt.Sprintf("%s was pushed ok and delivered, but no ack of the group answered success completed it", m.txn)
				ops := slices.Clone(m.pushOps)
				if ok && d >= 0 {
					detail += fmt.Sprintf(" (completed up to seq %d, ack #%d)", d, doneOp[pg])
					ops = append(ops, doneOp[pg])
				}
				c.violate(Violation{Kind: KindNotCompleted, Queue: k.q, Partition: k.p, Group: g, Seq: k.seq, Ops: ops,
					Detail: detail})
			}
		}
	}
}

// agree reports whether states show every node of the run (meta's nodes,
// when known) at one applied index with one digest. The record's passed
// flag is the runner's claim; the states are the evidence, and both must
// hold. A node's error is not judged here: after a converged digest read,
// the final record keeps the error of the stored-count read beside the
// digests it agreed on.
func (c *checker) agree(states []history.NodeState) (bool, string) {
	if len(states) == 0 {
		return false, "no node states recorded"
	}
	have := map[string]bool{}
	for _, s := range states {
		have[s.Node] = true
		if s.Digest == "" || s.AppliedIndex != states[0].AppliedIndex || s.Digest != states[0].Digest {
			return false, ""
		}
	}
	var missing []string
	for n := range c.nodes {
		if !have[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return false, "no state of " + strings.Join(missing, ", ")
	}
	return true, ""
}

// statesDiffer classifies states that do not agree.
func (c *checker) statesDiffer(states []history.NodeState, why string) (kind, detail string) {
	kind, detail = classifyStates(states)
	if why != "" {
		detail = strings.TrimPrefix(detail+"; "+why, "; ")
	}
	return kind, detail
}

func (c *checker) checkpoint(op *history.Op) {
	agreed, why := c.agree(op.States)
	cp := Checkpoint{AtSec: sec(op.Start), Label: op.Label, Passed: op.Passed != nil && *op.Passed && agreed}
	if len(op.States) > 0 {
		cp.Applied = op.States[0].AppliedIndex
	}
	if !cp.Passed {
		kind, detail := c.statesDiffer(op.States, why)
		cp.Detail = detail
		c.violate(Violation{Kind: kind, Detail: fmt.Sprintf("checkpoint %q at %.1fs: %s", op.Label, sec(op.Start), detail),
			Ops: []int64{op.ID}})
	}
	c.res.Checkpoints = append(c.res.Checkpoints, cp)
}

// classifyStates explains why node states differ: the same applied index
// with different digests is a divergence; otherwise some node lags.
func classifyStates(states []history.NodeState) (kind, detail string) {
	var parts []string
	byIndex := map[uint64]map[string]bool{}
	for _, s := range states {
		if s.Error != "" {
			parts = append(parts, fmt.Sprintf("%s: %s", s.Node, s.Error))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s at %d/%.12s", s.Node, s.AppliedIndex, s.Digest))
		if byIndex[s.AppliedIndex] == nil {
			byIndex[s.AppliedIndex] = map[string]bool{}
		}
		byIndex[s.AppliedIndex][s.Digest] = true
	}
	kind = KindNotConverged
	for _, ds := range byIndex {
		if len(ds) > 1 {
			kind = KindDivergence
		}
	}
	return kind, strings.Join(parts, ", ")
}

func (c *checker) final(op *history.Op) {
	if op == nil {
		return
	}
	c.res.HaveFinalState = true
	agreed, why := c.agree(op.States)
	c.res.Converged = op.Passed != nil && *op.Passed && agreed
	c.res.FinalDigests = map[string]string{}
	for _, s := range op.States {
		c.res.FinalDigests[s.Node] = s.Digest
		c.res.FinalApplied = max(c.res.FinalApplied, s.AppliedIndex)
	}
	if !c.res.Converged {
		kind, detail := c.statesDiffer(op.States, why)
		c.violate(Violation{Kind: kind, Detail: "final state: " + detail, Ops: []int64{op.ID}})
	}
	// Stored counts per partition against what was pushed.
	confirmed := map[string]int64{}
	possible := map[string]int64{}
	attempted := map[string]bool{}
	for k, m := range c.msgs {
		qp := k.q + "/" + k.p
		attempted[qp] = true
		if m.confirmed {
			confirmed[qp]++
		}
		if m.confirmed || m.unknown {
			possible[qp]++
		}
	}
	qps := slices.Sorted(maps.Keys(attempted))
	var counted []history.NodeState
	for _, s := range op.States {
		if s.Error != "" {
			// A failed read leaves the totals partial or missing, and a
			// partition it did not reach would read as 0 stored.
			if c.res.Converged {
				c.res.Notes = append(c.res.Notes, fmt.Sprintf("final state: %s's stored messages were not checked: %s", s.Node, s.Error))
			}
			continue
		}
		if s.Totals == nil {
			if c.res.Converged && len(qps) > 0 {
				c.res.Notes = append(c.res.Notes, fmt.Sprintf("final state: %s's stored messages were not recorded, so not checked", s.Node))
			}
			continue
		}
		counted = append(counted, s)
		// Every partition the node reports as well: one no push went to
		// holds messages nobody pushed.
		mine := slices.Clone(qps)
		for qp := range s.Totals {
			if !attempted[qp] {
				mine = append(mine, qp)
			}
		}
		slices.Sort(mine)
		for _, qp := range mine {
			total := s.Totals[qp]
			q, p, _ := strings.Cut(qp, "/")
			if total < confirmed[qp] {
				c.violate(Violation{Kind: KindStoredLess, Queue: q, Partition: p, Ops: []int64{op.ID},
					Detail: fmt.Sprintf("%s stores %d messages, %d were pushed ok", s.Node, total, confirmed[qp])})
			}
			if total > possible[qp] {
				c.violate(Violation{Kind: KindStoredMore, Queue: q, Partition: p, Ops: []int64{op.ID},
					Detail: fmt.Sprintf("%s stores %d messages, at most %d were pushed (ok or unknown)", s.Node, total, possible[qp])})
			}
		}
	}
	// Replicas of one log store the same messages: counts that differ
	// diverge even when each lies within the bounds (an unknown push
	// stored on one node only).
	stored := map[string]bool{}
	for _, s := range counted {
		for qp := range s.Totals {
			stored[qp] = true
		}
	}
	for _, qp := range slices.Sorted(maps.Keys(stored)) {
		differ := false
		parts := make([]string, 0, len(counted))
		for _, s := range counted {
			differ = differ || s.Totals[qp] != counted[0].Totals[qp]
			parts = append(parts, fmt.Sprintf("%s %d", s.Node, s.Totals[qp]))
		}
		if differ {
			q, p, _ := strings.Cut(qp, "/")
			c.violate(Violation{Kind: KindCountsDiffer, Queue: q, Partition: p, Ops: []int64{op.ID},
				Detail: "nodes store different numbers of messages: " + strings.Join(parts, ", ")})
		}
	}
}

func (c *checker) windows(ops []history.Op) {
	rec := map[int]*history.Recovery{}
	for i := range ops {
		if op := &ops[i]; op.Kind == history.KindRecovery && op.Recovery != nil {
			rec[op.Window] = op.Recovery
		}
	}
	var ws []Window
	var spans [][2]int64
	var quiet [][2]int64 // checkpoints and everything after the producers stopped
	var lastPush int64
	for i := range ops {
		op := &ops[i]
		if op.Kind == history.KindPush {
			lastPush = max(lastPush, op.Start)
		}
		if op.Kind == history.KindCheckpoint {
			quiet = append(quiet, [2]int64{op.Start, op.End})
		}
		if op.Kind != history.KindWindow {
			continue
		}
		w := Window{ID: op.Window, Scenario: op.Scenario, Label: op.Label, StartSec: sec(op.Start), EndSec: sec(op.End),
			RecoveryHealthySec: -1, RecoveryWritesSec: -1}
		if r := rec[op.Window]; r != nil {
			if r.Healthy >= 0 {
				w.RecoveryHealthySec = sec(r.Healthy)
			}
			if r.Writes >= 0 {
				w.RecoveryWritesSec = sec(r.Writes)
			}
			w.RecoveryNote = r.Note
		}
		ws = append(ws, w)
		spans = append(spans, [2]int64{op.Start, op.End})
	}
	var basePushes int
	var firstPush int64 = -1
	for i := range ops {
		op := &ops[i]
		if op.Kind != history.KindPush && op.Kind != history.KindPop && op.Kind != history.KindAck {
			continue
		}
		if op.Kind == history.KindPush && firstPush < 0 {
			firstPush = op.Start
		}
		in := false
		for j, s := range spans {
			if op.Start >= s[0] && op.Start < s[1] {
				in = true
				ws[j].Ops.add(op.Outcome)
				if op.Kind == history.KindPush {
					ws[j].Pushes.add(op.Outcome)
				}
			}
		}
		if !in {
			c.res.Baseline.add(op.Outcome)
			if op.Kind == history.KindPush && op.Outcome == history.OK {
				basePushes++
			}
		}
	}
	for i := range ws {
		ws[i].Availability = ws[i].Ops.Availability()
		if d := ws[i].EndSec - ws[i].StartSec; d > 0 {
			ws[i].PushesPerSec = float64(ws[i].Pushes.OK) / d
		}
	}
	if firstPush >= 0 {
		base := lastPush - firstPush
		for _, s := range append(spans, quiet...) {
			lo, hi := max(s[0], firstPush), min(s[1], lastPush)
			if hi > lo {
				base -= hi - lo
			}
		}
		if base > 0 {
			c.res.BaselinePushesPerSec = float64(basePushes) / sec(base)
		}
	}
	c.res.Windows = ws
}
