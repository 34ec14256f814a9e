// Package raftnode runs hashicorp/raft for Crown: the TCP transport, the
// raft-boltdb log and stable store, file snapshots, bootstrap and
// membership, leadership events, and the proposer that group-commits many
// client commands into one log entry. It knows nothing of HTTP or queue
// rules. See DESIGN.md.
package raftnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/crownmq/crown/fsm"
)

// Peer is an initial voter.
type Peer struct {
	ID   string
	Addr string
}

// Config configures a node. Zero durations take the documented defaults.
type Config struct {
	NodeID   string
	RaftAddr string // bind address of the Raft TCP transport
	// Advertise is the address other nodes dial; defaults to RaftAddr.
	Advertise string
	DataDir   string
	// Peers are the initial voters. Empty with Join false bootstraps a
	// single-node cluster; a node that joins starts with no configuration
	// and waits to be added.
	Peers []Peer
	Join  bool

	Logger *slog.Logger

	// Timeouts, tuned for a LAN (DESIGN.md): a failed leader is detected
	// within HeartbeatTimeout and replaced within about two of them.
	HeartbeatTimeout   time.Duration // default 1 s
	ElectionTimeout    time.Duration // default 1 s
	LeaderLeaseTimeout time.Duration // default 500 ms
	CommitTimeout      time.Duration // default 5 ms
	TransportTimeout   time.Duration // default 10 s
	// Snapshots: one whenever SnapshotLogBytes (default 256 MiB) of log were
	// applied since the last (checked every SnapshotLogCheck, default 1 s),
	// or SnapshotThreshold entries (default 65536, checked every
	// SnapshotInterval) for floods of tiny entries, keeping TrailingLogs
	// (default 16384) entries, but no more than TrailingLogBytes (default
	// 256 MiB) of them, so a briefly stopped node catches up from the log
	// rather than a full snapshot. See snappolicy.go and trailing.go.
	SnapshotLogBytes  uint64
	SnapshotLogCheck  time.Duration
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration // default 30 s
	TrailingLogs      uint64
	TrailingLogBytes  uint64
	MaxAppendEntries  int // default 256
	// ReclaimBytes: a quiet node whose snapshots hold this many bytes of
	// segment files the store no longer uses takes them back (reclaim.go),
	// checking every ReclaimCheck (default 30 s). 0: never.
	ReclaimBytes uint64
	ReclaimCheck time.Duration

	Proposer ProposerConfig
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HeartbeatTimeout, time.Second)
	def(&c.ElectionTimeout, time.Second)
	// Raft refuses a lease longer than the heartbeat timeout.
	def(&c.LeaderLeaseTimeout, min(500*time.Millisecond, c.HeartbeatTimeout))
	def(&c.CommitTimeout, 5*time.Millisecond)
	def(&c.TransportTimeout, 10*time.Second)
	def(&c.SnapshotInterval, 30*time.Second)
	def(&c.SnapshotLogCheck, time.Second)
	def(&c.ReclaimCheck, 30*time.Second)
	if c.SnapshotLogBytes == 0 {
		c.SnapshotLogBytes = 256 << 20
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 65536
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 16384
	}
	if c.TrailingLogBytes == 0 {
		c.TrailingLogBytes = 256 << 20
	}
	if c.MaxAppendEntries == 0 {
		c.MaxAppendEntries = 256
	}
	if c.Advertise == "" {
		c.Advertise = c.RaftAddr
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Proposer.defaults()
}

// Node is one running Raft member.
type Node struct {
	cfg       Config
	log       *slog.Logger
	raft      *raft.Raft
	fsm       *fsm.FSM
	counted   *logBytesFSM // fsm as Raft sees it
	transport *raft.NetworkTransport
	guard     *voteGuard            // in front of transport while on probation (probation.go); nil otherwise
	logStore  *raftboltdb.BoltStore // the file: Raft's stable store, and the log below pieces
	pieces    *pieceLog             // the log in pieces (piecelog.go)
	appendLog *leaderAppendStore    // in front of pieces: the leader's writes overlap replication
	logPath   string                // logStore's file
	logs      raft.LogStore         // the log as Raft reads it: its cache in front of appendLog
	snaps     *linkingStore
	floor     startFloor // the log's last command at start (startfloor.go)
	proposer  *Proposer

	notifyCh chan bool
	obsCh    chan raft.Observation
	// joinCh hands a new OnLeadership watcher to watchLeadership, which
	// tells it the current state in order with the notifications.
	joinCh   chan leadershipJoin
	mu       sync.Mutex // guards watchers, leaderView and endLeaderView
	watchers []func(isLeader bool)
	// leaderView is cancelled, and replaced, whenever this node's view of
	// the leader changes (see LeaderView).
	leaderView    context.Context
	endLeaderView context.CancelFunc
	stopped       chan struct{}
}

// New opens the stores, restores the state machine from the newest snapshot
// if its own file is behind it, and starts Raft.
// raftConfig is the hashicorp/raft configuration c (defaults applied)
// asks for, without the notification channel and logger of a running node.
func (c *Config) raftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.NodeID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = c.SnapshotInterval
	rc.TrailingLogs = c.TrailingLogs
	rc.MaxAppendEntries = c.MaxAppendEntries
	rc.BatchApplyCh = true
	// Raft's timers once per metric, labelled by peer, not again under a
	// name per peer (crownd exports them: crown_raft_*).
	rc.NoLegacyTelemetry = true
	// The state machine is persistent: it resumes from its own applied
	// index instead of reloading a snapshot on every start.
	rc.NoSnapshotRestoreOnStart = true
	// A leader that removes itself steps down and stays a follower outside
	// the configuration (a removed follower does the same): it campaigns
	// for nothing and commits nothing. Raft's default shut Raft down from
	// inside its leader loop at the commit of the removal, and a Raft that
	// has shut down answers no future still queued (its buffered apply
	// channel, its state machine's queue): the removal's own future, and
	// the proposer's in-flight entry, then waited forever, and so did
	// Shutdown (TestProposerLeaderRemovingItselfAnswersEveryCommandAndStops).
	rc.ShutdownOnRemove = false
	return rc
}

// Validate reports what Raft would refuse when the node starts (timeouts
// too low or inconsistent, an address other nodes cannot dial), so that a
// bad setting stops a node before it writes anything.
func (c Config) Validate() error {
	c.defaults()
	if err := raft.ValidateConfig(c.raftConfig()); err != nil {
		return fmt.Errorf("raft settings: %w", err)
	}
	host, port, err := net.SplitHostPort(c.Advertise)
	if err != nil {
		return fmt.Errorf("raft advertise address %q: %w", c.Advertise, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("raft advertise address %q: port must be 1 to 65535", c.Advertise)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("raft advertise address %q: other nodes cannot dial an unspecified host; give a reachable one", c.Advertise)
	}
	return nil
}

func New(cfg Config, f *fsm.FSM) (*Node, error) {
	cfg.defaults()
	log := cfg.Logger.With("component", "raftnode")
	dir := filepath.Join(cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create raft directory: %w", err)
	}
	store, logPath, err := openLog(dir, log)
	if err != nil {
		return nil, err
	}
	pieces := newPieceLog(store)
	cleanup := []func(){func() { store.Close() }}
	fail := func(err error) (*Node, error) {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
		if _, serr := os.Stat(f.DiscardedDir()); serr == nil {
			err = fmt.Errorf("%w (the state database this node had, set aside after a crash to be rebuilt, is kept in %s)", err, f.DiscardedDir())
		}
		return nil, err
	}
	// The cache serves replication and the apply from memory. Entries carry
	// whole group commits (often hundreds of KiB), so it holds a few dozen,
	// not thousands: 4096 entries of a busy cluster held 250 MB of heap.
	// The leader writes its own copy of an entry while replicating it
	// (leaderappend.go); Raft is known once it runs.
	var running atomic.Pointer[raft.Raft]
	appendLog := newLeaderAppendStore(pieces,
		func() bool { r := running.Load(); return r != nil && r.State() == raft.Leader },
		func(err error) {
			log.Error("raft log write failed; stopping the node", "error", err)
			panic(err)
		})
	cleanup = append(cleanup, func() { appendLog.Close() })
	logs, err := raft.NewLogCache(logCacheEntries, appendLog)
	if err != nil {
		return fail(fmt.Errorf("log cache: %w", err))
	}
	snaps, err := newLinkingStore(dir, 2, newHCLog(cfg.Logger, "raft-snapshots"))
	if err != nil {
		return fail(fmt.Errorf("open snapshot store: %w", err))
	}
	if err := checkLogStart(logs, snaps, logPath); err != nil {
		return fail(err)
	}
	if err := restoreIfBehind(log, f, snaps, logs); err != nil {
		return fail(err)
	}
	floor := readStartFloor(logs, f.AppliedIndex())
	advertise, err := net.ResolveTCPAddr("tcp", cfg.Advertise)
	if err != nil {
		return fail(fmt.Errorf("resolve raft advertise address %q: %w", cfg.Advertise, err))
	}
	trans, err := raft.NewTCPTransportWithLogger(cfg.RaftAddr, advertise, 5, cfg.TransportTimeout,
		newHCLog(cfg.Logger, "raft-transport"))
	if err != nil {
		return fail(fmt.Errorf("listen raft on %s: %w", cfg.RaftAddr, err))
	}
	cleanup = append(cleanup, func() { trans.Close() })

	n := &Node{cfg: cfg, log: log, fsm: f, counted: &logBytesFSM{FSM: f, sizes: newEntrySizes(cfg.TrailingLogs), durable: appendLog.waitDurable}, transport: trans, logStore: store, pieces: pieces, appendLog: appendLog, logPath: logPath, logs: logs, snaps: snaps, floor: floor,
		notifyCh: make(chan bool, 16), obsCh: make(chan raft.Observation, 64), joinCh: make(chan leadershipJoin),
		stopped: make(chan struct{})}
	n.leaderView, n.endLeaderView = context.WithCancel(context.Background())

	rc := cfg.raftConfig()
	rc.NotifyCh = n.notifyCh
	rc.Logger = newHCLog(cfg.Logger, "raft")

	exists, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		return fail(fmt.Errorf("inspect raft state: %w", err))
	}
	marker := filepath.Join(dir, probationFile)
	if !exists && (cfg.Join || len(cfg.Peers) > 1) {
		if err := beginProbation(marker); err != nil {
			return fail(err)
		}
	}
	probation, err := onProbation(marker)
	if err != nil {
		return fail(err)
	}
	var transport raft.Transport = mainLoopHeartbeats{trans}
	if probation {
		n.guard = newVoteGuard(transport, rc.LocalID, marker, log)
		cleanup = append(cleanup, func() { n.guard.Close() })
		transport = n.guard
		log.Info("on probation: this node's Raft log started empty, so it votes only for a first bootstrap until it has caught up with a leader (raftnode/DESIGN.md)")
	}
	transport = clampingTransport{transportLayer: transportLayer{transport}, log: appendLog}
	if !cfg.Join {
		if !exists {
			servers := []raft.Server{{ID: rc.LocalID, Address: trans.LocalAddr()}}
			if len(cfg.Peers) > 0 {
				servers = servers[:0]
				for _, p := range cfg.Peers {
					servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
				}
			}
			if err := raft.BootstrapCluster(rc, logs, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
				return fail(fmt.Errorf("bootstrap: %w", err))
			}
			log.Info("bootstrapped cluster", "voters", len(servers))
		}
	}
	r, err := newRaft(logPath, rc, n.counted, logs, store, snaps, transport)
	if err != nil {
		return fail(fmt.Errorf("start raft: %w", err))
	}
	n.raft = r
	running.Store(r)
	// The rebuild of a state set aside has its snapshot and log: the old
	// copy is no longer anyone's way back.
	if err := f.DropDiscarded(); err != nil {
		log.Warn("cannot remove the state database set aside; remove it by hand", "dir", f.DiscardedDir(), "error", err)
	}
	n.proposer = newProposer(cfg.Proposer, r, cfg.NodeID, cfg.Logger)
	// A non-blocking observer never stalls Raft; an observation dropped on
	// a full channel is harmless, since those queued ahead of it close the
	// current channel anyway.
	r.RegisterObserver(raft.NewObserver(n.obsCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	}))
	go n.watchLeadership()
	go n.snapshotOnLogBytes()
	if n.guard != nil {
		last := r.LastIndex
		n.guard.lastIndex.Store(&last)
		go n.watchProbation(n.guard)
	}
	return n, nil
}

// restoreIfBehind loads the newest snapshot into the state machine when the
// state file is older than it (it was discarded after a machine crash, or is
// new, or a leader's snapshot was stored and the process killed before the
// state machine restored it). Raft itself starts applying after the
// snapshot's index.
//
// A snapshot's index may be a barrier's (Raft counts barriers, which it
// hands to no state machine, in the index it snapshots at), above the state
// file's applied index although the file holds everything the snapshot
// does: only entries the state machine applies (commands and configuration
// changes) between the two make the file behind.
func restoreIfBehind(log *slog.Logger, f *fsm.FSM, snaps raft.SnapshotStore, logs raft.LogStore) error {
	list, err := snaps.List()
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	if len(list) == 0 || !appliesBetween(logs, f.AppliedIndex(), list[0].Index, list[0].Term) {
		return nil
	}
	meta, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		return fmt.Errorf("open snapshot %s: %w", list[0].ID, err)
	}
	log.Info("state machine behind newest snapshot; restoring", "applied_index", f.AppliedIndex(), "snapshot_index", meta.Index)
	if err := f.Restore(rc); err != nil {
		return fmt.Errorf("restore snapshot %s: %w", meta.ID, err)
	}
	return nil
}

// newRaft is raft.NewRaft with its panic on a log entry it cannot read
// turned into an error naming the log. Before it starts anything, NewRaft
// reads every entry after the newest snapshot for configuration changes
// and panics on the first whose read fails (a piece that does not decode,
// an entry missing), which killed crownd with a goroutine dump instead of
// saying which file is damaged. Panics of other kinds are not ours to
// translate and go on.
func newRaft(logPath string, rc *raft.Config, f raft.FSM, logs raft.LogStore, stable raft.StableStore,
	snaps raft.SnapshotStore, trans raft.Transport) (r *raft.Raft, err error) {
	defer func() {
		if p := recover(); p != nil {
			e, ok := p.(error)
			if !ok {
				panic(p)
			}
			r, err = nil, fmt.Errorf("raft log %s: an entry after the newest snapshot does not read: %w", logPath, e)
		}
	}()
	return raft.NewRaft(rc, f, logs, stable, snaps, trans)
}

// checkLogStart fails when the log starts after the entry that follows the
// newest snapshot the store can read: Raft rebuilds its configuration from
// that snapshot and the log entries after it, and panicked ("log not
// found") on the first entry the compaction had removed. The file store
// skips a snapshot whose meta.json does not read (a warning in the log),
// so a damaged or deleted snapshot leaves the log without its start.
func checkLogStart(logs raft.LogStore, snaps *linkingStore, logPath string) error {
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("raft log %s: first index: %w", logPath, err)
	}
	if first <= 1 {
		return nil
	}
	list, err := snaps.List()
	if err != nil {
		return fmt.Errorf("list snapshots in %s: %w", snaps.dir, err)
	}
	var covered uint64
	if len(list) > 0 {
		covered = list[0].Index
	}
	if covered+1 < first {
		return fmt.Errorf("raft log %s starts at index %d, but the newest readable snapshot in %s ends at %d: "+
			"the snapshot the log was compacted behind is missing or unreadable", logPath, first, snaps.dir, covered)
	}
	return nil
}

// appliesBetween reports whether the snapshot of index upTo and term holds
// an entry after applied that the state machine applies (a command or a
// configuration change). It reads this node's log, which answers only when
// it holds the snapshot's own entry, of the snapshot's term: by Raft's log
// matching, the entries before that one are then the ones the snapshot
// applied. Otherwise the log may hold, up to upTo, entries no leader
// committed (a deposed leader's barriers, where the leader whose snapshot
// was installed committed commands), so the file counts as behind; so it
// does when the log no longer holds an entry in between.
func appliesBetween(logs raft.LogStore, applied, upTo, term uint64) bool {
	if upTo <= applied {
		return false
	}
	var own raft.Log
	if err := logs.GetLog(upTo, &own); err != nil || own.Term != term {
		return true
	}
	for i := upTo; i > applied; i-- {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil || l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return true
		}
	}
	return false
}

func (n *Node) watchLeadership() {
	for {
		select {
		case isLeader := <-n.notifyCh:
			n.log.Info("leadership changed", "leader", isLeader)
			n.mu.Lock()
			ws := append([]func(bool){}, n.watchers...)
			n.mu.Unlock()
			for _, w := range ws {
				w(isLeader)
			}
		case j := <-n.joinCh:
			j.fn(n.raft.State() == raft.Leader)
			close(j.done)
		case <-n.obsCh:
			n.mu.Lock()
			n.endLeaderView()
			n.leaderView, n.endLeaderView = context.WithCancel(context.Background())
			n.mu.Unlock()
		case <-n.stopped:
			return
		}
	}
}

// OnLeadership registers fn to run (on one goroutine, in order) with
// whether this node leads now, and then whenever it gains or loses
// leadership; it returns after that first call, which is made on the
// goroutine of the later ones, in order with
// the notifications: a caller that read IsLeader itself and then
// registered could apply a stale "leader" after a loss already delivered,
// and run leader-only work on a follower.
func (n *Node) OnLeadership(fn func(isLeader bool)) {
	n.mu.Lock()
	n.watchers = append(n.watchers, fn)
	n.mu.Unlock()
	j := leadershipJoin{fn: fn, done: make(chan struct{})}
	select {
	case n.joinCh <- j:
		<-j.done
	case <-n.stopped:
	}
}

// leadershipJoin is a new watcher and what closes once it was told the
// current state.
type leadershipJoin struct {
	fn   func(isLeader bool)
	done chan struct{}
}

// LeaderView returns a context that is cancelled the next time this node's
// view of the leader changes (a leader lost, or a new one learned). A
// follower uses it to give up on a request forwarded to a leader that has
// meanwhile been replaced: a paused or partitioned old leader would
// otherwise hold the request until the client times out. Being a context,
// it lets callers attach work with context.AfterFunc, no goroutine each.
func (n *Node) LeaderView() context.Context {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leaderView
}

// ErrNotLeader means the command was not proposed: send it to the leader.
var ErrNotLeader = errors.New("not the leader")

// ErrUnknownOutcome means leadership was lost after the command was handed
// to Raft: it may or may not be committed.
var ErrUnknownOutcome = errors.New("leadership lost while committing; outcome unknown")

// ErrShutdown means the node is stopping.
var ErrShutdown = errors.New("node shutting down")

// Propose commits cmd through the group-commit proposer and returns its
// result and the log index it was applied at.
func (n *Node) Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error) {
	if n.raft.State() != raft.Leader {
		return nil, 0, ErrNotLeader
	}
	return n.proposer.Propose(ctx, cmd)
}

// IsLeader reports whether this node currently leads.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the current leader's id and Raft address, empty when unknown.
func (n *Node) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// Status is a snapshot of this node's Raft state.
type Status struct {
	State        string
	LeaderID     string
	LeaderAddr   string
	Term         uint64
	AppliedIndex uint64 // state machine
	CommitIndex  uint64
	LastIndex    uint64
	// LogBytesSinceSnapshot is the size of the entries this process applied
	// that no snapshot holds yet (snappolicy.go).
	LogBytesSinceSnapshot uint64
	// ProposedEntries and ProposedCommands count the entries this node
	// proposed as leader and the commands in them; Lingered counts the
	// entries held back by the linger (proposer.go).
	ProposedEntries, ProposedCommands, Lingered uint64
	// Probation is true while this node, whose log started empty, votes
	// for no candidate past a first bootstrap (probation.go).
	Probation bool
}

// Status reports this node's Raft state.
func (n *Node) Status() Status {
	id, addr := n.Leader()
	return Status{
		State: n.raft.State().String(), LeaderID: id, LeaderAddr: addr,
		Term:         n.raft.CurrentTerm(),
		AppliedIndex: n.fsm.AppliedIndex(), CommitIndex: n.raft.CommitIndex(), LastIndex: n.raft.LastIndex(),
		LogBytesSinceSnapshot: n.counted.sinceSnapshot(),
		ProposedEntries:       n.proposer.stats.Entries.Load(),
		ProposedCommands:      n.proposer.stats.Commands.Load(),
		Lingered:              n.proposer.stats.Lingered.Load(),
		Probation:             n.guard != nil && n.guard.on.Load(),
	}
}

// LogStorage is how much log a node keeps.
type LogStorage struct {
	// FirstIndex is the oldest entry the log holds (0 when unreadable),
	// TrailingLogs how many entries the next compaction keeps
	// (trailing.go), and FileBytes the size of the log's file on disk:
	// bbolt's file only grows, reusing the pages compaction frees.
	FirstIndex, TrailingLogs, FileBytes uint64
	// SnapshotHeldBytes is the segment files only the snapshots still
	// hold, which a reclaim would free (reclaim.go); 0 when unreadable.
	SnapshotHeldBytes uint64
}

// LogStorage reads the log's extent. It opens a read transaction and
// stats the file, so it is for scrapes, not for request paths.
func (n *Node) LogStorage() LogStorage {
	var ls LogStorage
	ls.FirstIndex, _ = n.pieces.FirstIndex()
	ls.TrailingLogs = n.raft.ReloadableConfig().TrailingLogs
	if fi, err := os.Stat(n.logPath); err == nil {
		ls.FileBytes = uint64(fi.Size())
	}
	if held, err := n.snapshotHeld(); err == nil {
		ls.SnapshotHeldBytes = uint64(held.Total())
	}
	return ls
}

// WaitLeader blocks until a leader is known or ctx ends.
func (n *Node) WaitLeader(ctx context.Context) (id, addr string, err error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if id, addr = n.Leader(); id != "" {
			return id, addr, nil
		}
		select {
		case <-ctx.Done():
			return "", "", fmt.Errorf("no leader elected: %w", ctx.Err())
		case <-n.stopped:
			return "", "", ErrShutdown
		case <-t.C:
		}
	}
}

// ReadIndex confirms leadership with a quorum and returns the index a
// linearizable read must wait for (on any node, with WaitApplied). Leader
// only.
//
// That is the last command at or below the commit index, not the commit
// index itself: Raft hands the state machine commands only, so a new
// leader's no-op, a configuration change or a barrier is committed but never
// applied, and the state's applied index stops at the last command. Right
// after an election the commit index is the no-op's, and waiting for it
// waited for whatever write came next. The leader holds every committed
// entry, so the walk back over the few it has not applied reads its own log
// (Raft's cache, usually one or two entries).
//
// The commit index counts only once an entry of this leader's own term is
// committed (Raft paper, section 8): a new leader's commit index is the one
// it heard as a follower, and followers hear of a commit only with the next
// append, so it can be below an entry the old leader committed and
// acknowledged. Until the term's first entry (its no-op) commits, ReadIndex
// appends a barrier and waits for it.
func (n *Node) ReadIndex() (uint64, error) {
	term := n.raft.CurrentTerm()
	idx := n.raft.CommitIndex()
	if !n.committedInTerm(idx, term) {
		if err := n.raft.Barrier(readIndexBarrierTimeout).Error(); err != nil {
			return 0, leadershipError("read index barrier", err)
		}
		term = n.raft.CurrentTerm()
		idx = n.raft.CommitIndex()
		if !n.committedInTerm(idx, term) {
			// The term moved on after the barrier committed.
			return 0, fmt.Errorf("%w: term changed during a read index", ErrNotLeader)
		}
	}
	if err := n.raft.VerifyLeader().Error(); err != nil {
		return 0, leadershipError("verify leadership", err)
	}
	if n.raft.CurrentTerm() != term {
		// Leader again, but of a later term: idx may miss what a leader in
		// between committed.
		return 0, fmt.Errorf("%w: term changed during a read index", ErrNotLeader)
	}
	return n.lastCommandAtOrBelow(idx), nil
}

// readIndexBarrierTimeout bounds how long a new leader's read index waits
// for Raft to take its barrier (Node.Barrier's default).
const readIndexBarrierTimeout = 10 * time.Second

// committedInTerm reports whether the entry at index (the commit index) is
// of term: its leader has then committed an entry of its own term, and the
// index covers everything earlier leaders committed.
func (n *Node) committedInTerm(index, term uint64) bool {
	if index == 0 {
		return false
	}
	var l raft.Log
	return n.logs.GetLog(index, &l) == nil && l.Term == term
}

// leadershipError maps a failed leader-only Raft future: lost or missing
// leadership is ErrNotLeader.
func leadershipError(what string, err error) error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) {
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// lastCommandAtOrBelow walks back from index over the entries the state
// machine has not applied to the last command. An entry it cannot read is
// taken to be one.
func (n *Node) lastCommandAtOrBelow(index uint64) uint64 {
	applied := n.fsm.AppliedIndex()
	for i := index; i > applied; i-- {
		var l raft.Log
		if err := n.logs.GetLog(i, &l); err != nil || l.Type == raft.LogCommand {
			return i
		}
	}
	return applied
}

// Barrier returns once the state machine has applied every entry the log
// holds before a barrier this leader appends (raft.Barrier): after it, the
// local state includes whatever earlier leaders left in the log, committed
// or committed along with this leader's first entry. It waits until ctx's
// deadline, or 10 s without one.
func (n *Node) Barrier(ctx context.Context) error {
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	if err := n.raft.Barrier(timeout).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
			errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return fmt.Errorf("%w: %v", ErrNotLeader, err)
		}
		return fmt.Errorf("barrier: %w", err)
	}
	return nil
}

// WaitApplied blocks until the state machine has applied index, or ctx ends.
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	return n.fsm.WaitApplied(ctx, index)
}

// Member is one server of the Raft configuration.
type Member struct {
	ID       string `json:"id"`
	Address  string `json:"raft_addr"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
}

// Members lists the current Raft configuration.
func (n *Node) Members() ([]Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	leaderID, _ := n.Leader()
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{ID: string(s.ID), Address: string(s.Address),
			Suffrage: s.Suffrage.String(), Leader: string(s.ID) == leaderID})
	}
	return out, nil
}

// AddVoter adds (or re-addresses) a voting member. Leader only.
func (n *Node) AddVoter(id, addr string, timeout time.Duration) error {
	members, err := n.Members()
	if err != nil {
		return err
	}
	for _, m := range members {
		if m.Address == addr && m.ID != id {
			return fmt.Errorf("%w: raft address %s is member %q's", ErrConflict, addr, m.ID)
		}
	}
	return n.leaderOp(n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout))
}

// RemoveServer removes a member. Leader only. An id that is not a member
// is ErrNoMember (Raft itself would commit a configuration change removing
// nothing, and the caller would report a removal that did not happen).
func (n *Node) RemoveServer(id string, timeout time.Duration) error {
	if err := n.checkMember(id); err != nil {
		return err
	}
	return n.leaderOp(n.raft.RemoveServer(raft.ServerID(id), 0, timeout))
}

// checkMember returns ErrNoMember unless id is in the configuration.
func (n *Node) checkMember(id string) error {
	members, err := n.Members()
	if err != nil {
		return err
	}
	if HasMember(members, id) {
		return nil
	}
	return fmt.Errorf("%w: %q", ErrNoMember, id)
}

// TransferLeadership hands leadership to id, or to the most up-to-date
// follower when id is empty. Leader only.
func (n *Node) TransferLeadership(id string) error {
	members, err := n.Members()
	if err != nil {
		return err
	}
	if n.IsLeader() {
		if id == n.cfg.NodeID {
			return fmt.Errorf("%w: %q is the leader already", ErrConflict, id)
		}
		if id == "" && len(VotersBesides(members, n.cfg.NodeID)) == 0 {
			return fmt.Errorf("%w: no other voter to hand leadership to", ErrConflict)
		}
	}
	if id == "" {
		return n.leaderOp(n.raft.LeadershipTransfer())
	}
	for _, m := range members {
		if m.ID == id {
			return n.leaderOp(n.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(m.Address)))
		}
	}
	return fmt.Errorf("%w: %q", ErrNoMember, id)
}

// ErrNoMember reports a membership operation naming an unknown server.
var ErrNoMember = errors.New("no such member")

// ErrConflict reports a membership change or transfer the configuration
// refuses however often it is repeated.
var ErrConflict = errors.New("refused by the cluster configuration")

// HasMember reports whether members lists id, voter or not.
func HasMember(members []Member, id string) bool {
	return slices.ContainsFunc(members, func(m Member) bool { return m.ID == id })
}

// IsVoter reports whether members lists id as a voter.
func IsVoter(members []Member, id string) bool {
	for _, m := range members {
		if m.ID == id && m.Suffrage == raft.Voter.String() {
			return true
		}
	}
	return false
}

// VotersBesides returns the voters of members other than id.
func VotersBesides(members []Member, id string) []Member {
	var out []Member
	for _, m := range members {
		if m.ID != id && m.Suffrage == raft.Voter.String() {
			out = append(out, m)
		}
	}
	return out
}

func (n *Node) leaderOp(f raft.Future) error {
	err := f.Error()
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		return ErrNotLeader
	case errors.Is(err, raft.ErrLeadershipLost):
		// The change is in the log and commits if a later leader keeps
		// it (a removal while another member is down does, once it is
		// back): the caller must not report that nothing happened.
		return fmt.Errorf("%w: %v", ErrUnknownOutcome, err)
	}
	return err
}

// Snapshot forces a snapshot now (operators and tests).
func (n *Node) Snapshot() error { return n.raft.Snapshot().Error() }

// Shutdown stops the proposer and Raft and closes the stores. The state
// machine is closed by its owner afterwards.
func (n *Node) Shutdown() error {
	n.proposer.Close()
	err := n.raft.Shutdown().Error()
	close(n.stopped)
	closer := raft.WithClose(n.transport)
	if n.guard != nil {
		closer = n.guard // stops its relay, then closes the transport
	}
	if cerr := closer.Close(); err == nil {
		err = cerr
	}
	if cerr := n.appendLog.Close(); err == nil {
		err = cerr
	}
	if cerr := n.logStore.Close(); err == nil {
		err = cerr
	}
	return err
}

// logCacheEntries is how many of the newest log entries Raft's LogCache
// keeps in memory. Replication and a follower's apply read entries just
// appended, a few at a time; a follower further behind reads the store, as
// one that restarts does. The count is what bounds the cache, and entries
// have grown with group commit: 256 entries of 150-260 KiB pushes held 42 MB
// of a follower's 48 MB heap after a 1,000,000-message fill, and took its
// resident memory to 240-252 MiB, near the 256 MB target. With 64 the same
// fill left 166-180 MiB and 30-39 MiB anonymous; a produce run kept its rate
// and its CPU (49,620 against 49,687 msg/s, 11.3 and 11.2 CPU-seconds) with
// twice the GC cycles of a heap a third the size.
const logCacheEntries = 64
