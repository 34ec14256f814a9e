package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/crownmq/crown/httpapi"
)

// lockedBuffer is a log destination the server's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A request answered 500 is logged with its route and its error. README,
// Errors: code internal is "a bug: please report it", but the node wrote
// nothing of it: a storage error met by a read reached the client alone,
// and the operator asked to report it had no line to report.
func TestInternalErrorIsLogged(t *testing.T) {
	var logs lockedBuffer
	s := newStack(t, func(c *httpapi.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	if err := s.State.Close(); err != nil {
		t.Fatal(err)
	}
	status, body := s.get("/api/v1/resources/queues")
	if status != http.StatusInternalServerError {
		t.Fatalf("GET /api/v1/resources/queues with the state closed: %d %v, want 500", status, body)
	}
	var found bool
	for _, line := range strings.Split(logs.String(), "\n") {
		var o map[string]any
		if json.Unmarshal([]byte(line), &o) != nil || o["level"] != "ERROR" {
			continue
		}
		if o["route"] == "queues" && o["status"] == float64(500) && strings.Contains(line, "state machine closed") {
			found = true
		}
	}
	if !found {
		t.Errorf("no ERROR line naming route queues, status 500 and the error; log:\n%s", logs.String())
	}
	// A request that does not fail is not logged.
	before := strings.Count(logs.String(), `"request failed"`)
	s.get("/metrics")
	if after := strings.Count(logs.String(), `"request failed"`); after != before {
		t.Errorf("a 200 answer logged as failed: %s", logs.String())
	}
}
