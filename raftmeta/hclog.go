package raftmeta

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter sends raft's hclog output to a slog.Logger. Levels map
// one to one (Trace below Debug); the slog handler decides what is shown, so
// SetLevel is ignored.
type hclogAdapter struct {
	base    *slog.Logger // without the component name
	l       *slog.Logger // base with the name and implied args
	name    string
	implied []any
}

const levelTrace = slog.LevelDebug - 4

func newHCLog(base *slog.Logger, name string, implied []any) *hclogAdapter {
	return &hclogAdapter{base: base, l: base.With("component", name).With(implied...), name: name, implied: implied}
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (h *hclogAdapter) enabled(l slog.Level) bool { return h.l.Enabled(context.Background(), l) }

func (h *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	h.l.Log(context.Background(), routine(slogLevel(level), msg, args), msg, args...)
}

// routine demotes raft messages that are warnings in general but expected
// in phobos's normal life, so a quiet (warn-level) head stays quiet: the
// first election of a fresh cluster (no previous leader), the listener
// closing at shutdown, and a restarted or newly joined follower being
// brought up to date (its log is behind: the leader sends older entries).
func routine(l slog.Level, msg string, args []any) slog.Level {
	switch msg {
	case "failed to get previous log", "appendEntries rejected, sending older logs":
		return min(l, slog.LevelInfo)
	case "heartbeat timeout reached, starting election":
		for i := 0; i+1 < len(args); i += 2 {
			if args[i] == "last-leader-id" && fmt.Sprint(args[i+1]) == "" {
				return slog.LevelInfo
			}
		}
	case "failed to accept connection":
		for i := 0; i+1 < len(args); i += 2 {
			if err, ok := args[i+1].(error); ok && strings.Contains(err.Error(), "closed") {
				return slog.LevelDebug
			}
		}
	}
	return l
}

func (h *hclogAdapter) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogAdapter) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogAdapter) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogAdapter) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogAdapter) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogAdapter) IsTrace() bool { return h.enabled(levelTrace) }
func (h *hclogAdapter) IsDebug() bool { return h.enabled(slog.LevelDebug) }
func (h *hclogAdapter) IsInfo() bool  { return h.enabled(slog.LevelInfo) }
func (h *hclogAdapter) IsWarn() bool  { return h.enabled(slog.LevelWarn) }
func (h *hclogAdapter) IsError() bool { return h.enabled(slog.LevelError) }

func (h *hclogAdapter) ImpliedArgs() []any { return h.implied }

func (h *hclogAdapter) With(args ...any) hclog.Logger {
	return newHCLog(h.base, h.name, append(h.implied[:len(h.implied):len(h.implied)], args...))
}

func (h *hclogAdapter) Name() string { return h.name }

func (h *hclogAdapter) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return h.ResetNamed(name)
}

func (h *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return newHCLog(h.base, name, h.implied)
}

func (h *hclogAdapter) SetLevel(hclog.Level) {}

func (h *hclogAdapter) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if h.enabled(slogLevel(l)) {
			return l
		}
	}
	return hclog.Off
}

func (h *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo)
}

func (h *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return h.StandardLogger(opts).Writer()
}

var _ hclog.Logger = (*hclogAdapter)(nil)
