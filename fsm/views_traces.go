package fsm

import (
	"fmt"
	"sort"

	"github.com/crownmq/crown/segments"
)

// Read views of trace events (queen-api.md 3.16).

// TraceView is one trace event. The message fields (TxID onwards) are set by
// TracesByName only.
type TraceView struct {
	ID        [16]byte
	EventType string
	Data      []byte // a JSON value
	Group     string
	Worker    string
	CreatedAt int64
	Names     []string

	TxID        string
	PartitionID [16]byte
	Queue       string
	Partition   string
	Payload     []byte // the message's payload as stored (sealed when Encrypted)
	Encrypted   bool
}

// TraceNameView summarises one trace name.
type TraceNameView struct {
	Name     string
	Traces   uint64 // events carrying the name
	Messages uint64 // distinct messages among them
	LastSeen int64  // unix µs of the newest
}

func traceView(ev *segments.TraceEvent) TraceView {
	return TraceView{ID: ev.ID, EventType: ev.EventType, Data: ev.Data, Group: ev.Group, Worker: ev.Worker,
		CreatedAt: ev.CreatedAt, Names: ev.Names, TxID: ev.TxID}
}

// MessageTraces lists the events of the newest message holding txID in the
// partition, oldest first; none when there is no such message.
func (f *FSM) MessageTraces(partition [16]byte, txID string) ([]TraceView, error) {
	out := []TraceView{}
	err := f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		p := must1(tx.PartitionByUUID(partition))
		if p == nil {
			return nil
		}
		off, ok := must2(tx.TxIDOffset(p.QueueID, p.ID, txID))
		if !ok {
			return nil
		}
		return tx.MessageTraces(p.ID, off, func(ev *segments.TraceEvent) (bool, error) {
			out = append(out, traceView(ev))
			return true, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read message traces: %w", err)
	}
	return out, nil
}

// TracesByName lists the events carrying name, oldest first, from position
// offset, at most limit of them, with their messages; total counts them all.
func (f *FSM) TracesByName(name string, limit, offset int) (out []TraceView, total int, err error) {
	out = []TraceView{}
	err = f.View(func(tx *segments.Tx) (err error) {
		defer recoverStorage(&err)
		type part struct {
			p *segments.Partition
			q *segments.Queue
		}
		parts := map[uint64]part{}
		total, err = tx.TracesByName(name, offset, func(ev *segments.TraceEvent) (bool, error) {
			if len(out) >= limit {
				return false, nil
			}
			pp, ok := parts[ev.PartitionID]
			if !ok {
				pp.p = must1(tx.PartitionByID(ev.PartitionID))
				if pp.p != nil {
					pp.q = must1(tx.QueueByID(pp.p.QueueID))
				}
				parts[ev.PartitionID] = pp
			}
			v := traceView(ev)
			if pp.p != nil && pp.q != nil {
				v.PartitionID, v.Partition, v.Queue = pp.p.UUID, pp.p.Name, pp.q.Name
				if sm := must1(tx.MessageAt(pp.p, ev.Offset)); sm != nil {
					v.Payload, v.Encrypted = sm.Payload, sm.Encrypted
				}
			}
			out = append(out, v)
			return true, nil
		})
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read traces named %q: %w", name, err)
	}
	return out, total, nil
}

// TraceNames summarises every trace name, most recently seen first (then by
// name), from position offset, at most limit of them; total counts them all.
func (f *FSM) TraceNames(limit, offset int) (out []TraceNameView, total int, err error) {
	var all []TraceNameView
	err = f.View(func(tx *segments.Tx) error {
		// The index is grouped by name: one name's rows are contiguous.
		var msgs map[[2]uint64]struct{}
		return tx.ForEachTraceName(func(r segments.TraceNameRef) error {
			if len(all) == 0 || all[len(all)-1].Name != r.Name {
				all = append(all, TraceNameView{Name: r.Name})
				msgs = map[[2]uint64]struct{}{}
			}
			v := &all[len(all)-1]
			v.Traces++
			v.LastSeen = max(v.LastSeen, r.CreatedAt)
			if _, seen := msgs[[2]uint64{r.PartitionID, r.Offset}]; !seen {
				msgs[[2]uint64{r.PartitionID, r.Offset}] = struct{}{}
				v.Messages++
			}
			return nil
		})
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read trace names: %w", err)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].LastSeen > all[j].LastSeen })
	total = len(all)
	offset = min(max(offset, 0), total)
	return all[offset:min(offset+max(limit, 0), total)], total, nil
}
