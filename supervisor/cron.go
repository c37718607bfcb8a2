package supervisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// Cron across hosts. Every host runs the same schedule; each firing runs
// once, on one host.
//
// A firing is its job and its *scheduled* time, never the time a host got
// around to it. When a host's clock reaches a firing, it claims it by
// creating the persistent record <root>/<job>/firings/<scheduled unix s>
// (engine.Store.Claim); the store lets exactly one create succeed, and
// only that host runs the firing. A host whose clock lags finds the firing
// claimed and skips it; a claimed firing is never run again, whoever
// crashed. There is no leader to elect or lose: every live host is a
// candidate for every firing, so a dead host costs nothing but its own
// running job.
//
// The claimant then runs the job under the same lock recipe and watchdog
// as coordrun run (lock folder <root>/<job>/lock), which also enforces the
// overlap policy.
//
// What a firing's record says next, and what that causes, is decided by
// the pure transitions of supervisor/state (the lifecycle, the history
// limits, the schedule); the cron host only reads, claims, applies a
// transition with a versioned write, and acts on its events. It is in
// four files: this one (the process: options, signals, reload,
// registration), cronfire.go (a firing's run), cronwatch.go (the watch
// loops: requests, retries, losses) and cronhook.go (what an ended firing
// tells: observers and hooks).

// CronOptions configure a cron process.
type CronOptions struct {
	ConnOptions
	JobOptions
	Log  *slog.Logger
	Root string // e.g. /coordrun/cron
	Jobs []*CronJob
	// Now is the host's one clock for everything cron decides and
	// writes: when a firing is due, which are too old to catch up, run
	// again or keep, when a retry is due, and the times in the records.
	// Tests skew it per host. Default time.Now.
	Now func() time.Time
	// OnFire, when set, observes every firing this host handled.
	OnFire func(job string, rec state.FiringRecord)
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
	// The one reader of the process's signals, from start to end.
	pump := newSignalPump(o.Signals)
	defer pump.close()
	// Until the jobs are scheduled, a terminating signal ends the start:
	// connecting and registering give up at once rather than run on to
	// their own timeouts, and coordrun exits as after any stop.
	setup, endSetup := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); pump.cancelOnStop(setup, endSetup) }()
	s, h, err := startCron(setup, o, log)
	endSetup()
	<-watched
	if s != nil {
		defer s.close()
	}
	if sig, ok := pump.stopSignal(); ok {
		log.Info("stopping before the first firing", "signal", sig.String())
		return ExitOK, nil
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
	code, runErr := h.serveSignals(ctx, pump, loops, start)
	stop()
	wg.Wait()
	h.hooks.Wait()
	if h.sessionLost.Load() && code == 0 {
		code, runErr = ExitSessionLost, errors.New("session lost; a running job was killed")
	}
	return code, runErr
}

// serveSignals acts on the process's signals until one stops it, the
// session is lost or ctx ends: USR1 and USR2 go to every running job, HUP
// reloads the jobs (with Reload), any other stops scheduling and goes to
// the running jobs.
func (h *cronHost) serveSignals(ctx context.Context, pump *signalPump, loops map[string]*scheduled, start func(*CronJob)) (int, error) {
	log := h.s.log
	for {
		ch := pump.changed()
		for _, sig := range pump.take() {
			switch {
			case sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2:
				h.forward(sig)
			case sig == syscall.SIGHUP && h.o.Reload != nil:
				h.reload(ctx, loops, start)
			default:
				log.Info("stopping: no new firings; running jobs get the signal", "signal", sig.String())
				h.mu.Lock()
				h.stopping = true
				h.mu.Unlock()
				h.forward(sig)
				return 0, nil
			}
		}
		select {
		case <-ch:
		case <-h.s.conn.Done():
			log.Error("session lost; stopping scheduling", "err", h.s.conn.Err())
			return ExitSessionLost, fmt.Errorf("session lost: %w", h.s.conn.Err())
		case <-ctx.Done():
			return 0, nil
		}
	}
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
			h.o.Metrics.seed(ctx, h.s.conn, h.o.Root, j)
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
	hi := s.holderInfo([]string{"cron"}, false)
	h := &cronHost{s: s, o: o, now: o.Now, sigs: map[chan os.Signal]struct{}{}, counted: map[string]int{}, dueLater: map[string]bool{},
		// Named by session, so a create retried after a lost reply
		// finds its own record instead of leaving a second one.
		hostNode: fmt.Sprintf("%s-%d-%s", hi.Host, hi.PID, s.conn.ID())}
	for _, j := range o.Jobs {
		if err := h.register(ctx, j); err != nil {
			return s, nil, err
		}
		if o.Metrics != nil {
			o.Metrics.seed(ctx, s.conn, o.Root, j)
		}
	}
	return s, h, nil
}

// cronHost is one host's cron process. Its firings run concurrently, one
// goroutine each.
type cronHost struct {
	s *session
	o CronOptions
	// now is the host's one clock (CronOptions.Now), read for every
	// decision and every time written: which firing is due, catch-up,
	// the history's age, a retry's backoff, the age past which a lost
	// firing is not run again, and the records' claimed, start, end and
	// lost times. One clock, because these are compared with each other:
	// a firing's record is aged against its scheduled time, a retry's
	// due time is its end plus the backoff. Were the record times read
	// from another clock than the schedule, a host whose clocks disagree
	// would keep, retry and lose firings by a mix of both. So a record
	// carries its writer's clock, skew included, as cron's own logs do;
	// across hosts, their times differ by the hosts' skew, as the
	// schedule's do, and the claim (one create wins) keeps that from
	// running a firing twice. The lease and the kill deadlines are not
	// on this clock: they are on the monotonic and boot clocks, which
	// no skew or step of the wall clock moves.
	now func() time.Time

	hooks sync.WaitGroup // hooks still running
	// hostNode is this host's record under every job's hosts/, named by
	// its session: firing records name it, so that the others can tell
	// when a firing was lost with this host.
	hostNode string

	// mu guards sigs, stopping, counted and dueLater.
	mu sync.Mutex
	// sigs are the signal channels of the running firings' jobs.
	sigs     map[chan os.Signal]struct{}
	stopping bool // a terminating signal came: start no more jobs
	// counted is, per job, how many firing records were left after the
	// last prune by kind (pruneFirings).
	counted map[string]int
	// dueLater holds the retry requests this host waits to take.
	dueLater    map[string]bool
	sessionLost atomic.Bool
}

func (h *cronHost) paths(j *CronJob) state.CronPaths {
	return state.CronPaths{Root: h.o.Root, Job: j.Name}
}

func (h *cronHost) isStopping() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopping
}

// claimant is this host as the taker of one firing of j: a fresh nonce
// for each claim.
func (h *cronHost) claimant(j *CronJob) state.Claimant {
	hi := h.s.holderInfo(j.Argv, h.s.recordFull)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	return state.Claimant{Host: hi.Host, PID: hi.PID, HostNode: h.hostNode, Nonce: hex.EncodeToString(rnd[:])}
}

// forward hands sig to every running job.
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
	c, p := h.s.conn, h.paths(j)
	for _, dir := range []string{p.Firings(), p.Hosts(), p.Triggers()} {
		if err := c.EnsureFolder(ctx, dir); err != nil {
			return withAccessHint(err)
		}
	}
	b, _ := json.Marshal(jobInfo(j, h.s.recordFull))
	// A host's record describes the cron process itself.
	hb, _ := json.Marshal(h.s.holderInfo([]string{"cron"}, false))
	for {
		_, err := c.Update(ctx, p.Dir(), b, engine.AnyVersion)
		if err == nil {
			_, _, err = c.Create(ctx, p.Host(h.hostNode), hb, engine.Ephemeral)
			if errors.Is(err, engine.ErrExists) {
				err = nil
			}
		}
		if !errors.Is(err, engine.ErrUnreachable) {
			return err
		}
	}
}
