package httpapi

import (
	"net/http"
	"net/url"
	"time"

	"github.com/crownmq/crown/fsm"
)

// Message browsing and deletion (queen-api.md 3.12).

// queryPage reads limit (clamped to maxLimit: a shorter page is still a
// correct one) and offset (refused past maxOffset: clamping would answer
// another page than the one asked for). A missing, empty, unparsable or
// negative value is the default, as for every integer parameter
// (queen-api.md 1.2).
func queryPage(q url.Values, defLimit, maxLimit, maxOffset int) (limit, offset int, aerr *apiError) {
	limit, offset = int(queryInt(q, "limit", int64(defLimit))), int(queryInt(q, "offset", 0))
	if limit < 0 {
		limit = defLimit
	}
	if offset < 0 {
		offset = 0
	}
	if offset > maxOffset {
		return 0, 0, badRequest(codeLimit, "offset", "offset must be at most %d, got %d", maxOffset, offset)
	}
	return min(limit, maxLimit), offset, nil
}

// queryTime reads an RFC 3339 time or a date; ok is false when absent.
func queryTime(q url.Values, name string) (t time.Time, ok bool, aerr *apiError) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, false, nil
	}
	t, ok = parseTime(v)
	if !ok {
		return time.Time{}, false, badRequest(codeInvalidField, name, "%s must be an RFC 3339 time or a date (YYYY-MM-DD), got %q", name, v)
	}
	return t, true, nil
}

// rangeBounds reads from and to, defaulting to [now - span, now]
// (queen-api.md 3.12, 3.14: the default start is measured from now, whatever
// to says); sentFrom and sentTo say which the client sent.
func rangeBounds(q url.Values, now time.Time, span time.Duration) (from, to time.Time, sentFrom, sentTo bool, aerr *apiError) {
	if to, sentTo, aerr = queryTime(q, "to"); aerr != nil {
		return
	}
	if !sentTo {
		to = now
	}
	if from, sentFrom, aerr = queryTime(q, "from"); aerr != nil {
		return
	}
	if !sentFrom {
		from = now.Add(-span)
	}
	return
}

// queryRange reads the status endpoints' from and to (rangeBounds). Only a
// from after the client's own to is refused; a bound after a defaulted one
// (a from in the future, a to before the hour's default from) is a
// zero-length range at the sent bound, as the message listing's is empty.
func queryRange(q url.Values, now time.Time, span time.Duration) (from, to time.Time, aerr *apiError) {
	from, to, sentFrom, sentTo, aerr := rangeBounds(q, now, span)
	switch {
	case aerr != nil || !from.After(to):
		return from, to, aerr
	case sentFrom && sentTo:
		return from, to, badRequest(codeInvalidField, "from", "from (%s) is after to (%s)",
			from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	case sentFrom:
		return from, from, nil
	default:
		return to, to, nil
	}
}

// messageRange reads the message listing's from and to (rangeBounds, one
// hour) as the unix µs range [from, before) (queen-api.md 3.12): to
// includes the whole of its minute, so before is the start of the next one.
// Only a from the client sent at or after the end of its own to's minute is
// refused; a from inside that minute still leaves a range, and one after a
// defaulted bound leaves an empty range.
func messageRange(q url.Values, now time.Time) (from, before int64, aerr *apiError) {
	f, to, sentFrom, sentTo, aerr := rangeBounds(q, now, time.Hour)
	if aerr != nil {
		return 0, 0, aerr
	}
	end := to.Truncate(time.Minute).Add(time.Minute)
	if f.Before(end) {
		return f.UnixMicro(), end.UnixMicro(), nil
	}
	if sentFrom && sentTo {
		return 0, 0, badRequest(codeInvalidField, "from", "from (%s) is after to (%s, inclusive to the end of its minute)",
			f.UTC().Format(time.RFC3339Nano), to.UTC().Format(time.RFC3339Nano))
	}
	return f.UnixMicro(), f.UnixMicro(), nil
}

func optUUID(id [16]byte, ok bool) any {
	if !ok {
		return nil
	}
	return formatUUID(id)
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// GET /api/v1/messages
func (s *Server) handleListMessages(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	q, aerr := queryFilters(r, "queue", "partition", "ns", "task", "status", "from", "to")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	now := time.Now()
	query := fsm.MessageQuery{Queue: q.Get("queue"), Partition: q.Get("partition"), Namespace: q.Get("ns"),
		Task: q.Get("task"), Status: q.Get("status")}
	if query.Status != "" && !fsm.ValidStatus(query.Status) {
		writeError(w, badRequest(codeInvalidField, "status",
			"status must be one of pending, processing, completed, dead_letter, got %q", query.Status))
		return
	}
	query.From, query.Before, aerr = messageRange(q, now)
	if aerr == nil {
		query.Limit, query.Offset, aerr = queryPage(q, 200, fsm.MaxBrowseLimit, fsm.MaxBrowseOffset)
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	list, err := s.state.ListMessages(query, now.UnixMicro())
	if err != nil {
		internalError(w, err)
		return
	}
	msgs := make([]map[string]any, len(list.Messages))
	for i := range list.Messages {
		m := &list.Messages[i]
		msgs[i] = map[string]any{
			"id": formatUUID(m.ID), "transactionId": m.TxID, "partitionId": formatUUID(m.PartUUID),
			"queuePath": m.Queue + "/" + m.Partition, "queue": m.Queue, "partition": m.Partition,
			"namespace": m.Namespace, "task": m.Task, "status": m.Status, "queueStatus": m.QueueStatus,
			"busStatus": map[string]any{"consumedBy": m.ConsumedBy, "totalGroups": m.TotalGroups},
			"traceId":   optUUID(m.TraceID, m.HasTrace), "producerSub": nullString(m.ProducerSub),
			"queuePriority": m.Priority, "createdAt": formatMillis(m.CreatedAt), "leaseExpiresAt": optMillis(m.LeaseExpiresAt),
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"messages": msgs,
		"mode": map[string]any{"hasQueueMode": list.Mode.HasQueueMode, "busGroupsCount": list.Mode.BusGroups,
			"type": list.Mode.Type()},
	})
}

// GET /api/v1/messages/{partitionId}/{transactionId}
func (s *Server) handleGetMessage(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	pid, ok := parseUUID(pathVar(r, "partitionId"))
	if !ok {
		writeError(w, badRequest(codeInvalidField, "partitionId", "partitionId must be a UUID, got %q", pathVar(r, "partitionId")))
		return
	}
	txID := pathVar(r, "transactionId")
	if aerr := checkName("transactionId", txID); aerr != nil {
		writeError(w, aerr)
		return
	}
	d, err := s.state.Message(pid, txID, nowMicros())
	if err != nil {
		internalError(w, err)
		return
	}
	if d == nil {
		writeError(w, &apiError{Status: 404, Code: codeNotFound, Message: "Message not found"})
		return
	}
	payload, aerr := s.open(d.Payload, d.Encrypted)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var body any = payload
	if len(payload) == 0 {
		body = nil
	}
	var errMsg, retries any
	if d.HasDeadLetter {
		errMsg, retries = d.Error, d.RetryCount
	}
	groups := make([]map[string]any, len(d.Groups))
	for i, g := range d.Groups {
		groups[i] = map[string]any{"name": g.Name, "consumed": g.Consumed, "leaseExpiresAt": optMillis(g.LeaseExpiresAt)}
	}
	o := d.Options
	writeJSON(w, http.StatusOK, map[string]any{
		"id": formatUUID(d.ID), "transactionId": d.TxID, "partitionId": formatUUID(d.PartUUID),
		"queuePath": d.Queue + "/" + d.Partition, "queue": d.Queue, "partition": d.Partition,
		"namespace": d.Namespace, "task": d.Task, "status": d.Status, "payload": body,
		"isEncrypted": d.Encrypted, "traceId": optUUID(d.TraceID, d.HasTrace), "producerSub": nullString(d.ProducerSub),
		"createdAt": formatMillis(d.CreatedAt), "errorMessage": errMsg, "retryCount": retries,
		"leaseExpiresAt": optMillis(d.LeaseExpiresAt),
		"queueConfig": map[string]any{"leaseTime": fsm.QueueLeaseSeconds(o.LeaseTime), "retryLimit": o.RetryLimit, "retryDelay": o.RetryDelay,
			"ttl": o.TTL, "priority": o.Priority},
		"mode": map[string]any{"hasQueueMode": d.Mode.HasQueueMode, "busGroupsCount": d.Mode.BusGroups,
			"consumedByGroups": d.Mode.ConsumedBy, "type": d.Mode.Type()},
		"consumerGroups": groups,
	})
}

// DELETE /api/v1/messages/{partitionId}/{transactionId}: 200 whether or not
// the message existed (queen-api.md 3.12), success telling which.
func (s *Server) handleDeleteMessage(w http.ResponseWriter, r *http.Request) {
	if s.forwardEarly(w, r, nil) {
		return
	}
	pid, ok := parseUUID(pathVar(r, "partitionId"))
	if !ok {
		writeError(w, badRequest(codeInvalidField, "partitionId", "partitionId must be a UUID, got %q", pathVar(r, "partitionId")))
		return
	}
	c := &fsm.DeleteMessage{Partition: pid, TxID: pathVar(r, "transactionId")}
	if aerr := checkPathNames("transactionId", c.TxID); aerr != nil {
		writeError(w, aerr)
		return
	}
	res, ok := s.commit(w, r, nil, c)
	if !ok {
		return
	}
	body := map[string]any{"success": true, "partitionId": formatUUID(pid), "transactionId": c.TxID,
		"message": "Message deleted successfully"}
	if !res.(*fsm.DeleteMessageResult).Found {
		body["success"], body["message"] = false, "Message not found"
	}
	writeJSON(w, http.StatusOK, body)
}
