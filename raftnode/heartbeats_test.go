package raftnode

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// heartbeatPath sends a heartbeat from one real TCP transport to another
// whose Raft-installed handler is fast, and reports which way it arrived:
// through the handler (the fast path) or on Consumer() (Raft's main loop).
func heartbeatPath(t *testing.T, wrap func(*raft.NetworkTransport) raft.Transport) (fast, consumed bool) {
	t.Helper()
	newTransport := func() *raft.NetworkTransport {
		tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	from, toNet := newTransport(), newTransport()
	to := wrap(toNet)
	answer := func(rpc raft.RPC) { rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil) }
	fastCh := make(chan struct{}, 1)
	to.SetHeartbeatHandler(func(rpc raft.RPC) { fastCh <- struct{}{}; answer(rpc) })
	consumedCh, done := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		select {
		case rpc := <-to.Consumer():
			consumedCh <- struct{}{}
			answer(rpc)
		case <-done:
		}
	}()
	// What NetworkTransport takes for a heartbeat: a term and a leader,
	// nothing else.
	req := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("leader"), Addr: []byte(from.LocalAddr())},
		Term:      7,
	}
	var resp raft.AppendEntriesResponse
	if err := from.AppendEntries("follower", toNet.LocalAddr(), req, &resp); err != nil {
		t.Fatal(err)
	}
	if !resp.Success || resp.Term != 7 {
		t.Fatalf("answer %+v", resp)
	}
	select {
	case <-fastCh:
		fast = true
	default:
	}
	select {
	case <-consumedCh:
		consumed = true
	default:
	}
	return fast, consumed
}

// TestHeartbeatsGoThroughRaftsMainLoop: with mainLoopHeartbeats a
// heartbeat reaches Raft on Consumer() although Raft installed a fast-path
// handler (see mainLoopHeartbeats for the divergence the fast path allowed).
// The bare transport, as a control, takes the fast path.
func TestHeartbeatsGoThroughRaftsMainLoop(t *testing.T) {
	if fast, consumed := heartbeatPath(t, func(tr *raft.NetworkTransport) raft.Transport { return tr }); !fast || consumed {
		t.Fatalf("bare transport: fast path %v, consumer %v; the test no longer sends what NetworkTransport takes for a heartbeat", fast, consumed)
	}
	if fast, consumed := heartbeatPath(t, func(tr *raft.NetworkTransport) raft.Transport { return mainLoopHeartbeats{tr} }); fast || !consumed {
		t.Fatalf("mainLoopHeartbeats: fast path %v, consumer %v; want the consumer only", fast, consumed)
	}
	// The probation guard wraps it and must keep it so.
	if fast, consumed := heartbeatPath(t, func(tr *raft.NetworkTransport) raft.Transport {
		g := newVoteGuard(mainLoopHeartbeats{tr}, "follower", t.TempDir()+"/probation", slog.New(slog.DiscardHandler))
		t.Cleanup(func() { g.Close() })
		return g
	}); fast || !consumed {
		t.Fatalf("voteGuard over mainLoopHeartbeats: fast path %v, consumer %v; want the consumer only", fast, consumed)
	}
}
