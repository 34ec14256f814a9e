package workload

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

func TestClassify(t *testing.T) {
	dial := &net.OpError{Op: "dial", Err: errors.New("connection refused")}
	read := &net.OpError{Op: "read", Err: errors.New("connection reset")}
	tests := []struct {
		status int
		code   string
		err    error
		want   string
	}{
		{200, "", nil, history.OK},
		{201, "", nil, history.OK},
		{204, "", nil, history.OK},
		{400, "invalid_field", nil, history.Fail},
		{503, "no_leader", nil, history.Fail},
		{503, "unknown_outcome", nil, history.Unknown},
		{503, "forwarding_failed", nil, history.Unknown},
		{503, "unavailable", nil, history.Unknown},
		{500, "internal", nil, history.Unknown},
		{0, "", dial, history.Fail},
		{0, "", read, history.Unknown},
		{0, "", context.DeadlineExceeded, history.Unknown},
	}
	for _, tc := range tests {
		if got := Classify(tc.status, tc.code, tc.err); got != tc.want {
			t.Errorf("Classify(%d, %q, %v) = %s, want %s", tc.status, tc.code, tc.err, got, tc.want)
		}
	}
}

func TestGatePauseWaitsForActiveWork(t *testing.T) {
	var g Gate
	ctx := context.Background()
	if !g.Enter(ctx) {
		t.Fatal("enter")
	}
	paused := make(chan error, 1)
	go func() { paused <- g.Pause(ctx) }()
	select {
	case <-g.Pausing():
	case <-time.After(time.Second):
		t.Fatal("Pausing not signalled")
	}
	select {
	case <-paused:
		t.Fatal("Pause returned while an operation was active")
	case <-time.After(50 * time.Millisecond):
	}
	g.Leave()
	if err := <-paused; err != nil {
		t.Fatal(err)
	}
	entered := make(chan bool, 1)
	go func() { entered <- g.Enter(ctx) }()
	select {
	case <-entered:
		t.Fatal("entered while paused")
	case <-time.After(50 * time.Millisecond):
	}
	g.Resume()
	if !<-entered {
		t.Fatal("enter after resume")
	}
	g.Leave()
	cctx, cancel := context.WithCancel(ctx)
	_ = g.Pause(ctx)
	cancel()
	if g.Enter(cctx) {
		t.Fatal("entered with a cancelled context while paused")
	}
	g.Resume()
}

// Regression: Pausing called while paused, then Resume and Pause again,
// closed one channel twice (a panic under the gate's lock that hung the run).
func TestGatePausingAcrossPauses(t *testing.T) {
	var g Gate
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		p := g.Pausing()
		if err := g.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p:
		default:
			t.Fatal("Pausing channel not closed by Pause")
		}
		select {
		case <-g.Pausing(): // closed while paused
		default:
			t.Fatal("Pausing not closed while paused")
		}
		_ = g.Pause(ctx) // a second request while paused
		g.Resume()
		select {
		case <-g.Pausing():
			t.Fatal("Pausing closed after Resume")
		default:
		}
	}
}
