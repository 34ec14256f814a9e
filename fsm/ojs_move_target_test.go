package fsm

import (
	"strings"
	"testing"

	"github.com/crownmq/crown/segments"
)

// TestOJSMoveFinishesIntoATargetDeletedMeanwhile: a move's target deleted
// while the move waits for its active jobs is recreated when the last of
// them comes back (ojs-queues.md 6.5: "A retry, requeue or expiry puts them
// in the target", which "is created implicitly if it does not exist"), in
// the step that deletes the source, so the queue count never passes a
// limit it was within: nothing of the source is lost, and the limit holds.
func TestOJSMoveFinishesIntoATargetDeletedMeanwhile(t *testing.T) {
	m := newMachine(t)
	m.push(items("src", "", "a", "b")...)
	pr := m.pop(wild("src", 1)) // "a" is active
	if r := m.ojsOK(&OJSDeleteQueue{Name: "src", Strategy: segments.DeleteMove, Target: "dst"}); !r.Pending || r.Affected != 1 {
		t.Fatalf("move with an active job: %+v", r)
	}
	if got := m.stored("dst", ""); strings.Join(got, ",") != "b" {
		t.Fatalf("dst holds %v after the move started, want b", got)
	}
	if r := m.ojsOK(&OJSDeleteQueue{Name: "dst", Strategy: segments.DeletePurge}); !r.Deleted {
		t.Fatalf("purge-delete of the target: %+v", r)
	}
	var count uint64
	m.view(func(tx *segments.Tx) error { count = tx.QueueCount(); return nil })
	limit := uint32(count) // every queue the limit allows exists
	m.ojsErr(&OJSCreateQueue{Name: "other", MaxQueues: limit}, 422, "queue_limit_reached")

	m.ack(QueueMode, ackAll(pr, AckFailed)...) // "a" is retryable again: it goes to the target
	if m.queue("src") != nil {
		t.Fatal("the deletion did not finish when its last active job came back")
	}
	if got := m.stored("dst", ""); strings.Join(got, ",") != "a" {
		t.Fatalf("the recreated target holds %v, want a", got)
	}
	var after uint64
	m.view(func(tx *segments.Tx) error { after = tx.QueueCount(); return nil })
	if after > uint64(limit) {
		t.Fatalf("%d queues after the move finished, over the limit of %d", after, limit)
	}
}
