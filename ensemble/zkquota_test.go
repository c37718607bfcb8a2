package ensemble

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
)

// The quota lines are ZooKeeper's, at most one a second, and every one
// is counted whether logged or not.
func TestZKQuotaLogBounded(t *testing.T) {
	var buf bytes.Buffer
	z := newZKQuotaLog(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Unix(1_700_000_000, 0)
	z.now = func() time.Time { return now }
	hard := tree.QuotaPassed{Path: "/app", What: tree.QuotaCount, Value: 4, Limit: 3, Hard: true}
	soft := tree.QuotaPassed{Path: "/app", What: tree.QuotaBytes, Value: 9, Limit: 4}
	z.note([]tree.QuotaPassed{hard, soft})
	for range 10 {
		now = now.Add(50 * time.Millisecond)
		z.note([]tree.QuotaPassed{soft})
	}
	now = now.Add(time.Second)
	z.note([]tree.QuotaPassed{hard})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "Quota exceeded: /app [current count=4, hardCountLimit=3]") || !strings.Contains(lines[0], "level=WARN") {
		t.Errorf("first line %q", lines[0])
	}
	if !strings.Contains(lines[1], "suppressed_since_last=11") {
		t.Errorf("second line %q does not count the 11 left out", lines[1])
	}
	if h, s := z.counts(); h != 2 || s != 11 {
		t.Errorf("counted %v hard, %v soft; want 2, 11", h, s)
	}
}
