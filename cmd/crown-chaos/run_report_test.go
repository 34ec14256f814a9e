//go:build linux

package main

import (
	"slices"
	"testing"

	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

// A failure of the run is both in the runner's list and, as a note, in the
// history: the report lists it once. One the history lacks (its write
// failed) is still listed, and fails the report.
func TestRunReportListsEachFailureOnce(t *testing.T) {
	const f = "no recovery within 60s after window 3"
	rep := buildReport(historyOps(f), []string{f})
	if !slices.Equal(rep.Failures, []string{f}) || rep.Passed {
		t.Fatalf("failures %q, passed %v; want [%q] once, not passed", rep.Failures, rep.Passed, f)
	}
	rep = buildReport(historyOps(""), []string{f})
	if !slices.Equal(rep.Failures, []string{f}) || rep.Passed {
		t.Fatalf("failure missing from the history: failures %q, passed %v", rep.Failures, rep.Passed)
	}
	if rep = buildReport(historyOps(""), nil); !rep.Passed || len(rep.Failures) != 0 {
		t.Fatalf("clean run: failures %q, passed %v", rep.Failures, rep.Passed)
	}
}

// When the reading with counts is not converged, the final state keeps the
// converged digests, and a node whose count read failed keeps the error
// beside its partial totals, which the checker then leaves unjudged.
func TestRunFinalKeepsCountReadError(t *testing.T) {
	digests := []history.NodeState{{Node: "node1", AppliedIndex: 9, Digest: "d"}, {Node: "node2", AppliedIndex: 9, Digest: "d"}}
	counts := []history.NodeState{
		{Node: "node1", AppliedIndex: 10, Digest: "e", Totals: map[string]int64{"q/p0": 3, "q/p1": 2}},
		{Node: "node2", AppliedIndex: 9, Digest: "d", Totals: map[string]int64{"q/p0": 3}, Error: "totals: context deadline exceeded"},
	}
	st := withCounts(digests, counts)
	if st[0].Digest != "d" || st[0].AppliedIndex != 9 || st[0].Totals["q/p1"] != 2 || st[0].Error != "" {
		t.Fatalf("node1 %+v", st[0])
	}
	if st[1].Error == "" || st[1].Totals["q/p0"] != 3 {
		t.Fatalf("node2 %+v: the failed count read lost its error", st[1])
	}
	if digests[1].Error != "" {
		t.Fatalf("the digest reading was changed: %+v", digests[1])
	}
	if st := withCounts(digests, digests); &st[0] != &digests[0] {
		t.Fatalf("a converged reading with counts is taken as it is")
	}
}
