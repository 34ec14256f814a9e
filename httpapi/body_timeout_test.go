package httpapi_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/httpapi"
)

func withBodyTimeout(d time.Duration) stackOption {
	return func(c *httpapi.Config) { c.BodyTimeout = d }
}

// rawRequest writes head and part of a body on a new connection and reads
// the answer, giving up after wait.
func rawRequest(t *testing.T, url, head, part string, wait time.Duration) (*http.Response, []byte, error) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head+part); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// TestSlowBodyTimesOut: a client that announces a body and trickles it (or
// sends none of it) must not hold its connection for ever: the headers are
// bounded by the server's ReadHeaderTimeout, the body by BodyTimeout, after
// which the request is answered 408 body_timeout (OJS routes: their
// invalid_request) and nothing is written.
func TestSlowBodyTimesOut(t *testing.T) {
	s := newStack(t, withBodyTimeout(300*time.Millisecond))
	for _, tc := range []struct {
		name, path, part string
		status           int
		code             string
	}{
		{"push, part of the body", "/api/v1/push", `{"items":[{"queue":"slow","payload":`, 408, "body_timeout"},
		{"push, nothing of the body", "/api/v1/push", "", 408, "body_timeout"},
		{"configure", "/api/v1/configure", `{"queue":"slow"`, 408, "body_timeout"},
		{"OJS create", "/ojs/v1/queues", `{"name":"slow"`, 400, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := "POST " + tc.path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 16000000\r\n\r\n"
			start := time.Now()
			resp, b, err := rawRequest(t, s.URL, head, tc.part, 5*time.Second)
			if err != nil {
				t.Fatalf("no answer %v after the request's headers and part of its body: %v", time.Since(start).Round(time.Millisecond), err)
			}
			if resp.StatusCode != tc.status || !strings.Contains(string(b), `"`+tc.code+`"`) {
				t.Fatalf("answer %d %s; want %d %s", resp.StatusCode, b, tc.status, tc.code)
			}
			if !strings.Contains(resp.Header.Get("Content-Type"), "json") {
				t.Errorf("Content-Type %q; want JSON", resp.Header.Get("Content-Type"))
			}
		})
	}
	var queues struct {
		Queues []struct {
			Name string `json:"name"`
		} `json:"queues"`
	}
	resp, err := http.Get(s.URL + "/api/v1/resources/queues")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&queues); err != nil {
		t.Fatal(err)
	}
	for _, q := range queues.Queues {
		if q.Name == "slow" {
			t.Errorf("a request whose body timed out created queue %q", q.Name)
		}
	}
}

// TestBodyTimeoutEndsWithTheBody: the deadline covers the body only. A
// request whose body arrived in time may take longer than BodyTimeout to
// be answered (here a follower waiting on a slow leader), and net/http
// cancels a request when a read deadline passes after its body: the
// deadline must be lifted, or the client gets a 503 for a request the
// leader applied.
func TestBodyTimeoutEndsWithTheBody(t *testing.T) {
	s, view := newFollowerStack(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(time.Second)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `[{"status":"queued"}]`)
	}, withBodyTimeout(200*time.Millisecond))
	view.following.Store(true)
	resp, err := http.Post(s.URL+"/api/v1/push", "application/json",
		strings.NewReader(`{"items":[{"queue":"q","payload":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("push relayed to a leader answering after 1 s: %d %s; want the leader's 201", resp.StatusCode, b)
	}
}
