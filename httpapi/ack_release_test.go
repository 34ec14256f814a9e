package httpapi_test

import (
	"testing"
	"time"
)

// queen-api.md 3.7, result fields: "leaseReleased | bool | The group's lease
// on the partition ended as a result of this ack."; 4.4: "A lease whose
// expiresAt has passed is treated exactly as absent."
//
// One lease ends once. A failed ack releases it (leaseReleased: true); a
// later completed ack of the same batch ends no lease and must say false.
// Likewise a completed ack after the lease expired ends nothing: what is
// reported is the end of a live lease, not of the delivered batch.
func TestHTTPAckLeaseReleasedOnlyWhenALeaseEnded(t *testing.T) {
	s := newStack(t)
	s.configure(obj{"queue": "rf", "options": obj{"leaseTime": 1}})
	s.push(obj{"queue": "rf", "partition": "p", "payload": 1, "transactionId": "t1"})
	m := s.popOne("/api/v1/pop/queue/rf")
	res := s.ack(obj{"transactionId": "t1", "partitionId": m["partitionId"], "leaseId": m["leaseId"], "status": "failed"})
	if res["success"] != true || res["leaseReleased"] != true {
		t.Fatalf("failed ack: %v, want success and leaseReleased true", res)
	}
	// The lease is gone; this ack (no leaseId, so accepted) consumes t1 but ends no lease.
	res = s.ack(obj{"transactionId": "t1", "partitionId": m["partitionId"]})
	if res["success"] != true || res["leaseReleased"] != false {
		t.Errorf("completed ack after the lease was released by a failed ack: %v, want success and leaseReleased false", res)
	}

	s.push(obj{"queue": "rf", "partition": "p", "payload": 2, "transactionId": "t2"})
	m = s.popOne("/api/v1/pop/queue/rf")
	time.Sleep(1100 * time.Millisecond) // leaseTime 1: the lease expires
	res = s.ack(obj{"transactionId": "t2", "partitionId": m["partitionId"]})
	if res["success"] != true || res["leaseReleased"] != false {
		t.Errorf("completed ack after the lease expired: %v, want success and leaseReleased false", res)
	}
}
