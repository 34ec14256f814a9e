package workload

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// deleteServer is one node whose confirmed messages are gone before anyone
// deletes them: every delete that reaches the store answers success:false
// "Message not found" (queen-api.md 3.12). before answers the first delete
// of each message instead, when set, to model an earlier attempt.
type deleteServer struct {
	*httptest.Server
	mu       sync.Mutex
	attempts map[string]int // transaction id -> deletes received
}

func newDeleteServer(t *testing.T, before func(http.ResponseWriter)) *deleteServer {
	t.Helper()
	const pid = "6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09"
	s := &deleteServer{attempts: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		txn := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		switch {
		case r.Method == "POST" && r.URL.Path == "/api/v1/push":
			var body struct {
				Items []PushItem `json:"items"`
			}
			_ = json.NewDecoder(r.Body).Decode(&body)
			var out []map[string]any
			for i, it := range body.Items {
				out = append(out, map[string]any{"index": i, "status": "queued", "transaction_id": it.TransactionID,
					"message_id": "id-" + it.TransactionID, "partition_id": pid, "queueName": it.Queue})
			}
			_ = json.NewEncoder(w).Encode(out)
		case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/api/v1/pop/"):
			w.WriteHeader(http.StatusNoContent)
		case r.Method == "DELETE" && strings.HasPrefix(r.URL.Path, "/api/v1/messages/"):
			s.mu.Lock()
			s.attempts[txn]++
			n := s.attempts[txn]
			s.mu.Unlock()
			if n == 1 && before != nil {
				before(w)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"success": false, "partitionId": pid, "transactionId": txn,
				"message": "Message not found"})
		case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/api/v1/messages/"):
			s.mu.Lock()
			n := s.attempts[txn]
			s.mu.Unlock()
			if n > 0 {
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(`{"error":"Message not found"}`))
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"transactionId": txn, "partitionId": pid})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// runDeleter runs the deletion worker against s until it deleted a message,
// and returns what VerifyDeletes reports.
func runDeleter(t *testing.T, s *deleteServer) (DeleteCounts, []string) {
	t.Helper()
	w := New(Config{RunID: "r1", Nodes: []Node{{ID: "node1", URL: s.URL}}, Deletes: true, Seed: 1,
		RequestTimeout: 2 * time.Second}, nil, NewClient())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.Start(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for w.DeleteCounts().Deleted == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	w.StopProducers(time.Now())
	w.Wait()
	dc := w.DeleteCounts()
	if dc.Deleted == 0 {
		t.Fatalf("the deletion worker deleted nothing: %+v", dc)
	}
	return dc, w.VerifyDeletes(ctx)
}

// A confirmed message must still be there when its first delete arrives:
// "not found" to a delete that no earlier attempt can have preceded means
// the message vanished, and VerifyDeletes must name it.
func TestDeleteNotFoundOnFirstAttemptIsReported(t *testing.T) {
	s := newDeleteServer(t, nil)
	dc, problems := runDeleter(t, s)
	s.mu.Lock()
	for txn, n := range s.attempts {
		if n != 1 {
			t.Fatalf("delete of %s sent %d times; the case needs exactly one attempt", txn, n)
		}
	}
	s.mu.Unlock()
	if len(problems) == 0 {
		t.Fatalf("%d confirmed messages, %d deletes each answered \"Message not found\" on the first and only attempt: "+
			"no problem reported (want one per such message naming it)", dc.Pushed, dc.Deleted)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for txn := range s.attempts {
		if !strings.Contains(strings.Join(problems, "\n"), txn) {
			t.Errorf("no problem names %s: %v", txn, problems)
		}
	}
}

// "Not found" is the expected answer to a retry after an attempt that may
// have applied (here a 500: unknown outcome), and a problem only after
// attempts that certainly did not (503 no_leader: nothing applied).
func TestDeleteNotFoundAfterEarlierAttempt(t *testing.T) {
	for _, tc := range []struct {
		name, code string
		status     int
		problem    bool
	}{
		{"unknown outcome", "internal", http.StatusInternalServerError, false},
		{"failed", "no_leader", http.StatusServiceUnavailable, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newDeleteServer(t, func(w http.ResponseWriter) {
				w.WriteHeader(tc.status)
				_ = json.NewEncoder(w).Encode(map[string]string{"code": tc.code, "error": tc.name})
			})
			_, problems := runDeleter(t, s)
			if got := len(problems) > 0; got != tc.problem {
				t.Fatalf("first delete answered %d %s, the retry not found: problems %v; want problems: %v",
					tc.status, tc.code, problems, tc.problem)
			}
		})
	}
}
