package fsm

import (
	"fmt"
	"testing"

	"github.com/crownmq/crown/segments"
)

// BenchmarkApplyDiscoveryPop: the apply of one discovery pop (autoAck, 10
// messages) over 50,000 queues of which 5 carry the namespace (and task)
// asked for, spread through the name order. Every node applies it. The
// build before the tag index decoded every queue record to find the 5
// (segments/tagindex.go); the walk now reads the index from the group's
// pointer and stops when the pop is done.
func BenchmarkApplyDiscoveryPop(b *testing.B) {
	const queues, hot = 50000, 5
	m := newMachine(b)
	opts := DefaultOptions(segments.OriginConfigure)
	hotName := func(i int) string { return fmt.Sprintf("q%05d", i*(queues/hot)+queues/(2*hot)) }
	isHot := map[string]bool{}
	for i := range hot {
		isHot[hotName(i)] = true
	}
	for i := 0; i < queues; i += 500 {
		cmds := make([]Command, 0, 500)
		for j := i; j < i+500; j++ {
			c := &Configure{Queue: fmt.Sprintf("q%05d", j), Namespace: fmt.Sprintf("ns%d", j%50), Task: "x", Options: opts}
			if isHot[c.Queue] {
				c.Namespace, c.Task = "hot", "t"
			}
			cmds = append(cmds, c)
		}
		m.apply(cmds...)
	}
	round := 0
	fill := func() {
		for i := range hot {
			m.push(benchItems(hotName(i), 1, 100, fmt.Sprintf("r%d-", round))...)
		}
		round++
	}
	fill()
	for _, sc := range []struct{ name, ns, task string }{{"namespace+task", "hot", "t"}, {"namespace", "hot", ""}} {
		b.Run(sc.name, func(b *testing.B) {
			l := Lease{Scope: ScopeDiscovery, Namespace: sc.ns, Task: sc.task, Group: QueueMode,
				Batch: 10, AutoAck: true, WindowBatch: 100}
			b.ReportAllocs()
			for b.Loop() {
				r := m.pop(l)
				if r.Count() == 0 {
					b.StopTimer()
					fill()
					b.StartTimer()
				}
			}
		})
	}
}

// A page of the queue listing (GET /api/v1/resources/queues) over 10,000
// queues of one namespace, each with a partition: the views built for the
// page alone against every queue's view, which the listing built before it
// paged.
func BenchmarkListQueuesPage(b *testing.B) {
	m := newMachine(b)
	const queues = 10000
	opts := DefaultOptions(segments.OriginConfigure)
	for i := 0; i < queues; i += 500 {
		cmds := make([]Command, 0, 1000)
		for j := i; j < i+500; j++ {
			name := fmt.Sprintf("q%05d", j)
			cmds = append(cmds, &Configure{Queue: name, Namespace: "n", Options: opts},
				&Push{Items: benchItems(name, 1, 1, "t")})
		}
		m.apply(cmds...)
	}
	now := m.now.UnixMicro()
	for _, c := range []struct {
		name          string
		offset, limit int
	}{{"page-of-50", 5000, 50}, {"every-view", 0, -1}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := m.f.ListQueues("n", "", c.offset, c.limit, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
