package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// The reads and writes of cron's records (their layout and types are in
// supervisor/state) that the cron commands make, and the pruning a host
// does after each firing.

// jobInfo is j's published definition; its command as recordedCommand
// keeps it. No host compares definitions by it (each host runs its own and
// the last to register wins the record), so the name alone loses nothing.
func jobInfo(j *CronJob, full bool) state.CronJobInfo {
	info := state.CronJobInfo{Name: j.Name, Schedule: j.Spec, TZ: j.TZ, Command: recordedCommand(j.Argv, full), Overlap: j.Overlap, RetryLost: j.RetryLost, RetryFailed: j.RetryFailed}
	if j.CatchUp > 0 {
		info.CatchUp = j.CatchUp.String()
	}
	if j.MaxRuntime > 0 {
		info.MaxRuntime = j.MaxRuntime.String()
	}
	if j.Jitter > 0 {
		info.Jitter = j.Jitter.String()
	}
	return info
}

// pruneFirings deletes the records the limits drop, of those scheduled
// before oldest: beyond the newest l.Total by name, then, by kind, once
// more than the slack has come since counted (the count of records left
// after the last pass by kind; -1 before the first). It returns the
// count to pass next time.
func pruneFirings(ctx context.Context, c engine.Store, p state.CronPaths, l state.HistoryLimits, oldest time.Time, counted int) int {
	kids, err := c.Children(ctx, p.Firings())
	if err != nil {
		return counted
	}
	drop, kids := l.ExpiredByName(kids, oldest)
	for _, k := range drop {
		_ = c.Delete(ctx, p.FiringNamed(k), engine.AnyVersion)
	}
	if !l.CountDue(len(kids), counted) {
		return counted
	}
	recs := make([]state.StoredFiring, 0, len(kids))
	for _, k := range kids {
		b, st, err := c.Get(ctx, p.FiringNamed(k))
		if errors.Is(err, engine.ErrNotFound) {
			continue
		}
		if err != nil {
			return counted
		}
		r := state.StoredFiring{Name: k, Version: int64(st.Version)}
		if json.Unmarshal(b, &r.Rec) != nil {
			r.Rec.State = state.FiringUnreadable
		}
		recs = append(recs, r)
	}
	left := len(recs)
	for _, r := range l.ExpiredByKind(recs, oldest) {
		// Conditional: a record rewritten since it was read (a retry
		// taking it) is left for the next pass.
		if c.Delete(ctx, p.FiringNamed(r.Name), engine.Version(r.Version)) == nil {
			left--
		}
	}
	return left
}

// ErrNoJob is a job never registered under the root: a name mistyped, or
// a job whose hosts have never started.
var ErrNoJob = errors.New("no cron job")

func errNoJob(root, job string) error {
	return fmt.Errorf("%w %q under %s (coordrun cron list lists them)", ErrNoJob, job, root)
}

// CronHistory reads a job's firing records, oldest first.
func CronHistory(ctx context.Context, c engine.Store, root, job string) ([]state.FiringRecord, error) {
	p := state.CronPaths{Root: root, Job: job}
	kids, err := c.Children(ctx, p.Firings())
	if errors.Is(err, engine.ErrNotFound) {
		return nil, errNoJob(root, job)
	}
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", job, err)
	}
	sort.Strings(kids)
	out := make([]state.FiringRecord, 0, len(kids))
	for _, k := range kids {
		b, _, err := c.Get(ctx, p.FiringNamed(k))
		if errors.Is(err, engine.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var r state.FiringRecord
		if err := json.Unmarshal(b, &r); err != nil {
			secs, _ := state.FiringSecond(k)
			r = state.FiringRecord{Job: job, Scheduled: time.Unix(secs, 0).UTC(), State: state.FiringUnreadable}
		}
		out = append(out, r)
	}
	return out, nil
}

// CronJobs lists the jobs registered under root with their definitions
// and live hosts.
func CronJobs(ctx context.Context, c engine.Store, root string) ([]state.CronJobInfo, map[string][]state.HolderInfo, error) {
	kids, err := c.Children(ctx, root)
	if errors.Is(err, engine.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(kids)
	var jobs []state.CronJobInfo
	hosts := map[string][]state.HolderInfo{}
	for _, k := range kids {
		p := state.CronPaths{Root: root, Job: k}
		b, _, err := c.Get(ctx, p.Dir())
		if errors.Is(err, engine.ErrNoAuth) {
			// Not skipped: a list that leaves out the jobs one may not
			// read would say they do not exist.
			return nil, nil, fmt.Errorf("job %s: %w", k, err)
		}
		if err != nil {
			continue
		}
		var info state.CronJobInfo
		if json.Unmarshal(b, &info) != nil {
			continue
		}
		jobs = append(jobs, info)
		hk, _ := c.Children(ctx, p.Hosts())
		sort.Strings(hk)
		for _, h := range hk {
			hb, _, err := c.Get(ctx, p.Host(h))
			if err != nil {
				continue
			}
			var hi state.HolderInfo
			if json.Unmarshal(hb, &hi) == nil {
				hosts[info.Name] = append(hosts[info.Name], hi)
			}
		}
	}
	return jobs, hosts, nil
}

// PauseCron pauses a job for every host: its scheduled firings are
// recorded paused and not run, until ResumeCron. Pausing a paused job
// changes nothing; it reports false. The pause record gets the job's
// folder's access (the engine's to arrange: see zkengine's InheritACL).
func PauseCron(ctx context.Context, c engine.Store, root, job, by string) (bool, error) {
	p := state.CronPaths{Root: root, Job: job}
	b, _ := json.Marshal(state.CronControl{By: by, At: time.Now().UTC()})
	_, _, err := c.Create(ctx, p.Paused(), b, engine.Persistent)
	switch {
	case errors.Is(err, engine.ErrExists):
		return false, nil
	case errors.Is(err, engine.ErrNotFound):
		return false, errNoJob(root, job)
	}
	return err == nil, err
}

// ResumeCron ends a pause; it reports false if the job was not paused.
func ResumeCron(ctx context.Context, c engine.Store, root, job string) (bool, error) {
	p := state.CronPaths{Root: root, Job: job}
	if _, _, err := c.Get(ctx, p.Dir()); err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			err = errNoJob(root, job)
		}
		return false, err
	}
	err := c.Delete(ctx, p.Paused(), engine.AnyVersion)
	if errors.Is(err, engine.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// CronPaused reports whether a job is paused, and by whom.
func CronPaused(ctx context.Context, c engine.Store, root, job string) (*state.CronControl, error) {
	b, _, err := c.Get(ctx, state.CronPaths{Root: root, Job: job}.Paused())
	if errors.Is(err, engine.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cc state.CronControl
	_ = json.Unmarshal(b, &cc)
	return &cc, nil
}

// RequestCron asks the job's hosts to run the firings of req, made at
// now; it returns the request's path.
func RequestCron(ctx context.Context, c engine.Store, root, job string, req state.CronRequest, now time.Time) (string, error) {
	p := state.CronPaths{Root: root, Job: job}
	if _, _, err := c.Get(ctx, p.Dir()); err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			err = errNoJob(root, job)
		}
		return "", err
	}
	if err := c.EnsureFolder(ctx, p.Triggers()); err != nil {
		return "", err
	}
	req.At = now.UTC()
	b, _ := json.Marshal(req)
	name, _, err := c.Create(ctx, p.Trigger(state.TriggerPrefix), b, engine.Sequential)
	return name, err
}

// MissedFirings lists the scheduled times of job in [from, to] that have
// no record, oldest first; at most limit of them.
func MissedFirings(ctx context.Context, c engine.Store, root, job string, from, to time.Time, limit int) ([]time.Time, error) {
	p := state.CronPaths{Root: root, Job: job}
	b, _, err := c.Get(ctx, p.Dir())
	if errors.Is(err, engine.ErrNotFound) {
		return nil, errNoJob(root, job)
	}
	if err != nil {
		return nil, err
	}
	var info state.CronJobInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("job %s: unreadable definition: %w", job, err)
	}
	sched, err := state.ParseSchedule(info.Schedule, info.TZ)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", job, err)
	}
	kids, err := c.Children(ctx, p.Firings())
	if err != nil && !errors.Is(err, engine.ErrNotFound) {
		return nil, err
	}
	have := map[string]bool{}
	for _, k := range kids {
		have[k] = true
	}
	return state.Missed(sched, from, to, have, limit)
}
