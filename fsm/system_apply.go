package fsm

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/crownmq/crown/segments"
)

// The maintenance switches (queen-api.md 3.17) are rows of the settings
// bucket, so they are replicated, survive restarts and travel in snapshots.
//
// Push maintenance is decided where a push applies, not where it is
// received: the switch and every push are ordered by the log, so a push
// either precedes the switch-on (stored) or follows it (buffered), whichever
// node took it and however stale that node's state was. For the same reason
// the drain happens inside the command that switches the mode off: every
// buffered request is pushed, in acceptance order, before any push that
// follows the switch-off in the log, and no request can slip into the
// buffer after the drain. The buffer is bounded by what one push request
// may carry, so that command costs at most what one maximal push does.
const (
	settingPushMaintenance = "maintenance.push"
	settingPopMaintenance  = "maintenance.pop"
)

// maintenanceSetting is the stored value of a switch.
// A switch's row exists exactly while it is on: every push, pop check and
// lease reads it, and a missing row is found without decoding anything.
type maintenanceSetting struct {
	On    bool  `msgpack:"on"`
	Since int64 `msgpack:"since"` // unix µs it was last switched on
	// The buffer's bounds while push maintenance is on.
	MaxMessages uint32 `msgpack:"max_msgs,omitempty"`
	MaxBytes    uint64 `msgpack:"max_bytes,omitempty"`
}

// SystemSwitches is the state of the maintenance switches.
type SystemSwitches struct {
	Maintenance         bool
	MaintenanceSince    int64 // unix µs it was switched on; 0 while off
	PopMaintenance      bool
	PopMaintenanceSince int64 // likewise
	// The buffer, and its bounds while push maintenance is on.
	Buffer            PushBufferTotals
	BufferMaxMessages uint32
	BufferMaxBytes    uint64
}

func loadSetting(tx *segments.Tx, name string) (maintenanceSetting, error) {
	var s maintenanceSetting
	v := tx.Setting(name)
	if v == nil {
		return s, nil
	}
	if err := msgpack.Unmarshal(v, &s); err != nil {
		return s, fmt.Errorf("setting %s: %v: %w", name, err, segments.ErrCorrupt)
	}
	return s, nil
}

func storeSetting(tx *segments.Tx, name string, s maintenanceSetting) error {
	v, err := msgpack.Marshal(&s)
	if err != nil {
		return fmt.Errorf("encode setting %s: %w", name, err)
	}
	return tx.PutSetting(name, v)
}

func readSwitches(tx *segments.Tx) (SystemSwitches, error) {
	push, err := loadSetting(tx, settingPushMaintenance)
	if err != nil {
		return SystemSwitches{}, err
	}
	pop, err := loadSetting(tx, settingPopMaintenance)
	if err != nil {
		return SystemSwitches{}, err
	}
	sw := SystemSwitches{Maintenance: push.On, PopMaintenance: pop.On, Buffer: tx.PushBufferTotals()}
	if push.On {
		sw.MaintenanceSince, sw.BufferMaxMessages, sw.BufferMaxBytes = push.Since, push.MaxMessages, push.MaxBytes
	}
	if pop.On {
		sw.PopMaintenanceSince = pop.Since
	}
	return sw, nil
}

func applySetMaintenance(a *applier, c *SetMaintenance) any {
	cur := must1(loadSetting(a.tx, settingPushMaintenance))
	res := &MaintenanceResult{}
	if c.Enabled {
		if !cur.On {
			cur.Since = a.now
		}
		// Switching on again only changes the bounds: a buffer already
		// over the new ones keeps what it holds and takes nothing more.
		cur.On, cur.MaxMessages, cur.MaxBytes = true, c.MaxMessages, c.MaxBytes
		must(storeSetting(a.tx, settingPushMaintenance, cur))
	} else {
		if cur.On {
			must(a.tx.DeleteSetting(settingPushMaintenance))
		}
		res.Drained = a.drainPushBuffer()
	}
	res.Switches = must1(readSwitches(a.tx))
	return res
}

func applySetPopMaintenance(a *applier, c *SetPopMaintenance) any {
	cur := must1(loadSetting(a.tx, settingPopMaintenance))
	if cur.On != c.Enabled {
		if c.Enabled {
			must(storeSetting(a.tx, settingPopMaintenance, maintenanceSetting{On: true, Since: a.now}))
		} else {
			must(a.tx.DeleteSetting(settingPopMaintenance))
		}
		// Parked long-polls re-check at once: switched on, they answer 204;
		// switched off, they may claim what they were held from.
		a.events.All = true
	}
	return &MaintenanceResult{Switches: must1(readSwitches(a.tx))}
}

// bufferIfMaintenance answers a push while push maintenance is on: the
// whole request goes into the buffer, or, when the buffer has no room for
// all of it, nothing does. It returns nil when the mode is off. The queues'
// state and access rules (checkIntake) are applied now, as to any push: a
// buffered push is an accepted one, and the drain only refuses it for a
// queue deleted since.
func (a *applier) bufferIfMaintenance(items []PushItem, principal string) *PushResult {
	set := must1(loadSetting(a.tx, settingPushMaintenance))
	if !set.On {
		return nil
	}
	for i := range items {
		if i > 0 && items[i].Queue == items[i-1].Queue {
			continue
		}
		q := must1(a.tx.Queue(items[i].Queue))
		if q == nil || q.OJS == nil || q.OJS.Gate == 0 {
			continue
		}
		if ref := checkIntake(q, principal); ref != nil {
			a.recordOverflow(ref)
			return &PushResult{Items: make([]PushItemResult, len(items)), Refused: ref}
		}
	}
	b := &segments.BufferedPush{Principal: principal, AcceptedAt: a.now, Items: make([]segments.BufferedItem, len(items))}
	var size uint64
	for i := range items {
		it := &items[i]
		b.Items[i] = segments.BufferedItem{Queue: it.Queue, Partition: it.Partition, TxID: it.TxID,
			TraceID: it.TraceID, HasTrace: it.HasTrace, ProducerSub: it.ProducerSub, Payload: it.Payload,
			Encrypted: it.Encrypted}
		size += uint64(len(it.Payload))
	}
	status := PushBuffered
	tot := a.tx.PushBufferTotals()
	if tot.Messages+uint64(len(items)) > uint64(set.MaxMessages) || tot.Bytes+size > set.MaxBytes {
		status = PushBufferFull
	} else {
		must(a.tx.BufferPush(b))
	}
	res := &PushResult{Items: make([]PushItemResult, len(items))}
	for i := range res.Items {
		res.Items[i].Status = status
	}
	return res
}

// drainPushBuffer pushes every buffered request, oldest first, each as the
// push it was (same items, same principal) at this entry's time: dedup
// windows are those in force now. Its state and access rules were checked
// when it was buffered and capacity does not refuse it; only a queue whose
// deletion began since refuses it, as the deletion would have removed it.
func (a *applier) drainPushBuffer() DrainStats {
	var st DrainStats
	for _, b := range must1(a.tx.BufferedPushes(0)) {
		items := make([]PushItem, len(b.Items))
		for i, it := range b.Items {
			items[i] = PushItem{Queue: it.Queue, Partition: it.Partition, TxID: it.TxID, TraceID: it.TraceID,
				HasTrace: it.HasTrace, ProducerSub: it.ProducerSub, Payload: it.Payload, Encrypted: it.Encrypted}
		}
		must(a.tx.DeleteBufferedPush(b))
		st.Requests++
		res, _, ref := a.pushWith(items, b.Principal, gateDeletion)
		if ref != nil {
			a.recordOverflow(ref)
			st.Refused += uint64(len(items))
			continue
		}
		for _, r := range res {
			if r.Status == PushQueued {
				st.Queued++
			} else {
				st.Duplicates++
			}
		}
	}
	return st
}

// transactionDuringMaintenance fails a transaction that pushes while push
// maintenance is on: its pushes could be neither stored (they would overtake
// the buffered ones) nor buffered (the transaction would no longer be
// atomic with its acks). The HTTP layer refuses such a transaction with a
// 503 first; this keeps the rule exact for one that raced the switch.
func (a *applier) transactionDuringMaintenance(c *Transaction) *TransactionResult {
	pushes := false
	for i := range c.Ops {
		pushes = pushes || c.Ops[i].Kind == OpPush
	}
	if !pushes || !must1(loadSetting(a.tx, settingPushMaintenance)).On {
		return nil
	}
	return &TransactionResult{Error: ErrPushMaintenance}
}

// ErrPushMaintenance explains a transaction refused during push maintenance.
const ErrPushMaintenance = "push maintenance mode is on: transactions that push are refused until it is switched off; retry then"
