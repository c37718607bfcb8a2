package supervisor

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/coordrun/coordrun/supervisor/engine"
)

// statusLine shows where a waiting supervisor stands: one line redrawn in
// place on a terminal, a log line per change otherwise.
type statusLine struct {
	w    io.Writer
	tty  bool
	lock string
	log  *slog.Logger
	drew bool
}

func newStatusLine(w io.Writer, tty bool, lock string, log *slog.Logger) *statusLine {
	return &statusLine{w: w, tty: tty && w != nil, lock: lock, log: log}
}

func (s *statusLine) update(q engine.Status) {
	if q.Position == 0 && !q.Stopping {
		return
	}
	h := q.Holder
	what := fmt.Sprintf("position %d of %d", q.Position, q.Length-1)
	if q.Stopping {
		what = "next; the previous holder is still stopping its job"
	}
	since := ""
	if !h.Since.IsZero() {
		since = h.Since.Local().Format(time.TimeOnly)
	}
	if s.tty {
		fmt.Fprintf(s.w, "\r\033[Kwaiting for %s: %s; held by %s pid %d since %s", s.lock, what, h.Host, h.PID, since)
		s.drew = true
		return
	}
	holderSince := ""
	if !h.Since.IsZero() {
		holderSince = h.Since.Format(time.RFC3339)
	}
	s.log.Info("waiting", "lock", s.lock, "position", q.Position, "queue", q.Length-1,
		"holder_host", h.Host, "holder_pid", h.PID, "holder_since", holderSince, "holder_stopping", q.Stopping)
}

func (s *statusLine) clear() {
	if s.drew {
		fmt.Fprint(s.w, "\r\033[K")
	}
}
