package fsm

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/segments"
)

// The queue listing pages after sorting by the queue records alone, and
// builds the views of the page only: every page of every filter is the
// same slice of the brute-force listing (every queue, filtered by its
// tags, newest first then by name), with the statistics QueueView gives.
func TestListQueuesPagesTheSortedListing(t *testing.T) {
	m := newMachine(t)
	opts := DefaultOptions(segments.OriginConfigure)
	nss, tasks := []string{"a", "b", ""}, []string{"x", "y", ""}
	for i := range 30 {
		name := fmt.Sprintf("q%02d", (i*7)%30)
		m.configure(Configure{Queue: name, Namespace: nss[i%3], Task: tasks[(i/3)%3], Options: opts})
		m.push(items(name, "p", seq(name, i%4)...)...)
		if i%4 != 0 { // some created in the same microsecond: ordered by name
			m.advance(time.Second)
		}
	}
	m.apply(&DeleteQueue{Queue: "q07"})
	now := m.now.UnixMicro()
	for _, ns := range nss {
		for _, task := range tasks {
			var want []*segments.Queue
			m.view(func(tx *segments.Tx) error {
				return tx.ForEachQueue(func(q *segments.Queue) (bool, error) {
					if (ns == "" || q.Namespace == ns) && (task == "" || q.Task == task) {
						want = append(want, q)
					}
					return true, nil
				})
			})
			slices.SortStableFunc(want, func(a, b *segments.Queue) int {
				if a.CreatedAt != b.CreatedAt {
					return cmp.Compare(b.CreatedAt, a.CreatedAt)
				}
				return strings.Compare(a.Name, b.Name)
			})
			for _, page := range [][2]int{{0, -1}, {0, 3}, {2, 4}, {5, 0}, {len(want) - 1, 10}, {len(want), 2}, {len(want) + 5, -1}, {-3, 2}} {
				got, err := m.f.ListQueues(ns, task, page[0], page[1], now)
				if err != nil {
					t.Fatal(err)
				}
				lo := min(max(page[0], 0), len(want))
				hi := len(want)
				if page[1] >= 0 {
					hi = min(lo+page[1], hi)
				}
				if len(got) != hi-lo {
					t.Fatalf("%q/%q page %v: %d queues, want %d", ns, task, page, len(got), hi-lo)
				}
				for i, v := range got {
					w, err := m.f.QueueView(want[lo+i].Name, now, false)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(&v, w) {
						t.Fatalf("%q/%q page %v item %d: %+v, want %+v", ns, task, page, i, v, *w)
					}
				}
			}
		}
	}
}
