package main_test

// "Any node serves any request. A follower
// forwards writes to the leader transparently; a client never needs to know
// who leads. Long-poll pops wake on whichever node they wait." One
// three-node cluster of real crownd processes serves every subtest; the last
// subtests stop nodes, so they run last.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// rcResp is one HTTP answer.
type rcResp struct {
	status int
	header http.Header
	body   []byte
}

// rcDo sends one request (body marshalled unless nil or a string) and reads
// the whole answer.
func rcDo(t *testing.T, method, url string, body any, headers ...string) rcResp {
	t.Helper()
	var raw string
	switch b := body.(type) {
	case nil:
	case string:
		raw = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(j)
	}
	a := ojsDo(t, "", method, url, raw, headers...)
	return rcResp{status: a.Status, header: a.Header, body: []byte(a.Raw)}
}

func rcJSON(t *testing.T, r rcResp, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("answer %d is not the JSON expected: %v: %s", r.status, err, r.body)
	}
}

func TestFollowerServesLikeTheLeader(t *testing.T) {
	c := tc.Start(t, 3)
	leader := c.Leader()
	fs := clusterFollowers(c, leader)
	f, other := fs[0], fs[1]
	L, F := leader.URL(), f.URL()

	// queen-api.md 1.1: "Any node of a cluster MUST serve any request";
	// section 5: "Pops are writes. ... Reads such as listings and status
	// SHOULD be served with the same read-your-writes guarantee (leader reads
	// or read-index), since clients push and then list." The README promises
	// it for writes received by a follower: "Before relaying, the follower
	// waits until it has itself applied the write (X-Crown-Index), so a
	// client that reads from the same node next sees its own write."
	//
	// A pop through a follower leases a partition for its group; a read of
	// that group on the same follower right after the 200 must show the
	// lease: the follower relays the leader's X-Crown-Index and records it,
	// so the read waits until the lease is applied there.
	t.Run("PopReadYourWrites", func(t *testing.T) {
		const queue, n = "rc-pop-ryw", 30
		var items []map[string]any
		for i := range n {
			items = append(items, map[string]any{"queue": queue, "partition": fmt.Sprintf("p%d", i), "payload": i})
		}
		if r := rcDo(t, "POST", L+"/api/v1/push", map[string]any{"items": items}); r.status != 201 {
			t.Fatalf("push: %d %s", r.status, r.body)
		}
		// Let the follower apply the push, so only the pops can be missing.
		if r := rcDo(t, "GET", F+"/api/v1/resources/queues/"+queue+"?consistency=linearizable", nil); r.status != 200 {
			t.Fatalf("linearizable read: %d %s", r.status, r.body)
		}
		stale, noIndex := 0, 0
		for i := range n {
			group := fmt.Sprintf("rc-g%d", i)
			part := fmt.Sprintf("p%d", i)
			pop := rcDo(t, "GET", F+"/api/v1/pop/queue/"+queue+"/partition/"+part+"?consumerGroup="+group, nil)
			if pop.status != 200 {
				t.Fatalf("pop %s through the follower: %d %s", part, pop.status, pop.body)
			}
			if pop.header.Get("X-Crown-Index") == "" {
				noIndex++
			}
			g := rcDo(t, "GET", F+"/api/v1/consumer-groups/"+group, nil)
			var v map[string]struct {
				Partitions []struct {
					Partition   string `json:"partition"`
					LeaseActive bool   `json:"leaseActive"`
				} `json:"partitions"`
			}
			rcJSON(t, g, &v)
			ps := v[queue].Partitions
			if g.status != 200 || len(ps) != 1 || ps[0].Partition != part || !ps[0].LeaseActive {
				stale++
				t.Logf("read after pop %d on %s: %d %s", i, f.ID(), g.status, g.body)
			}
		}
		if stale > 0 {
			t.Errorf("%d of %d reads on %s right after a pop answered 200 by the same node did not see the pop's lease "+
				"(%d of the pop answers had no X-Crown-Index): a follower must not answer a read before it applied a write it relayed", stale, n, f.ID(), noIndex)
		}
	})

	// ojs-queues.md 0.5: "request_id | string | always | Same value as the
	// X-Request-Id header." docs/queues.md: "Queen routes answer these
	// refusals with the OJS error body". README: a write received by a
	// follower is forwarded "and the leader's status and body are relayed
	// unchanged".
	//
	// A pop refused by the access list answers on the leader with
	// X-Request-Id equal to the body's request_id; through a follower the
	// body is the leader's, and so is the header.
	t.Run("RefusedPopKeepsRequestID", func(t *testing.T) {
		const queue = "rc-acl"
		r := rcDo(t, "POST", L+"/ojs/v1/queues", map[string]any{"name": queue, "access": map[string]any{"consumers": []string{"w1"}}})
		if r.status != 201 {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		if r := rcDo(t, "POST", L+"/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": queue, "payload": 1}}}); r.status != 201 {
			t.Fatalf("push: %d %s", r.status, r.body)
		}
		for _, n := range []*tc.Node{leader, f} {
			rid := "rc-rid-" + n.ID()
			r := rcDo(t, "GET", n.URL()+"/api/v1/pop/queue/"+queue, nil, "X-OJS-Client-Id", "w2", "X-Request-Id", rid)
			var body struct {
				Error struct {
					Code      string `json:"code"`
					RequestID string `json:"request_id"`
				} `json:"error"`
			}
			rcJSON(t, r, &body)
			if r.status != 403 || body.Error.Code != "permission_denied" || body.Error.RequestID != rid {
				t.Fatalf("refused pop on %s: %d %s", n.ID(), r.status, r.body)
			}
			if got := r.header.Get("X-Request-Id"); got != rid {
				t.Errorf("refused pop on %s (leader %v): X-Request-Id header %q, want %q, the body's request_id", n.ID(), n == leader, got, rid)
			}
		}
	})

	// queen-api.md 3.17: "POST /api/v1/system/maintenance/pop with
	// {"enabled": true} ... While on, every pop answers 204 at once. ... The
	// switches are cluster-wide (replicated), not per node." 4.9: "With
	// wait=true, a pop that finds nothing deliverable does not answer. It
	// waits ...". README: a client "that reads from the same node next sees
	// its own write".
	//
	// A client switches pop maintenance on and off through a follower (both
	// answered 200), then long-polls that follower for a queue holding a
	// message: the pop must deliver it, although the follower's own state
	// may not have applied the "off" it relayed a moment ago (its first
	// round asks the leader, and it applies what it relayed before reading).
	t.Run("PopMaintenanceOffReadYourWrites", func(t *testing.T) {
		const queue = "rc-pm"
		if r := rcDo(t, "POST", L+"/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": queue, "payload": 1}}}); r.status != 201 {
			t.Fatalf("push: %d %s", r.status, r.body)
		}
		bad := 0
		for i := range 20 {
			for _, on := range []bool{true, false} {
				if r := rcDo(t, "POST", F+"/api/v1/system/maintenance/pop", map[string]any{"enabled": on}); r.status != 200 {
					t.Fatalf("switch: %d %s", r.status, r.body)
				}
			}
			r := rcDo(t, "GET", F+fmt.Sprintf("/api/v1/pop/queue/%s?consumerGroup=rc-pm-%d&wait=true&timeout=3000", queue, i), nil)
			if r.status != 200 {
				bad++
				t.Logf("pop %d after maintenance off: %d %s", i, r.status, r.body)
			}
		}
		if bad > 0 {
			t.Errorf("%d of 20 long-polls (wait=true, timeout=3000) on %s right after pop maintenance was switched off through it answered 204 "+
				"although the queue holds a message: pop maintenance is off cluster-wide once the switch answered 200", bad, f.ID())
		}
	})

	// Quorum lost: the leader and the other follower are killed; f stays,
	// once it has applied everything (pop maintenance off among it).
	if r := rcDo(t, "GET", F+"/api/v1/system/maintenance/pop?consistency=linearizable", nil); r.status != 200 ||
		!bytes.Contains(r.body, []byte(`"popMaintenanceMode":false`)) {
		t.Fatalf("pop maintenance on %s before the kills: %d %s", f.ID(), r.status, r.body)
	}
	leader.Kill()
	other.Kill()
	deadline := time.Now().Add(15 * time.Second)
	for {
		h := rcDo(t, "GET", F+"/health", nil)
		if h.status == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still healthy 15s after losing quorum: %s", f.ID(), h.body)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// queen-api.md 1.6: "Consequence: a long-poll pop MUST answer (204) when
	// its timeout elapses, not later". A client gives a long-poll the pop
	// timeout plus 5 s and then fails it (same section).
	//
	// With no leader (quorum lost above), a long-poll pop with timeout=1000
	// on the survivor waits for a leader to forward to only until its own
	// deadline, not --leader-wait (5 s), and then answers as its timeout
	// says.
	t.Run("LongPollWithoutLeaderAnswersByItsTimeout", func(t *testing.T) {
		var wg sync.WaitGroup
		type out struct {
			r    rcResp
			took time.Duration
		}
		results := make([]out, 2)
		urls := []string{
			F + "/api/v1/pop/queue/rc-noleader?wait=true&timeout=1000",
			F + "/api/v1/pop/queue/rc-noleader?wait=true&timeout=1000&consumerGroup=rc-nl",
		}
		for i, u := range urls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				r := rcDo(t, "GET", u, nil)
				results[i] = out{r, time.Since(start)}
			}()
		}
		wg.Wait()
		for i, o := range results {
			t.Logf("%s: %d %s after %v", urls[i], o.r.status, o.r.body, o.took.Round(time.Millisecond))
			if o.took > 2500*time.Millisecond {
				t.Errorf("long-poll with timeout=1000 on %s without a leader answered %d after %v, want an answer by its 1 s timeout (plus scheduling slack)",
					f.ID(), o.r.status, o.took.Round(time.Millisecond))
			}
			if o.r.status != 204 && o.r.status != 503 {
				t.Errorf("long-poll without a leader: status %d, want 204 (timeout) or 503", o.r.status)
			}
		}
	})

	// ojs-queues.md 0.5: "backend_error | 500 / 503 | yes | ... No
	// quorum or no leader reachable: 503, type unavailable, with
	// Retry-After."; "request_id ... Same value as the X-Request-Id header";
	// 0.1: every response carries "Content-Type: application/openjobspec+json".
	t.Run("OJSWithoutLeaderAnswersRetryable503", func(t *testing.T) {
		type call struct {
			method, path string
			body         any
		}
		calls := []call{
			{"POST", "/ojs/v1/queues", map[string]any{"name": "rc-nl-create"}},
			{"GET", "/ojs/v1/queues/default", nil},
		}
		results := make([]rcResp, len(calls))
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = rcDo(t, c.method, F+c.path, c.body, "X-Request-Id", "rc-nl")
			}()
		}
		wg.Wait()
		for i, r := range results {
			var body struct {
				Error struct {
					Code      string `json:"code"`
					Type      string `json:"type"`
					Retryable bool   `json:"retryable"`
					RequestID string `json:"request_id"`
				} `json:"error"`
			}
			rcJSON(t, r, &body)
			e := body.Error
			if r.status != 503 || e.Code != "backend_error" || e.Type != "unavailable" || !e.Retryable || e.RequestID != "rc-nl" ||
				r.header.Get("Retry-After") == "" || r.header.Get("X-Request-Id") != "rc-nl" ||
				r.header.Get("Content-Type") != "application/openjobspec+json" {
				t.Errorf("%s %s without a leader: %d %v %s", calls[i].method, calls[i].path, r.status, r.header, r.body)
			}
		}
	})
}
