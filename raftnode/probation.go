package raftnode

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/segments"
)

// A voter that starts with an empty Raft directory (a new member, or one
// whose data was lost and that restarts under the same id) holds none of
// the entries the cluster has committed, so Raft's vote rule ("the
// candidate's log is at least as up to date as mine") lets it vote for any
// candidate. With a stale candidate that loses acknowledged writes: entry E
// committed on the leader and this node, the node's disk wiped, the leader
// down; the third node, which never received E, asks for votes and wins
// with the wiped node's. A majority of disks (the leader's and the third
// node's) survived, and E is gone all the same.
//
// So such a node is on probation until it has caught up: it refuses
// RequestVote and RequestPreVote for any candidate whose log goes past the
// bootstrap configuration (index 1), and ends its probation once its log
// reaches the target the first AppendEntries with entries (or a previous
// entry) it received showed it, or once it leads. The target is the larger
// of that leader's commit index and the last index the request covered: a
// leader's log holds every committed entry, and a follower's nextIndex
// starts past the leader's last entry, so the first such request covers
// the leader's log as it was. The target is fixed then, not raised by later
// requests: under a steady load a moving target would stay ahead of the
// log, and the probation would not end.
//
// Candidates at index 1 or below are the nodes of a cluster bootstrapping
// for the first time (all of them on probation): nothing was committed
// yet, so their votes are safe and the first election can happen. A
// marker file keeps the probation over a restart before the catch-up.
//
// The cost is availability: until it has caught up the node counts as down
// for elections (it cannot tell the candidate that holds the data from a
// stale one), so with a second node down the cluster elects nobody until
// one returns. (In a new cluster the followers' probation lasts until they
// hold the first leader's first entry, milliseconds: a leader lost within
// them is waited for the same way.)

// probationFile is the marker's name in the Raft directory.
const probationFile = "probation"

// voteGuard wraps the node's transport and answers the vote requests a
// node on probation refuses itself; every other RPC goes to Raft as it
// came, and the first AppendEntries that shows part of a leader's log sets
// the target on the way.
type voteGuard struct {
	transportLayer
	header raft.RPCHeader // this node's, for the answers it gives itself

	marker    string
	on        atomic.Bool
	target    atomic.Uint64                 // the log index to reach; 0 until a leader showed one
	lastIndex atomic.Pointer[func() uint64] // Raft's last log index, once Raft runs
	log       *slog.Logger

	consumer chan raft.RPC
	stop     chan struct{}
	once     sync.Once
}

// newVoteGuard wraps t for the node id, which starts on probation; marker
// is the probation file.
func newVoteGuard(t raft.Transport, id raft.ServerID, marker string, log *slog.Logger) *voteGuard {
	g := &voteGuard{transportLayer: transportLayer{t}, marker: marker, log: log, consumer: make(chan raft.RPC), stop: make(chan struct{}),
		header: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: t.EncodePeer(id, t.LocalAddr())}}
	g.on.Store(true)
	go g.relay(t.Consumer())
	return g
}

// relay passes RPCs on to Raft, answering the refused votes itself.
func (g *voteGuard) relay(in <-chan raft.RPC) {
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-g.stop:
			return
		}
		switch c := rpc.Command.(type) {
		case *raft.RequestVoteRequest:
			if g.refuses(c.LastLogIndex) {
				g.log.Warn("vote refused: this node is on probation until it catches up with a leader",
					"candidate", string(c.ID), "candidate_last_index", c.LastLogIndex, "term", c.Term)
				rpc.Respond(&raft.RequestVoteResponse{RPCHeader: g.header, Term: c.Term, Granted: false}, nil)
				continue
			}
		case *raft.RequestPreVoteRequest:
			if g.refuses(c.LastLogIndex) {
				rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: g.header, Term: c.Term, Granted: false}, nil)
				continue
			}
		case *raft.AppendEntriesRequest:
			g.observe(c)
		}
		select {
		case g.consumer <- rpc:
		case <-g.stop:
			return
		}
	}
}

// refuses reports whether a vote for a candidate whose log ends at last is
// refused now. A node that has caught up ends its probation here rather
// than wait for watchProbation's next look.
func (g *voteGuard) refuses(last uint64) bool {
	if !g.on.Load() || last <= 1 {
		return false
	}
	if f := g.lastIndex.Load(); f != nil && g.caughtUp((*f)()) {
		g.end("caught up with a leader")
		return false
	}
	return true
}

// observe sets the target from the first AppendEntries that shows a part
// of the leader's log (a heartbeat carries none).
func (g *voteGuard) observe(c *raft.AppendEntriesRequest) {
	if c.PrevLogEntry == 0 && len(c.Entries) == 0 {
		return
	}
	t := max(c.LeaderCommitIndex, c.PrevLogEntry+uint64(len(c.Entries)))
	g.target.CompareAndSwap(0, t)
}

// Consumer is where Raft reads the RPCs the guard let through.
func (g *voteGuard) Consumer() <-chan raft.RPC { return g.consumer }

// Close stops the relay and closes the transport.
func (g *voteGuard) Close() error {
	g.once.Do(func() { close(g.stop) })
	return g.transportLayer.Close()
}

// AppendEntries is sent only by a leader: leading ends the probation (a
// first leader is sent nothing to catch up with), before any follower can hear of
// this leadership, so a leadership transfer right after the first election
// finds the old leader voting.
func (g *voteGuard) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	g.end("leading")
	return g.Transport.AppendEntries(id, target, args, resp)
}

// AppendEntriesPipeline is AppendEntries' pipelined form.
func (g *voteGuard) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	g.end("leading")
	return g.Transport.AppendEntriesPipeline(id, target)
}

// caughtUp reports whether a node whose log ends at last has reached the
// target a leader showed it.
func (g *voteGuard) caughtUp(last uint64) bool {
	t := g.target.Load()
	return t > 0 && last >= t
}

// end ends the probation, once; its marker is removed by clearMarker.
func (g *voteGuard) end(why string) {
	if g.on.CompareAndSwap(true, false) {
		g.log.Info("probation over: this node votes again", "why", why, "target", g.target.Load())
	}
}

// clearMarker removes the marker of an ended probation, durably.
func (g *voteGuard) clearMarker() error {
	if err := os.Remove(g.marker); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("end probation: %w", err)
	}
	if err := segments.SyncDir(filepath.Dir(g.marker)); err != nil {
		return fmt.Errorf("end probation: %w", err)
	}
	return nil
}

// beginProbation writes the marker (durably) before anything else of a new
// Raft directory, so that a crash before the catch-up cannot end it.
func beginProbation(marker string) error {
	f, err := os.OpenFile(marker, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("begin probation: %w", err)
	}
	err = errors.Join(f.Sync(), f.Close())
	if err == nil {
		err = segments.SyncDir(filepath.Dir(marker))
	}
	if err != nil {
		return fmt.Errorf("begin probation: %w", err)
	}
	return nil
}

// onProbation reports whether the marker is present.
func onProbation(marker string) (bool, error) {
	_, err := os.Stat(marker)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("probation marker: %w", err)
	}
}

// watchProbation ends the probation once the node has caught up as a
// follower (or sees it ended by leading), then removes the marker.
func (n *Node) watchProbation(g *voteGuard) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-n.stopped:
			return
		}
		if g.on.Load() && g.caughtUp(n.raft.LastIndex()) {
			g.end("caught up with a leader")
		}
		if g.on.Load() {
			continue
		}
		if err := g.clearMarker(); err != nil {
			// The next start is on probation again, and ends it the same way.
			n.log.Error("probation", "error", err)
		}
		return
	}
}
