package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi/jsonscan"
)

// Traces (queen-api.md 3.16). An event is state: POST proposes an AddTrace
// carrying the bounds of what is kept (fsm.TraceMax*); the listings are views
// of the local state behind the read barrier.

// Listing page sizes: the defaults of queen-api.md 3.16, and a cap so one
// request cannot ask for the whole trace store with its message payloads.
const (
	defaultTracesLimit     = 100
	defaultTraceNamesLimit = 50
	maxTracesLimit         = 1000
)

// POST /api/v1/traces
func (s *Server) handleAddTrace(w http.ResponseWriter, r *http.Request) {
	body, c, ok := receive(s, w, r, parseAddTrace)
	if !ok {
		return
	}
	res, ok := s.commit(w, r, body, c)
	if !ok {
		return
	}
	tr := res.(*fsm.AddTraceResult)
	if !tr.Found {
		writeJSON(w, http.StatusNotFound, map[string]any{"success": false, "error": "Message not found", "code": codeNotFound})
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"success": true, "traceId": formatUUID(tr.ID)})
}

// parseAddTrace reads a trace event: transactionId, partitionId and data
// are required; consumerGroup defaults to queue mode, eventType to "info";
// traceNames is a string, an array of strings or null (empty names are
// skipped, repeated ones kept once); workerId is optional.
func parseAddTrace(body []byte) (*fsm.AddTrace, *apiError) {
	m, aerr := decodeObject(body, "")
	if aerr != nil {
		return nil, aerr
	}
	c := &fsm.AddTrace{Group: fsm.QueueMode, EventType: "info", MaxPerMessage: fsm.TraceMaxPerMessage,
		MaxTotal: fsm.TraceMaxTotal, MaxBytes: fsm.TraceMaxTotalBytes}
	tx, present, aerr := optString(m["transactionId"], "transactionId", "transactionId must be a string")
	if aerr != nil {
		return nil, aerr
	}
	if !present || tx == "" {
		return nil, badRequest(codeMissingField, "transactionId", "transactionId is required")
	}
	pid, present, aerr := optString(m["partitionId"], "partitionId", "partitionId must be a string")
	if aerr != nil {
		return nil, aerr
	}
	if !present || pid == "" {
		return nil, badRequest(codeMissingField, "partitionId", "partitionId is required")
	}
	id, ok := parseUUID(pid)
	if !ok {
		return nil, badRequest(codeInvalidField, "partitionId", "partitionId must be a UUID, got %q", pid)
	}
	c.TxID, c.PartitionID = tx, id
	data := m["data"]
	if isNull(data) {
		return nil, badRequest(codeMissingField, "data", "data is required")
	}
	if len(data) > fsm.TraceMaxDataBytes {
		return nil, badRequest(codeLimit, "data", "data is %d bytes of JSON; the limit is %d", len(data), fsm.TraceMaxDataBytes)
	}
	c.Data = append([]byte(nil), data...)
	for _, f := range []struct {
		name string
		dst  *string
	}{{"consumerGroup", &c.Group}, {"eventType", &c.EventType}, {"workerId", &c.Worker}} {
		v, present, aerr := optString(m[f.name], f.name, f.name+" must be a string")
		if aerr != nil {
			return nil, aerr
		}
		if present && v != "" {
			*f.dst = v
		}
	}
	if aerr := checkPathNames("transactionId", c.TxID, "consumerGroup", c.Group, "eventType", c.EventType,
		"workerId", c.Worker); aerr != nil {
		return nil, aerr
	}
	names, aerr := parseTraceNames(m["traceNames"])
	if aerr != nil {
		return nil, aerr
	}
	c.Names = names
	return c, nil
}

func parseTraceNames(raw json.RawMessage) ([]string, *apiError) {
	const field = "traceNames"
	if isNull(raw) {
		return nil, nil
	}
	var names []string
	add := func(where, n string) *apiError {
		if n == "" {
			return nil
		}
		if aerr := checkName(where, n); aerr != nil {
			return aerr
		}
		for _, m := range names {
			if m == n {
				return nil
			}
		}
		if len(names) == fsm.TraceMaxNames {
			return badRequest(codeLimit, field, "traceNames holds more than %d names; the limit is %d per event",
				fsm.TraceMaxNames, fsm.TraceMaxNames)
		}
		names = append(names, n)
		return nil
	}
	if n, ok := jsonString(raw); ok {
		return names, add(field, n)
	}
	if raw[0] != '[' {
		return nil, badRequest(codeInvalidField, field, "traceNames must be a string, an array of strings or null")
	}
	i := 0
	var aerr *apiError
	err := jsonscan.ArrayValid(raw, func(elem []byte) error {
		where := fmt.Sprintf("%s[%d]", field, i)
		i++
		n, ok := jsonString(elem)
		if !ok {
			aerr = badRequest(codeInvalidField, where, "%s must be a string", where)
			return aerr
		}
		if aerr = add(where, n); aerr != nil {
			return aerr
		}
		return nil
	})
	if aerr != nil {
		return nil, aerr
	}
	if err != nil {
		return nil, badRequest(codeInvalidJSON, field, "Invalid JSON: %v", err)
	}
	return names, nil
}

// traceJSON renders an event as queen-api.md 3.16 lists it.
func traceJSON(v *fsm.TraceView) map[string]any {
	names := v.Names
	if names == nil {
		names = []string{}
	}
	return map[string]any{
		"id": formatUUID(v.ID), "event_type": v.EventType, "data": json.RawMessage(v.Data),
		"consumer_group": v.Group, "worker_id": nullString(v.Worker), "created_at": formatMillis(v.CreatedAt),
		"trace_names": names,
	}
}

// GET /api/v1/traces/{partitionId}/{transactionId}
func (s *Server) handleMessageTraces(w http.ResponseWriter, r *http.Request) {
	pid, tx := pathVar(r, "partitionId"), pathVar(r, "transactionId")
	id, ok := parseUUID(pid)
	if !ok {
		writeError(w, badRequest(codeInvalidField, "partitionId", "partitionId must be a UUID, got %q", pid))
		return
	}
	if aerr := checkName("transactionId", tx); aerr != nil {
		writeError(w, aerr)
		return
	}
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	views, err := s.state.MessageTraces(id, tx)
	if err != nil {
		internalError(w, err)
		return
	}
	out := make([]map[string]any, len(views))
	for i := range views {
		out[i] = traceJSON(&views[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"traces": out})
}

// pageOf reads limit and offset; missing, unparsable or negative values
// take the defaults, and limit is capped (queen-api.md 1.2: no 4xx for
// integer parameters).
func pageOf(r *http.Request, defLimit int) (limit, offset int) {
	q := r.URL.Query()
	l := queryInt(q, "limit", int64(defLimit))
	if l < 0 {
		l = int64(defLimit)
	}
	return int(min(l, maxTracesLimit)), int(min(max(queryInt(q, "offset", 0), 0), 1<<31))
}

// GET /api/v1/traces/by-name/{traceName}
func (s *Server) handleTracesByName(w http.ResponseWriter, r *http.Request) {
	name := pathVar(r, "traceName")
	if aerr := checkName("traceName", name); aerr != nil {
		writeError(w, aerr)
		return
	}
	limit, offset := pageOf(r, defaultTracesLimit)
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	views, total, err := s.state.TracesByName(name, limit, offset)
	if err != nil {
		internalError(w, err)
		return
	}
	out := make([]map[string]any, len(views))
	for i := range views {
		v := &views[i]
		m := traceJSON(v)
		m["transaction_id"] = v.TxID
		m["partition_id"], m["queue_name"], m["partition_name"] = nil, nil, nil
		m["message_payload"] = nil
		if v.Queue != "" {
			m["partition_id"], m["queue_name"], m["partition_name"] = formatUUID(v.PartitionID), v.Queue, v.Partition
		}
		// A payload this node cannot open is left out rather than failing
		// the listing of every other event.
		if v.Payload != nil {
			if data, aerr := s.open(v.Payload, v.Encrypted); aerr == nil {
				m["message_payload"] = json.RawMessage(data)
			}
		}
		out[i] = m
	}
	writeJSON(w, http.StatusOK, map[string]any{"traces": out, "total": total,
		"pagination": map[string]any{"limit": limit, "offset": offset}})
}

// GET /api/v1/traces/names
func (s *Server) handleTraceNames(w http.ResponseWriter, r *http.Request) {
	limit, offset := pageOf(r, defaultTraceNamesLimit)
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	views, total, err := s.state.TraceNames(limit, offset)
	if err != nil {
		internalError(w, err)
		return
	}
	out := make([]map[string]any, len(views))
	for i, v := range views {
		out[i] = map[string]any{"trace_name": v.Name, "trace_count": v.Traces, "message_count": v.Messages,
			"last_seen": formatMillis(v.LastSeen)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"trace_names": out, "total": total,
		"pagination": map[string]any{"limit": limit, "offset": offset}})
}
