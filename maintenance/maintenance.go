// Package maintenance runs Crown's leader-only timers. On the leader it
// periodically proposes sweep commands through Raft (retention, maxWait and
// completed-retention deletion; clearing long-expired leases); on followers
// it does nothing. The state machine decides what each sweep deletes from
// the entry's stamped time, so a sweep proposed twice, or by an old and a
// new leader, deletes nothing twice. A read-only check of the state comes
// before each proposal, so a sweep that would change nothing is not
// proposed and an idle cluster's log stays still. See DESIGN.md.
package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crownmq/crown/fsm"
)

// Proposer commits commands (raftnode.Node).
type Proposer interface {
	Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error)
}

// State lists what needs sweeping (fsm.FSM).
type State interface {
	SweepTargets() ([]string, error)
}

// QueueState answers whether a queue exists (fsm.FSM). A State that
// implements it lets a new leader skip ensuring queues that already exist,
// so a restart or failover appends nothing to an idle cluster's log.
type QueueState interface {
	Queue(name string) (*fsm.QueueInfo, error)
}

// OJSState lists the queues the OJS sweep visits (fsm.FSM): draining ones
// (to finish a deletion or a drain) and those with dead-letter caps. A
// State that does not implement it gets no OJS sweep.
type OJSState interface {
	OJSSweepTargets() ([]string, error)
}

// DedupState reports whether remembered deletions of transaction ids have
// expired (fsm.FSM): a push of a deleted message's id stays a duplicate for
// the rest of its dedup window, and the sweep timer then proposes that the
// memory be dropped. A State that does not implement it gets no such sweep.
type DedupState interface {
	DeletedTxIDsDue(now int64) (bool, error)
}

// DueState answers, before a sweep is proposed, whether applying it at or
// after now would change the state (fsm.FSM; fsm/sweep_due.go). A State
// that implements it gets a command proposed only when its check says so,
// so an idle cluster's log stays still; one that does not gets every sweep
// proposed on every tick.
type DueState interface {
	SweepDue(queue string, now int64) (bool, error)
	OJSSweepDue(queue string, now int64) (bool, error)
	LeasesDue(now, grace int64, batch uint32, from [16]byte) (due bool, next [16]byte, err error)
}

// Config tunes the timers.
type Config struct {
	// RetentionInterval is how often queues with deletion rules are swept
	// (Queen's RETENTION_INTERVAL, default 5 s).
	RetentionInterval time.Duration
	// RetentionBatch bounds the segments one sweep command deletes
	// (RETENTION_BATCH_SIZE, default 1000), so pushes interleave with a
	// large deletion.
	RetentionBatch uint32
	// LeaseInterval is how often long-expired lease records are cleared
	// (default 30 s); LeaseGrace is how long an expired lease is kept so an
	// extension can still answer "Lease already expired" (default 5 min).
	LeaseInterval time.Duration
	LeaseGrace    time.Duration
	LeaseBatch    uint32
	// EnsureQueues are created (if missing) each time this node becomes
	// leader.
	EnsureQueues []string
	Logger       *slog.Logger
	Registry     prometheus.Registerer
}

func (c *Config) defaults() {
	if c.RetentionInterval <= 0 {
		c.RetentionInterval = 5 * time.Second
	}
	if c.RetentionBatch == 0 {
		c.RetentionBatch = 1000
	}
	if c.LeaseInterval <= 0 {
		c.LeaseInterval = 30 * time.Second
	}
	if c.LeaseGrace <= 0 {
		c.LeaseGrace = 5 * time.Minute
	}
	if c.LeaseBatch == 0 {
		c.LeaseBatch = 1000
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Runner starts the timers when this node gains leadership and stops them
// when it loses it.
type Runner struct {
	cfg   Config
	log   *slog.Logger
	prop  Proposer
	state State
	m     *metrics

	mu     sync.Mutex
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New builds a runner; it does nothing until SetLeader(true).
func New(cfg Config, p Proposer, s State) *Runner {
	cfg.defaults()
	return &Runner{cfg: cfg, log: cfg.Logger.With("component", "maintenance"), prop: p, state: s,
		m: newMetrics(cfg.Registry)}
}

// SetLeader starts (true) or stops (false) the timers. Safe to call repeatedly.
func (r *Runner) SetLeader(leader bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if leader == (r.cancel != nil) {
		return
	}
	if !leader {
		r.cancel()
		r.cancel = nil
		r.m.active.Set(0)
		r.log.Info("timers stopped (not leader)")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.m.active.Set(1)
	r.log.Info("timers started (leader)", "retention_interval", r.cfg.RetentionInterval, "retention_batch", r.cfg.RetentionBatch)
	r.wg.Add(2)
	go r.every(ctx, r.cfg.RetentionInterval, r.sweepQueues)
	var leaseFrom [16]byte // this term's place in the lease index, used by one goroutine
	go r.every(ctx, r.cfg.LeaseInterval, func(ctx context.Context) { r.sweepLeases(ctx, &leaseFrom) })
	for _, name := range r.cfg.EnsureQueues {
		r.wg.Add(1)
		go r.ensureQueue(ctx, name)
	}
	if _, ok := r.state.(OJSState); ok {
		r.wg.Add(1)
		go r.every(ctx, r.cfg.RetentionInterval, r.sweepOJS)
	}
	if _, ok := r.state.(DedupState); ok {
		r.wg.Add(1)
		go r.every(ctx, r.cfg.RetentionInterval, r.forgetDeletedTxIDs)
	}
}

// Close stops the timers and waits for them.
func (r *Runner) Close() {
	r.SetLeader(false)
	r.wg.Wait()
}

// ensureQueue makes sure a queue exists (crownd passes the OJS queue
// "default", which OJS requires on every implementation), retrying until it
// commits or this node stops leading. The command changes nothing when the
// queue exists; checking first keeps an idle cluster's state (and applied
// index) unchanged across restarts. A check that misses a committed but not
// yet applied creation only costs one redundant command.
func (r *Runner) ensureQueue(ctx context.Context, name string) {
	defer r.wg.Done()
	if qs, ok := r.state.(QueueState); ok {
		if q, err := qs.Queue(name); err == nil && q != nil {
			return
		}
	}
	for ctx.Err() == nil {
		if _, ok := r.propose(ctx, &fsm.OJSSetState{Name: name, EnsureOnly: true}); ok {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (r *Runner) every(ctx context.Context, d time.Duration, fn func(context.Context)) {
	defer r.wg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

// due runs a sweep's read-only check at the wall clock (the check itself
// takes the state's time when that is later) and reports whether the
// command should be proposed. A check that says no is counted in
// crown_sweep_skipped_total; a check that fails is logged and proposes
// nothing (the next tick checks again), as a failed listing of targets does.
func (r *Runner) due(kind string, check func(now int64) (bool, error)) bool {
	if check == nil {
		return true
	}
	due, err := check(time.Now().UnixMicro())
	if err != nil {
		r.log.Error("sweep check failed", "kind", kind, "error", err)
		return false
	}
	if !due {
		r.m.skipped.WithLabelValues(kind).Inc()
	}
	return due
}

// propose commits one sweep; a lost leadership ends the round quietly.
func (r *Runner) propose(ctx context.Context, cmd fsm.Command) (any, bool) {
	res, _, err := r.prop.Propose(ctx, cmd)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			r.log.Warn("sweep not committed", "command", fsm.TypeName(cmd.Type()), "error", err)
		}
		return nil, false
	}
	if er, ok := res.(*fsm.ErrorResult); ok {
		r.log.Error("sweep refused", "command", fsm.TypeName(cmd.Type()), "error", er.Err)
		return nil, false
	}
	return res, true
}

// sweepQueues sweeps every queue with a deletion rule, in bounded steps:
// while a sweep reports more to delete, the next one follows at once, each
// its own log entry so pushes interleave.
func (r *Runner) sweepQueues(ctx context.Context) {
	queues, err := r.state.SweepTargets()
	if err != nil {
		r.log.Error("list sweep targets", "error", err)
		return
	}
	ds, _ := r.state.(DueState)
	for _, q := range queues {
		var check func(int64) (bool, error)
		if ds != nil {
			check = func(now int64) (bool, error) { return ds.SweepDue(q, now) }
		}
		for ctx.Err() == nil {
			if !r.due("retention", check) {
				break
			}
			res, ok := r.propose(ctx, &fsm.Sweep{Queue: q, MaxSegments: r.cfg.RetentionBatch})
			if !ok {
				return
			}
			sr := res.(*fsm.SweepResult)
			r.m.sweeps.WithLabelValues("retention").Inc()
			for rule, name := range fsm.RuleNames {
				r.m.segments.WithLabelValues(name).Add(float64(sr.Segments[rule]))
				r.m.messages.WithLabelValues(name).Add(float64(sr.Messages[rule]))
				if sr.Segments[rule] > 0 {
					r.log.Info("swept", "queue", q, "rule", name, "segments", sr.Segments[rule], "messages", sr.Messages[rule])
				}
			}
			if !sr.More {
				break
			}
		}
	}
}

// sweepLeases proposes ExpireLeases from *from, the lease id where the
// previous sweep (or check) of this leadership term stopped: each tick
// moves one window over the lease index, so live leases older than the
// stale ones cannot hold the sweep at the index's start.
func (r *Runner) sweepLeases(ctx context.Context, from *[16]byte) {
	grace, batch := r.cfg.LeaseGrace.Microseconds(), r.cfg.LeaseBatch
	var check func(int64) (bool, error)
	var next [16]byte
	if ds, ok := r.state.(DueState); ok {
		check = func(now int64) (due bool, err error) {
			due, next, err = ds.LeasesDue(now, grace, batch, *from)
			return due, err
		}
	}
	for ctx.Err() == nil {
		if !r.due("leases", check) {
			*from = next // nothing stale in this window: the next tick looks at the following one
			return
		}
		res, ok := r.propose(ctx, &fsm.ExpireLeases{Grace: grace, Max: batch, From: *from})
		if !ok {
			return
		}
		er := res.(*fsm.ExpireLeasesResult)
		*from = er.Next
		r.m.sweeps.WithLabelValues("leases").Inc()
		r.m.leases.Add(float64(er.Cleared))
		if !er.More || er.Cleared == 0 {
			return // done, or no progress: the next tick looks again
		}
	}
}

// forgetDeletedTxIDs drops the remembered deletions whose dedup window
// closed, in bounded steps.
func (r *Runner) forgetDeletedTxIDs(ctx context.Context) {
	check := r.state.(DedupState).DeletedTxIDsDue
	for ctx.Err() == nil && r.due("dedup", check) {
		res, ok := r.propose(ctx, &fsm.ForgetDeletedTxIDs{Max: r.cfg.RetentionBatch})
		if !ok {
			return
		}
		r.m.sweeps.WithLabelValues("dedup").Inc()
		if !res.(*fsm.ForgetDeletedTxIDsResult).More {
			return
		}
	}
}

// sweepOJS finishes OJS deletions and drains whose time has come and
// prunes dead letters by max_age then max_count, in bounded steps.
func (r *Runner) sweepOJS(ctx context.Context) {
	queues, err := r.state.(OJSState).OJSSweepTargets()
	if err != nil {
		r.log.Error("list OJS sweep targets", "error", err)
		return
	}
	ds, _ := r.state.(DueState)
	for _, q := range queues {
		var check func(int64) (bool, error)
		if ds != nil {
			check = func(now int64) (bool, error) { return ds.OJSSweepDue(q, now) }
		}
		for ctx.Err() == nil {
			if !r.due("ojs", check) {
				break
			}
			res, ok := r.propose(ctx, &fsm.OJSSweep{Queue: q, MaxDLQ: r.cfg.RetentionBatch})
			if !ok {
				return
			}
			sr := res.(*fsm.OJSSweepResult)
			r.m.sweeps.WithLabelValues("ojs").Inc()
			if sr.Finished {
				r.log.Info("queue deletion finished", "queue", q)
			}
			if sr.Pruned > 0 {
				r.log.Info("dead letters pruned", "queue", q, "count", sr.Pruned)
			}
			if !sr.More {
				break
			}
		}
	}
}

type metrics struct {
	active   prometheus.Gauge
	sweeps   *prometheus.CounterVec
	segments *prometheus.CounterVec
	messages *prometheus.CounterVec
	leases   prometheus.Counter
	skipped  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "crown_maintenance_active",
			Help: "1 while this node runs the leader-only timers."}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "crown_sweep_commands_total",
			Help: "Sweep commands committed by this node as leader, by kind."}, []string{"kind"}),
		segments: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "crown_sweep_segments_deleted_total",
			Help: "Segments deleted by sweeps this node proposed, by rule."}, []string{"rule"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "crown_sweep_messages_deleted_total",
			Help: "Messages deleted by sweeps this node proposed, by rule."}, []string{"rule"}),
		leases: prometheus.NewCounter(prometheus.CounterOpts{Name: "crown_sweep_leases_cleared_total",
			Help: "Long-expired lease records cleared by sweeps this node proposed."}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "crown_sweep_skipped_total",
			Help: "Sweep checks this node ran as leader that found nothing to do, so proposed nothing, by kind."}, []string{"kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.active, m.sweeps, m.segments, m.messages, m.leases, m.skipped)
	}
	return m
}
