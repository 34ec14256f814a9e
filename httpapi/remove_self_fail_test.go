package httpapi_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/crownmq/crown/httpapi"
	"github.com/crownmq/crown/raftnode"
)

// failingSelfRemoval is a cluster view with a second voter (not registered,
// so the quorum check gives it the benefit of the doubt) whose removal of
// this node fails after the registry entry went.
type failingSelfRemoval struct {
	httpapi.Cluster
}

func (c failingSelfRemoval) Members() ([]raftnode.Member, error) {
	m, err := c.Cluster.Members()
	return append(m, raftnode.Member{ID: "node2", Address: "127.0.0.1:1", Suffrage: "Voter"}), err
}

func (failingSelfRemoval) RemoveServer(string, time.Duration) error {
	return errors.New("staged: the configuration change timed out")
}

// A leader that removes itself takes its registry entry out first (it can
// commit nothing after the change); when the removal then fails it must be
// back in the registry at once, not when KeepRegistered's quiet period
// after its last registration ends (up to 15 s), during which followers
// cannot find the leader's HTTP address.
func TestFailedSelfRemovalRegistersAgainAtOnce(t *testing.T) {
	s := newStackWrapped(t, func(c httpapi.Cluster) httpapi.Cluster { return failingSelfRemoval{c} })
	r := s.do(http.MethodDelete, "/api/v1/cluster/members/node1", nil)
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("removal staged to fail: %d %s, want 503", r.Status, r.Raw)
	}
	nodes, err := s.State.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.ID == "node1" && n.HTTPAddr != "" {
			return
		}
	}
	t.Fatalf("node1 is out of the node registry right after its failed removal: %+v", nodes)
}
