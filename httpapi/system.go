package httpapi

import (
	"fmt"
	"net/http"

	"github.com/crownmq/crown/fsm"
)

// System maintenance switches (queen-api.md 3.17). The switches are
// replicated state: a POST proposes a command, so every node answers alike.
// Push maintenance is enforced where a push applies (fsm/system_apply.go),
// which is ordered with the switch by the log; pop maintenance is checked
// by every pop handler against the local state, which holds the switch
// once it is applied here (parked long-polls are woken by that commit).

const codeBufferFull = "maintenance_buffer_full"
const codeMaintenance = "maintenance_mode"

// parseEnabled reads the required boolean "enabled" of a switch request.
func parseEnabled(body []byte) (bool, *apiError) {
	m, aerr := decodeObject(body, "")
	if aerr != nil {
		return false, aerr
	}
	switch raw := m["enabled"]; {
	case isNull(raw):
		return false, badRequest(codeMissingField, "enabled", "enabled is required (true or false)")
	case string(raw) == "true":
		return true, nil
	case string(raw) == "false":
		return false, nil
	default:
		return false, badRequest(codeInvalidField, "enabled", "enabled must be a boolean, got %s", raw)
	}
}

// bufferHealthy is false when the buffer cannot take one more message:
// pushes are then refused with a 503 until maintenance is switched off.
func bufferHealthy(sw fsm.SystemSwitches) bool {
	if !sw.Maintenance {
		return true
	}
	return sw.Buffer.Messages < uint64(sw.BufferMaxMessages) && sw.Buffer.Bytes < sw.BufferMaxBytes
}

func bufferStats(sw fsm.SystemSwitches) map[string]any {
	st := map[string]any{"requests": sw.Buffer.Requests, "messages": sw.Buffer.Messages, "bytes": sw.Buffer.Bytes,
		"maxMessages": nil, "maxBytes": nil, "since": nil}
	if sw.Maintenance {
		st["maxMessages"], st["maxBytes"], st["since"] = sw.BufferMaxMessages, sw.BufferMaxBytes, formatMillis(sw.MaintenanceSince)
	}
	return st
}

// GET /api/v1/system/maintenance
func (s *Server) handleGetMaintenance(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	sw, err := s.state.SystemSwitches()
	if err != nil {
		internalError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"maintenanceMode": sw.Maintenance, "popMaintenanceMode": sw.PopMaintenance,
		"bufferedMessages": sw.Buffer.Messages, "bufferHealthy": bufferHealthy(sw), "bufferStats": bufferStats(sw)})
}

// POST /api/v1/system/maintenance
func (s *Server) handleSetMaintenance(w http.ResponseWriter, r *http.Request) {
	body, on, ok := receive(s, w, r, parseEnabled)
	if !ok {
		return
	}
	c := &fsm.SetMaintenance{Enabled: on}
	if on {
		c.MaxMessages, c.MaxBytes = fsm.PushBufferMaxMessages, fsm.PushBufferMaxBytes
	}
	res, ok := s.commit(w, r, body, c)
	if !ok {
		return
	}
	mr := res.(*fsm.MaintenanceResult)
	sw := mr.Switches
	out := map[string]any{"maintenanceMode": sw.Maintenance, "bufferedMessages": sw.Buffer.Messages,
		"bufferHealthy": bufferHealthy(sw), "bufferStats": bufferStats(sw)}
	if on {
		out["message"] = fmt.Sprintf("Maintenance mode enabled: pushes are buffered (at most %d messages, %d payload bytes) and pushed, in order, when it is disabled; transactions that push are refused meanwhile",
			sw.BufferMaxMessages, sw.BufferMaxBytes)
	} else {
		d := mr.Drained
		out["message"] = fmt.Sprintf("Maintenance mode disabled: %d buffered requests pushed (%d messages queued, %d duplicates, %d refused by queue rules)",
			d.Requests, d.Queued, d.Duplicates, d.Refused)
		out["drained"] = map[string]any{"requests": d.Requests, "queued": d.Queued, "duplicates": d.Duplicates, "refused": d.Refused}
	}
	writeJSON(w, http.StatusOK, out)
}

func popMaintenanceMessage(on bool) string {
	if on {
		return "Pop maintenance mode enabled: every pop answers 204 until it is disabled"
	}
	return "Pop maintenance mode disabled: pops deliver messages"
}

// GET /api/v1/system/maintenance/pop
func (s *Server) handleGetPopMaintenance(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	on, err := s.state.PopMaintenance()
	if err != nil {
		internalError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"popMaintenanceMode": on, "message": popMaintenanceMessage(on)})
}

// POST /api/v1/system/maintenance/pop
func (s *Server) handleSetPopMaintenance(w http.ResponseWriter, r *http.Request) {
	body, on, ok := receive(s, w, r, parseEnabled)
	if !ok {
		return
	}
	res, ok := s.commit(w, r, body, &fsm.SetPopMaintenance{Enabled: on})
	if !ok {
		return
	}
	on = res.(*fsm.MaintenanceResult).Switches.PopMaintenance
	writeJSON(w, http.StatusOK, map[string]any{"popMaintenanceMode": on, "message": popMaintenanceMessage(on)})
}

// GET /api/v1/system/shared-state
func (s *Server) handleSharedState(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	st, err := s.state.SharedState()
	if err != nil {
		internalError(w, err)
		return
	}
	leaderID, _ := s.cluster.Leader()
	nodes := make([]map[string]any, len(st.Nodes))
	for i, n := range st.Nodes {
		nodes[i] = map[string]any{"id": n.ID, "raftAddr": n.RaftAddr, "httpAddr": n.HTTPAddr, "leader": n.ID == leaderID}
	}
	sw := st.Switches
	writeJSON(w, http.StatusOK, map[string]any{
		"nodeId": s.cfg.NodeID, "isLeader": s.cluster.IsLeader(), "leaderId": nullString(leaderID),
		"appliedIndex": st.Applied, "nodes": nodes, "queues": st.Queues,
		"maintenance": map[string]any{
			"maintenanceMode": sw.Maintenance, "popMaintenanceMode": sw.PopMaintenance,
			"maintenanceSince": optMillis(sw.MaintenanceSince), "popMaintenanceSince": optMillis(sw.PopMaintenanceSince),
			"bufferedMessages": sw.Buffer.Messages, "bufferHealthy": bufferHealthy(sw), "bufferStats": bufferStats(sw),
		},
		"traces": map[string]any{"events": st.TraceEvents, "bytes": st.TraceBytes,
			"maxEvents": fsm.TraceMaxTotal, "maxBytes": fsm.TraceMaxTotalBytes},
	})
}

// writeBufferedPush answers a push that push maintenance took (or refused
// for want of room), and reports whether it did.
func writeBufferedPush(w http.ResponseWriter, items []fsm.PushItem, pr *fsm.PushResult) bool {
	if !pr.Buffered() {
		return false
	}
	if pr.Items[0].Status == fsm.PushBufferFull {
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: codeBufferFull,
			Message: fmt.Sprintf("Maintenance mode is on and its push buffer has no room for these %d messages (at most %d messages, %d payload bytes); nothing was accepted: retry once maintenance mode is off",
				len(items), fsm.PushBufferMaxMessages, fsm.PushBufferMaxBytes)})
		return true
	}
	out := make([]map[string]any, len(items))
	for i := range items {
		it := &items[i]
		out[i] = map[string]any{"index": i, "status": "buffered", "queue": it.Queue, "partition": it.Partition,
			"transactionId": it.TxID, "transaction_id": it.TxID, "queueName": it.Queue, "message_id": nil}
	}
	writeJSON(w, http.StatusCreated, out)
	return true
}

// refusePushDuringMaintenance refuses, before proposing, a write that
// pushes (a transaction, a stream cycle) while push maintenance is on; msg
// is the state machine's own refusal of one that raced the switch
// (fsm.ErrPushMaintenance, fsm.ErrStreamPushMaintenance), which the caller
// answers with maintenanceRefusal too: nothing was applied either way.
func (s *Server) refusePushDuringMaintenance(pushes bool, msg string) *apiError {
	if !pushes {
		return nil
	}
	sw, err := s.state.SystemSwitches()
	if err != nil || !sw.Maintenance {
		return nil // the state machine decides
	}
	return maintenanceRefusal(msg)
}

// maintenanceRefusal is README's 503 maintenance_mode for a write that
// pushes during push maintenance.
func maintenanceRefusal(msg string) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Code: codeMaintenance, Message: msg}
}
