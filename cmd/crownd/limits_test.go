package main_test

// Limits and resource use against real crownd processes (README, Limits).

import (
	"strings"
	"testing"

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
