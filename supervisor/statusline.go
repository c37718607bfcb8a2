package supervisor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
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

	// mu guards drew, last and lingering: the wait reports positions
	// while the holder's watch (watchHolder) reports its verdict.
	mu   sync.Mutex
	drew bool
	last engine.Status
	// lingering is the verdict on the holder of last (state.Lingering),
	// "" when nothing looks wrong.
	lingering string
}

func newStatusLine(w io.Writer, tty bool, lock string, log *slog.Logger) *statusLine {
	return &statusLine{w: w, tty: tty && w != nil, lock: lock, log: log}
}

func (s *statusLine) update(q engine.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q.HolderNode != s.last.HolderNode {
		s.lingering = ""
	}
	s.last = q
	s.show()
}

// holderLingering sets the verdict on the current holder.
func (s *statusLine) holderLingering(l string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l == s.lingering {
		return
	}
	s.lingering = l
	s.show()
}

// next reports whether this contender waits right behind the holder of
// a lock (not a semaphore's slot, nor a holder still stopping).
func (s *statusLine) next() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last.Position == 1 && !s.last.Stopping && s.last.HolderNode != engine.SemaphoreHeld
}

// show draws the line; the caller holds mu.
func (s *statusLine) show() {
	q := s.last
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
		gone := ""
		if s.lingering != "" {
			gone = " (lingering: " + s.lingering + ")"
		}
		fmt.Fprintf(s.w, "\r\033[Kwaiting for %s: %s; held by %s pid %d since %s%s", s.lock, what, h.Host, h.PID, since, gone)
		s.drew = true
		return
	}
	holderSince := ""
	if !h.Since.IsZero() {
		holderSince = h.Since.Format(time.RFC3339)
	}
	attrs := []any{"lock", s.lock, "position", q.Position, "queue", q.Length - 1,
		"holder_host", h.Host, "holder_pid", h.PID, "holder_since", holderSince, "holder_stopping", q.Stopping}
	if s.lingering != "" {
		attrs = append(attrs, "holder_lingering", s.lingering)
	}
	s.log.Info("waiting", attrs...)
}

func (s *statusLine) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drew {
		fmt.Fprint(s.w, "\r\033[K")
	}
}

// watchHolder asks w, every so often while this contender is next in
// line, whether the lock's holder looks gone, and shows the verdict on
// the line: a frozen or dead holder keeps its node until its session
// expires, and the waiter would otherwise see nothing wrong until then.
// Only the contender right behind the holder asks, so a long queue costs
// one read per period. It returns when ctx ends.
func watchHolder(ctx context.Context, w engine.HolderWatcher, dir string, every time.Duration, sl *statusLine) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !sl.next() {
			continue
		}
		if l, err := w.HolderLingering(ctx, dir); err == nil {
			sl.holderLingering(l)
		}
	}
}
