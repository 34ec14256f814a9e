package httpapi

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
)

// popResult is a lease of n messages over two partitions whose names need
// escaping, with commit times that change, repeat and come back.
func popResult(n int) *fsm.LeaseResult {
	lr := &fsm.LeaseResult{LeaseID: [16]byte{1, 2, 3}, Group: `g"1`}
	base := time.Date(2026, 12, 1, 15, 4, 5, 123456000, time.UTC).UnixMicro()
	for pi, name := range []string{`p\0`, "p1"} {
		lp := fsm.LeasedPartition{Queue: "q", Partition: name, PartitionID: [16]byte{byte(pi + 1)}}
		for i := range n / 2 {
			at := base + int64(i/12)*1000 // a segment of 12 messages per commit time
			if i%5 == 4 {
				at = base // an older segment again
			}
			lp.Messages = append(lp.Messages, fsm.DeliveredMessage{
				ID: [16]byte{byte(pi), byte(i)}, TxID: fmt.Sprintf("tx-%d-%d", pi, i), CreatedAt: at,
				Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), RetryCount: uint64(i % 3),
			})
		}
		lp.Delivered = uint32(len(lp.Messages))
		lr.Partitions = append(lr.Partitions, lp)
	}
	return lr
}

func TestAppendPopRepeatsMembersAndTimesExactly(t *testing.T) {
	lr := popResult(60)
	b, aerr := (&Server{}).appendPop(nil, lr)
	if aerr != nil {
		t.Fatal(aerr)
	}
	var got struct {
		Messages []struct {
			TransactionID, Queue, Partition, PartitionID, LeaseID, ConsumerGroup, CreatedAt string
			Data                                                                            json.RawMessage
			RetryCount                                                                      uint64
		}
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("answer is not JSON: %v\n%s", err, b)
	}
	k := 0
	for _, lp := range lr.Partitions {
		for _, m := range lp.Messages {
			g := got.Messages[k]
			k++
			want := time.UnixMicro(m.CreatedAt).UTC().Format("2006-01-02T15:04:05.000000Z")
			if g.TransactionID != m.TxID || g.Queue != lp.Queue || g.Partition != lp.Partition ||
				g.PartitionID != formatUUID(lp.PartitionID) || g.LeaseID != formatUUID(lr.LeaseID) ||
				g.ConsumerGroup != lr.Group || g.CreatedAt != want || string(g.Data) != string(m.Payload) ||
				g.RetryCount != m.RetryCount {
				t.Fatalf("message %d: %+v, want %s in %s/%s at %s", k-1, g, m.TxID, lp.Queue, lp.Partition, want)
			}
		}
	}
	if k != len(got.Messages) {
		t.Fatalf("%d messages answered, %d leased", len(got.Messages), k)
	}
}

func BenchmarkAppendPop100(b *testing.B) {
	lr := popResult(100)
	s := &Server{}
	var dst []byte
	b.ReportAllocs()
	for b.Loop() {
		var aerr *apiError
		if dst, aerr = s.appendPop(dst[:0], lr); aerr != nil {
			b.Fatal(aerr)
		}
	}
}
