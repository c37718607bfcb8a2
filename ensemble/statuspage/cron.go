package statuspage

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/coordrun/coordrun/supervisor/state"
)

// The supervisor's cron jobs, read from the tree. Under the cron root each
// job is a folder holding its definition (JSON), firings/<unix s>[-t<seq>]
// (one record per firing, JSON), hosts/<host> (an ephemeral node per live
// host) and paused while it is paused. The records' types, a firing's
// result and the schedule language are supervisor/state's, as every
// reader's.

// CronView is every job under the cron root.
type CronView struct {
	Root  string    `json:"root"`
	Jobs  []CronJob `json:"jobs"`
	Error string    `json:"error,omitempty"`
}

// CronJob is one job with its recent firings.
type CronJob struct {
	Name     string   `json:"name"`
	Error    string   `json:"error,omitempty"`
	Schedule string   `json:"schedule"`
	TZ       string   `json:"tz"` // the zone the schedule is read in; "Local" is the hosts' own
	Command  []string `json:"command"`
	Overlap  string   `json:"overlap,omitempty"`
	Jitter   string   `json:"jitter,omitempty"`
	// Next is the next firing (before any jitter), NextInZone the same
	// instant written in the job's zone; zero when it cannot be
	// computed (ScheduleError says why).
	Next          time.Time `json:"next,omitzero"`
	NextInZone    string    `json:"next_in_zone,omitempty"`
	ScheduleError string    `json:"schedule_error,omitempty"`
	PausedBy      string    `json:"paused_by,omitempty"`
	PausedAt      time.Time `json:"paused_at,omitzero"`
	Hosts         []Host    `json:"hosts"`
	// Firings are the latest records, oldest first.
	Firings []Firing `json:"firings"`
}

// Host is a host taking part in a job.
type Host struct {
	Host  string    `json:"host"`
	PID   int       `json:"pid"`
	User  string    `json:"user"`
	Since time.Time `json:"since,omitzero"`
}

// Firing is one firing's record.
type Firing struct {
	Name      string    `json:"name"`
	Scheduled time.Time `json:"scheduled"`
	State     string    `json:"state"`
	// Result is how the firing ended, as the supervisor's history and
	// metrics name it: the state, with a run that ended split into done
	// (exit 0) and failed.
	Result     string    `json:"result"`
	Reason     string    `json:"reason,omitempty"`
	Host       string    `json:"host"`
	PID        int       `json:"pid,omitempty"`
	Token      int64     `json:"token,omitempty"`
	Start      time.Time `json:"start,omitzero"`
	End        time.Time `json:"end,omitzero"`
	DurationMS int64     `json:"duration_ms,omitempty"`
	ExitCode   *int      `json:"exit_code,omitempty"`
	Signal     string    `json:"signal,omitempty"`
	Attempt    int       `json:"attempt,omitempty"`
	// Output is the end of the run's output as kept with the record, at
	// most outputShown bytes of it; OutputBytes counts all the run wrote.
	Output      string `json:"output,omitempty"`
	OutputBytes int64  `json:"output_bytes,omitempty"`
}

// firingsShown is how many of a job's latest firings the view has, and
// outputShown how much of each one's output.
const (
	firingsShown = 40
	outputShown  = 4 << 10
	maxJobs      = 200
	// hostsShown bounds the hosts listed for a job: a job runs on a
	// few, and anyone who can write the folder could add more.
	hostsShown = 100
)

type jobRaw struct {
	name    string
	err     error
	def     []byte
	paused  []byte
	hosts   [][]byte
	firings []namedData // oldest first
}

type namedData struct {
	name string
	data []byte
}

// readCron collects the jobs under root inside a tree view, reading
// folders' names through f.
func readCron(t Tree, f folders, root string) ([]jobRaw, error) {
	kids, st, err := f.first(t, root, maxJobs, byName)
	if err != nil {
		return nil, err
	}
	if int(st.NumChildren) > len(kids) {
		err = fmt.Errorf("%d jobs; showing the first %d", st.NumChildren, len(kids))
	}
	out := make([]jobRaw, 0, len(kids))
	for _, k := range kids {
		out = append(out, readJob(t, f, root, k))
	}
	return out, err
}

func readJob(t Tree, f folders, root, name string) jobRaw {
	dir := path.Join(root, name)
	r := jobRaw{name: name}
	if r.def, _, r.err = t.Get(dir); r.err != nil {
		return r
	}
	if b, _, err := t.Get(path.Join(dir, "paused")); err == nil {
		r.paused = b
		if r.paused == nil {
			r.paused = []byte{}
		}
	}
	if hosts, _, err := f.first(t, path.Join(dir, "hosts"), hostsShown, byName); err == nil {
		for _, h := range hosts {
			if b, _, err := t.Get(path.Join(dir, "hosts", h)); err == nil {
				r.hosts = append(r.hosts, b)
			}
		}
	}
	// Names are zero-padded Unix seconds (a triggered firing's with a
	// suffix): they sort as times, and the latest are the last by name.
	firings, _, err := f.first(t, path.Join(dir, "firings"), firingsShown, latestFirst)
	if err != nil && !errors.Is(err, ErrNoNode) {
		r.err = err
		return r
	}
	slices.Reverse(firings)
	for _, f := range firings {
		if b, _, err := t.Get(path.Join(dir, "firings", f)); err == nil {
			r.firings = append(r.firings, namedData{name: f, data: b})
		}
	}
	return r
}

// cronJob decodes a job read by readJob; now is for its next firing.
func cronJob(r jobRaw, now time.Time) CronJob {
	j := CronJob{Name: r.name, Hosts: []Host{}, Firings: []Firing{}}
	if r.err != nil {
		j.Error = nodeError(r.err)
		return j
	}
	var def state.CronJobInfo
	if err := json.Unmarshal(r.def, &def); err != nil {
		j.Error = "its definition is not a cron job's"
		return j
	}
	j.Schedule, j.Command, j.Overlap, j.Jitter = def.Schedule, def.Command, def.Overlap, def.Jitter
	next, loc, err := nextFiring(def.Schedule, def.TZ, now)
	j.TZ = loc.String()
	if err != nil {
		j.ScheduleError = err.Error()
	} else if !next.IsZero() {
		j.Next = next.UTC()
		j.NextInZone = next.In(loc).Format("2006-01-02 15:04:05 MST")
	}
	if r.paused != nil {
		var p state.CronControl
		_ = json.Unmarshal(r.paused, &p)
		j.PausedBy, j.PausedAt = p.By, p.At
		if j.PausedBy == "" {
			j.PausedBy = "?"
		}
	}
	for _, b := range r.hosts {
		var h state.HolderInfo
		if json.Unmarshal(b, &h) == nil {
			j.Hosts = append(j.Hosts, Host{Host: h.Host, PID: h.PID, User: h.User, Since: h.Since})
		}
	}
	for _, f := range r.firings {
		j.Firings = append(j.Firings, firingOf(f))
	}
	return j
}

func firingOf(f namedData) Firing {
	var rec state.FiringRecord
	if err := json.Unmarshal(f.data, &rec); err != nil {
		return Firing{Name: f.name, State: string(state.FiringUnreadable), Result: string(state.FiringUnreadable)}
	}
	out := Firing{Name: f.name, Scheduled: rec.Scheduled, State: string(rec.State), Result: string(state.ResultOf(rec)), Reason: rec.Reason,
		Host: rec.Host, PID: rec.PID, Token: rec.Token, Start: rec.Start, End: rec.End, ExitCode: rec.ExitCode, Signal: rec.Signal,
		Attempt: rec.Attempt, Output: rec.Output, OutputBytes: rec.OutputBytes}
	if !rec.Start.IsZero() && !rec.End.IsZero() {
		out.DurationMS = max(rec.End.Sub(rec.Start).Milliseconds(), 0)
	}
	if len(out.Output) > outputShown {
		cut := len(out.Output) - outputShown
		for cut < len(out.Output) && !utf8.RuneStart(out.Output[cut]) {
			cut++
		}
		out.Output = out.Output[cut:]
	}
	return out
}

// nextFiring is the first firing of a schedule after now, parsed as the
// supervisor parses it (state.ParseSchedule); loc is the zone the
// schedule runs in.
func nextFiring(spec, tz string, now time.Time) (next time.Time, loc *time.Location, err error) {
	s, err := state.ParseSchedule(spec, tz)
	if err != nil {
		loc = time.Local
		if l, lerr := time.LoadLocation(tz); tz != "" && lerr == nil {
			loc = l
		}
		return time.Time{}, loc, err
	}
	return s.Next(now.In(s.Zone)), s.Zone, nil
}
