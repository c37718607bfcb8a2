package supervisor

import (
	"fmt"
	"time"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// A cron job's definition; its schedule and the rules of its firings are
// in supervisor/state.

// CronJob is one scheduled job.
type CronJob struct {
	Name    string
	Spec    string // robfig/cron syntax, seconds optional, descriptors, CRON_TZ=
	TZ      string // time zone name; empty: local, unless Spec has CRON_TZ=
	Argv    []string
	Overlap string        // state.OverlapSkip (default), OverlapQueue or OverlapReplace
	CatchUp time.Duration // run the latest missed firing if younger than this; 0: never
	History int           // firing records kept; default 100
	// HistorySuccess and HistoryFailed, when set, also limit the records
	// kept of runs that exited 0 and of firings that ended otherwise
	// (failed, lost, timed-out, replaced); see historyLimits.
	HistorySuccess, HistoryFailed int
	// RetryLost is how many times a firing lost with its host (its
	// claimant's session ended while the job ran or waited) is run
	// again, on another host; 0: recorded lost, not run again.
	RetryLost int
	// RetryFailed is how many times a run that exited non-zero is run
	// again, RetryBackoff after it ended, on whichever host takes the
	// retry; 0: never.
	RetryFailed  int
	RetryBackoff time.Duration
	// OnSuccess and OnFailure are commands run on the host that saw a
	// firing end (see cronHost.ended): after a run that exited 0, and
	// after one that failed for good, was lost for good or timed out.
	OnSuccess, OnFailure []string
	// MaxRuntime, when set, stops a run that has gone on that long
	// (TERM, then KILL after the kill grace) and records it timed-out.
	MaxRuntime time.Duration
	// Jitter, when set, delays each firing by an offset in [0, Jitter)
	// that every host derives alike from the job and the scheduled time
	// (Offset), so that the hosts still contend for the same firing.
	Jitter time.Duration
	// OutputBytes is how much of the end of a run's output (stdout and
	// stderr) its record keeps; 0: none.
	OutputBytes int
	// Holders is how many of the job's runs may go at once, across hosts
	// (its lock a semaphore of that many slots); 0 or 1: one.
	Holders  int
	schedule state.Schedule
}

// Validate checks the job and parses its schedule, filling in the
// defaults of Overlap and History.
func (j *CronJob) Validate() error {
	if err := checkName("job", j.Name); err != nil {
		return err
	}
	if len(j.Argv) == 0 {
		return fmt.Errorf("job %s: no command", j.Name)
	}
	s, err := state.ParseSchedule(j.Spec, j.TZ)
	if err != nil {
		return fmt.Errorf("job %s: %w", j.Name, err)
	}
	j.schedule = s
	switch j.Overlap {
	case "":
		j.Overlap = state.OverlapSkip
	case state.OverlapSkip, state.OverlapQueue, state.OverlapReplace:
	default:
		return fmt.Errorf("job %s: overlap %q: want skip, queue or replace", j.Name, j.Overlap)
	}
	if j.CatchUp < 0 {
		return fmt.Errorf("job %s: negative catch-up window", j.Name)
	}
	if err := engine.CheckHolders(j.Holders); err != nil {
		return fmt.Errorf("job %s: holders: %w", j.Name, err)
	}
	if j.Holders > 1 && j.Overlap == state.OverlapReplace {
		return fmt.Errorf("job %s: holders %d with overlap replace: a replacing firing stops every earlier run, so only one would ever run; use overlap skip or queue", j.Name, j.Holders)
	}
	if j.RetryLost < 0 {
		return fmt.Errorf("job %s: negative retry-lost", j.Name)
	}
	if j.RetryFailed < 0 || j.RetryBackoff < 0 {
		return fmt.Errorf("job %s: negative retry-failed or retry-backoff", j.Name)
	}
	if j.MaxRuntime < 0 {
		return fmt.Errorf("job %s: negative max-runtime", j.Name)
	}
	if j.Jitter < 0 {
		return fmt.Errorf("job %s: negative jitter", j.Name)
	}
	if j.OutputBytes < 0 || j.OutputBytes > maxOutputBytes {
		return fmt.Errorf("job %s: output-bytes %d: want 0 to %d (the record is one znode)", j.Name, j.OutputBytes, maxOutputBytes)
	}
	if j.History == 0 {
		j.History = 100
	}
	if j.History < 1 {
		return fmt.Errorf("job %s: history must keep at least 1 firing", j.Name)
	}
	if j.HistorySuccess < 0 || j.HistoryFailed < 0 {
		return fmt.Errorf("job %s: negative history-success or history-failed", j.Name)
	}
	return nil
}

// Next is the job's first firing after t. The job must have been
// validated.
func (j *CronJob) Next(t time.Time) time.Time { return j.schedule.Next(t) }

// Offset is how long after its scheduled time at the firing starts (see
// state.JitterOffset).
func (j *CronJob) Offset(at time.Time) time.Duration { return state.JitterOffset(j.Name, at, j.Jitter) }

// rules are the job's settings the firing lifecycle reads.
func (j *CronJob) rules() state.Rules {
	return state.Rules{RetryLost: j.RetryLost, RetryFailed: j.RetryFailed, RetryBackoff: j.RetryBackoff, CatchUp: j.CatchUp}
}

func (j *CronJob) historyLimits() state.HistoryLimits {
	return state.HistoryLimits{Total: j.History, Success: j.HistorySuccess, Failed: j.HistoryFailed}
}
