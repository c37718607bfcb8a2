package supervisor

import (
	"encoding/json"
	"sort"
	"testing"
	"time"
)

func TestCronPaths(t *testing.T) {
	p := cronPaths{root: "/coordrun/cron", job: "nightly"}
	at := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	for got, want := range map[string]string{
		p.dir():       "/coordrun/cron/nightly",
		p.firings():   "/coordrun/cron/nightly/firings",
		p.hosts():     "/coordrun/cron/nightly/hosts",
		p.lock():      "/coordrun/cron/nightly/lock",
		p.firing(at):  "/coordrun/cron/nightly/firings/0001796094000",
		p.host("h-1"): "/coordrun/cron/nightly/hosts/h-1",
	} {
		if got != want {
			t.Errorf("path %q, want %q", got, want)
		}
	}
	// A firing is its scheduled second, whatever the location or the
	// sub-second part: every host names it alike.
	berlin := time.FixedZone("CET", 3600)
	if a, b := firingName(at), firingName(at.In(berlin).Add(999*time.Millisecond)); a != b {
		t.Errorf("one firing named %s and %s", a, b)
	}
}

// Firing names sort as their times, which pruning and history rely on.
func TestFiringNamesSort(t *testing.T) {
	times := []time.Time{time.Unix(9, 0), time.Unix(1_000_000_000, 0), time.Unix(99_999, 0), time.Unix(4_102_444_800, 0)}
	var names []string
	for _, t := range times {
		names = append(names, firingName(t))
	}
	sort.Strings(names)
	for i, want := range []int64{9, 99_999, 1_000_000_000, 4_102_444_800} {
		if names[i] != firingName(time.Unix(want, 0)) {
			t.Errorf("sorted names %v: %d is not at %d", names, want, i)
		}
	}
}

// The record's states are the strings every reader (cron history, older
// hosts) knows.
func TestFiringRecordStates(t *testing.T) {
	for st, want := range map[FiringState]string{
		FiringClaimed: "claimed", FiringRunning: "running", FiringDone: "done",
		FiringSkipped: "skipped", FiringLost: "lost", FiringUnreadable: "unreadable",
	} {
		b, err := json.Marshal(FiringRecord{State: st})
		if err != nil {
			t.Fatal(err)
		}
		var back struct{ State string }
		if err := json.Unmarshal(b, &back); err != nil || back.State != want {
			t.Errorf("state %q encodes as %s", st, b)
		}
	}
}

// A triggered firing's record sorts right after the scheduled firing of
// its second, and every record name gives its second back, which pruning
// and history read.
func TestTriggeredNames(t *testing.T) {
	at := time.Unix(1_796_094_000, 0)
	sched, trig, next := firingName(at), triggeredName(at, "0000000007"), firingName(at.Add(time.Second))
	names := []string{next, trig, sched}
	sort.Strings(names)
	if names[0] != sched || names[1] != trig || names[2] != next {
		t.Errorf("sorted %v, want the scheduled record, the triggered one, then the next second's", names)
	}
	for _, n := range []string{sched, trig} {
		if secs, ok := firingSecond(n); !ok || secs != at.Unix() {
			t.Errorf("firingSecond(%q) = %d, %v; want %d", n, secs, ok, at.Unix())
		}
	}
	if _, ok := firingSecond("t-0000000001"); ok {
		t.Error("a request node's name read as a firing's second")
	}
}
