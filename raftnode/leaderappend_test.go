package raftnode

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// gatedStore is an in-memory log whose StoreLogs announces each call's
// indexes on entered, then waits for a token on release (when set).
type gatedStore struct {
	*raft.InmemStore
	entered chan [2]uint64
	release chan struct{} // nil: no wait
	fail    atomic.Pointer[error]
	mu      sync.Mutex
	calls   [][2]uint64 // first and last index of each StoreLogs
}

func (g *gatedStore) StoreLogs(logs []*raft.Log) error {
	if g.release != nil {
		g.entered <- [2]uint64{logs[0].Index, logs[len(logs)-1].Index}
		<-g.release
	}
	if e := g.fail.Load(); e != nil {
		return *e
	}
	g.mu.Lock()
	g.calls = append(g.calls, [2]uint64{logs[0].Index, logs[len(logs)-1].Index})
	g.mu.Unlock()
	return g.InmemStore.StoreLogs(logs)
}

func (g *gatedStore) callList() [][2]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][2]uint64(nil), g.calls...)
}

func entries(from, to uint64) []*raft.Log {
	var ls []*raft.Log
	for i := from; i <= to; i++ {
		ls = append(ls, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	return ls
}

// returnsSoon reports whether f returns within a short wait. It measures
// no performance: it tells "waits for the held disk" from "does not".
func returnsSoon(f func()) bool {
	ch := make(chan struct{})
	go func() { f(); close(ch) }()
	select {
	case <-ch:
		return true
	case <-time.After(200 * time.Millisecond):
		return false
	}
}

// appendFixture is a leaderAppendStore over a gatedStore, leading as the
// test says.
type appendFixture struct {
	*leaderAppendStore
	back    *gatedStore
	leading atomic.Bool
	fatal   atomic.Pointer[error]
}

func newAppendFixture(t *testing.T, leading bool) *appendFixture {
	t.Helper()
	f := &appendFixture{back: &gatedStore{InmemStore: raft.NewInmemStore(),
		entered: make(chan [2]uint64, 64), release: make(chan struct{})}}
	f.leading.Store(leading)
	f.leaderAppendStore = newLeaderAppendStore(f.back, f.leading.Load, func(err error) { f.fatal.Store(&err) })
	t.Cleanup(func() {
		close(f.back.release)
		f.Close()
	})
	return f
}

// The leader's StoreLogs returns before its disk holds the entries; Raft
// and the replicators read them meanwhile; applying, and telling followers
// of a commit, wait for the disk.
func TestLeaderAppendReturnsBeforeTheWriteAndGatesTheCommit(t *testing.T) {
	s := newAppendFixture(t, true)
	back := s.back

	if err := s.StoreLogs(entries(1, 3)); err != nil {
		t.Fatal(err)
	}
	if got := <-back.entered; got != [2]uint64{1, 3} {
		t.Fatalf("first write %v, want 1-3", got)
	}
	if last, _ := s.LastIndex(); last != 3 {
		t.Fatalf("LastIndex %d with entries 1-3 pending, want 3", last)
	}
	var l raft.Log
	if err := s.GetLog(2, &l); err != nil || l.Index != 2 || l.Data[0] != 2 {
		t.Fatalf("GetLog(2) of a pending entry: %+v, %v", l, err)
	}
	if got := s.clampCommit(3); got != 0 {
		t.Fatalf("commit index sent to followers %d while entries 1-3 are not on disk, want 0", got)
	}
	if returnsSoon(func() { s.waitDurable(1) }) {
		t.Fatal("waitDurable(1) returned while the write of 1-3 was held")
	}

	// More entries while the first write is held: they follow it.
	if err := s.StoreLogs(entries(4, 5)); err != nil {
		t.Fatal(err)
	}
	back.release <- struct{}{} // the write of 1-3
	if !returnsSoon(func() { s.waitDurable(3) }) {
		t.Fatal("waitDurable(3) did not return once 1-3 were written")
	}
	if got := s.clampCommit(5); got != 3 {
		t.Fatalf("commit index sent to followers %d with 1-3 on disk and 4-5 pending, want 3", got)
	}
	if err := s.GetLog(5, &l); err != nil || l.Index != 5 {
		t.Fatalf("GetLog(5) pending: %+v, %v", l, err)
	}
	if got := <-back.entered; got != [2]uint64{4, 5} {
		t.Fatalf("second write %v, want 4-5", got)
	}
	back.release <- struct{}{}
	if !returnsSoon(func() { s.waitDurable(5) }) {
		t.Fatal("waitDurable(5) did not return once 4-5 were written")
	}
	if got := s.clampCommit(5); got != 5 {
		t.Fatalf("commit index %d with everything on disk, want 5", got)
	}
	if calls := back.callList(); len(calls) != 2 || calls[0] != [2]uint64{1, 3} || calls[1] != [2]uint64{4, 5} {
		t.Fatalf("writes %v, want [1 3] then [4 5]", calls)
	}
	if err := back.InmemStore.GetLog(5, &l); err != nil {
		t.Fatalf("entry 5 not in the store after its write: %v", err)
	}
}

// Entries queued while a write is held go to disk together, in one write.
func TestLeaderAppendWritesWhatQueuedInOneWrite(t *testing.T) {
	s := newAppendFixture(t, true)
	back := s.back
	s.StoreLogs(entries(1, 1))
	<-back.entered
	for i := uint64(2); i <= 6; i++ {
		if err := s.StoreLogs(entries(i, i)); err != nil {
			t.Fatal(err)
		}
	}
	back.release <- struct{}{}
	if got := <-back.entered; got != [2]uint64{2, 6} {
		t.Fatalf("write %v, want 2-6: entries queued behind a held write share the next one", got)
	}
	back.release <- struct{}{}
	if !returnsSoon(func() { s.waitDurable(6) }) {
		t.Fatal("entry 6 not durable after its write")
	}
}

// A follower acknowledges an append only once it is on disk, and a leader
// that stepped down has its own pending entries written first.
func TestFollowerAppendIsSynchronousAndOrderedAfterPending(t *testing.T) {
	s := newAppendFixture(t, true)
	back := s.back
	if err := s.StoreLogs(entries(1, 2)); err != nil {
		t.Fatal(err)
	}
	s.leading.Store(false)
	stored := make(chan error, 1)
	if returnsSoon(func() { stored <- s.StoreLogs(entries(3, 3)) }) {
		t.Fatal("a follower's StoreLogs returned before its own disk write")
	}
	if got := <-back.entered; got != [2]uint64{1, 2} {
		t.Fatalf("first write %v, want the leader's pending 1-2", got)
	}
	back.release <- struct{}{}
	if got := <-back.entered; got != [2]uint64{3, 3} {
		t.Fatalf("second write %v, want the follower's 3", got)
	}
	back.release <- struct{}{}
	if err := <-stored; err != nil {
		t.Fatal(err)
	}
	if calls := back.callList(); len(calls) != 2 || calls[0] != [2]uint64{1, 2} || calls[1] != [2]uint64{3, 3} {
		t.Fatalf("writes %v, want the leader's 1-2 before the follower's 3", calls)
	}
}

// Truncating a conflicting suffix waits for pending entries in it, so they
// cannot be written back after the delete; deleting the front of the log
// (compaction after a snapshot) does not wait for the newest entries.
func TestDeleteRangeWaitsOnlyForPendingEntriesInIt(t *testing.T) {
	s := newAppendFixture(t, false)
	back := s.back
	go func() { <-back.entered; back.release <- struct{}{} }()
	if err := s.StoreLogs(entries(1, 4)); err != nil { // a follower's write, synchronous
		t.Fatal(err)
	}
	s.leading.Store(true)
	s.StoreLogs(entries(5, 6))
	if !returnsSoon(func() { s.DeleteRange(1, 2) }) {
		t.Fatal("compacting 1-2 waited for pending 5-6")
	}
	deleted := make(chan error, 1)
	if returnsSoon(func() { deleted <- s.DeleteRange(6, 6) }) {
		t.Fatal("deleting pending entry 6 did not wait for its write")
	}
	<-back.entered
	back.release <- struct{}{}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := s.GetLog(6, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("entry 6 after its deletion: %+v, %v", l, err)
	}
	if first, _ := s.FirstIndex(); first != 3 {
		t.Fatalf("FirstIndex %d after compacting 1-2, want 3", first)
	}
}

// A failed write stops the node: fatal is called, and nothing that depends
// on the entries proceeds.
func TestLeaderAppendWriteFailureIsFatal(t *testing.T) {
	s := newAppendFixture(t, true)
	back, fatal := s.back, &s.fatal
	boom := errors.New("disk on fire")
	back.fail.Store(&boom)
	s.StoreLogs(entries(1, 2))
	<-back.entered
	back.release <- struct{}{}
	if err := s.waitDurable(2); !errors.Is(err, boom) {
		t.Fatalf("waitDurable after a failed write: %v, want %v", err, boom)
	}
	if e := fatal.Load(); e == nil || !errors.Is(*e, boom) {
		t.Fatalf("fatal called with %v, want the write's error", e)
	}
	if err := s.StoreLogs(entries(3, 3)); !errors.Is(err, boom) {
		t.Fatalf("StoreLogs after a failed write: %v, want it refused", err)
	}
}

// A leader appends contiguous entries only; anything else is refused
// rather than written out of place.
func TestLeaderAppendRefusesAGap(t *testing.T) {
	s := newAppendFixture(t, true)
	s.StoreLogs(entries(1, 2))
	if err := s.StoreLogs(entries(4, 4)); err == nil {
		t.Fatal("an append after a gap was accepted")
	}
}

// Close writes what is pending before it returns.
func TestLeaderAppendCloseWritesPending(t *testing.T) {
	back := &gatedStore{InmemStore: raft.NewInmemStore()}
	s := newLeaderAppendStore(back, func() bool { return true }, func(err error) { t.Errorf("fatal: %v", err) })
	s.StoreLogs(entries(1, 3))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if last, _ := back.InmemStore.LastIndex(); last != 3 {
		t.Fatalf("store ends at %d after Close, want 3", last)
	}
	if err := s.StoreLogs(entries(4, 4)); err == nil {
		t.Fatal("StoreLogs after Close accepted")
	}
}

// In a real three-node cluster, with the leader's disk held: the followers
// store a proposal, but neither the leader nor any follower applies it, no
// follower hears it committed, and the client is not answered, until the
// leader's own copy is written. Then all of that happens.
func TestLeaderAnswersAndFollowersApplyOnlyOnceTheLeadersCopyIsOnDisk(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := waitLeader(t, nodes...)
	if _, _, err := leader.node.Propose(context.Background(), push("q", "warm-up")); err != nil {
		t.Fatal(err)
	}
	var followers []*testNode
	for _, n := range nodes {
		if n != leader {
			followers = append(followers, n)
		}
	}
	release := make(chan struct{})
	hold := func() { <-release }
	leader.node.appendLog.beforeWrite.Store(&hold)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	before := leader.node.Status().LastIndex
	type answer struct {
		idx uint64
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		_, idx, err := leader.node.Propose(context.Background(), push("q", "held"))
		answered <- answer{idx, err}
	}()
	// Both followers store the entry (their disks are not held)...
	want := before + 1
	deadline := time.Now().Add(10 * time.Second)
	for _, f := range followers {
		for f.node.Status().LastIndex < want {
			if time.Now().After(deadline) {
				t.Fatalf("follower %s never stored entry %d", f.id, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// ...which commits it in Raft's count, and a dozen commit timeouts
	// pass, each an AppendEntries that would carry the commit index.
	time.Sleep(300 * time.Millisecond)
	select {
	case a := <-answered:
		t.Fatalf("proposal answered (index %d, %v) while the leader's copy was not on disk", a.idx, a.err)
	default:
	}
	if got := leader.fsm.AppliedIndex(); got >= want {
		t.Fatalf("leader applied %d before its copy of %d was on disk", got, want)
	}
	for _, f := range followers {
		st := f.node.Status()
		if st.CommitIndex >= want || st.AppliedIndex >= want {
			t.Fatalf("follower %s heard commit %d, applied %d, of entry %d held on the leader's disk", f.id, st.CommitIndex, st.AppliedIndex, want)
		}
	}

	close(release)
	released = true
	a := <-answered
	if a.err != nil || a.idx != want {
		t.Fatalf("proposal after the release: index %d, %v; want %d", a.idx, a.err, want)
	}
	for _, f := range followers {
		for f.fsm.AppliedIndex() < want {
			if time.Now().After(deadline.Add(10 * time.Second)) {
				t.Fatalf("follower %s never applied %d", f.id, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
