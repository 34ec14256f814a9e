package httpapi

import (
	"math"
	"net/http"
	"time"

	"github.com/crownmq/crown/fsm"
)

// Status and analytics (queen-api.md 3.14). Queen aggregated per-minute
// worker metrics; Crown derives its series from the times the state holds
// (segment commit times, dead-letter failure times). Figures without such a
// source (processed and popped per bucket, lag per bucket, failed acks per
// bucket, workers) are 0 or empty, never estimated.

// bucketMinutes is the status series' bucket size for a range.
func bucketMinutes(span time.Duration) int64 {
	switch {
	case span <= time.Hour:
		return 1
	case span <= 6*time.Hour:
		return 5
	case span <= 24*time.Hour:
		return 15
	case span <= 7*24*time.Hour:
		return 60
	}
	return 360
}

func buckets(from, to time.Time, size time.Duration) (fsm.Buckets, *apiError) {
	b, ok := fsm.NewBuckets(from.UnixMicro(), to.UnixMicro(), size.Microseconds())
	if !ok {
		return b, badRequest(codeLimit, "from", "the range from %s to %s holds more than %d buckets of %s",
			from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), fsm.MaxBuckets, size)
	}
	return b, nil
}

func perRequest(msgs, reqs uint64) float64 {
	if reqs == 0 {
		return 0
	}
	return round2(float64(msgs) / float64(reqs))
}

// GET /api/v1/status
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	q, aerr := queryFilters(r, "queue", "namespace", "task", "from", "to")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	now := time.Now()
	from, to, aerr := queryRange(q, now, time.Hour)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	minutes := bucketMinutes(to.Sub(from))
	b, aerr := buckets(from, to, time.Duration(minutes)*time.Minute)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	st, err := s.state.Status(fsm.Scope{Queue: q.Get("queue"), Namespace: q.Get("namespace"), Task: q.Get("task")},
		b, now.UnixMicro())
	if err != nil {
		internalError(w, err)
		return
	}
	seconds := float64(minutes * 60)
	points := make([]map[string]any, len(st.Points))
	for i, p := range st.Points {
		points[i] = map[string]any{
			"timestamp": formatMillis(p.Start), "ingested": p.Ingested, "processed": 0, "popMessages": 0,
			"ingestedPerSecond": round2(float64(p.Ingested) / seconds), "processedPerSecond": 0, "popPerSecond": 0,
			"avgLagMs": 0, "maxLagMs": 0, "ackFailed": 0, "dlqCount": p.DLQ,
		}
	}
	queues := make([]map[string]any, len(st.Queues))
	for i, sq := range st.Queues {
		queues[i] = map[string]any{"id": formatUUID(sq.Queue.UUID), "name": sq.Queue.Name, "namespace": sq.Queue.Namespace,
			"task": sq.Queue.Task, "partitions": sq.Partitions, "totalConsumed": sq.TotalConsumed}
	}
	topErrors := make([]map[string]any, len(st.DLQ.TopErrors))
	for i, e := range st.DLQ.TopErrors {
		topErrors[i] = map[string]any{"error": e.Error, "count": e.Count}
	}
	c, m := st.Counters, st.Stats
	writeJSON(w, http.StatusOK, map[string]any{
		"timeRange":     map[string]any{"from": formatMillis(from.UnixMicro()), "to": formatMillis(to.UnixMicro())},
		"bucketMinutes": minutes,
		"pointCount":    len(points),
		"throughput":    points,
		"queues":        queues,
		"messages": map[string]any{"total": m.Total, "pending": m.Pending, "processing": m.Processing,
			"completed": m.Completed, "failed": c.AckFailed, "deadLetter": m.DeadLetter,
			"requests": map[string]any{"push": c.PushRequests, "pop": c.PopRequests, "ack": c.AckRequests},
			"batchEfficiency": map[string]any{"push": perRequest(c.PushMessages, c.PushRequests),
				"pop": perRequest(c.PopMessages, c.PopRequests), "ack": perRequest(c.AckMessages, c.AckRequests)}},
		"leases": map[string]any{"active": st.Leases.Active, "partitionsWithLeases": st.Leases.PartitionsWithLeases,
			"totalBatchSize": st.Leases.TotalBatchSize, "totalAcked": st.Leases.TotalAcked},
		"deadLetterQueue": map[string]any{"totalMessages": st.DLQ.Total, "affectedPartitions": st.DLQ.AffectedPartitions,
			"topErrors": topErrors},
		"workers":  []any{},
		"errors":   map[string]any{"dbErrors": 0, "ackFailed": c.AckFailed, "dlqMessages": st.DLQ.Total},
		"statsAge": 0,
	})
}

// GET /api/v1/status/queues
func (s *Server) handleStatusQueues(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	q, aerr := queryFilters(r, "namespace", "task")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	// No offset bound: one past the last queue is an empty page, as in
	// GET /api/v1/resources/queues (queen-api.md 1.2: integers never fail).
	limit, offset, aerr := queryPage(q, 100, fsm.MaxStatusQueues, math.MaxInt)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	views, err := s.state.StatusQueues(q.Get("namespace"), q.Get("task"), limit, offset, nowMicros())
	if err != nil {
		internalError(w, err)
		return
	}
	out := make([]map[string]any, len(views))
	for i, v := range views {
		out[i] = map[string]any{
			"id": formatUUID(v.Queue.UUID), "name": v.Queue.Name, "namespace": v.Queue.Namespace, "task": v.Queue.Task,
			"createdAt": formatMillis(v.Queue.CreatedAt), "partitions": v.PartitionCount,
			"messages": map[string]any{"total": v.Stats.Total, "pending": v.Stats.Pending, "processing": v.Stats.Processing},
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out, "pagination": map[string]any{"limit": limit, "offset": offset}})
}

// GET /api/v1/status/queues/{queue}
func (s *Server) handleStatusQueue(w http.ResponseWriter, r *http.Request) {
	v, ok := s.queueDetail(w, r)
	if !ok {
		return
	}
	parts := make([]map[string]any, len(v.Partitions))
	for i, p := range v.Partitions {
		parts[i] = map[string]any{
			"id": formatUUID(p.ID), "name": p.Name, "createdAt": formatMillis(p.CreatedAt),
			"messages": statsJSON(p.Stats), "stats": statsJSON(p.Stats),
			"cursor":        map[string]any{"totalConsumed": p.Consumed, "batchesConsumed": p.Batches},
			"lastActivity":  optMillis(max(p.Newest, p.LastConsumed)),
			"oldestMessage": optMillis(p.Oldest), "newestMessage": optMillis(p.Newest),
		}
	}
	totals := statsJSON(v.Stats)
	totals["messages"] = statsJSON(v.Stats)
	o, qi := v.Queue.Options, v.Queue
	writeJSON(w, http.StatusOK, map[string]any{
		"queue": map[string]any{
			"id": formatUUID(qi.UUID), "name": qi.Name, "namespace": qi.Namespace, "task": qi.Task,
			"priority": o.Priority, "createdAt": formatMillis(qi.CreatedAt),
			"config": map[string]any{"leaseTime": fsm.QueueLeaseSeconds(o.LeaseTime), "retryLimit": o.RetryLimit, "retryDelay": o.RetryDelay,
				"ttl": o.TTL, "maxQueueSize": o.MaxSize, "deadLetterQueue": o.DeadLetterQueue},
		},
		"partitions": parts,
		"totals":     totals,
	})
}

// GET /api/v1/status/queues/{queue}/messages
func (s *Server) handleStatusQueueMessages(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	name := pathVar(r, "queue")
	limit, offset, aerr := queryPage(r.URL.Query(), 50, fsm.MaxBrowseLimit, fsm.MaxBrowseOffset)
	if aerr == nil {
		aerr = checkName("queue", name)
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	msgs, ok, err := s.state.QueueMessages(name, limit, offset, nowMicros())
	if err != nil {
		internalError(w, err)
		return
	}
	if !ok {
		writeError(w, &apiError{Status: 404, Code: codeNotFound, Message: "Queue not found"})
		return
	}
	out := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		out[i] = map[string]any{"id": formatUUID(m.ID), "transactionId": m.TxID, "partitionId": formatUUID(m.PartUUID),
			"queuePath": m.Queue + "/" + m.Partition, "queue": m.Queue, "partition": m.Partition,
			"status": m.Status, "createdAt": formatMillis(m.CreatedAt)}
	}
	writeJSON(w, http.StatusOK, out)
}

var analyticsIntervals = map[string]time.Duration{"minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}

// GET /api/v1/status/analytics
func (s *Server) handleStatusAnalytics(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	q, aerr := queryFilters(r, "queue", "namespace", "task", "from", "to", "interval")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	interval := q.Get("interval")
	if interval == "" {
		interval = "hour"
	}
	size, ok := analyticsIntervals[interval]
	if !ok {
		writeError(w, badRequest(codeInvalidField, "interval", "interval must be minute, hour or day, got %q", interval))
		return
	}
	from, to, aerr := queryRange(q, time.Now(), 24*time.Hour)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	b, aerr := buckets(from, to, size)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	counts, err := s.state.CreatedPerBucket(fsm.Scope{Queue: q.Get("queue"), Namespace: q.Get("namespace"), Task: q.Get("task")}, b)
	if err != nil {
		internalError(w, err)
		return
	}
	points := make([]map[string]any, len(counts))
	for i, n := range counts {
		points[i] = map[string]any{"timestamp": formatMillis(b.Start + int64(i)*b.Size), "messages": n}
	}
	writeJSON(w, http.StatusOK, map[string]any{"dataPoints": points, "interval": interval,
		"from": formatMillis(from.UnixMicro()), "to": formatMillis(to.UnixMicro())})
}

// GET /api/v1/status/buffers: pending is what push maintenance holds in its
// buffer (system.go); nothing fails in it (a push that does not fit is
// refused whole). dbHealthy reports whether the local state can be read.
func (s *Server) handleStatusBuffers(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	sw, err := s.state.SystemSwitches()
	writeJSON(w, http.StatusOK, map[string]any{"pending": sw.Buffer.Messages, "failed": 0, "dbHealthy": err == nil, "worker": 0})
}

// The dashboard series of queen-api.md 3.14. Crown keeps none of them, so
// each answers an empty series (section 6, point 19).
var analyticsSeries = map[string]bool{"system-metrics": true, "worker-metrics": true, "queue-lag": true,
	"queue-ops": true, "queue-parked-replicas": true, "retention": true, "postgres-stats": true}

// GET /api/v1/analytics/{series}
func (s *Server) handleAnalyticsSeries(w http.ResponseWriter, r *http.Request) {
	if !analyticsSeries[pathVar(r, "series")] {
		writeError(w, &apiError{Status: 404, Code: codeNotFound, Message: "Not Found"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"series": []any{}})
}
