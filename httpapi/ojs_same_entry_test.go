package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi/ojs"
)

// sameEntryBackend commits each command in a log entry of its own, followed
// in the same entry by the commands then returns: what group commit does
// when other clients' requests reach the leader at the same moment.
type sameEntryBackend struct {
	state *fsm.FSM
	index uint64
	then  func(fsm.Command) []fsm.Command
}

func (b *sameEntryBackend) Commit(_ http.ResponseWriter, _ *http.Request, _ []byte, cmd fsm.Command,
	fail func(status int, code, msg string)) (any, bool) {
	e := &fsm.Entry{Stamp: time.Now().UnixMicro(), Origin: "n1", Commands: []fsm.Command{cmd}}
	if b.then != nil {
		e.Commands = append(e.Commands, b.then(cmd)...)
	}
	data, err := fsm.AppendEntry(nil, e)
	if err != nil {
		fail(http.StatusInternalServerError, "internal", err.Error())
		return nil, false
	}
	b.index++
	res := b.state.ApplyBatch([]*raft.Log{{Index: b.index, Term: 1, Type: raft.LogCommand, Data: data}})[0]
	return res.(*fsm.EntryResult).Results[0], true
}

func (b *sameEntryBackend) Barrier(*http.Request) (int, error) { return 0, nil }

func (b *sameEntryBackend) Leader() string { return "n1" }

// TestOJSWriteAnsweredWhenTheQueueIsDeletedInTheSameEntry: a write applied
// before a deletion of its queue in the same log entry succeeded, so it is
// answered with its success and the queue as it was left, state deleted,
// not with the 404 a read-back finds (ojs-queues.md 6.5 renders a deleted
// queue the same way).
func TestOJSWriteAnsweredWhenTheQueueIsDeletedInTheSameEntry(t *testing.T) {
	state, err := fsm.Open(fsm.Config{Dir: filepath.Join(t.TempDir(), "state"), NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	b := &sameEntryBackend{state: state}
	h := ojs.New(ojs.Config{NodeID: "n1"}, b, state)
	do := func(method, path, body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(w, r)
		return w
	}
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		check                    func(queue map[string]any) string
	}{
		{"create", "POST", "/ojs/v1/queues", `{"name":"q","retention":{"completed_ttl":"PT5M"}}`, 201, nil},
		{"patch", "PATCH", "/ojs/v1/queues/q", `{"retention":{"completed_ttl":"PT7M"}}`, 200, func(q map[string]any) string {
			if got := q["config"].(map[string]any)["retention"].(map[string]any)["completed_ttl"]; got != "PT7M" {
				return "completed_ttl " + toJSON(got) + ", want the patched PT7M"
			}
			return ""
		}},
		{"put config", "PUT", "/ojs/v1/queues/q/config", `{"retention":{"completed_ttl":"PT9M"}}`, 200, nil},
		{"pause", "POST", "/ojs/v1/queues/q/pause", `{"reason":"deploy"}`, 200, nil},
		{"resume", "POST", "/ojs/v1/queues/q/resume", ``, 200, nil},
		{"purge", "POST", "/ojs/v1/queues/q/purge", `{"confirm":true}`, 200, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name != "create" {
				b.then = nil
				if w := do("POST", "/ojs/v1/queues", `{"name":"q"}`); w.Code != 201 {
					t.Fatalf("create q: %d %s", w.Code, w.Body)
				}
			}
			b.then = func(fsm.Command) []fsm.Command { return []fsm.Command{&fsm.DeleteQueue{Queue: "q"}} }
			w := do(c.method, c.path, c.body)
			var out map[string]any
			json.Unmarshal(w.Body.Bytes(), &out)
			q, _ := out["queue"].(map[string]any)
			if w.Code != c.status || q == nil || q["name"] != "q" || q["state"] != "deleted" {
				t.Fatalf("%s %s, queue deleted in the same entry: %d %s, want %d with the queue in state deleted",
					c.method, c.path, w.Code, w.Body, c.status)
			}
			if c.check != nil {
				if msg := c.check(q); msg != "" {
					t.Error(msg)
				}
			}
		})
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
