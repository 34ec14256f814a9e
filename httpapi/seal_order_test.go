package httpapi_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi"
	"github.com/crownmq/crown/raftnode"
)

// encryptionQueued tells the test when a configure that turns encryption
// on has been queued for the log, that is, before it is committed and
// applied.
type encryptionQueued struct {
	httpapi.Cluster
	queued chan struct{}
}

func (c *encryptionQueued) Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error) {
	if cs, ok := cmd.(*fsm.ConfigureSet); ok && cs.Configure.Options.EncryptionEnabled {
		ctx = raftnode.WithEnqueued(ctx, func() { c.queued <- struct{}{} })
	}
	return c.Cluster.Propose(ctx, cmd)
}

// A push the log holds after a configure that turned its queue's
// encryption on must be sealed, even when the push reached the leader while
// that configure was queued or committed and not yet applied: the leader
// reads the queue's encryption from its applied state when it seals.
func TestPushLoggedAfterEncryptionTurnedOnIsSealed(t *testing.T) {
	var raw [32]byte
	rand.Read(raw[:])
	queued := make(chan struct{}, 1)
	s := newStackWrapped(t, func(c httpapi.Cluster) httpapi.Cluster {
		return &encryptionQueued{Cluster: c, queued: queued}
	}, withKey(hex.EncodeToString(raw[:])))
	after := 0
	for i := range 20 {
		q := fmt.Sprintf("turned-on-%d", i)
		s.configure(obj{"queue": q})
		cfgIndex := make(chan uint64, 1)
		go func() {
			body := []byte(`{"queue":"` + q + `","options":{"encryptionEnabled":true}}`)
			resp, err := http.Post(s.URL+"/api/v1/configure", "application/json", bytes.NewReader(body))
			if err != nil {
				cfgIndex <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			n, _ := strconv.ParseUint(resp.Header.Get("X-Crown-Index"), 10, 64)
			cfgIndex <- n
		}()
		<-queued
		r := s.post("/api/v1/push", `{"items":[{"queue":"`+q+`","payload":{"n":1},"transactionId":"m"}]}`)
		if r.Status != http.StatusCreated {
			t.Fatalf("push: %d %s", r.Status, r.Raw)
		}
		pushIndex, _ := strconv.ParseUint(r.Header.Get("X-Crown-Index"), 10, 64)
		ci := <-cfgIndex
		if ci == 0 || pushIndex == 0 {
			t.Fatalf("no commit index: configure %d, push %d", ci, pushIndex)
		}
		if pushIndex < ci {
			continue // the push went into the log first: it is rightly in clear
		}
		after++
		pid, _ := asObj(t, asArr(t, r.Body)[0])["partition_id"].(string)
		m := asObj(t, s.getOK("/api/v1/messages/"+pid+"/m"))
		if m["isEncrypted"] != true {
			t.Errorf("%s: a push logged at %d, after the configure that turned encryption on at %d, is stored in clear", q, pushIndex, ci)
		}
	}
	if after == 0 {
		t.Fatal("no push was logged after its configure: the test checked nothing")
	}
}
