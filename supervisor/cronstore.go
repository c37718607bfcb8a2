package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// What cron keeps in the ensemble, per job under the cron root:
//
//	<root>/<job>                    its definition (CronJobInfo, JSON)
//	<root>/<job>/firings/<unix s>   a firing's record (FiringRecord), created
//	                                by the host that claimed it
//	<root>/<job>/hosts/<host>       an ephemeral node per live host (HolderInfo)
//	<root>/<job>/lock               the lock the firings run under
//	<root>/<job>/paused             present while the job is paused (CronControl)
//	<root>/<job>/triggers/t-<seq>   a request to run the job now, or to
//	                                backfill missed firings (CronRequest)

// cronPaths are the znode paths of one job.
type cronPaths struct{ root, job string }

func (p cronPaths) dir() string     { return path.Join(p.root, p.job) }
func (p cronPaths) firings() string { return path.Join(p.dir(), "firings") }
func (p cronPaths) hosts() string   { return path.Join(p.dir(), "hosts") }
func (p cronPaths) lock() string    { return path.Join(p.dir(), "lock") }
func (p cronPaths) paused() string  { return path.Join(p.dir(), "paused") }
func (p cronPaths) triggers() string {
	return path.Join(p.dir(), "triggers")
}

// firing is the record of the firing scheduled at t: named by its Unix
// second, zero-padded so that names sort as times.
func (p cronPaths) firing(t time.Time) string { return path.Join(p.firings(), firingName(t)) }

// host is the node of a live host.
func (p cronPaths) host(name string) string { return path.Join(p.hosts(), name) }

func firingName(t time.Time) string { return fmt.Sprintf("%013d", t.Unix()) }

// triggeredName is the record of a firing requested by hand at t, with
// the request's sequence number: after a scheduled firing of the same
// second in name order, and never the same node.
func triggeredName(t time.Time, seq string) string { return firingName(t) + "-t" + seq }

// firingSecond is the scheduled Unix second a record's name starts with.
func firingSecond(name string) (int64, bool) {
	digits, _, _ := strings.Cut(name, "-")
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, err == nil
}

// FiringState is where a firing stands.
type FiringState string

// States of a firing's record.
const (
	FiringClaimed = FiringState("claimed") // a host won the firing
	FiringRunning = FiringState("running") // its job runs under the lock
	FiringDone    = FiringState("done")    // its job ended; ExitCode says how
	// FiringSkipped: overlap skip, the previous run still held the lock.
	FiringSkipped = FiringState("skipped")
	// FiringLost: the firing could not run or was stopped (no lock,
	// session or lock lost, host stopping); Reason says why.
	FiringLost = FiringState("lost")
	// FiringTimedOut: the job ran past the job's max-runtime and was
	// stopped (TERM, then KILL after the kill grace).
	FiringTimedOut = FiringState("timed-out")
	// FiringReplaced: a later firing stopped this one's run (overlap
	// replace).
	FiringReplaced = FiringState("replaced")
	// FiringPaused: the job was paused at the firing's time; not run.
	FiringPaused = FiringState("paused")
	// FiringUnreadable: the record's data is not a FiringRecord (a reader's
	// view only; never written).
	FiringUnreadable = FiringState("unreadable")
)

// FiringRecord is the data of a firing's node.
type FiringRecord struct {
	Job       string      `json:"job"`
	Scheduled time.Time   `json:"scheduled"`
	State     FiringState `json:"state"`
	Reason    string      `json:"reason,omitempty"`
	Host      string      `json:"host"`
	PID       int         `json:"pid"`
	Nonce     string      `json:"nonce"`
	Claimed   time.Time   `json:"claimed"`
	Token     int64       `json:"token,omitempty"`
	Start     time.Time   `json:"start,omitzero"`
	End       time.Time   `json:"end,omitzero"`
	ExitCode  *int        `json:"exit_code,omitempty"`
	// Signal names the signal the job died of, when its exit code says
	// one did (128 + the signal's number, as coordrun reports it).
	Signal string `json:"signal,omitempty"`
	// HostNode names the claimant's node under hosts/: the firing is
	// lost with the claimant once that node is gone (its session
	// ended) while the record still says claimed or running.
	HostNode string `json:"host_node,omitempty"`
	// Attempt counts the runs of this firing: 1, then one more for each
	// run lost with its host that was run again (retry-lost). Earlier
	// holds those lost runs, oldest first.
	Attempt int           `json:"attempt,omitempty"`
	Earlier []PastAttempt `json:"earlier,omitempty"`
	// Output is the end of the run's stdout and stderr, as text, at
	// most the job's output-bytes of it; OutputBytes counts all of it.
	Output      string `json:"output,omitempty"`
	OutputBytes int64  `json:"output_bytes,omitempty"`
}

// PastAttempt is an earlier run of a firing: one lost with its host
// (Lost, LostBy: when it was noticed, and by which host), or one that
// exited non-zero and was run again (End, ExitCode).
type PastAttempt struct {
	Attempt  int       `json:"attempt"`
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Token    int64     `json:"token,omitempty"`
	Start    time.Time `json:"start,omitzero"`
	End      time.Time `json:"end,omitzero"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Lost     time.Time `json:"lost,omitzero"`
	LostBy   string    `json:"lost_by,omitempty"`
	Reason   string    `json:"reason"`
}

// CronJobInfo is what a cron process publishes about a job, for
// `coordrun cron list`.
type CronJobInfo struct {
	Name     string `json:"name"`
	Schedule string `json:"schedule"`
	TZ       string `json:"tz,omitempty"`
	// Command is the command's base name, or its whole command line with
	// --record-command full.
	Command     []string `json:"command"`
	Overlap     string   `json:"overlap"`
	CatchUp     string   `json:"catch_up,omitempty"`
	RetryLost   int      `json:"retry_lost,omitempty"`
	RetryFailed int      `json:"retry_failed,omitempty"`
	MaxRuntime  string   `json:"max_runtime,omitempty"`
	Jitter      string   `json:"jitter,omitempty"`
}

// jobInfo is j's published definition; its command as recordedCommand
// keeps it. No host compares definitions by it (each host runs its own and
// the last to register wins the record), so the name alone loses nothing.
func jobInfo(j *CronJob, full bool) CronJobInfo {
	info := CronJobInfo{Name: j.Name, Schedule: j.Spec, TZ: j.TZ, Command: recordedCommand(j.Argv, full), Overlap: j.Overlap, RetryLost: j.RetryLost, RetryFailed: j.RetryFailed}
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

// pruneHorizon is how long a firing's record is kept whatever the history
// setting: the record is what stops a host whose clock lags from running
// the firing again, so host clocks must agree to within this.
const pruneHorizon = time.Hour

// historyLimits say how many firing records a job keeps: total of every
// kind, counted by name alone; and, when set (non-zero), success of runs
// that exited 0 and failed of the firings that ended otherwise (failed,
// lost, timed-out, replaced, unreadable). Skipped and paused firings
// count toward the total only, and a record still claimed or running is
// never pruned by the kind limits.
type historyLimits struct{ total, success, failed int }

func (j *CronJob) historyLimits() historyLimits {
	return historyLimits{total: j.History, success: j.HistorySuccess, failed: j.HistoryFailed}
}

// byKind says whether the limits need the records read.
func (l historyLimits) byKind() bool { return l.success > 0 || l.failed > 0 }

// slack is how many records past the last count by kind are let in before
// the next count reads them all again, so that the reads cost a tenth of a
// read per firing.
func (l historyLimits) slack() int { return max(1, (l.success+l.failed)/10) }

// historyKind sorts a record for the limits by kind: "success", "failed",
// or "" for one that counts toward the total only.
func historyKind(r FiringRecord) string {
	switch FiringResult(r) {
	case "done":
		return "success"
	case "failed", string(FiringLost), string(FiringTimedOut), string(FiringReplaced), string(FiringUnreadable):
		return "failed"
	}
	return ""
}

// storedFiring is a firing's record as read, with its node's name and
// version.
type storedFiring struct {
	name    string
	version int32
	rec     FiringRecord
}

// expiredByKind chooses the records (given oldest first) the kind limits
// drop: the oldest of each kind beyond its limit, among those scheduled
// before oldest (Unix seconds); the newer ones count but stay.
func expiredByKind(recs []storedFiring, l historyLimits, oldest int64) []storedFiring {
	var drop []storedFiring
	seen := map[string]int{}
	limit := map[string]int{"success": l.success, "failed": l.failed}
	for i := len(recs) - 1; i >= 0; i-- {
		k := historyKind(recs[i].rec)
		if k == "" || limit[k] == 0 {
			continue
		}
		seen[k]++
		secs, ok := firingSecond(recs[i].name)
		if seen[k] > limit[k] && ok && secs < oldest {
			drop = append(drop, recs[i])
		}
	}
	slices.Reverse(drop)
	return drop
}

// pruneFirings deletes the records the limits drop, of those scheduled
// before oldest: beyond the newest l.total by name, then, by kind, once
// more than the slack has come since counted (the count of records left
// after the last pass by kind; -1 before the first). It returns the
// count to pass next time.
func pruneFirings(ctx context.Context, c *client.Client, p cronPaths, l historyLimits, oldest time.Time, counted int) int {
	kids, _, err := c.Children(ctx, p.firings())
	if err != nil {
		return counted
	}
	sort.Strings(kids)
	if len(kids) > l.total {
		n := 0
		for _, k := range kids[:len(kids)-l.total] {
			if secs, ok := firingSecond(k); !ok || secs >= oldest.Unix() {
				break
			}
			_ = c.Delete(ctx, path.Join(p.firings(), k), -1)
			n++
		}
		kids = kids[n:]
	}
	if !l.byKind() || (counted >= 0 && len(kids) < counted+l.slack()) || len(kids) <= min(l.success, l.failed) {
		return counted
	}
	recs := make([]storedFiring, 0, len(kids))
	for _, k := range kids {
		b, st, err := c.Get(ctx, path.Join(p.firings(), k))
		if errors.Is(err, wire.ErrNoNode) {
			continue
		}
		if err != nil {
			return counted
		}
		r := storedFiring{name: k, version: st.Version}
		if json.Unmarshal(b, &r.rec) != nil {
			r.rec.State = FiringUnreadable
		}
		recs = append(recs, r)
	}
	left := len(recs)
	for _, r := range expiredByKind(recs, l, oldest.Unix()) {
		// Conditional: a record rewritten since it was read (a retry
		// taking it) is left for the next pass.
		if c.Delete(ctx, path.Join(p.firings(), r.name), r.version) == nil {
			left--
		}
	}
	return left
}

// CronHistory reads a job's firing records, oldest first.
func CronHistory(ctx context.Context, c *client.Client, root, job string) ([]FiringRecord, error) {
	p := cronPaths{root: root, job: job}
	kids, _, err := c.Children(ctx, p.firings())
	if errors.Is(err, wire.ErrNoNode) {
		return nil, fmt.Errorf("no cron job %q under %s", job, root)
	}
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", job, err)
	}
	sort.Strings(kids)
	out := make([]FiringRecord, 0, len(kids))
	for _, k := range kids {
		b, _, err := c.Get(ctx, path.Join(p.firings(), k))
		if errors.Is(err, wire.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var r FiringRecord
		if err := json.Unmarshal(b, &r); err != nil {
			secs, _ := firingSecond(k)
			r = FiringRecord{Job: job, Scheduled: time.Unix(secs, 0).UTC(), State: FiringUnreadable}
		}
		out = append(out, r)
	}
	return out, nil
}

// CronJobs lists the jobs registered under root with their definitions
// and live hosts.
func CronJobs(ctx context.Context, c *client.Client, root string) ([]CronJobInfo, map[string][]HolderInfo, error) {
	kids, _, err := c.Children(ctx, root)
	if errors.Is(err, wire.ErrNoNode) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(kids)
	var jobs []CronJobInfo
	hosts := map[string][]HolderInfo{}
	for _, k := range kids {
		p := cronPaths{root: root, job: k}
		b, _, err := c.Get(ctx, p.dir())
		if errors.Is(err, wire.ErrNoAuth) {
			// Not skipped: a list that leaves out the jobs one may not
			// read would say they do not exist.
			return nil, nil, fmt.Errorf("job %s: %w", k, err)
		}
		if err != nil {
			continue
		}
		var info CronJobInfo
		if json.Unmarshal(b, &info) != nil {
			continue
		}
		jobs = append(jobs, info)
		hk, _, _ := c.Children(ctx, p.hosts())
		sort.Strings(hk)
		for _, h := range hk {
			hb, _, err := c.Get(ctx, p.host(h))
			if err != nil {
				continue
			}
			var hi HolderInfo
			if json.Unmarshal(hb, &hi) == nil {
				hosts[info.Name] = append(hosts[info.Name], hi)
			}
		}
	}
	return jobs, hosts, nil
}

// CronRequest is a request, made by hand, to run a job's firings outside
// its schedule: one now (trigger) or each missed scheduled time of a range
// (backfill). One host takes it (deleting the request is the claim) and
// runs the times in order, under the job's overlap policy.
type CronRequest struct {
	Kind  string      `json:"kind"` // "trigger", "backfill", or "retry" (retry-failed)
	Times []time.Time `json:"times"`
	By    string      `json:"by"`
	At    time.Time   `json:"at"`
	// A retry names the firing's record, the attempt that failed, and
	// when the next may start (retry-backoff).
	Firing    string    `json:"firing,omitempty"`
	Attempt   int       `json:"attempt,omitempty"`
	NotBefore time.Time `json:"not_before,omitzero"`
}

// CronControl is who paused a job, and when.
type CronControl struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// errNoJob: the job has never been registered under the root.
func errNoJob(root, job string) error { return fmt.Errorf("no cron job %q under %s", job, root) }

// PauseCron pauses a job for every host: its scheduled firings are
// recorded paused and not run, until ResumeCron. Pausing a paused job
// changes nothing; it reports false.
func PauseCron(ctx context.Context, c *client.Client, root, job, by string) (bool, error) {
	p := cronPaths{root: root, job: job}
	b, _ := json.Marshal(CronControl{By: by, At: time.Now().UTC()})
	acl, _, err := c.GetACL(ctx, p.dir())
	if errors.Is(err, wire.ErrNoNode) {
		return false, errNoJob(root, job)
	}
	if err != nil {
		return false, err
	}
	_, err = c.Create(ctx, p.paused(), b, 0, acl)
	switch {
	case errors.Is(err, wire.ErrNodeExists):
		return false, nil
	case errors.Is(err, wire.ErrNoNode):
		return false, errNoJob(root, job)
	}
	return err == nil, err
}

// ResumeCron ends a pause; it reports false if the job was not paused.
func ResumeCron(ctx context.Context, c *client.Client, root, job string) (bool, error) {
	p := cronPaths{root: root, job: job}
	if _, ok, err := c.Exists(ctx, p.dir()); err != nil || !ok {
		if err == nil {
			err = errNoJob(root, job)
		}
		return false, err
	}
	err := c.Delete(ctx, p.paused(), -1)
	if errors.Is(err, wire.ErrNoNode) {
		return false, nil
	}
	return err == nil, err
}

// CronPaused reports whether a job is paused, and by whom.
func CronPaused(ctx context.Context, c *client.Client, root, job string) (*CronControl, error) {
	b, _, err := c.Get(ctx, cronPaths{root: root, job: job}.paused())
	if errors.Is(err, wire.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cc CronControl
	_ = json.Unmarshal(b, &cc)
	return &cc, nil
}

// RequestCron asks the job's hosts to run the firings of req; it returns
// the request's node.
func RequestCron(ctx context.Context, c *client.Client, root, job string, req CronRequest) (string, error) {
	p := cronPaths{root: root, job: job}
	acl, _, err := c.GetACL(ctx, p.dir())
	if errors.Is(err, wire.ErrNoNode) {
		return "", errNoJob(root, job)
	}
	if err != nil {
		return "", err
	}
	if err := recipe.EnsurePath(ctx, c, p.triggers(), acl); err != nil {
		return "", err
	}
	req.At = time.Now().UTC()
	b, _ := json.Marshal(req)
	return c.Create(ctx, path.Join(p.triggers(), "t-"), b, wire.FlagPersistentSequential, acl)
}

// MissedFirings lists the scheduled times of job in [from, to] that have
// no record, oldest first; at most limit of them.
func MissedFirings(ctx context.Context, c *client.Client, root, job string, from, to time.Time, limit int) ([]time.Time, error) {
	p := cronPaths{root: root, job: job}
	b, _, err := c.Get(ctx, p.dir())
	if errors.Is(err, wire.ErrNoNode) {
		return nil, errNoJob(root, job)
	}
	if err != nil {
		return nil, err
	}
	var info CronJobInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("job %s: unreadable definition: %w", job, err)
	}
	sched, err := ParseSchedule(info.Schedule, info.TZ)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", job, err)
	}
	kids, _, err := c.Children(ctx, p.firings())
	if err != nil && !errors.Is(err, wire.ErrNoNode) {
		return nil, err
	}
	have := map[string]bool{}
	for _, k := range kids {
		have[k] = true
	}
	var out []time.Time
	for t := sched.Next(from.Add(-time.Nanosecond)); !t.IsZero() && !t.After(to); t = sched.Next(t) {
		if have[firingName(t)] {
			continue
		}
		if len(out) == limit {
			return nil, fmt.Errorf("more than %d missed firings between %s and %s: backfill a shorter range", limit, from.Format(time.RFC3339), to.Format(time.RFC3339))
		}
		out = append(out, t.UTC())
	}
	return out, nil
}
