package state

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

// Schedule is a parsed schedule and the zone it is read in.
type Schedule struct {
	cron.Schedule
	// Zone is the zone of tz or CRON_TZ=, else the hosts' own (Local).
	Zone *time.Location
}

// ParseSchedule is the one parser of the schedule language, for the
// supervisor and every reader: five fields or six with seconds,
// @descriptors, @every (a whole number of seconds, aligned to the Unix
// epoch), an optional CRON_TZ= or TZ= prefix; tz, when given, is the zone.
func ParseSchedule(spec, tz string) (Schedule, error) {
	if strings.TrimSpace(spec) == "" {
		return Schedule{}, errors.New("empty schedule")
	}
	zone := time.Local
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return Schedule{}, fmt.Errorf("time zone %q: %w", tz, err)
		}
		zone = l
		if !strings.HasPrefix(spec, "CRON_TZ=") && !strings.HasPrefix(spec, "TZ=") {
			spec = "CRON_TZ=" + tz + " " + spec
		}
	}
	body, prefixZone := stripTZ(spec)
	if rest, ok := strings.CutPrefix(body, "@every "); ok {
		// robfig/cron silently turns anything under a second into one
		// second; a typo like "@every 0s" or "@every -5m" is an error.
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return Schedule{}, fmt.Errorf("schedule %q: %w", spec, err)
		}
		if d < time.Second || d%time.Second != 0 {
			return Schedule{}, fmt.Errorf("schedule %q: @every needs a whole number of seconds, at least 1s", spec)
		}
	}
	p := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	s, err := p.Parse(spec)
	if err != nil {
		return Schedule{}, fmt.Errorf("schedule %q: %w", spec, err)
	}
	if prefixZone != "" {
		// Parse has just loaded it.
		if l, err := time.LoadLocation(prefixZone); err == nil {
			zone = l
		}
	}
	if every, ok := s.(cron.ConstantDelaySchedule); ok {
		return Schedule{alignedEvery{every.Delay}, zone}, nil
	}
	// A date that never comes ("0 3 31 2 *", the 31st of February) parses;
	// robfig/cron's Next gives up after five years and returns zero. Five
	// years from any start holds a 29th of February, so a fixed start
	// keeps this pure and still accepts every schedule that ever fires.
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, zone)).IsZero() {
		return Schedule{}, fmt.Errorf("schedule %q never fires: no date matches its day of month, month and weekday together", spec)
	}
	return Schedule{s, zone}, nil
}

// stripTZ splits a leading CRON_TZ= or TZ= field off spec.
func stripTZ(spec string) (body, zone string) {
	spec = strings.TrimSpace(spec)
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if rest, ok := strings.CutPrefix(spec, p); ok {
			if i := strings.IndexByte(rest, ' '); i > 0 {
				return strings.TrimSpace(rest[i+1:]), rest[:i]
			}
		}
	}
	return spec, ""
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

// JitterOffset is how long after its scheduled time at a firing of the job
// named job starts: a value in [0, jitter) drawn from a hash of the name
// and at, the same on every host and for every run of the firing, so that
// the hosts still contend for the same firing.
func JitterOffset(job string, at time.Time, jitter time.Duration) time.Duration {
	if jitter <= 0 {
		return 0
	}
	// A cryptographic hash, because FNV's low bits move almost in step
	// with the key's last digits: successive firings' offsets would
	// drift by a near-constant amount instead of scattering.
	sum := sha256.Sum256(fmt.Appendf(nil, "%s@%d", job, at.UnixNano()))
	return time.Duration(binary.BigEndian.Uint64(sum[:8]) % uint64(jitter))
}

// LatestMissed finds the latest scheduled time in (now-window, now]: the
// firing catch-up runs at start.
func LatestMissed(s cron.Schedule, now time.Time, window time.Duration) (time.Time, bool) {
	var last time.Time
	t := s.Next(now.Add(-window))
	for i := 0; i < 1_000_000 && !t.After(now) && !t.IsZero(); i++ {
		last = t
		t = s.Next(t)
	}
	return last, !last.IsZero()
}

// NextAfter is the firing to wait for once the one at was fired and the
// clock reads now: the next after at, not after now, so that a process
// that wakes late still has only one firing in hand; firings it slept
// through are missed (or caught up at start).
func NextAfter(s cron.Schedule, at, now time.Time) time.Time {
	next := s.Next(at)
	if next.Before(now) {
		next = s.Next(now)
	}
	return next
}

// Missed lists the scheduled times in [from, to] whose record is not
// among have (by FiringName), oldest first; at most limit of them, else an
// error asking for a shorter range. It is what a backfill runs.
func Missed(s cron.Schedule, from, to time.Time, have map[string]bool, limit int) ([]time.Time, error) {
	var out []time.Time
	for t := s.Next(from.Add(-time.Nanosecond)); !t.IsZero() && !t.After(to); t = s.Next(t) {
		if have[FiringName(t)] {
			continue
		}
		if len(out) == limit {
			return nil, fmt.Errorf("more than %d missed firings between %s and %s: backfill a shorter range", limit, from.Format(time.RFC3339), to.Format(time.RFC3339))
		}
		out = append(out, t.UTC())
	}
	return out, nil
}
