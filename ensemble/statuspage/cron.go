package statuspage

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"
)

// The supervisor's cron jobs, read from the tree. Under the cron root each
// job is a folder holding its definition (JSON), firings/<unix s>[-t<seq>]
// (one record per firing, JSON), hosts/<host> (an ephemeral node per live
// host) and paused while it is paused. The structs below decode those
// records for display only; the supervisor owns the format
// (supervisor/cronstore.go).

// jobInfo is a job's definition (supervisor.CronJobInfo).
type jobInfo struct {
	Name       string   `json:"name"`
	Schedule   string   `json:"schedule"`
	TZ         string   `json:"tz,omitempty"`
	Command    []string `json:"command"`
	Overlap    string   `json:"overlap"`
	MaxRuntime string   `json:"max_runtime,omitempty"`
	Jitter     string   `json:"jitter,omitempty"`
}

// firingRecord is a firing's record (supervisor.FiringRecord).
type firingRecord struct {
	Scheduled   time.Time `json:"scheduled"`
	State       string    `json:"state"`
	Reason      string    `json:"reason,omitempty"`
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	Token       int64     `json:"token,omitempty"`
	Start       time.Time `json:"start,omitzero"`
	End         time.Time `json:"end,omitzero"`
	ExitCode    *int      `json:"exit_code,omitempty"`
	Signal      string    `json:"signal,omitempty"`
	Attempt     int       `json:"attempt,omitempty"`
	Output      string    `json:"output,omitempty"`
	OutputBytes int64     `json:"output_bytes,omitempty"`
}

// pauseRecord is who paused a job (supervisor.CronControl).
type pauseRecord struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

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
	var def jobInfo
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
		var p pauseRecord
		_ = json.Unmarshal(r.paused, &p)
		j.PausedBy, j.PausedAt = p.By, p.At
		if j.PausedBy == "" {
			j.PausedBy = "?"
		}
	}
	for _, b := range r.hosts {
		var h contenderInfo
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
	var rec firingRecord
	if err := json.Unmarshal(f.data, &rec); err != nil {
		return Firing{Name: f.name, State: "unreadable", Result: "unreadable"}
	}
	out := Firing{Name: f.name, Scheduled: rec.Scheduled, State: rec.State, Reason: rec.Reason, Host: rec.Host, PID: rec.PID,
		Token: rec.Token, Start: rec.Start, End: rec.End, ExitCode: rec.ExitCode, Signal: rec.Signal, Attempt: rec.Attempt,
		Output: rec.Output, OutputBytes: rec.OutputBytes}
	out.Result = rec.State
	if rec.State == "done" && (rec.ExitCode == nil || *rec.ExitCode != 0) {
		out.Result = "failed"
	}
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

// nextFiring is the first firing of a schedule after now, as the
// supervisor reads schedules (supervisor.ParseSchedule): five fields or
// six with seconds, descriptors, "@every D" aligned to the Unix epoch, an
// optional CRON_TZ= prefix, tz the zone when given. loc is the zone the
// schedule runs in.
func nextFiring(spec, tz string, now time.Time) (next time.Time, loc *time.Location, err error) {
	loc = time.Local
	spec = strings.TrimSpace(spec)
	if tz != "" {
		if loc, err = time.LoadLocation(tz); err != nil {
			return time.Time{}, time.Local, fmt.Errorf("time zone %q: %w", tz, err)
		}
	}
	if rest, ok := cutTZ(spec); ok {
		name, body, _ := strings.Cut(rest, " ")
		if l, err := time.LoadLocation(name); err == nil {
			loc = l
		}
		spec = strings.TrimSpace(body)
	}
	if every, ok := strings.CutPrefix(spec, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(every))
		if err != nil || d < time.Second {
			return time.Time{}, loc, fmt.Errorf("schedule %q: not a whole number of seconds", spec)
		}
		n := now.UnixNano()
		return time.Unix(0, (n/d.Nanoseconds()+1)*d.Nanoseconds()).In(loc), loc, nil
	}
	p := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	s, err := p.Parse(spec)
	if err != nil {
		return time.Time{}, loc, fmt.Errorf("schedule %q: %w", spec, err)
	}
	return s.Next(now.In(loc)), loc, nil
}

func cutTZ(spec string) (string, bool) {
	if rest, ok := strings.CutPrefix(spec, "CRON_TZ="); ok {
		return rest, true
	}
	return strings.CutPrefix(spec, "TZ=")
}
