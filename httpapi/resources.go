package httpapi

import (
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/crownmq/crown/fsm"
)

func statsJSON(s fsm.MessageStats) map[string]any {
	return map[string]any{"total": s.Total, "pending": s.Pending, "processing": s.Processing,
		"completed": s.Completed, "failed": 0, "deadLetter": s.DeadLetter}
}

func nowMicros() int64 { return time.Now().UnixMicro() }

// queryFilters returns the request's query, refusing with a 400 naming it a
// filter among names whose pair net/url cannot decode (a bad %XX escape, a
// ';'): url.Values drops such a pair silently, and a dropped filter would
// widen the answer to everything it was meant to exclude. A name filter among
// them (a queue, partition, group or tag) is also refused when no name can
// be it (over 255 bytes, or not UTF-8: README Limits, queen-api.md 1.2),
// rather than read as a name that matches nothing. Other parameters keep the
// leniency of queen-api.md 1.2 (an unusable integer is its default).
func queryFilters(r *http.Request, names ...string) (url.Values, *apiError) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err == nil {
		return q, checkQueryNames(q, names)
	}
	for _, pair := range strings.Split(r.URL.RawQuery, "&") {
		rawKey, rawVal, _ := strings.Cut(pair, "=")
		key, kerr := url.QueryUnescape(rawKey)
		if kerr != nil {
			key = rawKey
		}
		if _, verr := url.QueryUnescape(rawVal); kerr == nil && verr == nil && !strings.Contains(pair, ";") {
			continue
		}
		for _, n := range names {
			if key == n {
				return nil, badRequest(codeInvalidField, n, "%s is not a valid URL-encoded query value: %q", n, rawVal)
			}
		}
	}
	return q, checkQueryNames(q, names)
}

// checkQueryNames checks the filters among names that hold a name.
func checkQueryNames(q url.Values, names []string) *apiError {
	for _, n := range names {
		switch n {
		case "queue", "partition", "consumerGroup", "namespace", "ns", "task":
			if aerr := checkName(n, q.Get(n)); aerr != nil {
				return aerr
			}
		}
	}
	return nil
}

// GET /api/v1/resources/queues
func (s *Server) handleListQueues(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	q, aerr := queryFilters(r, "namespace", "task")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	// A negative or absent limit lists every queue from the offset on.
	offset := int(max(queryInt(q, "offset", 0), 0))
	limit := int(queryInt(q, "limit", -1))
	views, err := s.state.ListQueues(q.Get("namespace"), q.Get("task"), offset, limit, nowMicros())
	if err != nil {
		writeError(w, &apiError{Status: 500, Code: codeInternal, Message: err.Error()})
		return
	}
	out := make([]map[string]any, len(views))
	for i, v := range views {
		out[i] = map[string]any{
			"id": formatUUID(v.Queue.UUID), "name": v.Queue.Name, "namespace": v.Queue.Namespace,
			"task": v.Queue.Task, "createdAt": formatMillis(v.Queue.CreatedAt), "partitions": v.PartitionCount,
			"messages": map[string]any{"total": v.Stats.Total, "pending": v.Stats.Pending, "processing": v.Stats.Processing},
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out})
}

// queueDetail reads the {queue} of the path with its partitions, behind the
// read barrier; ok is false when it has answered (404 for an unknown queue).
func (s *Server) queueDetail(w http.ResponseWriter, r *http.Request) (*fsm.QueueView, bool) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return nil, false
	}
	name := pathVar(r, "queue")
	if aerr := checkName("queue", name); aerr != nil {
		writeError(w, aerr)
		return nil, false
	}
	v, err := s.state.QueueView(name, nowMicros(), true)
	if err != nil {
		internalError(w, err)
		return nil, false
	}
	if v == nil {
		writeError(w, &apiError{Status: 404, Code: codeNotFound, Message: "Queue not found"})
		return nil, false
	}
	return v, true
}

// GET /api/v1/resources/queues/{queue}
func (s *Server) handleGetQueue(w http.ResponseWriter, r *http.Request) {
	v, ok := s.queueDetail(w, r)
	if !ok {
		return
	}
	parts := make([]map[string]any, len(v.Partitions))
	for i, p := range v.Partitions {
		parts[i] = map[string]any{
			"id": formatUUID(p.ID), "name": p.Name, "createdAt": formatMillis(p.CreatedAt),
			"stats": statsJSON(p.Stats), "oldestMessage": optMillis(p.Oldest), "newestMessage": optMillis(p.Newest),
		}
	}
	// The detail shows what pops use (queen-api.md 3.11); configure echoes
	// what it was sent.
	cfg := optionsJSON(v.Queue.Options, false)
	cfg["leaseTime"] = fsm.QueueLeaseSeconds(v.Queue.Options.LeaseTime)
	writeJSON(w, http.StatusOK, map[string]any{
		"id": formatUUID(v.Queue.UUID), "name": v.Queue.Name, "namespace": v.Queue.Namespace, "task": v.Queue.Task,
		"createdAt": formatMillis(v.Queue.CreatedAt), "config": cfg,
		"partitions": parts, "totals": statsJSON(v.Stats),
	})
}

// DELETE /api/v1/resources/queues/{queue}
func (s *Server) handleDeleteQueue(w http.ResponseWriter, r *http.Request) {
	name := pathVar(r, "queue")
	if aerr := checkPathNames("queue", name); aerr != nil {
		writeError(w, aerr) // queen-api.md 1.2: refused, nothing written
		return
	}
	if s.forwardEarly(w, r, nil) {
		return
	}
	c := &fsm.DeleteQueue{Queue: name}
	res, ok := s.commit(w, r, nil, c)
	if !ok {
		return
	}
	dr := res.(*fsm.DeleteQueueResult)
	if dr.Refused != nil {
		writeRefusal(w, r, dr.Refused)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": true, "queue": name, "existed": dr.Existed})
}

// GET /api/v1/dlq
func (s *Server) handleDLQ(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	q, aerr := queryFilters(r, "queue", "consumerGroup", "partition", "from", "to")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	query := fsm.DLQQuery{Queue: q.Get("queue"), Group: q.Get("consumerGroup"), Partition: q.Get("partition"),
		Limit: int(queryInt(q, "limit", 100)), Offset: int(max(queryInt(q, "offset", 0), 0))}
	if query.Limit < 0 {
		query.Limit = 100
	}
	// The state pages with offset+limit: a limit near the int range would
	// overflow that sum, and no page holds 2^31 entries anyway.
	query.Limit = min(query.Limit, math.MaxInt32)
	for _, b := range []struct {
		name string
		dst  *int64
	}{{"from", &query.From}, {"to", &query.To}} {
		t, ok, aerr := queryTime(q, b.name)
		if aerr != nil {
			writeError(w, aerr) // a filter the broker cannot honour (3.13 MUST) is refused
			return
		}
		if ok {
			*b.dst = t.UnixMicro()
			// The state reads 0 as "no bound"; a to at the epoch is a bound
			// every entry (all dead-lettered later) falls after.
			if b.name == "to" && *b.dst == 0 {
				*b.dst = -1
			}
		}
	}
	entries, total, err := s.state.DeadLetters(query)
	if err != nil {
		writeError(w, &apiError{Status: 500, Code: codeInternal, Message: err.Error()})
		return
	}
	msgs := make([]map[string]any, 0, len(entries))
	for _, d := range entries {
		data, aerr := s.open(d.Payload, d.Encrypted)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		id := formatUUID(d.MessageID)
		m := map[string]any{
			"id": id, "messageId": id, "transactionId": d.TxID, "partitionId": formatUUID(d.PartUUID),
			"queue": d.QueueName, "partition": d.PartitionName, "namespace": d.Namespace, "task": d.Task,
			"consumerGroup": d.Group, "errorMessage": d.Error, "retryCount": d.RetryCount,
			"data": json.RawMessage(data), "traceId": nil, "producerSub": nil,
			"createdAt": formatMillis(d.CreatedAt), "failedAt": formatMillis(d.FailedAt),
		}
		if d.HasTrace {
			m["traceId"] = formatUUID(d.TraceID)
		}
		if d.ProducerSub != "" {
			m["producerSub"] = d.ProducerSub
		}
		msgs = append(msgs, m)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"messages": msgs, "total": total, "limit": query.Limit, "offset": query.Offset,
		"pagination": map[string]any{"limit": query.Limit, "offset": query.Offset},
	})
}
