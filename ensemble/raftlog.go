package ensemble

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// raftLog is the hclog.Logger that hashicorp/raft, its transport and its
// snapshot store log through: each line becomes one slog record of the
// member's logger at the level raft gave it (an ERROR stays an ERROR),
// raft's key-value pairs as attributes, and the message prefixed with the
// logger's name ("raft: ") as hclog prints it. Which levels show is the
// member's handler's decision (log-level), not raft's.
//
// A few of raft's lines are demoted (raftNoise): they repeat at every
// retry while peers do not answer, several a second, and the member's
// peer report (peerhealth.go) says the same once per change.
type raftLog struct {
	log  *slog.Logger
	name string
	args []any // implied arguments of With
}

func newRaftLog(l *slog.Logger) *raftLog { return &raftLog{log: l, name: "raft"} }

// slogLevel maps hclog's levels onto slog's. slog has no trace level: it
// goes below debug by as much as debug is below info.
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default: // Info, and NoLevel (hclog's default level)
		return slog.LevelInfo
	}
}

// raftNoise says at which level to log raft's message msg, given at level
// lvl with args. Each demotion is of a line that raft repeats for as long
// as a condition lasts, rather than once when it begins.
func raftNoise(msg string, lvl slog.Level, args []any) slog.Level {
	switch msg {
	case "failed to make requestVote RPC", // ERROR, per peer and election round
		"failed to heartbeat to",           // ERROR, per retry, at most half a heartbeat timeout apart
		"failed to appendEntries to",       // ERROR, per retry with backoff
		"failed to contact",                // WARN, per peer every leader lease timeout
		"failed to pipeline appendEntries": // ERROR, the pipeline's view of the same failure
		// The peer report logs a peer that stops answering once, with
		// the error, and once more when it answers again.
		return slog.LevelDebug
	case "Election timeout reached, restarting election", // WARN, per election round
		"entering candidate state",                               // INFO, per election round
		"pre-vote campaign failed, waiting for election timeout": // INFO, per election round
		// While no leader is known the peer report logs which peers do
		// not answer, once per change; the first round's start is
		// raft's "heartbeat timeout reached" line below.
		return slog.LevelDebug
	case "heartbeat timeout reached, starting election":
		// WARN in raft. With no leader known yet (every start of a
		// member) it is the ordinary first election; a leader gone
		// silent stays a warning.
		if lastLeader(args) == "" {
			return slog.LevelInfo
		}
	}
	return lvl
}

// lastLeader is the last-leader-id argument of raft's election line.
func lastLeader(args []any) string {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "last-leader-id" {
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}

func (r *raftLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	lvl := raftNoise(msg, slogLevel(level), args)
	ctx := context.Background()
	if !r.log.Enabled(ctx, lvl) {
		return
	}
	attrs := make([]any, 0, len(r.args)+len(args))
	attrs = append(attrs, r.args...)
	attrs = append(attrs, args...)
	for i := 1; i < len(attrs); i += 2 {
		if f, ok := attrs[i].(hclog.Format); ok && len(f) > 0 {
			format, _ := f[0].(string)
			attrs[i] = fmt.Sprintf(format, f[1:]...)
		}
	}
	r.log.Log(ctx, lvl, r.name+": "+msg, attrs...)
}

func (r *raftLog) Trace(msg string, args ...any) { r.Log(hclog.Trace, msg, args...) }
func (r *raftLog) Debug(msg string, args ...any) { r.Log(hclog.Debug, msg, args...) }
func (r *raftLog) Info(msg string, args ...any)  { r.Log(hclog.Info, msg, args...) }
func (r *raftLog) Warn(msg string, args ...any)  { r.Log(hclog.Warn, msg, args...) }
func (r *raftLog) Error(msg string, args ...any) { r.Log(hclog.Error, msg, args...) }

func (r *raftLog) enabled(l hclog.Level) bool {
	return r.log.Enabled(context.Background(), slogLevel(l))
}

func (r *raftLog) IsTrace() bool { return r.enabled(hclog.Trace) }
func (r *raftLog) IsDebug() bool { return r.enabled(hclog.Debug) }
func (r *raftLog) IsInfo() bool  { return r.enabled(hclog.Info) }
func (r *raftLog) IsWarn() bool  { return r.enabled(hclog.Warn) }
func (r *raftLog) IsError() bool { return r.enabled(hclog.Error) }

func (r *raftLog) ImpliedArgs() []any { return r.args }

func (r *raftLog) With(args ...any) hclog.Logger {
	c := *r
	c.args = append(append([]any(nil), r.args...), args...)
	return &c
}

func (r *raftLog) Name() string { return r.name }

func (r *raftLog) Named(name string) hclog.Logger {
	c := *r
	c.name = r.name + "." + name
	return &c
}

func (r *raftLog) ResetNamed(name string) hclog.Logger {
	c := *r
	c.name = name
	return &c
}

// SetLevel is ignored: the member's handler decides what shows.
func (r *raftLog) SetLevel(hclog.Level) {}

// GetLevel is the lowest level the member's handler takes.
func (r *raftLog) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if r.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

func (r *raftLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(r.StandardWriter(opts), "", 0)
}

// StandardWriter takes lines of the standard library's log package; like
// hclog's with InferLevels, a "[ERROR]" (or [ERR], [WARN], [DEBUG],
// [TRACE], [INFO]) prefix sets the line's level.
func (r *raftLog) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return stdLogWriter{r: r}
}

type stdLogWriter struct{ r *raftLog }

func (w stdLogWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\r\n"))
	level := hclog.Info
	for _, pre := range []struct {
		s string
		l hclog.Level
	}{{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info}, {"[WARN]", hclog.Warn}, {"[ERR]", hclog.Error}, {"[ERROR]", hclog.Error}} {
		if rest, ok := strings.CutPrefix(line, pre.s); ok {
			level, line = pre.l, strings.TrimSpace(rest)
			break
		}
	}
	w.r.Log(level, line)
	return len(p), nil
}
