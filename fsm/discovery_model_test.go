package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/segments"
)

// recordedMachine applies entries one at a time and keeps them, so that a
// replay can rebuild the same state.
type recordedMachine struct {
	*machine
	logs []*raft.Log
}

func (d *recordedMachine) applyRecorded(cmds ...Command) []any {
	d.t.Helper()
	l := d.entry(cmds...)
	d.logs = append(d.logs, l)
	er, ok := d.f.ApplyBatch([]*raft.Log{l})[0].(*EntryResult)
	if !ok {
		d.t.Fatalf("entry %d has no entry result", l.Index)
	}
	return er.Results
}

// scopeQueues lists, in name order, the queues a discovery pop with this
// namespace and task covers.
func (m *machine) scopeQueues(ns, task string) []string {
	m.t.Helper()
	var out []string
	m.view(func(tx *segments.Tx) error {
		return tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
			if (ns == "" || q.Namespace == ns) && (task == "" || q.Task == task) {
				out = append(out, q.Name)
			}
			return true, nil
		})
	})
	return out
}

func (m *machine) discoveryFrom(group, ns, task string) string {
	m.t.Helper()
	var from string
	m.view(func(tx *segments.Tx) error { from = tx.DiscoveryFrom(group, ns, task); return nil })
	return from
}

// The round robin against a model, over random interleavings of pushes,
// discovery pops (plain and by principal), acks, lease expiry, configures
// that move queues between namespaces and tasks, queue and group deletions,
// pauses, access lists, max_concurrency and pop maintenance, with queue
// names that sort around each other and around the pointers ("n", "n.a",
// "n.a.x", "n.b", "n.b\x00", "n.bb"). For every pop it guards that:
//   - the queues served follow the name order rotated to start at the first
//     name at or after the pointer, and no queue passed over before the last
//     one served had anything deliverable to the group and principal;
//   - the pointer then follows the last queue served, and stays where it was
//     when nothing was served;
//   - the pop check, counting for a fill wait, counts what the pop takes.
//
// A replay of the log in one transaction and in batches, on a node that
// answers none of the pops, ends in the same digest.
func TestDiscoveryRoundRobinAgainstAModel(t *testing.T) {
	for seed := uint64(1); seed <= 16; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { discoveryModelRun(t, seed) })
	}
}

func discoveryModelRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed*7+1))
	m := &recordedMachine{machine: newMachine(t)}
	names := []string{"n", "n.a", "n.a.x", "n.b", "n.bb", "m.b", "n.c", "n.b\x00", "o"}
	parts := []string{"p", "q", ""}
	groups := []string{"G", QueueMode, "H"}
	principals := []string{"", "alice", "bob"}
	scopes := [][2]string{{"n", ""}, {"", "b"}, {"n", "b"}, {"m", ""}, {"", "a"}}
	opts := DefaultOptions(segments.OriginConfigure)
	opts.MinPopWaitTime = 1000 // the check then counts up to the batch
	ojs := seed%2 == 0
	for i, q := range names {
		if ojs && i%3 == 1 {
			cfg := QueueConfig{MaxConcurrency: i64(2)}
			if i%2 == 0 {
				cfg = QueueConfig{Consumers: &[]string{"alice"}}
			}
			m.applyRecorded(&OJSCreateQueue{Name: q, Config: cfg})
		}
		ns, task := DeriveTags(q)
		m.applyRecorded(&Configure{Queue: q, Namespace: ns, Task: task, Options: opts})
	}
	type heldLease struct {
		group string
		r     *LeaseResult
	}
	var leases []heldLease
	tx := 0
	for step := range 400 {
		switch k := rng.IntN(22); {
		case k < 6:
			q := names[rng.IntN(len(names))]
			var its []PushItem
			for range 1 + rng.IntN(3) {
				tx++
				its = append(its, item(q, parts[rng.IntN(len(parts))], fmt.Sprint("t", tx), "{}"))
			}
			m.applyRecorded(&Push{Items: its})
		case k < 15:
			g := groups[rng.IntN(len(groups))]
			sc := scopes[rng.IntN(len(scopes))]
			principal := principals[rng.IntN(len(principals))]
			l := Lease{Scope: ScopeDiscovery, Namespace: sc[0], Task: sc[1], Group: g,
				Batch: uint32(1 + rng.IntN(6)), MaxPartitions: uint32(1 + rng.IntN(4)), AutoAck: rng.IntN(2) == 0,
				WindowBatch: 100, LeaseSeconds: 30}
			from := m.discoveryFrom(g, sc[0], sc[1])
			order := m.scopeQueues(sc[0], sc[1])
			if i := slices.IndexFunc(order, func(s string) bool { return s >= from }); i > 0 {
				order = append(order[i:], order[:i]...)
			}
			ready := map[string]bool{}
			for _, q := range order {
				one := Lease{Scope: ScopeWildcard, Queue: q, Group: g, Batch: 1, WindowBatch: 100}
				c, err := m.f.CheckPopAs(&one, principal, m.now.UnixMicro(), false)
				if err != nil {
					t.Fatal(err)
				}
				ready[q] = c.Deliverable > 0
			}
			pc, err := m.f.CheckPopAs(&l, principal, m.now.UnixMicro(), true)
			if err != nil {
				t.Fatal(err)
			}
			var r *LeaseResult
			if principal == "" {
				r = m.applyRecorded(&l)[0].(*LeaseResult)
			} else {
				r = m.applyRecorded(&LeaseAs{Lease: l, Principal: principal})[0].(*LeaseResult)
			}
			checkTagIndex(t, m.f)
			served := servedQueues(r)
			if (pc.MinPopWait > 0 && pc.Deliverable != uint32(r.Count())) || (pc.Deliverable > 0) != (r.Count() > 0) {
				t.Fatalf("step %d: the check counted %d, the pop took %d from %q (order %q)",
					step, pc.Deliverable, r.Count(), served, order)
			}
			prev := -1
			for _, q := range served {
				i := slices.Index(order, q)
				if i < prev {
					t.Fatalf("step %d: served %q against the order %q", step, served, order)
				}
				for _, skipped := range order[prev+1 : max(i, prev+1)] {
					if ready[skipped] {
						t.Fatalf("step %d: %q was ready and passed over: order %q, served %q", step, skipped, order, served)
					}
				}
				prev = i
			}
			after := m.discoveryFrom(g, sc[0], sc[1])
			want := from
			if len(served) > 0 {
				want = served[len(served)-1] + "\x00"
			}
			if after != want {
				t.Fatalf("step %d: pointer %q after serving %q from %q, want %q", step, after, served, from, want)
			}
			if !l.AutoAck && r.Count() > 0 {
				leases = append(leases, heldLease{g, r})
			}
		case k < 16 && len(leases) > 0:
			i := rng.IntN(len(leases))
			m.applyRecorded(&Ack{Group: leases[i].group, Items: ackAll(leases[i].r, AckCompleted)})
			leases = slices.Delete(leases, i, i+1)
		case k < 17:
			q := names[rng.IntN(len(names))]
			ns := []string{"n", "m", "o", ""}[rng.IntN(4)]
			task := []string{"a", "b", ""}[rng.IntN(3)]
			m.applyRecorded(&Configure{Queue: q, Namespace: ns, Task: task, Options: opts})
		case k < 18:
			m.applyRecorded(&DeleteQueue{Queue: names[rng.IntN(len(names))]})
		case k < 19:
			g := groups[rng.IntN(len(groups))]
			if rng.IntN(2) == 0 {
				m.applyRecorded(&DeleteGroup{Group: g, OneQueue: true, Queue: names[rng.IntN(len(names))]})
			} else {
				m.applyRecorded(&DeleteGroup{Group: g})
			}
		case k < 20 && ojs:
			m.applyRecorded(&OJSSetState{Name: names[rng.IntN(len(names))], Pause: rng.IntN(2) == 0})
		case k < 21:
			m.applyRecorded(&SetPopMaintenance{Enabled: rng.IntN(3) == 0})
		default:
			m.advance(time.Duration(rng.IntN(40)) * time.Second)
		}
	}
	for _, size := range []int{len(m.logs), 7} {
		r := newMachine(t)
		r.node = "other"
		for i := 0; i < len(m.logs); i += size {
			r.f.ApplyBatch(m.logs[i:min(i+size, len(m.logs))])
		}
		if m.digest() != r.digest() {
			t.Fatalf("a replay in batches of %d entries ends in another digest", size)
		}
		checkTagIndex(t, r.f)
	}
	// A node restored from a snapshot has the index too, and its next
	// discovery pops claim what the others' do.
	r := newMachine(t)
	if err := r.f.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, m.f)))); err != nil {
		t.Fatal(err)
	}
	checkTagIndex(t, r.f)
	r.now, r.index = m.now, m.index
	for _, sc := range scopes {
		l := Lease{Scope: ScopeDiscovery, Namespace: sc[0], Task: sc[1], Group: "G", Batch: 3, MaxPartitions: 2, WindowBatch: 100}
		if a, b := m.pop(l), r.pop(l); !reflect.DeepEqual(a, b) {
			t.Fatalf("scope %q: the restored node claimed %+v, the other %+v", sc, b, a)
		}
		m.index, r.index = max(m.index, r.index), max(m.index, r.index)
	}
}

// Two discovery pops of one scope in one entry take turns: the second reads
// the pointer the first wrote in the same transaction, and a group deletion
// between them in the entry starts the group over.
func TestDiscoveryPopsOfOneScopeInOneEntryTakeTurns(t *testing.T) {
	m := newMachine(t)
	for _, q := range []string{"n.a", "n.b", "n.c"} {
		m.push(items(q, "p", seq(q, 3)...)...)
	}
	l := discovery("G", "n", "")
	l.WindowBatch = 100
	var got []string
	for _, r := range m.apply(&l, &l, &DeleteGroup{Group: "G"}, &l) {
		if lr, ok := r.(*LeaseResult); ok {
			got = append(got, servedQueues(lr)...)
		}
	}
	if want := []string{"n.a", "n.b", "n.a"}; !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
}

// max_concurrency lets a pop take at most room more partitions from a queue
// (popGated), after which it goes on to the next queue. The pop check,
// counting for a fill wait, must stop counting that queue there too, or it
// counts partitions the pop leaves.
func TestCheckPopCountsNoMoreThanMaxConcurrencyLetsThePopTake(t *testing.T) {
	m := newMachine(t)
	m.ojsOK(&OJSCreateQueue{Name: "n.a", Config: QueueConfig{MaxConcurrency: i64(1)}})
	o := DefaultOptions(segments.OriginConfigure)
	o.MinPopWaitTime = 1000
	m.configure(Configure{Queue: "n.a", Namespace: "n", Options: o})
	m.configure(Configure{Queue: "n.b", Namespace: "n", Options: o})
	// With autoAck no lease is held, so each pop finds room for one.
	m.push(items("n.a", "p1", "a1")...)
	m.push(items("n.a", "p2", "a2")...)
	m.push(items("n.b", "p", seq("b", 5)...)...)
	for _, l := range []Lease{
		{Scope: ScopeDiscovery, Namespace: "n", Group: "G", Batch: 10, MaxPartitions: 3, AutoAck: true},
		{Scope: ScopeWildcard, Queue: "n.a", Group: "H", Batch: 10, MaxPartitions: 3, AutoAck: true},
	} {
		pc := m.checkPop(l)
		r := m.pop(l)
		if r.Count() != int(pc.Deliverable) {
			t.Fatalf("scope %d: the check counted %d, the pop took %d from %v", l.Scope, pc.Deliverable, r.Count(), servedQueues(r))
		}
	}
}
