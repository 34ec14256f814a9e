package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// hclogAdapter sends hashicorp/raft's logs to log/slog, so the whole
// process writes one structured stream.
type hclogAdapter struct {
	l    *slog.Logger
	name string
	args []any
}

func newHCLog(l *slog.Logger, name string) hclog.Logger {
	return &hclogAdapter{l: l.With("component", name), name: name}
}

func (h *hclogAdapter) slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace, hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (h *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	lvl := h.slogLevel(level)
	if lvl > slog.LevelDebug && closedTransport(args) {
		// The transport says it is shut down only once this node closes
		// it: its peers' connections end as the node stops cleanly, which
		// Raft logs as an error ("failed to decode incoming command") at
		// every planned restart.
		lvl = slog.LevelDebug
	}
	h.l.Log(context.Background(), lvl, msg, slogArgs(args)...)
}

// closedTransport reports whether an hclog value is Raft's transport
// shutdown error.
func closedTransport(args []any) bool {
	for _, a := range args {
		if err, ok := a.(error); ok && errors.Is(err, raft.ErrTransportShutdown) {
			return true
		}
	}
	return false
}

// slogArgs turns hclog's key/value pairs into slog's: a key the process
// log already has on every line (node, component, ...) is prefixed raft_,
// so a JSON reader does not keep Raft's value in place of Crown's; and
// values slog would print as {} or unformatted (hclog.Format, a *raft.Raft
// or other Stringer, an error) become their text.
func slogArgs(args []any) []any {
	out := make([]any, 0, len(args))
	for i := 0; i < len(args); i++ {
		if k, ok := args[i].(string); ok && i+1 < len(args) {
			switch k {
			case "node", "component", "sub", "time", "level", "msg":
				k = "raft_" + k
			}
			out = append(out, k, slogValue(args[i+1]))
			i++
			continue
		}
		out = append(out, slogValue(args[i]))
	}
	return out
}

func slogValue(v any) any {
	switch x := v.(type) {
	case slog.Attr, slog.Value:
		return v
	case hclog.Format:
		if len(x) > 0 {
			if f, ok := x[0].(string); ok {
				return fmt.Sprintf(f, x[1:]...)
			}
		}
		return fmt.Sprint(x...)
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	}
	return v
}
func (h *hclogAdapter) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogAdapter) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogAdapter) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogAdapter) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogAdapter) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }
func (h *hclogAdapter) enabled(l slog.Level) bool     { return h.l.Enabled(context.Background(), l) }
func (h *hclogAdapter) IsTrace() bool                 { return h.enabled(slog.LevelDebug) }
func (h *hclogAdapter) IsDebug() bool                 { return h.enabled(slog.LevelDebug) }
func (h *hclogAdapter) IsInfo() bool                  { return h.enabled(slog.LevelInfo) }
func (h *hclogAdapter) IsWarn() bool                  { return h.enabled(slog.LevelWarn) }
func (h *hclogAdapter) IsError() bool                 { return h.enabled(slog.LevelError) }
func (h *hclogAdapter) ImpliedArgs() []any            { return h.args }
func (h *hclogAdapter) With(args ...any) hclog.Logger {
	return &hclogAdapter{l: h.l.With(slogArgs(args)...), name: h.name, args: append(append([]any(nil), h.args...), args...)}
}
func (h *hclogAdapter) Name() string { return h.name }
func (h *hclogAdapter) Named(name string) hclog.Logger {
	return &hclogAdapter{l: h.l.With("sub", name), name: h.name + "." + name, args: h.args}
}
func (h *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{l: h.l, name: name, args: h.args}
}
func (h *hclogAdapter) SetLevel(hclog.Level) {}
func (h *hclogAdapter) GetLevel() hclog.Level {
	if h.IsDebug() {
		return hclog.Debug
	}
	return hclog.Info
}
func (h *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo)
}
func (h *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo).Writer()
}
