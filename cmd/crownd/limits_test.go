package main_test

// Limits and resource use against real crownd processes (README, Limits).

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// TestFollowerRelaysWhatTheLeaderServes: any node serves any request
// (queen-api.md 1.1). A request line and headers up to the HTTP server's
// 1 MiB are served by the leader; sent to a follower, the same request must
// be served too, not refused as if no leader could be reached. The relay's
// frame carries a target and a header value of at most 64 KiB each.
func TestFollowerRelaysWhatTheLeaderServes(t *testing.T) {
	c := tc.Start(t, 3)
	leader := c.Leader()
	F := clusterFollowers(c, leader)[0].URL()
	const queue = "limits-long-target"
	pad := strings.Repeat("x", 100<<10) // over the frame's 64 KiB, far below 1 MiB

	push := rcDo(t, "POST", F+"/api/v1/push?pad="+pad, map[string]any{
		"items": []map[string]any{{"queue": queue, "payload": 1}}})
	if push.status != 201 {
		t.Fatalf("push with a 100 KiB query through a follower: %d %s", push.status, push.body)
	}
	pop := rcDo(t, "GET", F+"/api/v1/pop/queue/"+queue+"?wait=false&pad="+pad, nil)
	if pop.status != 200 {
		t.Fatalf("pop with a 100 KiB query through a follower: %d %s", pop.status, pop.body)
	}
	push = rcDo(t, "POST", F+"/api/v1/push", map[string]any{
		"items": []map[string]any{{"queue": queue, "payload": 2}}}, "Authorization", "Bearer "+pad)
	if push.status != 201 {
		t.Fatalf("push with a 100 KiB Authorization header through a follower: %d %s", push.status, push.body)
	}
	pause := rcDo(t, "POST", F+"/ojs/v1/queues/"+queue+"/pause?pad="+pad, "{}")
	if pause.status != 200 {
		t.Fatalf("OJS pause with a 100 KiB query through a follower: %d %s", pause.status, pause.body)
	}
}

// heapAlloc reads a node's go_memstats_heap_alloc_bytes.
func heapAlloc(t *testing.T, n *tc.Node) float64 {
	t.Helper()
	resp, err := http.Get(n.URL() + "/metrics/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_alloc_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no go_memstats_heap_alloc_bytes in %s's metrics (%v)", n.ID(), sc.Err())
	return 0
}

// TestAnnouncedBodyCostsNothingUntilSent: the memory a request body holds
// follows the bytes the client sent, not the Content-Length it announced.
// Fifty connections announcing 16 MiB pushes and sending a few bytes held
// 800 MiB of heap for as long as they stayed open, and a heap that large
// also raises the collector's goal, so the node's other garbage piled up
// meanwhile.
func TestAnnouncedBodyCostsNothingUntilSent(t *testing.T) {
	c := tc.Start(t, 1)
	n := c.Leader()
	before := heapAlloc(t, n)
	const conns, announced = 50, 16_000_000
	for i := range conns {
		conn, err := net.Dial("tcp", strings.TrimPrefix(n.URL(), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		head := fmt.Sprintf("POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", announced)
		if _, err := io.WriteString(conn, head+`{"items":[`); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	time.Sleep(time.Second) // the handlers are reading the bodies
	after := heapAlloc(t, n)
	if grown := after - before; grown > 64<<20 {
		t.Fatalf("%d requests that announced %d-byte bodies and sent 10 bytes each grew the heap by %.0f MiB (%.0f -> %.0f MiB)",
			conns, announced, grown/(1<<20), before/(1<<20), after/(1<<20))
	}
}
