//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

// historyOps is a clean, converged history to which the runner added
// failure, as runner.fail does: a note "failure: ..." (none when empty).
func historyOps(failure string) []history.Op {
	txn := history.Txn("r1", "chaos-q1", "p0", 0)
	yes := true
	ops := []history.Op{
		{ID: 1, Kind: history.KindMeta, Meta: &history.Meta{RunID: "r1", Queues: []string{"chaos-q1"}, Partitions: []string{"p0"},
			Groups: []string{""}, LeaseSeconds: 5}},
		{ID: 2, Kind: history.KindPush, Start: 1e6, End: 2e6, Outcome: history.OK, Queue: "chaos-q1",
			Items: []history.Item{{Partition: "p0", Seq: 0, Txn: txn, Status: "queued", MsgID: "m0"}}},
		{ID: 3, Kind: history.KindPop, Start: 3e6, End: 4e6, Outcome: history.OK, Queue: "chaos-q1", Lease: "L",
			Items: []history.Item{{Partition: "p0", Seq: 0, Txn: txn, MsgID: "m0", DataSeq: 0}}},
		{ID: 4, Kind: history.KindAck, Start: 5e6, End: 6e6, Outcome: history.OK, Queue: "chaos-q1", Status: "completed", Lease: "L",
			Items: []history.Item{{Partition: "p0", Seq: 0, Txn: txn, Success: true}}},
	}
	if failure != "" {
		ops = append(ops, history.Op{ID: 5, Kind: history.KindNote, Start: 7e6, Label: "failure: " + failure})
	}
	return append(ops, history.Op{ID: 6, Kind: history.KindFinal, Start: 8e6, End: 9e6, Label: "final", Passed: &yes,
		States: []history.NodeState{
			{Node: "node1", AppliedIndex: 9, Digest: "d", Totals: map[string]int64{"chaos-q1/p0": 1}},
			{Node: "node2", AppliedIndex: 9, Digest: "d", Totals: map[string]int64{"chaos-q1/p0": 1}},
			{Node: "node3", AppliedIndex: 9, Digest: "d", Totals: map[string]int64{"chaos-q1/p0": 1}}}})
}

// writeHistory writes historyOps(failure) to a file and returns its path.
func writeHistory(t *testing.T, failure string) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	ops := historyOps(failure)
	for i := range ops {
		if err := enc.Encode(&ops[i]); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "history.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// `check` and `report` re-judge a run from its history alone, so a failure
// the run recorded (here the message-deletion check) fails them as it
// failed the run: they print FAIL and exit 1, in text and in JSON.
func TestCLICheckExitsNonZeroOnRecordedFailure(t *testing.T) {
	path := writeHistory(t, "message deletion: node2: deleted message r1-del-4-1 answers 200")
	var out, errb bytes.Buffer
	rc := dispatch([]string{"check", path}, &out, &errb)
	if !strings.Contains(out.String(), "Crown chaos report: FAIL") {
		t.Fatalf("check verdict:\n%s", out.String())
	}
	if rc != exitViolation {
		t.Errorf("check printed FAIL (%q) but exited %d, want %d", strings.SplitN(out.String(), "\n", 2)[0], rc, exitViolation)
	}
	out.Reset()
	rc = dispatch([]string{"check", "--json", path}, &out, &errb)
	if rc != exitViolation || !strings.Contains(out.String(), `"passed": false`) {
		t.Errorf("check --json exited %d (want %d), passed false in output: %v", rc, exitViolation, strings.Contains(out.String(), `"passed": false`))
	}
	out.Reset()
	rc = dispatch([]string{"report", "--dir", t.TempDir(), path}, &out, &errb)
	if rc != exitViolation {
		t.Errorf("report printed %q but exited %d, want %d", strings.SplitN(out.String(), "\n", 2)[0], rc, exitViolation)
	}
	// The same history without the failure passes.
	out.Reset()
	if rc := dispatch([]string{"check", writeHistory(t, "")}, &out, &errb); rc != exitOK {
		t.Errorf("clean history: exit %d\n%s", rc, out.String())
	}
}

// A schedule length that is not positive is a bad flag value (exit 2), not
// a harness error (3), for `gen` and for `run --random` alike; `run` must
// refuse it before touching anything.
func TestCLIBadDurationIsUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"gen", "--seed", "3", "--duration", "0s"},
		{"gen", "--seed", "3", "--duration", "-5m"},
		{"run", "--random", "--seed", "3", "--duration", "0s", "--report", filepath.Join(t.TempDir(), "r")},
	} {
		var out, errb bytes.Buffer
		rc := dispatch(args, &out, &errb)
		if rc != exitUsage || !strings.Contains(errb.String(), "--duration") {
			t.Errorf("%v: exit %d (stderr %q), want %d (bad usage) naming --duration", args, rc, strings.TrimSpace(errb.String()), exitUsage)
		}
	}
}

// Commands without positional arguments refuse one: `gen 7` is a mistake
// for `gen --seed 7`, not a request for seed 1's schedule.
func TestCLIRejectsStrayArgument(t *testing.T) {
	for _, args := range [][]string{{"gen", "7"}, {"gen", "--seed", "7", "3m"}, {"cleanup", "now"}} {
		var out, errb bytes.Buffer
		rc := dispatch(args, &out, &errb)
		if rc != exitUsage || !strings.Contains(errb.String(), "unexpected argument") {
			first := strings.SplitN(out.String(), "\n", 2)[0]
			t.Errorf("%v: exit %d, printed %q, stderr %q; want %d and an error about the argument", args, rc, first,
				strings.TrimSpace(errb.String()), exitUsage)
		}
	}
}
