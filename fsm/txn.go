package fsm

// applyExtend pushes out every live lease with the id (all partitions of a
// multi-partition pop, whatever the group) to max(expiry, now + seconds).
func applyExtend(a *applier, c *Extend) any {
	pids, groups := a.tx.LeaseHolders(c.LeaseID)
	if len(pids) == 0 {
		return &ExtendResult{Error: ErrLeaseNotFound}
	}
	secs := c.Seconds
	if secs <= 0 {
		secs = 60
	}
	target := a.now + Micros(secs)
	res := &ExtendResult{}
	for i, pid := range pids {
		g := must1(a.tx.Group(pid, groups[i]))
		if g == nil || g.LeaseID != c.LeaseID || !g.LeaseLive(a.now) {
			continue
		}
		if target > g.LeaseExpiry {
			g.LeaseExpiry = target
			must(a.tx.PutGroup(pid, groups[i], g))
		}
		if !res.Success || g.LeaseExpiry < res.ExpiresAt {
			res.ExpiresAt = g.LeaseExpiry
		}
		res.Success = true
	}
	if !res.Success {
		res.Error = ErrLeaseExpired
	}
	return res
}

// applyTransaction runs pushes and acks in order, atomically: if any
// operation fails, a savepoint rolls back every write of the transaction and
// the result names the failure (queen-api.md 4.15).
func applyTransaction(a *applier, c *Transaction) any { return a.atomicTransaction(c, "") }

// applyTransactionAs is a transaction whose pushes are checked against the
// queues' access.producers for the principal.
func applyTransactionAs(a *applier, c *TransactionAs) any {
	return a.atomicTransaction(&c.Transaction, c.Principal)
}

func (a *applier) atomicTransaction(c *Transaction, principal string) *TransactionResult {
	if r := a.transactionDuringMaintenance(c); r != nil {
		return r // system_apply.go
	}
	var res *TransactionResult
	a.atomically(func() (bool, *Refusal) {
		res = a.transaction(c, principal)
		return res.Success, res.Refused
	})
	return res
}

// atomically runs fn under a savepoint: its writes stay when it reports
// success and are rolled back whole when it does not (the other commands of
// the batch are unaffected), and a refusal that made it fail is recorded
// after the rollback, so the overflow counters survive it.
func (a *applier) atomically(fn func() (ok bool, refused *Refusal)) {
	sp := a.tx.Savepoint()
	ok, ref := fn()
	if ok {
		a.tx.Release(sp)
		return
	}
	must(a.tx.RollbackTo(sp))
	if ref != nil {
		a.recordOverflow(ref)
	}
}

func (a *applier) transaction(c *Transaction, principal string) *TransactionResult {
	res := &TransactionResult{}
	sessions := make(map[string]*ackSession)
	var sessionOrder []*ackSession
	for _, op := range c.Ops {
		switch op.Kind {
		case OpPush:
			prs, _, ref := a.pushAs(op.Items, principal)
			if ref != nil {
				res.Refused = ref
				res.Error = RefusalText(ref)
				return res
			}
			// An earlier ack may hold a record of a partition this push
			// appended to; later acks must see the new messages.
			for _, s := range sessionOrder {
				s.reload()
			}
			for i, pr := range prs {
				res.Results = append(res.Results, TxOpResult{
					Kind: OpPush, Success: true, TxID: op.Items[i].TxID, Status: pr.Status,
					MessageID: pr.MessageID, PartitionID: pr.PartitionID, Queue: op.Items[i].Queue,
				})
			}
		case OpAck:
			s, ok := sessions[op.Group]
			if !ok {
				s = a.newAckSession(op.Group)
				sessions[op.Group] = s
				sessionOrder = append(sessionOrder, s)
			}
			r := TxOpResult{Kind: OpAck, TxID: op.Ack.TxID}
			t, ok := s.resolve(&op.Ack)
			var ar AckItemResult
			if ok {
				ar = s.apply(&op.Ack, t, true)
			} else {
				ar.Error = ErrUnresolvable
			}
			r.Success, r.Error, r.DLQ = ar.Success, ar.Error, ar.DLQ
			res.Results = append(res.Results, r)
			if !r.Success {
				res.Error = "ACK operation failed: " + r.Error
				return res
			}
		default:
			res.Results = append(res.Results, TxOpResult{Kind: OpInvalid, Error: op.Name})
			res.Error = op.Name
			return res
		}
	}
	for _, s := range sessionOrder {
		s.flush()
	}
	res.Success = true
	return res
}
