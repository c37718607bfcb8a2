package supervisor_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor/state"
)

// cronCLI runs `coordrun cron <args> --servers ... --root root` and
// returns its output and exit code.
func cronCLI(t *testing.T, r *rig, root string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(e2eBin, append(append([]string{"cron"}, args...), "--servers", r.b.serverArg(), "--root", root)...)
	cmd.Env = append(baseEnv(), r.mark)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("coordrun cron %v: %v", args, err)
	}
	return out.String(), 0
}

// Pause, trigger, resume and backfill, through the CLI, on two hosts: a
// paused job's firings are recorded paused and not run; a trigger runs
// once, paused or not; after a resume firings run again; a backfill runs
// each missed time of its range once, oldest first. On each engine.
func TestCronPauseTriggerBackfill(t *testing.T) {
	forEachCronBackend(t, cronPauseTriggerBackfill)
}

func cronPauseTriggerBackfill(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root := cronRoot(b, "cron-control")
	const job, every = "ctljob", 2 * time.Second
	runs := r.path("runs.log")
	started := time.Now()
	procs := cronStartProcs(r, 2, "c", root, job, "@every 2s", nil, cronScript(runs, 0))
	cronAwaitHosts(t, obs, root, job, 2)

	if out, code := cronCLI(t, r, root, "pause", job); code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("cron pause: exit %d: %s", code, out)
	}
	paused := time.Now()
	if out, _ := cronCLI(t, r, root, "pause", job); !strings.Contains(out, "already paused") {
		t.Errorf("second cron pause: %q, want it to say already paused", out)
	}
	var pausedRecs []state.FiringRecord
	testkit.WaitFor(t, 3*every+10*time.Second, "two firings recorded paused", func() bool {
		pausedRecs = pausedRecs[:0]
		for _, x := range cronHistory(t, obs, root, job) {
			if x.State == state.FiringPaused && x.Scheduled.After(paused) {
				pausedRecs = append(pausedRecs, x)
			}
		}
		return len(pausedRecs) >= 2
	})

	// A trigger runs while paused.
	if out, code := cronCLI(t, r, root, "trigger", job); code != 0 || !strings.Contains(out, "triggered") {
		t.Fatalf("cron trigger: exit %d: %s", code, out)
	}
	var triggered state.FiringRecord
	testkit.WaitFor(t, 10*time.Second, "the triggered firing to run", func() bool {
		for _, x := range cronHistory(t, obs, root, job) {
			if strings.HasPrefix(x.Reason, "triggered by") && x.State == state.FiringDone {
				triggered = x
				return true
			}
		}
		return false
	})

	if out, code := cronCLI(t, r, root, "resume", job); code != 0 || !strings.Contains(out, "resumed") {
		t.Fatalf("cron resume: exit %d: %s", code, out)
	}
	resumed := time.Now()
	testkit.WaitFor(t, 2*every+10*time.Second, "a firing to run after the resume", func() bool {
		for _, x := range cronHistory(t, obs, root, job) {
			if x.State == state.FiringDone && x.Scheduled.After(resumed) && x.Reason == "" {
				return true
			}
		}
		return false
	})

	// Backfill the firings of before the hosts started: none has a record.
	from := started.Add(-11 * time.Second).Truncate(every)
	to := started.Add(-time.Second)
	if out, code := cronCLI(t, r, root, "backfill", job, "--from", to.UTC().Format(time.RFC3339), "--to", from.UTC().Format(time.RFC3339)); code != 64 || !strings.Contains(out, "before --from") {
		t.Errorf("backfill with --to before --from: exit %d, %q; want 64 and the reason", code, out)
	}
	if out, code := cronCLI(t, r, root, "pause", "nosuchjob"); code == 0 || !strings.Contains(out, `no cron job "nosuchjob"`) {
		t.Errorf("pause of an unknown job: exit %d, %q", code, out)
	}
	out, code := cronCLI(t, r, root, "backfill", job, "--from", from.UTC().Format(time.RFC3339), "--to", to.UTC().Format(time.RFC3339))
	if code != 0 || !strings.Contains(out, "missed firings") {
		t.Fatalf("cron backfill: exit %d: %s", code, out)
	}
	var want []time.Time
	for at := from; !at.After(to); at = at.Add(every) {
		if !at.Before(from) {
			want = append(want, at)
		}
	}
	testkit.WaitFor(t, 20*time.Second, "every backfilled firing to run", func() bool {
		recs := cronByTime(cronHistory(t, obs, root, job))
		for _, at := range want {
			if x, ok := recs[at.Unix()]; !ok || x.State != state.FiringDone {
				return false
			}
		}
		return true
	})
	// Asked again, the same range has nothing left to run.
	if out, code := cronCLI(t, r, root, "backfill", job, "--from", from.UTC().Format(time.RFC3339), "--to", to.UTC().Format(time.RFC3339)); code != 0 || !strings.Contains(out, "nothing to run") {
		t.Errorf("second backfill of the same range: exit %d, %q", code, out)
	}
	cronStopProcs(t, procs)

	starts := cronStarts(cronReadLog(t, runs))
	for _, x := range pausedRecs {
		n := len(starts[x.Scheduled.Unix()])
		if x.Scheduled.Equal(triggered.Scheduled) {
			n-- // the job's log tells firings by their second; the trigger's shares it
		}
		if n != 0 {
			t.Errorf("paused firing %s ran %d times", cronFmt(x.Scheduled), n)
		}
	}
	if n := len(starts[triggered.Scheduled.Unix()]); n != 1 {
		t.Errorf("triggered firing %s ran %d times, want once", cronFmt(triggered.Scheduled), n)
	}
	var last time.Time
	for _, at := range want {
		ls := starts[at.Unix()]
		if len(ls) != 1 {
			t.Errorf("backfilled firing %s ran %d times, want once", cronFmt(at), len(ls))
			continue
		}
		if ls[0].at.Before(last) {
			t.Errorf("backfilled firing %s started before the one scheduled ahead of it", cronFmt(at))
		}
		last = ls[0].at
	}
	t.Logf("%d firings recorded paused, trigger ran at %s, %d backfilled firings ran in order", len(pausedRecs), cronFmt(triggered.Start), len(want))
}

// SIGHUP reads the jobs file again: a dropped job is no longer fired while
// its running firing goes on to its end, a new one is scheduled, and a
// bad file is refused with its line while the jobs go on.
func TestCronReload(t *testing.T) {
	forEachCronBackend(t, cronReload)
}

func cronReload(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root := cronRoot(b, "cron-reload")
	logf := r.path("jobs.log")
	line := func(kind string) string {
		return fmt.Sprintf(`echo "%s $COORDRUN_LOCK $(date +%%s%%N)" >> %s`, kind, logf)
	}
	file := r.path("jobs.yaml")
	write := func(content string) {
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf("jobs:\n  - name: a\n    schedule: \"@every 1s\"\n    overlap: skip\n    command: '%s; sleep 3; %s'\n", line("start"), line("end")))
	p := r.startProc("h1", nil, e2eBin, "cron", "--servers", b.serverArg(), "--root", root, "--jobs", file,
		"--session-timeout", cronSessionTimeout.String(), "--kill-grace", cronKillGrace.String(), "--drift-margin", cronDriftMargin.String(), "--zookeeper-margin", zkMargin.String(), "-v")
	cronAwaitHosts(t, obs, root, "a", 1)
	type ev struct {
		kind, job string
		at        time.Time
	}
	read := func() []ev {
		data, _ := os.ReadFile(logf)
		var out []ev
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var e ev
			var ns int64
			if _, err := fmt.Sscanf(l, "%s %s %d", &e.kind, &e.job, &ns); err == nil {
				e.at = time.Unix(0, ns)
				out = append(out, e)
			}
		}
		return out
	}
	testkit.WaitFor(t, 10*time.Second, "a run of a", func() bool {
		for _, e := range read() {
			if e.kind == "start" && e.job == "a" {
				return true
			}
		}
		return false
	})
	write(fmt.Sprintf("jobs:\n  - name: b\n    schedule: \"@every 1s\"\n    command: '%s'\n", line("start")))
	p.Signal(syscall.SIGHUP)
	reloaded := time.Now()
	testkit.WaitFor(t, 10*time.Second, "b to run, and a's last run to end", func() bool {
		var bRan, aEnded bool
		for _, e := range read() {
			bRan = bRan || e.kind == "start" && e.job == "b"
			aEnded = aEnded || e.kind == "end" && e.job == "a"
		}
		return bRan && aEnded
	})
	// A bad file: refused, and b goes on.
	write("jobs:\n  - name: b\n    schedule: \"@every 1s\"\n    comand: true\n")
	p.Signal(syscall.SIGHUP)
	refused := time.Now()
	testkit.WaitFor(t, 10*time.Second, "the bad file to be refused, with its line", func() bool {
		return strings.Contains(p.Out.String(), "reload refused") && strings.Contains(p.Out.String(), "jobs.yaml:4")
	})
	testkit.WaitFor(t, 10*time.Second, "b to run after the refused reload", func() bool {
		for _, e := range read() {
			if e.kind == "start" && e.job == "b" && e.at.After(refused.Add(time.Second)) {
				return true
			}
		}
		return false
	})
	p.Signal(syscall.SIGTERM)
	if code := p.Exit(t, 15*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0:\n%s", code, p.Out.String())
	}
	for _, e := range read() {
		if e.kind == "start" && e.job == "a" && e.at.After(reloaded.Add(1500*time.Millisecond)) {
			t.Errorf("a, dropped by the reload, started again %v after it", ms(e.at.Sub(reloaded)))
		}
	}
}
