package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A duration in crownd's own JSON log lines says its unit, as in the text
// format and in Raft's lines: every leader's start logs `"timers started
// (leader)" ... "retention_interval":5000000000` otherwise, a bare number
// a reader has to know is nanoseconds (maintenance.go; also raftnode's
// "retry_in"). README/brief: structured logs (log/slog).
func TestJSONLogWritesDurationsWithTheirUnit(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		cfg, err := parseConfig([]string{"--log-format", format}, noEnv, &bytes.Buffer{}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		newLogger(cfg, &out).Info("timers started (leader)", "retention_interval", 5*time.Second, "retention_batch", 1000)
		line := strings.TrimSpace(out.String())
		if format == "text" {
			if !strings.Contains(line, "retention_interval=5s") {
				t.Errorf("text log line %q, want retention_interval=5s", line)
			}
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("json log line %q: %v", line, err)
		}
		if m["retention_interval"] != "5s" || m["retention_batch"] != float64(1000) || m["node"] != "node1" {
			t.Errorf("json log line %s: want \"retention_interval\":\"5s\", \"retention_batch\":1000, \"node\":\"node1\"", line)
		}
	}
}
