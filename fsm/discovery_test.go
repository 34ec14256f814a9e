package fsm

import (
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/segments"
)

// discovery is a one-message auto-acknowledged discovery pop: the queue it
// is served from stays ready as long as it holds messages.
func discovery(group, namespace, task string) Lease {
	return Lease{Scope: ScopeDiscovery, Namespace: namespace, Task: task, Group: group,
		Batch: 1, MaxPartitions: 1, AutoAck: true}
}

// servedQueues lists the queue of every partition a pop claimed, in order.
func servedQueues(r *LeaseResult) []string {
	var out []string
	for _, p := range r.Partitions {
		out = append(out, p.Queue)
	}
	return out
}

// popQueues runs n pops and lists the queues each was served from ("" for a
// pop that delivered nothing).
func (m *machine) popQueues(l Lease, n int) []string {
	m.t.Helper()
	var out []string
	for range n {
		q := servedQueues(m.pop(l))
		if len(q) == 0 {
			q = []string{""}
		}
		out = append(out, q...)
	}
	return out
}

// discoveryPointers lists a group's discovery pointers as
// "namespace/task -> from".
func (m *machine) discoveryPointers(group string) []string {
	m.t.Helper()
	var out []string
	m.view(func(tx *segments.Tx) error {
		return tx.ForEachDiscoveryFrom(group, func(ns, task, from string) (bool, error) {
			out = append(out, ns+"/"+task+" -> "+from)
			return true, nil
		})
	})
	return out
}

func TestDiscoveryPopDoesNotStarveAQuietQueue(t *testing.T) {
	m := newMachine(t)
	m.push(items("ns.busy", "p", seq("b", 20)...)...)
	m.push(items("ns.quiet", "p", "q1", "q2")...)
	got := m.popQueues(discovery("G", "ns", ""), 6)
	// Alternating while both hold messages; once the quiet queue is drained
	// the busy one serves every pop.
	want := []string{"ns.busy", "ns.quiet", "ns.busy", "ns.quiet", "ns.busy", "ns.busy"}
	if !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
	// A message arriving at the quiet queue is served by the next pop.
	m.push(items("ns.quiet", "p", "q3")...)
	if got := m.popQueues(discovery("G", "ns", ""), 1); got[0] != "ns.quiet" {
		t.Fatalf("served %v after a push to the quiet queue", got)
	}
}

func TestDiscoveryPopRotatesOverEveryQueueAndWraps(t *testing.T) {
	m := newMachine(t)
	for _, q := range []string{"n.a", "n.b", "n.c"} {
		m.push(items(q, "p", seq(q, 10)...)...)
	}
	got := m.popQueues(discovery("G", "n", ""), 5)
	if want := []string{"n.a", "n.b", "n.c", "n.a", "n.b"}; !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
	// A pop claiming several queues moves the pointer past the last one it
	// claimed, in the order it walked them: n.c's 9 messages, then one of
	// n.a's.
	l := discovery("G", "n", "")
	l.MaxPartitions = 2
	l.Batch = 10
	if got := servedQueues(m.pop(l)); !slices.Equal(got, []string{"n.c", "n.a"}) {
		t.Fatalf("two-queue pop served %v", got)
	}
	if got := m.popQueues(discovery("G", "n", ""), 1); got[0] != "n.b" {
		t.Fatalf("after a two-queue pop served %v, want n.b", got)
	}
}

func TestDiscoveryPopSkipsEmptyQueuesAndKeepsItsPlace(t *testing.T) {
	m := newMachine(t)
	m.push(items("n.a", "p", seq("a", 5)...)...)
	m.push(items("n.c", "p", seq("c", 5)...)...)
	m.configure(Configure{Queue: "n.b", Namespace: "n", Options: DefaultOptions(segments.OriginConfigure)})
	if got := m.popQueues(discovery("G", "n", ""), 4); !slices.Equal(got, []string{"n.a", "n.c", "n.a", "n.c"}) {
		t.Fatalf("served %v", got)
	}
	// Once every queue is drained, a pop that delivers nothing leaves the
	// pointer where it was.
	m.popQueues(discovery("G", "n", ""), 6)
	before := m.discoveryPointers("G")
	if len(before) != 1 {
		t.Fatalf("pointers %q", before)
	}
	if r := m.pop(discovery("G", "n", "")); r.Count() != 0 {
		t.Fatalf("drained scope delivered %v", delivered(r))
	}
	if got := m.discoveryPointers("G"); !slices.Equal(got, before) {
		t.Fatalf("an empty pop moved the pointer: %q, was %q", got, before)
	}
}

func TestDiscoveryPointersAreIndependentPerGroup(t *testing.T) {
	m := newMachine(t)
	m.push(items("n.a", "p", seq("a", 10)...)...)
	m.push(items("n.b", "p", seq("b", 10)...)...)
	if got := m.popQueues(discovery("G1", "n", ""), 1); got[0] != "n.a" {
		t.Fatalf("G1 served %v", got)
	}
	// G2 has its own pointer: it starts at the first queue, not after G1's.
	if got := m.popQueues(discovery("G2", "n", ""), 1); got[0] != "n.a" {
		t.Fatalf("G2 served %v", got)
	}
	// Queue mode is a group like any other.
	if got := m.popQueues(discovery(QueueMode, "n", ""), 2); !slices.Equal(got, []string{"n.a", "n.b"}) {
		t.Fatalf("queue mode served %v", got)
	}
	if got := m.popQueues(discovery("G1", "n", ""), 1); got[0] != "n.b" {
		t.Fatalf("G1 served %v after the other groups' pops", got)
	}
}

func TestDiscoveryPointersAreIndependentPerScope(t *testing.T) {
	m := newMachine(t)
	// Namespace n covers n.a, n.b; task b covers n.b and m.b.
	for _, q := range []string{"m.b", "n.a", "n.b"} {
		m.push(items(q, "p", seq(q, 10)...)...)
	}
	if got := m.popQueues(discovery("G", "n", ""), 1); got[0] != "n.a" {
		t.Fatalf("namespace n served %v", got)
	}
	// Task b walks its own scope from its start: m.b, then n.b.
	if got := m.popQueues(discovery("G", "", "b"), 2); !slices.Equal(got, []string{"m.b", "n.b"}) {
		t.Fatalf("task b served %v", got)
	}
	// Namespace n with task b is a third scope, of one queue.
	if got := m.popQueues(discovery("G", "n", "b"), 2); !slices.Equal(got, []string{"n.b", "n.b"}) {
		t.Fatalf("n/b served %v", got)
	}
	// Namespace n continues after n.a, whatever the other scopes served.
	if got := m.popQueues(discovery("G", "n", ""), 1); got[0] != "n.b" {
		t.Fatalf("namespace n served %v", got)
	}
	if got, want := m.discoveryPointers("G"), []string{
		"/b -> n.b\x00", "n/ -> n.b\x00", "n/b -> n.b\x00",
	}; !slices.Equal(got, want) {
		t.Fatalf("pointers %q, want %q", got, want)
	}
}

func TestDiscoveryPointerSurvivesItsQueueDeletion(t *testing.T) {
	m := newMachine(t)
	for _, q := range []string{"n.a", "n.b", "n.c"} {
		m.push(items(q, "p", seq(q, 10)...)...)
	}
	m.popQueues(discovery("G", "n", ""), 2) // n.a, n.b
	m.deleteQueue("n.b")
	// The pointer names the deleted queue: the walk starts at the next name.
	if got := m.popQueues(discovery("G", "n", ""), 2); !slices.Equal(got, []string{"n.c", "n.a"}) {
		t.Fatalf("served %v after the pointer's queue was deleted", got)
	}
}

func TestDeleteGroupRemovesItsDiscoveryPointers(t *testing.T) {
	m := newMachine(t)
	m.push(items("n.a", "p", seq("a", 10)...)...)
	m.push(items("n.b", "p", seq("b", 10)...)...)
	for _, g := range []string{"G", "GG", "H"} {
		m.pop(discovery(g, "n", ""))
		m.pop(discovery(g, "", "b"))
	}
	// Deleting the group on one queue keeps them: they cover every queue of
	// their scope.
	m.apply(&DeleteGroup{Group: "G", OneQueue: true, Queue: "n.a", DeleteMetadata: true})
	if got := m.discoveryPointers("G"); len(got) != 2 {
		t.Fatalf("pointers after deleting the group on one queue: %q", got)
	}
	// Deleting the group removes them all, whether or not its metadata goes.
	m.apply(&DeleteGroup{Group: "G", DeleteMetadata: false})
	if got := m.discoveryPointers("G"); len(got) != 0 {
		t.Fatalf("pointers left after the group's deletion: %q", got)
	}
	// Other groups keep theirs, a group whose name extends it included.
	for _, g := range []string{"GG", "H"} {
		if got := m.discoveryPointers(g); len(got) != 2 {
			t.Fatalf("group %s pointers after G's deletion: %q", g, got)
		}
	}
	// A deleted group starts from the first queue again.
	if got := m.popQueues(discovery("G", "n", ""), 1); got[0] != "n.a" {
		t.Fatalf("recreated group served %v", got)
	}
}

// The pop check counts the batch a pop would take, so it walks the queues
// in the same rotated order: with one partition per pop, it counts the
// queue the pointer names, not the first by name.
func TestCheckPopCountsTheQueueTheRotationServes(t *testing.T) {
	m := newMachine(t)
	o := DefaultOptions(segments.OriginConfigure)
	o.MinPopWaitTime = 1000
	m.configure(Configure{Queue: "n.a", Namespace: "n", Options: o})
	m.configure(Configure{Queue: "n.b", Namespace: "n", Options: o})
	m.push(items("n.a", "p", seq("a", 3)...)...)
	m.push(items("n.b", "p", seq("b", 10)...)...)
	m.pop(discovery("G", "n", "")) // n.a, 2 left
	l := Lease{Scope: ScopeDiscovery, Namespace: "n", Group: "G", Batch: 10, MaxPartitions: 1}
	if pc := m.checkPop(l); pc.Deliverable != 10 {
		t.Fatalf("check counted %d, the pop takes n.b's 10", pc.Deliverable)
	}
	if r := m.pop(l); r.Count() != 10 || r.Partitions[0].Queue != "n.b" {
		t.Fatalf("pop %v", delivered(r))
	}
}

// max_concurrency closes a queue to a pop without serving it: the pointer
// moves past the queue that was served, and the closed queue's turn comes
// again once it has room.
func TestDiscoveryRotationSkipsAQueueAtMaxConcurrency(t *testing.T) {
	m := newMachine(t)
	m.ojsOK(&OJSCreateQueue{Name: "n.a", Config: QueueConfig{MaxConcurrency: i64(1)}})
	for _, p := range []string{"p1", "p2"} {
		m.push(items("n.a", p, seq("a"+p, 5)...)...)
		m.push(items("n.b", p, seq("b"+p, 5)...)...)
	}
	l := Lease{Scope: ScopeDiscovery, Namespace: "n", Group: QueueMode, Batch: 1, MaxPartitions: 1}
	first := m.pop(l) // n.a/p1, n.a now at max_concurrency
	if got := servedQueues(first); !slices.Equal(got, []string{"n.a"}) {
		t.Fatalf("first pop %v", got)
	}
	// n.b twice (n.a is full, so its turn passes to n.b).
	if got := m.popQueues(l, 2); !slices.Equal(got, []string{"n.b", "n.b"}) {
		t.Fatalf("served %v while n.a is at max_concurrency", got)
	}
	m.ack(QueueMode, ackAll(first, AckCompleted)...)
	if got := m.popQueues(l, 1); got[0] != "n.a" {
		t.Fatalf("served %v once n.a has room", got)
	}
}

// The determinism log's discovery pops (namespace orders covers orders.eu
// and orders.us) leave round-robin pointers, and a replay of the log
// rebuilds the same ones: the determinism tests' digests cover them.
func TestDeterminismLogReplaysDiscoveryPointers(t *testing.T) {
	rec := record(t, 7, 800)
	replica := newMachine(t)
	for _, l := range rec.logs {
		replica.f.ApplyBatch([]*raft.Log{l})
	}
	total := 0
	for _, g := range genGroups {
		want, got := rec.ref.discoveryPointers(g), replica.discoveryPointers(g)
		if !slices.Equal(got, want) {
			t.Fatalf("group %s: replayed pointers %q, recorded %q", g, got, want)
		}
		total += len(want)
	}
	if total < 5 {
		t.Fatalf("the log left %d discovery pointers: it hardly exercises the rotation", total)
	}
	if a, b := rec.ref.digest(), replica.digest(); a != b {
		t.Fatal("replayed digest differs")
	}
}
