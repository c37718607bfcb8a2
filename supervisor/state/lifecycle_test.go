package state

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Made-up times: nothing here reads a clock.
var (
	t0    = time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	hostA = Claimant{Host: "a", PID: 10, HostNode: "a-10-1", Nonce: "n1"}
	hostB = Claimant{Host: "b", PID: 20, HostNode: "b-20-2", Nonce: "n2"}
)

func code(n int) *int { return &n }

func running(attempt int) FiringRecord {
	s := Claim("nightly", t0, "", hostA, t0)
	r := Start(s.Rec, 77, t0.Add(time.Second)).Rec
	r.Attempt = attempt
	return r
}

func mustSchedule(t *testing.T, spec, tz string) Schedule {
	t.Helper()
	s, err := ParseSchedule(spec, tz)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRuleClaim(t *testing.T) {
	s := Claim("nightly", t0.In(time.FixedZone("x", 3600)), "", hostA, t0.Add(2*time.Second))
	r := s.Rec
	if s.Write != Create || !s.Run || s.Ended {
		t.Fatalf("claim step %+v: want a create that gives a run", s)
	}
	if r.State != FiringClaimed || r.Attempt != 1 || r.HostNode != hostA.HostNode || r.Nonce != hostA.Nonce ||
		!r.Scheduled.Equal(t0) || r.Scheduled.Location() != time.UTC || !r.Claimed.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("claimed record %+v", r)
	}
}

// The skew guard: every host names a firing by its scheduled time, so a
// host whose clock lags claims the same record, with a create that fails.
func TestRuleSkewGuard(t *testing.T) {
	early := Claim("nightly", t0, "", hostA, t0)
	late := Claim("nightly", t0, "", hostB, t0.Add(40*time.Second))
	if FiringName(early.Rec.Scheduled) != FiringName(late.Rec.Scheduled) || late.Write != Create {
		t.Fatal("a lagging host must contend for the same record, with a create")
	}
	// A firing older than the prune horizon is not run again when lost:
	// its record may be gone soon, and a lagging host would run it anew.
	r := running(1)
	s, kept := LoseWithHost(r, hostB, false, t0.Add(PruneHorizon+time.Minute), Rules{RetryLost: 3})
	if !kept || s.Rec.State != FiringLost || s.Run {
		t.Fatalf("a lost firing past the horizon: %+v, want lost and not run", s)
	}
	s, _ = LoseWithHost(r, hostB, false, t0.Add(PruneHorizon+time.Minute), Rules{RetryLost: 3, CatchUp: 2 * time.Hour})
	if s.Rec.State != FiringClaimed {
		t.Fatalf("a catch-up window longer than the horizon keeps it: %+v", s.Rec)
	}
	if got := KeptFrom(t0, 0); !got.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("KeptFrom %v", got)
	}
}

func TestRuleOverlap(t *testing.T) {
	for _, c := range []struct {
		overlap       string
		try, replaces bool
	}{
		{OverlapSkip, true, false},
		{OverlapQueue, false, false},
		{OverlapReplace, false, true},
	} {
		try, rep := Acquisition(c.overlap)
		if try != c.try || rep != c.replaces {
			t.Errorf("%s: try %v replace %v", c.overlap, try, rep)
		}
	}
	// skip: the lock was held.
	s := Skip(Claim("j", t0, "", hostA, t0).Rec, Rules{})
	if s.Rec.State != FiringSkipped || s.Rec.Reason != ReasonSkipped || !s.Ended || s.Hook != NoHook || ResultOf(s.Rec) != ResultSkipped {
		t.Fatalf("skip: %+v", s)
	}
}

func TestRuleReplace(t *testing.T) {
	by := Claim("j", t0.Add(time.Minute), "", hostB, t0.Add(time.Minute)).Rec
	now := t0.Add(time.Minute + time.Second)
	for _, c := range []struct {
		name string
		old  FiringRecord
		ok   bool
	}{
		{"running earlier", running(1), true},
		{"claimed earlier", Claim("j", t0, "", hostA, t0).Rec, true},
		{"its own record", by, false},
		{"ended earlier", Finish(running(1), "x", Exit{Code: 0}, t0.Add(5*time.Second), Rules{}).Rec, false},
		{"a later one", Claim("j", t0.Add(2*time.Minute), "", hostA, t0).Rec, false},
	} {
		s, ok := Replace(c.old, by, now, Rules{})
		if ok != c.ok {
			t.Errorf("%s: applies %v, want %v", c.name, ok, c.ok)
			continue
		}
		if ok && (s.Rec.State != FiringReplaced || !s.Rec.End.Equal(now) || s.Write != Update || !s.Ended || s.Hook != NoHook ||
			s.Rec.Reason != "replaced by the firing of "+by.Scheduled.Format(time.RFC3339)) {
			t.Errorf("%s: %+v", c.name, s)
		}
	}
}

func TestRuleCatchUp(t *testing.T) {
	s := mustSchedule(t, "0 3 * * *", "UTC")
	now := t0.Add(40 * time.Minute)
	if at, ok := LatestMissed(s, now, time.Hour); !ok || !at.Equal(t0) {
		t.Fatalf("within the window: %v %v", at, ok)
	}
	if _, ok := LatestMissed(s, now, 30*time.Minute); ok {
		t.Fatal("a firing older than the window is not caught up")
	}
	every := mustSchedule(t, "@every 10m", "")
	if at, ok := LatestMissed(every, t0.Add(25*time.Minute), time.Hour); !ok || !at.Equal(t0.Add(20*time.Minute)) {
		t.Fatalf("only the latest missed firing is run: %v", at)
	}
	c := Claim("j", t0, ReasonCatchUp, hostA, now)
	if c.Rec.Reason != "catch-up" || c.Write != Create {
		t.Fatalf("catch-up claim %+v", c)
	}
	// A host that wakes late has one firing in hand, not each it slept
	// through.
	if n := NextAfter(every, t0, t0.Add(35*time.Minute)); !n.Equal(t0.Add(40 * time.Minute)) {
		t.Fatalf("NextAfter %v", n)
	}
	if n := NextAfter(every, t0, t0.Add(time.Minute)); !n.Equal(t0.Add(10 * time.Minute)) {
		t.Fatalf("NextAfter %v", n)
	}
}

func TestRuleFinishAndResult(t *testing.T) {
	rules := Rules{}
	for _, c := range []struct {
		name   string
		exit   Exit
		state  FiringState
		result Result
		hook   Hook
	}{
		{"exit 0", Exit{Code: 0}, FiringDone, ResultDone, OnSuccess},
		{"exit 3 is failed everywhere", Exit{Code: 3}, FiringDone, ResultFailed, OnFailure},
		{"killed by a signal", Exit{Code: 137, Signal: "SIGKILL"}, FiringDone, ResultFailed, OnFailure},
		{"session lost", Exit{Code: 76, Cause: SessionLost, Err: "session lost"}, FiringLost, ResultLost, OnFailure},
		{"lock lost", Exit{Code: 75, Cause: LockLost, Err: "lock lost"}, FiringLost, ResultLost, OnFailure},
		// max-runtime: stopped, recorded timed-out.
		{"max-runtime", Exit{Code: 143, Cause: TimedOut, Err: "ran past max-runtime 1m0s"}, FiringTimedOut, ResultTimedOut, OnFailure},
	} {
		end := t0.Add(time.Minute)
		s := Finish(running(1), "0001", c.exit, end, rules)
		if s.Rec.State != c.state || ResultOf(s.Rec) != c.result || s.Hook != c.hook || !s.Ended || s.Retry != nil {
			t.Errorf("%s: state %s result %s hook %d retry %v", c.name, s.Rec.State, ResultOf(s.Rec), s.Hook, s.Retry)
		}
		if *s.Rec.ExitCode != c.exit.Code || !s.Rec.End.Equal(end) || s.Rec.Signal != c.exit.Signal || s.Rec.Reason != c.exit.Err {
			t.Errorf("%s: record %+v", c.name, s.Rec)
		}
	}
	if ResultOf(FiringRecord{State: FiringDone}) != ResultFailed {
		t.Error("a done record without an exit code is failed")
	}
	if ResultOf(FiringRecord{State: FiringRunning}) != Result(FiringRunning) {
		t.Error("a firing in flight is its state")
	}
}

func TestRuleRetryFailedWithBackoff(t *testing.T) {
	rules := Rules{RetryFailed: 2, RetryBackoff: 10 * time.Second}
	end := t0.Add(time.Minute)
	s := Finish(running(1), "0001", Exit{Code: 3}, end, rules)
	if s.Retry == nil || s.Hook != NoHook {
		t.Fatalf("first failure: retry %v hook %d, want a retry and no hook yet", s.Retry, s.Hook)
	}
	req := *s.Retry
	if req.Kind != RequestRetry || req.Attempt != 1 || req.Firing != "0001" || req.By != hostA.HostNode ||
		!req.NotBefore.Equal(end.Add(10*time.Second)) || !req.Times[0].Equal(t0) {
		t.Fatalf("retry request %+v", req)
	}
	// The backoff: not due before NotBefore.
	if d := RetryDue(req, end.Add(4*time.Second)); d != 6*time.Second {
		t.Fatalf("due in %v, want 6s", d)
	}
	if d := RetryDue(req, end.Add(time.Hour)); d != 0 {
		t.Fatalf("due in %v once passed", d)
	}
	if RetryDue(CronRequest{Kind: RequestTrigger, NotBefore: end.Add(time.Hour)}, end) != 0 {
		t.Fatal("a trigger is due at once")
	}
	// The request is filed before the failure is recorded.
	if !RetryAwaitsRecord(running(1), req) || RetryAwaitsRecord(s.Rec, req) {
		t.Fatal("a retry waits while the failed attempt's record still says running, and no longer")
	}
	next, ok := RetryFailed(s.Rec, req, hostB, end.Add(11*time.Second))
	if !ok || !next.Run || !next.Retried || next.Write != Update {
		t.Fatalf("retry step %+v %v", next, ok)
	}
	r := next.Rec
	if r.State != FiringClaimed || r.Attempt != 2 || r.HostNode != hostB.HostNode || r.ExitCode != nil || r.Token != 0 ||
		!r.End.IsZero() || r.Output != "" || len(r.Earlier) != 1 || r.Earlier[0].Reason != "exited 3" || *r.Earlier[0].ExitCode != 3 {
		t.Fatalf("retried record %+v", r)
	}
	if _, ok := RetryFailed(r, req, hostB, end); ok {
		t.Fatal("a second host must not take the same retry")
	}
	// The last attempt that fails asks for nothing more, and runs on-failure.
	last := Finish(running(3), "0001", Exit{Code: 3}, end, rules)
	if last.Retry != nil || last.Hook != OnFailure {
		t.Fatalf("third failure with 2 retries: retry %v hook %d", last.Retry, last.Hook)
	}
	// A success needs no retry.
	if ok := Finish(running(1), "0001", Exit{Code: 0}, end, rules); ok.Retry != nil || ok.Hook != OnSuccess {
		t.Fatal("exit 0 is not retried")
	}
}

func TestRuleRetryLost(t *testing.T) {
	live := func(n string) bool { return n == hostB.HostNode }
	r := running(1)
	if !LostWithHost(r, live) {
		t.Fatal("a running firing whose host record is gone is lost")
	}
	if LostWithHost(r, func(string) bool { return true }) || LostWithHost(Finish(r, "x", Exit{}, t0, Rules{}).Rec, live) ||
		LostWithHost(FiringRecord{State: FiringRunning}, live) {
		t.Fatal("only a firing in flight whose named host is gone is lost")
	}
	now := t0.Add(time.Minute)
	s, ok := LoseWithHost(r, hostB, false, now, Rules{RetryLost: 1})
	if !ok || !s.Run || !s.Retried || s.Rec.State != FiringClaimed || s.Rec.Attempt != 2 || s.Rec.HostNode != hostB.HostNode ||
		len(s.Rec.Earlier) != 1 || s.Rec.Earlier[0].LostBy != hostB.HostNode || !s.Rec.Earlier[0].Lost.Equal(now) || s.Rec.Earlier[0].Token != 77 {
		t.Fatalf("retry-lost: %+v", s)
	}
	again, _ := LoseWithHost(s.Rec, hostA, false, now.Add(time.Minute), Rules{RetryLost: 1})
	if again.Rec.State != FiringLost || again.Run || !again.Ended || again.Hook != OnFailure || len(again.Rec.Earlier) != 2 {
		t.Fatalf("out of retries: %+v", again)
	}
	if _, ok := LoseWithHost(r, hostB, true, now, Rules{RetryLost: 1}); ok {
		t.Fatal("a stopping host leaves a retry to a host that stays")
	}
	if s, ok := LoseWithHost(r, hostB, true, now, Rules{}); !ok || s.Rec.State != FiringLost {
		t.Fatal("a stopping host still records a loss with no retry")
	}
}

func TestRuleJitter(t *testing.T) {
	if JitterOffset("j", t0, 0) != 0 {
		t.Fatal("no jitter, no offset")
	}
	seen := map[time.Duration]bool{}
	for i := range 50 {
		at := t0.Add(time.Duration(i) * time.Minute)
		d := JitterOffset("j", at, 30*time.Second)
		if d < 0 || d >= 30*time.Second {
			t.Fatalf("offset %v out of [0, 30s)", d)
		}
		if d != JitterOffset("j", at, 30*time.Second) {
			t.Fatal("every host derives the same offset")
		}
		seen[d.Truncate(3*time.Second)] = true
	}
	if len(seen) < 5 {
		t.Fatalf("offsets do not scatter: %v", seen)
	}
	if JitterOffset("j", t0, time.Hour) == JitterOffset("k", t0, time.Hour) {
		t.Fatal("jobs get their own offsets")
	}
}

func TestRulePause(t *testing.T) {
	by := CronControl{By: "ops", At: t0.Add(-time.Hour)}
	s := Pause(Claim("j", t0, "", hostA, t0).Rec, by, Rules{})
	if s.Rec.State != FiringPaused || ResultOf(s.Rec) != ResultPaused || !s.Ended || s.Hook != NoHook || s.Write != Update ||
		s.Rec.Reason != "job paused by ops at "+by.At.Format(time.RFC3339) {
		t.Fatalf("pause: %+v", s)
	}
}

func TestRuleTriggerAndBackfill(t *testing.T) {
	trig := Plan(CronRequest{Kind: RequestTrigger, Times: []time.Time{t0}, By: "ops"}, "0000000007")
	if len(trig) != 1 || trig[0].Name != FiringName(t0)+"-t0000000007" || trig[0].Reason != "triggered by ops" {
		t.Fatalf("trigger plan %+v", trig)
	}
	times := []time.Time{t0.Add(2 * time.Hour), t0, t0.Add(time.Hour)}
	back := Plan(CronRequest{Kind: RequestBackfill, Times: times, By: "ops"}, "0000000008")
	if len(back) != 3 || !back[0].At.Equal(t0) || !back[2].At.Equal(t0.Add(2*time.Hour)) ||
		back[1].Name != FiringName(t0.Add(time.Hour)) || back[1].Reason != "backfill requested by ops" {
		t.Fatalf("backfill plan, oldest first, named as scheduled: %+v", back)
	}
	// A backfill runs each scheduled time with no record, and refuses a
	// range with too many.
	s := mustSchedule(t, "0 * * * *", "UTC")
	have := map[string]bool{FiringName(t0.Add(time.Hour)): true}
	got, err := Missed(s, t0, t0.Add(3*time.Hour), have, 10)
	want := []time.Time{t0, t0.Add(2 * time.Hour), t0.Add(3 * time.Hour)}
	if err != nil || !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Fatalf("missed %v %v", got, err)
	}
	if _, err := Missed(s, t0, t0.Add(3*time.Hour), have, 2); err == nil {
		t.Fatal("more than the limit is refused")
	}
}

func TestRuleHistory(t *testing.T) {
	name := func(t time.Time) string { return FiringName(t) }
	oldest := t0.Add(10 * time.Minute)
	var names []string
	for i := range 8 {
		names = append(names, name(t0.Add(time.Duration(i)*time.Minute)))
	}
	l := HistoryLimits{Total: 3}
	drop, rest := l.ExpiredByName(names, oldest)
	if len(drop) != 5 || len(rest) != 3 || drop[0] != names[0] {
		t.Fatalf("by name: drop %v rest %v", drop, rest)
	}
	// Records younger than the horizon stay whatever the total.
	drop, _ = l.ExpiredByName(names, t0.Add(2*time.Minute))
	if len(drop) != 2 {
		t.Fatalf("young records pruned: %v", drop)
	}

	// By kind: success and failed limits; skipped and paused count toward
	// the total only; a firing in flight is never pruned by kind.
	kinds := []FiringRecord{
		Finish(running(1), "", Exit{Code: 0}, t0, Rules{}).Rec,
		Finish(running(1), "", Exit{Code: 1}, t0, Rules{}).Rec,
		Finish(running(1), "", Exit{Code: 0}, t0, Rules{}).Rec,
		Skip(running(1), Rules{}).Rec,
		Lose(running(1), "x", Rules{}).Rec,
		running(1),
		Finish(running(1), "", Exit{Code: 0}, t0, Rules{}).Rec,
		{State: FiringUnreadable},
	}
	want := []HistoryKind{KindSuccess, KindFailed, KindSuccess, KindTotal, KindFailed, KindTotal, KindSuccess, KindFailed}
	var recs []StoredFiring
	for i, r := range kinds {
		if k := ResultOf(r).Kind(); k != want[i] {
			t.Errorf("record %d (%s): kind %d, want %d", i, ResultOf(r), k, want[i])
		}
		recs = append(recs, StoredFiring{Name: names[i], Version: int64(i), Rec: r})
	}
	lk := HistoryLimits{Total: 100, Success: 1, Failed: 2}
	gone := lk.ExpiredByKind(recs, oldest)
	var got []string
	for _, g := range gone {
		got = append(got, g.Name)
	}
	// Newest first: success kept at 6, dropped 2 and 0; failed kept at
	// 7 and 4, dropped 1.
	if fmt.Sprint(got) != fmt.Sprint([]string{names[0], names[1], names[2]}) {
		t.Fatalf("by kind dropped %v", got)
	}
	if len(lk.ExpiredByKind(recs, t0)) != 0 {
		t.Fatal("records younger than the horizon stay whatever the kind limits")
	}
	// The count by kind runs again once a tenth more records came.
	lk = HistoryLimits{Total: 100, Success: 50, Failed: 50}
	for _, c := range []struct {
		n, counted int
		due        bool
	}{{60, -1, true}, {60, 55, false}, {65, 55, true}, {40, -1, false}} {
		if got := lk.CountDue(c.n, c.counted); got != c.due {
			t.Errorf("CountDue(%d, %d) = %v", c.n, c.counted, got)
		}
	}
	if (HistoryLimits{Total: 5}).CountDue(100, -1) {
		t.Error("no kind limits, no count")
	}
}

func TestOneScheduleParser(t *testing.T) {
	for _, bad := range []string{"", "@every 1500ms", "@every 0s", "@every -5m", "61 * * * *", "@every x"} {
		if _, err := ParseSchedule(bad, ""); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := ParseSchedule("* * * * *", "Nowhere/Else"); err == nil {
		t.Error("an unknown zone is accepted")
	}
	s := mustSchedule(t, "CRON_TZ=Europe/Berlin 0 3 * * *", "")
	if s.Zone.String() != "Europe/Berlin" {
		t.Fatalf("zone %v", s.Zone)
	}
	if n := s.Next(t0); n.UTC().Hour() != 2 {
		t.Fatalf("03:00 Berlin is 02:00 UTC in winter, got %v", n.UTC())
	}
	if s := mustSchedule(t, "0 3 * * *", "Asia/Tokyo"); s.Zone.String() != "Asia/Tokyo" {
		t.Fatalf("tz zone %v", s.Zone)
	}
	// @every is aligned to the epoch: every host gets the same instants.
	e := mustSchedule(t, "@every 7m", "")
	a, b := e.Next(t0.Add(3*time.Second)), e.Next(t0.Add(5*time.Second))
	if !a.Equal(b) || a.Unix()%(7*60) != 0 {
		t.Fatalf("@every not aligned: %v %v", a, b)
	}
}
