package httpapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/crownmq/crown/httpapi"
)

// README, Limits: a pop takes messages while their stored bytes fit in
// Config.PopMaxBytes (16 MiB by default), and at least one, so its answer,
// built in memory, stays bounded whatever its batch asks for.
func TestPopStopsAtItsBytes(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.PopMaxBytes = 5000 })
	payload := strings.Repeat("x", 2000)
	for i := range 5 {
		s.push(obj{"queue": "heavy", "partition": "p", "payload": payload, "transactionId": fmt.Sprintf("h%d", i)})
	}
	got := 0
	for round := 0; got < 5; round++ {
		p := s.pop("/api/v1/pop/queue/heavy?batch=100&wait=false&autoAck=true")
		if p == nil {
			t.Fatalf("round %d: 204 with %d of 5 messages taken", round, got)
		}
		n := len(asArr(t, p["messages"]))
		if n > 2 {
			t.Fatalf("round %d: %d messages of 2,000 bytes under a 5,000-byte cap, want at most 2", round, n)
		}
		got += n
	}
	if got != 5 {
		t.Fatalf("took %d messages, want 5", got)
	}
}
