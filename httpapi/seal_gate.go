package httpapi

import (
	"context"
	"errors"
	"sync"

	"github.com/crownmq/crown/raftnode"
)

// sealGate keeps plaintext out of a queue whose encryption a configure
// turned on: every push the log holds after such a configure is sealed.
//
// A push is sealed on the leader just before it is proposed, according to
// the queues' encryption in the state the leader has applied (seal). Two
// windows let that state lag the log the push is appended to:
//
//   - a configure turning encryption on that this leader proposed is queued
//     or committed but not yet applied. Such a configure holds mu
//     exclusively from before it is queued until it is applied; a push holds
//     mu shared from before it reads the queues' encryption until its
//     command is queued (raftnode.WithEnqueued). So a push that read the
//     state before the configure is queued ahead of it in the log, and one
//     that comes after waits for the configure's apply and then seals;
//   - a configure an earlier leader appended that this one has not applied.
//     The first push this node seals in each of its terms as leader first
//     waits for a Raft barrier (caughtUp, catchUpTerm), after which every
//     entry from before the term is applied. A leader's pops wait for the
//     same barrier before their first look (pop.go).
//
// Configures that turn encryption on are rare; a push pays an uncontended
// read lock. Locks: mu and viewMu are never held together, and neither
// while waiting for the barrier; a configure holds mu while it commits, and
// a push holds it only until its command is queued, which waits for
// nothing the configure holds.
type sealGate struct {
	mu       sync.RWMutex
	viewMu   sync.Mutex
	caughtUp context.Context // the leader view (Cluster.LeaderView) in which a barrier completed
}

// errSealNotLeader reports that this node lost leadership while catching
// up: the push is to be relayed.
var errSealNotLeader = errors.New("not the leader")

// enterSeal is called by a push on the leader before it reads the queues'
// encryption. It returns release, idempotent, to call once the push's
// command is queued for the log or abandoned.
func (s *Server) enterSeal(ctx context.Context) (release func(), err error) {
	if err := s.catchUpTerm(ctx); err != nil {
		return nil, err
	}
	s.seals.mu.RLock()
	var once sync.Once
	return func() { once.Do(s.seals.mu.RUnlock) }, nil
}

// catchUpTerm returns once this node, as leader, has applied every entry
// from before its current term: the first caller of each term waits for a
// Raft barrier, later ones find it done. A new leader applies the entries
// an earlier leader committed (and answered) only once an entry of its own
// term commits; until then its state may lack them. errSealNotLeader: this
// node lost leadership meanwhile.
func (s *Server) catchUpTerm(ctx context.Context) error {
	view := s.cluster.LeaderView()
	s.seals.viewMu.Lock()
	caught := s.seals.caughtUp == view
	s.seals.viewMu.Unlock()
	if caught {
		return nil
	}
	if err := s.cluster.Barrier(ctx); err != nil {
		if errors.Is(err, raftnode.ErrNotLeader) {
			return errSealNotLeader
		}
		return err
	}
	s.seals.viewMu.Lock()
	s.seals.caughtUp = view
	s.seals.viewMu.Unlock()
	return nil
}
