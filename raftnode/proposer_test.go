package raftnode

import (
	"context"
	"runtime"
	"testing"
	"weak"

	"github.com/crownmq/crown/fsm"
)

// Raft's log cache holds the futures of recent entries, responses
// included; a result must not outlive its caller through them. (Before the
// proposer cleared what it had handed out, a leader kept the messages of
// its last 256 entries' pops in memory: 18 MB after a consume run.)
func TestProposerDoesNotRetainResults(t *testing.T) {
	n := startNode(t, fastConfig("n1", freeAddr(t), t.TempDir(), nil))
	waitLeader(t, n)
	res, _, err := n.node.Propose(context.Background(), push("q", "t1"))
	if err != nil {
		t.Fatal(err)
	}
	pr, ok := res.(*fsm.PushResult)
	if !ok || len(pr.Items) != 1 {
		t.Fatalf("result %T %+v", res, res)
	}
	w := weak.Make(pr)
	res, pr = nil, nil
	for range 3 {
		runtime.GC()
	}
	if w.Value() != nil {
		t.Fatal("the result is still reachable after the caller dropped it")
	}
}
