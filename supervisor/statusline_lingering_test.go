package supervisor

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// The waiting line on a terminal says when the holder looks gone, and
// forgets it when another holder comes.
func TestStatusLineLingering(t *testing.T) {
	var out bytes.Buffer
	sl := newStatusLine(&out, true, "nightly", slog.New(slog.DiscardHandler))
	first := engine.Status{Position: 1, Length: 2, HolderNode: "lock-a-1", Holder: state.HolderInfo{Host: "h1", PID: 7}}
	sl.update(first)
	if !sl.next() || strings.Contains(out.String(), "lingering") {
		t.Fatalf("a live holder: next %v, line %q", sl.next(), out.String())
	}
	sl.holderLingering("silent for 7s of its 10s timeout")
	if line := out.String()[strings.LastIndex(out.String(), "\r"):]; !strings.Contains(line, "held by h1 pid 7") || !strings.Contains(line, "(lingering: silent for 7s of its 10s timeout)") {
		t.Errorf("line %q", line)
	}
	sl.update(engine.Status{Position: 1, Length: 2, HolderNode: "lock-b-2", Holder: state.HolderInfo{Host: "h2", PID: 8}})
	if line := out.String()[strings.LastIndex(out.String(), "\r"):]; strings.Contains(line, "lingering") {
		t.Errorf("a new holder still called lingering: %q", line)
	}
	sl.update(engine.Status{Position: 0, Length: 1, HolderNode: engine.SemaphoreHeld})
	if sl.next() {
		t.Error("a semaphore's head asks about a holder")
	}
}
