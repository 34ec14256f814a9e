package fsm

// Edge cases of the time-driven rules of queue-options.md (retentionSeconds,
// completedRetentionSeconds, maxWaitTimeSeconds, delayedProcessing,
// windowBuffer, dedupWindowSeconds) that sweep_test.go and
// visibility_test.go do not already cover. Every test drives the state
// machine with the injected clock of harness_test.go.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// checkPartitionRecord verifies that a partition's record agrees with what
// is stored: message and segment counts, and FirstOffset at the oldest
// stored offset (NextOffset when empty).
func (m *machine) checkPartitionRecord(queue, part string) {
	m.t.Helper()
	p := m.partition(queue, part)
	if p == nil {
		m.t.Fatalf("partition %s/%s missing", queue, part)
	}
	var msgs, segs uint64
	first := p.NextOffset
	m.view(func(tx *segments.Tx) error {
		if err := tx.Segments(p, func(si segments.SegmentInfo) (bool, error) {
			if segs == 0 {
				first = si.First
			}
			segs++
			msgs += si.Count
			return true, nil
		}); err != nil {
			return err
		}
		return nil
	})
	if p.Messages != msgs || p.Segments != segs || p.FirstOffset != first {
		m.t.Fatalf("partition %s/%s record {messages %d, segments %d, first %d}, stored {%d, %d, %d}",
			queue, part, p.Messages, p.Segments, p.FirstOffset, msgs, segs, first)
	}
}

// swept sums a sweep result over the rules.
func swept(r *SweepResult) (segs, msgs uint64) {
	for i := range numRules {
		segs += r.Segments[i]
		msgs += r.Messages[i]
	}
	return segs, msgs
}

// A segment exactly retentionSeconds old is not "older than now -
// retentionSeconds": it survives; one microsecond later it is deleted. The
// same strict cutoff applies to maxWaitTimeSeconds and
// completedRetentionSeconds.
func TestSweepCutoffIsStrict(t *testing.T) {
	cases := []struct {
		name string
		rule int
		edit func(*segments.Options)
	}{
		{"retention", RuleRetention, func(o *segments.Options) { o.RetentionEnabled, o.RetentionSeconds = true, 60 }},
		{"completed", RuleCompleted, func(o *segments.Options) { o.RetentionEnabled, o.CompletedRetentionSeconds = true, 60 }},
		{"maxWait", RuleMaxWait, func(o *segments.Options) { o.MaxWaitTimeSeconds = 60 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newMachine(t)
			configureWith(m, "q", c.edit)
			m.push(items("q", "p", "a")...)
			m.advance(time.Microsecond)
			m.push(items("q", "p", "b")...)
			pid := m.partition("q", "p").UUID
			m.ack("G", ackTx(pid, "b", [16]byte{}, AckCompleted)) // consumed by the only group
			m.advance(60*time.Second - time.Microsecond)          // a is exactly 60 s old
			if r := m.sweep("q", 100); r.Segments != ([numRules]uint64{}) {
				t.Fatalf("a segment exactly at the cutoff was deleted: %+v", r)
			}
			m.advance(time.Microsecond) // a: 60 s + 1 µs, b: exactly 60 s
			r := m.sweep("q", 100)
			if r.Segments[c.rule] != 1 || r.Messages[c.rule] != 1 {
				t.Fatalf("sweep %+v, want one segment under rule %s", r, RuleNames[c.rule])
			}
			if got := m.stored("q", "p"); !slices.Equal(got, []string{"b"}) {
				t.Fatalf("stored %v", got)
			}
			m.checkPartitionRecord("q", "p")
		})
	}
}

// Deletion is whole-segment: under the completed rule a segment whose
// messages are only partly consumed by the slowest group survives whole,
// even though its consumed messages are old enough.
func TestSweepCompletedKeepsPartlyConsumedSegmentWhole(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.CompletedRetentionSeconds = true, 60 })
	m.push(items("q", "p", "s1", "s2", "s3")...) // one segment
	m.push(items("q", "p", "t1")...)
	pid := m.partition("q", "p").UUID
	m.ack("A", ackTx(pid, "t1", [16]byte{}, AckCompleted)) // everything
	m.ack("B", ackTx(pid, "s2", [16]byte{}, AckCompleted)) // cursor inside the first segment
	m.advance(time.Hour)
	if r := m.sweep("q", 100); r.Segments != ([numRules]uint64{}) {
		t.Fatalf("a partly consumed segment was deleted: %+v", r)
	}
	if got := m.stored("q", "p"); !slices.Equal(got, []string{"s1", "s2", "s3", "t1"}) {
		t.Fatalf("stored %v", got)
	}
	m.ack("B", ackTx(pid, "s3", [16]byte{}, AckCompleted)) // the segment is consumed whole
	r := m.sweep("q", 100)
	if r.Segments[RuleCompleted] != 1 || r.Messages[RuleCompleted] != 3 {
		t.Fatalf("sweep %+v, want the 3-message segment", r)
	}
	if got := m.stored("q", "p"); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("stored %v", got)
	}
	m.checkPartitionRecord("q", "p")
}

// Under retentionSeconds too a segment goes only as a whole: the budget
// counts segments, and a multi-message segment is never split.
func TestSweepRetentionDeletesMultiMessageSegmentsWhole(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.RetentionSeconds = true, 10 })
	m.push(items("q", "p", seq("a", 7)...)...)
	m.push(items("q", "p", seq("b", 5)...)...)
	m.advance(11 * time.Second)
	m.push(items("q", "p", "young")...)
	r := m.sweep("q", 1)
	if r.Segments[RuleRetention] != 1 || r.Messages[RuleRetention] != 7 || !r.More {
		t.Fatalf("first step %+v", r)
	}
	if got := m.stored("q", "p"); !slices.Equal(got, append(seq("b", 5), "young")) {
		t.Fatalf("stored %v", got)
	}
	r = m.sweep("q", 1)
	if r.Segments[RuleRetention] != 1 || r.Messages[RuleRetention] != 5 || r.More {
		t.Fatalf("second step %+v", r)
	}
	m.checkPartitionRecord("q", "p")
}

// A partition with no consumer-group rows has consumed nothing: the
// completed rule deletes nothing there (not even with a pop's live lease
// creating a row that consumed nothing), while retentionSeconds still
// deletes by age alone.
func TestSweepPartitionWithoutGroups(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) {
		o.RetentionEnabled, o.CompletedRetentionSeconds, o.RetentionSeconds = true, 60, 120
	})
	m.push(items("q", "read", "r1")...)
	m.push(items("q", "unread", "u1")...)
	m.push(items("q", "leased", "l1")...)
	m.ack("G", ackTx(m.partition("q", "read").UUID, "r1", [16]byte{}, AckCompleted))
	m.mustPop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "leased", Group: "G", Batch: 10, LeaseSeconds: 3600})
	if g := m.group("q", "unread", "G"); g != nil {
		t.Fatalf("setup: unread has group state %+v", g)
	}
	m.advance(61 * time.Second)
	r := m.sweep("q", 100)
	if r.Segments[RuleCompleted] != 1 || r.Segments[RuleRetention] != 0 {
		t.Fatalf("sweep at 61 s %+v", r)
	}
	if len(m.stored("q", "read")) != 0 || len(m.stored("q", "unread")) != 1 || len(m.stored("q", "leased")) != 1 {
		t.Fatalf("after the completed rule: read %v unread %v leased %v",
			m.stored("q", "read"), m.stored("q", "unread"), m.stored("q", "leased"))
	}
	m.advance(60 * time.Second) // 121 s: past retentionSeconds
	r = m.sweep("q", 100)
	if r.Segments[RuleRetention] != 2 || r.Messages[RuleRetention] != 2 || r.Segments[RuleCompleted] != 0 {
		t.Fatalf("sweep at 121 s %+v", r)
	}
	for _, p := range []string{"read", "unread", "leased"} {
		if got := m.stored("q", p); len(got) != 0 {
			t.Fatalf("%s still stores %v", p, got)
		}
		m.checkPartitionRecord("q", p)
	}
}

// Only the completed rule on, and no group anywhere: nothing is ever
// deleted, however old, and SweepTargets still lists the queue.
func TestSweepCompletedOnlyNoGroupsDeletesNothing(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.CompletedRetentionSeconds = true, 1 })
	for i := range 5 {
		m.push(items("q", fmt.Sprintf("p%d", i), "m")...)
	}
	m.advance(30 * 24 * time.Hour)
	if r := m.sweep("q", 100); r.Segments != ([numRules]uint64{}) || r.More {
		t.Fatalf("sweep %+v", r)
	}
	targets, err := m.f.SweepTargets()
	if err != nil || !slices.Equal(targets, []string{"q"}) {
		t.Fatalf("targets %v %v", targets, err)
	}
}

// Lowering retentionSeconds over a large backlog deletes it in bounded
// steps: each sweep deletes at most MaxSegments whole segments, says More
// while condemned segments remain, deletes only a prefix of each partition,
// never touches a segment younger than the cutoff, and pushes interleave.
// Re-applying a step (a retry, or an old and a new leader proposing the
// same sweep) never deletes beyond the rules; once a sweep reports the
// queue clean, applying it again deletes nothing.
func TestSweepLoweredRetentionLargeBacklogInBoundedSteps(t *testing.T) {
	run := func(t *testing.T, duplicate bool) []string {
		m := newMachine(t)
		configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.RetentionSeconds = true, 3600 })
		parts := []string{"a", "b", "c"}
		const n = 240
		for i := range n { // one segment per second, round robin over three partitions
			m.push(items("q", parts[i%3], fmt.Sprintf("m%03d", i))...)
			m.advance(time.Second)
		}
		// now = start + 240 s: every segment is younger than an hour.
		if r := m.sweep("q", 1000); r.Segments != ([numRules]uint64{}) || r.More {
			t.Fatalf("sweep under the old retention %+v", r)
		}
		// Lower to 100 s: m000..m139 (created at 0..139 s) are older than
		// now-100 s = 140 s; m140 is exactly at the cutoff and survives.
		configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.RetentionSeconds = true, 100 })
		const condemned = 140
		const budget = 25
		var total uint64
		steps := 0
		for {
			r := m.sweep("q", budget)
			segs, msgs := swept(r)
			if segs > budget || segs != msgs || r.Segments[RuleRetention] != segs {
				t.Fatalf("step %d %+v over a budget of %d", steps, r, budget)
			}
			total += segs
			steps++
			if duplicate {
				// The same command again, at the same time.
				again := m.sweep("q", budget)
				s2, _ := swept(again)
				total += s2
				if !r.More && s2 != 0 {
					t.Fatalf("repeating a sweep that reported the queue clean deleted %d more", s2)
				}
				r = again
			}
			// A push interleaves: young, it survives every later step.
			m.push(items("q", "live", fmt.Sprintf("live%d", steps))...)
			for _, p := range parts {
				m.checkPartitionRecord("q", p)
			}
			if !r.More {
				break
			}
			if steps > 100 {
				t.Fatal("the sweep never finishes")
			}
		}
		if total != condemned {
			t.Fatalf("deleted %d segments, want %d", total, condemned)
		}
		if !duplicate && steps < condemned/budget {
			t.Fatalf("%d steps for %d segments with a budget of %d", steps, condemned, budget)
		}
		// What survives is exactly the suffix at or after the cutoff.
		var left []string
		for _, p := range parts {
			got := m.stored("q", p)
			for _, tx := range got {
				var i int
				fmt.Sscanf(tx, "m%03d", &i)
				if i < condemned {
					t.Fatalf("%s/%s survived the cutoff", p, tx)
				}
			}
			left = append(left, got...)
		}
		slices.Sort(left)
		if len(left) != n-condemned || left[0] != "m140" {
			t.Fatalf("survivors %d from %v", len(left), left[:min(3, len(left))])
		}
		if len(m.stored("q", "live")) != steps {
			t.Fatalf("interleaved pushes lost: %v", m.stored("q", "live"))
		}
		// Clean: the same sweep again, at the same time, deletes nothing.
		for range 3 {
			if r := m.sweep("q", budget); r.Segments != ([numRules]uint64{}) || r.More {
				t.Fatalf("sweep of a clean queue %+v", r)
			}
		}
		return left
	}
	leftOnce := run(t, false)
	leftTwice := run(t, true)
	if !slices.Equal(leftOnce, leftTwice) {
		t.Fatalf("duplicated sweeps left %d backlog messages, single sweeps %d", len(leftTwice), len(leftOnce))
	}
}

// A sweep re-proposed by a new leader can carry an older stamp than one
// already applied; the entry time never runs backwards, so it deletes
// nothing more and nothing less than the rules at the applied time.
func TestSweepStaleStampDeletesNothingMore(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.RetentionSeconds = true, 10 })
	m.push(items("q", "p", "a")...)
	m.advance(5 * time.Second)
	m.push(items("q", "p", "b")...)
	m.advance(6 * time.Second) // a: 11 s, b: 6 s
	r := m.sweep("q", 100)
	if r.Segments[RuleRetention] != 1 {
		t.Fatalf("sweep %+v", r)
	}
	m.advance(-3 * time.Second) // an old leader's entry, stamped earlier
	if r := m.sweep("q", 100); r.Segments != ([numRules]uint64{}) {
		t.Fatalf("stale sweep %+v", r)
	}
	if got := m.stored("q", "p"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("stored %v", got)
	}
}

// maxWaitTimeSeconds deletes inside a live lease: the deleted message's ack
// is unresolvable, the surviving message of the same batch still acks
// under the lease (and ends it), nothing is dead-lettered and the retry
// counter is untouched.
func TestSweepMaxWaitInsideLeaseSurvivorAcks(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.MaxWaitTimeSeconds, o.RetryLimit = 30, 0 })
	m.push(items("q", "p", "old")...)
	m.advance(20 * time.Second)
	m.push(items("q", "p", "young")...)
	r := m.mustPop(Lease{Queue: "q", Group: "G", Batch: 10, LeaseSeconds: 3600})
	if got := txids(r); !slices.Equal(got, []string{"old", "young"}) {
		t.Fatalf("leased %v", got)
	}
	m.advance(11 * time.Second) // old: 31 s, young: 11 s
	if sr := m.sweep("q", 100); sr.Segments[RuleMaxWait] != 1 || sr.Messages[RuleMaxWait] != 1 {
		t.Fatalf("sweep %+v", sr)
	}
	lp := r.Partitions[0]
	ar := m.ack("G", ackOf(lp, lp.Messages[0], r.LeaseID, AckFailed))
	if ar.Items[0].Error != ErrUnresolvable || ar.Items[0].DLQ {
		t.Fatalf("failed ack of the deleted message %+v", ar.Items[0])
	}
	if g := m.group("q", "p", "G"); g.Retry != 0 || !g.LeaseLive(m.now.UnixMicro()) {
		t.Fatalf("group after an unresolvable ack %+v", g)
	}
	ar = m.ack("G", ackOf(lp, lp.Messages[1], r.LeaseID, AckCompleted))
	if !ar.Items[0].Success || !ar.Items[0].LeaseReleased {
		t.Fatalf("ack of the surviving message %+v", ar.Items[0])
	}
	if len(m.deadLetters("q")) != 0 {
		t.Fatal("maxWait dead-lettered")
	}
	m.push(items("q", "p", "next")...)
	if got := txids(m.pop(Lease{Queue: "q", Group: "G", Batch: 10})); !slices.Equal(got, []string{"next"}) {
		t.Fatalf("after the batch %v", got)
	}
}

// A consumer whose lease covered only deleted messages resumes at the next
// existing offset at once (the sweep ends a batch it deleted entirely),
// without a retry charge.
func TestSweepMaxWaitLeaseExpiryResumesAtNextOffset(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.MaxWaitTimeSeconds = 30 })
	m.push(items("q", "p", "a1", "a2")...)
	m.advance(time.Second)
	m.push(items("q", "p", "a3")...)
	r := m.mustPop(Lease{Queue: "q", Group: "G", Batch: 3, LeaseSeconds: 60})
	if r.Count() != 3 {
		t.Fatalf("leased %v", txids(r))
	}
	m.advance(20 * time.Second)
	m.push(items("q", "p", "b1")...)
	m.advance(15 * time.Second) // a*: 35 s and 34 s, b1: 15 s
	if sr := m.sweep("q", 100); sr.Segments[RuleMaxWait] != 2 || sr.Messages[RuleMaxWait] != 3 {
		t.Fatalf("sweep %+v", sr)
	}
	got := m.mustPop(Lease{Queue: "q", Group: "G", Batch: 10})
	if !slices.Equal(txids(got), []string{"b1"}) || got.Partitions[0].Messages[0].RetryCount != 0 {
		t.Fatalf("resumed with %v (%+v)", txids(got), got.Partitions[0].Messages)
	}
	if len(m.deadLetters("q")) != 0 {
		t.Fatal("dead-lettered")
	}
}

// retentionSeconds is inert without retentionEnabled, but maxWaitTimeSeconds
// on the same queue still sweeps at its own cutoff.
func TestSweepMaxWaitWithRetentionDisabled(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) {
		o.RetentionEnabled, o.RetentionSeconds, o.CompletedRetentionSeconds, o.MaxWaitTimeSeconds = false, 10, 10, 100
	})
	m.push(items("q", "p", "a")...)
	m.ack("G", ackTx(m.partition("q", "p").UUID, "a", [16]byte{}, AckCompleted))
	m.advance(50 * time.Second)
	m.push(items("q", "p", "b")...)
	if r := m.sweep("q", 100); r.Segments != ([numRules]uint64{}) {
		t.Fatalf("disabled retention rules swept %+v", r)
	}
	m.advance(51 * time.Second) // a: 101 s, b: 51 s
	r := m.sweep("q", 100)
	if r.Segments[RuleMaxWait] != 1 || r.Segments[RuleRetention] != 0 || r.Segments[RuleCompleted] != 0 {
		t.Fatalf("sweep %+v", r)
	}
	if got := m.stored("q", "p"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("stored %v", got)
	}
}

// No sweep rule ever deletes a dead letter, not even when every segment of
// its partition is gone.
func TestSweepNeverDeletesDeadLetters(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) {
		o.RetentionEnabled, o.RetentionSeconds, o.CompletedRetentionSeconds, o.MaxWaitTimeSeconds = true, 60, 30, 90
		o.RetryLimit = 0
	})
	m.push(items("q", "p", "f1", "f2")...)
	m.push(items("q", "x", "x1")...)
	r := m.mustPop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "p", Batch: 1})
	m.ack("", ackAll(r, AckFailed)...) // retry budget 0: dead-lettered
	r = m.mustPop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "p", Batch: 1})
	m.ack("", ackAll(r, AckDLQ)...)
	r = m.mustPop(Lease{Scope: ScopeSpecific, Queue: "q", Partition: "x", Batch: 1})
	m.ack("", ackAll(r, AckDLQ)...)
	before := m.deadLetters("q")
	if len(before) != 3 {
		t.Fatalf("setup: %d dead letters", len(before))
	}
	for _, step := range []time.Duration{31 * time.Second, 30 * time.Second, 30 * time.Second, 24 * time.Hour} {
		m.advance(step)
		m.sweep("q", 100)
	}
	if got := m.stored("q", "p"); len(got) != 0 {
		t.Fatalf("stored %v", got)
	}
	after := m.deadLetters("q")
	if len(after) != len(before) {
		t.Fatalf("dead letters %d -> %d", len(before), len(after))
	}
	for i := range after {
		if after[i].TxID != before[i].TxID || string(after[i].Payload) != string(before[i].Payload) {
			t.Fatalf("dead letter %d changed: %+v -> %+v", i, before[i], after[i])
		}
	}
	v, err := m.f.QueueView("q", m.now.UnixMicro(), false)
	if err != nil || v.Stats.DeadLetter != 3 || v.Stats.Total != 0 {
		t.Fatalf("queue view %+v %v", v, err)
	}
	dl, total, err := m.f.DeadLetters(DLQQuery{Queue: "q", Limit: 10})
	if err != nil || total != 3 || len(dl) != 3 {
		t.Fatalf("DeadLetters %d %d %v", total, len(dl), err)
	}
}

// A transaction id reused after the dedup window has two stored
// occurrences. Sweeping the old one must leave the index pointing at the
// new one: a retry inside the new one's window is still a duplicate, and
// acks still resolve to it.
func TestSweepOfOldOccurrenceKeepsNewestTxIDIndex(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) {
		o.DedupWindowSeconds, o.RetentionEnabled, o.RetentionSeconds = 60, true, 100
	})
	first := m.push(item("q", "p", "t", `1`))
	m.advance(61 * time.Second)
	second := m.push(item("q", "p", "t", `2`))
	if second.Items[0].Status != PushQueued || second.Items[0].MessageID == first.Items[0].MessageID {
		t.Fatalf("after the window %+v", second.Items[0])
	}
	m.advance(40 * time.Second) // first: 101 s, second: 40 s
	if r := m.sweep("q", 100); r.Segments[RuleRetention] != 1 {
		t.Fatalf("sweep %+v", r)
	}
	retry := m.push(item("q", "p", "t", `3`))
	if retry.Items[0].Status != PushDuplicate || retry.Items[0].MessageID != second.Items[0].MessageID {
		t.Fatalf("retry inside the surviving occurrence's window %+v, want duplicate of %x", retry.Items[0], second.Items[0].MessageID)
	}
	ar := m.ack("G", ackTx(second.Items[0].PartitionID, "t", [16]byte{}, AckCompleted))
	if !ar.Items[0].Success {
		t.Fatalf("ack of the surviving occurrence %+v", ar.Items[0])
	}
	if g := m.group("q", "p", "G"); g.Next != 3 { // offsets start at 1: the survivor is offset 2
		t.Fatalf("position %d, want 3", g.Next)
	}
}

// Past dedupWindowSeconds a repeated transaction id is a new message, and
// acks still resolve for the old stored message while it exists: the
// window bounds duplicate detection, not ack resolution.
func TestDedupWindowNewMessageOldStillAcks(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DedupWindowSeconds = 10 })
	m.push(items("q", "p", "x", "y")...)
	m.advance(11 * time.Second)
	pr := m.push(items("q", "p", "x")...)
	if pr.Items[0].Status != PushQueued {
		t.Fatalf("after the window %+v", pr.Items[0])
	}
	m.advance(24 * time.Hour)
	// y was pushed a day ago, far outside the window: its ack resolves.
	r := m.mustPop(Lease{Queue: "q", Group: "G", Batch: 2})
	if got := txids(r); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("leased %v", got)
	}
	ar := m.ack("G", ackAll(r, AckCompleted)...)
	if !ar.Items[0].Success || !ar.Items[1].Success || !ar.Items[1].LeaseReleased {
		t.Fatalf("acks %+v", ar.Items)
	}
	if got := txids(m.pop(Lease{Queue: "q", Group: "G", Batch: 10})); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("the second occurrence %v", got)
	}
	if p := m.partition("q", "p"); p.Messages != 3 {
		t.Fatalf("%d stored", p.Messages)
	}
}

// Named groups whose cursors point inside a deleted range resume at the
// next stored offset; a group without state starts there too; queue stats
// stay consistent (no counter runs past the stored total).
func TestSweepGroupCursorsInsideDeletedRange(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.RetentionSeconds = true, 60 })
	for i := range 6 {
		m.push(items("q", "p", fmt.Sprintf("o%d", i))...)
	}
	m.advance(30 * time.Second)
	m.push(items("q", "p", "n1", "n2")...)
	pid := m.partition("q", "p").UUID
	m.ack("slow", ackTx(pid, "o1", [16]byte{}, AckCompleted))   // cursor inside the range
	m.ack("leased", ackTx(pid, "o3", [16]byte{}, AckCompleted)) // and a lease inside it
	lr := m.mustPop(Lease{Queue: "q", Group: "leased", Batch: 1, LeaseSeconds: 5})
	m.advance(31 * time.Second) // o*: 61 s, n*: 31 s
	if r := m.sweep("q", 100); r.Segments[RuleRetention] != 6 {
		t.Fatalf("sweep %+v", r)
	}
	v, err := m.f.QueueView("q", m.now.UnixMicro(), true)
	if err != nil {
		t.Fatal(err)
	}
	if st := v.Stats; st.Total != 2 || st.Completed != 0 || st.Pending+st.Processing+st.Completed != st.Total {
		t.Fatalf("stats after the sweep %+v", st)
	}
	for _, g := range []string{"slow", "leased", "fresh"} {
		got := txids(m.pop(Lease{Queue: "q", Group: g, Batch: 10}))
		if !slices.Equal(got, []string{"n1", "n2"}) {
			t.Fatalf("group %s resumed with %v", g, got)
		}
	}
	// The expired lease's ack of a deleted message is unresolvable.
	if ar := m.ack("leased", ackAll(lr, AckCompleted)...); ar.Items[0].Error != ErrUnresolvable {
		t.Fatalf("ack %+v", ar.Items[0])
	}
	m.checkPartitionRecord("q", "p")
}

// A partition emptied by a sweep keeps its offsets: the next push continues
// after the deleted range and every consumer receives it.
func TestSweepEmptiedPartitionContinuesOffsets(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.RetentionEnabled, o.RetentionSeconds = true, 1 })
	m.push(items("q", "p", "a", "b", "c")...)
	pid := m.partition("q", "p").UUID
	m.ack("G", ackTx(pid, "a", [16]byte{}, AckCompleted))
	m.advance(2 * time.Second)
	if r := m.sweep("q", 100); r.Messages[RuleRetention] != 3 {
		t.Fatalf("sweep %+v", r)
	}
	p := m.partition("q", "p")
	if p.Messages != 0 || p.FirstOffset != p.NextOffset {
		t.Fatalf("emptied partition %+v", p)
	}
	m.push(items("q", "p", "d")...)
	for _, g := range []string{"G", "H", QueueMode} {
		if got := txids(m.pop(Lease{Queue: "q", Group: g, Batch: 10})); !slices.Equal(got, []string{"d"}) {
			t.Fatalf("group %q got %v", g, got)
		}
	}
	m.checkPartitionRecord("q", "p")
}

// checkPop evaluates a pop on the local state at the machine's clock.
func (m *machine) checkPop(l Lease) PopCheck {
	m.t.Helper()
	if l.Scope == 0 {
		l.Scope = ScopeWildcard
	}
	if l.Group == "" {
		l.Group = QueueMode
	}
	if l.WindowBatch == 0 && !l.SQLWindow {
		l.WindowBatch = 100
	}
	pc, err := m.f.CheckPop(&l, m.now.UnixMicro(), true)
	if err != nil {
		m.t.Fatal(err)
	}
	return pc
}

// A parked long-poll sleeps until PopCheck.WakeAt: it must be exactly the
// moment the delayed head becomes visible (createdAt + delayedProcessing),
// the earliest over the partitions in scope, and at that moment the check
// and the pop agree that it is deliverable.
func TestCheckPopWakeAtDelayedHead(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DelayedProcessing = 10 })
	m.push(items("q", "b", "b1")...)
	bAt := m.now
	m.advance(2 * time.Second)
	m.push(items("q", "a", "a1")...)
	m.advance(time.Second)
	pc := m.checkPop(Lease{Queue: "q", Batch: 10})
	if pc.Deliverable != 0 || pc.WakeAt != bAt.Add(10*time.Second).UnixMicro() {
		t.Fatalf("check %+v, want WakeAt %d", pc, bAt.Add(10*time.Second).UnixMicro())
	}
	m.now = time.UnixMicro(pc.WakeAt).UTC().Add(-time.Microsecond)
	if pc := m.checkPop(Lease{Queue: "q", Batch: 10}); pc.Deliverable != 0 {
		t.Fatalf("deliverable 1 µs early: %+v", pc)
	}
	m.advance(time.Microsecond)
	if pc := m.checkPop(Lease{Queue: "q", Batch: 10}); pc.Deliverable != 1 {
		t.Fatalf("at WakeAt %+v", pc)
	}
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10, MaxPartitions: 5})); !slices.Equal(got, []string{"b1"}) {
		t.Fatalf("pop at WakeAt %v", got)
	}
	// Next: a1's own delay.
	if pc := m.checkPop(Lease{Queue: "q", Batch: 10}); pc.Deliverable != 0 || pc.WakeAt != bAt.Add(12*time.Second).UnixMicro() {
		t.Fatalf("check after b1 %+v", pc)
	}
}

// windowBuffer: a held burst wakes at first mark + window (hot-list rule),
// or at the last write + window (SQL rule, which moves with every push);
// the hot-list rule is deliverable at once once WindowBatch messages
// accumulated.
func TestCheckPopWakeAtWindow(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.WindowBuffer = 2 })
	mark := m.now
	m.push(items("q", "p", "m1")...)
	m.advance(500 * time.Millisecond)
	m.push(items("q", "p", "m2")...)
	last := m.now
	pc := m.checkPop(Lease{Queue: "q", Batch: 10})
	if pc.Deliverable != 0 || pc.WakeAt != mark.Add(2*time.Second).UnixMicro() {
		t.Fatalf("hot-list check %+v, want WakeAt mark+2s", pc)
	}
	pc = m.checkPop(Lease{Queue: "q", Batch: 10, SQLWindow: true})
	if pc.Deliverable != 0 || pc.WakeAt != last.Add(2*time.Second).UnixMicro() {
		t.Fatalf("SQL check %+v, want WakeAt last+2s", pc)
	}
	m.now = mark.Add(2 * time.Second)
	if pc := m.checkPop(Lease{Queue: "q", Batch: 10}); pc.Deliverable == 0 {
		t.Fatalf("hot-list at WakeAt %+v", pc)
	}
	if pc := m.checkPop(Lease{Queue: "q", Batch: 10, SQLWindow: true}); pc.Deliverable != 0 {
		t.Fatalf("SQL rule released before last write + window %+v", pc)
	}
	// Early promotion: WindowBatch messages make the burst deliverable now.
	m2 := newMachine(t)
	configureWith(m2, "q", func(o *segments.Options) { o.WindowBuffer = 60 })
	m2.push(items("q", "p", seq("m", 99)...)...)
	if pc := m2.checkPop(Lease{Queue: "q", Batch: 500}); pc.Deliverable != 0 || pc.WakeAt == 0 {
		t.Fatalf("99 messages %+v", pc)
	}
	m2.push(items("q", "p", "m100")...)
	if pc := m2.checkPop(Lease{Queue: "q", Batch: 500}); pc.Deliverable == 0 {
		t.Fatalf("100 messages %+v", pc)
	}
	if r := m2.pop(Lease{Queue: "q", Batch: 500}); r.Count() != 100 {
		t.Fatalf("pop %d", r.Count())
	}
}

// A delayed message inside a released window still waits for its delay;
// a live lease wakes at its expiry; minPopWaitTime is reported as the
// largest of the queues in scope.
func TestCheckPopWakeAtLeaseAndMinPopWait(t *testing.T) {
	m := newMachine(t)
	oa, ob := DefaultOptions(segments.OriginConfigure), DefaultOptions(segments.OriginConfigure)
	oa.MinPopWaitTime = 300
	ob.MinPopWaitTime, ob.DelayedProcessing, ob.WindowBuffer = 700, 5, 1
	m.configure(Configure{Queue: "ns.a", Namespace: "ns", Options: oa})
	m.configure(Configure{Queue: "ns.b", Namespace: "ns", Options: ob})
	m.push(items("ns.a", "p", "a1", "a2")...)
	m.mustPop(Lease{Queue: "ns.a", Batch: 1, LeaseSeconds: 30})
	pc := m.checkPop(Lease{Queue: "ns.a", Batch: 10})
	if pc.Deliverable != 0 || pc.WakeAt != m.now.Add(30*time.Second).UnixMicro() || pc.MinPopWait != 300 {
		t.Fatalf("leased check %+v", pc)
	}
	pushed := m.now
	m.push(items("ns.b", "p", "b1")...)
	m.advance(time.Second) // the window has passed, the delay has not
	pc = m.checkPop(Lease{Scope: ScopeDiscovery, Namespace: "ns", Batch: 10})
	if pc.Deliverable != 0 || pc.WakeAt != pushed.Add(5*time.Second).UnixMicro() || pc.MinPopWait != 700 {
		t.Fatalf("discovery check %+v", pc)
	}
}

// CheckPop counts deliverable messages only when the fill-wait decision
// needs the number (count requested and minPopWaitTime set); otherwise it
// stops at the first one.
func TestCheckPopCountsOnlyForFillWait(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.MinPopWaitTime = 300 })
	m.push(items("q", "p", seq("m", 5)...)...)
	l := &Lease{Scope: ScopeWildcard, Queue: "q", Group: QueueMode, Batch: 10, WindowBatch: 100}
	for _, tc := range []struct {
		count bool
		want  uint32
	}{{true, 5}, {false, 1}} {
		pc, err := m.f.CheckPop(l, m.now.UnixMicro(), tc.count)
		if err != nil || pc.Deliverable != tc.want || pc.MinPopWait != 300 {
			t.Fatalf("count=%v: %+v %v, want %d", tc.count, pc, err, tc.want)
		}
	}
	configureWith(m, "q", func(o *segments.Options) {})
	if pc, _ := m.f.CheckPop(l, m.now.UnixMicro(), true); pc.Deliverable != 1 {
		t.Fatalf("without minPopWaitTime: %+v", pc)
	}
}

// Durations in seconds are any non-negative integer a Queen client sends.
// Converted to microseconds they saturate (Micros) instead of wrapping
// negative, which turned "keep for a very long time" into "delete now",
// "lease for ever" into an expired lease, and a long delay or dedup window
// into none.
func TestHugeDurationsSaturate(t *testing.T) {
	const huge = 10_000_000_000_000 // 1e13 s: times 1e6 overflows int64
	if got := Micros(huge); got != maxDurationMicros {
		t.Fatalf("Micros(%d) = %d", int64(huge), got)
	}
	if got := Micros(1<<62 + 1); got != maxDurationMicros {
		t.Fatalf("Micros(2^62+1) = %d", got)
	}
	if got, want := Micros(maxDurationMicros/1e6-1), int64(maxDurationMicros-1e6); got != want {
		t.Fatalf("Micros just under the cap = %d, want %d", got, want)
	}
	if Micros(0) != 0 || Micros(-5) != 0 || Micros(3) != 3e6 {
		t.Fatal("Micros of small values")
	}

	t.Run("retention keeps", func(t *testing.T) {
		m := newMachine(t)
		configureWith(m, "q", func(o *segments.Options) {
			o.MaxWaitTimeSeconds = huge
			o.RetentionEnabled, o.RetentionSeconds, o.CompletedRetentionSeconds = true, huge, huge
		})
		m.push(items("q", "p", "a")...)
		m.ack("G", ackTx(m.partition("q", "p").UUID, "a", [16]byte{}, AckCompleted))
		m.advance(24 * time.Hour)
		if r := m.sweep("q", 100); r.Segments != ([numRules]uint64{}) {
			t.Fatalf("swept %+v", r)
		}
		if got := m.stored("q", "p"); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("stored %v", got)
		}
	})
	t.Run("lease holds", func(t *testing.T) {
		m := newMachine(t)
		m.push(items("q", "p", "a")...)
		if r := m.pop(Lease{Queue: "q", Batch: 1, LeaseSeconds: huge}); r.Count() != 1 {
			t.Fatalf("first pop %+v", r)
		}
		g := m.group("q", "p", QueueMode)
		if g.LeaseExpiry != m.now.UnixMicro()+maxDurationMicros {
			t.Fatalf("lease expiry %d", g.LeaseExpiry)
		}
		m.advance(24 * time.Hour)
		if r := m.pop(Lease{Queue: "q", Batch: 1}); r.Count() != 0 {
			t.Fatalf("a leased message was delivered again: %+v", r)
		}
		if r := m.extend(g.LeaseID, huge); !r.Success || r.ExpiresAt != m.now.UnixMicro()+maxDurationMicros {
			t.Fatalf("extend %+v", r)
		}
	})
	t.Run("delay holds", func(t *testing.T) {
		m := newMachine(t)
		configureWith(m, "q", func(o *segments.Options) { o.DelayedProcessing = huge })
		m.push(items("q", "p", "a")...)
		m.advance(24 * time.Hour)
		if r := m.pop(Lease{Queue: "q", Batch: 1}); r.Count() != 0 {
			t.Fatalf("a delayed message was delivered: %+v", r)
		}
	})
	t.Run("dedup window holds", func(t *testing.T) {
		m := newMachine(t)
		configureWith(m, "q", func(o *segments.Options) { o.DedupWindowSeconds = huge })
		m.push(items("q", "p", "a")...)
		m.advance(24 * time.Hour)
		if r := m.push(items("q", "p", "a")...); r.Items[0].Status != PushDuplicate {
			t.Fatalf("second push %+v", r.Items[0])
		}
	})
}
