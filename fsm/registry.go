package fsm

import (
	"fmt"

	"github.com/crownmq/crown/segments"
)

// commandSpec is one row of the command table: how to make an empty command
// for decoding and how to apply it.
type commandSpec struct {
	name   string
	newCmd func() Command
	apply  func(*applier, Command) any
}

// registry is the table of command types, indexed by Type. It is written
// once here and never modified.
var registry = [...]commandSpec{
	TypeConfigure:    spec("configure", applyConfigure),
	TypePush:         spec("push", applyPush),
	TypeLease:        spec("lease", applyLease),
	TypeAck:          spec("ack", applyAck),
	TypeExtend:       spec("extend", applyExtend),
	TypeTransaction:  spec("transaction", applyTransaction),
	TypeDeleteQueue:  spec("delete_queue", applyDeleteQueue),
	TypeRegisterNode: spec("register_node", applyRegisterNode),
	TypeRemoveNode:   spec("remove_node", applyRemoveNode),
	TypeSweep:        spec("sweep", applySweep),
	TypeExpireLeases: spec("expire_leases", applyExpireLeases),
	// OJS queue administration (ojs_commands.go, ojs_apply.go).
	TypeConfigureSet:    spec("configure_set", applyConfigureSet),
	TypePushAs:          spec("push_as", applyPushAs),
	TypeLeaseAs:         spec("lease_as", applyLeaseAs),
	TypeOJSCreateQueue:  spec("ojs_create_queue", applyOJSCreateQueue),
	TypeOJSUpdateQueue:  spec("ojs_update_queue", applyOJSUpdateQueue),
	TypeOJSSetState:     spec("ojs_set_state", applyOJSSetState),
	TypeOJSDeleteQueue:  spec("ojs_delete_queue", applyOJSDeleteQueue),
	TypeOJSPurgeQueue:   spec("ojs_purge_queue", applyOJSPurgeQueue),
	TypeOJSPutPolicy:    spec("ojs_put_policy", applyOJSPutPolicy),
	TypeOJSDeletePolicy: spec("ojs_delete_policy", applyOJSDeletePolicy),
	TypeOJSSweep:        spec("ojs_sweep", applyOJSSweep),
	TypeTransactionAs:   spec("transaction_as", applyTransactionAs),
	// Acknowledgments in the smaller format (ackpacked.go).
	TypeAckPacked: spec("ack_packed", applyAckPacked),
	// Acknowledgments with the offsets the leader delivered (ackat.go).
	TypeAckAt: spec("ack_at", applyAckAt),
	// Consumer-group administration (groups_commands.go, groups_apply.go).
	TypeDeleteGroup:         spec("delete_group", applyDeleteGroup),
	TypeRewriteSubscription: spec("rewrite_subscription", applyRewriteSubscription),
	TypeSeek:                spec("seek", applySeek),
	TypeSeekPartition:       spec("seek_partition", applySeekPartition),
	// Traces and maintenance switches (system_commands.go, traces.go, system_apply.go).
	TypeAddTrace:          spec("add_trace", applyAddTrace),
	TypeSetMaintenance:    spec("set_maintenance", applySetMaintenance),
	TypeSetPopMaintenance: spec("set_pop_maintenance", applySetPopMaintenance),
	// Streams queries and cycles (streams_commands.go, streams_apply.go).
	TypeStreamRegister: spec("stream_register", applyStreamRegister),
	TypeStreamCycle:    spec("stream_cycle", applyStreamCycle),
	// Message deletion (message_delete.go) and the dedup memory of deleted ids (dedup.go).
	TypeDeleteMessage:      spec("delete_message", applyDeleteMessage),
	TypeForgetDeletedTxIDs: spec("forget_deleted_txids", applyForgetDeletedTxIDs),
	// Pops bounded in bytes too (leasecapped.go).
	TypeLeaseCapped: spec("lease_capped", applyLeaseCapped),
}

func spec[C any, PC interface {
	*C
	Command
}](name string, apply func(*applier, PC) any) commandSpec {
	return commandSpec{
		name:   name,
		newCmd: func() Command { return PC(new(C)) },
		apply:  func(a *applier, c Command) any { return apply(a, c.(PC)) },
	}
}

func lookup(t Type) (commandSpec, bool) {
	if int(t) >= len(registry) || registry[t].apply == nil {
		return commandSpec{}, false
	}
	return registry[t], true
}

// TypeName names a command type for logs and metrics.
func TypeName(t Type) string {
	if s, ok := lookup(t); ok {
		return s.name
	}
	return fmt.Sprintf("unknown(%d)", t)
}

// applier carries what one command's apply needs: the transaction, the
// entry's time, and where to report side effects. It holds no clock.
type applier struct {
	tx    *segments.Tx
	now   int64  // entry time, made monotonic: unix µs
	index uint64 // Raft index of the entry
	// full is true on the node that proposed the entry: only there is a
	// result read, so only there are payloads copied into it.
	full   bool
	events *Events
	// verifyAcks: Config.VerifyAcks.
	verifyAcks bool
	// acks counts how acknowledgments were resolved (FSM.AckResolutions).
	acks *ackResolutions
}

// must stops the state machine on a storage failure. A half-applied command
// cannot be reported or skipped without diverging from the other nodes, so
// the process dies and replays from its last commit on restart.
func must(err error) {
	if err != nil {
		panic(storageFailure{err})
	}
}

// storageFailure is what must panics with. Read views share the helpers
// that call must and recover it (recoverStorage): a read that meets a
// storage error fails alone, so it reports the error without the words a
// stopped state machine gets.
type storageFailure struct{ err error }

func (s storageFailure) Error() string {
	return "fsm: apply failed, state machine stopped: " + s.err.Error()
}

func (s storageFailure) Unwrap() error { return s.err }

func must1[T any](v T, err error) T {
	must(err)
	return v
}

func must2[T, U any](v T, w U, err error) (T, U) {
	must(err)
	return v, w
}

// newID returns a fresh UUIDv7-shaped id from the state's sequence.
func (a *applier) newID() [16]byte {
	seq := must1(a.tx.ReserveIDs(1))
	return segments.MessageID(a.now, seq)
}

// messageAt resolves a message named as the HTTP API names it, by its
// partition's UUID and its transaction id, to its partition and offset. The
// transaction-id index holds an id exactly as long as its message is stored,
// and names the newest message holding it.
func (a *applier) messageAt(partition [16]byte, txID string) (*segments.Partition, uint64, bool) {
	p := must1(a.tx.PartitionByUUID(partition))
	if p == nil {
		return nil, 0, false
	}
	off, ok := must2(a.tx.TxIDOffset(p.QueueID, p.ID, txID))
	return p, off, ok
}
