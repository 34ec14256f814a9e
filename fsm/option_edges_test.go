package fsm

import (
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// A group whose unconsumed messages before the current windowBuffer burst
// were all deleted has nothing deliverable until the burst's window ends: a
// long-poll parked on the partition must be told to look again then
// (queen-api.md 4.9, "a delay or window releasing messages"), not only on
// the next push.
func TestCheckPopWakesAtWindowEndBehindDeletedMessages(t *testing.T) {
	m := newMachine(t)
	configureWith(m, "q", func(o *segments.Options) { o.WindowBuffer = 2 })
	m.push(items("q", "p", "m0")...)
	m.advance(3 * time.Second)
	r := m.mustPop(Lease{Queue: "q", Batch: 10})
	m.ack("", ackAll(r, AckCompleted)...) // m0 stays stored, consumed
	m.push(items("q", "p", "m1")...)
	m.advance(3 * time.Second) // m1's burst ended
	mark := m.now
	m.push(items("q", "p", "m2")...) // a new burst, held until mark+2s
	pid := m.partition("q", "p").UUID
	if r := m.deleteMessage(pid, "m1"); !r.Found {
		t.Fatal("m1 not deleted")
	}
	m.advance(500 * time.Millisecond)
	pc := m.checkPop(Lease{Queue: "q", Batch: 10})
	if pc.Deliverable != 0 || pc.WakeAt != mark.Add(2*time.Second).UnixMicro() {
		t.Fatalf("check %+v, want nothing deliverable and WakeAt at the burst's end %d",
			pc, mark.Add(2*time.Second).UnixMicro())
	}
	m.now = mark.Add(2 * time.Second)
	if got := txids(m.pop(Lease{Queue: "q", Batch: 10})); len(got) != 1 || got[0] != "m2" {
		t.Fatalf("pop at the burst's end delivered %v, want [m2]", got)
	}
}
