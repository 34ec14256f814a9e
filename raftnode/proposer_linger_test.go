package raftnode

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// lingerNode is a single node whose linger is far longer than any client
// here takes to come back, so that an entry that waited it out shows in
// the Lingered counter and nowhere else.
func lingerNode(t *testing.T) *testNode {
	t.Helper()
	cfg := fastConfig("n1", freeAddr(t), t.TempDir(), nil)
	cfg.Proposer.MaxInflight = 1
	cfg.Proposer.Linger = 500 * time.Millisecond
	n := startNode(t, cfg)
	waitLeader(t, n)
	if _, _, err := n.node.Propose(context.Background(), push("q", "warm-up")); err != nil {
		t.Fatal(err)
	}
	return n
}

// Clients that come back after their answer join the next entry together,
// and the linger ends as soon as the last of them is back: it does not
// wait out its whole length in every entry, as it once did.
func TestLingerEndsWhenAnsweredClientsAreBack(t *testing.T) {
	n := lingerNode(t)
	st0 := n.node.Status()
	const clients, each = 8, 25
	// A millisecond stands for a client's own work between answer and
	// next request.
	proposeFromClients(t, n, clients, each, time.Millisecond)
	st := n.node.Status()
	entries := st.ProposedEntries - st0.ProposedEntries
	commands := st.ProposedCommands - st0.ProposedCommands
	lingered := st.Lingered - st0.Lingered
	t.Logf("%d commands in %d entries, %d waited out the linger", commands, entries, lingered)
	if commands != clients*each {
		t.Fatalf("proposer counted %d commands, want %d", commands, clients*each)
	}
	// Each client has one request out at a time: an entry holds at most
	// one of each, and a full cohort is clients of them.
	if commands < 4*entries {
		t.Fatalf("%d commands in %d entries: the clients did not come back into one entry", commands, entries)
	}
	// Only entries that some client never came back to (the last rounds,
	// as clients finish) wait out the linger.
	if lingered*4 > entries {
		t.Fatalf("%d of %d entries waited out the linger with every client back", lingered, entries)
	}
}

// An entry whose clients do not all come back waits out the linger for
// them, but only that long.
func TestLingerWaitsForClientsNotBack(t *testing.T) {
	n := lingerNode(t)
	// Two commands answered by one entry: both clients are expected back.
	// They queue behind a staged entry in flight, so that they go out
	// together whatever the scheduler does (two goroutines proposing at
	// once share an entry only if the second is queued before the
	// proposer looks, which a busy machine rarely allows).
	p := n.node.proposer
	p.slots <- struct{}{}
	errs := make(chan error, 2)
	for c := range 2 {
		go func() {
			_, _, err := n.node.Propose(context.Background(), push("q", fmt.Sprintf("pair-%d", c)))
			errs <- err
		}()
		waitStaged(t, p, c)
	}
	<-p.slots
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if m := p.answered.Load(); m == nil || m.count != 2 {
		t.Fatalf("the staged pair went out as entries of %+v commands, want one of 2", m)
	}
	before := n.node.Status().Lingered
	// Only one of the two comes back.
	if _, _, err := n.node.Propose(context.Background(), push("q", "alone")); err != nil {
		t.Fatal(err)
	}
	if got := n.node.Status().Lingered - before; got != 1 {
		t.Fatalf("the entry after a pair, with one client back, lingered %d times, want 1", got)
	}
	// That entry carried one command: the next lone command does not wait.
	before++
	if _, _, err := n.node.Propose(context.Background(), push("q", "idle")); err != nil {
		t.Fatal(err)
	}
	if got := n.node.Status().Lingered - before; got != 0 {
		t.Fatalf("a lone command after a lone entry lingered %d times", got)
	}
}
