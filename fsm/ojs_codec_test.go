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
		TypeOJSSetState:     &OJSSetState{Name: "payments", Pause: true, Reason: "deploy", Strict: true},
		TypeOJSDeleteQueue:  &OJSDeleteQueue{Name: "old", Strategy: segments.DeleteMove, Target: "new", Strict: true},
		TypeOJSPurgeQueue:   &OJSPurgeQueue{Name: "payments", States: PurgeBacklog | PurgeDiscarded},
		TypeOJSPutPolicy:    &OJSPutPolicy{Name: "p1", Mode: PolicyPatch, Match: "batch.*", HasMatch: true, Priority: -3, HasPriority: true, Set: ojsSampleConfig(), Unset: FieldConsumers},
		TypeOJSDeletePolicy: &OJSDeletePolicy{Name: "p1"},
		TypeOJSSweep:        &OJSSweep{Queue: "payments", MaxDLQ: 100},
		TypeTransactionAs: &TransactionAs{Principal: "svc-a", Transaction: Transaction{Ops: []TxOp{
			{Kind: OpPush, Items: []PushItem{push}}, {Kind: OpAck, Ack: AckItem{TxID: "t"}, Group: "g"}}}},
	}
}

// TestOJSDeleteQueueDecodesOlderEntries checks that an OJSDeleteQueue
// written before the Strict field was appended still decodes (Strict false).
func TestOJSDeleteQueueDecodesOlderEntries(t *testing.T) {
	type oldDelete struct {
		_msgpack struct{} `msgpack:",as_array"`
		Name     string
		Strategy uint8
		Target   string
	}
	b, err := msgpack.Marshal(&oldDelete{Name: "old", Strategy: segments.DeleteMove, Target: "new"})
	if err != nil {
		t.Fatal(err)
	}
	var got OJSDeleteQueue
	if err := msgpack.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := OJSDeleteQueue{Name: "old", Strategy: segments.DeleteMove, Target: "new"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}
