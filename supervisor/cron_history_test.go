package supervisor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// Separate history limits on each engine: records written as hosts
// write them, pruned as a host prunes after a firing. The kind limits
// read the records only once enough new ones came (the slack), and
// records younger than the horizon stay.
func TestCronHistoryLimits(t *testing.T) {
	forEachBackend(t, cronHistoryLimits)
}

func cronHistoryLimits(t *testing.T, b *backend) {
	obs := cronObserver(t, b)
	c := obs.conn
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := cronRoot(b, "cron-history")
	firings := root + "/nightly/firings"
	if err := c.EnsureFolder(ctx, firings); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Second)
	add := func(i int, result string) {
		zero, one := 0, 1
		r := state.FiringRecord{Job: "nightly", Scheduled: base.Add(time.Duration(i) * time.Minute), State: state.FiringDone, ExitCode: &zero}
		switch result {
		case "failed":
			r.ExitCode = &one
		case "lost", "skipped":
			r.State, r.ExitCode = state.FiringState(result), nil
		}
		b, _ := json.Marshal(r)
		if _, _, err := c.Create(ctx, path.Join(firings, fmt.Sprintf("%013d", r.Scheduled.Unix())), b, engine.Persistent); err != nil {
			t.Fatal(err)
		}
	}
	left := func() []string {
		var out []string
		for _, r := range cronHistory(t, obs, root, "nightly") {
			out = append(out, fmt.Sprintf("%d:%s", int(r.Scheduled.Sub(base)/time.Minute), state.ResultOf(r)))
		}
		return out
	}
	kinds := []string{"done", "failed", "done", "skipped", "lost", "done", "done", "failed", "done", "done"}
	for i, k := range kinds {
		add(i, k)
	}
	// Everything is older than the horizon but the last two.
	horizon := base.Add(8 * time.Minute)
	counted := supervisor.PruneFirings(ctx, c, root, "nightly", 100, 2, 1, horizon, -1)
	want := []string{"3:skipped", "7:failed", "8:done", "9:done"}
	if got := left(); !slices.Equal(got, want) || counted != len(want) {
		t.Fatalf("after pruning with 2 successful and 1 failed kept: %v (counted %d), want %v", got, counted, want)
	}
	// One more record is within the slack (1): not read, not pruned.
	add(10, "failed")
	if n := supervisor.PruneFirings(ctx, c, root, "nightly", 100, 2, 1, base.Add(11*time.Minute), counted); n != counted {
		t.Errorf("a record within the slack started a count by kind (%d → %d)", counted, n)
	}
	add(11, "done")
	counted = supervisor.PruneFirings(ctx, c, root, "nightly", 100, 2, 1, base.Add(12*time.Minute), counted)
	want = []string{"3:skipped", "9:done", "10:failed", "11:done"}
	if got := left(); !slices.Equal(got, want) || counted != len(want) {
		t.Errorf("after the next pass: %v (counted %d), want %v", got, counted, want)
	}
	// The total limit goes by name alone, without reads.
	supervisor.PruneFirings(ctx, c, root, "nightly", 2, 0, 0, base.Add(12*time.Minute), -1)
	if got, want := left(), []string{"10:failed", "11:done"}; !slices.Equal(got, want) {
		t.Errorf("after pruning to 2 in all: %v, want %v", got, want)
	}
}
