package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The cluster command group: /api/v1/cluster/* and /health.

var clusterGroup = &group{
	name:    "cluster",
	summary: "inspect and change the Raft cluster (status, members, add, remove, transfer-leadership)",
	subs: []subcommand{
		{
			name: "status", summary: "show the answering node's Raft state, the leader and the members",
			help: `Asks the first node in --url that answers for GET /api/v1/cluster/status:
its own Raft state and indexes, the leader it follows, whether it can serve
requests, and the members of the Raft configuration.`,
			maxArgs: 0, run: clusterStatus,
		},
		{
			name: "members", summary: "list the members of the Raft configuration",
			help:    `GET /api/v1/cluster/members: every server's id, role, suffrage and addresses.`,
			maxArgs: 0, run: clusterMembers,
		},
		{
			name: "add", args: "ID RAFT_ADDR [HTTP_URL]", summary: "add a node as a voter",
			help: `POST /api/v1/cluster/members. RAFT_ADDR is the host:port other nodes dial for
Raft (the new node's --raft-advertise); HTTP_URL is its HTTP API URL (its
--http-advertise). Without HTTP_URL the new node registers its own HTTP
address once it runs.

Then start the new node with --join URL-OF-ANY-MEMBER (joining again as an
existing voter is harmless). Never start it with neither --join nor --peers:
that bootstraps a separate single-node cluster. Until it runs, the new voter
counts in the quorum: a three-node cluster becomes a four-node one that
needs three nodes up.

The leader refuses (409 conflict) an addition while too few members answer
for the larger configuration to commit (a three-node cluster with one down
cannot commit as four until the new node runs); --force adds it anyway.

Example:
  crownctl cluster add node4 127.0.0.1:7635 http://127.0.0.1:6635`,
			minArgs: 2, maxArgs: 3, flags: forceFlag, run: clusterAdd,
		},
		{
			name: "remove", args: "ID", summary: "remove a node from the cluster",
			help: `DELETE /api/v1/cluster/members/ID: the node leaves the Raft configuration
and the node registry. Removing a member of a three-node cluster leaves two,
which still need both to be up to commit. Stop the removed node afterwards.

So with one member down, remove that one, not another: removing a live
member makes the new configuration need the down one. The leader refuses
such a removal (409 conflict, naming the members down). With --force it is
made anyway: the leader steps down (503 unknown_outcome) and no leader is
elected until the down member returns; the removal then completes, and
repeating the command is safe.`,
			minArgs: 1, maxArgs: 1, flags: forceFlag, run: clusterRemove,
		},
		{
			name: "transfer-leadership", args: "[ID]", summary: "hand leadership to ID, or to the most up-to-date follower",
			help: `POST /api/v1/cluster/transfer-leadership, then waits (up to --timeout,
at most 10 s) until a new leader is known and prints it.`,
			minArgs: 0, maxArgs: 1, run: clusterTransfer,
		},
	},
}

// raftStatus is the "raft" object of /health and /api/v1/cluster/status.
type raftStatus struct {
	State        string `json:"state"`
	LeaderID     string `json:"leader_id"`
	LeaderHTTP   string `json:"leader_http"`
	Term         uint64 `json:"term"`
	AppliedIndex uint64 `json:"applied_index"`
	CommitIndex  uint64 `json:"commit_index"`
	LastIndex    uint64 `json:"last_index"`
	Probation    bool   `json:"probation"`
}

type member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
}

type clusterStatusAnswer struct {
	NodeID  string     `json:"node_id"`
	Healthy bool       `json:"healthy"`
	Raft    raftStatus `json:"raft"`
	Members []member   `json:"members"`
}

func clusterStatus(ctx context.Context, e *env, _ []string) error {
	var st clusterStatusAnswer
	raw, err := e.client.Get(ctx, "/api/v1/cluster/status", &st)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, raw)
	}
	return renderStatus(e.stdout, &st)
}

func clusterMembers(ctx context.Context, e *env, _ []string) error {
	var ans struct {
		Members []member `json:"members"`
	}
	raw, err := e.client.Get(ctx, "/api/v1/cluster/members", &ans)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, raw)
	}
	return renderMembers(e.stdout, ans.Members)
}

func clusterAdd(ctx context.Context, e *env, args []string) error {
	id, raftAddr, httpURL := args[0], args[1], ""
	if len(args) == 3 {
		httpURL = strings.TrimRight(args[2], "/")
	}
	if err := checkRaftAddr(raftAddr); err != nil {
		return err
	}
	if httpURL != "" {
		if err := checkHTTPURL(httpURL); err != nil {
			return err
		}
	}
	req := map[string]string{"id": id, "raft_addr": raftAddr}
	if httpURL != "" {
		req["http_addr"] = httpURL
	}
	raw, err := e.client.Post(ctx, "/api/v1/cluster/members"+forceQuery(ctx), req, nil)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, raw)
	}
	if httpURL == "" {
		httpURL = "registered by the node when it runs"
	}
	_, err = fmt.Fprintf(e.stdout, "added %s as a voter (raft %s, http %s)\n", id, raftAddr, httpURL)
	return err
}

// forceFlag registers --force for a membership change.
func forceFlag(fs *flag.FlagSet) any {
	fs.Bool("force", false, "make the change even if the members that answer are too few for it to commit")
	return nil
}

// forceQuery is the query string that passes --force on.
func forceQuery(ctx context.Context) string {
	if flagValue(ctx, "force") == "true" {
		return "?force=true"
	}
	return ""
}

func clusterRemove(ctx context.Context, e *env, args []string) error {
	id := args[0]
	if id == "" {
		return usagef("ID is empty")
	}
	raw, err := e.client.Delete(ctx, "/api/v1/cluster/members/"+url.PathEscape(id)+forceQuery(ctx), nil)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, raw)
	}
	_, err = fmt.Fprintf(e.stdout, "removed %s\n", id)
	return err
}

func clusterTransfer(ctx context.Context, e *env, args []string) error {
	target := ""
	if len(args) == 1 {
		target = args[0]
	}
	// The leader before the transfer: a node that relays the request to
	// the leader sees the very leader change it asked for and answers 503
	// (forwarding_failed or unknown_outcome, "may have been applied");
	// knowing the old leader tells such an answer from a failed transfer.
	var before clusterStatusAnswer
	if _, err := e.client.Get(ctx, "/api/v1/cluster/status", &before); err != nil {
		before.Raft.LeaderID = ""
	}
	var ans struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
	raw, err := e.client.Post(ctx, "/api/v1/cluster/transfer-leadership", map[string]string{"id": target}, &ans)
	if err != nil {
		old := before.Raft.LeaderID
		if old == "" || !outcomeUnknown(err) {
			return err
		}
		leader := waitNewLeader(ctx, e, old, min(e.timeout, 10*time.Second))
		if leader == "" {
			return err
		}
		if e.json {
			b, merr := json.Marshal(map[string]any{"success": true, "from": old, "to": leader})
			if merr != nil {
				return merr
			}
			return printJSON(e.stdout, b)
		}
		_, err = fmt.Fprintf(e.stdout, "leadership transferred from %s to %s\n", old, leader)
		return err
	}
	if e.json {
		return printJSON(e.stdout, raw)
	}
	leader := waitNewLeader(ctx, e, ans.From, min(e.timeout, 10*time.Second))
	switch {
	case leader != "":
		_, err = fmt.Fprintf(e.stdout, "leadership transferred from %s to %s\n", orDash(ans.From), leader)
	case target != "":
		_, err = fmt.Fprintf(e.stdout, "leadership transfer from %s to %s started; new leader not yet known\n", orDash(ans.From), target)
	default:
		_, err = fmt.Fprintf(e.stdout, "leadership transfer from %s started; new leader not yet known\n", orDash(ans.From))
	}
	return err
}

// outcomeUnknown reports whether err is a node's answer that the request
// may or may not have been applied (503 forwarding_failed or
// unknown_outcome, README "Errors").
func outcomeUnknown(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable &&
		(ae.Code == "forwarding_failed" || ae.Code == "unknown_outcome")
}

// waitNewLeader polls the cluster status until a leader other than old is
// known, and returns it ("" on timeout).
func waitNewLeader(ctx context.Context, e *env, old string, wait time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		var st clusterStatusAnswer
		if _, err := e.client.Get(ctx, "/api/v1/cluster/status", &st); err == nil &&
			st.Raft.LeaderID != "" && st.Raft.LeaderID != old {
			return st.Raft.LeaderID
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func checkRaftAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("RAFT_ADDR %q: want host:port", addr)
	}
	if host == "" {
		return usagef("RAFT_ADDR %q: the host is missing (other nodes dial this address)", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return usagef("RAFT_ADDR %q: bad port", addr)
	}
	return nil
}

func checkHTTPURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("HTTP_URL %q: want http://host:port", raw)
	}
	return nil
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func renderStatus(w io.Writer, st *clusterStatusAnswer) error {
	tw := newTable(w)
	healthy := "yes"
	if !st.Healthy {
		healthy = "no (no reachable leader)"
	}
	leader := "none"
	if st.Raft.LeaderID != "" {
		leader = st.Raft.LeaderID
		if st.Raft.LeaderHTTP != "" {
			leader += " (" + st.Raft.LeaderHTTP + ")"
		}
	}
	fmt.Fprintf(tw, "Node:\t%s\n", orDash(st.NodeID))
	fmt.Fprintf(tw, "State:\t%s\n", orDash(st.Raft.State))
	fmt.Fprintf(tw, "Healthy:\t%s\n", healthy)
	fmt.Fprintf(tw, "Leader:\t%s\n", leader)
	fmt.Fprintf(tw, "Term:\t%d\n", st.Raft.Term)
	fmt.Fprintf(tw, "Index:\tapplied %d, commit %d, last %d\n", st.Raft.AppliedIndex, st.Raft.CommitIndex, st.Raft.LastIndex)
	if st.Raft.Probation {
		fmt.Fprintf(tw, "Probation:\tyes: its log started empty, so it votes for no candidate until it has caught up with a leader\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return renderMembers(w, st.Members)
}

func renderMembers(w io.Writer, members []member) error {
	if len(members) == 0 {
		_, err := fmt.Fprintln(w, "no members")
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tROLE\tSUFFRAGE\tRAFT ADDRESS\tHTTP ADDRESS")
	for _, m := range members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.ID, role(m), orDash(m.Suffrage), orDash(m.RaftAddr), orDash(m.HTTPAddr))
	}
	return tw.Flush()
}

func role(m member) string {
	switch {
	case m.Leader:
		return "leader"
	case m.Suffrage == "" || m.Suffrage == "Voter":
		return "follower"
	default:
		return strings.ToLower(m.Suffrage)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
