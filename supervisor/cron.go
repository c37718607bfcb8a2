package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/fencing"
	"github.com/robfig/cron/v3"
)

// Cron across hosts. Every host runs the same schedule; each firing runs
// once, on one host.
//
// A firing is its job and its *scheduled* time, never the time a host got
// around to it. When a host's clock reaches a firing, it claims it by
// creating the persistent node <root>/<job>/firings/<scheduled unix s>;
// the ensemble lets exactly one create succeed, and only that host runs
// the firing. A host whose clock lags finds the firing claimed and skips
// it; a claimed firing is never run again, whoever crashed. There is no
// leader to elect or lose: every live host is a candidate for every
// firing, so a dead host costs nothing but its own running job.
//
// The claimant then runs the job under the same lock recipe and watchdog
// as coordrun run (lock folder <root>/<job>/lock), which also enforces the
// overlap policy: "skip" tries the lock and records the firing as skipped
// if the previous run still holds it; "queue" waits for it.

// Overlap policies.
const (
	OverlapSkip  = "skip"
	OverlapQueue = "queue"
)

// CronJob is one scheduled job.
type CronJob struct {
	Name     string
	Spec     string // robfig/cron syntax, seconds optional, descriptors, CRON_TZ=
	TZ       string // time zone name; empty: local, unless Spec has CRON_TZ=
	Argv     []string
	Overlap  string        // OverlapSkip (default) or OverlapQueue
	CatchUp  time.Duration // run the latest missed firing if younger than this; 0: never
	History  int           // firing records kept; default 100
	schedule cron.Schedule
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

// Validate checks the job and parses its schedule.
func (j *CronJob) Validate() error {
	if j.Name == "" || strings.ContainsAny(j.Name, "/\x00") || j.Name == "." || j.Name == ".." {
		return fmt.Errorf("bad job name %q", j.Name)
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
	case OverlapSkip, OverlapQueue:
	default:
		return fmt.Errorf("job %s: overlap %q: want skip or queue", j.Name, j.Overlap)
	}
	if j.CatchUp < 0 {
		return fmt.Errorf("job %s: negative catch-up window", j.Name)
	}
	if j.History == 0 {
		j.History = 100
	}
	if j.History < 1 {
		return fmt.Errorf("job %s: history must keep at least 1 firing", j.Name)
	}
	return nil
}

// Next is the job's first firing after t.
func (j *CronJob) Next(t time.Time) time.Time { return j.schedule.Next(t) }

// FiringRecord is the data of a firing's node.
type FiringRecord struct {
	Job       string    `json:"job"`
	Scheduled time.Time `json:"scheduled"`
	State     string    `json:"state"` // claimed, running, done, skipped, lost
	Reason    string    `json:"reason,omitempty"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	Nonce     string    `json:"nonce"`
	Claimed   time.Time `json:"claimed"`
	Token     int64     `json:"token,omitempty"`
	Start     time.Time `json:"start,omitzero"`
	End       time.Time `json:"end,omitzero"`
	ExitCode  *int      `json:"exit_code,omitempty"`
}

// CronOptions configure a cron process.
type CronOptions struct {
	Run  Options // connection, kill timing, Exe, Env, Signals, Log; Argv and Name unused
	Root string  // e.g. /coordrun/cron
	Jobs []*CronJob
	// Now is the scheduling clock; tests skew it per host. Default
	// time.Now.
	Now func() time.Time
	// OnFire, when set, observes every firing this host handled.
	OnFire func(job string, rec FiringRecord)
}

func firingName(t time.Time) string { return fmt.Sprintf("%013d", t.Unix()) }

// RunCron schedules the jobs until ctx ends or the session is lost, and
// returns coordrun's exit code.
func RunCron(ctx context.Context, o CronOptions) (int, error) {
	if len(o.Jobs) == 0 {
		return ExitUsage, UsageError{errors.New("no jobs")}
	}
	names := map[string]bool{}
	for _, j := range o.Jobs {
		if err := j.Validate(); err != nil {
			return ExitUsage, UsageError{err}
		}
		if names[j.Name] {
			return ExitUsage, UsageError{fmt.Errorf("job %s defined twice", j.Name)}
		}
		names[j.Name] = true
	}
	ro := o.Run
	ro.Name, ro.Argv, ro.Root = "cron", []string{"cron"}, o.Root
	if err := ro.Validate(); err != nil {
		return ExitUsage, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	log := ro.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
		ro.Log = log
	}
	sess, err := dial(ctx, ro)
	if err != nil {
		return ExitUsage, err
	}
	c := sess.c
	defer c.Close()
	s := &cronHost{c: c, o: o, ro: ro, log: log, margin: sess.margin, acl: sess.acl, leases: newLeaseFanout(c), sigs: map[chan os.Signal]struct{}{}}
	for _, j := range o.Jobs {
		if err := s.register(ctx, j); err != nil {
			return ExitUsage, err
		}
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for _, j := range o.Jobs {
		wg.Add(1)
		go func() { defer wg.Done(); s.schedule(sctx, j) }()
	}
	code := 0
	var runErr error
	func() {
		for {
			select {
			case sig := <-ro.Signals:
				if sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2 {
					s.forward(sig)
					continue
				}
				log.Info("stopping: no new firings; running jobs get the signal", "signal", sig.String())
				s.mu.Lock()
				s.stopping = true
				s.mu.Unlock()
				s.forward(sig)
				return
			case <-c.Done():
				code, runErr = ExitSessionLost, fmt.Errorf("session lost: %w", c.Err())
				log.Error("session lost; stopping scheduling", "err", c.Err())
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	stop()
	wg.Wait()
	if s.sessionLost.Load() && code == 0 {
		code, runErr = ExitSessionLost, errors.New("session lost; a running job was killed")
	}
	return code, runErr
}

// cronHost is one host's cron process.
type cronHost struct {
	c      *client.Client
	o      CronOptions
	ro     Options
	log    *slog.Logger
	margin time.Duration
	acl    []wire.ACL
	leases *leaseFanout

	mu          sync.Mutex
	sigs        map[chan os.Signal]struct{}
	stopping    bool // a terminating signal came: start no more jobs
	sessionLost atomic.Bool
}

func (s *cronHost) forward(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.sigs {
		select {
		case ch <- sig:
		default:
		}
	}
}

// CronJobInfo is what a cron process publishes about a job, for
// `coordrun cron list`.
type CronJobInfo struct {
	Name     string   `json:"name"`
	Schedule string   `json:"schedule"`
	TZ       string   `json:"tz,omitempty"`
	Command  []string `json:"command"`
	Overlap  string   `json:"overlap"`
	CatchUp  string   `json:"catch_up,omitempty"`
}

// register publishes the job's definition and this host as a candidate.
func (s *cronHost) register(ctx context.Context, j *CronJob) error {
	dir := path.Join(s.o.Root, j.Name)
	for _, p := range []string{path.Join(dir, "firings"), path.Join(dir, "hosts")} {
		if err := ensurePath(ctx, s.c, p, s.acl); err != nil {
			return err
		}
	}
	info := CronJobInfo{Name: j.Name, Schedule: j.Spec, TZ: j.TZ, Command: j.Argv, Overlap: j.Overlap}
	if j.CatchUp > 0 {
		info.CatchUp = j.CatchUp.String()
	}
	b, _ := json.Marshal(info)
	hi := holderInfo(s.ro.Argv, s.c.SessionTimeout(), s.ro.KillGrace+s.margin)
	hb, _ := json.Marshal(hi)
	// Named by session, so a create retried after a lost reply finds its
	// own node instead of leaving a second one.
	host := path.Join(dir, "hosts", fmt.Sprintf("%s-%d-%x", hi.Host, hi.PID, s.c.SessionID()))
	for {
		_, err := s.c.Set(ctx, dir, b, -1)
		if err == nil {
			_, err = s.c.Create(ctx, host, hb, wire.FlagEphemeral, s.acl)
			if errors.Is(err, wire.ErrNodeExists) {
				err = nil
			}
		}
		if !errors.Is(err, client.ErrConnectionLoss) {
			return err
		}
	}
}

// schedule fires the job at each scheduled time until ctx ends.
func (s *cronHost) schedule(ctx context.Context, j *CronJob) {
	var runs sync.WaitGroup
	defer runs.Wait()
	if j.CatchUp > 0 {
		if t, ok := latestMissed(j, s.o.Now(), j.CatchUp); ok {
			runs.Add(1)
			go func() { defer runs.Done(); s.fire(ctx, j, t, true) }()
		}
	}
	now := s.o.Now()
	next := j.Next(now)
	for {
		// Sleep until this host's clock reaches the firing; re-check on
		// waking, since the clock is this host's own and may be skewed.
		for {
			d := next.Sub(s.o.Now())
			if d <= 0 {
				break
			}
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		at := next
		runs.Add(1)
		go func() { defer runs.Done(); s.fire(ctx, j, at, false) }()
		// The next firing after this one, not after now: a process
		// that wakes late still has only one firing in hand, and
		// firings it slept through are missed (or caught up at start).
		next = j.Next(at)
		if n := s.o.Now(); next.Before(n) {
			next = j.Next(n)
		}
	}
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

// fire claims one firing and, if this host won it, runs it.
func (s *cronHost) fire(ctx context.Context, j *CronJob, at time.Time, catchUp bool) {
	dir := path.Join(s.o.Root, j.Name)
	node := path.Join(dir, "firings", firingName(at))
	hi := holderInfo(s.ro.Argv, s.c.SessionTimeout(), s.ro.KillGrace+s.margin)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	rec := FiringRecord{Job: j.Name, Scheduled: at.UTC(), State: "claimed", Host: hi.Host, PID: hi.PID,
		Nonce: hex.EncodeToString(rnd[:]), Claimed: time.Now().UTC()}
	if catchUp {
		rec.Reason = "catch-up"
	}
	won, err := s.claim(ctx, node, &rec)
	if err != nil {
		s.log.Warn("claim failed", "job", j.Name, "scheduled", at, "err", err)
		return
	}
	if !won {
		s.log.Debug("firing already claimed", "job", j.Name, "scheduled", at)
		return
	}
	s.log.Info("firing claimed", "job", j.Name, "scheduled", at.Format(time.RFC3339), "catch_up", catchUp)
	s.runFiring(ctx, j, node, &rec)
	if s.o.OnFire != nil {
		s.o.OnFire(j.Name, rec)
	}
	s.prune(ctx, j)
}

// claim creates the firing's node if no one has. A create whose reply was
// lost is resolved by reading the node back and comparing the nonce.
func (s *cronHost) claim(ctx context.Context, node string, rec *FiringRecord) (bool, error) {
	b, _ := json.Marshal(rec)
	for {
		_, err := s.c.Create(ctx, node, b, 0, s.acl)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, wire.ErrNodeExists):
		case errors.Is(err, client.ErrConnectionLoss):
		default:
			return false, err
		}
		if err := s.c.Sync(ctx, node); err != nil {
			if errors.Is(err, client.ErrConnectionLoss) {
				continue
			}
			return false, err
		}
		data, _, err := s.c.Get(ctx, node)
		if errors.Is(err, wire.ErrNoNode) {
			continue
		}
		if err != nil {
			return false, err
		}
		var other FiringRecord
		_ = json.Unmarshal(data, &other)
		return other.Nonce == rec.Nonce, nil
	}
}

// update writes the firing's record and returns the node's new version,
// or -1 if it could not.
func (s *cronHost) update(ctx context.Context, node string, rec *FiringRecord) int32 {
	b, _ := json.Marshal(rec)
	st, err := s.c.Set(ctx, node, b, -1)
	if err != nil {
		s.log.Warn("could not record firing", "node", node, "err", err)
		return -1
	}
	return st.Version
}

// runFiring runs a claimed firing under the job's lock. The firing's
// record and the lock's nodes are watched while the job runs: if another
// client deletes or changes them, the run is stopped.
func (s *cronHost) runFiring(ctx context.Context, j *CronJob, node string, rec *FiringRecord) {
	// Records must be written even while shutting down.
	wctx := context.WithoutCancel(ctx)
	dir := path.Join(s.o.Root, j.Name, "lock")
	e, err := enter(wctx, s.c, dir, holderInfo(j.Argv, s.c.SessionTimeout(), s.ro.KillGrace+s.margin), s.acl, s.log)
	if err != nil {
		rec.State, rec.Reason = "lost", err.Error()
		s.update(wctx, node, rec)
		return
	}
	held := false
	defer func() {
		rctx, cancel := context.WithDeadline(wctx, releaseDeadline(s.c))
		defer cancel()
		_ = e.release(rctx, held)
	}()
	if err := e.acquire(ctx, j.Overlap == OverlapSkip, nil); err != nil {
		rec.State = "skipped"
		rec.Reason = "previous run still going"
		if !errors.Is(err, ErrNotAcquired) {
			rec.State, rec.Reason = "lost", err.Error()
		}
		s.update(wctx, node, rec)
		return
	}
	held = true
	hctx, stopWatch := context.WithCancel(wctx)
	defer stopWatch()
	standing := e.watchStanding(hctx)
	rec.State, rec.Token, rec.Start = "running", e.czxid, time.Now().UTC()
	v := s.update(wctx, node, rec)
	claim, _ := watchNodes(hctx, s.c, []watchedNode{{path: node, ok: func(st wire.Stat) bool { return st.Version == v }}})

	// Register for signals and check for a stop in one step: a job
	// started after the stop signal was forwarded would never get it.
	sigs := make(chan os.Signal, 4)
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		rec.State, rec.Reason = "lost", "host stopping"
		s.update(wctx, node, rec)
		return
	}
	s.sigs[sigs] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.sigs, sigs)
		s.mu.Unlock()
	}()
	pump := newSignalPump(sigs)
	defer pump.close()
	ro := s.ro
	ro.Name, ro.Argv, ro.LockDelay = j.Name, j.Argv, 0
	losses := mergeLosses(hctx, standing, claim)
	code, err := waitToStart(ctx, ro, s.c, e, pump, losses, s.log)
	if err == nil && code == 0 {
		extra := []string{fencing.EnvScheduledTime + "=" + rec.Scheduled.Format(time.RFC3339)}
		s.log.Info("running", "job", j.Name, "scheduled", rec.Scheduled.Format(time.RFC3339), "token", e.czxid)
		h := &holding{c: s.c, e: e, leases: s.leases, margin: s.margin, grace: s.ro.KillGrace, log: s.log, sigs: pump, standing: losses}
		code, err = h.run(hctx, ro.Exe, j.Argv, jobEnv(ro, e, extra), nil)
	}
	rec.End = time.Now().UTC()
	rec.ExitCode = &code
	rec.State = "done"
	switch {
	case code == ExitSessionLost && err != nil:
		rec.State, rec.Reason = "lost", err.Error()
		s.sessionLost.Store(true)
	case code == ExitLockLost && err != nil:
		rec.State, rec.Reason = "lost", err.Error()
	}
	s.log.Info("finished", "job", j.Name, "scheduled", rec.Scheduled.Format(time.RFC3339), "exit", code, "duration", rec.End.Sub(rec.Start))
	s.update(wctx, node, rec)
}

// mergeLosses delivers the first loss of either channel.
func mergeLosses(ctx context.Context, a, b <-chan standingLoss) <-chan standingLoss {
	out := make(chan standingLoss, 1)
	go func() {
		select {
		case l := <-a:
			out <- l
		case l := <-b:
			out <- l
		case <-ctx.Done():
		}
	}()
	return out
}

// pruneHorizon is how long a firing's record is kept whatever the history
// setting: the record is what stops a host whose clock lags from running
// the firing again, so host clocks must agree to within this.
const pruneHorizon = time.Hour

// prune keeps the newest keep firing records, and every record younger
// than the horizon (or the catch-up window, if longer).
func (s *cronHost) prune(ctx context.Context, j *CronJob) {
	dir := path.Join(s.o.Root, j.Name, "firings")
	kids, _, err := s.c.Children(ctx, dir)
	if err != nil || len(kids) <= j.History {
		return
	}
	sort.Strings(kids)
	oldest := s.o.Now().Add(-max(pruneHorizon, j.CatchUp)).Unix()
	for _, k := range kids[:len(kids)-j.History] {
		if secs, err := strconv.ParseInt(k, 10, 64); err != nil || secs >= oldest {
			break
		}
		_ = s.c.Delete(ctx, path.Join(dir, k), -1)
	}
}

// CronHistory reads a job's firing records, oldest first.
func CronHistory(ctx context.Context, c *client.Client, root, job string) ([]FiringRecord, error) {
	dir := path.Join(root, job, "firings")
	kids, _, err := c.Children(ctx, dir)
	if errors.Is(err, wire.ErrNoNode) {
		return nil, fmt.Errorf("no cron job %q under %s", job, root)
	}
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", job, err)
	}
	sort.Strings(kids)
	out := make([]FiringRecord, 0, len(kids))
	for _, k := range kids {
		b, _, err := c.Get(ctx, path.Join(dir, k))
		if errors.Is(err, wire.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var r FiringRecord
		if err := json.Unmarshal(b, &r); err != nil {
			secs, _ := strconv.ParseInt(k, 10, 64)
			r = FiringRecord{Job: job, Scheduled: time.Unix(secs, 0).UTC(), State: "unreadable"}
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
		b, _, err := c.Get(ctx, path.Join(root, k))
		if err != nil {
			continue
		}
		var info CronJobInfo
		if json.Unmarshal(b, &info) != nil {
			continue
		}
		jobs = append(jobs, info)
		hk, _, _ := c.Children(ctx, path.Join(root, k, "hosts"))
		sort.Strings(hk)
		for _, h := range hk {
			hb, _, err := c.Get(ctx, path.Join(root, k, "hosts", h))
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
