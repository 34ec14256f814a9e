package workload

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crownmq/crown/cmd/crown-chaos/checker"
	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

// inDoubtBroker is one node with one partition that applies every ack but
// answers the first three requests of each lease 500 (the answer lost after
// the commit, as when the node dies between applying and replying): every
// completed ack of the workload ends in doubt, its messages consumed and
// never delivered again.
type inDoubtBroker struct {
	*httptest.Server
	mu       sync.Mutex
	txns     []string
	position int
	lease    string
	leaseEnd int // index after the leased batch
	leaseExp time.Time
	nextID   int
	attempts map[string]int
}

func newInDoubtBroker(t *testing.T) *inDoubtBroker {
	b := &inDoubtBroker{attempts: map[string]int{}}
	b.Server = httptest.NewServer(http.HandlerFunc(b.serve))
	t.Cleanup(b.Close)
	return b
}

func (b *inDoubtBroker) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case r.Method == "POST" && r.URL.Path == "/api/v1/push":
		var body struct {
			Items []PushItem `json:"items"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		var out []PushResult
		for _, it := range body.Items {
			st := "duplicate"
			if !slices.Contains(b.txns, it.TransactionID) {
				b.txns = append(b.txns, it.TransactionID)
				st = "queued"
			}
			out = append(out, PushResult{Status: st, MessageID: "id-" + it.TransactionID})
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(out)
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/api/v1/pop/"):
		if (b.lease != "" && time.Now().Before(b.leaseExp)) || b.position >= len(b.txns) {
			b.mu.Unlock()
			time.Sleep(20 * time.Millisecond) // a short long-poll
			b.mu.Lock()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		var batch int
		fmt.Sscan(r.URL.Query().Get("batch"), &batch)
		b.nextID++
		b.lease, b.leaseExp = fmt.Sprintf("lease-%d", b.nextID), time.Now().Add(5*time.Second)
		b.leaseEnd = min(b.position+max(batch, 1), len(b.txns))
		var msgs []Message
		for i := b.position; i < b.leaseEnd; i++ {
			seq, _ := history.ParseTxn(b.txns[i])
			msgs = append(msgs, Message{ID: "id-" + b.txns[i], TransactionID: b.txns[i], Partition: "p0", PartitionID: "pid",
				LeaseID: b.lease, Data: json.RawMessage(fmt.Sprintf(`{"s":%d}`, seq))})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"messages": msgs})
	case r.Method == "POST" && r.URL.Path == "/api/v1/ack/batch":
		var body struct {
			Acks []Ack `json:"acknowledgments"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		var out []AckResult
		for _, a := range body.Acks {
			i := slices.Index(b.txns, a.TransactionID)
			switch {
			case i >= 0 && i < b.position:
				out = append(out, AckResult{Success: true}) // a re-ack of a consumed message
			case i >= 0 && a.LeaseID == b.lease && a.Status == "completed":
				b.position = i + 1
				if b.position >= b.leaseEnd {
					b.lease = ""
				}
				out = append(out, AckResult{Success: true})
			default:
				e := "Invalid or expired lease"
				out = append(out, AckResult{Error: &e})
			}
		}
		b.attempts[body.Acks[0].LeaseID]++
		if b.attempts[body.Acks[0].LeaseID] <= 3 {
			w.WriteHeader(http.StatusInternalServerError)
			_ = json.NewEncoder(w).Encode(map[string]string{"code": "internal", "error": "answer lost"})
			return
		}
		_ = json.NewEncoder(w).Encode(out)
	default:
		http.NotFound(w, r)
	}
}

// A completed ack whose every attempt went unanswered may have applied: the
// messages are consumed and no consumer sees them again, so nothing but an
// answer to that ack can show the group completed them. The drain used to
// wait for a completion that could never come (and the checker, which only
// asked whether each message was delivered, passed such a run whatever
// became of the messages). Drain re-sends acks in doubt until answered.
func TestDrainResendsCompletedAcksInDoubt(t *testing.T) {
	srv := newInDoubtBroker(t)
	path := filepath.Join(t.TempDir(), "history.jsonl")
	hist, err := history.Create(path, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w := New(Config{RunID: "run", Nodes: []Node{{ID: "node1", URL: srv.URL}}, Queues: []string{"q"}, Partitions: []string{"p0"},
		Groups: []string{"g1"}, ConsumersPerGroup: 1, PushRate: 20, MaxPushBatch: 1, NoFailures: true, Seed: 1,
		RequestTimeout: 2 * time.Second}, hist, NewClient())
	w.Start(t.Context())
	defer func() {
		w.Abort()
		w.Wait()
	}()
	time.Sleep(300 * time.Millisecond)
	w.StopProducers(time.Now().Add(2 * time.Second))
	ok, missing := w.Drain(15 * time.Second)
	w.StopConsumers()
	if err := hist.Close(); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("drain incomplete: %s", missing)
	}
	ops, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	resent := slices.ContainsFunc(ops, func(op history.Op) bool {
		return op.Kind == history.KindAck && op.Outcome == history.OK && strings.HasSuffix(op.Label, "-resent")
	})
	if !resent {
		t.Fatalf("no re-sent ack answered ok in the history")
	}
	// The checker, which wants every message pushed ok completed by an
	// ack answered success, passes the history.
	if res := checker.Check(ops, checker.Options{}); !res.OK {
		t.Fatalf("checker: %v, notes %q, first violations %v", res.ViolationKinds, res.Notes, res.Violations)
	}
}
