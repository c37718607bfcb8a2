package supervisor_test

import (
	"context"
	"fmt"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
)

// The skew test's three clocks (−3 s, 0, +2.5 s) with retries and a
// pause: "@every 1s" where every third second's first attempt exits 3
// (retry-failed 1, retry-lost 1), and the job paused by hand for a few
// seconds in the middle. Every scheduled firing of the window has exactly
// one record; one claimed while the job was paused is recorded paused and
// never runs; the others end done, a failing one after exactly two runs
// (attempt 2, the first kept in earlier, a higher token), the rest after
// one: never more than retry-lost + retry-failed + 1.
func TestCronSkewRetriesPause(t *testing.T) {
	forEachCronBackend(t, cronSkewRetriesPause)
}

func cronSkewRetriesPause(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root := cronRoot(b, "cron-skew-retry")
	const job = "tick"
	const retryLost, retryFailed = 1, 1
	runs := r.path("runs.log")
	// Fails attempt 1 of every firing whose second is a multiple of 3.
	script := fmt.Sprintf(`echo "start $COORDRUN_SCHEDULED_TIME $(date +%%s%%N) $CRON_HOST $COORDRUN_FENCING_TOKEN $$" >> %s; `+
		`s=$(date -d "$COORDRUN_SCHEDULED_TIME" +%%s); [ "$COORDRUN_ATTEMPT" != 1 ] || [ $((s %% 3)) != 0 ] || exit 3`, runs)
	sink := &cronLogSink{}
	var hosts []*cronInProc
	for _, s := range cronSkews {
		hosts = append(hosts, cronStartHost(t, r, sink, cronHostSpec{label: s.label, skew: s.skew, root: root,
			jobs: func() []*supervisor.CronJob {
				return []*supervisor.CronJob{{Name: job, Spec: "@every 1s", Argv: []string{"/bin/sh", "-c", script},
					Overlap: state.OverlapQueue, RetryLost: retryLost, RetryFailed: retryFailed, RetryBackoff: 200 * time.Millisecond}}
			}}))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- cron hosts' log:\n%s", sink.String())
		}
	})
	cronAwaitHosts(t, obs, root, job, len(cronSkews))
	first := time.Now().Add(3 * time.Second).Truncate(time.Second).Add(time.Second)
	const n = 12
	last := first.Add((n - 1) * time.Second)
	fails := func(s time.Time) bool { return s.Unix()%3 == 0 }

	// Pause for 3 s from when the fast clock is a few firings in.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cronWaitFor(first.Add(time.Second))
	pauseFrom := time.Now()
	if ok, err := supervisor.PauseCron(ctx, obs.conn, root, job, "test"); err != nil || !ok {
		t.Fatalf("PauseCron = %v, %v", ok, err)
	}
	paused := time.Now()
	cronWaitFor(paused.Add(3 * time.Second))
	resumeFrom := time.Now()
	if ok, err := supervisor.ResumeCron(ctx, obs.conn, root, job); err != nil || !ok {
		t.Fatalf("ResumeCron = %v, %v", ok, err)
	}
	resumed := time.Now()

	var recs map[int64]state.FiringRecord
	settled := func(rec state.FiringRecord, ok bool) bool {
		if !ok {
			return false
		}
		res := state.ResultOf(rec)
		return res == "done" || res == "paused" || (res == "failed" && max(rec.Attempt, 1) > retryFailed)
	}
	testkit.WaitFor(t, time.Until(last)+3*time.Second+20*time.Second, "every firing of the window to end, retries too", func() bool {
		recs = cronByTime(cronHistory(t, obs, root, job))
		for s := first; !s.After(last); s = s.Add(time.Second) {
			if rec, ok := recs[s.Unix()]; !settled(rec, ok) {
				return false
			}
		}
		return true
	})
	for _, h := range hosts {
		h.stop()
	}

	starts := cronStarts(cronReadLog(t, runs))
	var nPaused, nRetried int
	for s := first; !s.After(last); s = s.Add(time.Second) {
		rec := recs[s.Unix()]
		ls := starts[s.Unix()]
		res := state.ResultOf(rec)
		if len(ls) > retryLost+retryFailed+1 {
			t.Errorf("firing %s ran %d times, more than retry-lost + retry-failed + 1", cronFmt(s), len(ls))
		}
		// The pause is read by the claimant right after its first claim
		// (a retry is not paused). The record's times are on its
		// claimant's skewed clock: compared with the pause, on the true
		// clock, they are taken back by that host's skew.
		claimed, ok := sink.claimedAt(s, 1)
		switch {
		case !ok:
			t.Errorf("firing %s: no host told of its first attempt's end", cronFmt(s))
		case claimed.After(paused) && claimed.Before(resumeFrom) && res != "paused":
			t.Errorf("firing %s claimed %s, while the job was paused (%s..%s), ended %s", cronFmt(s), cronFmt(claimed), cronFmt(paused), cronFmt(resumeFrom), res)
		case (claimed.Before(pauseFrom) || claimed.After(resumed)) && res == "paused":
			t.Errorf("firing %s claimed %s, outside the pause (%s..%s), recorded paused", cronFmt(s), cronFmt(claimed), cronFmt(pauseFrom), cronFmt(resumed))
		}
		if res == "paused" {
			nPaused++
			if len(ls) != 0 {
				t.Errorf("paused firing %s ran %d times", cronFmt(s), len(ls))
			}
			continue
		}
		want := 1
		if fails(s) {
			want = retryFailed + 1
		}
		if res != "done" || len(ls) != want || max(rec.Attempt, 1) != want || len(rec.Earlier) != want-1 {
			t.Errorf("firing %s: %s after %d runs, attempt %d, %d earlier; want done after %d", cronFmt(s), res, len(ls), rec.Attempt, len(rec.Earlier), want)
			continue
		}
		if want > 1 {
			nRetried++
			if e := rec.Earlier[0]; e.ExitCode == nil || *e.ExitCode != 3 || e.Token >= rec.Token {
				t.Errorf("firing %s: earlier attempt %+v, want exit 3 with a token below %d", cronFmt(s), e, rec.Token)
			}
			if !slices.IsSortedFunc(ls, func(a, b cronLine) int { return a.at.Compare(b.at) }) || ls[0].token >= ls[1].token {
				t.Errorf("firing %s: runs %+v, want rising tokens", cronFmt(s), ls)
			}
		}
	}
	if nPaused == 0 || nRetried == 0 {
		t.Errorf("%d paused and %d retried firings in the window: the test exercised neither", nPaused, nRetried)
	}
	t.Logf("%d firings %s..%s: %d paused, %d failed once and run again, the rest once", n, cronFmt(first), cronFmt(last), nPaused, nRetried)
}

// A host's one clock: the times it writes in a record are on the clock
// its schedule runs on, so a record says how late a firing started and
// how long it ran whatever the host's skew, and a retry waits its backoff
// on that clock too. Two hosts, each alone on its root, 90 minutes ahead
// and behind: the job fails its first attempt and is run again.
func TestCronOneClock(t *testing.T) {
	forEachCronBackend(t, cronOneClock)
}

func cronOneClock(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	const job, backoff = "tick", 300 * time.Millisecond
	sink := &cronLogSink{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- cron hosts' log:\n%s", sink.String())
		}
	})
	skews := map[string]time.Duration{cronRoot(b, "cron-clock-ahead"): 90 * time.Minute, cronRoot(b, "cron-clock-behind"): -90 * time.Minute}
	for root, skew := range skews {
		cronStartHost(t, r, sink, cronHostSpec{label: path.Base(root), skew: skew, root: root,
			jobs: func() []*supervisor.CronJob {
				return []*supervisor.CronJob{{Name: job, Spec: "@every 1s", Argv: []string{"/bin/sh", "-c", `[ "$COORDRUN_ATTEMPT" = 2 ]`},
					Overlap: state.OverlapQueue, RetryFailed: 1, RetryBackoff: backoff}}
			}})
	}
	for root, skew := range skews {
		cronAwaitHosts(t, obs, root, job, 1)
		var rec state.FiringRecord
		testkit.WaitFor(t, 20*time.Second, root+": a firing done at its second attempt", func() bool {
			for _, x := range cronHistory(t, obs, root, job) {
				if state.ResultOf(x) == state.ResultDone && x.Attempt == 2 && len(x.Earlier) == 1 {
					rec = x
					return true
				}
			}
			return false
		})
		first := rec.Earlier[0]
		// On one clock: a claim, start and end just after the scheduled
		// time, in order, each within a few seconds of it.
		late := func(at time.Time) time.Duration { return at.Sub(rec.Scheduled) }
		for what, at := range map[string]time.Time{"first start": first.Start, "first end": first.End, "claimed": rec.Claimed, "start": rec.Start, "end": rec.End} {
			if d := late(at); d < 0 || d > 5*time.Second {
				t.Errorf("%s (clock %v): firing %s: %s %v after its scheduled time, want within [0, 5s) on the host's one clock",
					root, skew, cronFmt(rec.Scheduled), what, ms(d))
			}
		}
		// Where the host's clock is: the record's times are on it.
		if off := rec.End.Sub(time.Now()) - skew; off > 0 || off < -20*time.Second {
			t.Errorf("%s: the record's end is %v off the host's clock (%v from the true clock)", root, ms(off), skew)
		}
		if gap := rec.Start.Sub(first.End); gap < backoff {
			t.Errorf("%s: attempt 2 started %v after attempt 1 ended, want at least the backoff %v", root, ms(gap), backoff)
		}
		t.Logf("%s (clock %v): attempt 1 ran %v→%v after its time, attempt 2 %v→%v", root, skew,
			ms(late(first.Start)), ms(late(first.End)), ms(late(rec.Start)), ms(late(rec.End)))
	}
}
