package main

// Tests of the crownctl command line: bad JSON arguments, the policy
// listing's pages, policy put's existence check, and transfer-leadership
// through a follower. Each runs the real command (run) against a real
// crownd or an HTTP server standing in for one.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crownmq/crown/cmd/internal/testcluster"
)

// A JSON argument of null is not a JSON object: it must be refused as a
// bad command line (exit 2, nothing sent) like any other non-object, never
// a panic ("assignment to entry in nil map" in queue create and policy put
// before the fix). Project standard: "no panics on bad input", "exit code
// 2 for usage errors"; queue create --help: "CONFIG_JSON holds the
// sections".
func TestNullJSONArgumentIsUsageError(t *testing.T) {
	rec, srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"unexpected"}`, http.StatusTeapot)
	})
	for _, args := range [][]string{
		{"queue", "create", "x", "null"},
		{"queue", "patch", "x", "null"},
		{"policy", "put", "x", "null"},
		{"policy", "put", "_default", "null"},
		{"policy", "put", "x", " null "},
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("crownctl %q: panic %v", args, p)
				}
			}()
			code, stdout, stderr := runCLI(t, srv.URL, args...)
			if code != exitUsage || stdout != "" || !strings.Contains(stderr, "JSON object") {
				t.Errorf("crownctl %q: exit %d, stdout %q, stderr %q; want exit 2 saying a JSON object is needed",
					args, code, stdout, stderr)
			}
		}()
	}
	if reqs := rec.sent(); len(reqs) != 0 {
		t.Errorf("a refused command line sent requests: %q", reqs)
	}
}

// policy list lists every policy: the server pages its listing (at most
// 200 a page, with pagination.has_more and next_cursor), and reading only
// the first page silently drops the rest from the table and from --json.
// crownctl policy list --help: "list the named policies and the _default
// overrides"; queue list reads every page the same way.
func TestPolicyListReadsEveryPage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts crownd")
	}
	u := testcluster.Start(t, 1).Node(0).URL()
	const n = 230 // more than one page of 200
	hc := &http.Client{Timeout: 30 * time.Second}
	for i := range n {
		body := fmt.Sprintf(`{"name":"p%03d","match":"m%03d.*","config":{"capacity":{"max_depth":%d}}}`, i, i, i+1)
		resp, err := hc.Post(u+"/ojs/v1/queues/_policies", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("create policy p%03d: HTTP %d %s", i, resp.StatusCode, b)
		}
	}
	out := cli(t, u, exitOK, "policy", "list")
	for i := range n {
		if name := fmt.Sprintf("p%03d ", i); !strings.Contains(out, name) {
			t.Fatalf("policy list lacks policy p%03d (of %d):\n%.2000s", i, n, out)
		}
	}
	var ans struct {
		Policies json.RawMessage `json:"policies"`
	}
	if err := json.Unmarshal([]byte(cli(t, u, exitOK, "--json", "policy", "list")), &ans); err != nil {
		t.Fatal(err)
	}
	// The --json answer holds the policies, whichever page they came from.
	got := bytes.Count(ans.Policies, []byte(`"match"`))
	if got != n {
		t.Errorf("--json policy list holds %d policies, want %d", got, n)
	}
}

// policy put creates the policy only when the lookup says it does not
// exist (404); any other failure of the lookup (a 503 while the cluster
// elects, a timeout) is the command's error. Treating every failure as
// "absent" sent a POST that either creates a policy the operator meant to
// patch or fails with a misleading 409 "already exists".
func TestPolicyPutLookupFailureIsReported(t *testing.T) {
	rec, srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":"no leader within 5s","code":"no_leader"}`)
			return
		}
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"error":{"code":"conflict","type":"policy_exists","message":"policy batch already exists"}}`)
	})
	code, _, stderr := runCLI(t, srv.URL, "policy", "put", "batch", `{"priority":5}`)
	if code != exitError || !strings.Contains(stderr, "no_leader") {
		t.Errorf("exit %d, stderr %q; want exit 1 with the lookup's no_leader error", code, stderr)
	}
	for _, r := range rec.sent() {
		if r != "GET /ojs/v1/queues/_policies/batch" {
			t.Errorf("after a failed lookup crownctl sent %q", r)
		}
	}
}

// transfer-leadership sent to a follower: the follower relays the request
// to the leader, the leader hands leadership over, and the follower, seeing
// the leader change, answers 503 forwarding_failed ("may have been
// applied") although the transfer happened. The command must report the
// transfer it asked for (exit 0, "leadership transferred from A to B"),
// not fail. docs/deployments.md: "transfer-leadership hands leadership to
// ID (or to the most up-to-date follower) and waits until the new leader is
// known"; `--url` may name any node.
func TestTransferLeadershipThroughFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("starts crownd")
	}
	c := testcluster.Start(t, 3)
	for round := range 2 {
		leader, err := c.WaitLeader(20 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var follower *testcluster.Node
		for _, n := range c.Nodes() {
			if n != leader {
				follower = n
				break
			}
		}
		args := []string{"cluster", "transfer-leadership"}
		if round == 1 {
			args = append(args, follower.ID()) // to the very node relaying it
		}
		code, stdout, stderr := runCLI(t, follower.URL(), args...)
		want := "leadership transferred from " + leader.ID() + " to "
		if code != exitOK || !strings.HasPrefix(stdout, want) {
			t.Fatalf("round %d: crownctl --url %s (follower) %s: exit %d, stdout %q, stderr %q; want exit 0 and %q...",
				round, follower.ID(), strings.Join(args, " "), code, stdout, stderr, want)
		}
		if round == 1 && stdout != want+follower.ID()+"\n" {
			t.Errorf("round 1: stdout %q, want the transfer to %s", stdout, follower.ID())
		}
	}
}

// An empty NAME is a bad command line (exit 2, nothing sent): sent as is,
// "/ojs/v1/queues/" + "" is the listing's path, so `queue get ""` and
// `policy get ""` printed an empty record with exit 0, and `policy put ""`
// found "it" there and sent a PATCH to the listing (405). cluster remove
// refuses an empty ID the same way ("ID is empty").
func TestEmptyNameIsUsageError(t *testing.T) {
	rec, srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		// What the listings answer: a 200 that decodes into an empty record.
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"queues":[],"policies":[],"pagination":{"has_more":false}}`)
	})
	for _, args := range [][]string{
		{"queue", "get", ""}, {"queue", "stats", ""}, {"queue", "create", ""}, {"queue", "patch", "", "{}"},
		{"queue", "pause", ""}, {"queue", "resume", ""}, {"queue", "purge", "", "--yes"}, {"queue", "delete", ""},
		{"policy", "get", ""}, {"policy", "put", "", `{"match":"x","config":{}}`}, {"policy", "delete", ""},
	} {
		code, stdout, stderr := runCLI(t, srv.URL, args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "NAME is empty") {
			t.Errorf("crownctl %q: exit %d, stdout %q, stderr %q; want exit 2, \"NAME is empty\"", args, code, stdout, stderr)
		}
	}
	if reqs := rec.sent(); len(reqs) != 0 {
		t.Errorf("an empty NAME sent requests: %q", reqs)
	}
}

// recorder is a stand-in server that answers with answer and records each
// request's method and path.
type recorder struct {
	mu   sync.Mutex
	reqs []string
}

func newRecorder(t *testing.T, answer http.HandlerFunc) (*recorder, *httptest.Server) {
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, r.Method+" "+r.URL.Path)
		rec.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	return rec, srv
}

// sent is what the server received so far.
func (r *recorder) sent() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reqs...)
}
