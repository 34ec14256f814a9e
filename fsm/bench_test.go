package fsm

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Benchmarks of the hot paths, reported per message so they compare with
// the load generator's messages/s. Workload: 256-byte payloads, pushes of
// 100 messages, pops and acks of 100.

func benchItems(queue string, partitions, n int, txPrefix string) []PushItem {
	payload := []byte(`{"p":1,"pad":"` + string(make([]byte, 0)) + fmt.Sprintf("%0230d", 0) + `"}`)
	items := make([]PushItem, n)
	for i := range items {
		items[i] = PushItem{Queue: queue, Partition: "p" + strconv.Itoa(i%partitions),
			TxID: txPrefix + strconv.Itoa(i), Payload: payload}
	}
	return items
}

func BenchmarkEncodePush100(b *testing.B) {
	e := &Entry{Stamp: 1, Origin: "n1", Commands: []Command{&Push{Items: benchItems("q", 1, 100, "t")}}}
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf, _ = AppendEntry(buf[:0], e)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/msg")
}

func BenchmarkDecodePush100(b *testing.B) {
	e := &Entry{Stamp: 1, Origin: "n1", Commands: []Command{&Push{Items: benchItems("q", 1, 100, "t")}}}
	data, _ := AppendEntry(nil, e)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeEntry(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/msg")
}

// BenchmarkAck100 encodes and decodes an acknowledgment of one popped batch
// of 100 (one partition, one lease) in each log format; bytes/entry is what
// every node writes and fsyncs for it.
func BenchmarkAck100(b *testing.B) {
	ack := Ack{Group: "bench-g0"}
	for i := range 100 {
		ack.Items = append(ack.Items, AckItem{TxID: "r1-3-" + strconv.Itoa(100000+i), PartitionID: [16]byte{1, 2},
			PartitionOK: true, LeaseID: [16]byte{3, 4}, HasLease: true, Status: AckCompleted})
	}
	for _, c := range []struct {
		name string
		cmd  Command
	}{{"format=ack", &ack}, {"format=packed", &AckPacked{ack}}} {
		e := &Entry{Stamp: 1, Origin: "n1", Commands: []Command{c.cmd}}
		data, err := AppendEntry(nil, e)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("encode/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				buf, _ = AppendEntry(buf[:0], e)
			}
			b.ReportMetric(float64(len(data)), "bytes/entry")
		})
		b.Run("decode/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeEntry(data); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(data)), "bytes/entry")
		})
	}
}

// benchApply applies pre-encoded entries in batches of batchEntries.
func benchApply(b *testing.B, m *machine, logs []*raft.Log, batchEntries int) {
	for i := 0; i < len(logs); i += batchEntries {
		m.f.ApplyBatch(logs[i:min(i+batchEntries, len(logs))])
	}
}

// BenchmarkApplyPush: entries of push commands (group commit) of 100
// messages each. Over 8 partitions every push command makes 8 segments of
// 12-13 messages; over 10,000 every message lands in a partition of its
// own, so it is a segment of its own and rewrites its partition's record
// (the many-partitions case of the README). The shapes over 10,000:
//   - tx=3200 and tx=400: 4 entries of 8 pushes, and 1 of 4, in one bbolt
//     transaction, the pushes covering neighbouring partitions one after
//     the other;
//   - side-by-side: 8 pushes an entry sweeping the same partitions shifted
//     by one, as the load generator's producers do when they start (each its
//     own round robin, one partition apart), so a record is written once
//     for up to 8 messages (segments/partcache.go);
//   - drifted: 5 pushes an entry over partitions far apart, as on a
//     cluster once the producers have drifted apart: about 550 messages an
//     entry, an entry a transaction (docs/performance.md lesson 46);
//   - drifted/deferred: the same entries with the state file's transaction
//     kept open for 11 of them (Config.CommitInterval), about the 100 ms
//     crownd defers a commit at the cluster's rate (lesson 52).
//
// pages/msg is what the state file's commits wrote a message: bbolt writes
// each page a transaction dirtied with a pwrite of its own, and over many
// partitions the records' leaves are most of them (lesson 46).
func BenchmarkApplyPush(b *testing.B) {
	const serial, side, drifted = 0, 1, 2
	for _, shape := range []struct {
		parts, cmds, entries, spread int
		deferred                     int // entries a commit (0: each batch commits)
	}{{8, 8, 4, serial, 0}, {10000, 8, 4, serial, 0}, {10000, 4, 1, serial, 0}, {10000, 8, 1, side, 0}, {10000, 5, 1, drifted, 0}, {10000, 5, 1, drifted, 11}} {
		parts := shape.parts
		name := fmt.Sprintf("partitions=%d/tx=%d", parts, shape.cmds*shape.entries*100)
		switch shape.spread {
		case side:
			name += "/side-by-side"
		case drifted:
			name += "/drifted"
		}
		if shape.deferred > 0 {
			name += "/deferred"
		}
		b.Run(name, func(b *testing.B) {
			m := newMachineWith(b, func(c *Config) {
				if shape.deferred > 0 {
					c.CommitInterval, c.CommitBatches = time.Hour, shape.deferred
				}
			})
			b.ReportAllocs()
			n, next := 0, 0
			var pages uint64
			start := m.f.StateWrites().Pages
			for b.Loop() {
				b.StopTimer()
				var logs []*raft.Log
				for e := 0; e < shape.entries; e++ {
					var cmds []Command
					for c := 0; c < shape.cmds; c++ {
						items := benchItems("q", 1, 100, fmt.Sprintf("t%d-%d-%d-", n, e, c))
						for i := range items {
							switch shape.spread {
							case side:
								items[i].Partition = "p" + strconv.Itoa((next+c+i)%parts)
							case drifted:
								items[i].Partition = "p" + strconv.Itoa((next+c*parts/shape.cmds+i)%parts)
							default:
								items[i].Partition = "p" + strconv.Itoa(next%parts)
								next++
							}
						}
						cmds = append(cmds, &Push{Items: items})
					}
					logs = append(logs, m.entry(cmds...))
					if shape.spread != serial {
						next += 100
					}
				}
				n++
				if shape.deferred > 0 {
					// StateWrites commits the open transaction: read once, below.
					b.StartTimer()
					benchApply(b, m, logs, shape.entries)
					continue
				}
				before := m.f.StateWrites().Pages
				b.StartTimer()
				benchApply(b, m, logs, shape.entries)
				b.StopTimer()
				pages += m.f.StateWrites().Pages - before
				b.StartTimer()
			}
			if shape.deferred > 0 {
				// The last open transaction's commit is counted, not timed.
				pages = m.f.StateWrites().Pages - start
			}
			msgs := float64(b.N * shape.cmds * shape.entries * 100)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/msgs, "ns/msg")
			b.ReportMetric(float64(pages)/msgs, "pages/msg")
		})
	}
}

// BenchmarkApplyPopAck: a pop of 100 and an ack/batch of those 100, each its
// own command, over 8 partitions with a standing backlog.
func BenchmarkApplyPopAck(b *testing.B) {
	m := newMachine(b)
	fill := func(round int) {
		for c := 0; c < 8; c++ {
			m.push(benchItems("q", 8, 800, fmt.Sprintf("f%d-%d-", round, c))...)
		}
	}
	fill(0)
	b.ReportAllocs()
	round := 1
	msgs := 0
	for b.Loop() {
		r := m.pop(Lease{Queue: "q", Batch: 100})
		if r.Count() == 0 {
			b.StopTimer()
			fill(round)
			round++
			b.StartTimer()
			continue
		}
		msgs += r.Count()
		m.ack("", ackAll(r, AckCompleted)...)
		m.advance(time.Microsecond)
	}
	if msgs > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs), "ns/msg")
	}
}

// BenchmarkApplyPop: pops of up to 100 messages claiming up to 4
// partitions, from a backlog written as the load generator writes one:
// pushes of 100 messages, each to 100 partitions in turn. Over 8 partitions
// a push makes segments of 12-13 messages; over 1,000 (as over 10,000)
// every message is a segment of its own, and the segments of neighbouring
// partitions lie side by side in the blob files. Only the pops are timed;
// each batch is then acknowledged.
func BenchmarkApplyPop(b *testing.B) {
	for _, parts := range []int{8, 1000} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			m := newMachine(b)
			round := 0
			fill := func() {
				// 25 messages a partition, 8 pushes an entry.
				var cmds []Command
				for k := range max(parts/4, 8) {
					items := benchItems("q", 1, 100, fmt.Sprintf("f%d-%d-", round, k))
					for i := range items {
						items[i].Partition = "p" + strconv.Itoa((k*100+i)%parts)
					}
					if cmds = append(cmds, &Push{Items: items}); len(cmds) == 8 {
						m.apply(cmds...)
						cmds = nil
					}
				}
				if len(cmds) > 0 {
					m.apply(cmds...)
				}
				round++
			}
			fill()
			b.ReportAllocs()
			msgs := 0
			for b.Loop() {
				r := m.pop(Lease{Queue: "q", Batch: 100, MaxPartitions: 4})
				b.StopTimer()
				if r.Count() == 0 {
					fill()
				} else {
					msgs += r.Count()
					m.ack("", ackAll(r, AckCompleted)...)
				}
				m.advance(time.Microsecond)
				b.StartTimer()
			}
			if msgs > 0 {
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs), "ns/msg")
			}
		})
	}
}

// BenchmarkApplyAck: an ack/batch of the 100 messages a pop delivered from
// one partition whose segments hold 1, 4, 12 or 100 messages (over 10,000
// partitions nearly every message is a segment of its own; over 8, a push of
// 100 makes segments of 12 or 13). Only the ack is timed. Its ids are
// resolved through the index (ackByIndex); a build that scans the batch's
// segments instead shows what that costs.
func BenchmarkApplyAck(b *testing.B) {
	for _, seg := range []int{1, 4, 12, 100} {
		b.Run(fmt.Sprintf("segment=%d", seg), func(b *testing.B) {
			m := newMachine(b)
			round := 0
			fill := func() {
				for c := 0; c < 2000/seg; c++ {
					m.push(benchItems("q", 1, seg, fmt.Sprintf("f%d-%d-", round, c))...)
				}
				round++
			}
			b.ReportAllocs()
			msgs := 0
			for b.Loop() {
				b.StopTimer()
				r := m.pop(Lease{Queue: "q", Batch: 100})
				if r.Count() < 100 {
					if r.Count() > 0 {
						m.ack("", ackAll(r, AckCompleted)...)
					}
					fill()
					r = m.pop(Lease{Queue: "q", Batch: 100})
				}
				items := ackAll(r, AckCompleted)
				m.advance(time.Microsecond)
				b.StartTimer()
				m.ack("", items...)
				msgs += len(items)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs), "ns/msg")
		})
	}
}

// BenchmarkApplyAckOffsets: the acknowledgment of a batch of 100 that a pop
// delivered from one of 8 partitions holding 200,000 messages in segments of
// 12, filled again when drained (a consume run's shape: the index lookups
// grow with the index), written
// as nodes wrote it before (packed: every id looked up in the index) and
// with the offsets the leader delivered (at: fsm.AckAt). Only the ack is
// timed.
func BenchmarkApplyAckOffsets(b *testing.B) {
	for _, format := range []string{"packed", "at"} {
		b.Run("format="+format, func(b *testing.B) {
			m := newMachine(b)
			round := 0
			fill := func() { // 200,000 more, under transaction ids of their own
				for i := range 200_000 / 96 {
					m.push(benchItems("q", 8, 96, fmt.Sprintf("run%d-%d-%d-", round, i%8, i))...)
				}
				round++
			}
			fill()
			b.ReportAllocs()
			msgs := 0
			for b.Loop() {
				b.StopTimer()
				r := m.pop(Lease{Queue: "q", Batch: 100})
				if r.Count() == 0 { // a fast host drains a fill within the benchmark's second
					fill()
					r = m.pop(Lease{Queue: "q", Batch: 100})
				}
				var cmd Command = &AckPacked{Ack{Group: QueueMode, Items: ackAll(r, AckCompleted)}}
				if format == "at" {
					var items []AckItem
					for _, lp := range r.Partitions {
						for _, dm := range lp.Messages {
							items = append(items, ackAt(lp, dm, r.LeaseID, AckCompleted))
						}
					}
					cmd = &AckAt{Ack{Group: QueueMode, Items: items}}
				}
				m.advance(time.Microsecond)
				b.StartTimer()
				m.apply(cmd)
				msgs += r.Count()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs), "ns/msg")
		})
	}
}

// BenchmarkCheckPop is the read a parked or arriving pop does before
// proposing: in a read view (committed), inside the write transaction a
// deferred commit left open (open), and, as given-up, the part of a look
// that reads checkInOpenTx leased partitions inside the open transaction
// before it gives up: how long it holds off apply.
func BenchmarkCheckPop(b *testing.B) {
	l := &Lease{Scope: ScopeWildcard, Queue: "q", Group: QueueMode, Batch: 100, WindowBatch: 100}
	for _, open := range []bool{false, true} {
		name := map[bool]string{false: "committed", true: "open"}[open]
		b.Run(name, func(b *testing.B) {
			m := newMachine(b)
			if open {
				m = newMachineWith(b, deferAll)
			}
			for c := 0; c < 8; c++ {
				m.push(benchItems("q", 8, 800, fmt.Sprintf("f%d-", c))...)
			}
			b.ReportAllocs()
			for b.Loop() {
				if pc, err := m.f.CheckPop(l, m.now.UnixMicro(), true); err != nil || pc.Deliverable != 1 {
					b.Fatalf("%+v %v", pc, err)
				}
			}
		})
	}
	b.Run("given-up", func(b *testing.B) {
		m := newMachineWith(b, deferAll)
		m.push(benchItems("q", checkInOpenTx+1, checkInOpenTx+1, "t")...)
		m.pop(Lease{Queue: "q", Batch: 1000, MaxPartitions: checkInOpenTx + 1, LeaseSeconds: 3600})
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			m.push(benchItems("other", 1, 1, "o"+strconv.Itoa(i))...) // a fresh open transaction
			b.StartTimer()
			if _, _, err := m.f.checkPop(m.f.viewLatest, l, "", m.now.UnixMicro(), false); !errors.Is(err, errLongCheck) {
				b.Fatalf("look over %d leased partitions: %v, want errLongCheck", checkInOpenTx+1, err)
			}
		}
	})
}

// A page of the OJS queue listing over 10,000 queues: the views built for
// the page alone (OJSQueuePage) against every queue's view (OJSQueues, what
// the listing built before paging).
func BenchmarkOJSQueueListing(b *testing.B) {
	m := newMachine(b)
	const queues = 10000
	for i := 0; i < queues; i += 500 {
		cmds := make([]Command, 0, 500)
		for j := i; j < i+500; j++ {
			cmds = append(cmds, &OJSCreateQueue{Name: fmt.Sprintf("q%05d", j)})
		}
		m.apply(cmds...)
	}
	now := m.now.UnixMicro()
	b.Run("page-of-50", func(b *testing.B) {
		for b.Loop() {
			total, views, err := m.f.OJSQueuePage(now, "", nil, func([]string) (int, int) { return 5000, 5050 })
			if err != nil || total != queues || len(views) != 50 {
				b.Fatalf("%d of %d: %v", len(views), total, err)
			}
		}
	})
	b.Run("every-view", func(b *testing.B) {
		for b.Loop() {
			views, err := m.f.OJSQueues(now, nil)
			if err != nil || len(views) != queues {
				b.Fatalf("%d: %v", len(views), err)
			}
		}
	})
}
