package fsm

import (
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// maintenance/DESIGN.md: the dedup window "is therefore exact to the
// microsecond", and fsm/DESIGN.md: a deletion inside the window leaves the
// id a duplicate for the rest of it. A push is a duplicate while pushedAt >=
// now - window, so the last instant of the window, pushedAt + window, is
// inside it. The memory of deleted ids used the other convention: a deletion
// at that instant remembered nothing, and a ForgetDeletedTxIDs at that
// instant forgot the id, so a push then was stored again where the same push
// of a message still stored (or swept a microsecond later) was a duplicate.
func TestDedupWindowLastInstantOutlivesDeletion(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DedupWindowSeconds, o.MaxWaitTimeSeconds = 60, 30 })
	m.push(items("q", "kept", "a")...)
	m.push(items("q", "swept", "a")...)
	m.advance(60 * time.Second) // now = pushedAt + window: still inside the window
	if st := m.push(items("q", "kept", "a")...).Items[0].Status; st != PushDuplicate {
		t.Fatalf("stored id at the window's last instant: status %d", st)
	}
	if segs, _ := swept(m.sweep("q", 10)); segs != 2 {
		t.Fatalf("swept %d segments", segs)
	}
	if st := m.push(items("q", "swept", "a")...).Items[0].Status; st != PushDuplicate {
		t.Fatalf("id swept at the window's last instant: status %d, want duplicate", st)
	}
	// One microsecond later the window has closed for both.
	m.advance(time.Microsecond)
	m.apply(&ForgetDeletedTxIDs{Max: 10})
	if due, _ := m.f.DeletedTxIDsDue(m.now.UnixMicro() + 1e12); due {
		t.Fatal("memory left after the window closed")
	}
	pr := m.push(append(items("q", "kept", "a"), items("q", "swept", "a")...)...)
	if pr.Items[0].Status != PushQueued || pr.Items[1].Status != PushQueued {
		t.Fatalf("after the window %+v", pr.Items)
	}
}

// The same instant reached by a forget: an id deleted inside its window and
// forgotten at the window's last instant must still be a duplicate then.
func TestDedupForgetAtLastInstantKeepsDuplicate(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DedupWindowSeconds = 60 })
	m.push(items("q", "p", "a")...)
	pid := m.partition("q", "p").UUID
	m.advance(10 * time.Second)
	m.deleteMessage(pid, "a")
	m.advance(50 * time.Second) // the window's last instant
	m.apply(&ForgetDeletedTxIDs{Max: 10})
	if st := m.push(items("q", "p", "a")...).Items[0].Status; st != PushDuplicate {
		t.Fatalf("status %d at the window's last instant, want duplicate", st)
	}
}

// After a failover to a leader whose clock is behind the time earlier
// leaders stamped, entries apply at the state's time (fsm/DESIGN.md,
// Determinism). The leader's dedup timer asks DeletedTxIDsDue with its own
// clock; it must answer for the time a forget stamped now would apply at,
// or the new leader leaves closed windows remembered until its clock
// catches up.
func TestDeletedTxIDsDueAtTheStatesTime(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.DedupWindowSeconds = 60 })
	m.push(items("q", "p", "d")...)
	m.deleteMessage(m.partition("q", "p").UUID, "d")
	lagging := m.now.UnixMicro()
	m.advance(61 * time.Second)
	m.push(items("other", "p", "c")...) // the state's time moves on
	if due, err := m.f.DeletedTxIDsDue(lagging); err != nil || !due {
		t.Fatalf("DeletedTxIDsDue at a lagging clock: %v %v", due, err)
	}
	if r := m.apply(&ForgetDeletedTxIDs{Max: 10})[0].(*ForgetDeletedTxIDsResult); r.Forgot != 1 {
		t.Fatalf("forget %+v", r)
	}
}

// A deleted queue's remembered deletions went only when their window
// closed: queue numbers are never reused, so no push could consult them
// again, yet with a long dedup window they stayed in the state file and in
// every snapshot for that long, however many times the queue was deleted
// and made again.
func TestDeleteQueueForgetsItsDeletedTxIDs(t *testing.T) {
	m := newMachine(t)
	const year = 365 * 24 * 3600
	for _, q := range []string{"gone", "kept"} {
		configureWith(m, q, func(o *segments.Options) { o.DedupWindowSeconds, o.MaxWaitTimeSeconds = 10*year, 30 })
		m.push(append(items(q, "p1", "a", "b"), items(q, "p2", "c")...)...)
	}
	m.advance(31 * time.Second)
	for _, q := range []string{"gone", "kept"} {
		if segs, _ := swept(m.sweep(q, 10)); segs != 2 {
			t.Fatalf("%s: swept %d segments", q, segs)
		}
	}
	m.apply(&DeleteQueue{Queue: "gone"})
	forgot := 0
	for {
		m.advance(11 * year * time.Second)
		r := m.apply(&ForgetDeletedTxIDs{Max: 1})[0].(*ForgetDeletedTxIDsResult)
		forgot += int(r.Forgot)
		if !r.More {
			break
		}
	}
	if forgot != 3 {
		t.Fatalf("the memory held %d ids once the windows closed, want the 3 of the queue that still exists", forgot)
	}
	m2 := newMachine(t)
	configureWith(m2, "gone", func(o *segments.Options) { o.DedupWindowSeconds, o.MaxWaitTimeSeconds = 10*year, 30 })
	m2.push(items("gone", "p1", "a")...)
	m2.advance(31 * time.Second)
	m2.sweep("gone", 10)
	m2.apply(&DeleteQueue{Queue: "gone"})
	if due, err := m2.f.DeletedTxIDsDue(1 << 62); err != nil || due {
		t.Fatalf("a deleted queue's ids are still remembered (%v)", err)
	}
	// A queue made again under the name is a new queue: the id is new to it.
	if st := m2.push(items("gone", "p1", "a")...).Items[0].Status; st != PushQueued {
		t.Fatalf("push to the queue made again: status %d", st)
	}
}
