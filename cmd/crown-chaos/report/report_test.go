package report

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/crownmq/crown/cmd/crown-chaos/checker"
	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

func sampleOps() []history.Op {
	ok := true
	var ops []history.Op
	id := int64(0)
	add := func(op history.Op) {
		id++
		op.ID = id
		ops = append(ops, op)
	}
	add(history.Op{Kind: history.KindMeta, Meta: &history.Meta{RunID: "r<1>", Backend: "netns", Seed: 3,
		Queues: []string{"q"}, Partitions: []string{"p0"}, Groups: []string{"", "g1"}, Scenarios: []string{"s & t"}}})
	add(history.Op{Kind: history.KindScenario, Label: "start", Scenario: "s & t", Start: 1e9})
	for i := int64(0); i < 5; i++ {
		t := i * 1e9
		add(history.Op{Kind: history.KindPush, Queue: "q", Start: t, End: t + 5e6, Outcome: history.OK,
			Items: []history.Item{{Partition: "p0", Seq: i, Txn: history.Txn("r", "q", "p0", i), Status: "queued", MsgID: "m"}}})
		for _, g := range []string{"", "g1"} {
			add(history.Op{Kind: history.KindPop, Queue: "q", Group: g, Start: t + 1e7, End: t + 2e7, Outcome: history.OK,
				Items: []history.Item{{Partition: "p0", Seq: i, Txn: history.Txn("r", "q", "p0", i), MsgID: "m", DataSeq: i}}})
			add(history.Op{Kind: history.KindAck, Queue: "q", Group: g, Status: "completed", Start: t + 3e7, End: t + 4e7, Outcome: history.OK,
				Items: []history.Item{{Partition: "p0", Seq: i, Txn: history.Txn("r", "q", "p0", i), Success: true}}})
		}
	}
	add(history.Op{Kind: history.KindWindow, Window: 1, Label: `kill leader as K (node2)`, Start: 2e9, End: 3e9})
	add(history.Op{Kind: history.KindRecovery, Window: 1, Start: 3e9, Recovery: &history.Recovery{Healthy: 5e8, Writes: 7e8}})
	add(history.Op{Kind: history.KindCheckpoint, Label: "cp", Start: 4.5e9, End: 4.6e9, Passed: &ok,
		States: []history.NodeState{{Node: "node1", AppliedIndex: 9, Digest: "d"}}})
	add(history.Op{Kind: history.KindScenario, Label: "end", Scenario: "s & t", Start: 1e9, End: 5e9})
	add(history.Op{Kind: history.KindFinal, Start: 5e9, End: 5e9, Passed: &ok, States: []history.NodeState{
		{Node: "node1", AppliedIndex: 10, Digest: "d", Totals: map[string]int64{"q/p0": 5}},
		{Node: "node2", AppliedIndex: 10, Digest: "d", Totals: map[string]int64{"q/p0": 5}}}})
	return ops
}

func TestReportOutputs(t *testing.T) {
	ops := sampleOps()
	res := checker.Check(ops, checker.Options{RequireFinal: true})
	if !res.OK {
		t.Fatalf("sample history fails: %+v", res.Violations)
	}
	rep := Build(ops, res)
	if !rep.Passed || len(rep.Scenarios) != 1 || len(rep.Series) < 5 || len(rep.Quiet) != 2 {
		t.Fatalf("report %+v", rep)
	}
	var text strings.Builder
	WriteText(&text, rep)
	for _, want := range []string{"PASS", "operations checked: 25", "lost: 0   duplicated: 0   reordered: 0",
		"kill leader as K (node2)", "0.50s", "0.70s", "checkpoints 1/1"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, text.String())
		}
	}
	svg := SVG(rep)
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
	for _, want := range []string{"<polyline", "kill leader as K", "s &amp; t", "#d0021b"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	dir := t.TempDir()
	if err := WriteDir(dir, rep); err != nil {
		t.Fatal(err)
	}
}
