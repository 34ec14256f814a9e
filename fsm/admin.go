package fsm

import (
	"github.com/crownmq/crown/segments"
)

// Events tell observers, after a commit, what an applied batch may have made
// deliverable or changed. They are derived from the commands, never stored.
type Events struct {
	Index uint64
	// Queues names every queue a command touched in a way that can wake a
	// parked pop (push, released or expired lease, configure, delete).
	Queues map[string]struct{}
	// All is set after a snapshot restore: everything may have changed.
	All bool
	// Nodes is set when the node registry changed.
	Nodes bool
}

func (e *Events) touch(queue string) {
	if e.Queues == nil {
		e.Queues = make(map[string]struct{})
	}
	e.Queues[queue] = struct{}{}
}

func applyConfigure(a *applier, c *Configure) any {
	q := must1(a.tx.Queue(c.Queue))
	opts := c.Options
	ClampOptions(&opts)
	if q == nil {
		q = &segments.Queue{
			UUID:      a.newID(),
			Name:      c.Queue,
			CreatedAt: a.now,
			Origin:    segments.OriginConfigure,
		}
		q.Namespace, q.Task, q.Options = c.Namespace, c.Task, opts
		must(a.tx.CreateQueue(q))
	} else {
		// Full replace of options and tags; id, partitions, messages and
		// consumer state stay.
		q.Namespace, q.Task, q.Options = c.Namespace, c.Task, opts
		must(a.tx.PutQueue(q))
	}
	a.events.touch(q.Name)
	return &ConfigureResult{Queue: *q}
}

func applyDeleteQueue(a *applier, c *DeleteQueue) any {
	q := must1(a.tx.Queue(c.Queue))
	if q == nil {
		return &DeleteQueueResult{Existed: false}
	}
	if q.Name == DefaultQueue { // one queue, two views: neither API deletes it
		return &DeleteQueueResult{Existed: true, Refused: &Refusal{Code: RefuseProtected, Queue: q.Name}}
	}
	// One queue, two views: the OJS view sees a Queen delete as a deletion
	// of everything the queue held (ojs-queues.md 8).
	depth, _ := queueDepth(a.tx, q, false)
	must(a.tx.DeleteQueue(q))
	a.countOJS(ojsDeleted)
	a.events.touch(q.Name)
	a.event(segments.QueueEvent{Type: "queue.deleted", Queue: q.Name, Reason: "queen_delete", Count: int64(depth)})
	return &DeleteQueueResult{Existed: true}
}

func applyRegisterNode(a *applier, c *RegisterNode) any {
	must(a.tx.PutNode(&segments.Node{ID: c.ID, RaftAddr: c.RaftAddr, HTTPAddr: c.HTTPAddr}))
	a.events.Nodes = true
	return &OK{}
}

func applyRemoveNode(a *applier, c *RemoveNode) any {
	must(a.tx.DeleteNode(c.ID))
	a.events.Nodes = true
	return &OK{}
}
