package supervisor_test

import (
	"context"
	"fmt"
	"os"
	"path"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
)

// A firing's claimant dies (kill -9) or its whole host freezes (SIGSTOP of
// the cron process, its watchdog and the job) while the job runs: once its
// session has ended another host records the firing lost, exactly once,
// and with retry-lost 1 exactly one host runs it again, with a higher
// token and COORDRUN_ATTEMPT=2; with retry-lost 0 nobody does.
func TestCronLostRunRetried(t *testing.T) {
	forEachCronBackend(t, func(t *testing.T, b *backend) {
		for _, c := range []struct {
			fault string
			retry int
		}{{"kill", 1}, {"kill", 0}, {"freeze", 1}} {
			t.Run(fmt.Sprintf("%s-retry%d", c.fault, c.retry), func(t *testing.T) { cronLost(t, b, c.fault, c.retry) })
		}
	})
}

func cronLost(t *testing.T, b *backend, fault string, retry int) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root := cronRoot(b, fmt.Sprintf("cron-lost-%s-%d", fault, retry))
	const job, every, hold = "lostjob", 8 * time.Second, 1500 * time.Millisecond
	runs := r.path("runs.log")
	procs := cronStartProcs(r, 3, fault+"h", root, job, "@every 8s",
		[]string{"--retry-lost", fmt.Sprint(retry)}, cronScript(runs, hold))
	cronAwaitHosts(t, obs, root, job, 3)
	registered := time.Now()

	var first cronLine
	testkit.WaitFor(t, every+10*time.Second, "a firing to start", func() bool {
		for _, l := range cronReadLog(t, runs) {
			if l.kind == "start" && l.sched.After(registered) {
				first = l
				return true
			}
		}
		return false
	})
	v := first.sched
	var victim *proc
	var survivors []*proc
	for _, p := range procs {
		if p.Name == first.host {
			victim = p
		} else {
			survivors = append(survivors, p)
		}
	}
	if victim == nil {
		t.Fatalf("firing %s ran on %q, not one of the cron processes", cronFmt(v), first.host)
	}
	faulted := time.Now()
	var frozen []int
	switch fault {
	case "kill":
		victim.Signal(syscall.SIGKILL)
	case "freeze":
		frozen = pidsWithEnv(r.mark, "CRON_HOST="+victim.Name)
		if len(frozen) < 3 {
			t.Fatalf("processes of %s: %v; want the cron process, its watchdog and the job", victim.Name, frozen)
		}
		for _, p := range frozen {
			_ = syscall.Kill(p, syscall.SIGSTOP)
		}
	}

	// The firing's record settles: run again and done, or lost.
	var rec state.FiringRecord
	testkit.WaitFor(t, cronSessionTimeout+every+10*time.Second, "the lost firing's record to settle", func() bool {
		rec = cronByTime(cronHistory(t, obs, root, job))[v.Unix()]
		if retry > 0 {
			return rec.State == state.FiringDone && rec.Attempt == 2
		}
		return rec.State == state.FiringLost
	})
	starts := cronStarts(cronReadLog(t, runs))[v.Unix()]
	if fault == "freeze" {
		for _, p := range frozen {
			_ = syscall.Kill(p, syscall.SIGCONT)
		}
		// Resumed, it finds its session gone: its job is killed and it
		// exits as after a lost session.
		if code := victim.Exit(t, 20*time.Second); code != supervisor.ExitSessionLost {
			t.Errorf("frozen host %s exited %d after SIGCONT, want %d; output:\n%s", victim.Name, code, supervisor.ExitSessionLost, victim.Out.String())
		}
	}
	cronStopProcs(t, survivors)

	if len(rec.Earlier) != 1 {
		t.Fatalf("firing %s: record %+v, want exactly one lost attempt recorded", cronFmt(v), rec)
	}
	lost := rec.Earlier[0]
	if lost.Attempt != 1 || lost.PID != victim.Pid() || lost.Token != first.token || lost.LostBy == "" {
		t.Errorf("firing %s: lost attempt %+v; want attempt 1 of %s (pid %d, token %d), recorded by a survivor",
			cronFmt(v), lost, victim.Name, victim.Pid(), first.token)
	}
	switch {
	case retry == 0:
		if len(starts) != 1 {
			t.Errorf("firing %s with retry-lost 0 ran %d times, want once", cronFmt(v), len(starts))
		}
		if rec.State != state.FiringLost {
			t.Errorf("firing %s: state %s, want lost", cronFmt(v), rec.State)
		}
	case len(starts) != 2:
		t.Errorf("firing %s with retry-lost 1 ran %d times, want twice (the lost run, one retry): %+v", cronFmt(v), len(starts), starts)
	default:
		again := starts[1]
		if again.host == victim.Name || again.token <= first.token || rec.Token != again.token {
			t.Errorf("firing %s run again on %s with token %d (record: %d); want another host than %s and a token above %d",
				cronFmt(v), again.host, again.token, rec.Token, victim.Name, first.token)
		}
		if again.at.Before(faulted) {
			t.Errorf("firing %s run again %v before the fault", cronFmt(v), faulted.Sub(again.at))
		}
		t.Logf("%s: firing %s lost on %s (token %d), run again on %s (token %d) %v after the fault (session timeout %v)",
			fault, cronFmt(v), victim.Name, first.token, again.host, again.token, ms(again.at.Sub(faulted)), cronSessionTimeout)
	}
	// Every other firing ran at most once.
	for sec, ls := range cronStarts(cronReadLog(t, runs)) {
		if sec != v.Unix() && len(ls) > 1 {
			t.Errorf("firing %s ran %d times", cronFmt(time.Unix(sec, 0)), len(ls))
		}
	}
}

// A run past max-runtime is stopped (TERM, then KILL after the kill grace)
// and recorded timed-out; the job never gets to its end.
func TestCronMaxRuntime(t *testing.T) {
	forEachCronBackend(t, cronMaxRuntime)
}

func cronMaxRuntime(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root := cronRoot(b, "cron-maxrt")
	const job, limit = "slowjob", time.Second
	runs := r.path("runs.log")
	procs := cronStartProcs(r, 1, "m", root, job, "@every 3s", []string{"--max-runtime", limit.String()}, cronScript(runs, 5*time.Second))
	cronAwaitHosts(t, obs, root, job, 1)
	var rec state.FiringRecord
	testkit.WaitFor(t, 15*time.Second, "a firing to be stopped for its run time", func() bool {
		for _, x := range cronHistory(t, obs, root, job) {
			if x.State == state.FiringTimedOut {
				rec = x
				return true
			}
		}
		return false
	})
	cronStopProcs(t, procs)
	if d := rec.End.Sub(rec.Start); d < limit || d > limit+cronKillGrace+2*time.Second {
		t.Errorf("timed-out firing %s ran %v, want max-runtime %v plus at most the kill grace and some slack", cronFmt(rec.Scheduled), d, limit)
	}
	for _, l := range cronReadLog(t, runs) {
		if l.kind == "end" && l.sched.Equal(rec.Scheduled) {
			t.Errorf("timed-out firing %s reached its end at %v", cronFmt(rec.Scheduled), l.at)
		}
	}
	if rec.Signal != "SIGTERM" {
		t.Errorf("timed-out firing %s: signal %q (exit %s), want SIGTERM", cronFmt(rec.Scheduled), rec.Signal, cronExit(rec.ExitCode))
	}
	t.Logf("firing %s: %s, %q, ran %v", cronFmt(rec.Scheduled), rec.State, rec.Reason, ms(rec.End.Sub(rec.Start)))
}

// With jitter, every host waits the same offset past a firing's time, so
// each firing still runs exactly once, at its time plus its offset.
func TestCronJitter(t *testing.T) {
	forEachCronBackend(t, cronJitter)
}

func cronJitter(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root := cronRoot(b, "cron-jitter")
	const job, every, jitter = "jitterjob", 3 * time.Second, 2 * time.Second
	runs := r.path("runs.log")
	procs := cronStartProcs(r, 3, "j", root, job, "@every 3s", []string{"--jitter", jitter.String()}, cronScript(runs, 0))
	cronAwaitHosts(t, obs, root, job, 3)
	registered := time.Now()
	want := &supervisor.CronJob{Name: job, Jitter: jitter}
	var starts map[int64][]cronLine
	testkit.WaitFor(t, 5*every+10*time.Second, "four firings to start", func() bool {
		starts = cronStarts(cronReadLog(t, runs))
		n := 0
		for sec := range starts {
			if time.Unix(sec, 0).After(registered) {
				n++
			}
		}
		return n >= 4
	})
	cronStopProcs(t, procs)
	starts = cronStarts(cronReadLog(t, runs))
	for sec, ls := range starts {
		at := time.Unix(sec, 0)
		if len(ls) != 1 {
			t.Errorf("firing %s ran %d times, want once", cronFmt(at), len(ls))
			continue
		}
		if !at.After(registered) {
			continue
		}
		off := want.Offset(at)
		if late := ls[0].at.Sub(at.Add(off)); late < -cronDriftMargin || late > time.Second {
			t.Errorf("firing %s with offset %v started %v after its time, want %v (+ at most 1s)", cronFmt(at), ms(off), ms(ls[0].at.Sub(at)), ms(off))
		} else {
			t.Logf("firing %s: offset %v, started %v after its time on %s", cronFmt(at), ms(off), ms(ls[0].at.Sub(at)), ls[0].host)
		}
	}
}

// A run's output, stdout and stderr merged in order, reaches the cron
// process's own stdout and its end is kept with the record, cut at
// output-bytes.
func TestCronOutputKept(t *testing.T) {
	forEachCronBackend(t, cronOutputKept)
}

func cronOutputKept(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root := cronRoot(b, "cron-output")
	const job = "chatty"
	// 30 numbered lines on stdout, then one on stderr: 30*9+12 bytes.
	script := `for i in $(seq 10 39); do echo "line $i."; done; echo "to stderr" >&2`
	procs := cronStartProcs(r, 1, "o", root, job, "@every 2s", []string{"--output-bytes", "40"}, []string{"/bin/sh", "-c", script})
	cronAwaitHosts(t, obs, root, job, 1)
	var rec state.FiringRecord
	testkit.WaitFor(t, 10*time.Second, "a firing with its output", func() bool {
		for _, x := range cronHistory(t, obs, root, job) {
			if x.State == state.FiringDone && x.OutputBytes > 0 {
				rec = x
				return true
			}
		}
		return false
	})
	cronStopProcs(t, procs)
	const total = int64(30*9 + len("to stderr\n"))
	var stdout strings.Builder
	for i := 10; i <= 39; i++ {
		fmt.Fprintf(&stdout, "line %d.\n", i)
	}
	// Stdout and stderr are two pipes, kept apart for the journal: the
	// tail has each in order, the two merged as they were read, so the
	// stderr line is anywhere in it, or already out of it.
	if rec.OutputBytes != total || len(rec.Output) != 40 || !strings.HasSuffix(stdout.String(), strings.Replace(rec.Output, "to stderr\n", "", 1)) {
		t.Errorf("record kept %d of %d bytes: %q; want the last 40 of %d", len(rec.Output), rec.OutputBytes, rec.Output, total)
	}
	if out := procs[0].Out.String(); !strings.Contains(out, "chatty: line 10.") || !strings.Contains(out, "chatty: to stderr") {
		t.Errorf("the job's output did not reach the cron process's own, prefixed:\n%s", out)
	}
	out, code := cronCLI(t, r, root, "history", job, "--output", "--last", "0")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("output (%d bytes, the last 40 kept):", total)) || !strings.Contains(out, "    | line 39.") {
		t.Errorf("cron history --output: exit %d:\n%s", code, out)
	}
}

// Overlap replace: each firing stops the previous run, on whichever host
// it is, and starts once that run's job is gone; the replaced firing's
// record says so.
func TestCronReplace(t *testing.T) {
	forEachCronBackend(t, cronReplace)
}

func cronReplace(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root := cronRoot(b, "cron-replace")
	const job = "replacejob"
	runs := r.path("runs.log")
	// Runs far longer than the 3s period; a TERM is logged, then the job
	// exits.
	// (The trap spawns nothing: a child started while the job's group
	// is being stopped may not live to print.)
	script := fmt.Sprintf(`trap 'echo "term $COORDRUN_SCHEDULED_TIME 0 $CRON_HOST $COORDRUN_FENCING_TOKEN $$" >> %s; exit 143' TERM
echo "start $COORDRUN_SCHEDULED_TIME $(date +%%s%%N) $CRON_HOST $COORDRUN_FENCING_TOKEN $$" >> %s
sleep 30 & wait`, runs, runs)
	procs := cronStartProcs(r, 2, "r", root, job, "@every 3s", []string{"--overlap", "replace"}, []string{"/bin/sh", "-c", script})
	cronAwaitHosts(t, obs, root, job, 2)
	registered := time.Now()
	testkit.WaitFor(t, 25*time.Second, "four runs, each replaced by the next", func() bool {
		n := 0
		for _, l := range cronReadLog(t, runs) {
			if l.kind == "start" && l.sched.After(registered) {
				n++
			}
		}
		return n >= 4
	})
	cronStopProcs(t, procs)
	var starts, terms []cronLine
	for _, l := range cronReadLog(t, runs) {
		switch l.kind {
		case "start":
			starts = append(starts, l)
		case "term":
			terms = append(terms, l)
		}
	}
	termOf := map[int64]cronLine{}
	for _, l := range terms {
		termOf[l.sched.Unix()] = l
	}
	recs := cronByTime(cronHistory(t, obs, root, job))
	checked := 0
	for i := 1; i < len(starts); i++ {
		prev, next := starts[i-1], starts[i]
		if x := recs[prev.sched.Unix()]; x.State != state.FiringReplaced {
			continue // the last runs, stopped with the hosts
		}
		if _, ok := termOf[prev.sched.Unix()]; !ok {
			t.Errorf("replaced firing %s got no TERM", cronFmt(prev.sched))
			continue
		}
		if x := recs[prev.sched.Unix()]; !next.at.After(x.End) || next.token <= prev.token {
			t.Errorf("firing %s started %v after the one it replaced was marked replaced (token %d after %d); want after it, with a higher token",
				cronFmt(next.sched), ms(next.at.Sub(x.End)), next.token, prev.token)
		}
		if x := recs[prev.sched.Unix()]; !strings.Contains(x.Reason, next.sched.UTC().Format(time.RFC3339)) {
			t.Errorf("replaced firing %s: reason %q, want it to name %s", cronFmt(prev.sched), x.Reason, cronFmt(next.sched))
		}
		checked++
	}
	if checked < 3 {
		t.Errorf("only %d replacements checked", checked)
		for _, x := range cronHistory(t, obs, root, job) {
			t.Logf("record: %s %s %q start %v", cronFmt(x.Scheduled), x.State, x.Reason, x.Start.Format("15:04:05.000"))
		}
	}
}

// retry-failed: a run that exits non-zero is run again after the backoff,
// by whichever host takes the retry, until it succeeds or the retries
// are spent; each attempt runs once.
func TestCronRetryFailed(t *testing.T) {
	forEachCronBackend(t, cronRetryFailed)
}

func cronRetryFailed(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root := cronRoot(b, "cron-retry-failed")
	const job, backoff = "flaky", time.Second
	runs := r.path("runs.log")
	// Fails on its first two attempts.
	script := fmt.Sprintf(`echo "start $COORDRUN_SCHEDULED_TIME $(date +%%s%%N) $CRON_HOST $COORDRUN_FENCING_TOKEN $COORDRUN_ATTEMPT" >> %s; [ "$COORDRUN_ATTEMPT" -ge 3 ] || exit 3`, runs)
	procs := cronStartProcs(r, 2, "f", root, job, "@every 30s", []string{"--retry-failed", "2", "--retry-backoff", backoff.String()}, []string{"/bin/sh", "-c", script})
	cronAwaitHosts(t, obs, root, job, 2)
	var rec state.FiringRecord
	testkit.WaitFor(t, 50*time.Second, "a firing to succeed at its third attempt", func() bool {
		for _, x := range cronHistory(t, obs, root, job) {
			if state.ResultOf(x) == "done" && x.Attempt == 3 {
				rec = x
				return true
			}
		}
		return false
	})
	cronStopProcs(t, procs)
	if len(rec.Earlier) != 2 {
		t.Fatalf("record %+v: want two failed attempts before", rec)
	}
	for i, a := range rec.Earlier {
		if a.Attempt != i+1 || a.ExitCode == nil || *a.ExitCode != 3 {
			t.Errorf("earlier attempt %d: %+v, want attempt %d, exit 3", i, a, i+1)
		}
		next := rec.Start
		if i+1 < len(rec.Earlier) {
			next = rec.Earlier[i+1].Start
		}
		if next.Sub(a.End) < backoff {
			t.Errorf("attempt %d started %v after attempt %d ended, want at least the backoff %v", i+2, ms(next.Sub(a.End)), i+1, backoff)
		}
	}
	n := 0
	for _, l := range cronReadLog(t, runs) {
		if l.kind == "start" && l.sched.Equal(rec.Scheduled) {
			n++
		}
	}
	if n != 3 {
		t.Errorf("firing %s ran %d times, want 3 (two failures, one success)", cronFmt(rec.Scheduled), n)
	}
}

// Hooks run once per event, on the host that saw it: on-success after each
// run that exited 0; on-failure once a firing failed for good, after its
// retries, with the record on stdin and the COORDRUN_CRON_* variables.
func TestCronHooks(t *testing.T) {
	forEachCronBackend(t, cronHooks)
}

func cronHooks(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root := cronRoot(b, "cron-hooks")
	hooks := r.path("hooks.log")
	hook := func(kind string) string {
		return fmt.Sprintf(`echo "%s $COORDRUN_CRON_JOB $COORDRUN_CRON_SCHEDULED $COORDRUN_CRON_RESULT $COORDRUN_CRON_ATTEMPT $(wc -c)" >> %s`, kind, hooks)
	}
	flags := []string{"--on-success", hook("success"), "--on-failure", hook("failure"), "--retry-failed", "1", "--retry-backoff", "500ms"}
	good := cronStartProcs(r, 2, "g", root, "good", "@every 2s", flags, []string{"true"})
	bad := cronStartProcs(r, 2, "b", root, "bad", "@every 10s", flags, []string{"/bin/sh", "-c", "exit 3"})
	cronAwaitHosts(t, obs, root, "good", 2)
	cronAwaitHosts(t, obs, root, "bad", 2)
	var failed state.FiringRecord
	testkit.WaitFor(t, 30*time.Second, "a firing of bad to fail for good", func() bool {
		for _, x := range cronHistory(t, obs, root, "bad") {
			if state.ResultOf(x) == "failed" && x.Attempt == 2 {
				failed = x
				return true
			}
		}
		return false
	})
	// The hook of the last end may still be running: wait for its line.
	testkit.WaitFor(t, 10*time.Second, "the failure hook", func() bool {
		b, _ := os.ReadFile(hooks)
		return strings.Contains(string(b), "failure bad "+failed.Scheduled.Format(time.RFC3339))
	})
	cronStopProcs(t, append(good, bad...))
	lines := map[string]int{}
	b2, err := os.ReadFile(hooks)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b2)), "\n") {
		f := strings.Fields(l)
		if len(f) != 6 {
			t.Fatalf("hook log line %q", l)
		}
		lines[strings.Join(f[:5], " ")]++
		if f[5] == "0" {
			t.Errorf("hook %q got no record on stdin", l)
		}
	}
	for _, x := range cronHistory(t, obs, root, "good") {
		if state.ResultOf(x) != "done" {
			continue
		}
		if n := lines["success good "+x.Scheduled.Format(time.RFC3339)+" done 1"]; n != 1 {
			t.Errorf("firing %s of good: %d success hooks, want 1", cronFmt(x.Scheduled), n)
		}
	}
	if n := lines["failure bad "+failed.Scheduled.Format(time.RFC3339)+" failed 2"]; n != 1 {
		t.Errorf("firing %s of bad: %d failure hooks after its last attempt, want 1; hooks: %v", cronFmt(failed.Scheduled), n, lines)
	}
	if n := lines["failure bad "+failed.Scheduled.Format(time.RFC3339)+" failed 1"]; n != 0 {
		t.Errorf("firing %s of bad: a failure hook after attempt 1, which was retried", cronFmt(failed.Scheduled))
	}
}

// A retry of a failed run waits under triggers/ until its backoff has
// passed, taken by no host before: the host that ran the failed attempt
// kill -9'd during the backoff, another host still runs the retry.
func TestCronRetryOutlivesHost(t *testing.T) {
	forEachCronBackend(t, cronRetryOutlivesHost)
}

func cronRetryOutlivesHost(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root := cronRoot(b, "cron-retry-host")
	const job, backoff = "flaky", 4 * time.Second
	runs := r.path("runs.log")
	script := fmt.Sprintf(`echo "start $COORDRUN_SCHEDULED_TIME $(date +%%s%%N) $CRON_HOST $COORDRUN_FENCING_TOKEN $COORDRUN_ATTEMPT" >> %s; [ "$COORDRUN_ATTEMPT" -ge 2 ] || exit 3`, runs)
	procs := cronStartProcs(r, 3, "r", root, job, "@every 1h", []string{"--retry-failed", "1", "--retry-backoff", backoff.String()}, []string{"/bin/sh", "-c", script})
	cronAwaitHosts(t, obs, root, job, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := supervisor.RequestCron(ctx, obs.conn, root, job, state.CronRequest{Kind: "trigger", Times: []time.Time{time.Now().UTC().Truncate(time.Second)}, By: "test"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	var failed state.FiringRecord
	testkit.WaitFor(t, 20*time.Second, "the triggered firing's first attempt to fail", func() bool {
		for _, x := range cronHistory(t, obs, root, job) {
			if state.ResultOf(x) == "failed" && x.Attempt == 1 {
				failed = x
				return true
			}
		}
		return false
	})
	pending := cronChildren(t, obs, path.Join(root, job, "triggers"))
	if left := time.Until(failed.End.Add(backoff)); left > 0 && len(pending) != 1 {
		t.Errorf("%v before the retry is due, triggers/ holds %v; want the retry request, taken by no host yet", ms(left), pending)
	}
	var ranOn string
	for _, l := range cronReadLog(t, runs) {
		ranOn = l.host
	}
	var victim *proc
	for _, p := range procs {
		if p.Name == ranOn {
			victim = p
		}
	}
	if victim == nil {
		t.Fatalf("attempt 1 ran on %q, none of the hosts", ranOn)
	}
	victim.Kill()
	var done state.FiringRecord
	testkit.WaitFor(t, backoff+20*time.Second, "the retry to succeed on another host", func() bool {
		for _, x := range cronHistory(t, obs, root, job) {
			if x.Scheduled.Equal(failed.Scheduled) && state.ResultOf(x) == "done" {
				done = x
				return true
			}
		}
		return false
	})
	var survivors []*proc
	for _, p := range procs {
		if p != victim {
			survivors = append(survivors, p)
		}
	}
	cronStopProcs(t, survivors)
	lines := cronReadLog(t, runs)
	if len(lines) != 2 || lines[1].host == ranOn || done.Attempt != 2 || lines[1].token <= lines[0].token {
		t.Errorf("runs %+v, record attempt %d: want attempt 2 on a host other than %s, with a higher token", lines, done.Attempt, ranOn)
	}
}
