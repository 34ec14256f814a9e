package fsm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

var updateGolden = flag.Bool("update-discovery-golden", false, "rewrite testdata/discovery_walk.golden")

// discoveryWalkLog drives a machine with discovery pops over many queues
// whose tags interleave in name order (neighbours by name belong to
// different namespaces and tasks), between pushes, acks, tag moves, queue
// deletions and clock steps, and returns a hash of the results and
// discovery pointers every 50 entries. It uses nothing the tag index
// added, so the build before it can run it too.
func discoveryWalkLog(t *testing.T) []string {
	m := newMachine(t)
	rng := rand.New(rand.NewPCG(2026, 12))
	const queues = 240
	nss, tasks := []string{"billing", "orders", "stock", "b"}, []string{"eu", "us", ""}
	groups := []string{"G", "H", QueueMode}
	name := func(i int) string { return fmt.Sprintf("q%03d", i) }
	opts := DefaultOptions(segments.OriginConfigure)
	var cmds []Command
	for i := range queues {
		cmds = append(cmds, &Configure{Queue: name(i), Namespace: nss[i%len(nss)], Task: tasks[i%len(tasks)], Options: opts})
	}
	m.apply(cmds...)
	var out []string
	h := sha256.New()
	record := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	var held []struct {
		group string
		r     *LeaseResult
	}
	for entry := 1; entry <= 600; entry++ {
		var res []any
		switch k := rng.IntN(20); {
		case k < 6:
			var its []PushItem
			for range 1 + rng.IntN(4) {
				its = append(its, item(name(rng.IntN(queues)), fmt.Sprint("p", rng.IntN(2)), fmt.Sprint("t", entry, "-", len(its)), "{}"))
			}
			res = m.apply(&Push{Items: its})
		case k < 15:
			l := &Lease{Scope: ScopeDiscovery, Group: groups[rng.IntN(len(groups))],
				Batch: uint32(1 + rng.IntN(5)), MaxPartitions: uint32(1 + rng.IntN(3)), AutoAck: rng.IntN(3) == 0,
				WindowBatch: 100, LeaseSeconds: 20}
			switch rng.IntN(3) {
			case 0:
				l.Namespace = nss[rng.IntN(len(nss))]
			case 1:
				l.Task = tasks[rng.IntN(2)]
			default:
				l.Namespace, l.Task = nss[rng.IntN(len(nss))], tasks[rng.IntN(2)]
			}
			if rng.IntN(4) == 0 {
				res = m.apply(l, l) // two pops of one scope in one entry
			} else {
				res = m.apply(l)
			}
			for _, r := range res {
				if lr := r.(*LeaseResult); !l.AutoAck && lr.Count() > 0 {
					held = append(held, struct {
						group string
						r     *LeaseResult
					}{l.Group, lr})
				}
			}
		case k < 17 && len(held) > 0:
			i := rng.IntN(len(held))
			res = m.apply(&Ack{Group: held[i].group, Items: ackAll(held[i].r, AckCompleted)})
			held = append(held[:i], held[i+1:]...)
		case k < 18:
			i := rng.IntN(queues)
			res = m.apply(&Configure{Queue: name(i), Namespace: nss[rng.IntN(len(nss))], Task: tasks[rng.IntN(len(tasks))], Options: opts})
		case k < 19 && entry%7 == 0:
			res = m.apply(&DeleteQueue{Queue: name(rng.IntN(queues))})
			held = nil
		default:
			m.advance(time.Duration(rng.IntN(15)) * time.Second)
		}
		record(res)
		if entry%50 == 0 {
			m.view(func(tx *segments.Tx) error {
				for _, g := range groups {
					if err := tx.ForEachDiscoveryFrom(g, func(ns, task, from string) (bool, error) {
						record([]string{g, ns, task, from})
						return true, nil
					}); err != nil {
						return err
					}
				}
				return nil
			})
			out = append(out, fmt.Sprintf("%d %s", entry, hex.EncodeToString(h.Sum(nil))))
		}
	}
	return out
}

// Discovery pops over 240 queues claim exactly what the build before the
// tag index claimed, which walked every queue record and rotated the
// matching ones to the group's pointer: testdata/discovery_walk.golden was
// written by that build (-update-discovery-golden), and holds a hash of
// every result and pointer, every 50 entries.
func TestDiscoveryPopsClaimWhatTheWalkOfEveryQueueClaimed(t *testing.T) {
	got := discoveryWalkLog(t)
	path := filepath.Join("testdata", "discovery_walk.golden")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(string(raw)), "\n")
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("results diverge from the walk of every queue by entry %s (got %q)", strings.Fields(want[i])[0], got[min(i, len(got)-1)])
		}
	}
}
