package supervisor_test

// Tests of cron across hosts (supervisor.RunCron and `coordrun cron`):
// several hosts run the same schedule on one engine, and each firing —
// job + scheduled time — runs exactly once. Each test body runs on the
// three engines (forEachCronBackend): a 3-member coordrun ensemble, Apache
// ZooKeeper and etcd, reading the records through the engine the hosts
// use. Hosts run in this process with skewed clocks (CronOptions.Now), or
// as processes of the real binary that the tests kill and restart. Every
// wait polls a condition with a deadline, or waits for a known instant to
// pass.

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// cronSkews are the host clocks of the skew tests: one 3s behind, one
// right, one 2.5s ahead.
var cronSkews = []struct {
	label string
	skew  time.Duration
}{{"slow", -3 * time.Second}, {"exact", 0}, {"fast", 2500 * time.Millisecond}}

// cronSkewRun runs "@every 1s" on three in-process hosts with skewed
// clocks until n firings, all of them reached by every host's clock, have
// been handled by every host, and checks that each of them ran exactly
// once. It returns the delays from scheduled time to the job's start on
// the true clock and on the claimant's clock.
func cronSkewRun(t *testing.T, b *backend, root string, history, n int) (trueDelays, ownDelays []time.Duration) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	const job = "tick"
	runs := r.path("runs.log")
	sink := &cronLogSink{}
	skewOf := map[string]time.Duration{}
	var hosts []*cronInProc
	for _, s := range cronSkews {
		skewOf[s.label] = s.skew
		hosts = append(hosts, cronStartHost(t, r, sink, cronHostSpec{label: s.label, skew: s.skew, root: root,
			jobs: func() []*supervisor.CronJob {
				// Overlap queue: just after the start the lagging hosts
				// run the firings the fast host's clock had already
				// passed when it started, up to 5.5s later in real time,
				// while the fast host runs the window's first firings;
				// with skip those collisions would skip window firings
				// (seen: two skipped in a run). Queue keeps every firing.
				return []*supervisor.CronJob{{Name: job, Spec: "@every 1s", Argv: cronScript(runs, 0), History: history, Overlap: state.OverlapQueue}}
			}}))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- cron hosts' log:\n%s", sink.String())
		}
	})
	cronAwaitHosts(t, obs, root, job, len(cronSkews))
	registered := time.Now()
	// The window: firings that even the fastest clock reached only after
	// every host was scheduling, so that every host takes part in each.
	first := registered.Add(2500*time.Millisecond + 500*time.Millisecond).Truncate(time.Second).Add(time.Second)
	last := first.Add(time.Duration(n-1) * time.Second)
	var window []time.Time
	for s := first; !s.After(last); s = s.Add(time.Second) {
		window = append(window, s)
	}
	// The slowest clock reaches the last firing 3s after the true clock.
	testkit.WaitFor(t, time.Until(last)+3*time.Second+15*time.Second, "every host to handle the firing of "+cronFmt(last), func() bool {
		for _, s := range cronSkews {
			if !slices.ContainsFunc(sink.decided(s.label), func(d cronDecision) bool { return d.sched.Equal(last) }) {
				return false
			}
		}
		return true
	})
	// Stop the hosts (the last firings' runs are short) before reading.
	for _, h := range hosts {
		h.stop()
		if h.code != 0 || h.err != nil {
			t.Errorf("host %s: RunCron = %d, %v; want 0 after SIGTERM", h.label, h.code, h.err)
		}
	}

	// Every host decided once on every firing of the window; exactly one
	// claimed it.
	for _, d := range sink.decided("") {
		if d.what == "failed" && !strings.Contains(d.err, "context canceled") {
			t.Errorf("host %s: claim of %s failed: %s", d.host, cronFmt(d.sched), d.err)
		}
	}
	for _, s := range window {
		var claimed []string
		per := map[string]int{}
		for _, d := range sink.decided("") {
			if d.sched.Equal(s) {
				per[d.host]++
				if d.what == "claimed" {
					claimed = append(claimed, d.host)
				}
			}
		}
		for _, h := range cronSkews {
			if per[h.label] != 1 {
				t.Errorf("firing %s: host %s handled it %d times, want once", cronFmt(s), h.label, per[h.label])
			}
		}
		if len(claimed) != 1 {
			t.Errorf("firing %s claimed by %v, want exactly one host", cronFmt(s), claimed)
		}
	}

	// The job ran exactly once per firing (by COORDRUN_SCHEDULED_TIME),
	// and no firing ever ran twice, in the window or out of it.
	lines := cronReadLog(t, runs)
	starts := cronStarts(lines)
	recs := cronByTime(cronHistory(t, obs, root, job))
	var twice []string
	for sec, ls := range starts {
		if len(ls) > 1 {
			var hs []string
			for _, l := range ls {
				hs = append(hs, fmt.Sprintf("%s@%s", l.host, l.at.Format("15:04:05.000")))
			}
			twice = append(twice, fmt.Sprintf("%s ran %d times (%s)", cronFmt(time.Unix(sec, 0)), len(ls), strings.Join(hs, " ")))
		}
	}
	sort.Strings(twice)
	for _, s := range twice {
		t.Errorf("firing %s", s)
	}
	ranOnce, runsTotal := 0, 0
	var prevToken int64
	claimant := map[string]int{}
	var toClaim, toHeld, toJob []time.Duration
	for _, s := range window {
		ls := starts[s.Unix()]
		runsTotal += len(ls)
		if len(ls) == 0 {
			x := recs[s.Unix()]
			t.Errorf("firing %s never ran: record state %q reason %q claimed %s", cronFmt(s), x.State, x.Reason, x.Claimed.Format("15:04:05.000"))
			continue
		}
		if len(ls) == 1 {
			ranOnce++
		}
		l := ls[0]
		claimant[l.host]++
		trueDelays = append(trueDelays, l.at.Sub(s))
		own := l.at.Add(skewOf[l.host]).Sub(s)
		ownDelays = append(ownDelays, own)
		// On its own clock the claimant never starts a firing early.
		if own < -time.Millisecond || own > time.Second {
			t.Errorf("firing %s started %v after its scheduled time on the clock of %s, want within [0, 1s)", cronFmt(s), ms(own), l.host)
		}
		if l.token <= prevToken {
			t.Errorf("firing %s ran with token %d, not above the previous firing's %d", cronFmt(s), l.token, prevToken)
		}
		prevToken = l.token
		rec, ok := recs[s.Unix()]
		if !ok {
			if history >= n {
				t.Errorf("firing %s has no record", cronFmt(s))
			}
			continue
		}
		if rec.State != "done" || rec.ExitCode == nil || *rec.ExitCode != 0 || rec.Token == 0 {
			t.Errorf("firing %s: record %+v, want state done, exit 0, a token", cronFmt(s), rec)
		}
		// Where the delay goes: timer → claim; claim → lock held
		// (record's start); lock held → the job's first line. The
		// record's times are on its claimant's clock, as the schedule
		// is; the job's line is on the true clock.
		if rec.State == "done" && rec.Token == l.token {
			toClaim = append(toClaim, rec.Claimed.Sub(s))
			toHeld = append(toHeld, rec.Start.Sub(rec.Claimed))
			toJob = append(toJob, l.at.Add(skewOf[l.host]).Sub(rec.Start))
		}
	}
	if len(toClaim) > 0 {
		t.Logf("delay breakdown p50/p99: scheduled → claim sent %v/%v; claim → lock held %v/%v; lock held → job running %v/%v",
			ms(cronPercentile(toClaim, 50)), ms(cronPercentile(toClaim, 99)), ms(cronPercentile(toHeld, 50)), ms(cronPercentile(toHeld, 99)),
			ms(cronPercentile(toJob, 50)), ms(cronPercentile(toJob, 99)))
	}
	t.Logf("history %d: %d firings scheduled %s..%s; %d ran exactly once; %d runs in all (%.2f runs per firing); claimed by %v",
		history, len(window), cronFmt(first), cronFmt(last), ranOnce, runsTotal, float64(runsTotal)/float64(len(window)), claimant)
	return trueDelays, ownDelays
}

// 1. Three hosts with clocks 3s behind, right and 2.5s ahead run "@every
// 1s": each of 12 firings runs exactly once, claimed by the host whose
// clock reaches it first, which starts it at once by its own clock.
//
// history=2 is the same with a short history (--history 2): pruning must
// not let a host whose clock lags claim a firing again once its record
// was pruned ("a claimed firing is never run again, whoever crashed",
// says cron.go). Both run at once on one ensemble, under separate roots;
// on each engine.
func TestCronSkew(t *testing.T) {
	forEachCronBackend(t, func(t *testing.T, b *backend) {
		t.Run("history=100", func(t *testing.T) {
			t.Parallel()
			trueD, ownD := cronSkewRun(t, b, cronRoot(b, "cron-skew"), 0, 12)
			t.Logf("scheduled → job start over %d firings, on the true clock: p50 %v p99 %v (the fastest clock, +2.5s, claims every firing)",
				len(trueD), ms(cronPercentile(trueD, 50)), ms(cronPercentile(trueD, 99)))
			t.Logf("scheduled → job start on the claimant's own clock: p50 %v p99 %v max %v",
				ms(cronPercentile(ownD, 50)), ms(cronPercentile(ownD, 99)), ms(cronPercentile(ownD, 100)))
		})
		t.Run("history=2", func(t *testing.T) {
			t.Parallel()
			cronSkewRun(t, b, cronRoot(b, "cron-skew-pruned"), 2, 4)
		})
	})
}

// 2. kill -9 of the cron process whose job is running: the job dies with
// it, that firing is not run again by anyone, and the firings after it
// run on the surviving hosts. While the dead host's session lives (until
// it expires, one session timeout later) its lock node still holds the
// job's lock: with overlap "skip" the firings in that time are recorded
// skipped (the ensemble cannot tell a dead holder from a slow one); the
// first firing after the expiry runs on time. With "queue" the next
// firing waits for the expiry and then runs.
//
// On each engine, side by side: etcd with three members of its own
// (killed hosts leave leases behind).
func TestCronHolderCrash(t *testing.T) {
	for _, eng := range []string{"coordrun", "zookeeper", "etcd"} {
		for _, overlap := range []string{state.OverlapSkip, state.OverlapQueue} {
			t.Run(eng+"/"+overlap, func(t *testing.T) {
				t.Parallel()
				var b *backend
				root := "/cron-crash"
				switch eng {
				case "etcd":
					b, root = etcdBackend(t, 3), "/coordrun/cron-crash" // under etcd's key prefix
				case "zookeeper":
					b = sharedZooKeeper(t)
					root = cronRoot(b, "cron-crash")
				default:
					b = cronEnsemble(t)
				}
				cronCrash(t, b, root, overlap)
			})
		}
	}
}

func cronCrash(t *testing.T, b *backend, root, overlap string) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	const job, every = "crashjob", 2 * time.Second
	runs := r.path("runs.log")
	procs := cronStartProcs(r, 3, "h", root, job, "@every 2s", []string{"--overlap", overlap}, cronScript(runs, 1500*time.Millisecond))
	cronAwaitHosts(t, obs, root, job, 3)
	registered := time.Now()

	// The first firing that starts after every host is up.
	var victimRun cronLine
	testkit.WaitFor(t, 2*every+5*time.Second, "a firing to start", func() bool {
		for _, l := range cronReadLog(t, runs) {
			if l.kind == "start" && l.sched.After(registered) {
				victimRun = l
				return true
			}
		}
		return false
	})
	v := victimRun.sched
	// Its claimant, by the firing record's PID.
	var rec state.FiringRecord
	for _, x := range cronHistoryJSON(t, r, root, job) {
		if x.Scheduled.Equal(v) {
			rec = x
		}
	}
	var victim *proc
	var survivors []*proc
	for _, p := range procs {
		if p.Pid() == rec.PID {
			victim = p
		} else {
			survivors = append(survivors, p)
		}
	}
	if victim == nil || victim.Name != victimRun.host {
		t.Fatalf("firing %s: record %+v names pid %d, job ran on %s; no such cron process", cronFmt(v), rec, rec.PID, victimRun.host)
	}
	if rec.State != "running" {
		t.Errorf("firing %s while its job runs: state %q, want running", cronFmt(v), rec.State)
	}
	// The victim's node in the job's lock queue.
	lockDir := path.Join(root, job, "lock")
	var lockNode string
	for _, k := range cronChildren(t, obs, lockDir) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		data, _, err := obs.conn.Get(ctx, path.Join(lockDir, k))
		cancel()
		var hi state.HolderInfo
		if err == nil && json.Unmarshal(data, &hi) == nil && hi.PID == victim.Pid() {
			lockNode = path.Join(lockDir, k)
		}
	}
	if lockNode == "" {
		t.Fatalf("no lock node of pid %d under %s", victim.Pid(), lockDir)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, _, ev, err := obs.conn.GetW(ctx, lockNode)
	if err != nil {
		t.Fatalf("watch %s: %v", lockNode, err)
	}
	gone := make(chan time.Time, 1)
	go func() {
		if e, ok := <-ev; ok && e.Kind == engine.Deleted {
			gone <- time.Now()
		}
	}()
	jobDied := deathWatch(t, victimRun.pid)

	killed := time.Now()
	victim.Signal(syscall.SIGKILL)
	died := testkit.Recv(t, jobDied, cronKillGrace+2*time.Second, "the crashed host's job to die")
	expired := testkit.Recv(t, gone, cronSessionTimeout+5*time.Second, "the dead host's lock node to go (its session's expiry)")
	t.Logf("[%s] firing %s ran on %s (pid %d); kill -9 %v after it started → job dead %v later, session expired %v later",
		overlap, cronFmt(v), victim.Name, victim.Pid(), ms(killed.Sub(victimRun.at)), ms(died.Sub(killed)), ms(expired.Sub(killed)))

	// Wait for the first firing scheduled after the expiry to finish.
	after := expired.Add(200 * time.Millisecond).Truncate(every).Add(every)
	var recs map[int64]state.FiringRecord
	testkit.WaitFor(t, time.Until(after)+2*every+10*time.Second, "the firing of "+cronFmt(after)+" to finish", func() bool {
		recs = cronByTime(cronHistory(t, obs, root, job))
		x, ok := recs[after.Unix()]
		return ok && (x.State == "done" || x.State == "skipped" || x.State == "lost")
	})
	cronStopProcs(t, survivors)
	lines := cronReadLog(t, runs)
	starts := cronStarts(lines)
	recs = cronByTime(cronHistory(t, obs, root, job))

	// The crashed firing ran once (retry-lost is 0), and its record still
	// names the dead host, now marked lost by a survivor.
	if n := len(starts[v.Unix()]); n != 1 {
		t.Errorf("crashed firing %s ran %d times, want once", cronFmt(v), n)
	}
	if x := recs[v.Unix()]; x.PID != victim.Pid() || x.Nonce != rec.Nonce || x.State != state.FiringLost || len(x.Earlier) != 1 {
		t.Errorf("crashed firing %s: record now %+v, was claimed by pid %d; want it lost, once", cronFmt(v), x, victim.Pid())
	} else {
		t.Logf("[%s] crashed firing's record afterwards: state %q (%s), recorded by %s", overlap, x.State, x.Reason, x.Earlier[0].LostBy)
	}
	// Every firing ran at most once, all runs one at a time.
	var intervals []cronInterval
	for sec, ls := range starts {
		if len(ls) > 1 {
			t.Errorf("firing %s ran %d times", cronFmt(time.Unix(sec, 0)), len(ls))
		}
		x := recs[sec]
		end := x.End
		if sec == v.Unix() {
			end = died
		}
		if !x.Start.IsZero() && !end.IsZero() {
			intervals = append(intervals, cronInterval{sched: time.Unix(sec, 0), start: x.Start, end: end, host: x.Host})
		}
	}
	for _, o := range cronOverlaps(intervals) {
		t.Errorf("two runs at once: %s", o)
	}
	// What happened to the firings after the crash.
	firingsRun, firingsScheduled := 0, 0
	for s := v.Add(every); !s.After(after); s = s.Add(every) {
		x, ok := recs[s.Unix()]
		n := len(starts[s.Unix()])
		firingsScheduled++
		if n > 0 {
			firingsRun++
		}
		if !ok {
			t.Errorf("firing %s after the crash: no record (no live host claimed it)", cronFmt(s))
			continue
		}
		if x.PID == victim.Pid() {
			t.Errorf("firing %s claimed by the dead host", cronFmt(s))
		}
		delay := "-"
		if n > 0 {
			delay = ms(starts[s.Unix()][0].at.Sub(s))
		}
		t.Logf("[%s] firing %s (%v after the kill): state %s, ran %d×, start delay %s, reason %q", overlap, cronFmt(s), ms(s.Sub(killed)), x.State, n, delay, x.Reason)
		switch {
		case s.Before(expired.Add(-200 * time.Millisecond)):
			// The dead host's lock node still holds the lock.
			if overlap == state.OverlapSkip && (x.State != "skipped" || n != 0) {
				t.Errorf("firing %s, while the dead holder's session lived: state %s, ran %d×; want skipped (overlap skip)", cronFmt(s), x.State, n)
			}
			if overlap == state.OverlapQueue {
				if x.State != "done" || n != 1 {
					t.Errorf("firing %s, queued behind the dead holder: state %s, ran %d×; want done once", cronFmt(s), x.State, n)
				} else if st := starts[s.Unix()][0].at; st.Before(expired.Add(-200*time.Millisecond)) || st.After(expired.Add(time.Second+b.expiryUncertainty())) {
					t.Errorf("firing %s, queued behind the dead holder, started %v after the session expired; want within [0, %v)", cronFmt(s), ms(st.Sub(expired)), time.Second+b.expiryUncertainty())
				}
			}
		case s.Equal(after) && overlap == state.OverlapSkip:
			if x.State != "done" || n != 1 {
				t.Errorf("first firing after the expiry %s: state %s, ran %d×; want done once", cronFmt(s), x.State, n)
			} else if d := starts[s.Unix()][0].at.Sub(s); d < 0 || d > time.Second {
				t.Errorf("first firing after the expiry %s started %v after its time, want within 1s", cronFmt(s), ms(d))
			}
		}
	}
	t.Logf("[%s] after the crash: %d of %d firings ran (%.2f runs per firing scheduled, counting the crashed one: %d runs / %d firings)",
		overlap, firingsRun, firingsScheduled, float64(firingsRun)/float64(firingsScheduled), firingsRun+len(starts[v.Unix()]), firingsScheduled+1)
}

// 3. All hosts down across a firing: restarted with --catch-up 10s, they
// run the missed firing once, at start; restarted without it, the missed
// firing stays missed and the schedule goes on.
func TestCronOutageCatchUp(t *testing.T) {
	forEachCronBackend(t, cronOutageCatchUp)
}

func cronOutageCatchUp(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root := cronRoot(b, "cron-outage")
	const job, every = "outage", 3 * time.Second
	runs := r.path("runs.log")
	argv := cronScript(runs, 0)
	start := func(prefix string, flags ...string) []*proc {
		ps := cronStartProcs(r, 3, prefix, root, job, "*/3 * * * * *", flags, argv)
		cronAwaitHosts(t, obs, root, job, 3)
		return ps
	}
	// down stops every host and returns the first firing after that,
	// which nobody is up for; it waits until that firing is 300ms past.
	down := func(ps []*proc) time.Time {
		cronStopProcs(t, ps)
		missed := time.Now().Truncate(every).Add(every)
		cronWaitFor(missed.Add(300 * time.Millisecond))
		return missed
	}
	awaitDone := func(s time.Time) state.FiringRecord {
		var x state.FiringRecord
		testkit.WaitFor(t, time.Until(s)+10*time.Second, "the firing of "+cronFmt(s)+" to finish", func() bool {
			var ok bool
			x, ok = cronByTime(cronHistory(t, obs, root, job))[s.Unix()]
			return ok && x.State == "done"
		})
		return x
	}

	ps := start("a")
	missed := down(ps)
	restart := time.Now()
	ps = start("b", "--catch-up", "10s")
	x := awaitDone(missed)
	caught := cronStarts(cronReadLog(t, runs))[missed.Unix()]
	if len(caught) != 1 || x.Reason != "catch-up" {
		t.Errorf("missed firing %s with --catch-up: ran %d×, record %+v; want once, reason catch-up", cronFmt(missed), len(caught), x)
	} else {
		t.Logf("missed firing %s caught up once by %s, %v after the restart (%v after its time)", cronFmt(missed), caught[0].host, ms(caught[0].at.Sub(restart)), ms(caught[0].at.Sub(missed)))
		if d := caught[0].at.Sub(restart); d > 3*time.Second {
			t.Errorf("catch-up ran %v after the restart, want at start", ms(d))
		}
	}
	next := missed.Add(every)
	awaitDone(next)

	missed2 := down(ps)
	ps = start("c")
	following := missed2.Add(every)
	awaitDone(following)
	cronStopProcs(t, ps)

	recs := cronByTime(cronHistory(t, obs, root, job))
	starts := cronStarts(cronReadLog(t, runs))
	if x, ok := recs[missed2.Unix()]; ok || len(starts[missed2.Unix()]) != 0 {
		t.Errorf("missed firing %s without --catch-up: record %+v, ran %d×; want no record, never run", cronFmt(missed2), x, len(starts[missed2.Unix()]))
	}
	for sec, ls := range starts {
		if len(ls) != 1 {
			t.Errorf("firing %s ran %d times", cronFmt(time.Unix(sec, 0)), len(ls))
		}
	}
	for _, s := range []time.Time{next, following} {
		if n := len(starts[s.Unix()]); n != 1 {
			t.Errorf("firing %s after a restart ran %d×, want once", cronFmt(s), n)
		}
	}
	t.Logf("without --catch-up the missed firing %s stayed missed; %s ran on schedule", cronFmt(missed2), cronFmt(following))
}

// 4. A job that runs longer than its interval, on two hosts: with overlap
// skip the firings during a run are recorded skipped and never two runs
// overlap; with queue they run back to back, in order, never at once.
func TestCronOverlap(t *testing.T) {
	forEachCronBackend(t, func(t *testing.T, b *backend) {
		t.Run("skip", func(t *testing.T) {
			t.Parallel()
			cronOverlap(t, b, state.OverlapSkip, 2500*time.Millisecond)
		})
		t.Run("queue", func(t *testing.T) {
			t.Parallel()
			cronOverlap(t, b, state.OverlapQueue, 1500*time.Millisecond)
		})
	})
}

func cronOverlap(t *testing.T, b *backend, overlap string, hold time.Duration) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root, job := cronRoot(b, "cron-overlap-"+overlap), "long"
	runs := r.path("runs.log")
	sink := &cronLogSink{}
	var hosts []*cronInProc
	for _, label := range []string{"p", "q"} {
		hosts = append(hosts, cronStartHost(t, r, sink, cronHostSpec{label: label, root: root,
			jobs: func() []*supervisor.CronJob {
				return []*supervisor.CronJob{{Name: job, Spec: "@every 1s", Argv: cronScript(runs, hold), Overlap: overlap}}
			}}))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- cron hosts' log:\n%s", sink.String())
		}
	})
	cronAwaitHosts(t, obs, root, job, 2)
	registered := time.Now()
	// Firings from here on are reached with both hosts scheduling.
	from := registered.Truncate(time.Second).Add(time.Second)
	const wantRuns = 3
	var recs []state.FiringRecord
	doneRuns := func() int {
		n := 0
		for _, x := range recs {
			if !x.Scheduled.Before(from) && x.State == "done" {
				n++
			}
		}
		return n
	}
	testkit.WaitFor(t, time.Duration(wantRuns+1)*(hold+time.Second)+10*time.Second, fmt.Sprintf("%d runs to finish", wantRuns), func() bool {
		recs = cronHistory(t, obs, root, job)
		return doneRuns() >= wantRuns
	})
	// Stop the hosts one after the other, as a rolling restart would.
	stopAt := time.Now()
	for _, h := range hosts {
		h.stop()
	}
	recs = cronHistory(t, obs, root, job)
	lines := cronReadLog(t, runs)
	starts := cronStarts(lines)
	// "stopping: no new firings": once a host got SIGTERM, none of its
	// firings may start a run (it would not get the signal either).
	stopOf := map[string]time.Time{}
	for _, h := range hosts {
		stopOf[h.label] = h.stopAt
	}
	byTime := cronByTime(recs)
	for _, l := range lines {
		if x := byTime[l.sched.Unix()]; l.kind == "start" && x.Start.After(stopOf[l.host]) {
			t.Errorf("host %s started firing %s at %s (job ran %v, exit %s), %v after it got SIGTERM",
				l.host, cronFmt(l.sched), x.Start.Format("15:04:05.000"), ms(x.End.Sub(x.Start)), cronExit(x.ExitCode), ms(x.Start.Sub(stopOf[l.host])))
		}
	}

	var intervals []cronInterval
	var done, skipped []state.FiringRecord
	var other []string
	for _, x := range recs {
		if !x.Start.IsZero() && !x.End.IsZero() {
			intervals = append(intervals, cronInterval{sched: x.Scheduled, start: x.Start, end: x.End, host: x.Host})
		}
		n := len(starts[x.Scheduled.Unix()])
		switch {
		case x.Scheduled.Before(from):
		case x.State == "lost" && (strings.Contains(x.Reason, "context canceled") || x.Reason == "host stopping") && n == 0,
			x.State == "done" && x.ExitCode != nil && *x.ExitCode == 128+int(syscall.SIGTERM) && x.End.After(stopAt),
			x.State == "done" && x.Start.After(stopAt):
			// Cut short by the stop: dropped while queued or when the
			// lock came after the stop, killed by
			// the SIGTERM that stopped the hosts, or (see above) run
			// after it.
			other = append(other, fmt.Sprintf("%s:%s(%s)", cronFmt(x.Scheduled), x.State, x.Reason))
		case x.State == "done" && x.ExitCode != nil && *x.ExitCode == 0:
			done = append(done, x)
			if n != 1 {
				t.Errorf("firing %s: done, but its job started %d×", cronFmt(x.Scheduled), n)
			}
		case x.State == "skipped":
			skipped = append(skipped, x)
			if n != 0 {
				t.Errorf("firing %s: skipped, but its job started %d×", cronFmt(x.Scheduled), n)
			}
		default:
			t.Errorf("firing %s: state %s reason %q exit %s", cronFmt(x.Scheduled), x.State, x.Reason, cronExit(x.ExitCode))
		}
	}
	for _, o := range cronOverlaps(intervals) {
		t.Errorf("two runs at once: %s", o)
	}
	var ds []string
	for _, x := range done {
		ds = append(ds, fmt.Sprintf("%s on %s: %v late, ran %v", cronFmt(x.Scheduled), x.Host, ms(x.Start.Sub(x.Scheduled)), ms(x.End.Sub(x.Start))))
	}
	t.Logf("[%s] job %v every 1s: %d done [%s], %d skipped, cut short by the stop: %v", overlap, hold, len(done), strings.Join(ds, "; "), len(skipped), other)

	switch overlap {
	case state.OverlapSkip:
		if len(skipped) < 2 {
			t.Errorf("%d firings skipped, want at least 2 (the job runs %v every 1s)", len(skipped), hold)
		}
		for _, x := range skipped {
			if x.Reason != "previous run still going" {
				t.Errorf("skipped firing %s: reason %q", cronFmt(x.Scheduled), x.Reason)
			}
			// A run held the lock when the firing was tried.
			busy := false
			for _, iv := range intervals {
				if !x.Claimed.Before(iv.start.Add(-500*time.Millisecond)) && !x.Claimed.After(iv.end.Add(500*time.Millisecond)) {
					busy = true
				}
			}
			if !busy {
				t.Errorf("firing %s skipped at %s, while no run was going", cronFmt(x.Scheduled), x.Claimed.Format("15:04:05.000"))
			}
		}
		// (A run may start late: skip decides when the claimant tries the
		// lock, after its claim and queue entry, not at the scheduled
		// instant; if the previous run ended meanwhile, it runs.)
	case state.OverlapQueue:
		if len(skipped) != 0 {
			t.Errorf("%d firings skipped with overlap queue", len(skipped))
		}
		sort.Slice(done, func(i, j int) bool { return done[i].Start.Before(done[j].Start) })
		var gaps []string
		for i := 1; i < len(done); i++ {
			prev, cur := done[i-1], done[i]
			if !cur.Scheduled.After(prev.Scheduled) {
				t.Errorf("queued firings out of order: %s ran after %s", cronFmt(cur.Scheduled), cronFmt(prev.Scheduled))
			}
			if cur.Scheduled.Sub(prev.Scheduled) != time.Second {
				t.Errorf("firings between %s and %s did not run", cronFmt(prev.Scheduled), cronFmt(cur.Scheduled))
			}
			// Back to back: the next starts as soon as the previous
			// released the lock (a handful of ensemble round trips:
			// record, release, wake-up, list, mark held), not at a later
			// firing's time.
			gap := cur.Start.Sub(prev.End)
			gaps = append(gaps, ms(gap))
			if gap < 0 || gap > 2*time.Second {
				t.Errorf("queued firing %s started %v after the previous run ended, want at once", cronFmt(cur.Scheduled), ms(gap))
			}
		}
		t.Logf("[queue] end → next start gaps: %v", gaps)
	}
}
