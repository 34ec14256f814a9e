package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/crownmq/crown/fsm"
)

// registered reports whether the replicated registry holds this node's
// current addresses, or that it cannot tell now (the state unreadable):
// either way there is nothing to register this tick.
func (s *Server) registered() bool {
	nodes, err := s.state.Nodes()
	if err != nil {
		// Unknown, not absent: the state is being replaced (a snapshot
		// restore) or closed. Registering then appended a RegisterNode
		// entry that changed nothing, just after a follower installed a
		// snapshot; the next tick looks again.
		return true
	}
	for _, n := range nodes {
		if n.ID == s.cfg.NodeID {
			return n.HTTPAddr == s.cfg.AdvertiseURL && n.RaftAddr == s.cfg.RaftAddr
		}
	}
	return false
}

// KeepRegistered makes sure the node registry holds this node's addresses,
// retrying until it does and again whenever it drifts (after a restore, or
// a restart with new addresses). It returns when ctx ends.
func (s *Server) KeepRegistered(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	// After a registration succeeds, this node's own (possibly lagging)
	// copy of the registry needs time to show it: do not register again
	// until it has had that time.
	var quietUntil time.Time
	for {
		if time.Now().After(quietUntil) && !s.leaving.Load() && !s.registered() {
			if err := s.register(ctx); err != nil {
				s.log.Debug("registration pending", "error", err)
			} else {
				s.log.Info("registered in the node registry", "http", s.cfg.AdvertiseURL, "raft", s.cfg.RaftAddr)
				quietUntil = time.Now().Add(15 * time.Second)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := &fsm.RegisterNode{ID: s.cfg.NodeID, RaftAddr: s.cfg.RaftAddr, HTTPAddr: s.cfg.AdvertiseURL}
	if s.cluster.IsLeader() {
		_, _, err := s.cluster.Propose(ctx, cmd)
		return err
	}
	id, _ := s.cluster.Leader()
	if id == "" {
		return fmt.Errorf("no leader yet")
	}
	leader := s.nodeURL(id)
	if leader == "" {
		return fmt.Errorf("leader %s not registered yet", id)
	}
	return postJSON(ctx, s.fwd.client, leader+"/internal/v1/register",
		memberRequest{ID: cmd.ID, RaftAddr: cmd.RaftAddr, HTTPAddr: cmd.HTTPAddr})
}

// Join asks an existing cluster (any node's URL) to add this node as a
// voter, retrying until it succeeds or ctx ends.
func (s *Server) Join(ctx context.Context, url string) error {
	req := memberRequest{ID: s.cfg.NodeID, RaftAddr: s.cfg.RaftAddr, HTTPAddr: s.cfg.AdvertiseURL}
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := postJSON(cctx, s.fwd.client, strings.TrimRight(url, "/")+"/internal/v1/join", req)
		cancel()
		if err == nil {
			s.log.Info("joined cluster", "via", url)
			return nil
		}
		s.log.Warn("join failed; retrying", "via", url, "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("join %s: %w", url, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func postJSON(ctx context.Context, c *http.Client, url string, v any) error {
	b, _ := json.Marshal(v)
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %d: %s", url, resp.StatusCode, bytes.TrimSpace(body))
	}
	return nil
}
