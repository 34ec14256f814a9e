package raftnode

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestVoteGuardOnProbation: a node on probation refuses votes and
// pre-votes for a candidate whose log goes past the bootstrap entry, passes
// those of a first bootstrap to Raft, and, once its log reaches what the
// first AppendEntries with entries showed of the leader's, removes its
// marker and passes every vote on. Heartbeats and later requests do not
// move that target.
func TestVoteGuardOnProbation(t *testing.T) {
	marker := filepath.Join(t.TempDir(), probationFile)
	if err := beginProbation(marker); err != nil {
		t.Fatal(err)
	}
	_, candidate := raft.NewInmemTransport("cand")
	_, inner := raft.NewInmemTransport("")
	candidate.Connect(inner.LocalAddr(), inner)
	g := newVoteGuard(inner, "voter", marker, slog.New(slog.DiscardHandler))
	defer g.Close()

	// Raft's side: grant every vote that reaches it, and record it.
	reached := make(chan string, 16)
	go func() {
		for rpc := range g.Consumer() {
			switch c := rpc.Command.(type) {
			case *raft.RequestVoteRequest:
				reached <- "vote"
				rpc.Respond(&raft.RequestVoteResponse{Term: c.Term, Granted: true}, nil)
			case *raft.RequestPreVoteRequest:
				reached <- "prevote"
				rpc.Respond(&raft.RequestPreVoteResponse{Term: c.Term, Granted: true}, nil)
			case *raft.AppendEntriesRequest:
				reached <- "append"
				rpc.Respond(&raft.AppendEntriesResponse{Term: c.Term, Success: true}, nil)
			}
		}
	}()
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("cand"), Addr: []byte("cand")}
	vote := func(last uint64) (granted bool, reachedRaft bool) {
		t.Helper()
		var resp raft.RequestVoteResponse
		if err := candidate.RequestVote("voter", inner.LocalAddr(), &raft.RequestVoteRequest{RPCHeader: header, Term: 4, LastLogIndex: last, LastLogTerm: 3}, &resp); err != nil {
			t.Fatal(err)
		}
		if resp.Term != 4 {
			t.Errorf("vote answer for term %d, want the candidate's 4 (a higher one would depose it)", resp.Term)
		}
		return resp.Granted, drained(reached) == "vote"
	}
	preVote := func(last uint64) bool {
		t.Helper()
		var resp raft.RequestPreVoteResponse
		if err := candidate.RequestPreVote("voter", inner.LocalAddr(), &raft.RequestPreVoteRequest{RPCHeader: header, Term: 4, LastLogIndex: last, LastLogTerm: 3}, &resp); err != nil {
			t.Fatal(err)
		}
		drained(reached)
		return resp.Granted
	}

	if granted, through := vote(7); granted || through {
		t.Fatalf("on probation, a candidate at index 7: granted %v, reached Raft %v; want refused by the guard", granted, through)
	}
	if preVote(7) {
		t.Fatal("on probation, a pre-vote for a candidate at index 7 was granted")
	}
	if granted, through := vote(1); !granted || !through {
		t.Fatalf("on probation, a first bootstrap's candidate (index 1): granted %v, reached Raft %v; want Raft to decide", granted, through)
	}

	appendEntries := func(req *raft.AppendEntriesRequest) {
		t.Helper()
		req.RPCHeader, req.Term = header, 4
		var ae raft.AppendEntriesResponse
		if err := candidate.AppendEntries("voter", inner.LocalAddr(), req, &ae); err != nil {
			t.Fatal(err)
		}
		drained(reached)
	}
	appendEntries(&raft.AppendEntriesRequest{LeaderCommitIndex: 30}) // a heartbeat's shape: no part of the log
	if g.caughtUp(100) {
		t.Fatal("a request without entries or a previous entry set a target")
	}
	appendEntries(&raft.AppendEntriesRequest{PrevLogEntry: 8, PrevLogTerm: 3, LeaderCommitIndex: 5,
		Entries: []*raft.Log{{Index: 9, Term: 4}, {Index: 10, Term: 4}}})
	appendEntries(&raft.AppendEntriesRequest{PrevLogEntry: 20, PrevLogTerm: 4, LeaderCommitIndex: 25}) // later: ignored
	if g.caughtUp(9) {
		t.Fatal("a log ending at 9 counts as caught up with a leader whose log was shown up to 10")
	}
	if !g.caughtUp(10) {
		t.Fatal("a log ending at 10 does not count as caught up: the target moved with a later request")
	}
	g.end("caught up")
	if err := g.clearMarker(); err != nil {
		t.Fatal(err)
	}
	if on, err := onProbation(marker); on || err != nil {
		t.Fatalf("after the catch-up the marker is still there (%v): a restart would put the node back on probation", err)
	}
	if granted, through := vote(7); !granted || !through {
		t.Fatalf("after the probation, a candidate at index 7: granted %v, reached Raft %v; want Raft to decide", granted, through)
	}
}

// TestVoteGuardLeaderEndsProbation: the first leader of a new cluster is
// sent no commit index; its first AppendEntries ends its probation, before
// any follower knows it leads, so a leadership transfer right after the
// first election finds it voting (else, once deposed, it would refuse
// every later candidate, and so would its followers still on probation).
func TestVoteGuardLeaderEndsProbation(t *testing.T) {
	marker := filepath.Join(t.TempDir(), probationFile)
	if err := beginProbation(marker); err != nil {
		t.Fatal(err)
	}
	_, follower := raft.NewInmemTransport("")
	go func() {
		for rpc := range follower.Consumer() {
			rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
		}
	}()
	_, inner := raft.NewInmemTransport("")
	inner.Connect(follower.LocalAddr(), follower)
	g := newVoteGuard(inner, "leader", marker, slog.New(slog.DiscardHandler))
	defer g.Close()
	if !g.refuses(7) {
		t.Fatal("not on probation at the start")
	}
	var resp raft.AppendEntriesResponse
	if err := g.AppendEntries("f", follower.LocalAddr(), &raft.AppendEntriesRequest{Term: 2}, &resp); err != nil {
		t.Fatal(err)
	}
	if g.refuses(7) {
		t.Fatal("still on probation after sending an AppendEntries as leader")
	}
}

// drained waits briefly for what reached Raft, "" for nothing.
func drained(ch chan string) string {
	select {
	case s := <-ch:
		return s
	case <-time.After(200 * time.Millisecond):
		return ""
	}
}
