package state

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestCronPaths(t *testing.T) {
	p := CronPaths{Root: "/coordrun/cron", Job: "nightly"}
	at := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	for got, want := range map[string]string{
		p.Dir():       "/coordrun/cron/nightly",
		p.Firings():   "/coordrun/cron/nightly/firings",
		p.Hosts():     "/coordrun/cron/nightly/hosts",
		p.Lock():      "/coordrun/cron/nightly/lock",
		p.Firing(at):  "/coordrun/cron/nightly/firings/0001796094000",
		p.Host("h-1"): "/coordrun/cron/nightly/hosts/h-1",
	} {
		if got != want {
			t.Errorf("path %q, want %q", got, want)
		}
	}
	// A firing is its scheduled second, whatever the location or the
	// sub-second part: every host names it alike.
	berlin := time.FixedZone("CET", 3600)
	if a, b := FiringName(at), FiringName(at.In(berlin).Add(999*time.Millisecond)); a != b {
		t.Errorf("one firing named %s and %s", a, b)
	}
}

// Firing names sort as their times, which pruning and history rely on.
func TestFiringNamesSort(t *testing.T) {
	times := []time.Time{time.Unix(9, 0), time.Unix(1_000_000_000, 0), time.Unix(99_999, 0), time.Unix(4_102_444_800, 0)}
	var names []string
	for _, t := range times {
		names = append(names, FiringName(t))
	}
	sort.Strings(names)
	for i, want := range []int64{9, 99_999, 1_000_000_000, 4_102_444_800} {
		if names[i] != FiringName(time.Unix(want, 0)) {
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
	sched, trig, next := FiringName(at), TriggeredName(at, "0000000007"), FiringName(at.Add(time.Second))
	names := []string{next, trig, sched}
	sort.Strings(names)
	if names[0] != sched || names[1] != trig || names[2] != next {
		t.Errorf("sorted %v, want the scheduled record, the triggered one, then the next second's", names)
	}
	for _, n := range []string{sched, trig} {
		if secs, ok := FiringSecond(n); !ok || secs != at.Unix() {
			t.Errorf("FiringSecond(%q) = %d, %v; want %d", n, secs, ok, at.Unix())
		}
	}
	if _, ok := FiringSecond("t-0000000001"); ok {
		t.Error("a request node's name read as a firing's second")
	}
}

// The kind limits keep the newest of each kind, count the records younger
// than the horizon without dropping them, and never count or drop what is
// neither (skipped, paused, still running).
func TestExpiredByKind(t *testing.T) {
	zero, one := 0, 1
	rec := func(secs int64, st FiringState, exit *int) StoredFiring {
		return StoredFiring{Name: FiringName(time.Unix(secs, 0)), Rec: FiringRecord{State: st, ExitCode: exit}}
	}
	// Oldest first: 10 s apart; the horizon at 100 keeps 100 and later.
	recs := []StoredFiring{
		rec(10, FiringDone, &zero),    // success, 4th newest: dropped
		rec(20, FiringDone, &one),     // failed, 3rd newest: dropped
		rec(30, FiringRunning, nil),   // running: kept whatever its age
		rec(40, FiringSkipped, nil),   // counts toward the total only
		rec(50, FiringLost, nil),      // failed, 2nd newest: dropped
		rec(60, FiringDone, &zero),    // success, 3rd newest: dropped
		rec(70, FiringDone, &zero),    // success, 2nd newest: kept
		rec(80, FiringPaused, nil),    // total only
		rec(90, FiringTimedOut, nil),  // failed, newest: kept
		rec(100, FiringDone, &zero),   // success, newest: kept
		rec(110, FiringReplaced, nil), // failed but young: kept, and counts
	}
	names := func(fs []StoredFiring) []string {
		var out []string
		for _, f := range fs {
			secs, _ := FiringSecond(f.Name)
			out = append(out, strconv.FormatInt(secs, 10))
		}
		return out
	}
	for _, c := range []struct {
		l    HistoryLimits
		want string
	}{
		{HistoryLimits{Success: 2, Failed: 2}, "10 20 50 60"},
		{HistoryLimits{Success: 2}, "10 60"},
		{HistoryLimits{Failed: 1}, "20 50 90"},
		{HistoryLimits{Success: 100, Failed: 100}, ""},
	} {
		if got := strings.Join(names(c.l.ExpiredByKind(recs, time.Unix(100, 0))), " "); got != c.want {
			t.Errorf("limits %+v drop %q, want %q", c.l, got, c.want)
		}
	}
	if s := (HistoryLimits{Success: 3, Failed: 1}).Slack(); s != 1 {
		t.Errorf("slack of 4 kept records: %d, want 1", s)
	}
	if s := (HistoryLimits{Success: 100, Failed: 50}).Slack(); s != 15 {
		t.Errorf("slack of 150 kept records: %d, want 15", s)
	}
}
