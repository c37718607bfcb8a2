package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/fencing"
	"golang.org/x/sys/unix"
)

// Cron across hosts. Every host runs the same schedule; each firing runs
// once, on one host.
//
// A firing is its job and its *scheduled* time, never the time a host got
// around to it. When a host's clock reaches a firing, it claims it by
// creating the persistent node <root>/<job>/firings/<scheduled unix s>
// (recipe.ClaimOnce); the ensemble lets exactly one create succeed, and
// only that host runs the firing. A host whose clock lags finds the firing
// claimed and skips it; a claimed firing is never run again, whoever
// crashed. There is no leader to elect or lose: every live host is a
// candidate for every firing, so a dead host costs nothing but its own
// running job.
//
// The claimant then runs the job under the same lock recipe and watchdog
// as coordrun run (lock folder <root>/<job>/lock), which also enforces the
// overlap policy: "skip" tries the lock and records the firing as skipped
// if the previous run still holds it; "queue" waits for it.
//
// The schedule is in schedule.go, the znodes of a job in cronstore.go.

// CronOptions configure a cron process.
type CronOptions struct {
	ConnOptions
	JobOptions
	Log  *slog.Logger
	Root string // e.g. /coordrun/cron
	Jobs []*CronJob
	// Now is the scheduling clock; tests skew it per host. Default
	// time.Now.
	Now func() time.Time
	// OnFire, when set, observes every firing this host handled.
	OnFire func(job string, rec FiringRecord)
	// Metrics, when set, follows the firings (see CronMetrics).
	Metrics *CronMetrics
	// Reload, when set, is what SIGHUP reads the jobs from again (the
	// jobs file); without it SIGHUP stops the process like SIGTERM.
	Reload func() ([]*CronJob, error)
	// Ready, when set, is called once the session is up and every job is
	// registered, before the first firing (coordrun cron tells systemd
	// READY=1 then).
	Ready func()
}

// Validate checks every job (filling in their defaults), the root and the
// timing constraints.
func (o *CronOptions) Validate() error {
	if len(o.Jobs) == 0 {
		return errors.New("no jobs")
	}
	names := map[string]bool{}
	for _, j := range o.Jobs {
		if err := j.Validate(); err != nil {
			return err
		}
		if names[j.Name] {
			return fmt.Errorf("job %s defined twice", j.Name)
		}
		names[j.Name] = true
	}
	if err := checkRoot("cron", o.Root); err != nil {
		return err
	}
	if err := checkRecordCommand(o.RecordCommand); err != nil {
		return err
	}
	return checkTiming(o.ConnOptions, o.JobOptions)
}

// RunCron schedules the jobs until ctx ends or the session is lost, and
// returns coordrun's exit code.
func RunCron(ctx context.Context, o CronOptions) (int, error) {
	if err := o.Validate(); err != nil {
		return ExitUsage, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	log := o.Log
	// Until the jobs are scheduled, a terminating signal ends the start:
	// connecting and registering give up at once rather than run on to
	// their own timeouts, and coordrun exits as after any stop.
	setup, endSetup := context.WithCancel(ctx)
	defer endSetup()
	early := make(chan os.Signal, 1)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case sig := <-o.Signals:
				if ss, ok := sig.(syscall.Signal); ok && isStopSignal(ss) {
					early <- sig
					endSetup()
					return
				}
				// USR1, USR2: no job runs yet to forward them to.
			case <-setup.Done():
				return
			}
		}
	}()
	s, h, err := startCron(setup, o, log)
	endSetup()
	<-watched
	if s != nil {
		defer s.close()
	}
	select {
	case sig := <-early:
		log.Info("stopping before the first firing", "signal", sig.String())
		return ExitOK, nil
	default:
	}
	if err != nil {
		return dialCode(err), err
	}
	if o.Ready != nil {
		o.Ready()
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	loops := map[string]*scheduled{}
	start := func(j *CronJob) {
		loop, end := context.WithCancel(sctx)
		loops[j.Name] = &scheduled{job: j, end: end}
		wg.Add(1)
		go func() { defer wg.Done(); h.schedule(loop, sctx, j) }()
	}
	for _, j := range o.Jobs {
		start(j)
	}
	code := 0
	var runErr error
	func() {
		for {
			select {
			case sig := <-o.Signals:
				if sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2 {
					h.forward(sig)
					continue
				}
				if sig == syscall.SIGHUP && o.Reload != nil {
					h.reload(sctx, loops, start)
					continue
				}
				log.Info("stopping: no new firings; running jobs get the signal", "signal", sig.String())
				h.mu.Lock()
				h.stopping = true
				h.mu.Unlock()
				h.forward(sig)
				return
			case <-s.c.Done():
				code, runErr = ExitSessionLost, fmt.Errorf("session lost: %w", s.c.Err())
				log.Error("session lost; stopping scheduling", "err", s.c.Err())
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	stop()
	wg.Wait()
	h.hooks.Wait()
	if h.sessionLost.Load() && code == 0 {
		code, runErr = ExitSessionLost, errors.New("session lost; a running job was killed")
	}
	return code, runErr
}

// scheduled is a job being scheduled, and how to stop its scheduling.
type scheduled struct {
	job *CronJob
	end context.CancelFunc
}

// reload re-reads the jobs (Reload) and schedules what changed: a job
// dropped or changed stops being scheduled (its running firings go on to
// their end), a new or changed one is registered and scheduled. A bad
// jobs file changes nothing.
func (h *cronHost) reload(ctx context.Context, loops map[string]*scheduled, start func(*CronJob)) {
	log := h.s.log
	jobs, err := h.o.Reload()
	if err == nil {
		o := h.o
		o.Jobs = jobs
		err = o.Validate()
	}
	if err != nil {
		log.Error("reload refused; the jobs go on as they were", "err", err)
		return
	}
	keep := map[string]bool{}
	var added, changed, dropped []string
	for _, j := range jobs {
		keep[j.Name] = true
		old, ok := loops[j.Name]
		if ok && sameJob(old.job, j) {
			continue
		}
		if err := h.register(ctx, j); err != nil {
			log.Error("reload: cannot register job; it keeps its old definition", "job", j.Name, "err", err)
			continue
		}
		if ok {
			old.end()
			changed = append(changed, j.Name)
		} else {
			added = append(added, j.Name)
		}
		if h.o.Metrics != nil {
			h.o.Metrics.seed(ctx, h.s.c, h.o.Root, j)
		}
		start(j)
	}
	for name, sc := range loops {
		if !keep[name] {
			sc.end()
			delete(loops, name)
			dropped = append(dropped, name)
		}
	}
	log.Info("jobs reloaded", "added", added, "changed", changed, "dropped", dropped)
}

// sameJob reports whether two definitions of a job schedule and run
// alike.
func sameJob(a, b *CronJob) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// startCron connects and registers every job and this host; the session,
// when made, is returned also with an error, for the caller to close.
func startCron(ctx context.Context, o CronOptions, log *slog.Logger) (*session, *cronHost, error) {
	s, err := dial(ctx, o.ConnOptions, o.KillGrace, log)
	if err != nil {
		return nil, nil, err
	}
	h := &cronHost{s: s, o: o, sigs: map[chan os.Signal]struct{}{}, counted: map[string]int{}, dueLater: map[string]bool{}}
	for _, j := range o.Jobs {
		if err := h.register(ctx, j); err != nil {
			return s, nil, err
		}
		if o.Metrics != nil {
			o.Metrics.seed(ctx, s.c, o.Root, j)
		}
	}
	return s, h, nil
}

// cronHost is one host's cron process. Its firings run concurrently, one
// goroutine each.
type cronHost struct {
	s *session
	o CronOptions

	hooks sync.WaitGroup // hooks still running
	// hostNode is this host's node under every job's hosts/, named by
	// its session: firing records name it, so that the others can tell
	// when a firing was lost with this host.
	hostNode string

	mu       sync.Mutex
	sigs     map[chan os.Signal]struct{}
	stopping bool // a terminating signal came: start no more jobs
	// counted is, per job, how many firing records were left after the
	// last prune by kind (pruneFirings).
	counted map[string]int
	// dueLater holds the retry requests this host waits to take.
	dueLater    map[string]bool
	sessionLost atomic.Bool
}

func (h *cronHost) paths(j *CronJob) cronPaths { return cronPaths{root: h.o.Root, job: j.Name} }

func (h *cronHost) forward(sig os.Signal) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.sigs {
		select {
		case ch <- sig:
		default:
		}
	}
}

// register publishes the job's definition and this host as a candidate.
func (h *cronHost) register(ctx context.Context, j *CronJob) error {
	c, p := h.s.c, h.paths(j)
	for _, dir := range []string{p.firings(), p.hosts(), p.triggers()} {
		if err := recipe.EnsurePath(ctx, c, dir, h.s.acl); err != nil {
			return withAccessHint(err)
		}
	}
	b, _ := json.Marshal(jobInfo(j, h.s.recordFull))
	// A host's node describes the cron process itself.
	hi := holderInfo([]string{"cron"}, false, c.SessionTimeout(), h.o.KillGrace+h.s.margin)
	hb, _ := json.Marshal(hi)
	// Named by session, so a create retried after a lost reply finds its
	// own node instead of leaving a second one.
	h.hostNode = fmt.Sprintf("%s-%d-%x", hi.Host, hi.PID, c.SessionID())
	host := p.host(h.hostNode)
	for {
		_, err := c.Set(ctx, p.dir(), b, -1)
		if err == nil {
			_, err = c.Create(ctx, host, hb, wire.FlagEphemeral, h.s.acl)
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
//
// loop ends the scheduling (and the job's watches) alone, as a reload
// does for a job it drops or changes; ctx ends the runs too. It returns
// once loop has ended and the runs it started are over.
func (h *cronHost) schedule(loop, ctx context.Context, j *CronJob) {
	var runs sync.WaitGroup
	defer runs.Wait()
	if j.CatchUp > 0 {
		if t, ok := latestMissed(j, h.o.Now(), j.CatchUp); ok {
			runs.Add(1)
			go func() { defer runs.Done(); h.fire(ctx, j, t, true) }()
		}
	}
	runs.Add(2)
	go func() { defer runs.Done(); h.watchLosses(loop, ctx, j, &runs) }()
	go func() { defer runs.Done(); h.watchRequests(loop, ctx, j, &runs) }()
	next := j.Next(h.o.Now())
	for {
		// Sleep until this host's clock reaches the firing; re-check on
		// waking, since the clock is this host's own and may be skewed.
		for {
			d := next.Add(j.Offset(next)).Sub(h.o.Now())
			if d <= 0 {
				break
			}
			t := time.NewTimer(d)
			select {
			case <-loop.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		at := next
		runs.Add(1)
		go func() { defer runs.Done(); h.fire(ctx, j, at, false) }()
		next = nextAfter(j, at, h.o.Now())
	}
}

// fire claims one firing and, if this host won it, runs it, unless the
// job is paused.
func (h *cronHost) fire(ctx context.Context, j *CronJob, at time.Time, catchUp bool) {
	reason := ""
	if catchUp {
		reason = "catch-up"
	}
	node := h.paths(j).firing(at)
	rec, won := h.claim(ctx, j, node, at, reason)
	if !won {
		return
	}
	if paused, err := CronPaused(ctx, h.s.c, h.o.Root, j.Name); err == nil && paused != nil {
		// Checked by the claimant, after the claim: one record per
		// firing, whichever host took it.
		rec.State, rec.Reason = FiringPaused, fmt.Sprintf("job paused by %s at %s", paused.By, paused.At.Format(time.RFC3339))
		v := int32(0)
		h.record(ctx, node, &rec, &v)
		h.s.log.Info("firing not run: the job is paused", "job", j.Name, "scheduled", at.Format(time.RFC3339))
		h.ended(j, rec)
		return
	}
	// The claim created the node: version 0.
	h.runClaimed(ctx, j, node, &rec, 0)
}

// claim tries to win the firing at (record node) for this host.
func (h *cronHost) claim(ctx context.Context, j *CronJob, node string, at time.Time, reason string) (FiringRecord, bool) {
	log := h.s.log
	hi := holderInfo(j.Argv, h.s.recordFull, h.s.c.SessionTimeout(), h.o.KillGrace+h.s.margin)
	rec := FiringRecord{Job: j.Name, Scheduled: at.UTC(), State: FiringClaimed, Reason: reason, Host: hi.Host, PID: hi.PID,
		Nonce: recipe.Nonce(), Claimed: time.Now().UTC(), HostNode: h.hostNode, Attempt: 1}
	b, _ := json.Marshal(rec)
	h.mu.Lock()
	stopping := h.stopping
	h.mu.Unlock()
	if stopping {
		// Leave it to the hosts that stay.
		return rec, false
	}
	// A claim in flight when a stop comes is seen through, so that its
	// outcome is known: a record this host created is then recorded
	// lost (host stopping) rather than left claimed by no one.
	cctx, endClaim := h.s.afterStop(ctx)
	defer endClaim()
	won, err := recipe.ClaimOnce(cctx, h.s.c, node, b, recipe.ClaimOptions{ACL: h.s.acl, Mine: func(data []byte) bool {
		var other FiringRecord
		_ = json.Unmarshal(data, &other)
		return other.Nonce == rec.Nonce
	}})
	if err != nil {
		log.Warn("claim failed", "job", j.Name, "scheduled", at, "err", err)
		return rec, false
	}
	if !won {
		log.Debug("firing already claimed", "job", j.Name, "scheduled", at)
		return rec, false
	}
	log.Info("firing claimed", "job", j.Name, "scheduled", at.Format(time.RFC3339), "reason", reason)
	return rec, true
}

// watchRequests takes the job's requests (trigger, backfill, retry) as
// they come. Deleting a request is the claim: of the hosts that see it,
// the one whose delete succeeds runs its firings, in order, one at a
// time. A retry is left in place until it is due, so that a host that
// dies during the backoff takes no retry with it.
func (h *cronHost) watchRequests(loop, ctx context.Context, j *CronJob, runs *sync.WaitGroup) {
	p := h.paths(j)
	h.eachChange(loop, p.triggers(), nil, func(kids []string) {
		slices.Sort(kids)
		for _, k := range kids {
			h.takeRequest(loop, ctx, j, k, runs)
		}
	})
}

// takeRequest tries to take the request named k under the job's
// triggers/ and serves it; a retry not yet due is tried again when it is.
func (h *cronHost) takeRequest(loop, ctx context.Context, j *CronJob, k string, runs *sync.WaitGroup) {
	node := path.Join(h.paths(j).triggers(), k)
	b, st, err := h.s.c.Get(loop, node)
	if err != nil {
		return
	}
	var req CronRequest
	bad := json.Unmarshal(b, &req) != nil
	if due := time.Until(req.NotBefore); !bad && req.Kind == "retry" && due > 0 {
		h.mu.Lock()
		waiting := h.dueLater[node]
		h.dueLater[node] = true
		h.mu.Unlock()
		if waiting {
			return
		}
		runs.Add(1)
		go func() {
			defer runs.Done()
			t := time.NewTimer(due)
			defer t.Stop()
			select {
			case <-loop.Done():
			case <-t.C:
			}
			h.mu.Lock()
			delete(h.dueLater, node)
			h.mu.Unlock()
			if loop.Err() == nil {
				h.takeRequest(loop, ctx, j, k, runs)
			}
		}()
		return
	}
	if h.s.c.Delete(loop, node, st.Version) != nil {
		return // another host took it
	}
	if bad {
		h.s.log.Warn("unreadable cron request dropped", "job", j.Name, "node", node)
		return
	}
	seq := strings.TrimPrefix(k, "t-")
	runs.Add(1)
	if req.Kind == "retry" {
		go func() { defer runs.Done(); h.serveRetry(ctx, j, req) }()
		return
	}
	go func() { defer runs.Done(); h.serveRequest(ctx, j, req, seq) }()
}

// eachChange calls fn with dir's children, then again after every change
// to them, until loop ends. A read that fails is tried again a second
// later (a lost connection comes back, or ends the session and with it
// the cron process); onErr, when set, hears of the failures that are not
// a lost connection.
func (h *cronHost) eachChange(loop context.Context, dir string, onErr func(error), fn func([]string)) {
	for loop.Err() == nil {
		kids, _, ev, err := h.s.c.ChildrenW(loop, dir)
		if err != nil {
			if onErr != nil && loop.Err() == nil && !errors.Is(err, client.ErrConnectionLoss) {
				onErr(err)
			}
			t := time.NewTimer(time.Second)
			select {
			case <-loop.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		fn(kids)
		select {
		case <-loop.Done():
		case <-ev:
		}
	}
}

// serveRequest runs the firings of a request this host took, oldest
// first, each after the previous one ended. A triggered firing gets a
// record of its own; a backfilled one the record its scheduled time would
// have had, so it runs only if that time has none.
func (h *cronHost) serveRequest(ctx context.Context, j *CronJob, req CronRequest, seq string) {
	times := slices.Clone(req.Times)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for _, at := range times {
		if ctx.Err() != nil {
			return
		}
		node := h.paths(j).firing(at)
		reason := "backfill requested by " + req.By
		if req.Kind == "trigger" {
			node = path.Join(h.paths(j).firings(), triggeredName(at, seq))
			reason = "triggered by " + req.By
		}
		rec, won := h.claim(ctx, j, node, at, reason)
		if won {
			h.runClaimed(ctx, j, node, &rec, 0)
		}
	}
}

// ended tells the observers of a firing this host ended or recorded, and
// runs the job's hook for how it ended: on-success after a run that
// exited 0, on-failure after one that failed for good (no retry left),
// was lost for good or timed out. Only the host that ended or recorded it
// gets here, so each event runs its hook once.
func (h *cronHost) ended(j *CronJob, rec FiringRecord) {
	if h.o.Metrics != nil {
		h.o.Metrics.observe(j.Name, rec)
	}
	if h.o.OnFire != nil {
		h.o.OnFire(j.Name, rec)
	}
	var hook []string
	switch res := FiringResult(rec); {
	case res == "done":
		hook = j.OnSuccess
	case res == "failed" && max(rec.Attempt, 1) <= j.RetryFailed:
		// Run again later: not the end yet.
	case res == "failed" || res == string(FiringLost) || res == string(FiringTimedOut):
		hook = j.OnFailure
	}
	if len(hook) > 0 {
		h.hooks.Add(1)
		go func() { defer h.hooks.Done(); h.runHook(j, hook, rec) }()
	}
}

// hookTimeout bounds a hook's run.
const hookTimeout = time.Minute

// runHook runs a hook with the record as JSON on its stdin and, in its
// environment, COORDRUN_CRON_JOB, _RESULT, _SCHEDULED, _HOST, _ATTEMPT,
// _TOKEN, _EXIT_CODE and _REASON.
func (h *cronHost) runHook(j *CronJob, argv []string, rec FiringRecord) {
	ctx, cancel := context.WithTimeout(context.Background(), hookTimeout)
	defer cancel()
	b, _ := json.Marshal(rec)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(b)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	exit := ""
	if rec.ExitCode != nil {
		exit = strconv.Itoa(*rec.ExitCode)
	}
	cmd.Env = append(JobEnv(h.o.Env),
		"COORDRUN_CRON_JOB="+j.Name,
		"COORDRUN_CRON_RESULT="+FiringResult(rec),
		"COORDRUN_CRON_SCHEDULED="+rec.Scheduled.Format(time.RFC3339),
		"COORDRUN_CRON_HOST="+rec.Host,
		"COORDRUN_CRON_ATTEMPT="+strconv.Itoa(max(rec.Attempt, 1)),
		"COORDRUN_CRON_TOKEN="+strconv.FormatInt(rec.Token, 10),
		"COORDRUN_CRON_EXIT_CODE="+exit,
		"COORDRUN_CRON_REASON="+rec.Reason)
	if err := cmd.Run(); err != nil {
		h.s.log.Warn("hook failed", "job", j.Name, "hook", argv, "scheduled", rec.Scheduled.Format(time.RFC3339), "err", err)
	}
}

// runClaimed runs a firing this host claimed (v: the record's version
// the claim left) and tidies up.
func (h *cronHost) runClaimed(ctx context.Context, j *CronJob, node string, rec *FiringRecord, v int32) {
	h.runFiring(ctx, j, node, rec, v)
	h.ended(j, *rec)
	// Every record younger than the horizon (or the catch-up window, if
	// longer) is kept.
	h.mu.Lock()
	counted, ok := h.counted[j.Name]
	h.mu.Unlock()
	if !ok {
		counted = -1
	}
	counted = pruneFirings(ctx, h.s.c, h.paths(j), j.historyLimits(), h.o.Now().Add(-max(pruneHorizon, j.CatchUp)), counted)
	h.mu.Lock()
	h.counted[j.Name] = counted
	h.mu.Unlock()
}

// watchLosses notices the firings of j lost with their host: a record
// that says claimed or running while the host node it names is gone (its
// session ended). It looks whenever the set of hosts changes, and once at
// start for losses no host was there to see.
func (h *cronHost) watchLosses(loop, ctx context.Context, j *CronJob, runs *sync.WaitGroup) {
	h.eachChange(loop, h.paths(j).hosts(),
		func(err error) { h.s.log.Warn("cannot watch the job's hosts", "job", j.Name, "err", err) },
		func(live []string) { h.scanLosses(loop, ctx, j, live, runs) })
}

// scanLosses records each firing of j whose claimant is not among live
// hosts. The first host to write it (a write conditional on the record's
// version, so exactly one does) claims the firing again when retry-lost
// allows another run, and runs it; otherwise it records the firing lost.
func (h *cronHost) scanLosses(loop, ctx context.Context, j *CronJob, live []string, runs *sync.WaitGroup) {
	p := h.paths(j)
	kids, _, err := h.s.c.Children(loop, p.firings())
	if err != nil {
		return
	}
	alive := make(map[string]bool, len(live))
	for _, n := range live {
		alive[n] = true
	}
	// A firing this old is not run again: its record is about to be
	// pruned, and a host clock that lags would take it for a new one.
	retryFrom := h.o.Now().Add(-max(pruneHorizon, j.CatchUp))
	for _, k := range kids {
		node := path.Join(p.firings(), k)
		b, st, err := h.s.c.Get(loop, node)
		if err != nil {
			continue
		}
		var rec FiringRecord
		if json.Unmarshal(b, &rec) != nil || rec.HostNode == "" || alive[rec.HostNode] ||
			(rec.State != FiringClaimed && rec.State != FiringRunning) {
			continue
		}
		now := time.Now().UTC()
		attempt := max(rec.Attempt, 1)
		lost := PastAttempt{Attempt: attempt, Host: rec.Host, PID: rec.PID, Token: rec.Token, Start: rec.Start,
			Lost: now, LostBy: h.hostNode, Reason: "its host's session ended while it " + string(rec.State)}
		next := rec
		next.Earlier = append(slices.Clone(rec.Earlier), lost)
		retry := attempt <= j.RetryLost && !rec.Scheduled.Before(retryFrom)
		h.mu.Lock()
		stopping := h.stopping
		h.mu.Unlock()
		if retry && stopping {
			// Left to a host that will run it: this one starts no job,
			// and would record the retry lost at once. With no host
			// left, the next to start finds it.
			continue
		}
		if retry {
			hi := holderInfo(j.Argv, h.s.recordFull, h.s.c.SessionTimeout(), h.o.KillGrace+h.s.margin)
			next.State, next.Reason = FiringClaimed, fmt.Sprintf("run again after attempt %d was lost", attempt)
			next.Host, next.PID, next.Nonce, next.Claimed, next.HostNode = hi.Host, hi.PID, recipe.Nonce(), now, h.hostNode
			next.Attempt, next.Token, next.Start, next.End, next.ExitCode = attempt+1, 0, time.Time{}, time.Time{}, nil
		} else {
			next.State, next.Reason = FiringLost, lost.Reason
		}
		nb, _ := json.Marshal(next)
		nst, err := h.s.c.Set(loop, node, nb, st.Version)
		if err != nil {
			// BADVERSION: another host recorded it first.
			continue
		}
		h.s.log.Warn("firing lost with its host", "job", j.Name, "scheduled", rec.Scheduled.Format(time.RFC3339),
			"host", rec.Host, "pid", rec.PID, "attempt", attempt, "run_again", retry)
		if !retry {
			h.ended(j, next)
			continue
		}
		if h.o.Metrics != nil {
			h.o.Metrics.retried(j.Name)
		}
		runs.Add(1)
		go func() { defer runs.Done(); h.runClaimed(ctx, j, node, &next, nst.Version) }()
	}
}

// record writes the firing's record over the version this host last
// wrote, *ver, and advances *ver; it returns the new version, or -1 if it
// could not write. A record changed by another host since (one that found
// this host gone and recorded the loss) is left as it is.
func (h *cronHost) record(ctx context.Context, node string, rec *FiringRecord, ver *int32) int32 {
	b, _ := json.Marshal(rec)
	for {
		st, err := h.s.c.Set(ctx, node, b, *ver)
		if err == nil {
			*ver = st.Version
			return st.Version
		}
		if errors.Is(err, client.ErrConnectionLoss) {
			// The write may have gone through: the record says.
			got, st, gerr := h.s.c.Get(ctx, node)
			switch {
			case gerr != nil && ctx.Err() == nil && errors.Is(gerr, client.ErrConnectionLoss):
				continue
			case gerr == nil && bytes.Equal(got, b):
				*ver = st.Version
				return st.Version
			case gerr == nil && st.Version == *ver:
				continue
			case gerr == nil:
				err = wire.ErrBadVersion
			default:
				err = gerr
			}
		}
		if errors.Is(err, wire.ErrBadVersion) {
			h.s.log.Warn("firing record changed by another host; leaving it", "node", node)
		} else {
			h.s.log.Warn("could not record firing", "node", node, "err", err)
		}
		return -1
	}
}

// replaceEarlier marks the job's earlier firings that still run, or wait
// to, as replaced by rec's: each with a write conditional on its record's
// version, so a firing that ended meanwhile keeps its own record.
func (h *cronHost) replaceEarlier(ctx context.Context, j *CronJob, rec *FiringRecord) {
	p := h.paths(j)
	kids, _, err := h.s.c.Children(ctx, p.firings())
	if err != nil {
		return
	}
	for _, k := range kids {
		node := path.Join(p.firings(), k)
		b, st, err := h.s.c.Get(ctx, node)
		if err != nil {
			continue
		}
		var old FiringRecord
		if json.Unmarshal(b, &old) != nil || old.Nonce == rec.Nonce || !old.Scheduled.Before(rec.Scheduled) ||
			(old.State != FiringRunning && old.State != FiringClaimed) {
			continue
		}
		old.State = FiringReplaced
		old.Reason = "replaced by the firing of " + rec.Scheduled.Format(time.RFC3339)
		old.End = time.Now().UTC()
		nb, _ := json.Marshal(old)
		if _, err := h.s.c.Set(ctx, node, nb, st.Version); err == nil {
			h.s.log.Info("replacing the previous run", "job", j.Name, "scheduled", old.Scheduled.Format(time.RFC3339), "host", old.Host, "pid", old.PID)
			h.ended(j, old)
		}
	}
}

// runFiring runs a claimed firing under the job's lock; claimVersion is
// the version of the record the claim left. The firing's record and the
// lock's nodes are watched while the job runs: if another client deletes
// or changes them, the run is stopped.
func (h *cronHost) runFiring(ctx context.Context, j *CronJob, node string, rec *FiringRecord, claimVersion int32) {
	log := h.s.log
	// Records must be written even while shutting down, as long as the
	// session may live.
	wctx, endWrites := h.s.afterStop(ctx)
	defer endWrites()
	e, err := h.s.enter(wctx, h.paths(j).lock(), j.Argv)
	if err != nil {
		rec.State, rec.Reason = FiringLost, err.Error()
		h.record(wctx, node, rec, &claimVersion)
		return
	}
	defer func() { _ = h.s.release(wctx, e) }()
	acquire := e.Acquire
	switch j.Overlap {
	case OverlapSkip:
		acquire = e.TryAcquire
	case OverlapReplace:
		// Their hosts watch their records: a run replaced stops (TERM,
		// then KILL after its kill grace) and lets the lock go once its
		// group is gone, which is when Acquire returns here.
		h.replaceEarlier(wctx, j, rec)
	}
	if err := withAccessHint(acquire(ctx, nil)); err != nil {
		rec.State = FiringSkipped
		rec.Reason = "previous run still going"
		if !errors.Is(err, ErrNotAcquired) {
			rec.State, rec.Reason = FiringLost, err.Error()
		}
		h.record(wctx, node, rec, &claimVersion)
		return
	}
	hctx, stopWatch := context.WithCancel(wctx)
	defer stopWatch()
	standing := e.WatchStanding(hctx)
	rec.State, rec.Token, rec.Start = FiringRunning, e.Token(), time.Now().UTC()
	v := h.record(wctx, node, rec, &claimVersion)
	if v < 0 {
		// Another host has changed the record while this one waited
		// for the lock (a later firing replaced it, or found this host
		// gone): it is not this host's to run any more.
		log.Info("firing not run: its record changed while it waited", "job", j.Name, "scheduled", rec.Scheduled.Format(time.RFC3339))
		return
	}
	claim, _ := recipe.WatchNodes(hctx, h.s.c, []recipe.Watched{{Path: node, OK: func(st wire.Stat) bool { return st.Version == v }}})

	// Register for signals and check for a stop in one step: a job
	// started after the stop signal was forwarded would never get it.
	sigs := make(chan os.Signal, 4)
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		rec.State, rec.Reason = FiringLost, "host stopping"
		h.record(wctx, node, rec, &claimVersion)
		return
	}
	h.sigs[sigs] = struct{}{}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.sigs, sigs)
		h.mu.Unlock()
	}()
	pump := newSignalPump(sigs)
	defer pump.close()
	hd := &holding{s: h.s, e: e, sigs: pump, standing: mergeLosses(hctx, standing, claim), maxRuntime: j.MaxRuntime}
	code, err := hd.waitToStart(ctx, 0)
	if err == nil && code == 0 {
		extra := []string{fencing.EnvScheduledTime + "=" + rec.Scheduled.Format(time.RFC3339),
			fencing.EnvAttempt + "=" + strconv.Itoa(max(rec.Attempt, 1))}
		log.Info("running", "job", j.Name, "scheduled", rec.Scheduled.Format(time.RFC3339), "token", e.Token(), "attempt", max(rec.Attempt, 1))
		spec := jobSpec{exe: h.o.Exe, argv: j.Argv, env: h.o.Env, lockEnv: lockEnv(j.Name, e, extra...), grace: h.o.KillGrace}
		var out *capture
		if j.OutputBytes > 0 {
			if out, err = newCapture(j.OutputBytes); err != nil {
				log.Warn("cannot keep the job's output; it is not captured", "job", j.Name, "err", err)
				out, err = nil, nil
			} else {
				spec.stdout, spec.stderr = out.w, out.w
			}
		}
		code, err = hd.run(hctx, spec, nil)
		if out != nil {
			rec.Output, rec.OutputBytes = out.finish(h.o.KillGrace + time.Second)
		}
	}
	rec.End = time.Now().UTC()
	rec.ExitCode = &code
	if code > 128 && code < 128+65 {
		rec.Signal = unix.SignalName(syscall.Signal(code - 128))
	}
	rec.State = FiringDone
	switch {
	case code == ExitSessionLost && err != nil:
		rec.State, rec.Reason = FiringLost, err.Error()
		h.sessionLost.Store(true)
	case code == ExitLockLost && err != nil:
		rec.State, rec.Reason = FiringLost, err.Error()
	case errors.Is(err, errTimedOut):
		rec.State, rec.Reason = FiringTimedOut, err.Error()
	}
	log.Info("finished", "job", j.Name, "scheduled", rec.Scheduled.Format(time.RFC3339), "exit", code, "duration", rec.End.Sub(rec.Start))
	if FiringResult(*rec) == "failed" && max(rec.Attempt, 1) <= j.RetryFailed {
		// Any host may take the retry: it is a request like a trigger.
		// Asked for before the record says failed, so that no host that
		// reads the failure can find the retry missing; should the
		// record not be written, the request finds it unchanged and
		// does nothing.
		req := CronRequest{Kind: "retry", Times: []time.Time{rec.Scheduled}, By: h.hostNode, Firing: path.Base(node),
			Attempt: max(rec.Attempt, 1), NotBefore: time.Now().Add(j.RetryBackoff).UTC()}
		if _, err := RequestCron(wctx, h.s.c, h.o.Root, j.Name, req); err != nil {
			log.Warn("cannot ask for a retry of the failed run", "job", j.Name, "scheduled", rec.Scheduled.Format(time.RFC3339), "err", err)
		} else {
			log.Info("failed run to be run again", "job", j.Name, "scheduled", rec.Scheduled.Format(time.RFC3339), "attempt", req.Attempt+1, "after", j.RetryBackoff)
		}
	}
	h.record(wctx, node, rec, &claimVersion)
}

// serveRetry runs a failed firing again once its backoff has passed, if
// its record still says it failed at the attempt the request names; the
// write that claims the retry is conditional on the record's version.
func (h *cronHost) serveRetry(ctx context.Context, j *CronJob, req CronRequest) {
	if d := time.Until(req.NotBefore); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	node := path.Join(h.paths(j).firings(), req.Firing)
	var rec FiringRecord
	var st wire.Stat
	for {
		b, s, ev, err := h.s.c.GetW(ctx, node)
		if err != nil || json.Unmarshal(b, &rec) != nil {
			return
		}
		st = s
		// The request is made just before the failure is recorded: with
		// a short backoff, wait for the requester's record write (if it
		// dies first, the record is lost instead, and this ends).
		if max(rec.Attempt, 1) != req.Attempt || rec.HostNode != req.By || (rec.State != FiringClaimed && rec.State != FiringRunning) {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-ev:
		}
	}
	if FiringResult(rec) != "failed" || max(rec.Attempt, 1) != req.Attempt {
		return
	}
	hi := holderInfo(j.Argv, h.s.recordFull, h.s.c.SessionTimeout(), h.o.KillGrace+h.s.margin)
	past := PastAttempt{Attempt: req.Attempt, Host: rec.Host, PID: rec.PID, Token: rec.Token, Start: rec.Start, End: rec.End,
		ExitCode: rec.ExitCode, Reason: fmt.Sprintf("exited %d", *rec.ExitCode)}
	next := rec
	next.Earlier = append(slices.Clone(rec.Earlier), past)
	next.State, next.Reason = FiringClaimed, fmt.Sprintf("run again after attempt %d failed", req.Attempt)
	next.Host, next.PID, next.Nonce, next.Claimed, next.HostNode = hi.Host, hi.PID, recipe.Nonce(), time.Now().UTC(), h.hostNode
	next.Attempt, next.Token, next.Start, next.End, next.ExitCode = req.Attempt+1, 0, time.Time{}, time.Time{}, nil
	next.Output, next.OutputBytes = "", 0
	nb, _ := json.Marshal(next)
	nst, err := h.s.c.Set(ctx, node, nb, st.Version)
	if err != nil {
		return
	}
	if h.o.Metrics != nil {
		h.o.Metrics.retried(j.Name)
	}
	h.runClaimed(ctx, j, node, &next, nst.Version)
}

// mergeLosses delivers the first loss of either channel.
func mergeLosses(ctx context.Context, a, b <-chan recipe.Loss) <-chan recipe.Loss {
	out := make(chan recipe.Loss, 1)
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
