package main

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/crownmq/crown/cmd/internal/benchkit"
)

func TestPopDeliveries(t *testing.T) {
	body := []byte(`{"success":true,"queue":"q","messages":[
		{"id":"m1","transactionId":"p0-1","partitionId":"P1","leaseId":"L1","data":{"p":0,"s":1,"pad":"x\"y"},"retryCount":0},
		{"transactionId":"p0-\u0032","partitionId":"P2","leaseId":null,"data":"abc","extra":[1,{"a":2}]}
	],"partitionsClaimed":2}`)
	ds, err := popDeliveries(body)
	if err != nil {
		t.Fatal(err)
	}
	want := []benchkit.Delivery{
		{TxnID: "p0-1", Bytes: len(`{"p":0,"s":1,"pad":"x\"y"}`), Handle: crownHandle{partitionID: "P1", leaseID: "L1"}},
		{TxnID: "p0-2", Bytes: len(`"abc"`), Handle: crownHandle{partitionID: "P2"}},
	}
	if !reflect.DeepEqual(ds, want) {
		t.Fatalf("got %+v\nwant %+v", ds, want)
	}
	for _, bad := range []string{``, `{"messages":[{"transactionId":1}`, `[1]`, `{"messages":[1]}`} {
		if _, err := popDeliveries([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestAckBatchRoundTrip(t *testing.T) {
	ds := []benchkit.Delivery{
		{TxnID: "a\"1", Handle: crownHandle{partitionID: "P1", leaseID: "L1"}},
		{TxnID: "b", Handle: crownHandle{partitionID: "P2"}},
	}
	for _, group := range []string{"", "g\\1"} {
		var got struct {
			ConsumerGroup   string `json:"consumerGroup"`
			Acknowledgments []struct {
				TransactionID string  `json:"transactionId"`
				PartitionID   string  `json:"partitionId"`
				LeaseID       *string `json:"leaseId"`
				Status        string  `json:"status"`
			} `json:"acknowledgments"`
		}
		b := appendAckBatch(nil, group, ds)
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		a := got.Acknowledgments
		if got.ConsumerGroup != group || len(a) != 2 || a[0].TransactionID != `a"1` || a[0].LeaseID == nil ||
			*a[0].LeaseID != "L1" || a[1].LeaseID != nil || a[1].PartitionID != "P2" || a[1].Status != "completed" {
			t.Errorf("%s decodes to %+v", b, got)
		}
	}
}

func TestAnswerResults(t *testing.T) {
	ok, err := ackResults([]byte(`[{"success":true,"error":null},{"success":false,"error":"lease expired"},{"success":true,"error":"x"},{"success":true}]`))
	if err != nil || !reflect.DeepEqual(ok, []bool{true, false, false, true}) {
		t.Fatalf("ack results %v %v", ok, err)
	}
	pr, err := pushResults([]byte(`[{"status":"queued","error":null},{"status":"failed","error":"boom"}]`))
	if err != nil || !reflect.DeepEqual(pr, []pushResult{{Status: "queued"}, {Status: "failed", Error: "boom"}}) {
		t.Fatalf("push results %+v %v", pr, err)
	}
	for _, bad := range []string{`{}`, `[1]`, `[{"success":true}`} {
		if _, err := ackResults([]byte(bad)); err == nil {
			t.Errorf("ack %q: no error", bad)
		}
		if _, err := pushResults([]byte(bad)); err == nil {
			t.Errorf("push %q: no error", bad)
		}
	}
}

// FuzzBenchAnswers: whatever a node answers, the load generator's readers
// return an error or a result, never panic.
func FuzzBenchAnswers(f *testing.F) {
	f.Add([]byte(`{"messages":[{"transactionId":"t","partitionId":"p","leaseId":null,"data":{}}]}`))
	f.Add([]byte(`[{"success":true,"error":null}]`))
	f.Add([]byte(`[{"status":"queued"}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		popDeliveries(b)
		ackResults(b)
		pushResults(b)
	})
}
