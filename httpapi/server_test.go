package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi"
	"github.com/crownmq/crown/httpapi/envelope"
	"github.com/crownmq/crown/raftnode"
)

// stack is one Crown node running in-process: a real state machine on disk,
// a real single-node Raft over TCP on 127.0.0.1, and the HTTP API behind an
// httptest server.
type stack struct {
	t      testing.TB
	URL    string
	Dir    string // data directory (state under Dir/state, Raft under Dir/raft)
	State  *fsm.FSM
	Node   *raftnode.Node
	API    *httpapi.Server
	Server *httptest.Server
	client *http.Client
}

// stackOption adjusts the HTTP configuration before the server is built.
type stackOption func(*httpapi.Config)

// withKey configures a payload encryption key (64 hex characters).
func withKey(hexKey string) stackOption {
	return func(c *httpapi.Config) {
		k, err := envelope.ParseKey(hexKey)
		if err != nil {
			panic(err)
		}
		c.Key = k
	}
}

// freeAddr reserves a free TCP port on 127.0.0.1 and releases it.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// newStack starts a node and waits until it leads, answers GET /health with
// 200 and has registered its addresses in the replicated node registry.
func newStack(t testing.TB, opts ...stackOption) *stack {
	t.Helper()
	return newStackWrapped(t, nil, opts...)
}

// newStackWrapped is newStack with the HTTP layer's view of the cluster
// wrapped (nil: none), to stage what a real election would.
func newStackWrapped(t testing.TB, wrap func(httpapi.Cluster) httpapi.Cluster, opts ...stackOption) *stack {
	t.Helper()
	dir := t.TempDir()
	const nodeID = "node1"
	state, err := fsm.Open(fsm.Config{Dir: filepath.Join(dir, "state"), NodeID: nodeID})
	if err != nil {
		t.Fatalf("fsm.Open: %v", err)
	}
	raftAddr := freeAddr(t)
	node, err := raftnode.New(raftnode.Config{
		NodeID: nodeID, RaftAddr: raftAddr, DataDir: dir,
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond,
	}, state)
	if err != nil {
		state.Close()
		t.Fatalf("raftnode.New: %v", err)
	}
	// Listen first, so the advertised URL is the real one.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		node.Shutdown()
		state.Close()
		t.Fatal(err)
	}
	cfg := httpapi.Config{NodeID: nodeID, AdvertiseURL: "http://" + ln.Addr().String(), RaftAddr: raftAddr,
		Hotlist: true, WindowBatch: 100, Version: "test"}
	for _, o := range opts {
		o(&cfg)
	}
	var cluster httpapi.Cluster = node
	if wrap != nil {
		cluster = wrap(node)
	}
	api := httpapi.New(cfg, cluster, state)
	srv := httptest.NewUnstartedServer(api.Handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	ctx, cancel := context.WithCancel(context.Background())
	registered := make(chan struct{})
	go func() {
		defer close(registered)
		api.KeepRegistered(ctx)
	}()
	s := &stack{t: t, URL: srv.URL, Dir: dir, State: state, Node: node, API: api, Server: srv,
		client: &http.Client{Timeout: 60 * time.Second}}
	t.Cleanup(func() {
		cancel()
		<-registered
		api.Drain()
		srv.Close()
		wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := api.WaitRelays(wctx); err != nil {
			t.Errorf("WaitRelays: %v", err)
		}
		wcancel()
		api.CloseForwarding()
		if err := node.Shutdown(); err != nil {
			t.Errorf("node.Shutdown: %v", err)
		}
		if err := state.Close(); err != nil {
			t.Errorf("state.Close: %v", err)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if node.IsLeader() && s.isRegistered(cfg) {
			if st, _ := s.get("/health"); st == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node did not become a registered, healthy leader within 20 s (status %+v)", node.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *stack) isRegistered(cfg httpapi.Config) bool {
	nodes, err := s.State.Nodes()
	if err != nil {
		return false
	}
	for _, n := range nodes {
		if n.ID == cfg.NodeID && n.HTTPAddr == cfg.AdvertiseURL && n.RaftAddr == cfg.RaftAddr {
			return true
		}
	}
	return false
}

// response is a decoded HTTP answer.
type response struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   any // decoded JSON (nil for an empty body)
}

// do sends a request with a raw body (nil: no body) and decodes a JSON answer.
func (s *stack) do(method, path string, body []byte) response {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	r := response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if len(bytes.TrimSpace(raw)) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&r.Body); err != nil {
			s.t.Fatalf("%s %s: answer is not JSON: %v: %q", method, path, err, raw)
		}
	}
	return r
}

// postJSON posts body (marshalled unless it is already []byte or string)
// and returns the status and the decoded answer.
func (s *stack) postJSON(path string, body any) (int, any) {
	s.t.Helper()
	r := s.post(path, body)
	return r.Status, r.Body
}

// post is postJSON returning the whole response.
func (s *stack) post(path string, body any) response {
	s.t.Helper()
	var b []byte
	switch v := body.(type) {
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			s.t.Fatal(err)
		}
	}
	return s.do(http.MethodPost, path, b)
}

// get sends a GET and returns the status and the decoded answer.
func (s *stack) get(path string) (int, any) {
	s.t.Helper()
	r := s.do(http.MethodGet, path, nil)
	return r.Status, r.Body
}

// ---- small JSON accessors (numbers are json.Number) ----

type obj = map[string]any
type arr = []any

func asObj(t testing.TB, v any) obj {
	t.Helper()
	o, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("want a JSON object, got %T %v", v, v)
	}
	return o
}

func asArr(t testing.TB, v any) arr {
	t.Helper()
	a, ok := v.([]any)
	if !ok {
		t.Fatalf("want a JSON array, got %T %v", v, v)
	}
	return a
}

func asInt(t testing.TB, v any) int64 {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("want a JSON number, got %T %v", v, v)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatalf("want an integer, got %v", n)
	}
	return i
}

func asStr(t testing.TB, v any) string {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		t.Fatalf("want a JSON string, got %T %v", v, v)
	}
	return s
}

// keys returns the sorted member names of an object.
func keys(o obj) []string {
	out := make([]string, 0, len(o))
	for k := range o {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// wantKeys fails unless o has exactly the given member names.
func wantKeys(t testing.TB, what string, o obj, want ...string) {
	t.Helper()
	sort.Strings(want)
	got := keys(o)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%s: members %v, want %v", what, got, want)
	}
}

// wantError checks a request-level error answer.
func wantError(t testing.TB, r response, status int, code, field, message string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d; body %s", r.Status, status, r.Raw)
	}
	o := asObj(t, r.Body)
	if got := asStr(t, o["error"]); got != message {
		t.Errorf("error %q, want %q", got, message)
	}
	if got, _ := o["code"].(string); got != code {
		t.Errorf("code %q, want %q (body %s)", got, code, r.Raw)
	}
	if got, _ := o["field"].(string); got != field {
		t.Errorf("field %q, want %q (body %s)", got, field, r.Raw)
	}
	for k := range o {
		if k != "error" && k != "code" && k != "field" {
			t.Errorf("unexpected member %q in error body %s", k, r.Raw)
		}
	}
}

// fileContains reports whether the file at path, or any file under the
// directory at path, holds needle.
func fileContains(t testing.TB, path string, needle []byte) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || found {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		found = bytes.Contains(b, needle)
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return found
}
