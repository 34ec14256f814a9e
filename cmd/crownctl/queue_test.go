package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/crownmq/crown/cmd/internal/testcluster"
)

// cli runs crownctl against url and fails the test unless it exits with
// want; it returns stdout (stderr on a failure).
func cli(t *testing.T, url string, want int, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCLI(t, url, args...)
	if code != want {
		t.Fatalf("crownctl %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, stdout, stderr)
	}
	if want != exitOK {
		return stderr
	}
	return stdout
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Fatalf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}

// The queue commands administer a real node's queues through the OJS API,
// and what they change shows on the Queen side (capacity refuses a push).
func TestQueueCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts crownd")
	}
	node := testcluster.Start(t, 1).Node(0)
	u := node.URL()
	ctx := context.Background()

	out := cli(t, u, exitOK, "queue", "create", "payments",
		`{"capacity":{"max_depth":3},"processing":{"visibility_timeout":1800}}`)
	mustContain(t, "create", out, "name:", "payments", "state:", "active", "capacity.max_depth", "processing.visibility_timeout")
	out = cli(t, u, exitOK, "queue", "list")
	mustContain(t, "list", out, "NAME", "payments", "default")

	push := func(i int) error {
		_, err := node.Client().Push(ctx, []testcluster.PushItem{{Queue: "payments", Payload: i, TransactionID: fmt.Sprint("p", i)}})
		return err
	}
	for i := range 3 {
		if err := push(i); err != nil {
			t.Fatal(err)
		}
	}
	var he *testcluster.HTTPError
	if err := push(3); !errors.As(err, &he) || he.Status != 429 {
		t.Fatalf("push past max_depth 3: %v (want 429)", err)
	}
	out = cli(t, u, exitOK, "queue", "stats", "payments")
	mustContain(t, "stats", out, "depth:", "max_depth:")
	var stats struct {
		Stats struct {
			Depth    int64 `json:"depth"`
			MaxDepth int64 `json:"max_depth"`
		} `json:"stats"`
	}
	if err := json.Unmarshal([]byte(cli(t, u, exitOK, "--json", "queue", "stats", "payments")), &stats); err != nil ||
		stats.Stats.Depth != 3 || stats.Stats.MaxDepth != 3 {
		t.Fatalf("stats --json: %v %+v", err, stats)
	}

	// A refused patch names the field and changes nothing.
	stderr := cli(t, u, exitError, "queue", "patch", "payments", `{"capacity":{"max_depth":-1}}`)
	mustContain(t, "refused patch", stderr, "field capacity.max_depth", "HTTP 422")
	if strings.Contains(stderr, "{") {
		t.Fatalf("the OJS error body is printed raw: %s", stderr)
	}
	// null removes the override: the push is accepted again.
	cli(t, u, exitOK, "queue", "patch", "payments", `{"capacity":{"max_depth":null}}`)
	if err := push(3); err != nil {
		t.Fatalf("push after removing max_depth: %v", err)
	}

	mustContain(t, "pause", cli(t, u, exitOK, "queue", "pause", "payments"), "paused")
	var got struct {
		Queue struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"queue"`
	}
	if err := json.Unmarshal([]byte(cli(t, u, exitOK, "--json", "queue", "get", "payments")), &got); err != nil ||
		got.Queue.Name != "payments" || got.Queue.State != "paused" {
		t.Fatalf("get --json after pause: %v %+v", err, got)
	}
	if msgs, err := node.Client().Pop(ctx, "payments", testcluster.PopParams{Batch: 10}); err != nil || len(msgs) != 0 {
		t.Fatalf("Queen pop from a paused queue: %v, %d messages", err, len(msgs))
	}
	mustContain(t, "resume", cli(t, u, exitOK, "queue", "resume", "payments"), "active")

	cli(t, u, exitUsage, "queue", "purge", "payments") // no --yes: nothing removed
	mustContain(t, "purge", cli(t, u, exitOK, "queue", "purge", "payments", "--yes"), "purged 4 messages from payments")

	stderr = cli(t, u, exitError, "queue", "delete", "default")
	mustContain(t, "delete default", stderr, "cannot be deleted (conflict, queue_protected, HTTP 409)")
	mustContain(t, "delete", cli(t, u, exitOK, "queue", "delete", "payments", "--strategy", "reject"), "deleted payments (reject")
	cli(t, u, exitError, "queue", "get", "payments")
}

// The policy commands bind new queues by glob and priority, and the
// _default policy applies where no named one matches.
func TestPolicyCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts crownd")
	}
	u := testcluster.Start(t, 1).Node(0).URL()

	cli(t, u, exitOK, "policy", "put", "batch", `{"match":"batch.*","priority":10,"config":{"capacity":{"max_depth":5}}}`)
	cli(t, u, exitOK, "policy", "put", "wide", `{"match":"*","priority":1,"config":{"processing":{"visibility_timeout":90}}}`)
	cli(t, u, exitOK, "policy", "put", "_default", `{"processing":{"max_concurrency":7}}`)
	out := cli(t, u, exitOK, "policy", "list")
	mustContain(t, "policy list", out, "batch", "batch.*", "wide", "_default")
	mustContain(t, "policy get", cli(t, u, exitOK, "policy", "get", "batch"), "batch.*", "max_depth")

	var q struct {
		Queue struct {
			Policy *string                   `json:"policy"`
			Config map[string]map[string]any `json:"config"`
		} `json:"queue"`
	}
	if err := json.Unmarshal([]byte(cli(t, u, exitOK, "--json", "queue", "create", "batch.one")), &q); err != nil {
		t.Fatal(err)
	}
	if q.Queue.Policy == nil || *q.Queue.Policy != "batch" || q.Queue.Config["capacity"]["max_depth"] != 5.0 ||
		q.Queue.Config["processing"]["max_concurrency"] != 7.0 {
		t.Fatalf("batch.one bound %v with config %v (want policy batch, max_depth 5, max_concurrency 7 from _default)",
			q.Queue.Policy, q.Queue.Config)
	}
	// A patch of an existing policy is a merge.
	cli(t, u, exitOK, "policy", "put", "batch", `{"priority":20}`)
	mustContain(t, "merged policy", cli(t, u, exitOK, "policy", "get", "batch"), "batch.*", "20")

	cli(t, u, exitOK, "policy", "delete", "batch")
	if out := cli(t, u, exitOK, "policy", "list"); strings.Contains(out, "batch.*") {
		t.Fatalf("deleted policy still listed:\n%s", out)
	}
	stderr := cli(t, u, exitError, "policy", "put", "bad", `{"match":"x","priority":"high"}`)
	mustContain(t, "bad policy", stderr, "field priority", "HTTP 400")
}
