package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeCluster mimics crownd's cluster endpoints and their JSON.
type fakeCluster struct {
	mu        sync.Mutex
	self      string
	leader    string
	term      uint64
	probation bool
	members   []member
	requests  []string // "METHOD PATH BODY"
}

func newFakeCluster() *fakeCluster {
	return &fakeCluster{self: "node1", leader: "node2", term: 3, members: []member{
		{ID: "node1", RaftAddr: "127.0.0.1:7632", HTTPAddr: "http://127.0.0.1:6632", Suffrage: "Voter"},
		{ID: "node2", RaftAddr: "127.0.0.1:7633", HTTPAddr: "http://127.0.0.1:6633", Suffrage: "Voter"},
		{ID: "node3", RaftAddr: "127.0.0.1:7634", HTTPAddr: "", Suffrage: "Nonvoter"},
	}}
}

func (f *fakeCluster) membersJSON() []map[string]any {
	out := []map[string]any{}
	for _, m := range f.members {
		out = append(out, map[string]any{"id": m.ID, "raft_addr": m.RaftAddr, "http_addr": m.HTTPAddr,
			"suffrage": m.Suffrage, "leader": m.ID == f.leader})
	}
	return out
}

func writeJSONTest(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func apiErr(w http.ResponseWriter, status int, code, field, msg string) {
	body := map[string]any{"error": msg, "code": code}
	if field != "" {
		body["field"] = field
	}
	writeJSONTest(w, status, body)
}

func (f *fakeCluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	target := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	f.requests = append(f.requests, strings.TrimSpace(r.Method+" "+target+" "+string(body)))
	switch {
	case r.Method == "GET" && r.URL.Path == "/api/v1/cluster/status":
		writeJSONTest(w, 200, map[string]any{"node_id": f.self, "healthy": f.leader != "",
			"raft": map[string]any{"state": "Follower", "leader_id": f.leader, "leader_http": f.url(f.leader),
				"term": f.term, "applied_index": 41, "commit_index": 42, "last_index": 42, "probation": f.probation},
			"members": f.membersJSON()})
	case r.Method == "GET" && r.URL.Path == "/api/v1/cluster/members":
		writeJSONTest(w, 200, map[string]any{"members": f.membersJSON()})
	case r.Method == "POST" && r.URL.Path == "/api/v1/cluster/members":
		var m struct {
			ID       string `json:"id"`
			RaftAddr string `json:"raft_addr"`
			HTTPAddr string `json:"http_addr"`
		}
		if err := json.Unmarshal(body, &m); err != nil {
			apiErr(w, 400, "invalid_json", "", "Invalid JSON: "+err.Error())
			return
		}
		if m.ID == "" {
			apiErr(w, 400, "missing_field", "id", "id is required")
			return
		}
		f.members = append(f.members, member{ID: m.ID, RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr, Suffrage: "Voter"})
		writeJSONTest(w, 200, map[string]any{"success": true, "id": m.ID, "raft_addr": m.RaftAddr, "http_addr": m.HTTPAddr})
	case r.Method == "DELETE" && strings.HasPrefix(r.URL.Path, "/api/v1/cluster/members/"):
		id := strings.TrimPrefix(r.URL.Path, "/api/v1/cluster/members/")
		for i, m := range f.members {
			if m.ID == id {
				f.members = append(f.members[:i], f.members[i+1:]...)
				break
			}
		}
		writeJSONTest(w, 200, map[string]any{"success": true, "id": id})
	case r.Method == "POST" && r.URL.Path == "/api/v1/cluster/transfer-leadership":
		var req struct {
			ID string `json:"id"`
		}
		json.Unmarshal(body, &req)
		from := f.leader
		to := req.ID
		if to == "" {
			to = "node1"
		}
		if !f.has(to) {
			apiErr(w, 500, "internal", "", `no member "`+to+`"`)
			return
		}
		f.leader = to
		f.term++
		writeJSONTest(w, 200, map[string]any{"success": true, "from": from, "to": req.ID})
	default:
		apiErr(w, 404, "not_found", "", "Not Found")
	}
}

func (f *fakeCluster) has(id string) bool {
	for _, m := range f.members {
		if m.ID == id {
			return true
		}
	}
	return false
}

func (f *fakeCluster) url(id string) string {
	for _, m := range f.members {
		if m.ID == id {
			return m.HTTPAddr
		}
	}
	return ""
}

func (f *fakeCluster) reqs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// runCLI runs crownctl with CROWN_URL set to url.
func runCLI(t *testing.T, url string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb, func(k string) string {
		if k == "CROWN_URL" {
			return url
		}
		return ""
	})
	return code, out.String(), errb.String()
}

// deadURL is an address nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func TestParseInterleaved(t *testing.T) {
	cases := []struct {
		args    []string
		pos     []string
		json    bool
		url     string
		wantErr bool
	}{
		{args: nil, pos: nil, url: "u0"},
		{args: []string{"a", "b"}, pos: []string{"a", "b"}, url: "u0"},
		{args: []string{"--json", "a"}, pos: []string{"a"}, json: true, url: "u0"},
		{args: []string{"a", "--json", "b", "--url", "x"}, pos: []string{"a", "b"}, json: true, url: "x"},
		{args: []string{"a", "-url=y", "b"}, pos: []string{"a", "b"}, url: "y"},
		{args: []string{"a", "--", "--json", "b"}, pos: []string{"a", "--json", "b"}, url: "u0"},
		{args: []string{"a", "--nope"}, wantErr: true},
		{args: []string{"--url"}, wantErr: true},
	}
	for _, c := range cases {
		e := &env{urls: "u0", timeout: time.Second}
		fs := newFlagSet("test", e)
		pos, err := parseInterleaved(fs, c.args)
		if c.wantErr {
			if err == nil {
				t.Errorf("%q: no error", c.args)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if !reflect.DeepEqual(pos, c.pos) || e.json != c.json || e.urls != c.url {
			t.Errorf("%q: got pos=%q json=%v url=%q, want pos=%q json=%v url=%q", c.args, pos, e.json, e.urls, c.pos, c.json, c.url)
		}
	}
	if _, err := parseInterleaved(newFlagSet("t", &env{}), []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: got %v, want flag.ErrHelp", err)
	}
}

func TestUsageErrorsMakeNoRequest(t *testing.T) {
	f := newFakeCluster()
	srv := httptest.NewServer(f)
	defer srv.Close()
	cases := []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"cluster"}, "crownctl cluster status"},
		{[]string{"cluster", "nope"}, `unknown command "nope"`},
		{[]string{"cluster", "status", "extra"}, "takes no arguments"},
		{[]string{"cluster", "members", "x"}, "takes no arguments"},
		{[]string{"cluster", "add", "node4"}, "missing arguments"},
		{[]string{"cluster", "add", "node4", "h:1", "http://h:2", "x"}, "too many arguments"},
		{[]string{"cluster", "add", "node4", "127.0.0.1"}, "want host:port"},
		{[]string{"cluster", "add", "node4", ":7635"}, "host is missing"},
		{[]string{"cluster", "add", "node4", "h:99999"}, "bad port"},
		{[]string{"cluster", "add", "node4", "h:1", "ftp://x"}, "want http://host:port"},
		{[]string{"cluster", "remove"}, "missing arguments"},
		{[]string{"cluster", "remove", "a", "b"}, "too many arguments"},
		{[]string{"cluster", "transfer-leadership", "a", "b"}, "too many arguments"},
		{[]string{"cluster", "status", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"--timeout", "0", "cluster", "status"}, "--timeout must be positive"},
		{[]string{"--url", "ftp://x", "cluster", "status"}, "want http://host:port"},
		{[]string{"--url", " , ", "cluster", "status"}, "--url is empty"},
	}
	for _, c := range cases {
		code, stdout, stderr := runCLI(t, srv.URL, c.args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", c.args, code, exitUsage, stderr)
		}
		if stdout != "" {
			t.Errorf("%q: stdout %q, want nothing", c.args, stdout)
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("%q: stderr %q does not contain %q", c.args, stderr, c.want)
		}
	}
	if r := f.reqs(); len(r) != 0 {
		t.Errorf("usage errors sent requests: %q", r)
	}
}

func TestHelpEverywhere(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "crownctl [global flags] COMMAND"},
		{[]string{"-h"}, "Commands:"},
		{[]string{"help"}, "Commands:"},
		{[]string{"cluster", "--help"}, "crownctl cluster transfer-leadership [ID]"},
		{[]string{"help", "cluster"}, "crownctl cluster add ID RAFT_ADDR [HTTP_URL]"},
		{[]string{"cluster", "help", "remove"}, "Usage: crownctl cluster remove [flags] ID"},
		{[]string{"cluster", "status", "--help"}, "Usage: crownctl cluster status [flags]"},
		{[]string{"cluster", "members", "--help"}, "Usage: crownctl cluster members [flags]"},
		{[]string{"cluster", "add", "--help"}, "--join"},
		{[]string{"cluster", "add", "node4", "--help"}, "Usage: crownctl cluster add [flags] ID RAFT_ADDR [HTTP_URL]"},
		{[]string{"cluster", "remove", "-h"}, "DELETE /api/v1/cluster/members/ID"},
		{[]string{"cluster", "transfer-leadership", "--help"}, "most up-to-date follower"},
		{[]string{"help", "cluster", "status"}, "--url string"},
		{[]string{"version"}, "crownctl dev"},
	}
	for _, c := range cases {
		code, stdout, stderr := runCLI(t, deadURL(t), c.args...)
		if code != exitOK || stderr != "" {
			t.Errorf("%q: exit %d, stderr %q", c.args, code, stderr)
		}
		if !strings.Contains(stdout, c.want) {
			t.Errorf("%q: stdout does not contain %q:\n%s", c.args, c.want, stdout)
		}
	}
}

func TestStatusTable(t *testing.T) {
	srv := httptest.NewServer(newFakeCluster())
	defer srv.Close()
	code, stdout, stderr := runCLI(t, srv.URL, "cluster", "status")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := `Node:     node1
State:    Follower
Healthy:  yes
Leader:   node2 (http://127.0.0.1:6633)
Term:     3
Index:    applied 41, commit 42, last 42

ID     ROLE      SUFFRAGE  RAFT ADDRESS    HTTP ADDRESS
node1  follower  Voter     127.0.0.1:7632  http://127.0.0.1:6632
node2  leader    Voter     127.0.0.1:7633  http://127.0.0.1:6633
node3  nonvoter  Nonvoter  127.0.0.1:7634  -
`
	if stdout != want {
		t.Errorf("got:\n%s\nwant:\n%s", stdout, want)
	}
}

// TestStatusOnProbation: a node whose Raft log started empty says so, and
// that it votes again once caught up (raftnode/DESIGN.md); the line is left
// out otherwise (TestStatusTable).
func TestStatusOnProbation(t *testing.T) {
	f := newFakeCluster()
	f.probation = true
	srv := httptest.NewServer(f)
	defer srv.Close()
	code, stdout, _ := runCLI(t, srv.URL, "cluster", "status")
	want := "Index:      applied 41, commit 42, last 42\nProbation:  yes: its log started empty, so it votes for no candidate until it has caught up with a leader\n"
	if code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("exit %d, want %q in:\n%s", code, want, stdout)
	}
}

func TestStatusWithoutLeader(t *testing.T) {
	f := newFakeCluster()
	f.leader = ""
	srv := httptest.NewServer(f)
	defer srv.Close()
	code, stdout, _ := runCLI(t, srv.URL, "cluster", "status")
	if code != 0 || !strings.Contains(stdout, "Healthy:  no (no reachable leader)\nLeader:   none\n") ||
		strings.Contains(stdout, "leader ") {
		t.Errorf("exit %d:\n%s", code, stdout)
	}
}

func TestMembersTable(t *testing.T) {
	srv := httptest.NewServer(newFakeCluster())
	defer srv.Close()
	code, stdout, stderr := runCLI(t, srv.URL, "cluster", "members")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := `ID     ROLE      SUFFRAGE  RAFT ADDRESS    HTTP ADDRESS
node1  follower  Voter     127.0.0.1:7632  http://127.0.0.1:6632
node2  leader    Voter     127.0.0.1:7633  http://127.0.0.1:6633
node3  nonvoter  Nonvoter  127.0.0.1:7634  -
`
	if stdout != want {
		t.Errorf("got:\n%s\nwant:\n%s", stdout, want)
	}
	var buf bytes.Buffer
	if err := renderMembers(&buf, nil); err != nil || buf.String() != "no members\n" {
		t.Errorf("empty members: %q, %v", buf.String(), err)
	}
}

func TestJSONOutput(t *testing.T) {
	srv := httptest.NewServer(newFakeCluster())
	defer srv.Close()
	for _, args := range [][]string{
		{"--json", "cluster", "status"},
		{"cluster", "--json", "members"},
		{"cluster", "members", "--json"},
	} {
		code, stdout, stderr := runCLI(t, srv.URL, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, stderr)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(stdout), &v); err != nil {
			t.Fatalf("%q: not JSON: %v\n%s", args, err, stdout)
		}
		if ms, _ := v["members"].([]any); len(ms) != 3 {
			t.Errorf("%q: members = %v", args, v["members"])
		}
		if !strings.HasPrefix(stdout, "{\n  \"") || !strings.HasSuffix(stdout, "}\n") {
			t.Errorf("%q: not indented:\n%s", args, stdout)
		}
	}
}

func TestAddRemove(t *testing.T) {
	f := newFakeCluster()
	srv := httptest.NewServer(f)
	defer srv.Close()

	code, stdout, stderr := runCLI(t, srv.URL, "cluster", "add", "node4", "127.0.0.1:7635", "http://127.0.0.1:6635/")
	if code != 0 || stdout != "added node4 as a voter (raft 127.0.0.1:7635, http http://127.0.0.1:6635)\n" {
		t.Errorf("add: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, srv.URL, "cluster", "add", "node5", "h5:7632", "--json")
	if code != 0 || !strings.Contains(stdout, `"id": "node5"`) {
		t.Errorf("add --json: exit %d, stdout %q", code, stdout)
	}
	code, stdout, _ = runCLI(t, srv.URL, "cluster", "remove", "node/5")
	if code != 0 || stdout != "removed node/5\n" {
		t.Errorf("remove: exit %d, stdout %q", code, stdout)
	}
	// --force passes the leader's quorum check by (deployments.md).
	if code, _, stderr := runCLI(t, srv.URL, "cluster", "remove", "--force", "node6"); code != 0 {
		t.Errorf("remove --force: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, srv.URL, "cluster", "add", "node7", "h7:7632", "--force"); code != 0 {
		t.Errorf("add --force: exit %d, stderr %q", code, stderr)
	}
	want := []string{
		`POST /api/v1/cluster/members {"http_addr":"http://127.0.0.1:6635","id":"node4","raft_addr":"127.0.0.1:7635"}`,
		`POST /api/v1/cluster/members {"id":"node5","raft_addr":"h5:7632"}`,
		`DELETE /api/v1/cluster/members/node%2F5`,
		`DELETE /api/v1/cluster/members/node6?force=true`,
		`POST /api/v1/cluster/members?force=true {"id":"node7","raft_addr":"h7:7632"}`,
	}
	if got := f.reqs(); !reflect.DeepEqual(got, want) {
		t.Errorf("requests:\n%q\nwant\n%q", got, want)
	}
}

func TestTransferLeadership(t *testing.T) {
	f := newFakeCluster()
	srv := httptest.NewServer(f)
	defer srv.Close()
	code, stdout, stderr := runCLI(t, srv.URL, "cluster", "transfer-leadership", "node1")
	if code != 0 || stdout != "leadership transferred from node2 to node1\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, srv.URL, "cluster", "transfer-leadership", "--json")
	if code != 0 || !strings.Contains(stdout, `"from": "node1"`) {
		t.Errorf("--json: exit %d, stdout %q", code, stdout)
	}
	// Each transfer first reads the status: the leader it replaces tells a
	// relayed transfer's 503 from a failed one (cli_review_test.go).
	r := f.reqs()
	if r[0] != "GET /api/v1/cluster/status" || r[1] != `POST /api/v1/cluster/transfer-leadership {"id":"node1"}` ||
		r[len(r)-1] != `POST /api/v1/cluster/transfer-leadership {"id":""}` {
		t.Errorf("requests: %q", r)
	}
	// A server error is reported with its code; exit 1.
	code, stdout, stderr = runCLI(t, srv.URL, "cluster", "transfer-leadership", "nodeX")
	if code != exitError || stdout != "" ||
		stderr != "crownctl cluster transfer-leadership: no member \"nodeX\" (internal, HTTP 500)\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestTransferLeaderUnknownAfterward(t *testing.T) {
	// The transfer is accepted but no new leader shows up in time.
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/cluster/transfer-leadership", func(w http.ResponseWriter, _ *http.Request) {
		writeJSONTest(w, 200, map[string]any{"success": true, "from": "node1", "to": "node2"})
	})
	mux.HandleFunc("/api/v1/cluster/status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSONTest(w, 200, map[string]any{"node_id": "node1", "raft": map[string]any{"leader_id": "node1"}})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	code, stdout, _ := runCLI(t, srv.URL, "--timeout", "300ms", "cluster", "transfer-leadership", "node2")
	if code != 0 || stdout != "leadership transfer from node1 to node2 started; new leader not yet known\n" {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
}

func TestErrorBodies(t *testing.T) {
	f := newFakeCluster()
	srv := httptest.NewServer(f)
	defer srv.Close()
	code, stdout, stderr := runCLI(t, srv.URL, "cluster", "add", "", "h:1")
	if code != exitError || stdout != "" ||
		stderr != "crownctl cluster add: id is required (missing_field, field id, HTTP 400)\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	c, err := NewClient(srv.URL, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(context.Background(), "/nope", nil)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "not_found" || ae.Message != "Not Found" ||
		ae.URL != srv.URL+"/nope" {
		t.Errorf("got %#v", err)
	}

	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "bad gateway from a proxy", http.StatusBadGateway)
	}))
	defer plain.Close()
	code, _, stderr = runCLI(t, plain.URL, "cluster", "members")
	if code != exitError || stderr != "crownctl cluster members: bad gateway from a proxy (HTTP 502)\n" {
		t.Errorf("plain error: exit %d, stderr %q", code, stderr)
	}

	notJSON := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello")
	}))
	defer notJSON.Close()
	code, _, stderr = runCLI(t, notJSON.URL, "cluster", "members")
	if code != exitError || !strings.Contains(stderr, "answer is not JSON") {
		t.Errorf("non-JSON answer: exit %d, stderr %q", code, stderr)
	}
}

func TestURLListFailover(t *testing.T) {
	f := newFakeCluster()
	srv := httptest.NewServer(f)
	defer srv.Close()
	dead := deadURL(t)
	hostOnly := strings.TrimPrefix(srv.URL, "http://")

	// Reads and writes skip a node that refuses connections; a URL without
	// a scheme gets http://.
	code, stdout, stderr := runCLI(t, dead+","+hostOnly, "cluster", "members")
	if code != 0 || !strings.Contains(stdout, "node2  leader") {
		t.Errorf("members: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, dead+", "+srv.URL+"/", "cluster", "remove", "node3")
	if code != 0 {
		t.Errorf("remove: exit %d, stderr %q", code, stderr)
	}
	// --url wins over CROWN_URL.
	code, _, stderr = runCLI(t, dead, "--url", srv.URL, "cluster", "status")
	if code != 0 {
		t.Errorf("--url over env: exit %d, stderr %q", code, stderr)
	}
	// An HTTP error answer is final: the next URL is not tried.
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		apiErr(w, 503, "no_leader", "", "no leader")
	}))
	defer failing.Close()
	before := len(f.reqs())
	code, _, stderr = runCLI(t, failing.URL+","+srv.URL, "cluster", "members")
	if code != exitError || !strings.Contains(stderr, "no leader (no_leader, HTTP 503)") || len(f.reqs()) != before {
		t.Errorf("error answer: exit %d, stderr %q", code, stderr)
	}
	// Nobody answers: every failure is listed.
	dead2 := deadURL(t)
	code, _, stderr = runCLI(t, dead+","+dead2, "cluster", "status")
	if code != exitError || !strings.Contains(stderr, "no node answered:") ||
		!strings.Contains(stderr, strings.TrimPrefix(dead, "http://")) || !strings.Contains(stderr, strings.TrimPrefix(dead2, "http://")) {
		t.Errorf("all dead: exit %d, stderr %q", code, stderr)
	}
}

func TestWriteNotRetriedAfterConnection(t *testing.T) {
	// A node that accepts the connection and then drops it may have applied
	// the write: the next URL must not get it too.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			c.Read(buf)
			c.Close()
		}
	}()
	f := newFakeCluster()
	srv := httptest.NewServer(f)
	defer srv.Close()
	code, _, _ := runCLI(t, "http://"+ln.Addr().String()+","+srv.URL, "cluster", "add", "node4", "h:1")
	if code != exitError || len(f.reqs()) != 0 {
		t.Errorf("exit %d, requests on the second node: %q", code, f.reqs())
	}
	// A read is retried on the next node.
	code, _, _ = runCLI(t, "http://"+ln.Addr().String()+","+srv.URL, "cluster", "members")
	if code != 0 || len(f.reqs()) != 1 {
		t.Errorf("read: exit %d, requests %q", code, f.reqs())
	}
}
