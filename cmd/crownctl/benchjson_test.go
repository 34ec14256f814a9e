package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/crownmq/crown/cmd/internal/benchkit"
)

func TestPopDeliveries(t *testing.T) {
	body := []byte(`{"success":true,"queue":"q","messages":[
		{"id":"m1","transactionId":"p0-1","partitionId":"P1","leaseId":"L1","data":{"p":0,"s":1,"pad":"x\"y"},"retryCount":0},
		{"transactionId":"p0-\u0032","partitionId":"P2","leaseId":null,"data":"abc","extra":[1,{"a":2}]}
	],"partitionsClaimed":2}`)
	ds, err := popDeliveries(body, 1) // fewer than the answer holds
	if err != nil {
		t.Fatal(err)
	}
	want := []benchkit.Delivery{
		{TxnID: "p0-1", Bytes: len(`{"p":0,"s":1,"pad":"x\"y"}`), Handle: &crownHandle{partitionID: "P1", leaseID: "L1"}},
		{TxnID: "p0-2", Bytes: len(`"abc"`), Handle: &crownHandle{partitionID: "P2"}},
	}
	if !reflect.DeepEqual(ds, want) {
		t.Fatalf("got %+v\nwant %+v", ds, want)
	}
	for _, bad := range []string{``, `{"messages":[{"transactionId":1}`, `[1]`, `{"messages":[1]}`} {
		if _, err := popDeliveries([]byte(bad), 100); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestPopDeliveriesShareStrings: messages of one partition share its id and
// lease, and a message after a change of partition gets the new ones, also
// when the answer holds more messages than the hint.
func TestPopDeliveriesShareStrings(t *testing.T) {
	body := []byte(`{"messages":[
		{"transactionId":"a","partitionId":"P1","leaseId":"L1","data":1},
		{"transactionId":"b","partitionId":"P1","leaseId":"L1","data":2},
		{"transactionId":"c","partitionId":"P2","leaseId":"L2","data":3},
		{"transactionId":"d","partitionId":"P1","leaseId":null,"data":4},
		{"transactionId":"e","partitionId":"P\u0031","leaseId":"L1","data":5}]}`)
	want := []crownHandle{{"P1", "L1"}, {"P1", "L1"}, {"P2", "L2"}, {"P1", ""}, {"P1", "L1"}}
	for _, hint := range []int{0, 2, 5, 100} {
		ds, err := popDeliveries(body, hint)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != len(want) {
			t.Fatalf("hint %d: %d deliveries", hint, len(ds))
		}
		for i, d := range ds {
			if h := *d.Handle.(*crownHandle); h != want[i] || d.TxnID != string(rune('a'+i)) {
				t.Errorf("hint %d: delivery %d is %s %+v, want %+v", hint, i, d.TxnID, h, want[i])
			}
		}
	}
}

// TestReadAnswer: an answer is read whole into the storage it is given,
// whether the server stated its length, stated none or stated a wrong one.
func TestReadAnswer(t *testing.T) {
	long := strings.Repeat("x", 10_000)
	for _, tc := range []struct {
		name   string
		body   string
		length int64
		buf    []byte
	}{
		{"stated", long, int64(len(long)), nil},
		{"unstated", long, -1, nil},
		{"stated short", long, 10, nil},
		{"empty", "", 0, nil},
		{"into old storage", long, -1, make([]byte, 3, 20_000)},
	} {
		got, err := readAnswer(tc.buf[:0], strings.NewReader(tc.body), tc.length, maxAnswer)
		if err != nil || string(got) != tc.body {
			t.Errorf("%s: %d bytes, %v", tc.name, len(got), err)
		}
		if tc.buf != nil && &got[0] != &tc.buf[:1][0] {
			t.Errorf("%s: the storage given was not used", tc.name)
		}
	}
	// Grown once to the stated length: the read that finds the end must
	// not grow it again (and copy the answer). 8,192 bytes is an allocation
	// size class of its own, so a buffer of exactly the answer's length has
	// no room left for that read.
	body := bytes.Repeat([]byte("x"), 8192)
	got, err := readAnswer(nil, bytes.NewReader(body), int64(len(body)), maxAnswer)
	if once := cap(slices.Grow([]byte(nil), len(body)+1)); err != nil || cap(got) != once {
		t.Errorf("an answer of stated length: capacity %d, want %d (grown once), %v", cap(got), once, err)
	}
	if _, err := readAnswer(nil, iotest.ErrReader(errors.New("reset")), -1, maxAnswer); err == nil {
		t.Error("a failed read: no error")
	}
	// An answer of exactly the limit is whole; one byte more is an error,
	// never a shorter answer, whatever length the server stated. One byte
	// at a time: the end is found only by a read of its own.
	for _, length := range []int64{-1, 10, 11} {
		if got, err := readAnswer(nil, iotest.OneByteReader(strings.NewReader(long[:10])), length, 10); err != nil || len(got) != 10 {
			t.Errorf("an answer of the limit, stated length %d: %d bytes, %v", length, len(got), err)
		}
		if _, err := readAnswer(nil, iotest.OneByteReader(strings.NewReader(long[:11])), length, 10); err == nil {
			t.Errorf("an answer over the limit, stated length %d: no error", length)
		}
	}
}

// TestAnswerLimit: the bench reads a pop answer of --pop-batch messages of
// the largest payload Crown stores (or of --payload-size, when larger)
// whole, and never less than maxAnswer.
func TestAnswerLimit(t *testing.T) {
	for _, tc := range []struct {
		batch, payload int
		atLeast        int64
	}{
		{100, 256, 100 * (8<<20 + 590)},
		{1, 256, maxAnswer},
		{1, 1 << 30, 1<<30 + 590},
	} {
		got := answerLimit(&benchkit.Config{PopBatch: tc.batch, PayloadSize: tc.payload})
		if got < tc.atLeast || got < maxAnswer {
			t.Errorf("pop batch %d of %d bytes: limit %d, want at least %d", tc.batch, tc.payload, got, max(tc.atLeast, maxAnswer))
		}
	}
	for _, c := range []benchkit.Config{{PopBatch: math.MaxInt, PayloadSize: 256}, {PopBatch: 2, PayloadSize: math.MaxInt - 1}} {
		if got := answerLimit(&c); got != math.MaxInt64 {
			t.Errorf("an overflowing bound (%d x %d): %d, want the largest", c.PopBatch, c.PayloadSize, got)
		}
	}
}

func TestAckBatchRoundTrip(t *testing.T) {
	ds := []benchkit.Delivery{
		{TxnID: "a\"1", Handle: &crownHandle{partitionID: "P1", leaseID: "L1"}},
		{TxnID: "b", Handle: &crownHandle{partitionID: "P2"}},
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
	pr, err := pushResults([]byte(`[{"status":"queued","error":null},{"status":"failed","error":"boom"},{"status":"duplicate"},{"status":"dupl\u0069cate"}]`))
	if err != nil || !reflect.DeepEqual(pr, []pushResult{{Status: "queued"}, {Status: "failed", Error: "boom"}, {Status: "duplicate"}, {Status: "duplicate"}}) {
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
		popDeliveries(b, 2)
		ackResults(b)
		pushResults(b)
	})
}

// benchAnswers are a pop answer of 100 messages of the benchmark's 256-byte
// payloads and the answer to their ack batch, in the server's shapes.
func benchAnswers() (pop, ack []byte) {
	pad := strings.Repeat("x", 220)
	pop = []byte(`{"success":true,"queue":"bench-q0","partition":"p3","partitionId":"01a24a7e-03d0-7000-8000-00000046e47c","leaseId":"01a24a7e-03dd-7000-8000-00000046e47f","consumerGroup":"bench-g0","partitionsClaimed":1,"messages":[`)
	ack = []byte(`[`)
	for i := range 100 {
		if i > 0 {
			pop, ack = append(pop, ','), append(ack, ',')
		}
		txn := `"run-3-` + strings.Repeat("1", 5) + string(rune('0'+i%10)) + `"`
		pop = append(pop, `{"id":"01a24a7e-03d0-7000-8000-00000046e47d","transactionId":`+txn+
			`,"queue":"bench-q0","partition":"p3","partitionId":"01a24a7e-03d0-7000-8000-00000046e47c","leaseId":"01a24a7e-03dd-7000-8000-00000046e47f","consumerGroup":"bench-g0","data":{"p":3,"s":11111,"pad":"`+pad+
			`"},"traceId":null,"producerSub":null,"createdAt":"2026-12-06T08:35:02.224838Z","retryCount":0}`...)
		ack = append(ack, `{"index":0,"transactionId":`+txn+`,"success":true,"error":null,"queueName":"bench-q0","partitionName":"p3","leaseReleased":false,"dlq":false,"dropped":false}`...)
	}
	return append(pop, "]}"...), append(ack, ']')
}

// BenchmarkPopDeliveries reads a pop answer of 100 messages, as each
// consumer does for every batch on the machine it measures.
func BenchmarkPopDeliveries(b *testing.B) {
	pop, _ := benchAnswers()
	b.SetBytes(int64(len(pop)))
	b.ReportAllocs()
	for b.Loop() {
		if ds, err := popDeliveries(pop, 100); err != nil || len(ds) != 100 {
			b.Fatal(len(ds), err)
		}
	}
}

// BenchmarkAckResults reads the answer to an ack batch of 100.
func BenchmarkAckResults(b *testing.B) {
	_, ack := benchAnswers()
	b.SetBytes(int64(len(ack)))
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := ackResults(ack); err != nil || len(ok) != 100 || !ok[99] {
			b.Fatal(len(ok), err)
		}
	}
}
