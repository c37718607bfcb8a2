package state

import (
	"strings"
	"testing"
	"time"
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("time zone %s: %v", name, err)
	}
	return loc
}

func TestParseSchedule(t *testing.T) {
	berlin := mustLoc(t, "Europe/Berlin")
	from := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC) // the day before Berlin's spring forward
	for _, c := range []struct {
		spec, tz string
		from     time.Time
		want     []time.Time // the next firings from from
		err      string      // a substring of the error, when it must fail
	}{
		{spec: "*/15 * * * *", from: from, want: []time.Time{from.Add(15 * time.Minute), from.Add(30 * time.Minute)}},
		{spec: "30 12 * * * *", from: from, want: []time.Time{from.Add(12*time.Minute + 30*time.Second), from.Add(time.Hour + 12*time.Minute + 30*time.Second)}}, // seconds first
		{spec: "@hourly", from: from, want: []time.Time{from.Add(time.Hour)}},
		{spec: "@every 10m", from: from.Add(time.Minute), want: []time.Time{from.Add(10 * time.Minute), from.Add(20 * time.Minute)}},
		{spec: "@every 7s", from: time.Unix(20, 0), want: []time.Time{time.Unix(21, 0), time.Unix(28, 0)}},
		{spec: "0 3 * * *", tz: "Europe/Berlin", from: from, want: []time.Time{
			time.Date(2026, 3, 29, 3, 0, 0, 0, berlin), // spring forward: 03:00 follows 01:59:59, and exists
			time.Date(2026, 3, 30, 3, 0, 0, 0, berlin),
		}},
		{spec: "CRON_TZ=Europe/Berlin 0 3 * * *", from: from, want: []time.Time{time.Date(2026, 3, 29, 3, 0, 0, 0, berlin)}},
		{spec: "TZ=UTC 0 3 * * *", tz: "Europe/Berlin", from: from, want: []time.Time{time.Date(2026, 3, 29, 3, 0, 0, 0, time.UTC)}},
		{spec: "", err: "empty schedule"},
		{spec: "   ", err: "empty schedule"},
		{spec: "61 * * * *", err: "above maximum"},
		{spec: "0 3 31 2 *", err: "never fires"},
		{spec: "0 0 30 2 *", err: "never fires"},
		{spec: "0 0 31 4,6,9,11 *", err: "never fires"},
		{spec: "0 0 29 2 *", from: from, want: []time.Time{time.Date(2028, 2, 29, 0, 0, 0, 0, time.Local)}}, // every fourth year fires
		{spec: "* * * * * * *", err: "expected 5 to 6 fields"},
		{spec: "@bogus", err: "unrecognized descriptor"},
		{spec: "@every 0s", err: "at least 1s"},
		{spec: "@every -5m", err: "at least 1s"},
		{spec: "@every 1500ms", err: "whole number of seconds"},
		{spec: "@every soon", err: "@every soon"},
		{spec: "CRON_TZ=UTC @every 0s", err: "at least 1s"},
		{spec: "0 3 * * *", tz: "Mars/Olympus", err: "Mars/Olympus"},
	} {
		s, err := ParseSchedule(c.spec, c.tz)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseSchedule(%q, %q) = %v, want an error with %q", c.spec, c.tz, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseSchedule(%q, %q): %v", c.spec, c.tz, err)
			continue
		}
		at := c.from
		for i, want := range c.want {
			at = s.Next(at)
			if !at.Equal(want) {
				t.Errorf("ParseSchedule(%q, %q): firing %d after %v = %v, want %v", c.spec, c.tz, i+1, c.from, at, want)
				break
			}
		}
	}
}

func TestStripTZ(t *testing.T) {
	for in, want := range map[string]string{
		"CRON_TZ=UTC @every 5s":      "@every 5s",
		"TZ=Europe/Berlin 0 3 * * *": "0 3 * * *",
		"  CRON_TZ=UTC 0 * * * *":    "0 * * * *",
		"0 3 * * *":                  "0 3 * * *",
		"CRON_TZ=UTC":                "CRON_TZ=UTC", // nothing after it: left to the parser to refuse
		" @daily ":                   "@daily",
	} {
		if got, _ := stripTZ(in); got != want {
			t.Errorf("stripTZ(%q) = %q, want %q", in, got, want)
		}
	}
}

// @every fires at multiples of its period since the epoch, whatever time
// it is asked from, in the asker's location.
func TestAlignedEvery(t *testing.T) {
	berlin := mustLoc(t, "Europe/Berlin")
	for _, c := range []struct {
		d        time.Duration
		from     time.Time
		want     time.Time
		location *time.Location
	}{
		{time.Minute, time.Unix(59, 0), time.Unix(60, 0), time.Local},
		{time.Minute, time.Unix(60, 0), time.Unix(120, 0), time.Local}, // strictly after
		{time.Minute, time.Unix(60, 1), time.Unix(120, 0), time.Local},
		{7 * time.Second, time.Unix(1_000_000_000, 0), time.Unix(1_000_000_001, 0), time.Local}, // 1e9 = 7·142857142 + 6
		{time.Hour, time.Date(2026, 1, 1, 10, 30, 0, 0, berlin), time.Date(2026, 1, 1, 11, 0, 0, 0, berlin), berlin},
		{24 * time.Hour, time.Date(2026, 1, 1, 10, 30, 0, 0, berlin), time.Date(2026, 1, 2, 1, 0, 0, 0, berlin), berlin}, // midnight UTC
	} {
		got := alignedEvery{c.d}.Next(c.from)
		if !got.Equal(c.want) || got.Location() != c.from.Location() {
			t.Errorf("every %v after %v = %v, want %v in %v", c.d, c.from, got, c.want, c.from.Location())
		}
	}
}

func TestLatestMissed(t *testing.T) {
	j := mustSchedule(t, "@every 10s", "")
	now := time.Unix(1_000_000_005, 0)
	for _, c := range []struct {
		now    time.Time
		window time.Duration
		want   time.Time
		ok     bool
	}{
		{now, time.Minute, time.Unix(1_000_000_000, 0), true},
		{now, 5*time.Second + 1, time.Unix(1_000_000_000, 0), true},
		{now, 5 * time.Second, time.Time{}, false}, // (now-window, now]: the window's start is out
		{now, time.Second, time.Time{}, false},
		{time.Unix(1_000_000_000, 0), time.Second, time.Unix(1_000_000_000, 0), true}, // a firing at now is in
	} {
		got, ok := LatestMissed(j, c.now, c.window)
		if ok != c.ok || !got.Equal(c.want) {
			t.Errorf("latestMissed(%v, %v) = %v %v, want %v %v", c.now.Unix(), c.window, got.Unix(), ok, c.want.Unix(), c.ok)
		}
	}
}

// After a firing, a host that woke late still has only one firing in
// hand: the next after the one fired, or after now if that passed too.
func TestNextAfter(t *testing.T) {
	j := mustSchedule(t, "@every 10s", "")
	at := time.Unix(100, 0)
	for _, c := range []struct {
		now, want time.Time
	}{
		{time.Unix(100, 0), time.Unix(110, 0)},
		{time.Unix(109, 0), time.Unix(110, 0)},
		{time.Unix(110, 0), time.Unix(110, 0)}, // due now: fired next round
		{time.Unix(111, 0), time.Unix(120, 0)}, // 110 slept through: missed
		{time.Unix(145, 0), time.Unix(150, 0)},
	} {
		if got := NextAfter(j, at, c.now); !got.Equal(c.want) {
			t.Errorf("nextAfter(100, now %d) = %d, want %d", c.now.Unix(), got.Unix(), c.want.Unix())
		}
	}
}

// Jitter offsets are the same for a firing wherever they are computed,
// lie in [0, jitter), and differ between firings.
func TestJitterOffset(t *testing.T) {
	const jitter = 5 * time.Minute
	offset := func(job string, at time.Time) time.Duration { return JitterOffset(job, at, jitter) }
	base := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	seen := map[time.Duration]bool{}
	sameAsOther := 0
	for i := range 200 {
		at := base.Add(time.Duration(i) * time.Hour)
		o := offset("backup", at)
		if o < 0 || o >= jitter {
			t.Fatalf("offset of %v is %v, outside [0, %v)", at, o, jitter)
		}
		if again := offset("backup", at.In(time.FixedZone("x", 3600))); again != o {
			t.Fatalf("offset of %v: %v, then %v computed elsewhere", at, o, again)
		}
		if offset("backup2", at) == o {
			sameAsOther++
		}
		seen[o] = true
	}
	if len(seen) < 190 || sameAsOther > 5 {
		t.Errorf("offsets spread poorly: %d distinct of 200, %d equal to another job's", len(seen), sameAsOther)
	}
	// Successive firings scatter over the window: rising and falling
	// steps alike, not a drift in one direction.
	up := 0
	for i := 1; i < 200; i++ {
		if offset("backup", base.Add(time.Duration(i)*time.Hour)) > offset("backup", base.Add(time.Duration(i-1)*time.Hour)) {
			up++
		}
	}
	if up < 70 || up > 130 {
		t.Errorf("of 199 successive offsets %d rose: they drift instead of scattering", up)
	}
	if JitterOffset("backup", base, 0) != 0 {
		t.Error("no jitter, yet an offset")
	}
}
