package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/raftnode"
)

// raftJSON describes this node's view of the cluster.
func (s *Server) raftJSON() (map[string]any, bool) {
	st := s.cluster.Status()
	leaderHTTP := ""
	if st.LeaderID != "" {
		leaderHTTP = s.nodeURL(st.LeaderID)
	}
	canServe := st.LeaderID != "" && (st.LeaderID == s.cfg.NodeID || leaderHTTP != "")
	return map[string]any{
		"state": st.State, "leader_id": st.LeaderID, "leader_http": leaderHTTP, "term": st.Term,
		"applied_index": st.AppliedIndex, "commit_index": st.CommitIndex, "last_index": st.LastIndex,
		"probation": st.Probation,
	}, canServe
}

// GET /health: 200 when this node can serve requests (a leader is known and
// reachable through the registry, and the local state can be read), 503
// otherwise, for load balancers (queen-api.md 3.1: "connected" means leader
// known, local store open).
func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	raft, ok := s.raftJSON()
	if _, err := s.state.SystemSwitches(); err != nil {
		ok = false
	}
	body := map[string]any{
		"status": "healthy", "database": "connected", "server": "crown", "worker_id": 0,
		"version": s.cfg.Version, "shared_state": map[string]any{"enabled": false},
		"queen": map[string]any{"worker_id": 0, "status": "active"}, "node_id": s.cfg.NodeID, "raft": raft,
	}
	status := http.StatusOK
	if !ok {
		body["status"], body["database"] = "unhealthy", "disconnected"
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, body)
}

// GET /metrics: Queen's small JSON snapshot.
func (s *Server) handleMetricsJSON(w http.ResponseWriter, _ *http.Request) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, ok := residentBytes()
	if !ok {
		rss = ms.Sys
	}
	// Queen reports Node's process.cpuUsage(): microseconds.
	user, system, _ := processCPU()
	c, _ := s.state.Counters()
	writeJSON(w, http.StatusOK, map[string]any{
		"uptime":   int64(time.Since(s.started).Seconds()),
		"requests": map[string]any{"total": c.PushRequests + c.PopRequests + c.AckRequests, "rate": 0},
		"messages": map[string]any{"total": c.PushMessages, "rate": 0},
		"database": map[string]any{"poolSize": 0, "idleConnections": 0, "waitingRequests": 0},
		"memory": map[string]any{"rss": rss, "heapTotal": ms.HeapSys, "heapUsed": ms.HeapAlloc,
			"external": 0, "arrayBuffers": 0},
		"cpu": map[string]any{"user": user.Microseconds(), "system": system.Microseconds()},
	})
}

// GET /internal/v1/digest: the state digest at this node's applied index.
func (s *Server) handleDigest(w http.ResponseWriter, _ *http.Request) {
	applied, digest, err := s.state.Digest()
	if err != nil {
		writeError(w, &apiError{Status: 500, Code: codeInternal, Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"node_id": s.cfg.NodeID, "applied_index": applied, "digest": digest})
}

// GET /internal/v1/read-index: leader only; confirms leadership with a
// quorum and returns the index a linearizable read must wait for.
func (s *Server) handleReadIndex(w http.ResponseWriter, _ *http.Request) {
	idx, err := s.cluster.ReadIndex()
	if err != nil {
		writeError(w, &apiError{Status: 503, Code: codeNoLeader, Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"read_index": idx})
}

type memberRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
}

func (s *Server) parseMember(w http.ResponseWriter, r *http.Request, needRaft bool) ([]byte, *memberRequest, bool) {
	body, aerr := readBody(r, 1<<20)
	if aerr != nil {
		writeError(w, aerr)
		return nil, nil, false
	}
	m, aerr := decodeMember(body, needRaft)
	if aerr != nil {
		writeError(w, aerr)
		return nil, nil, false
	}
	return body, m, true
}

// decodeMember reads a member request, checking everything the registry
// write would before any membership change is made (a refusal changes
// nothing).
func decodeMember(body []byte, needRaft bool) (*memberRequest, *apiError) {
	obj, aerr := decodeObject(body, "")
	if aerr != nil {
		return nil, aerr
	}
	var m memberRequest
	for _, f := range []struct {
		name string
		dst  *string
	}{{"id", &m.ID}, {"raft_addr", &m.RaftAddr}, {"http_addr", &m.HTTPAddr}} {
		v, _, aerr := optString(obj[f.name], f.name, f.name+" must be a string")
		if aerr == nil {
			aerr = checkName(f.name, v)
		}
		if aerr != nil {
			return nil, aerr
		}
		*f.dst = v
	}
	if m.ID == "" {
		return nil, badRequest(codeMissingField, "id", "id is required")
	}
	if needRaft && m.RaftAddr == "" {
		return nil, badRequest(codeMissingField, "raft_addr", "raft_addr is required")
	}
	return &m, nil
}

// onLeader runs a leader-only operation here, or forwards the request.
func (s *Server) onLeader(w http.ResponseWriter, r *http.Request, body []byte, op func() error) bool {
	for {
		if s.cluster.IsLeader() {
			err := op()
			if errors.Is(err, raftnode.ErrNotLeader) {
				continue
			}
			if err != nil {
				writeError(w, membershipError(err))
				return false
			}
			return true
		}
		leader, aerr := s.leaderURL(r.Context())
		if aerr != nil {
			writeError(w, aerr)
			return false
		}
		if leader == "" || !s.fwd.relay(w, r, body, leader) {
			continue // this node became the leader: run the operation here
		}
		return false
	}
}

// membershipError is the answer to a failed membership change or transfer.
func membershipError(err error) *apiError {
	switch {
	case errors.Is(err, raftnode.ErrNoMember):
		return &apiError{Status: 404, Code: codeNotFound, Message: err.Error()}
	case errors.Is(err, raftnode.ErrConflict):
		return &apiError{Status: http.StatusConflict, Code: codeConflict, Message: err.Error()}
	case errors.Is(err, raftnode.ErrUnknownOutcome):
		return &apiError{Status: 503, Code: codeUnknown, Message: "Leadership changed while the change was committing; it may still take effect (a removal or addition commits once the new configuration's members are up): check the members, and repeat the request, which is safe, if it is still wanted. " + err.Error()}
	}
	// Membership changes and transfers fail when a peer is unreachable or
	// still catching up: retryable, not a bug.
	return &apiError{Status: 503, Code: codeUnavailable, Message: err.Error()}
}

// POST /internal/v1/join: a node started with --join adds itself.
func (s *Server) handleJoin(w http.ResponseWriter, r *http.Request) { s.addMember(w, r, true) }

// POST /api/v1/cluster/members: an operator adds a voter or moves one.
func (s *Server) handleClusterAdd(w http.ResponseWriter, r *http.Request) { s.addMember(w, r, false) }

// answersAs reports whether a process other than the one at joiner answers
// as node id at the HTTP address the registry holds for id.
func (s *Server) answersAs(ctx context.Context, id, joiner string) bool {
	u := s.nodeURL(id)
	if u == "" || strings.TrimRight(u, "/") == strings.TrimRight(joiner, "/") {
		return false
	}
	return s.healthIs(ctx, u, id)
}

// healthIs reports whether the node at HTTP address u answers /health, within
// 2 s, as node id.
func (s *Server) healthIs(ctx context.Context, u, id string) bool {
	u = strings.TrimRight(u, "/")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", u+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := s.fwd.client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct {
		NodeID string `json:"node_id"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&h) != nil {
		return false
	}
	return h.NodeID == id
}

// addMember adds a voter and records its addresses in the node registry.
func (s *Server) addMember(w http.ResponseWriter, r *http.Request, join bool) {
	body, m, ok := s.parseMember(w, r, true)
	if !ok {
		return
	}
	if !s.onLeader(w, r, body, func() error {
		if join {
			// Raft would move the member to the joining process's
			// address: a second process given a running member's id
			// would cut that member off without a word. A member that
			// does not answer (added at an address its process does not
			// use) is still moved, as the joining process asks.
			members, err := s.cluster.Members()
			if err != nil {
				return err
			}
			for _, x := range members {
				if x.ID == m.ID && x.Address != m.RaftAddr && s.answersAs(r.Context(), x.ID, m.HTTPAddr) {
					return fmt.Errorf("%w: %q is a running member at raft address %s; remove it first, or move it with POST /api/v1/cluster/members (crownctl cluster add)",
						raftnode.ErrConflict, m.ID, x.Address)
				}
			}
		}
		if !forced(r) {
			if err := s.keepsQuorum(r.Context(), m.ID, m.HTTPAddr, true, join); err != nil {
				return err
			}
		}
		return s.cluster.AddVoter(m.ID, m.RaftAddr, 10*time.Second)
	}) {
		return
	}
	if m.HTTPAddr != "" {
		if _, ok := s.commit(w, r, body, &fsm.RegisterNode{ID: m.ID, RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr}); !ok {
			return
		}
	}
	s.log.Info("member added", "id", m.ID, "raft_addr", m.RaftAddr, "http_addr", m.HTTPAddr)
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "id": m.ID, "raft_addr": m.RaftAddr, "http_addr": m.HTTPAddr})
}

// POST /internal/v1/register: record a member's HTTP address.
func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) {
	body, m, ok := s.parseMember(w, r, false)
	if !ok {
		return
	}
	if !s.onLeader(w, r, body, func() error {
		// A removed node keeps running, and until it notices the removal
		// it still knows this leader: its registration would put it back
		// in the registry the removal has just cleaned.
		members, err := s.cluster.Members()
		if err != nil {
			return err
		}
		if raftnode.HasMember(members, m.ID) {
			return nil
		}
		return fmt.Errorf("%w: %q is not a member of the cluster; add it first (crownctl cluster add)", raftnode.ErrConflict, m.ID)
	}) {
		return
	}
	if _, ok := s.commit(w, r, body, &fsm.RegisterNode{ID: m.ID, RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr}); !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true})
}

// DELETE /api/v1/cluster/members/{id}
func (s *Server) handleClusterRemove(w http.ResponseWriter, r *http.Request) {
	id := pathVar(r, "id")
	self := false
	if !s.onLeader(w, r, nil, func() error {
		if self = id == s.cfg.NodeID; self {
			// Raft refuses to remove the last voter only after the
			// registry write below would have taken this node out.
			members, err := s.cluster.Members()
			if err != nil {
				return err
			}
			if len(raftnode.VotersBesides(members, id)) == 0 {
				return fmt.Errorf("%w: %q is the last voter", raftnode.ErrConflict, id)
			}
			if !forced(r) {
				return s.keepsQuorum(r.Context(), id, "", false, false)
			}
			return nil // below: the registry first
		}
		if !forced(r) {
			if err := s.keepsQuorum(r.Context(), id, "", false, false); err != nil {
				return err
			}
		}
		err := s.cluster.RemoveServer(id, 10*time.Second)
		if errors.Is(err, raftnode.ErrNoMember) && s.inRegistry(id) {
			// An earlier removal left the configuration but lost its
			// leader before the registry write (unknown_outcome): this
			// repeat finishes it rather than leave the entry for good.
			return nil
		}
		return err
	}) {
		return
	}
	if self {
		s.leaving.Store(true)
	}
	if _, ok := s.commit(w, r, nil, &fsm.RemoveNode{ID: id}); !ok {
		s.leaving.Store(false)
		return
	}
	if self {
		// A leader that removes itself stops its Raft once the change
		// commits and can commit nothing after it, so the registry entry
		// went first; should the removal fail, the node registers itself
		// again at once: KeepRegistered would wait out the quiet period
		// after its last registration (up to 15 s), and meanwhile the
		// followers could not find the leader's HTTP address to forward to.
		if err := s.cluster.RemoveServer(id, 10*time.Second); err != nil {
			s.leaving.Store(false)
			if rerr := s.register(r.Context()); rerr != nil {
				s.log.Warn("registering again after a failed removal of this node", "error", rerr)
			}
			writeError(w, membershipError(err))
			return
		}
	}
	s.log.Info("member removed", "id", id)
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "id": id})
}

// forced reports ?force=true: a membership change skips keepsQuorum.
func forced(r *http.Request) bool { return r.URL.Query().Get("force") == "true" }

// keepsQuorum refuses to add (add) or remove a voter when the members that
// answer now are not a majority of the configuration the change makes.
// Raft commits a change by the new configuration's majority, so removing a
// live member of three while another is down, or adding a voter (which
// counts at once, before it runs) while one is down, appends a change that
// cannot commit: the leader steps down and no leader is elected until the
// missing member returns. The change is refused instead, with what is
// down; ?force=true makes it anyway. A member answers when its registered
// HTTP address answers /health as that member; this node, a node joining
// by itself (running, since it asks) and a member not yet registered count
// as answering. A voter an operator adds answers only when the HTTP
// address given with it does: the usual order adds it before it runs.
func (s *Server) keepsQuorum(ctx context.Context, id, newHTTP string, add, joining bool) error {
	members, err := s.cluster.Members()
	if err != nil {
		return err
	}
	if raftnode.IsVoter(members, id) == add {
		return nil // a move, or not a voter: the count does not change
	}
	var voters []string
	for _, m := range raftnode.VotersBesides(members, id) {
		voters = append(voters, m.ID)
	}
	if add {
		voters = append(voters, id)
	}
	up := make([]bool, len(voters))
	var wg sync.WaitGroup
	for i, v := range voters {
		newcomer := add && v == id
		switch {
		case v == s.cfg.NodeID || (newcomer && joining):
			up[i] = true
			continue
		case newcomer && newHTTP == "":
			continue // added by an operator, and not known to run
		case !newcomer && s.nodeURL(v) == "":
			// A member not yet registered (just started) cannot be
			// asked: it is given the benefit of the doubt.
			up[i] = true
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if newcomer {
				up[i] = s.healthIs(ctx, newHTTP, v)
			} else {
				up[i] = s.answersAs(ctx, v, "")
			}
		}()
	}
	wg.Wait()
	var down []string
	for i, v := range voters {
		if !up[i] {
			down = append(down, v)
		}
	}
	if need := len(voters)/2 + 1; len(voters)-len(down) < need {
		return fmt.Errorf("%w: the configuration this change makes (%s) needs %d members up to commit, and %s do not answer: "+
			"the cluster would stop until they return; bring them back first, or repeat with force=true (crownctl --force)",
			raftnode.ErrConflict, strings.Join(voters, ", "), need, strings.Join(down, ", "))
	}
	return nil
}

// inRegistry reports whether the node registry holds id.
func (s *Server) inRegistry(id string) bool {
	nodes, err := s.state.Nodes()
	if err != nil {
		return false
	}
	for _, n := range nodes {
		if n.ID == id {
			return true
		}
	}
	return false
}

// POST /api/v1/cluster/transfer-leadership {"id": optional target}
func (s *Server) handleClusterTransfer(w http.ResponseWriter, r *http.Request) {
	body, aerr := readBody(r, 1<<20)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	obj, aerr := decodeObject(body, "")
	var target string
	if aerr == nil {
		target, _, aerr = optString(obj["id"], "id", "id must be a string")
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	from := s.cfg.NodeID
	// Relayed by a follower, the request changes the leader it waits on.
	if !s.onLeader(w, expectingLeaderChange(r), body, func() error { return s.cluster.TransferLeadership(target) }) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "from": from, "to": target})
}

// GET /api/v1/cluster/members
func (s *Server) handleClusterMembers(w http.ResponseWriter, _ *http.Request) {
	members, err := s.membersJSON()
	if err != nil {
		writeError(w, &apiError{Status: 503, Code: codeUnavailable, Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"members": members})
}

func (s *Server) membersJSON() ([]map[string]any, error) {
	members, err := s.cluster.Members()
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(members))
	for i, m := range members {
		out[i] = map[string]any{"id": m.ID, "raft_addr": m.Address, "http_addr": s.nodeURL(m.ID),
			"suffrage": m.Suffrage, "leader": m.Leader}
	}
	return out, nil
}

// GET /api/v1/cluster/status
func (s *Server) handleClusterStatus(w http.ResponseWriter, _ *http.Request) {
	raft, ok := s.raftJSON()
	members, err := s.membersJSON()
	if err != nil {
		writeError(w, &apiError{Status: 503, Code: codeUnavailable, Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"node_id": s.cfg.NodeID, "healthy": ok, "raft": raft, "members": members})
}
