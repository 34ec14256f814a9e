package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// TestDurableKillAllWhileEveryNodeSnapshotsAndCompacts: README
// "Durability": an acknowledged write "survives SIGKILL of any node, and of
// all nodes at once"; the state file is not fsynced, its commits are
// deferred, and "after a snapshot each node keeps the newest ... log
// entries": a node killed with its log compacted must still find every
// entry after its state file's recorded index (fsm/DESIGN.md, Durability
// 2: a snapshot commits the open transaction before Raft may drop the log
// it covers). TestDurableKillAllDuringTransactions kills a three-node
// cluster that never snapshots, and TestDurableSingleNodeRepeatedKillsDuringSnapshots
// one node alone; here all three nodes snapshot every few KiB of log and
// keep two entries after it, and are SIGKILLed together three times while
// producers push through every node, then one follower is killed and
// restarted after the others compacted past it (it then usually catches
// up from the leader's snapshot, which the log reports). Afterwards every
// acknowledged push is stored once and in order as read through each node,
// and the replicas agree.
func TestDurableKillAllWhileEveryNodeSnapshotsAndCompacts(t *testing.T) {
	c := tc.Start(t, 3, tc.WithArgs("--raft-snapshot-log-bytes", "2048", "--raft-trailing-logs", "2"))
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	nodes := c.Nodes()
	var ps []*durablePusher
	for i := range 2 {
		p := &durablePusher{queue: fmt.Sprintf("ka%d", i)}
		p.setTargets(nodes)
		p.run(ctx)
		ps = append(ps, p)
	}
	for round := range 3 {
		time.Sleep(time.Duration(1500+round*400) * time.Millisecond)
		if err := killAllAndRestart(nodes); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	leader, err := c.WaitLeader(tc.LeaderTimeout)
	if err != nil {
		t.Fatal(err)
	}
	var follower *tc.Node
	for _, n := range nodes {
		if n != leader {
			follower = n
			break
		}
	}
	follower.Kill()
	time.Sleep(2500 * time.Millisecond) // the others snapshot and compact past it meanwhile
	follower.Restart()
	if err := follower.WaitHealthy(tc.LeaderTimeout); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	acked := make([][]int, len(ps))
	for i, p := range ps {
		acked[i] = p.finish()
		if len(p.errs) > 0 {
			t.Errorf("%s: pushes failed: %v", p.queue, p.errs[:min(3, len(p.errs))])
		}
	}
	d, err := c.WaitConverged(30 * time.Second)
	if err != nil {
		t.Fatalf("replicas do not converge after the kills: %v", err)
	}
	t.Logf("converged at %d (%.12s); pushes acknowledged: %d and %d", d.AppliedIndex, d.Digest, len(acked[0]), len(acked[1]))
	if log, err := follower.CurrentLog(); err == nil {
		t.Logf("%s installed the leader's snapshot on its last restart: %v", follower.ID(), strings.Contains(log, "Installed remote snapshot"))
	}
	for _, n := range nodes {
		snaps, _ := filepath.Glob(filepath.Join(n.DataDir(), "raft", "snapshots", "*"))
		if len(snaps) == 0 {
			t.Errorf("%s holds no snapshot: the test did not exercise compaction there", n.ID())
		}
		for i, p := range ps {
			got := durableDrain(t, ctx, n, p.queue, "audit-"+n.ID())
			durableCheckExactlyOnce(t, fmt.Sprintf("%s read through %s after three SIGKILLs of every node", p.queue, n.ID()), acked[i], got)
		}
	}
	if _, err := c.WaitConverged(30 * time.Second); err != nil {
		t.Errorf("replicas do not converge after the audit: %v", err)
	}
}
