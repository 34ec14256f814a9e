package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi/bufpool"
	"github.com/crownmq/crown/httpapi/envelope"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// ---- configure ----

func (s *Server) handleConfigure(w http.ResponseWriter, r *http.Request) {
	body, c, ok := receive(s, w, r, parseConfigure)
	if !ok {
		return
	}
	if c.Options.EncryptionEnabled && !s.cfg.Key.Enabled() {
		writeError(w, badRequest(codeEncryption, "encryptionEnabled",
			"encryptionEnabled requires QUEEN_ENCRYPTION_KEY (64 hex characters) on every node; refusing to store plaintext in a queue marked encrypted"))
		return
	}
	if c.Options.EncryptionEnabled {
		// No push sealed on this node may read the queue's encryption
		// between this configure's queueing and its apply (seal_gate.go).
		s.seals.mu.Lock()
		defer s.seals.mu.Unlock()
	}
	res, ok := s.commit(w, r, body, &fsm.ConfigureSet{Configure: *c, Present: configurePresence(body)})
	if !ok {
		return
	}
	q := res.(*fsm.ConfigureResult).Queue
	writeJSON(w, http.StatusOK, map[string]any{
		"configured": true, "queueId": formatUUID(q.UUID), "partitionId": nil,
		"queue": q.Name, "namespace": q.Namespace, "task": q.Task, "options": optionsJSON(q.Options, true),
	})
}

// optionsJSON echoes resolved options; legacy adds the four legacy keys.
func optionsJSON(o fsm.Options, legacy bool) map[string]any {
	m := map[string]any{
		"leaseTime": o.LeaseTime, "retryLimit": o.RetryLimit,
		"deadLetterQueue": o.DeadLetterQueue, "dlqAfterMaxRetries": o.DLQAfterMaxRetries,
		"delayedProcessing": o.DelayedProcessing, "windowBuffer": o.WindowBuffer,
		"retentionEnabled": o.RetentionEnabled, "retentionSeconds": o.RetentionSeconds,
		"completedRetentionSeconds": o.CompletedRetentionSeconds, "maxWaitTimeSeconds": o.MaxWaitTimeSeconds,
		"minPopWaitTime": o.MinPopWaitTime, "encryptionEnabled": o.EncryptionEnabled,
		"dedupWindowSeconds": o.DedupWindowSeconds,
	}
	if legacy {
		m["priority"], m["maxSize"], m["retryDelay"], m["ttl"] = o.Priority, o.MaxSize, o.RetryDelay, o.TTL
	}
	return m
}

// ---- push ----

func (s *Server) handlePush(w http.ResponseWriter, r *http.Request) {
	body, release, aerr := readBodyPooled(r, s.cfg.Limits.MaxBodyBytes)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	defer release()
	if s.forwardEarly(w, r, body) {
		return
	}
	items, aerr := parsePush(body, s.cfg.Limits)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if len(items) == 0 {
		writeRawJSON(w, http.StatusCreated, []byte("[]"))
		return
	}
	var cmd fsm.Command = &fsm.Push{Items: items}
	if p := principalOf(r); p != "" {
		cmd = &fsm.PushAs{Principal: p, Items: items}
	}
	res, ok := s.commitPrepared(w, r, body, cmd, s.sealer(items), writeError)
	if !ok {
		return
	}
	pr := res.(*fsm.PushResult)
	if pr.Refused != nil {
		writeRefusal(w, r, pr.Refused)
		return
	}
	if writeBufferedPush(w, items, pr) { // push maintenance (system.go)
		return
	}
	if p := pr.Pressure; p != nil {
		// A bounded queue at 80 % or more of a bound (ojs-queues.md 7.1).
		h := w.Header()
		h.Set("X-OJS-Queue-Pressure", strconv.FormatFloat(p.Ratio(), 'f', 2, 64))
		h.Set("X-OJS-Queue-Depth", strconv.FormatInt(p.Depth, 10))
		h.Set("X-OJS-Queue-Bound", strconv.FormatInt(p.Bound, 10))
	}
	buf := bufpool.Get()
	*buf = appendPushResults(*buf, items, pr.Items)
	writeRawJSON(w, http.StatusCreated, *buf)
	bufpool.Put(buf)
}

// sealer returns the prepare step of a push or transaction (see
// commitPrepared): it seals the payloads bound for encrypted queues, in
// place, once. Sealing on the node that proposes, with the queue
// configuration it holds then, keeps plaintext out of the log whichever node
// parsed the request.
func (s *Server) sealer(pushes ...[]fsm.PushItem) func() *apiError {
	done := false
	return func() *apiError {
		if done {
			return nil
		}
		done = true // an error ends the request: nothing is sealed twice
		for _, items := range pushes {
			if aerr := s.seal(items); aerr != nil {
				return aerr
			}
		}
		return nil
	}
}

// seal encrypts the payloads of items bound for queues with
// encryptionEnabled. It runs on the leader just before proposing, so the
// plaintext never enters the log. Without a key such a push is refused:
// Crown never stores plaintext in a queue marked encrypted.
func (s *Server) seal(items []fsm.PushItem) *apiError {
	var names []string
	seen := map[string]bool{}
	for i := range items {
		if !seen[items[i].Queue] {
			seen[items[i].Queue] = true
			names = append(names, items[i].Queue)
		}
	}
	enc, err := s.state.QueueEncryption(names)
	if err != nil {
		return &apiError{Status: 500, Code: codeInternal, Message: err.Error()}
	}
	for i := range items {
		if !enc[items[i].Queue] {
			continue
		}
		sealed, err := s.cfg.Key.Seal(items[i].Payload)
		if err != nil {
			return badRequest(codeEncryption, "items", "queue %q has encryptionEnabled: %v", items[i].Queue, err)
		}
		items[i].Payload, items[i].Encrypted = sealed, true
	}
	return nil
}

// open returns a stored payload as JSON, decrypting an envelope.
func (s *Server) open(payload []byte, encrypted bool) (json.RawMessage, *apiError) {
	if !encrypted {
		return payload, nil
	}
	pt, err := s.cfg.Key.Open(payload)
	if err != nil {
		msg := err.Error()
		if err == envelope.ErrNoKey {
			msg = "message is encrypted and this node has no QUEEN_ENCRYPTION_KEY"
		}
		return nil, &apiError{Status: 500, Code: codeEncryption, Message: msg}
	}
	return pt, nil
}

// ---- acks ----

func errPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (s *Server) handleAck(w http.ResponseWriter, r *http.Request) {
	s.ack(w, r, func(b []byte) (*fsm.Ack, *apiError) { return parseAck(b) })
}

func (s *Server) handleAckBatch(w http.ResponseWriter, r *http.Request) {
	s.ack(w, r, func(b []byte) (*fsm.Ack, *apiError) { return parseAckBatch(b, s.cfg.Limits) })
}

func (s *Server) ack(w http.ResponseWriter, r *http.Request, parse func([]byte) (*fsm.Ack, *apiError)) {
	body, release, aerr := readBodyPooled(r, s.cfg.Limits.MaxBodyBytes)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	defer release()
	if s.forwardEarly(w, r, body) {
		return
	}
	c, aerr := parse(body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if len(c.Items) == 0 {
		writeRawJSON(w, http.StatusOK, []byte("[]"))
		return
	}
	// Written in the packed format (fsm.AckPacked): the items of a batch
	// share their partition and lease, which the log then holds once. The
	// items of a pop proposed here carry their messages' offsets, which
	// spares every node the index lookups (fsm.AckAt). Only the leader
	// stamps them: a follower relays the request as it came, and the
	// command built here is dropped.
	var cmd fsm.Command = &fsm.AckPacked{Ack: *c}
	if s.cluster.IsLeader() {
		if n := s.delivered.stamp(c.Items); n > 0 {
			s.metrics.ackOffsets.Add(float64(n))
			cmd = &fsm.AckAt{Ack: *c}
		}
	}
	res, ok := s.commit(w, r, body, cmd)
	if !ok {
		return
	}
	buf := bufpool.Get()
	*buf = appendAckResults(*buf, c.Items, res.(*fsm.AckResult).Items)
	writeRawJSON(w, http.StatusOK, *buf)
	bufpool.Put(buf)
}

// ---- transaction ----

func (s *Server) handleTransaction(w http.ResponseWriter, r *http.Request) {
	body, release, aerr := readBodyPooled(r, s.cfg.Limits.MaxBodyBytes)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	defer release()
	if s.forwardEarly(w, r, body) {
		return
	}
	c, aerr := parseTransaction(body, s.cfg.Limits)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var pushes [][]fsm.PushItem
	for i := range c.Ops {
		if c.Ops[i].Kind == fsm.OpPush {
			pushes = append(pushes, c.Ops[i].Items)
		}
	}
	if aerr := s.refusePushDuringMaintenance(len(pushes) > 0, fsm.ErrPushMaintenance); aerr != nil { // system.go
		writeError(w, aerr)
		return
	}
	var cmd fsm.Command = c
	if p := principalOf(r); p != "" {
		cmd = &fsm.TransactionAs{Transaction: *c, Principal: p}
	}
	res, ok := s.commitPrepared(w, r, body, cmd, s.sealer(pushes...), writeError)
	if !ok {
		return
	}
	tr := res.(*fsm.TransactionResult)
	if !tr.Success && tr.Error == fsm.ErrPushMaintenance {
		writeError(w, maintenanceRefusal(tr.Error)) // it raced the switch
		return
	}
	results := make([]map[string]any, len(tr.Results))
	for i, op := range tr.Results {
		m := map[string]any{"index": i, "success": op.Success, "transactionId": op.TxID}
		switch op.Kind {
		case fsm.OpPush:
			m["type"] = "push"
			// A duplicate names the partition holding the original, as a
			// queued push names its own (queen-api.md 4.15).
			m["messageId"] = formatUUID(op.MessageID)
			m["partitionId"] = formatUUID(op.PartitionID)
			m["queueName"] = op.Queue
			if op.Status == fsm.PushDuplicate {
				m["status"] = "duplicate"
			} else {
				m["status"] = "queued"
			}
		case fsm.OpAck:
			m["type"] = "ack"
			m["error"] = errPtr(op.Error)
			m["dlq"] = op.DLQ
		default:
			m["type"] = "invalid"
			m["error"] = errPtr(op.Error)
		}
		results[i] = m
	}
	out := map[string]any{"transactionId": newUUIDv7(), "success": tr.Success, "results": results}
	if !tr.Success {
		out["error"] = tr.Error
	}
	writeJSON(w, http.StatusOK, out)
}

// ---- lease extension ----

func (s *Server) handleExtend(w http.ResponseWriter, r *http.Request) {
	body, aerr := readBody(r, s.cfg.Limits.MaxBodyBytes)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if s.forwardEarly(w, r, body) {
		return
	}
	leaseID := pathVar(r, "leaseId")
	c, valid, aerr := parseExtend(body, leaseID)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	out := map[string]any{"index": 0, "leaseId": leaseID}
	if !valid {
		out["success"], out["error"], out["expiresAt"] = false, fsm.ErrLeaseNotFound, nil
		writeJSON(w, http.StatusOK, []any{out})
		return
	}
	res, ok := s.commit(w, r, body, c)
	if !ok {
		return
	}
	er := res.(*fsm.ExtendResult)
	out["success"], out["error"] = er.Success, errPtr(er.Error)
	if er.Success {
		out["expiresAt"] = formatMillis(er.ExpiresAt)
	} else {
		out["expiresAt"] = nil
	}
	writeJSON(w, http.StatusOK, []any{out})
}
