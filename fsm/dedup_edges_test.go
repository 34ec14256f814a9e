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
