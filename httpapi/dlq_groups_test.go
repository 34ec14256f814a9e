package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/raftnode"
)

// Tests for queen-api.md 3.11, 3.13, 3.14, 3.15, 4.3,
// 4.4, 4.7 and 4.20, driven over real HTTP against one in-process node
// (real state machine on disk, real single-node Raft over TCP).

type resStack struct {
	t      testing.TB
	url    string
	client *http.Client
}

func resNewStack(t testing.TB) *resStack {
	t.Helper()
	dir := t.TempDir()
	const nodeID = "node1"
	state, err := fsm.Open(fsm.Config{Dir: filepath.Join(dir, "state"), NodeID: nodeID})
	if err != nil {
		t.Fatalf("fsm.Open: %v", err)
	}
	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := rl.Addr().String()
	rl.Close()
	node, err := raftnode.New(raftnode.Config{
		NodeID: nodeID, RaftAddr: raftAddr, DataDir: dir,
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond,
	}, state)
	if err != nil {
		state.Close()
		t.Fatalf("raftnode.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{NodeID: nodeID, AdvertiseURL: "http://" + ln.Addr().String(), RaftAddr: raftAddr,
		Hotlist: true, WindowBatch: 100, Version: "test"}
	api := New(cfg, node, state)
	srv := httptest.NewUnstartedServer(api.Handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		api.KeepRegistered(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		api.Drain()
		srv.Close()
		node.Shutdown()
		state.Close()
	})
	s := &resStack{t: t, url: srv.URL, client: &http.Client{Timeout: 60 * time.Second}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if node.IsLeader() {
			if st, _ := s.req("GET", "/health", nil); st == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not healthy within 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// req sends a request (body marshalled unless a string) and decodes a JSON answer.
func (s *resStack) req(method, path string, body any) (int, any) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		var b []byte
		if str, ok := body.(string); ok {
			b = []byte(str)
		} else {
			var err error
			if b, err = json.Marshal(body); err != nil {
				s.t.Fatal(err)
			}
		}
		rd = bytes.NewReader(b)
	}
	r, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(r)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var v any
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			v = string(raw)
		}
	}
	return resp.StatusCode, v
}

func (s *resStack) must(method, path string, body any, want int) any {
	s.t.Helper()
	st, v := s.req(method, path, body)
	if st != want {
		s.t.Fatalf("%s %s: status %d, want %d: %v", method, path, st, want, v)
	}
	return v
}

type resObj = map[string]any

func (s *resStack) push(queue, partition string, txids ...string) {
	s.t.Helper()
	items := make([]resObj, len(txids))
	for i, id := range txids {
		items[i] = resObj{"queue": queue, "partition": partition, "payload": resObj{"id": id}, "transactionId": id}
	}
	s.must("POST", "/api/v1/push", resObj{"items": items}, http.StatusCreated)
}

// pop pops (path with query) and returns the messages, nil on 204.
func (s *resStack) pop(path string) []any {
	s.t.Helper()
	st, v := s.req("GET", path, nil)
	if st == http.StatusNoContent {
		return nil
	}
	if st != http.StatusOK {
		s.t.Fatalf("pop %s: %d %v", path, st, v)
	}
	return v.(resObj)["messages"].([]any)
}

func resTxIDs(msgs []any) []string {
	out := []string{}
	for _, m := range msgs {
		out = append(out, m.(resObj)["transactionId"].(string))
	}
	return out
}

// ackAll acks every message of a pop completed (or with status) for group ("" = queue mode).
func (s *resStack) ackAll(msgs []any, group, status string) {
	s.t.Helper()
	for _, m := range msgs {
		mo := m.(resObj)
		body := resObj{"transactionId": mo["transactionId"], "partitionId": mo["partitionId"],
			"leaseId": mo["leaseId"], "status": status}
		if group != "" {
			body["consumerGroup"] = group
		}
		res := s.must("POST", "/api/v1/ack", body, http.StatusOK).([]any)
		if ok, _ := res[0].(resObj)["success"].(bool); !ok {
			s.t.Fatalf("ack %v: %v", body, res)
		}
	}
}


// queen-api.md 3.13: "Read-only. Dead-letter entries, newest first." The
// queue filter is optional (only the clients always send it), so without it
// the entries of every queue must come newest first, not grouped by queue.
func TestResDLQNewestFirstAcrossQueues(t *testing.T) {
	s := resNewStack(t)
	s.push("aaa", "p", "old")
	s.push("zzz", "p", "new")
	// Dead-letter "old" (queue aaa) first, then "new" (queue zzz).
	s.ackAll(s.pop("/api/v1/pop/queue/aaa"), "", "dlq")
	time.Sleep(20 * time.Millisecond)
	s.ackAll(s.pop("/api/v1/pop/queue/zzz"), "", "dlq")

	v := s.must("GET", "/api/v1/dlq", nil, http.StatusOK).(resObj)
	msgs := v["messages"].([]any)
	got := resTxIDs(msgs)
	if strings.Join(got, ",") != "new,old" {
		t.Errorf("GET /api/v1/dlq order = %v, want [new old] (newest dead-lettering first)", got)
	}
	// Paging must follow the same order: the first page of one is the newest.
	v = s.must("GET", "/api/v1/dlq?limit=1", nil, http.StatusOK).(resObj)
	if got := resTxIDs(v["messages"].([]any)); len(got) != 1 || got[0] != "new" {
		t.Errorf("GET /api/v1/dlq?limit=1 = %v, want [new]", got)
	}
}

// queen-api.md 3.15 (partition seek): "Unknown partition: 500 {"success":
// false, "error": "Partition not found"} in Queen; the broker SHOULD answer
// 404 with the same body." Section 1.4 lets the broker add "a stable
// machine-readable code next to it", and Crown's README (Errors) promises
// that every request-level error carries one ("not_found" for an unknown
// resource), as its other 404s do (queue detail, message traces).
func TestResSeekPartitionNotFoundHasCode(t *testing.T) {
	s := resNewStack(t)
	s.push("q", "p1", "m1")
	for _, path := range []string{
		"/api/v1/consumer-groups/g/queues/q/partitions/nope/seek",    // unknown partition
		"/api/v1/consumer-groups/g/queues/nosuch/partitions/p1/seek", // unknown queue
	} {
		st, v := s.req("POST", path, `{}`)
		o, _ := v.(resObj)
		if st != http.StatusNotFound || o["error"] != "Partition not found" || o["success"] != false {
			t.Fatalf("POST %s: %d %v, want 404 {success:false, error:Partition not found}", path, st, v)
		}
		if o["code"] != "not_found" {
			t.Errorf("POST %s: body %v has code %v, want \"not_found\" like every other 404", path, v, o["code"])
		}
	}
}

// queen-api.md 1.2: names (queue, partition, consumer group) are "case-
// sensitive strings" that MUST be percent-decoded from paths and queries, and
// section 2: a consumer group "exists as soon as a pop or ack names it". 3.15
// lists every group by name and DELETE /api/v1/consumer-groups/{group}
// "Removes the group's cursors ... with deleteMetadata (default true) also its
// subscription records". A name taken from a query parameter that is not
// valid UTF-8 (here Latin-1 "café" as a client might percent-encode it)
// would be stored as raw bytes but listed as U+FFFD, then be neither
// readable nor deletable by the name the listing gives: it is refused (400,
// nothing written), or stored as the listing shows it.
func TestResGroupNameFromQueryRoundTrips(t *testing.T) {
	s := resNewStack(t)
	s.push("q", "p1", "m1")
	st, v := s.req("GET", "/api/v1/pop/queue/q?consumerGroup=caf%E9&subscriptionMode=new", nil)
	if st == http.StatusBadRequest {
		return // refusing a name that cannot round-trip is a fix
	}
	if st != http.StatusNoContent {
		t.Fatalf("pop: %d %v", st, v)
	}
	rows := s.must("GET", "/api/v1/consumer-groups", nil, http.StatusOK).([]any)
	if len(rows) == 0 {
		return // treating the name like an over-long one (nothing written) is a fix too
	}
	if len(rows) != 1 {
		t.Fatalf("listing %v, want the one group the pop named", rows)
	}
	name := rows[0].(resObj)["name"].(string)
	// The listed name addresses the group: its detail names queue q ...
	if d := s.must("GET", "/api/v1/consumer-groups/"+url.PathEscape(name), nil, http.StatusOK).(resObj); d["q"] == nil {
		t.Errorf("GET /api/v1/consumer-groups/%s = %v: the group the listing shows is unknown by that name", url.PathEscape(name), d)
	}
	// ... and deleting it by that name removes it from the listing.
	s.must("DELETE", "/api/v1/consumer-groups/"+url.PathEscape(name), nil, http.StatusOK)
	if rows := s.must("GET", "/api/v1/consumer-groups", nil, http.StatusOK).([]any); len(rows) != 0 {
		t.Errorf("after DELETE /api/v1/consumer-groups/%s the listing still holds %v", url.PathEscape(name), rows)
	}
}
