package fsm

import (
	"github.com/crownmq/crown/segments"
)

// Trace events (queen-api.md 3.16) are state: an AddTrace writes one. They
// are bounded three ways, all carried in the command: per message (the
// message's oldest event goes first), in number and in stored size over the
// cluster (the cluster's oldest event goes first). Events also go with their
// message: segments deletes them with the message's segment (retention,
// maxWait, OJS purge) and with its queue.

func applyAddTrace(a *applier, c *AddTrace) any {
	p, off, ok := a.messageAt(c.PartitionID, c.TxID)
	if !ok {
		return &AddTraceResult{}
	}
	res := &AddTraceResult{Found: true}
	mine := a.tx.MessageTraceSeqs(p.ID, off)
	for i := 0; len(mine)-i >= int(c.MaxPerMessage); i++ {
		must(a.tx.DeleteTrace(p.ID, off, mine[i]))
		res.Evicted++
	}
	seq := must1(a.tx.ReserveIDs(1))
	ev := &segments.TraceEvent{
		Seq: seq, ID: segments.MessageID(a.now, seq), PartitionID: p.ID, Offset: off, TxID: c.TxID,
		Group: c.Group, Worker: c.Worker, EventType: c.EventType, Names: c.Names, Data: c.Data, CreatedAt: a.now,
	}
	must(a.tx.AddTrace(ev))
	for {
		count, size := a.tx.TraceTotals()
		if count <= uint64(c.MaxTotal) && size <= c.MaxBytes {
			break
		}
		pid, o, s, ok := must4(a.tx.OldestTrace())
		if !ok || s == seq {
			break // the new event alone is over the size bound: keep it
		}
		must(a.tx.DeleteTrace(pid, o, s))
		res.Evicted++
	}
	res.ID = ev.ID
	return res
}

func must4[T, U, V, W any](t T, u U, v V, w W, err error) (T, U, V, W) {
	must(err)
	return t, u, v, w
}
