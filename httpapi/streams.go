package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi/jsonscan"
)

// Streams endpoints (queen-api.md 3.18). Field names are snake_case, as the
// streams SDKs send and read them. Registration and cycles are Raft
// commands; a state read is a view of the local state behind the read
// barrier. A cycle that cannot run (unknown query, failed ack) answers 200
// with success false, as transactions do; malformed requests are 400s.

// POST /streams/v1/queries
func (s *Server) handleStreamQueries(w http.ResponseWriter, r *http.Request) {
	body, c, ok := receive(s, w, r, parseStreamRegister)
	if !ok {
		return
	}
	res, ok := s.commit(w, r, body, c)
	if !ok {
		return
	}
	rr := res.(*fsm.StreamRegisterResult)
	if rr.Conflict != "" {
		writeJSON(w, http.StatusConflict, map[string]any{
			"success": false, "query_id": formatUUID(rr.QueryID), "name": rr.Name, "error": rr.Conflict,
			"code": "conflict",
		})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"success": true, "query_id": formatUUID(rr.QueryID), "name": rr.Name,
		"config_hash": rr.ConfigHash, "fresh": rr.Fresh, "reset": rr.Reset,
	})
}

// POST /streams/v1/state/get
func (s *Server) handleStreamStateGet(w http.ResponseWriter, r *http.Request) {
	body, aerr := readBody(r, s.cfg.Limits.MaxBodyBytes)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	q, aerr := parseStreamStateGet(body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	rows, found, err := s.state.StreamState(*q)
	var tooLarge *fsm.StateReadTooLargeError
	switch {
	case errors.As(err, &tooLarge):
		writeJSON(w, http.StatusOK, map[string]any{"success": false, "error": err.Error()})
		return
	case err != nil:
		writeError(w, &apiError{Status: 500, Code: codeInternal, Message: fmt.Sprintf("read stream state: %v", err)})
		return
	case !found:
		writeJSON(w, http.StatusOK, map[string]any{"success": false, "error": fsm.ErrStreamQueryNotFound})
		return
	}
	type row struct {
		Key       string          `json:"key"`
		Value     json.RawMessage `json:"value"`
		UpdatedAt string          `json:"updated_at"`
	}
	out := make([]row, len(rows))
	for i, rw := range rows {
		out[i] = row{Key: rw.Key, Value: rw.Value, UpdatedAt: formatMillis(rw.UpdatedAt)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "rows": out})
}

// POST /streams/v1/cycle
func (s *Server) handleStreamCycle(w http.ResponseWriter, r *http.Request) {
	// Payloads and state values alias the body until the command is proposed.
	body, release, aerr := readBodyPooled(r, s.cfg.Limits.MaxBodyBytes)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	defer release()
	if s.forwardEarly(w, r, body) {
		return
	}
	c, count, aerr := parseStreamCycle(body, s.cfg.Limits)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	c.Principal = principalOf(r)
	// A cycle that pushes during push maintenance is refused with a 503, as
	// a transaction that pushes is (README).
	if aerr := s.refusePushDuringMaintenance(len(c.Items) > 0, fsm.ErrStreamPushMaintenance); aerr != nil {
		writeError(w, aerr)
		return
	}
	res, ok := s.commitPrepared(w, r, body, c, s.sealer(c.Items), writeError)
	if !ok {
		return
	}
	cr := res.(*fsm.StreamCycleResult)
	if !cr.Success && cr.Error == fsm.ErrStreamPushMaintenance {
		writeError(w, maintenanceRefusal(cr.Error)) // it raced the switch
		return
	}
	out := map[string]any{"success": cr.Success, "query_id": formatUUID(c.QueryID), "partition_id": formatUUID(c.PartitionID)}
	if cr.Queue != "" {
		out["queueName"] = cr.Queue
	}
	if !cr.Success {
		out["error"] = cr.Error
		writeJSON(w, http.StatusOK, out)
		return
	}
	out["state_ops_applied"] = cr.StateOps
	pushes := json.RawMessage("[]")
	if len(c.Items) > 0 {
		pushes = appendPushResults(nil, c.Items, cr.Push)
	}
	out["push_results"] = pushes
	if cr.Ack != nil {
		out["ack_result"] = map[string]any{"success": true, "count": count,
			"lease_released": cr.Ack.LeaseReleased, "dlq": cr.Ack.DLQ}
	} else {
		out["ack_result"] = nil
	}
	writeJSON(w, http.StatusOK, out)
}

// ---- parsing ----

// requiredString reads a required non-empty string member.
func requiredString(m map[string]json.RawMessage, field string) (string, *apiError) {
	raw := m[field]
	if isNull(raw) {
		return "", badRequest(codeMissingField, field, "%s is required", field)
	}
	v, ok := jsonString(raw)
	if !ok {
		return "", badRequest(codeInvalidField, field, "%s must be a string", field)
	}
	if v == "" {
		return "", badRequest(codeMissingField, field, "%s is required", field)
	}
	return v, nil
}

// requiredUUID reads a required id member the broker issued.
func requiredUUID(m map[string]json.RawMessage, field string) ([16]byte, *apiError) {
	v, aerr := requiredString(m, field)
	if aerr != nil {
		return [16]byte{}, aerr
	}
	id, ok := parseUUID(v)
	if !ok {
		return id, badRequest(codeInvalidField, field, "%s must be a UUID, got %q", field, v)
	}
	return id, nil
}

// optBool reads an optional boolean member, def when absent or null.
func optBool(raw json.RawMessage, field string, def bool) (bool, *apiError) {
	if isNull(raw) {
		return def, nil
	}
	v, ok := jsonBool(raw)
	if !ok {
		return false, badRequest(codeInvalidField, field, "%s must be a boolean", field)
	}
	return v, nil
}

func parseStreamRegister(body []byte) (*fsm.StreamRegister, *apiError) {
	m, aerr := decodeObject(body, "")
	if aerr != nil {
		return nil, aerr
	}
	c := &fsm.StreamRegister{}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"name", &c.Name}, {"source_queue", &c.Source}, {"config_hash", &c.ConfigHash}} {
		if *f.dst, aerr = requiredString(m, f.name); aerr != nil {
			return nil, aerr
		}
	}
	if c.Sink, _, aerr = optString(m["sink_queue"], "sink_queue", "sink_queue must be a string"); aerr != nil {
		return nil, aerr
	}
	if c.Reset, aerr = optBool(m["reset"], "reset", false); aerr != nil {
		return nil, aerr
	}
	for _, f := range [][2]string{{"name", c.Name}, {"source_queue", c.Source}, {"sink_queue", c.Sink}, {"config_hash", c.ConfigHash}} {
		if aerr := checkName(f[0], f[1]); aerr != nil {
			return nil, aerr
		}
	}
	return c, nil
}

func checkStateKey(field, key string) *apiError {
	if len(key) > fsm.MaxStateKeyBytes {
		return badRequest(codeLimit, field, "%s is %d bytes long; the limit is %d bytes", field, len(key), fsm.MaxStateKeyBytes)
	}
	return nil
}

func parseStreamStateGet(body []byte) (*fsm.StreamStateQuery, *apiError) {
	m, aerr := decodeObject(body, "")
	if aerr != nil {
		return nil, aerr
	}
	q := &fsm.StreamStateQuery{}
	if q.QueryID, aerr = requiredUUID(m, "query_id"); aerr != nil {
		return nil, aerr
	}
	if q.PartitionID, aerr = requiredUUID(m, "partition_id"); aerr != nil {
		return nil, aerr
	}
	if raw := m["keys"]; !isNull(raw) {
		if raw[0] != '[' {
			return nil, badRequest(codeInvalidField, "keys", "keys must be an array of strings")
		}
		err := jsonscan.ArrayValid(raw, func(elem []byte) error {
			field := fmt.Sprintf("keys[%d]", len(q.Keys))
			if len(q.Keys) == fsm.MaxStateOps {
				aerr = badRequest(codeLimit, "keys", "keys holds more than %d keys; the limit is %d per request", fsm.MaxStateOps, fsm.MaxStateOps)
				return aerr
			}
			k, ok := jsonString(elem)
			if !ok {
				aerr = badRequest(codeInvalidField, field, "%s must be a string", field)
				return aerr
			}
			if aerr = checkStateKey(field, k); aerr != nil {
				return aerr
			}
			q.Keys = append(q.Keys, k)
			return nil
		})
		if aerr != nil {
			return nil, aerr
		}
		if err != nil {
			return nil, badRequest(codeInvalidJSON, "keys", "Invalid JSON: %v", err)
		}
	}
	if q.Prefix, _, aerr = optString(m["key_prefix"], "key_prefix", "key_prefix must be a string"); aerr != nil {
		return nil, aerr
	}
	if raw := m["ripe_at_or_before"]; !isNull(raw) {
		v, ok := jsonNumber(raw)
		if !ok {
			return nil, badRequest(codeInvalidField, "ripe_at_or_before", "ripe_at_or_before must be a number")
		}
		q.HasRipe, q.RipeAtOrBefore = true, v
	}
	return q, nil
}

// jsonNumber reads a finite JSON number.
func jsonNumber(raw json.RawMessage) (float64, bool) {
	if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

// windowEnd extracts the numeric windowEnd member of an object value, which
// state reads filter on (ripe_at_or_before). A numeric string counts, as it
// does for a database that casts the member; anything else is no windowEnd.
func windowEnd(value []byte) (float64, bool) {
	if len(value) == 0 || value[0] != '{' {
		return 0, false
	}
	var raw []byte
	if jsonscan.ObjectValidRaw(value, func(k, v []byte) error {
		if string(k) == "windowEnd" {
			raw = v
		}
		return nil
	}) != nil || raw == nil {
		return 0, false
	}
	if s, ok := jsonString(raw); ok {
		if !jsonscan.Valid([]byte(s)) {
			return 0, false
		}
		raw = []byte(s)
	}
	return jsonNumber(raw)
}

// parseStreamCycle reads a cycle; count is the ack's count (default 1),
// which the answer echoes.
func parseStreamCycle(body []byte, lim Limits) (*fsm.StreamCycle, int64, *apiError) {
	m, aerr := decodeObject(body, "")
	if aerr != nil {
		return nil, 0, aerr
	}
	c := &fsm.StreamCycle{}
	if c.QueryID, aerr = requiredUUID(m, "query_id"); aerr != nil {
		return nil, 0, aerr
	}
	if c.PartitionID, aerr = requiredUUID(m, "partition_id"); aerr != nil {
		return nil, 0, aerr
	}
	g, _, aerr := optString(m["consumer_group"], "consumer_group", "consumer_group must be a string")
	if aerr != nil {
		return nil, 0, aerr
	}
	if g == "" {
		g = fsm.QueueMode
	}
	if aerr := checkName("consumer_group", g); aerr != nil {
		return nil, 0, aerr
	}
	c.Group = g
	if c.Ops, aerr = parseStateOps(m["state_ops"]); aerr != nil {
		return nil, 0, aerr
	}
	if raw := m["push_items"]; !isNull(raw) {
		if raw[0] != '[' {
			return nil, 0, badRequest(codeInvalidField, "push_items", "push_items must be an array")
		}
		if c.Items, aerr = parsePushItems(raw, "push_items", lim, false); aerr != nil {
			return nil, 0, aerr
		}
	}
	if c.ReleaseLease, aerr = optBool(m["release_lease"], "release_lease", true); aerr != nil {
		return nil, 0, aerr
	}
	count := int64(1)
	if raw := m["ack"]; !isNull(raw) {
		am, aerr := decodeObject(raw, "ack")
		if aerr != nil {
			return nil, 0, aerr
		}
		// The ack's message is in the cycle's partition, whatever the ack
		// object says: the ack parser reads the top-level member.
		r := rawAckOf(am)
		r.PartitionID = m["partition_id"]
		it, aerr := r.item("ack.", "ack.transactionId is required", "partition_id is required")
		if aerr != nil {
			return nil, 0, aerr
		}
		if raw := am["count"]; !isNull(raw) {
			n, ok := jsonInt(raw)
			if !ok || n < 1 {
				return nil, 0, badRequest(codeInvalidField, "ack.count", "ack.count must be a positive integer")
			}
			count = n
		}
		c.HasAck, c.Ack = true, it
	}
	return c, count, nil
}

func parseStateOps(raw json.RawMessage) ([]fsm.StateOp, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	if raw[0] != '[' {
		return nil, badRequest(codeInvalidField, "state_ops", "state_ops must be an array")
	}
	var ops []fsm.StateOp
	var aerr *apiError
	err := jsonscan.ArrayValid(raw, func(elem []byte) error {
		where := fmt.Sprintf("state_ops[%d]", len(ops))
		if len(ops) == fsm.MaxStateOps {
			aerr = badRequest(codeLimit, "state_ops", "state_ops holds more than %d operations; the limit is %d per cycle", fsm.MaxStateOps, fsm.MaxStateOps)
			return aerr
		}
		var op fsm.StateOp
		op, aerr = parseStateOp(elem, where)
		if aerr != nil {
			return aerr
		}
		ops = append(ops, op)
		return nil
	})
	if aerr != nil {
		return nil, aerr
	}
	if err != nil {
		return nil, badRequest(codeInvalidJSON, "state_ops", "Invalid JSON: %v", err)
	}
	return ops, nil
}

func parseStateOp(raw []byte, where string) (fsm.StateOp, *apiError) {
	var op fsm.StateOp
	m, aerr := decodeObject(raw, where)
	if aerr != nil {
		return op, badRequest(codeInvalidField, where, "%s must be an object", where)
	}
	typ, ok := jsonString(m["type"])
	switch {
	case !ok && isNull(m["type"]):
		return op, badRequest(codeMissingField, where+".type", "%s.type is required", where)
	case typ == "upsert":
		op.Kind = fsm.StateUpsert
	case typ == "delete":
		op.Kind = fsm.StateDelete
	default:
		return op, badRequest(codeInvalidField, where+".type", `%s.type must be "upsert" or "delete"`, where)
	}
	key, ok := jsonString(m["key"])
	if !ok {
		if isNull(m["key"]) {
			return op, badRequest(codeMissingField, where+".key", "%s.key is required", where)
		}
		return op, badRequest(codeInvalidField, where+".key", "%s.key must be a string", where)
	}
	if aerr := checkStateKey(where+".key", key); aerr != nil {
		return op, aerr
	}
	op.Key = key
	if op.Kind == fsm.StateDelete {
		return op, nil
	}
	value, present := m["value"]
	if !present {
		return op, badRequest(codeMissingField, where+".value", "%s.value is required for an upsert", where)
	}
	if len(value) > fsm.MaxStateValueBytes {
		return op, badRequest(codeLimit, where+".value", "%s.value is %d bytes; the limit is %d", where, len(value), fsm.MaxStateValueBytes)
	}
	op.Value = value
	op.WindowEnd, op.HasWindowEnd = windowEnd(value)
	return op, nil
}
