package httpapi

import (
	"math"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/crownmq/crown/fsm"
)

// Consumer-group administration (queen-api.md 3.15). Reads are views of the
// local state behind the read barrier; every change is a Raft command.

// defaultMinLagSeconds is the lagging listing's threshold when none is asked.
const defaultMinLagSeconds = 3600

// GET /api/v1/consumer-groups
func (s *Server) handleListGroups(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	rows, err := s.state.ConsumerGroups(nowMicros())
	if err != nil {
		internalError(w, err)
		return
	}
	out := make([]map[string]any, len(rows))
	for i, g := range rows {
		row := map[string]any{
			"name": g.Group, "topics": []string{g.Queue}, "queueName": g.Queue, "members": g.Members,
			"partitionsWithLag": g.PartitionsWithLag, "totalLag": nil, "maxTimeLag": g.MaxTimeLag,
			"state": g.State, "subscriptionMode": nil, "subscriptionTimestamp": nil, "subscriptionCreatedAt": nil,
		}
		if sub := g.Subscription; sub != nil {
			row["subscriptionMode"] = sub.Mode
			row["subscriptionTimestamp"] = formatMillis(sub.Start)
			row["subscriptionCreatedAt"] = formatMillis(sub.CreatedAt)
		}
		out[i] = row
	}
	writeJSON(w, http.StatusOK, out)
}

// GET /api/v1/consumer-groups/lagging
func (s *Server) handleLaggingGroups(w http.ResponseWriter, r *http.Request) {
	// A missing, unparsable or negative value is the default (queen-api.md 1.2).
	minLag := queryInt(r.URL.Query(), "minLagSeconds", defaultMinLagSeconds)
	if minLag < 0 {
		minLag = defaultMinLagSeconds
	}
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	rows, err := s.state.LaggingPartitions(minLag, nowMicros())
	if err != nil {
		internalError(w, err)
		return
	}
	out := make([]map[string]any, len(rows))
	for i, p := range rows {
		out[i] = map[string]any{
			"consumer_group": p.Group, "queue_name": p.Queue, "partition_name": p.Partition,
			"partition_id": formatUUID(p.PartitionID), "worker_id": nil, "offset_lag": p.OffsetLag,
			"time_lag_seconds": p.TimeLag, "lag_hours": math.Round(float64(p.TimeLag)/36) / 100,
			"oldest_unconsumed_at": formatMillis(p.OldestUnconsumed), "last_consumed_at": optMillis(p.LastConsumedAt),
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// GET /api/v1/consumer-groups/{group}
func (s *Server) handleGetGroup(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	group := pathVar(r, "group")
	if aerr := checkName("consumerGroup", group); aerr != nil {
		writeError(w, aerr)
		return
	}
	queues, err := s.state.ConsumerGroup(group, nowMicros())
	if err != nil {
		internalError(w, err)
		return
	}
	out := make(map[string]any, len(queues))
	for _, q := range queues {
		parts := make([]map[string]any, len(q.Partitions))
		for i, p := range q.Partitions {
			parts[i] = map[string]any{
				"partition": p.Partition, "workerId": nil, "lastConsumedAt": optMillis(p.LastConsumedAt),
				"totalConsumed": p.Consumed, "offsetLag": p.OffsetLag, "timeLagSeconds": p.TimeLag,
				"leaseActive": p.LeaseActive,
			}
		}
		out[q.Queue] = map[string]any{"partitions": parts}
	}
	writeJSON(w, http.StatusOK, out)
}

// queryBoolDefaultTrue reads a boolean query parameter whose default is
// true: absent or empty it is the default; otherwise, as every boolean
// parameter (queen-api.md 1.2), it is true only for "true" and "1". For
// deleteMetadata an unclear value therefore keeps the records; one that
// does not URL-decode is refused, since url.Values would drop it and so
// read it as absent, which is true.
func queryBoolDefaultTrue(r *http.Request, name string) (bool, *apiError) {
	q, aerr := queryFilters(r, name)
	if aerr != nil {
		return false, aerr
	}
	return q.Get(name) == "" || queryBool(q, name), nil
}

// checkPathNames refuses path names over the name limit with a 400 naming the
// field: no group, queue or partition can have such a name.
func checkPathNames(fields ...string) *apiError {
	for i := 0; i+1 < len(fields); i += 2 {
		if aerr := checkName(fields[i], fields[i+1]); aerr != nil {
			return aerr
		}
	}
	return nil
}

// DELETE /api/v1/consumer-groups/{group} and
// DELETE /api/v1/consumer-groups/{group}/queues/{queue}
func (s *Server) handleDeleteGroup(w http.ResponseWriter, r *http.Request) {
	if s.forwardEarly(w, r, nil) {
		return
	}
	deleteMetadata, aerr := queryBoolDefaultTrue(r, "deleteMetadata")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	c := &fsm.DeleteGroup{Group: pathVar(r, "group"), DeleteMetadata: deleteMetadata}
	if _, one := mux.Vars(r)["queue"]; one {
		c.OneQueue, c.Queue = true, pathVar(r, "queue")
	}
	if aerr := checkPathNames("consumerGroup", c.Group, "queue", c.Queue); aerr != nil {
		writeError(w, aerr)
		return
	}
	res, ok := s.commit(w, r, nil, c)
	if !ok {
		return
	}
	out := map[string]any{"success": true, "consumerGroup": c.Group,
		"deletedPartitions": res.(*fsm.DeleteGroupResult).Partitions, "metadataDeleted": deleteMetadata}
	if c.OneQueue {
		out["queueName"] = c.Queue
	}
	writeJSON(w, http.StatusOK, out)
}

// readObject reads a body that carries nothing the endpoint uses but must,
// as every POST body (queen-api.md 1.2), be present and a JSON object: a
// refusal writes nothing.
func (s *Server) readObject(r *http.Request) ([]byte, *apiError) {
	body, aerr := readBody(r, s.cfg.Limits.MaxBodyBytes)
	if aerr == nil {
		_, aerr = decodeObject(body, "")
	}
	return body, aerr
}

// POST /api/v1/consumer-groups/{group}/subscription
func (s *Server) handleRewriteSubscription(w http.ResponseWriter, r *http.Request) {
	body, ts, ok := receive(s, w, r, parseSubscriptionTimestamp)
	if !ok {
		return
	}
	c := &fsm.RewriteSubscription{Group: pathVar(r, "group"), Start: ts.UnixMicro()}
	if aerr := checkPathNames("consumerGroup", c.Group); aerr != nil {
		writeError(w, aerr)
		return
	}
	res, ok := s.commit(w, r, body, c)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "consumerGroup": c.Group, "newTimestamp": ts.text,
		"rowsUpdated": res.(*fsm.RewriteSubscriptionResult).Updated})
}

// subscriptionTimestamp is the body of a subscription rewrite: the time and
// the text the answer echoes.
type subscriptionTimestamp struct {
	time.Time
	text string
}

func parseSubscriptionTimestamp(body []byte) (subscriptionTimestamp, *apiError) {
	m, aerr := decodeObject(body, "")
	if aerr != nil {
		return subscriptionTimestamp{}, aerr
	}
	const field = "subscriptionTimestamp"
	ts, present, aerr := optString(m[field], field, "subscriptionTimestamp must be an RFC 3339 timestamp string")
	if aerr != nil {
		return subscriptionTimestamp{}, aerr
	}
	if !present {
		return subscriptionTimestamp{}, badRequest(codeMissingField, field, "subscriptionTimestamp is required")
	}
	t, ok := parseTime(ts)
	if !ok {
		return subscriptionTimestamp{}, badRequest(codeInvalidField, field, "subscriptionTimestamp %q is not an RFC 3339 timestamp", ts)
	}
	return subscriptionTimestamp{t, ts}, nil
}

// POST /api/v1/consumer-groups/{group}/queues/{queue}/seek
func (s *Server) handleSeek(w http.ResponseWriter, r *http.Request) {
	body, c, ok := receive(s, w, r, parseSeek)
	if !ok {
		return
	}
	c.Group, c.Queue = pathVar(r, "group"), pathVar(r, "queue")
	if aerr := checkPathNames("consumerGroup", c.Group, "queue", c.Queue); aerr != nil {
		writeError(w, aerr)
		return
	}
	res, ok := s.commit(w, r, body, c)
	if !ok {
		return
	}
	var target any
	if !c.ToEnd {
		target = formatMillis(c.Timestamp)
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "consumerGroup": c.Group, "queueName": c.Queue,
		"seekToEnd": c.ToEnd, "targetTimestamp": target, "partitionsUpdated": res.(*fsm.SeekResult).Partitions})
}

// parseSeek reads a seek body: exactly one of {"toEnd": true} and
// {"timestamp": "<RFC 3339>"}. "toEnd": false counts as absent.
func parseSeek(body []byte) (*fsm.Seek, *apiError) {
	m, aerr := decodeObject(body, "")
	if aerr != nil {
		return nil, aerr
	}
	c := &fsm.Seek{}
	if raw, ok := m["toEnd"]; ok && !isNull(raw) {
		v, ok := jsonBool(raw)
		if !ok {
			return nil, badRequest(codeInvalidField, "toEnd", "toEnd must be a boolean")
		}
		c.ToEnd = v
	}
	ts, hasTS, aerr := optString(m["timestamp"], "timestamp", "timestamp must be an RFC 3339 timestamp string")
	if aerr != nil {
		return nil, aerr
	}
	switch {
	case c.ToEnd && hasTS:
		return nil, badRequest(codeInvalidField, "timestamp", "Specify either 'toEnd': true or 'timestamp', not both")
	case hasTS:
		t, ok := parseTime(ts)
		if !ok {
			return nil, badRequest(codeInvalidField, "timestamp", "timestamp %q is not an RFC 3339 timestamp", ts)
		}
		c.Timestamp = t.UnixMicro()
	case !c.ToEnd:
		return nil, badRequest(codeMissingField, "toEnd", "Must specify either 'toEnd': true or 'timestamp'")
	}
	return c, nil
}

// POST /api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek
func (s *Server) handleSeekPartition(w http.ResponseWriter, r *http.Request) {
	// Queen's clients send {}, whose members are ignored; a follower
	// relays it.
	body, aerr := s.readObject(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if s.forwardEarly(w, r, body) {
		return
	}
	c := &fsm.SeekPartition{Group: pathVar(r, "group"), Queue: pathVar(r, "queue"), Partition: pathVar(r, "partition")}
	if aerr := checkPathNames("consumerGroup", c.Group, "queue", c.Queue, "partition", c.Partition); aerr != nil {
		writeError(w, aerr)
		return
	}
	res, ok := s.commit(w, r, body, c)
	if !ok {
		return
	}
	sr := res.(*fsm.SeekPartitionResult)
	if !sr.Found {
		// Queen answered 500 with this body; the spec asks for 404.
		writeJSON(w, http.StatusNotFound, map[string]any{"success": false, "error": "Partition not found", "code": codeNotFound})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "consumerGroup": c.Group, "queueName": c.Queue,
		"partitionName": c.Partition, "updated": true, "cursorMovedTo": optMillis(sr.MovedTo)})
}

// POST /api/v1/stats/refresh: statistics are computed from the state on
// every read, so there is nothing to recompute; the body must still be a
// JSON object.
func (s *Server) handleStatsRefresh(w http.ResponseWriter, r *http.Request) {
	if _, aerr := s.readObject(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true})
}
