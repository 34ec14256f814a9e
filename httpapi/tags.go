package httpapi

import (
	"math"
	"net/http"
	"time"

	"github.com/crownmq/crown/fsm"
)

// Namespaces, tasks and the overview (queen-api.md 3.11). Every figure is
// computed from the state when asked, so statsAge is always 0.

func tagsJSON(key string, tags []fsm.TagView) []map[string]any {
	out := make([]map[string]any, len(tags))
	for i, t := range tags {
		out[i] = map[string]any{key: t.Name, "queues": t.Queues, "partitions": t.Partitions,
			"messages": map[string]any{"total": t.Stats.Total, "pending": t.Stats.Pending}}
	}
	return out
}

// GET /api/v1/resources/namespaces and /api/v1/resources/tasks
func (s *Server) tagsHandler(tasks bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if aerr := s.readBarrier(r); aerr != nil {
			writeError(w, aerr)
			return
		}
		ns, ts, err := s.state.Tags(nowMicros())
		if err != nil {
			internalError(w, err)
			return
		}
		if tasks {
			writeJSON(w, http.StatusOK, map[string]any{"tasks": tagsJSON("task", ts)})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"namespaces": tagsJSON("namespace", ns)})
	}
}

func lagJSON(l fsm.LagStats) map[string]any {
	return map[string]any{"avg": round2(l.Avg), "median": l.Median, "min": l.Min, "max": l.Max}
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// GET /api/v1/resources/overview
func (s *Server) handleOverview(w http.ResponseWriter, r *http.Request) {
	if aerr := s.readBarrier(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	now := time.Now()
	o, err := s.state.Overview(now.UnixMicro())
	if err != nil {
		internalError(w, err)
		return
	}
	st := o.Stats
	writeJSON(w, http.StatusOK, map[string]any{
		"queues": o.Queues, "partitions": o.Partitions, "namespaces": o.Namespaces, "tasks": o.Tasks,
		"messages": map[string]any{"total": st.Total, "pending": st.Pending, "processing": st.Processing,
			"completed": st.Completed, "failed": o.Counters.AckFailed, "deadLetter": st.DeadLetter},
		"lag": map[string]any{"time": lagJSON(o.TimeLag), "offset": lagJSON(o.OffsetLag)},
		// No record says when messages were consumed: the processed rate
		// has no source and is reported as 0.
		"throughput": map[string]any{"ingestedPerSecond": round2(o.IngestedPerSecond), "processedPerSecond": 0},
		"timestamp":  formatMillis(now.UnixMicro()),
		"statsAge":   0,
	})
}
