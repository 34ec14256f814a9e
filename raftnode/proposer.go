package raftnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/crownmq/crown/fsm"
)

// ProposerConfig tunes group commit.
type ProposerConfig struct {
	// MaxCommands and MaxBytes bound one log entry (defaults 2048 and 8 MiB).
	MaxCommands int
	MaxBytes    int
	// MaxInflight bounds the entries handed to Raft and not yet applied
	// (default 1). While every slot is busy, new commands queue and go out
	// together in the next entry: batches grow with load, and an idle node
	// sends a lone command at once. Measured on 2 cores with 3 nodes, one
	// entry in flight and a 1 ms linger used 40 % less server CPU per
	// consumed message than two in flight without linger, and was faster:
	// every entry costs an fsync and a bbolt commit on each node.
	MaxInflight int
	// Linger holds an under-full batch back up to this long to let it fill
	// (default DefaultLinger), but only while the node is busy (the previous entry
	// carried more than one command), so a lone request on an idle node
	// never waits, and only until as many commands have arrived since the
	// previous entry was answered as that entry carried: its clients are
	// the ones expected back. Negative: never.
	Linger time.Duration
	// EnqueueTimeout bounds how long Raft may take to accept an entry (default 10 s).
	EnqueueTimeout time.Duration
}

// DefaultLinger bounds the linger. It must exceed the time a client takes
// from its answer to its next request reaching the leader, or the clients
// of consecutive entries never meet in one (with a follower's relay on a
// busy 2-core machine that took 1-3 ms); an entry whose clients are all
// back goes out without waiting the rest of it.
const DefaultLinger = 3 * time.Millisecond

func (c *ProposerConfig) defaults() {
	if c.MaxCommands <= 0 {
		c.MaxCommands = 2048
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 8 << 20
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 1
	}
	// Negative stays negative (never linger), so that applying the
	// defaults twice (Config.defaults, then newProposer) keeps it.
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.EnqueueTimeout <= 0 {
		c.EnqueueTimeout = 10 * time.Second
	}
}

// Proposer coalesces concurrent commands into few Raft entries.
type Proposer struct {
	cfg    ProposerConfig
	raft   *raft.Raft
	origin string
	log    *slog.Logger

	in    chan *proposal
	slots chan struct{}
	done  chan struct{}
	// exited is closed when run has returned: a proposal it never took is
	// then answered by nobody, and its caller must not wait.
	exited chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	// seq numbers proposals as they are queued; answered is the mark the
	// last answered entry left (see run).
	seq      atomic.Uint64
	answered atomic.Pointer[answerMark]
	stats    proposerStats
}

// answerMark is left by an entry as its slot is given back: the sequence
// number queued last by then, and how many commands the entry carried.
// Proposals numbered after it arrived after the answers went out, and
// about that many are expected: a client answered tends to come back.
type answerMark struct {
	seq   uint64
	count int
}

// proposerStats counts what group commit did on this node since it
// started (Node.Status reports them).
type proposerStats struct {
	// Entries and Commands count the log entries this node proposed and
	// the commands they carried: their ratio is the batch size.
	Entries, Commands atomic.Uint64
	// Lingered counts entries that waited out the linger (the node was
	// busy) rather than filling up first.
	Lingered atomic.Uint64
}

type proposal struct {
	framed []byte // the command encoded by fsm.FrameCommand
	seq    uint64 // from Proposer.seq, taken just before it is queued
	out    chan outcome
	taken  atomic.Bool // run has it: it will be answered
}

type outcome struct {
	result any
	index  uint64
	err    error
}

func newProposer(cfg ProposerConfig, r *raft.Raft, origin string, log *slog.Logger) *Proposer {
	cfg.defaults()
	p := &Proposer{cfg: cfg, raft: r, origin: origin, log: log.With("component", "proposer"),
		in: make(chan *proposal, 4096), slots: make(chan struct{}, cfg.MaxInflight), done: make(chan struct{}),
		exited: make(chan struct{})}
	p.wg.Add(1)
	go p.run()
	return p
}

// Propose queues cmd for the next entry and waits for its result. If ctx
// ends after the command was queued, the command may still commit.
func (p *Proposer) Propose(ctx context.Context, cmd fsm.Command) (any, uint64, error) {
	// Encoding here, on the caller's goroutine, spreads it over the
	// requests and leaves cmd (which may alias the request body) free as
	// soon as Propose returns.
	framed, err := fsm.FrameCommand(nil, cmd)
	if err != nil {
		return nil, 0, err
	}
	pr := &proposal{framed: framed, seq: p.seq.Add(1), out: make(chan outcome, 1)}
	select {
	case p.in <- pr:
		if fn, _ := ctx.Value(enqueuedKey{}).(func()); fn != nil {
			fn()
		}
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-p.done:
		return nil, 0, ErrShutdown
	}
	select {
	case o := <-pr.out:
		return o.result, o.index, o.err
	case <-p.exited:
		// The send above may have won its race with Close after run's
		// last drain: such a proposal was never appended.
		if !pr.taken.Load() {
			return nil, 0, ErrShutdown
		}
	case <-ctx.Done():
		return nil, 0, fmt.Errorf("%w: %v", ErrUnknownOutcome, ctx.Err())
	}
	select {
	case o := <-pr.out:
		return o.result, o.index, o.err
	case <-ctx.Done():
		return nil, 0, fmt.Errorf("%w: %v", ErrUnknownOutcome, ctx.Err())
	}
}

type enqueuedKey struct{}

// WithEnqueued returns ctx with fn attached: Propose calls fn (on the
// caller's goroutine, once) as soon as the command has its place in the
// proposer's queue, before waiting for it to commit. Commands enter the log
// in the order they were queued (run takes them in order, an entry keeps
// them in order, entries go to Raft in order), so a caller that lets
// another goroutine propose only after fn ran has ordered the two commands
// in the log without waiting for the first to commit. fn is not called when
// Propose fails before queueing (not the leader, ctx done, shut down).
// Propose waits for fn, so it should return quickly.
func WithEnqueued(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, enqueuedKey{}, fn)
}

// take marks pr as run's: from here on it is answered.
func take(pr *proposal) *proposal {
	pr.taken.Store(true)
	return pr
}

// Close stops accepting commands; commands already handed to Raft finish.
func (p *Proposer) Close() {
	p.once.Do(func() { close(p.done) })
	p.wg.Wait()
}

func (p *Proposer) run() {
	defer p.wg.Done()
	defer close(p.exited)
	// carry is a command the previous entry had no room for: it opens the
	// next one.
	var carry *proposal
	for {
		first := carry
		carry = nil
		if first == nil {
			select {
			case pr := <-p.in:
				first = take(pr)
			case <-p.done:
				p.drainWith(ErrShutdown)
				return
			}
		}
		// Wait for an in-flight slot; commands arriving meanwhile join this batch.
		select {
		case p.slots <- struct{}{}:
		case <-p.done:
			first.out <- outcome{err: ErrShutdown}
			p.drainWith(ErrShutdown)
			return
		}
		batch, size := []*proposal{first}, len(first.framed)
		var (
			linger <-chan time.Time
			timer  *time.Timer
			// back counts the commands that arrived after the last entry
			// was answered; the linger ends once expect have.
			back, expect int
			mark         uint64
		)
		if m := p.answered.Load(); p.cfg.Linger > 0 && m != nil && m.count > 1 {
			timer = time.NewTimer(p.cfg.Linger)
			linger = timer.C
			mark, expect = m.seq, m.count
			if first.seq > mark {
				back++
			}
		}
		// add takes pr into the batch unless it would carry the entry past
		// MaxBytes: then it opens the next entry (a command larger than
		// the bound goes out alone).
		add := func(pr *proposal) bool {
			take(pr)
			if size+len(pr.framed) > p.cfg.MaxBytes {
				carry = pr
				return false
			}
			batch, size = append(batch, pr), size+len(pr.framed)
			if pr.seq > mark {
				back++
			}
			return true
		}
	fill:
		for len(batch) < p.cfg.MaxCommands && size < p.cfg.MaxBytes {
			if linger != nil && back >= expect {
				// Everyone expected is back: take what is queued, no more.
				linger = nil
			}
			if linger == nil {
				select {
				case pr := <-p.in:
					if !add(pr) {
						break fill
					}
				default:
					break fill
				}
				continue
			}
			select {
			case pr := <-p.in:
				if !add(pr) {
					break fill
				}
			case <-linger:
				p.stats.Lingered.Add(1)
				break fill
			}
		}
		if timer != nil {
			timer.Stop()
		}
		p.stats.Entries.Add(1)
		p.stats.Commands.Add(uint64(len(batch)))
		p.submit(batch)
	}
}

func (p *Proposer) drainWith(err error) {
	for {
		select {
		case pr := <-p.in:
			take(pr).out <- outcome{err: err}
		default:
			return
		}
	}
}

// submit encodes one entry, stamped with this leader's clock, and hands it
// to Raft; a goroutine delivers each command's result when it is applied.
func (p *Proposer) submit(batch []*proposal) {
	framed := make([][]byte, len(batch))
	for i, pr := range batch {
		framed[i] = pr.framed
	}
	data := fsm.AppendFramedEntry(nil, time.Now().UnixMicro(), p.origin, framed)
	fut := p.raft.Apply(data, p.cfg.EnqueueTimeout)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		err := fut.Error()
		// The mark goes before the slot, so that run, which takes the
		// slot next, sees it.
		p.answered.Store(&answerMark{seq: p.seq.Load(), count: len(batch)})
		<-p.slots
		if err != nil {
			err = mapApplyError(err)
			for _, pr := range batch {
				pr.out <- outcome{err: err}
			}
			return
		}
		switch r := fut.Response().(type) {
		case *fsm.EntryResult:
			for i, pr := range batch {
				pr.out <- outcome{result: r.Results[i], index: r.Index}
				// Raft keeps the future, and with it this response, alive
				// for as long as its log cache holds the entry (the cache
				// points into the future): a pop's result holds copies of
				// the messages it delivered. The caller has its result now.
				r.Results[i] = nil
			}
		case *fsm.ErrorResult:
			for _, pr := range batch {
				pr.out <- outcome{err: errors.New(r.Err), index: fut.Index()}
			}
		default:
			err := fmt.Errorf("unexpected apply response %T", r)
			for _, pr := range batch {
				pr.out <- outcome{err: err, index: fut.Index()}
			}
		}
	}()
}

func mapApplyError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Not appended to the log: safe to retry elsewhere (during a
		// transfer, on the leader that comes out of it).
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return ErrUnknownOutcome
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %v", ErrShutdown, err)
	}
	return err
}
