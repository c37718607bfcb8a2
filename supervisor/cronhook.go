package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/coordrun/coordrun/supervisor/state"
)

// ended tells the observers of a firing this host ended or recorded, and
// runs the job's hook for how it ended (state.HookFor). Only the host that
// ended or recorded it gets here, so each event runs its hook once.
func (h *cronHost) ended(j *CronJob, rec state.FiringRecord) {
	h.logEnd(j, rec)
	if h.o.Metrics != nil {
		h.o.Metrics.observe(j.Name, rec)
	}
	if h.o.OnFire != nil {
		h.o.OnFire(j.Name, rec)
	}
	var hook []string
	var which string
	switch state.HookFor(rec, j.rules()) {
	case state.OnSuccess:
		hook, which = j.OnSuccess, "on-success"
	case state.OnFailure:
		hook, which = j.OnFailure, "on-failure"
	}
	if len(hook) > 0 {
		h.hooks.Add(1)
		go func() { defer h.hooks.Done(); h.runHook(j, which, hook, rec) }()
	}
}

// logEnd is the one journal line of a firing's end (or of an attempt's,
// when a failed run will run again): its result and how it got there.
// Failures are warnings, so that journalctl -p warning lists them.
func (h *cronHost) logEnd(j *CronJob, rec state.FiringRecord) {
	if rec.State.InFlight() {
		// Not ended here: another host changed the record meanwhile, and
		// that host logs its end.
		return
	}
	res := state.ResultOf(rec)
	attrs := []any{"job", j.Name, "result", string(res), "scheduled", rec.Scheduled.Format(time.RFC3339), "attempt", rec.Attempts()}
	if rec.ExitCode != nil {
		attrs = append(attrs, "exit", *rec.ExitCode)
	}
	if rec.Signal != "" {
		attrs = append(attrs, "signal", rec.Signal)
	}
	if !rec.Start.IsZero() && !rec.End.IsZero() {
		attrs = append(attrs, "duration", rec.End.Sub(rec.Start).Round(time.Millisecond))
	}
	if rec.Token != 0 {
		attrs = append(attrs, "token", rec.Token)
	}
	if rec.Reason != "" {
		attrs = append(attrs, "reason", rec.Reason)
	}
	if rec.HostNode != h.hostNode {
		// Ended here but run elsewhere (replaced, lost with its host).
		attrs = append(attrs, "host", rec.Host, "pid", rec.PID)
	}
	if res == state.ResultFailed && state.HookFor(rec, j.rules()) == state.NoHook {
		// A failed attempt with retries left: not the firing's end yet.
		attrs = append(attrs, "retry_after", j.RetryBackoff)
	}
	switch res {
	case state.ResultDone, state.ResultSkipped, state.ResultPaused:
		h.s.log.Info("firing ended", attrs...)
	default:
		h.s.log.Warn("firing ended", attrs...)
	}
}

// hookTimeout bounds a hook's run.
const hookTimeout = time.Minute

// hookOutputWait bounds how long a hook's output is still copied once the
// hook has exited: a background child of it may hold the pipes open.
const hookOutputWait = time.Second

// runHook runs a hook (which: on-success, on-failure) with the record as
// JSON on its stdin, its output in the journal prefixed like the job's
// ("backup on-failure: …"), and, in its
// environment, COORDRUN_CRON_JOB, _RESULT, _SCHEDULED, _HOST, _ATTEMPT,
// _TOKEN, _EXIT_CODE and _REASON.
func (h *cronHost) runHook(j *CronJob, which string, argv []string, rec state.FiringRecord) {
	ctx, cancel := context.WithTimeout(context.Background(), hookTimeout)
	defer cancel()
	b, _ := json.Marshal(rec)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(b)
	prefix := j.Name + " " + which + ": "
	stdout, stderr := newPrefixer(os.Stdout, prefix, maxJournalLine), newPrefixer(os.Stderr, prefix, maxJournalLine)
	cmd.Stdout, cmd.Stderr, cmd.WaitDelay = stdout, stderr, hookOutputWait
	exit := ""
	if rec.ExitCode != nil {
		exit = strconv.Itoa(*rec.ExitCode)
	}
	cmd.Env = append(JobEnv(h.o.Env),
		"COORDRUN_CRON_JOB="+j.Name,
		"COORDRUN_CRON_RESULT="+string(state.ResultOf(rec)),
		"COORDRUN_CRON_SCHEDULED="+rec.Scheduled.Format(time.RFC3339),
		"COORDRUN_CRON_HOST="+rec.Host,
		"COORDRUN_CRON_ATTEMPT="+strconv.Itoa(rec.Attempts()),
		"COORDRUN_CRON_TOKEN="+strconv.FormatInt(rec.Token, 10),
		"COORDRUN_CRON_EXIT_CODE="+exit,
		"COORDRUN_CRON_REASON="+rec.Reason)
	err := cmd.Run()
	// Run is over: the copies into the prefixers are done, or given up.
	_, _ = stdout.Flush(), stderr.Flush()
	if err != nil {
		h.s.log.Warn("hook failed", "job", j.Name, "hook", argv, "scheduled", rec.Scheduled.Format(time.RFC3339), "err", err)
	}
}
