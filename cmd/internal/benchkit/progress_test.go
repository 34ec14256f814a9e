package benchkit

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestProgress(t *testing.T) {
	var c Counters
	var w syncBuffer
	p := StartProgress(&w, &c, "auto") // not a terminal: a line per report
	c.Produced.Add(1234)
	c.Consumed.Add(1000)
	time.Sleep(1100 * time.Millisecond)
	p.Stop()
	p.Stop() // twice is harmless
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "produced 1,234 (") || !strings.Contains(lines[1], "consumed 1,000 (") {
		t.Fatalf("progress lines: %q", lines)
	}

	var off syncBuffer
	p = StartProgress(&off, &c, "off")
	p.Stop()
	if off.String() != "" {
		t.Fatalf("progress off printed %q", off.String())
	}
}
