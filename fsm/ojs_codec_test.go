package fsm

import (
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/crownmq/crown/segments"
)

func i64(v int64) *int64 { return &v }

func ojsSampleConfig() QueueConfig {
	t := true
	prod := []string{"svc-a", "svc-b"}
	cons := []string{}
	return QueueConfig{
		MaxDepth: i64(100), MaxSizeBytes: i64(1 << 20), VisibilityTimeout: i64(90), MaxConcurrency: i64(4),
		CompletedTTL: &Duration{Text: "P7D", Micros: 7 * 86400e6}, FailedTTL: &Duration{Text: "PT1H", Micros: 3600e6},
		CancelledTTL: &Duration{Text: "PT0S"}, DLQEnabled: &t, DLQMaxAge: &Duration{Text: "PT1.5S", Micros: 1500000},
		DLQMaxCount: i64(7), Producers: &prod, Consumers: &cons,
	}
}

// ojsSampleCommands holds one populated command of each OJS type.
func ojsSampleCommands(opts segments.Options, push PushItem) map[Type]Command {
	return map[Type]Command{
		TypeConfigureSet: &ConfigureSet{Configure: Configure{Queue: "q", Namespace: "n", Task: "t", Options: opts}, Present: PresentLease | PresentDLQ},
		TypePushAs:       &PushAs{Principal: "svc-a", Items: []PushItem{push}},
		TypeLeaseAs: &LeaseAs{Lease: Lease{Scope: ScopeWildcard, Queue: "q", Group: "g", Batch: 3, MaxPartitions: 1},
			Principal: "worker-1"},
		TypeOJSCreateQueue:  &OJSCreateQueue{Name: "payments", Paused: true, Bind: BindNamed, Policy: "p1", Config: ojsSampleConfig(), MaxQueues: 10},
		TypeOJSUpdateQueue:  &OJSUpdateQueue{Name: "payments", Replace: true, Set: ojsSampleConfig(), Unset: FieldMaxDepth, State: ToDraining, Bind: BindNone},
		TypeOJSSetState:     &OJSSetState{Name: "payments", Pause: true, Reason: "deploy", Strict: true, MaxQueues: 7},
		TypeOJSDeleteQueue:  &OJSDeleteQueue{Name: "old", Strategy: segments.DeleteMove, Target: "new", Strict: true, MaxQueues: 9},
		TypeOJSPurgeQueue:   &OJSPurgeQueue{Name: "payments", States: PurgeBacklog | PurgeDiscarded},
		TypeOJSPutPolicy:    &OJSPutPolicy{Name: "p1", Mode: PolicyPatch, Match: "batch.*", HasMatch: true, Priority: -3, HasPriority: true, Set: ojsSampleConfig(), Unset: FieldConsumers},
		TypeOJSDeletePolicy: &OJSDeletePolicy{Name: "p1"},
		TypeOJSSweep:        &OJSSweep{Queue: "payments", MaxDLQ: 100},
		TypeTransactionAs: &TransactionAs{Principal: "svc-a", Transaction: Transaction{Ops: []TxOp{
			{Kind: OpPush, Items: []PushItem{push}}, {Kind: OpAck, Ack: AckItem{TxID: "t"}, Group: "g"}}}},
	}
}

// TestOJSCommandsDecodeOlderEntries checks that entries written before a
// field was appended still decode, the new fields zero: OJSDeleteQueue
// before Strict and before MaxQueues, OJSSetState before MaxQueues.
func TestOJSCommandsDecodeOlderEntries(t *testing.T) {
	type delete3 struct {
		_msgpack struct{} `msgpack:",as_array"`
		Name     string
		Strategy uint8
		Target   string
	}
	type delete4 struct {
		_msgpack struct{} `msgpack:",as_array"`
		Name     string
		Strategy uint8
		Target   string
		Strict   bool
	}
	type setState5 struct {
		_msgpack   struct{} `msgpack:",as_array"`
		Name       string
		Pause      bool
		Reason     string
		Strict     bool
		EnsureOnly bool
	}
	for _, tc := range []struct {
		old       any
		got, want any
	}{
		{&delete3{Name: "old", Strategy: segments.DeleteMove, Target: "new"}, &OJSDeleteQueue{},
			&OJSDeleteQueue{Name: "old", Strategy: segments.DeleteMove, Target: "new"}},
		{&delete4{Name: "old", Strategy: segments.DeleteMove, Target: "new", Strict: true}, &OJSDeleteQueue{},
			&OJSDeleteQueue{Name: "old", Strategy: segments.DeleteMove, Target: "new", Strict: true}},
		{&setState5{Name: "q", Pause: true, Reason: "r", EnsureOnly: true}, &OJSSetState{},
			&OJSSetState{Name: "q", Pause: true, Reason: "r", EnsureOnly: true}},
	} {
		b, err := msgpack.Marshal(tc.old)
		if err != nil {
			t.Fatal(err)
		}
		if err := msgpack.Unmarshal(b, tc.got); err != nil {
			t.Fatalf("%T: %v", tc.old, err)
		}
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Fatalf("%T decoded %+v, want %+v", tc.old, tc.got, tc.want)
		}
	}
}
