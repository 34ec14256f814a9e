package raftnode

import "github.com/hashicorp/raft"

// mainLoopHeartbeats is the node's Raft transport with hashicorp/raft's
// heartbeat fast path turned off.
//
// Raft hands the transport a handler (Raft.processHeartbeat) that runs
// appendEntries for a heartbeat on the transport's own goroutine, outside
// Raft's main loop, although appendEntries may only run there. A heartbeat
// from a newer leader then sets this node's term and state while its own
// leader loop may be dispatching a proposal: dispatchLogs reads the new term
// and stores the proposal at the next index, the one where the new leader
// stored its own first entry, under that same term. Log matching compares
// index and term only, so when the new leader's entries arrive this node
// keeps its own as if it were the leader's, and applies a command the
// cluster never committed: its state diverges for good. chaos-short found it
// (raftnode/DESIGN.md): a leader frozen by SIGSTOP, resumed after another
// node won an election, stored a pop under the new term at the new leader's
// no-op index.
//
// With no handler installed, NetworkTransport delivers heartbeats on
// Consumer() like every other RPC, and the main loop processes them in
// order with everything else, as it does every RPC that changes the term.
// A heartbeat then waits behind an AppendEntries being stored (a few ms) or
// a snapshot being installed; the follower's election timer runs in the same
// loop, and both paths record the leader's contact, so that wait does not
// start an election.
type mainLoopHeartbeats struct{ *raft.NetworkTransport }

// SetHeartbeatHandler drops the handler: see mainLoopHeartbeats.
func (mainLoopHeartbeats) SetHeartbeatHandler(func(raft.RPC)) {}
