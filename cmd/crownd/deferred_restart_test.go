package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// A node SIGKILLed right after it acknowledged pushes, with its state
// file never committed since (the commit interval an hour: only reads and
// snapshots commit), restarts from the older file, replays its log, and the
// first pop asked the moment it leads gets every acknowledged message.
// (That the pop waits for the replay is httpapi's TestReadFloorHoldsLocalReads:
// on one node the replay follows the election too closely to catch here.)
func TestAcknowledgedPushesVisibleRightAfterRestart(t *testing.T) {
	// An hour: nothing but a read or a snapshot commits the state file.
	c := tc.Start(t, 1, tc.WithArgs("--fsm-commit-interval", "1h", "--fsm-commit-batches", "1000000"))
	node := c.Node(0)
	const pushes, each = 10, 20
	for i := range pushes {
		var items []string
		for k := range each {
			items = append(items, fmt.Sprintf(`{"queue":"rf","transactionId":"rf-%d-%d","payload":{"i":%d}}`, i, k, i*each+k))
		}
		resp, err := http.Post(node.URL()+"/api/v1/push", "application/json", strings.NewReader(`{"items":[`+strings.Join(items, ",")+`]}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
			t.Fatalf("push %d: %d %s", i, resp.StatusCode, body)
		}
	}
	node.Kill()
	node.Restart()
	// Asked the moment the restarted node leads (health polled without a
	// pause), before its replay: a look at the state file alone would find
	// nothing. (A pop that races the election itself may answer empty, as
	// it always could: it is asked only once the node leads.)
	deadline := time.Now().Add(tc.LeaderTimeout)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted node did not lead within %v", tc.LeaderTimeout)
		}
		resp, err := http.Get(node.URL() + "/health")
		if err != nil {
			time.Sleep(time.Millisecond)
			continue
		}
		var h struct {
			Raft struct {
				State string `json:"state"`
			} `json:"raft"`
		}
		err = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if err == nil && h.Raft.State == "Leader" {
			break
		}
	}
	resp, err := http.Get(node.URL() + "/api/v1/pop/queue/rf?batch=1000&wait=false")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("pop answer %s: %v", body, err)
		}
	}
	if len(got.Messages) != pushes*each {
		t.Fatalf("the first pop after the restart got %d messages (status %d), want the %d acknowledged before the SIGKILL", len(got.Messages), resp.StatusCode, pushes*each)
	}
}
