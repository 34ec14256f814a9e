package raftnode

import (
	"bytes"
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkCommitPath measures the disk part of a commit: the leader's
// write of a 32 KiB group-commit entry and a follower's, each a real
// raft-boltdb file. "series" is hashicorp/raft's own order (the leader
// stores, then replicates); "overlapped" is leaderAppendStore's (the leader
// queues its write and the follower stores meanwhile; the commit is usable
// once both are done). "alone" is the leader's write through
// leaderAppendStore with nothing to overlap (a single node): what the
// background writer's hand-off costs. Both files share one disk here, as
// the three nodes of the test cluster do.
func BenchmarkCommitPath(b *testing.B) {
	data := bytes.Repeat([]byte{0xa5}, 32<<10)
	entry := func(i uint64) []*raft.Log {
		return []*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: data}}
	}
	setup := func(b *testing.B) (leader *leaderAppendStore, follower *benchLog, direct *benchLog) {
		direct = openBenchLog(b, logStoreBoltOptions())
		follower = openBenchLog(b, logStoreBoltOptions())
		leader = newLeaderAppendStore(direct.store, func() bool { return true }, func(err error) { b.Error(err) })
		b.Cleanup(func() { leader.Close() })
		return leader, follower, direct
	}
	// queue hands the leader entry i; durable waits for its write.
	queue := func(b *testing.B, l *leaderAppendStore, i uint64) {
		if err := l.StoreLogs(entry(i)); err != nil {
			b.Fatal(err)
		}
	}
	durable := func(b *testing.B, l *leaderAppendStore, i uint64) {
		if err := l.waitDurable(i); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("series", func(b *testing.B) {
		_, follower, direct := setup(b)
		measure(b, int64(len(data)), func() {
			direct.append(1, data)
			follower.append(1, data)
		})
	})
	b.Run("overlapped", func(b *testing.B) {
		leader, follower, _ := setup(b)
		next := uint64(1)
		measure(b, int64(len(data)), func() {
			queue(b, leader, next)
			follower.append(1, data)
			durable(b, leader, next)
			next++
		})
	})
	b.Run("alone", func(b *testing.B) {
		leader, _, _ := setup(b)
		next := uint64(1)
		measure(b, int64(len(data)), func() {
			queue(b, leader, next)
			durable(b, leader, next)
			next++
		})
	})
	b.Run("direct", func(b *testing.B) {
		_, _, direct := setup(b)
		measure(b, int64(len(data)), func() { direct.append(1, data) })
	})
}
