package main_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// Raft's own timers reach /metrics/prometheus: on the leader the log store's
// appends, the time from dispatch to commit, the apply, and each follower's
// append round trip labelled by peer (once: not again under a name per
// peer); on a follower its own store of what the leader sent.
func TestRaftMetricsExported(t *testing.T) {
	c := tc.Start(t, 3)
	leader := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 5 {
		if _, err := leader.Client().Push(ctx, []tc.PushItem{{Queue: "raftmetrics", Payload: i, TransactionID: fmt.Sprint("m", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	var followers []*tc.Node
	for _, n := range c.Nodes() {
		if n != leader {
			followers = append(followers, n)
		}
	}
	want := map[*tc.Node][]string{leader: {
		"crown_raft_commitTime_count",
		"crown_raft_leader_dispatchLog_count",
		"crown_raft_boltdb_storeLogs_count",
		"crown_raft_fsm_applyBatch_count",
	}}
	for _, f := range followers {
		want[leader] = append(want[leader], fmt.Sprintf("crown_raft_replication_appendEntries_rpc_count{peer_id=%q}", f.ID()))
		want[f] = []string{"crown_raft_rpc_appendEntries_storeLogs_count", "crown_raft_fsm_applyBatch_count"}
	}
	for n, names := range want {
		m, err := nodeMetrics(n)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if m[name] < 1 {
				t.Errorf("%s: %s = %v after 5 pushes, want at least 1", n.ID(), name, m[name])
			}
		}
		for k := range m {
			for _, f := range c.Nodes() {
				if strings.HasPrefix(k, "crown_raft_") && strings.Contains(k, "_"+f.ID()+"_") {
					t.Errorf("%s: %s names a peer (legacy telemetry should be off)", n.ID(), k)
				}
			}
		}
	}
}

// --raft-metrics=false leaves only Crown's own crown_raft_* gauges.
func TestRaftMetricsOff(t *testing.T) {
	c := tc.Start(t, 1, tc.WithArgs("--raft-metrics=false"))
	n := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := n.Client().Push(ctx, []tc.PushItem{{Queue: "raftmetrics", Payload: 1, TransactionID: "a"}}); err != nil {
		t.Fatal(err)
	}
	m, err := nodeMetrics(n)
	if err != nil {
		t.Fatal(err)
	}
	own := []string{"crown_raft_applied_index", "crown_raft_commit_index", "crown_raft_leader", "crown_raft_log_bytes_since_snapshot", "crown_raft_term",
		"crown_raft_first_index", "crown_raft_trailing_logs", "crown_raft_log_file_bytes"}
	if _, ok := m["crown_raft_term"]; !ok {
		t.Fatal("crown_raft_term missing: the scrape did not read the node's own metrics")
	}
	for k := range m {
		if !strings.HasPrefix(k, "crown_raft_") {
			continue
		}
		name, _, _ := strings.Cut(k, "{")
		found := false
		for _, o := range own {
			found = found || name == o
		}
		if !found {
			t.Errorf("%s exported with --raft-metrics=false", k)
		}
	}
}

// --raft-trailing-log-bytes reaches Raft: with 8 KiB entries and a 32 KiB
// budget, a snapshot leaves a handful of entries, not --raft-trailing-logs
// of them, and the metrics show the log's extent moving.
func TestTrailingLogBytesCompactTheLog(t *testing.T) {
	c := tc.Start(t, 1, tc.WithArgs("--raft-snapshot-log-bytes", "131072", "--raft-trailing-log-bytes", "32768"))
	n := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pad := strings.Repeat("x", 8<<10)
	for i := range 40 {
		if _, err := n.Client().Push(ctx, []tc.PushItem{{Queue: "trailing", Payload: pad, TransactionID: fmt.Sprintf("t%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, err := nodeMetrics(n)
		if err != nil {
			t.Fatal(err)
		}
		trailing, first, file := m["crown_raft_trailing_logs"], m["crown_raft_first_index"], m["crown_raft_log_file_bytes"]
		if trailing >= 1 && trailing <= 4 && first > 1 && file >= 320<<10 {
			t.Logf("trailing %v entries, first index %v, log file %v bytes", trailing, first, file)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 320 KiB of pushes: crown_raft_trailing_logs %v (want 1-4 of 8 KiB within 32 KiB), crown_raft_first_index %v (want > 1), crown_raft_log_file_bytes %v",
				trailing, first, file)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Every counter on /metrics/prometheus is named with _total, as Prometheus
// names counters (Raft's own too: the sink named them after their key
// alone, crown_raft_apply, crown_raft_state_leader, so a rate() over them
// read as a gauge's to every tool that goes by the suffix).
func TestEveryCounterIsNamedTotal(t *testing.T) {
	c := tc.Start(t, 1)
	leader := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := leader.Client().Push(ctx, []tc.PushItem{{Queue: "counters", Payload: 1}}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(leader.URL() + "/metrics/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var counters int
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" || f[3] != "counter" {
			continue
		}
		counters++
		if !strings.HasSuffix(f[2], "_total") {
			t.Errorf("counter %s is not named with _total", f[2])
		}
	}
	if counters == 0 || !strings.Contains(string(body), "crown_raft_apply") {
		t.Fatalf("no counters, or no crown_raft_apply, on the leader after a push:\n%s", body)
	}
}
