package httpapi_test

import (
	"net/http"
	"testing"
)

// queen-api.md 4.15: the results of a transaction's pushes carry messageId,
// partitionId, transactionId and queueName. A push reported duplicate
// (4.13, section 6 decisions) names the partition that holds the original
// message like a queued one does, so a client that retries a whole
// transaction after a lost answer reads the same partitionId both times.
func TestTransactionDuplicatePushResultNamesItsPartition(t *testing.T) {
	s := newStack(t)
	body := obj{"operations": arr{obj{"type": "push", "items": arr{
		obj{"queue": "txd", "partition": "p", "payload": 1, "transactionId": "once"},
	}}}}
	var first obj
	for attempt := 0; attempt < 2; attempt++ {
		r := s.post("/api/v1/transaction", body)
		if r.Status != http.StatusOK || asObj(t, r.Body)["success"] != true {
			t.Fatalf("transaction %d: %d %s", attempt, r.Status, r.Raw)
		}
		res := asObj(t, asArr(t, asObj(t, r.Body)["results"])[0])
		if attempt == 0 {
			first = res
			continue
		}
		if res["status"] != "duplicate" || res["messageId"] != first["messageId"] {
			t.Fatalf("retried push %v, want a duplicate of %v", res, first)
		}
		wantKeys(t, "duplicate push result", res,
			"index", "type", "success", "status", "transactionId", "messageId", "partitionId", "queueName")
		if res["partitionId"] != first["partitionId"] {
			t.Errorf("duplicate partitionId %v, want %v", res["partitionId"], first["partitionId"])
		}
	}
}
