package httpapi_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi"
)

// README "Where Crown differs": "Transactions and stream cycles that push are
// refused with 503 `maintenance_mode` meanwhile (acks alone go through)". A
// cycle that pushes during push maintenance must be refused as a request
// (503, the stable code), not reported as a 200 with success false, and must
// change nothing; a cycle that only writes state and acks goes through.
func TestHTTPStreamsCycleThatPushesDuringMaintenanceIs503(t *testing.T) {
	s := newStack(t)
	qid := asStr(t, s.registerQuery(obj{"name": "q", "source_queue": "src", "config_hash": "h"}, http.StatusOK)["query_id"])
	s.push(obj{"queue": "src", "payload": 1, "transactionId": "m1"}, obj{"queue": "src", "payload": 2, "transactionId": "m2"})
	p := s.pop("/api/v1/pop/queue/src?consumerGroup=g&batch=10")
	pid, lease := asStr(t, p["partitionId"]), p["leaseId"]
	s.setSwitch("/api/v1/system/maintenance", true)

	r := s.post("/streams/v1/cycle", obj{"query_id": qid, "partition_id": pid, "consumer_group": "g",
		"state_ops":  arr{obj{"type": "upsert", "key": "a", "value": 1}},
		"push_items": arr{obj{"queue": "sink", "payload": 1}},
		"ack":        obj{"transactionId": "m1", "leaseId": lease}, "release_lease": false})
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("cycle that pushes during maintenance: status %d, want 503; body %s", r.Status, r.Raw)
	}
	if o := asObj(t, r.Body); o["code"] != "maintenance_mode" || asStr(t, o["error"]) == "" {
		t.Errorf("cycle refused during maintenance: body %s", r.Raw)
	}
	if got := s.stateRows(obj{"query_id": qid, "partition_id": pid}); len(got) != 0 {
		t.Errorf("a refused cycle wrote state %q", got)
	}
	if _, body := s.get("/api/v1/system/maintenance"); asInt(t, asObj(t, body)["bufferedMessages"]) != 0 {
		t.Errorf("a refused cycle buffered its pushes: %v", body)
	}

	// State and ack alone go through while push maintenance is on.
	c := s.cycle(obj{"query_id": qid, "partition_id": pid, "consumer_group": "g",
		"state_ops": arr{obj{"type": "upsert", "key": "b", "value": 2}},
		"ack":       obj{"transactionId": "m1", "leaseId": lease}, "release_lease": false})
	if c["success"] != true {
		t.Fatalf("cycle without pushes during maintenance %v", c)
	}
	if got := s.stateRows(obj{"query_id": qid, "partition_id": pid}); len(got) != 1 || got[0] != "b=2" {
		t.Errorf("state after the ack-only cycle %q", got)
	}
}

// switchBefore commits push maintenance just before the next command it
// proposes that match accepts: the write passed the handler's check of the
// local state and then raced the switch in the log.
type switchBefore struct {
	httpapi.Cluster
	match func(fsm.Command) bool
	armed atomic.Bool
}

func (c *switchBefore) Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error) {
	if c.match(cmd) && c.armed.CompareAndSwap(true, false) {
		on := &fsm.SetMaintenance{Enabled: true, MaxMessages: fsm.PushBufferMaxMessages, MaxBytes: fsm.PushBufferMaxBytes}
		if _, _, err := c.Cluster.Propose(ctx, on); err != nil {
			return nil, 0, err
		}
	}
	return c.Cluster.Propose(ctx, cmd)
}

func newSwitchBefore(t *testing.T, match func(fsm.Command) bool) (*stack, *switchBefore) {
	var staged *switchBefore
	s := newStackWrapped(t, func(c httpapi.Cluster) httpapi.Cluster {
		staged = &switchBefore{Cluster: c, match: match}
		return staged
	})
	return s, staged
}

// The state machine refuses a cycle that pushes once the switch is applied;
// the answer is the same 503 maintenance_mode as the handler's own check
// gives, not a 200 success false.
func TestHTTPStreamsCycleRacingMaintenanceIs503(t *testing.T) {
	s, staged := newSwitchBefore(t, func(cmd fsm.Command) bool { _, ok := cmd.(*fsm.StreamCycle); return ok })
	qid := asStr(t, s.registerQuery(obj{"name": "q", "source_queue": "src", "config_hash": "h"}, http.StatusOK)["query_id"])
	s.push(obj{"queue": "src", "payload": 1, "transactionId": "m1"})
	m := s.popOne("/api/v1/pop/queue/src?consumerGroup=g")
	pid := asStr(t, m["partitionId"])
	staged.armed.Store(true)
	r := s.post("/streams/v1/cycle", obj{"query_id": qid, "partition_id": pid, "consumer_group": "g",
		"state_ops":  arr{obj{"type": "upsert", "key": "a", "value": 1}},
		"push_items": arr{obj{"queue": "sink", "payload": 1}},
		"ack":        obj{"transactionId": "m1", "leaseId": m["leaseId"]}})
	if staged.armed.Load() {
		t.Fatal("the switch was not staged before the cycle")
	}
	if r.Status != http.StatusServiceUnavailable || asObj(t, r.Body)["code"] != "maintenance_mode" {
		t.Fatalf("cycle that raced push maintenance: %d %s, want 503 maintenance_mode", r.Status, r.Raw)
	}
	if got := s.stateRows(obj{"query_id": qid, "partition_id": pid}); len(got) != 0 {
		t.Errorf("a refused cycle wrote state %q", got)
	}
}

// A transaction that pushes and raced the switch is answered as one the
// handler refused itself: 503 maintenance_mode, nothing applied (README:
// "Transactions and stream cycles that push are refused with 503").
func TestTransactionRacingMaintenanceIs503(t *testing.T) {
	s, staged := newSwitchBefore(t, func(cmd fsm.Command) bool { _, ok := cmd.(*fsm.Transaction); return ok })
	s.push(obj{"queue": "src", "payload": 1, "transactionId": "m1"})
	m := s.popOne("/api/v1/pop/queue/src?consumerGroup=g")
	staged.armed.Store(true)
	r := s.post("/api/v1/transaction", obj{"operations": arr{
		obj{"type": "push", "items": arr{obj{"queue": "sink", "payload": 1, "transactionId": "out-1"}}},
		obj{"type": "ack", "transactionId": "m1", "partitionId": m["partitionId"], "leaseId": m["leaseId"],
			"status": "completed", "consumerGroup": "g"},
	}})
	if staged.armed.Load() {
		t.Fatal("the switch was not staged before the transaction")
	}
	if r.Status != http.StatusServiceUnavailable || asObj(t, r.Body)["code"] != "maintenance_mode" {
		t.Fatalf("transaction that raced push maintenance: %d %s, want 503 maintenance_mode", r.Status, r.Raw)
	}
	if s.queueExists("sink") {
		t.Error("a refused transaction created its push's queue")
	}
	// The ack was not applied either: the message is still leased to g.
	d := asObj(t, s.getOK("/api/v1/messages/"+asStr(t, m["partitionId"])+"/m1"))
	if g := asObj(t, asArr(t, d["consumerGroups"])[0]); g["name"] != "g" || g["consumed"] != false || g["leaseExpiresAt"] == nil {
		t.Errorf("after the refused transaction g's view of m1 is %v, want still leased, not consumed", g)
	}
}
