package raftnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/fsm"
)

// DESIGN.md "Group commit": "Errors are mapped so callers know what is safe:
// ... `ErrShutdown`."; node.go: "ErrShutdown means the node is stopping";
// proposer.go: "Close stops accepting commands". A command proposed while
// the node stops must be answered ErrShutdown at once, and none may hang.
//
// Node.Shutdown closes the proposer first and waits for the entries in
// flight before it shuts Raft down, so for that whole window Raft still
// leads and Node.Propose hands commands to the closed proposer; its send may
// win the race with Close after the proposer's last drain, and such a
// command must still be answered (ErrShutdown: nothing was appended), not
// left waiting for a context that may never end.
func TestProposerProposeAfterCloseIsAnsweredShutdown(t *testing.T) {
	n := startNode(t, fastConfig("n1", freeAddr(t), t.TempDir(), nil))
	waitLeader(t, n)
	// The first step of Node.Shutdown: Raft keeps leading meanwhile.
	n.node.proposer.Close()
	if !n.node.IsLeader() {
		t.Fatal("staging failed: the node no longer leads")
	}
	const calls = 20
	var wg sync.WaitGroup
	errs := make([]error, calls)
	took := make([]time.Duration, calls)
	for i := range calls {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			start := time.Now()
			_, _, errs[i] = n.node.Propose(ctx, push("q", fmt.Sprintf("late-%d", i)))
			took[i] = time.Since(start)
		}(i)
	}
	wg.Wait()
	var bad []string
	for i, err := range errs {
		if !errors.Is(err, ErrShutdown) || took[i] > time.Second {
			bad = append(bad, fmt.Sprintf("call %d: %v after %v", i, err, took[i].Round(time.Millisecond)))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%d of %d proposals to a closed proposer were not answered ErrShutdown at once "+
			"(they were queued where nothing reads and waited for their context):\n%s",
			len(bad), calls, strings.Join(bad, "\n"))
	}
}

// startWithSilentPeer starts a three-voter cluster of which two nodes run
// and the third's Raft address accepts connections but never answers (a
// frozen process): the two hold the quorum, and any wait for the third
// lasts until the transport's timeout.
func startWithSilentPeer(t *testing.T) (nodes []*testNode, silentID string) {
	t.Helper()
	ghost, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ghost.Close() })
	addrs := freeAddrs(t, 2)
	peers := []Peer{{ID: "n1", Addr: addrs[0]}, {ID: "n2", Addr: addrs[1]}, {ID: "n3", Addr: ghost.Addr().String()}}
	for _, p := range peers[:2] {
		cfg := fastConfig(p.ID, p.Addr, t.TempDir(), peers)
		cfg.TransportTimeout = 2 * time.Second
		nodes = append(nodes, startNode(t, cfg))
	}
	return nodes, "n3"
}

// DESIGN.md "Group commit": "Errors are mapped so callers know what is safe:
// `ErrNotLeader` (never appended: forward or retry anywhere),
// `ErrUnknownOutcome` (leadership lost after appending ...), `ErrShutdown`."
// docs/deployments.md: "`transfer-leadership` hands leadership to `ID` ...;
// do this before stopping the leader for maintenance so that no election
// timeout is spent."
//
// While a leadership transfer is in progress Raft refuses every Apply with
// raft.ErrLeadershipTransferInProgress (nothing is appended): that is
// ErrNotLeader, so the HTTP layer forwards the write to the leader that
// comes out of the transfer instead of answering 503 for up to an election
// timeout.
func TestProposerTransferInProgressIsNotLeader(t *testing.T) {
	nodes, silent := startWithSilentPeer(t)
	leader := waitLeader(t, nodes...)
	if _, _, err := leader.node.Propose(context.Background(), push("q", "warm-up")); err != nil {
		t.Fatal(err)
	}
	// The transfer waits for the silent peer to catch up, and gives up after
	// the election timeout; leadership stays where it is.
	transferred := make(chan error, 1)
	go func() { transferred <- leader.node.TransferLeadership(silent) }()
	time.Sleep(50 * time.Millisecond)
	var unmapped []string
	proposals := 0
	for done := false; !done; {
		select {
		case err := <-transferred:
			t.Logf("transfer ended: %v", err)
			done = true
			continue
		default:
		}
		before := leader.node.Status().LastIndex
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _, err := leader.node.Propose(ctx, push("q", fmt.Sprintf("during-%d", proposals)))
		cancel()
		proposals++
		if err != nil && !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrUnknownOutcome) {
			unmapped = append(unmapped, fmt.Sprintf("%v (last index %d -> %d)", err, before, leader.node.Status().LastIndex))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(unmapped) > 0 {
		t.Fatalf("%d of %d proposals during a leadership transfer failed with an error that is neither "+
			"ErrNotLeader nor ErrUnknownOutcome, although nothing was appended; first: %s",
			len(unmapped), proposals, unmapped[0])
	}
}

// DESIGN.md "Group commit": "when the slot frees all of them (up to 2048
// commands or 8 MiB) go out as **one** log entry"; proposer.go:
// "MaxCommands and MaxBytes bound one log entry".
//
// The command that would cross the bound opens the next entry instead of
// joining this one (only a command larger than the bound goes out alone
// above it). Here MaxBytes is 4096 and three 3000-byte commands queue
// behind an entry in flight: each must go alone.
func TestProposerEntryStaysWithinMaxBytes(t *testing.T) {
	const maxBytes = 4096
	cfg := fastConfig("n1", freeAddr(t), t.TempDir(), nil)
	cfg.Proposer.MaxBytes = maxBytes
	cfg.Proposer.Linger = -1
	n := startNode(t, cfg)
	waitLeader(t, n)
	if _, _, err := n.node.Propose(context.Background(), push("q", "warm-up")); err != nil {
		t.Fatal(err)
	}
	before := n.node.Status().LastIndex
	p := n.node.proposer
	// Stage an entry in flight: the slot is taken, so commands queue.
	p.slots <- struct{}{}
	big := []byte(`"` + strings.Repeat("x", 3000) + `"`)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cmd := &fsm.Push{Items: []fsm.PushItem{{Queue: "q", Partition: "p", TxID: fmt.Sprintf("big-%d", i), Payload: big}}}
			_, _, errs[i] = n.node.Propose(context.Background(), cmd)
		}(i)
		waitStaged(t, p, i)
	}
	<-p.slots // the staged entry is applied
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	last := n.node.Status().LastIndex
	var over []string
	for i := before + 1; i <= last; i++ {
		var l raft.Log
		if err := n.node.logs.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if l.Type != raft.LogCommand {
			continue
		}
		e, err := fsm.DecodeEntry(l.Data)
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Commands) > 1 && len(l.Data) > maxBytes {
			over = append(over, fmt.Sprintf("entry %d: %d commands, %d bytes", i, len(e.Commands), len(l.Data)))
		}
	}
	if len(over) > 0 {
		t.Fatalf("MaxBytes is %d, but the proposer built entries of several commands larger than that: %s",
			maxBytes, strings.Join(over, "; "))
	}
}

// DESIGN.md "Group commit": "`ErrNotLeader` (never appended: forward or
// retry anywhere), `ErrUnknownOutcome` (leadership lost after appending:
// the command may still commit ...)".
//
// A leader whose entry is in flight loses its quorum and steps down: the
// command of that entry may still commit under a new leader, so its caller
// must hear ErrUnknownOutcome, never ErrNotLeader; the commands queued
// behind it were never appended and may hear either, but never succeed.
func TestProposerLeadershipLostInFlightIsUnknownOutcome(t *testing.T) {
	nodes, _ := startWithSilentPeer(t)
	leader := waitLeader(t, nodes...)
	if _, _, err := leader.node.Propose(context.Background(), push("q", "warm-up")); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n != leader {
			n.stop() // the leader keeps leading until its lease runs out
		}
	}
	if !leader.node.IsLeader() {
		t.Skip("the leader stepped down before the staging was done")
	}
	before := leader.node.Status().LastIndex
	const queued = 8
	errs := make([]error, 1+queued)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _, errs[i] = leader.node.Propose(ctx, push("q", fmt.Sprintf("lost-%d", i)))
		}(i)
		if i == 0 {
			// The first command goes out alone and is in flight.
			deadline := time.Now().Add(5 * time.Second)
			for leader.node.Status().LastIndex == before && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
	}
	wg.Wait()
	if leader.node.Status().LastIndex == before {
		t.Fatal("staging: the first command was never appended")
	}
	if !errors.Is(errs[0], ErrUnknownOutcome) {
		t.Errorf("the command appended before leadership was lost: %v, want ErrUnknownOutcome", errs[0])
	}
	for i, err := range errs[1:] {
		if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrUnknownOutcome) {
			t.Errorf("queued command %d: %v, want ErrNotLeader or ErrUnknownOutcome", i+1, err)
		}
	}
}

// DESIGN.md "Group commit": "while an entry is in flight, commands queue,
// and when the slot frees all of them ... go out as **one** log entry";
// fsm/commands.go: "A command that fails it [Validate] is answered with an
// ErrorResult and changes nothing"; queen-api.md 5: "several HTTP requests
// may share one log entry, but each request's items keep their own
// atomicity".
//
// Commands queued in a known order behind an entry in flight share one
// entry, are applied in arrival order (their UUIDv7 message ids increase in
// that order), each caller gets its own result, and one command failing
// validation fails only itself.
func TestProposerBatchKeepsOrderAndOwnResults(t *testing.T) {
	cfg := fastConfig("n1", freeAddr(t), t.TempDir(), nil)
	cfg.Proposer.Linger = -1
	n := startNode(t, cfg)
	waitLeader(t, n)
	if _, _, err := n.node.Propose(context.Background(), push("q", "warm-up")); err != nil {
		t.Fatal(err)
	}
	st0 := n.node.Status()
	p := n.node.proposer
	p.slots <- struct{}{} // an entry in flight
	const count, bad = 9, 4
	results := make([]any, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		cmd := push("q", fmt.Sprintf("order-%d", i))
		if i == bad {
			cmd.Items[0].Queue = strings.Repeat("x", fsm.MaxNameBytes+1)
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i], _, errs[i] = n.node.Propose(context.Background(), cmd)
		}(i)
		waitStaged(t, p, i)
	}
	<-p.slots
	wg.Wait()
	st := n.node.Status()
	if e, c := st.ProposedEntries-st0.ProposedEntries, st.ProposedCommands-st0.ProposedCommands; e != 1 || c != count {
		t.Fatalf("%d commands went out in %d entries (%d commands counted), want one entry", count, e, c)
	}
	var prev [16]byte
	for i := range count {
		if errs[i] != nil {
			t.Fatalf("command %d: %v", i, errs[i])
		}
		if i == bad {
			if er, ok := results[i].(*fsm.ErrorResult); !ok || !strings.Contains(er.Err, "queue") {
				t.Errorf("invalid command %d: result %T %+v, want an ErrorResult naming the queue", i, results[i], results[i])
			}
			continue
		}
		pr, ok := results[i].(*fsm.PushResult)
		if !ok || len(pr.Items) != 1 || pr.Items[0].Status != fsm.PushQueued {
			t.Fatalf("command %d: result %T %+v, want one queued item", i, results[i], results[i])
		}
		id := pr.Items[0].MessageID
		if bytes.Compare(id[:], prev[:]) <= 0 {
			t.Errorf("command %d: message id %x not after the previous command's %x: not applied in arrival order", i, id, prev)
		}
		prev = id
	}
}

// waitStaged waits until the i-th command sent behind a staged entry in
// flight (the test holds the proposer's only slot) has its place: the first
// (i 0) is taken by the proposer, which then waits for the slot, and each
// later one waits in its queue, so that the commands keep the order they
// were sent in.
func waitStaged(t *testing.T, p *Proposer, i int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(p.in) != i && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if i == 0 {
		// Queue empty: give the proposer time to take the first.
		time.Sleep(20 * time.Millisecond)
	}
	if len(p.in) != i {
		t.Fatalf("staging: %d commands queued, want %d", len(p.in), i)
	}
}
