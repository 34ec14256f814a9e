package raftnode

import (
	"errors"

	"github.com/hashicorp/raft"
)

// transportLayer is the base of a raft.Transport wrapper (voteGuard,
// clampingTransport): embedding raft.Transport forwards the interface's
// methods, but not the optional ones Raft looks for by type assertion, so
// it forwards those too. Without RequestPreVote a wrapped transport turns
// pre-vote off; without Close Raft's shutdown leaves it open.
type transportLayer struct{ raft.Transport }

// RequestPreVote keeps pre-vote on: Raft uses it only when the transport
// offers it.
func (t transportLayer) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	pv, ok := t.Transport.(raft.WithPreVote)
	if !ok {
		return errors.New("transport has no pre-vote")
	}
	return pv.RequestPreVote(id, target, args, resp)
}

// Close closes the transport underneath, as Raft's shutdown expects.
func (t transportLayer) Close() error {
	if c, ok := t.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// The wrappers Node stacks in front of its transport keep both.
var (
	_ raft.WithPreVote = clampingTransport{}
	_ raft.WithClose   = clampingTransport{}
	_ raft.WithPreVote = (*voteGuard)(nil)
	_ raft.WithClose   = (*voteGuard)(nil)
)
