package fsm

import (
	"testing"

	"github.com/crownmq/crown/segments"
)

// custom returns options that differ from the defaults in every key.
func custom() segments.Options {
	return segments.Options{
		LeaseTime: 120, RetryLimit: 7, DeadLetterQueue: false, DLQAfterMaxRetries: false,
		DelayedProcessing: 5, WindowBuffer: 3, RetentionEnabled: true, RetentionSeconds: 100,
		CompletedRetentionSeconds: 50, MaxWaitTimeSeconds: 900, MinPopWaitTime: 250,
		EncryptionEnabled: true, DedupWindowSeconds: 30, Priority: 4, MaxSize: 1000,
		RetryDelay: 10, TTL: 20,
	}
}

func TestDefaultOptions(t *testing.T) {
	c := DefaultOptions(segments.OriginConfigure)
	want := segments.Options{LeaseTime: 300, RetryLimit: 3, DeadLetterQueue: true, DLQAfterMaxRetries: true,
		DedupWindowSeconds: 3600, RetryDelay: 1000, TTL: 3600}
	if c != want {
		t.Fatalf("configure defaults %+v, want %+v", c, want)
	}
	p := DefaultOptions(segments.OriginPush)
	want.LeaseTime = 60
	if p != want {
		t.Fatalf("push defaults %+v, want %+v", p, want)
	}
}

func TestConfigureCreatesQueue(t *testing.T) {
	m := newMachine(t)
	r := m.configure(Configure{Queue: "orders", Namespace: "ns", Task: "tk", Options: custom()})
	q := m.queue("orders")
	if q == nil || q.ID != r.Queue.ID || q.UUID != r.Queue.UUID || q.UUID == ([16]byte{}) {
		t.Fatalf("stored %+v, result %+v", q, r.Queue)
	}
	if q.Namespace != "ns" || q.Task != "tk" || q.Options != custom() || q.Origin != segments.OriginConfigure {
		t.Fatalf("stored %+v", q)
	}
	if r.Queue.Options != custom() || r.Queue.Namespace != "ns" || r.Queue.Name != "orders" {
		t.Fatalf("result %+v", r.Queue)
	}
	if q.CreatedAt != m.now.UnixMicro() {
		t.Fatalf("createdAt %d", q.CreatedAt)
	}
}

func TestConfigureIsFullReplace(t *testing.T) {
	m := newMachine(t)
	m.configure(Configure{Queue: "orders.shipped", Namespace: "ns", Task: "tk", Options: custom()})
	// The second call sends only retentionEnabled: everything else is back
	// at its default, and the tags are cleared.
	o := DefaultOptions(segments.OriginConfigure)
	o.RetentionEnabled = true
	r := m.configure(Configure{Queue: "orders.shipped", Options: o})
	q := m.queue("orders.shipped")
	if q.Options != o || r.Queue.Options != o {
		t.Fatalf("options %+v, want %+v", q.Options, o)
	}
	if q.Options.DedupWindowSeconds != 3600 || q.Options.LeaseTime != 300 {
		t.Fatalf("omitted keys not reset: %+v", q.Options)
	}
	if q.Namespace != "" || q.Task != "" {
		t.Fatalf("tags not replaced: %q/%q", q.Namespace, q.Task)
	}
}

func TestConfigureKeepsQueueIdentityAndData(t *testing.T) {
	m := newMachine(t)
	m.push(item("q", "p", "a", `1`), item("q", "p", "b", `2`))
	lr := m.pop(Lease{Queue: "q", Batch: 1})
	before := m.queue("q")
	r := m.configure(Configure{Queue: "q", Options: custom()})
	after := m.queue("q")
	if after.ID != before.ID || after.UUID != before.UUID || after.CreatedAt != before.CreatedAt || r.Queue.ID != before.ID {
		t.Fatalf("identity changed: %+v -> %+v", before, after)
	}
	if after.Origin != segments.OriginPush {
		t.Fatalf("origin changed to %d", after.Origin)
	}
	if p := m.partition("q", "p"); p == nil || p.Messages != 2 || p.UUID != lr.Partitions[0].PartitionID {
		t.Fatalf("partition %+v", p)
	}
	g := m.group("q", "p", QueueMode)
	if g == nil || g.LeaseID != lr.LeaseID {
		t.Fatalf("consumer state lost: %+v", g)
	}
	ar := m.ack("", ackOf(lr.Partitions[0], lr.Partitions[0].Messages[0], lr.LeaseID, AckCompleted))
	if !ar.Items[0].Success || !ar.Items[0].LeaseReleased {
		t.Fatalf("ack after reconfigure %+v", ar.Items[0])
	}
}

func TestConfigureTagsReplaced(t *testing.T) {
	m := newMachine(t)
	m.push(item("orders.shipped", "p", "a", `1`))
	m.configure(Configure{Queue: "orders.shipped", Namespace: "billing", Task: "late", Options: DefaultOptions(segments.OriginConfigure)})
	q := m.queue("orders.shipped")
	if q.Namespace != "billing" || q.Task != "late" {
		t.Fatalf("tags %q/%q", q.Namespace, q.Task)
	}
	// Discovery follows the new tags at once.
	if r := m.pop(Lease{Scope: ScopeDiscovery, Namespace: "orders", Batch: 10}); r.Count() != 0 {
		t.Fatalf("old namespace still matches: %v", delivered(r))
	}
	if r := m.pop(Lease{Scope: ScopeDiscovery, Namespace: "billing", Task: "late", Batch: 10}); r.Count() != 1 {
		t.Fatalf("new namespace does not match: %v", delivered(r))
	}
}

func TestConfigureClampsMinPopWaitTime(t *testing.T) {
	cases := []struct{ in, want int64 }{{-5, 0}, {0, 0}, {1, 1}, {60000, 60000}, {60001, 60000}, {1 << 40, 60000}}
	for _, c := range cases {
		m := newMachine(t)
		o := DefaultOptions(segments.OriginConfigure)
		o.MinPopWaitTime = c.in
		r := m.configure(Configure{Queue: "q", Options: o})
		if got := m.queue("q").Options.MinPopWaitTime; got != c.want || r.Queue.Options.MinPopWaitTime != c.want {
			t.Errorf("minPopWaitTime %d stored as %d (result %d), want %d", c.in, got, r.Queue.Options.MinPopWaitTime, c.want)
		}
	}
	o := custom()
	ClampOptions(&o)
	if o != custom() {
		t.Fatalf("ClampOptions changed in-range options: %+v", o)
	}
}

func TestConfigureNeverCreatesPartition(t *testing.T) {
	m := newMachine(t)
	m.configure(Configure{Queue: "q", Options: DefaultOptions(segments.OriginConfigure)})
	m.configure(Configure{Queue: "q", Options: custom()})
	if parts := m.partitions("q"); len(parts) != 0 {
		t.Fatalf("configure created partitions %q", parts)
	}
	if r := m.pop(Lease{Queue: "q", Batch: 10}); r.Count() != 0 || r.LeaseID != ([16]byte{}) {
		t.Fatalf("pop of an empty configured queue %+v", r)
	}
}

func TestConfiguredQueueKeepsOptionsOnPush(t *testing.T) {
	m := newMachine(t)
	m.configure(Configure{Queue: "q", Options: DefaultOptions(segments.OriginConfigure)})
	m.push(item("q", "p", "a", `1`))
	q := m.queue("q")
	if q.Options.LeaseTime != 300 || q.Origin != segments.OriginConfigure {
		t.Fatalf("push changed a configured queue: %+v", q)
	}
	lr := m.pop(Lease{Queue: "q", Batch: 1})
	if g := m.group("q", "p", QueueMode); g.LeaseExpiry != m.now.Add(300e9).UnixMicro() || lr.Count() != 1 {
		t.Fatalf("lease expiry %d", g.LeaseExpiry)
	}
}

func TestDeriveTags(t *testing.T) {
	cases := []struct{ name, ns, task string }{
		{"orders.shipped.eu", "orders", "shipped"},
		{"orders", "orders", ""},
		{"", "", ""},
		{"a.b", "a", "b"},
		{"a.", "a", ""},
		{"a.b.c.d", "a", "b"},
		{"é.ü.x", "é", "ü"},
	}
	for _, c := range cases {
		ns, task := DeriveTags(c.name)
		if ns != c.ns || task != c.task {
			t.Errorf("DeriveTags(%q) = %q, %q, want %q, %q", c.name, ns, task, c.ns, c.task)
		}
	}
}
