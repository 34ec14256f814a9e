package fsm

import "testing"

// docs/queues.md, layer 4: an OJS PATCH that removes (null) a shared option
// a /configure named replaces the configured value, so the layers below
// show through. The configured value lives in the queue's base; it used to
// stay there, so the removed value stayed in force. Here the queue is a
// plain Queen queue (no policies, so no base copy yet) and the value that
// shows through is what a /configure that did not name the lease stores.
func TestOJSUnsetNamedLeaseLeavesBase(t *testing.T) {
	m := newMachine(t)
	opts := DefaultOptions(0)
	opts.LeaseTime, opts.RetentionEnabled, opts.CompletedRetentionSeconds, opts.RetentionSeconds = 100, true, 3600, 7200
	m.apply(&ConfigureSet{Configure: Configure{Queue: "q", Options: opts}, Present: PresentLease | PresentRetention})
	m.ojsOK(&OJSUpdateQueue{Name: "q", Unset: FieldVisibilityTimeout | FieldCompletedTTL})
	q := m.queue("q")
	o := q.Options
	if o.LeaseTime != ConfigureLeaseSeconds || q.Named != 0 {
		t.Errorf("lease %d named %b after the configured lease was removed; want %d and 0", o.LeaseTime, q.Named, ConfigureLeaseSeconds)
	}
	// Completed retention goes; the pending retention the same /configure
	// set (retentionSeconds, which shares retentionEnabled) stays.
	if o.CompletedRetentionSeconds != 0 || !o.RetentionEnabled || o.RetentionSeconds != 7200 {
		t.Errorf("retention on %v, completed %d s, pending %d s; want on, 0, 7200", o.RetentionEnabled,
			o.CompletedRetentionSeconds, o.RetentionSeconds)
	}
}
