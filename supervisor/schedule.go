package supervisor

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedules, as pure functions of a job's definition and a time: no clock
// is read here.

// Overlap policies.
const (
	OverlapSkip  = "skip"
	OverlapQueue = "queue"
	// OverlapReplace stops the previous run (on whichever host it is)
	// and starts the new one once the old one's group is gone.
	OverlapReplace = "replace"
)

// CronJob is one scheduled job.
type CronJob struct {
	Name    string
	Spec    string // robfig/cron syntax, seconds optional, descriptors, CRON_TZ=
	TZ      string // time zone name; empty: local, unless Spec has CRON_TZ=
	Argv    []string
	Overlap string        // OverlapSkip (default), OverlapQueue or OverlapReplace
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
	schedule    cron.Schedule
}

// ParseSchedule parses a schedule the way cron jobs are configured: five
// fields or six with seconds, @descriptors, @every, optional CRON_TZ=.
func ParseSchedule(spec, tz string) (cron.Schedule, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("empty schedule")
	}
	if tz != "" {
		if _, err := time.LoadLocation(tz); err != nil {
			return nil, fmt.Errorf("time zone %q: %w", tz, err)
		}
		if !strings.HasPrefix(spec, "CRON_TZ=") && !strings.HasPrefix(spec, "TZ=") {
			spec = "CRON_TZ=" + tz + " " + spec
		}
	}
	if rest, ok := strings.CutPrefix(strings.TrimSpace(stripTZ(spec)), "@every "); ok {
		// robfig/cron silently turns anything under a second into one
		// second; a typo like "@every 0s" or "@every -5m" is an error.
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %w", spec, err)
		}
		if d < time.Second || d%time.Second != 0 {
			return nil, fmt.Errorf("schedule %q: @every needs a whole number of seconds, at least 1s", spec)
		}
	}
	p := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	s, err := p.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", spec, err)
	}
	if every, ok := s.(cron.ConstantDelaySchedule); ok {
		return alignedEvery{every.Delay}, nil
	}
	return s, nil
}

// stripTZ drops a leading CRON_TZ= or TZ= field.
func stripTZ(spec string) string {
	spec = strings.TrimSpace(spec)
	if strings.HasPrefix(spec, "CRON_TZ=") || strings.HasPrefix(spec, "TZ=") {
		if i := strings.IndexByte(spec, ' '); i > 0 {
			return spec[i+1:]
		}
	}
	return spec
}

// alignedEvery is "@every D" fixed to multiples of D since the Unix epoch.
// robfig/cron counts from when the process started, which differs per
// host; the firings of all hosts must be the same instants.
type alignedEvery struct{ d time.Duration }

func (a alignedEvery) Next(t time.Time) time.Time {
	n := t.UnixNano()
	step := a.d.Nanoseconds()
	return time.Unix(0, (n/step+1)*step).In(t.Location())
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
	s, err := ParseSchedule(j.Spec, j.TZ)
	if err != nil {
		return fmt.Errorf("job %s: %w", j.Name, err)
	}
	j.schedule = s
	switch j.Overlap {
	case "":
		j.Overlap = OverlapSkip
	case OverlapSkip, OverlapQueue, OverlapReplace:
	default:
		return fmt.Errorf("job %s: overlap %q: want skip, queue or replace", j.Name, j.Overlap)
	}
	if j.CatchUp < 0 {
		return fmt.Errorf("job %s: negative catch-up window", j.Name)
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

// Offset is how long after its scheduled time at the firing starts: a
// value in [0, Jitter) drawn from a hash of the job's name and at, the
// same on every host and for every run of the firing.
func (j *CronJob) Offset(at time.Time) time.Duration {
	if j.Jitter <= 0 {
		return 0
	}
	// A cryptographic hash, because FNV's low bits move almost in step
	// with the key's last digits: successive firings' offsets would
	// drift by a near-constant amount instead of scattering.
	sum := sha256.Sum256(fmt.Appendf(nil, "%s@%d", j.Name, at.UnixNano()))
	return time.Duration(binary.BigEndian.Uint64(sum[:8]) % uint64(j.Jitter))
}

// latestMissed finds the latest scheduled time in (now-window, now].
func latestMissed(j *CronJob, now time.Time, window time.Duration) (time.Time, bool) {
	var last time.Time
	t := j.Next(now.Add(-window))
	for i := 0; i < 1_000_000 && !t.After(now) && !t.IsZero(); i++ {
		last = t
		t = j.Next(t)
	}
	return last, !last.IsZero()
}

// nextAfter is the firing to wait for once the one at was fired and the
// clock reads now: the next after at, not after now, so that a process
// that wakes late still has only one firing in hand; firings it slept
// through are missed (or caught up at start).
func nextAfter(j *CronJob, at, now time.Time) time.Time {
	next := j.Next(at)
	if next.Before(now) {
		next = j.Next(now)
	}
	return next
}
