package httpapi_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi"
)

// newTermLag stages what a node that has just been elected sees: a push an
// earlier leader committed and answered is in its log but not yet applied,
// and applies once the new leader's first entry of its term commits (here,
// its first barrier). Its leader view changes with each staged term, as a
// real election's does.
type newTermLag struct {
	httpapi.Cluster
	mu       sync.Mutex
	view     context.Context
	end      context.CancelFunc
	pending  *fsm.Push
	barriers atomic.Int32
}

func (c *newTermLag) LeaderView() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view == nil {
		c.view, c.end = context.WithCancel(context.Background())
	}
	return c.view
}

// newTerm starts a leadership term in which push, answered by the previous
// leader, applies with the term's first barrier.
func (c *newTermLag) newTerm(push *fsm.Push) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.end != nil {
		c.end()
	}
	c.view, c.end = context.WithCancel(context.Background())
	c.pending = push
}

func (c *newTermLag) Barrier(ctx context.Context) error {
	c.barriers.Add(1)
	c.mu.Lock()
	p := c.pending
	c.pending = nil
	c.mu.Unlock()
	if p != nil {
		if _, _, err := c.Cluster.Propose(ctx, p); err != nil {
			return err
		}
	}
	return c.Cluster.Barrier(ctx)
}

// queen-api.md 3.5: a message whose push was answered is visible to every
// pop that starts afterwards, whichever node it reaches. A newly elected
// leader has not applied the entries its predecessor committed until an
// entry of its own term commits; a pop with wait=false that looked at its
// state before then answered 204 over a queued message. The leader now
// takes its term's barrier before a pop's first look, once a term.
func TestPopOnANewLeaderSeesWhatTheOldLeaderAnswered(t *testing.T) {
	var staged *newTermLag
	s := newStackWrapped(t, func(c httpapi.Cluster) httpapi.Cluster {
		staged = &newTermLag{Cluster: c}
		return staged
	})
	s.push(obj{"queue": "handover", "partition": "p", "payload": 0, "transactionId": "m0"})
	got := s.popOne("/api/v1/pop/queue/handover?wait=false")
	if got["transactionId"] != "m0" {
		t.Fatalf("first pop: %v, want m0", got["transactionId"])
	}

	// m0's partition stays leased; m1 goes to another.
	staged.newTerm(&fsm.Push{Items: []fsm.PushItem{{Queue: "handover", Partition: "p2", TxID: "m1", Payload: []byte(`1`)}}})
	before := staged.barriers.Load()
	got = s.popOne("/api/v1/pop/queue/handover?wait=false")
	if got["transactionId"] != "m1" {
		t.Fatalf("pop on the new leader: %v, want m1 (answered by the old leader)", got["transactionId"])
	}
	if n := staged.barriers.Load() - before; n != 1 {
		t.Errorf("the new term's first pop took %d barriers, want 1", n)
	}
	// Once a term: later pops of the same term take no barrier.
	before = staged.barriers.Load()
	if p := s.pop("/api/v1/pop/queue/handover?wait=false"); p != nil {
		t.Fatalf("pop of an empty queue: %v, want 204", p)
	}
	if n := staged.barriers.Load() - before; n != 0 {
		t.Errorf("a later pop of the same term took %d barriers, want 0", n)
	}
}
