// Package supervisor runs a command only while it holds a lock in a
// coordination store (a ZooKeeper-compatible ensemble, through the engine
// seam of supervisor/engine), and makes sure the command is dead before
// the lock could pass to anyone else.
//
// The guarantee rests on the session lease: a reply to a request sent at
// time t proves the session lives at least until t + timeout (see
// engine.Session). The job may run only until the newest proven lease,
// less a drift margin; a watchdog process (see RunWatchdog) enforces that
// deadline even if the supervisor is killed or frozen. What the supervisor
// keeps in the store, and the rules of a cron firing's life, are in
// supervisor/state.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/fencing"
	"github.com/coordrun/coordrun/supervisor/engine"
)

// DefaultName derives a lock name from a command line (names.go's
// implicitName says the rule).
func DefaultName(argv []string, shell bool) string {
	return implicitName(argv, shell)
}

// Run supervises one run of the job and returns coordrun's exit code.
func Run(ctx context.Context, o Options) (int, error) {
	if err := o.Validate(); err != nil {
		return ExitUsage, err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	log := o.Log
	// One owner of the signal channel for the whole run, so that no
	// signal falls between waiting (where TERM means leave the queue) and
	// holding (where every signal goes to the job).
	sigs := newSignalPump(o.Signals)
	defer sigs.close()
	// The watchdog starts now, while the session is made and the lock
	// entered: a process start is a Go runtime's, as long as both.
	spec := jobSpec{exe: o.Exe, argv: o.Argv, env: o.Env, grace: o.KillGrace}
	var next standby
	next.arm(spec)
	defer next.drop()
	// Until the wait begins (which watches for them itself), a
	// terminating signal ends whatever call to the store is under way.
	ectx, stopWatch := sigs.untilStop(ctx)
	defer stopWatch()
	s, err := dial(ectx, o.ConnOptions, o.KillGrace, log)
	if sig, ok := sigs.stopSignal(); ok {
		log.Info("signal while connecting; giving up", "signal", sig.String())
		if err == nil {
			s.close()
		}
		return 128 + int(sig), nil
	}
	if err != nil {
		return dialCode(err), err
	}
	defer s.close()
	dir := path.Join(o.Root, o.Name)
	log.Info("waiting for lock", "lock", o.Name, "node_dir", dir, "session", s.conn.ID())

	e, err := s.enter(ectx, dir, o.Argv, o.Holders)
	stopWatch()
	if sig, ok := sigs.stopSignal(); ok {
		// The entry, if one was made, goes with the session's close.
		log.Info("signal while joining the queue; giving up", "signal", sig.String())
		if err == nil {
			_ = s.release(context.Background(), e)
		}
		return 128 + int(sig), nil
	}
	if err != nil {
		return ExitUsage, err
	}
	if r, ok := s.conn.(accessReporter); ok {
		r.ReportFolderAccess(ctx, dir)
	}
	defer func() {
		// Whatever happened, leave the queue; the session's close after
		// this deletes whatever a failed release left.
		if err := s.release(context.Background(), e); err != nil && !errors.Is(err, engine.ErrSessionLost) {
			log.Warn("could not release", "node", e.Node(), "err", err)
		}
	}()

	watcher, _ := s.conn.(engine.HolderWatcher)
	code, err := waitForLock(ctx, o, e, sigs, watcher, s.conn.Timeout(), func(st engine.Status) {
		if !o.Try && (st.Position == 1 || st.Position == 0 && st.Stopping) {
			next.arm(spec) // if the first one could not start
		}
	})
	if err != nil || code != 0 {
		return code, err
	}
	sctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	h := &holding{s: s, e: e, sigs: sigs, standing: e.WatchStanding(sctx)}
	if code, err := h.waitToStart(ctx, o.LockDelay); err != nil || code != 0 {
		return code, err
	}
	log.Info("lock acquired; starting job", "lock", o.Name, "node", e.Node(), "token", e.Token())
	spec.lockEnv = lockEnv(o.Name, e)
	return h.run(sctx, spec, next.take())
}

// standby is a watchdog started ahead of the lock (armed, not yet running
// the job), so that the job's start does not wait for a process start.
// It learns the lock's identity and token when it is told to Go.
type standby struct {
	job *guardedJob
}

// arm starts a watchdog unless one runs. On error none is armed: the
// start is tried again once the lock is held, where its failure is
// reported.
func (sb *standby) arm(spec jobSpec) {
	if sb.job == nil {
		sb.job, _ = spawnGuarded(spec)
	}
}

// take hands the armed watchdog, if any, to its user.
func (sb *standby) take() *guardedJob {
	j := sb.job
	sb.job = nil
	return j
}

// drop ends the armed watchdog, if any, and waits until it is gone.
func (sb *standby) drop() {
	if sb.job != nil {
		sb.job.Disarm()
		<-sb.job.Done()
		sb.job = nil
	}
}

// waitForLock waits in the queue; onStatus sees every change of position.
// A terminating signal ends the wait (the caller leaves the queue) but
// stays queued in sigs, so it is seen again at the start of the job.
//
// With a watcher (nil: none), the wait also shows whether the holder
// looks gone, asked every sixth of the session timeout.
func waitForLock(ctx context.Context, o Options, e engine.Entry, sigs *signalPump, watcher engine.HolderWatcher, timeout time.Duration, onStatus func(engine.Status)) (int, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.Timeout > 0 {
		var tcancel context.CancelFunc
		wctx, tcancel = context.WithTimeout(wctx, o.Timeout)
		defer tcancel()
	}
	wctx, stopWatch := sigs.untilStop(wctx)
	defer stopWatch()
	sl := newStatusLine(o.Status, o.TTY, o.Name, o.Log)
	status := func(st engine.Status) {
		sl.update(st)
		onStatus(st)
	}
	acquire := e.Acquire
	if o.Try {
		acquire = e.TryAcquire
	}
	var watching sync.WaitGroup
	hctx, stopHolderWatch := context.WithCancel(wctx)
	if watcher != nil && !o.Try {
		watching.Go(func() { watchHolder(hctx, watcher, e.Dir(), max(timeout/6, 100*time.Millisecond), sl) })
	}
	err := withAccessHint(acquire(wctx, status))
	stopHolderWatch()
	watching.Wait()
	sl.clear()
	if s, ok := sigs.stopSignal(); ok {
		o.Log.Info("signal while waiting; leaving the queue", "signal", s.String())
		return 128 + int(s), nil
	}
	switch {
	case err == nil:
		return 0, nil
	case errors.Is(err, engine.ErrNotAcquired):
		return ExitNotAcquired, fmt.Errorf("lock %s is held by another: %w", o.Name, engine.ErrNotAcquired)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return ExitNotAcquired, fmt.Errorf("lock %s not acquired within %v: %w", o.Name, o.Timeout, engine.ErrNotAcquired)
	case errors.Is(err, engine.ErrSessionLost):
		return ExitSessionLost, fmt.Errorf("session lost while waiting: %w", err)
	}
	return ExitUsage, err
}

// accessReporter is an engine that can say when a lock folder's access
// is not what this session would have given it (ZooKeeper's ACLs).
type accessReporter interface {
	ReportFolderAccess(ctx context.Context, dir string)
}

// errTimedOut: the job ran past its time limit and was stopped.
var errTimedOut = errors.New("run time limit reached; job stopped")

// lockEnv is what a job's environment gets once it holds the lock: the
// lock's identity and its fencing token, then extra.
func lockEnv(lock string, e engine.Entry, extra ...string) []string {
	env := []string{
		fencing.EnvToken + "=" + strconv.FormatInt(e.Token(), 10),
		fencing.EnvLock + "=" + lock,
		fencing.EnvLockNode + "=" + e.Node(),
	}
	return append(env, extra...)
}

// holding is a held lock whose job is about to start or runs under a
// watchdog. Its methods run on the goroutine that acquired the lock.
type holding struct {
	s        *session
	e        engine.Entry
	sigs     *signalPump
	standing <-chan engine.Loss
	// maxRuntime, when set, stops the job (TERM, then KILL after the
	// kill grace) once it has run that long; run then reports
	// errTimedOut.
	maxRuntime time.Duration
	// endLogged: the caller logs the job's end itself (cron: one line per
	// firing's end, with its result), so run does not.
	endLogged bool
}

// waitToStart is the time between taking the lock and starting the job:
// lockDelay after an unclean end of the previous holder, and the wait for
// a previous holder whose job may still run after someone else deleted
// its nodes. It returns 0 when the job may start.
func (h *holding) waitToStart(ctx context.Context, lockDelay time.Duration) (int, error) {
	log := h.s.log
	var wait time.Duration
	if h.e.UncleanHandoff() && lockDelay > 0 {
		log.Info("previous holder's session ended without release; waiting lock-delay", "lock_delay", lockDelay)
		wait = lockDelay
	}
	if w, why := h.e.MustWait(); w > 0 {
		log.Warn("waiting until the previous holder's job must be gone", "wait", w.Round(time.Millisecond), "evidence", why)
		wait = max(wait, w)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		ch := h.sigs.changed()
		if s, ok := h.sigs.stopSignal(); ok {
			log.Info("signal before the job started; leaving", "signal", s.String())
			return 128 + int(s), nil
		}
		if wait <= 0 {
			return 0, nil
		}
		select {
		case <-t.C:
			return 0, nil
		case <-ch:
		case loss := <-h.standing:
			log.Error("lock lost before the job started: another client deleted or changed this holder's node", "node", loss.Node, "event", loss.Event, "revision", loss.Revision)
			return ExitLockLost, fmt.Errorf("lock lost: %s", loss)
		case <-h.s.conn.Done():
			return ExitSessionLost, fmt.Errorf("session lost before the job started: %w", h.s.conn.Err())
		case <-ctx.Done():
			return ExitUsage, ctx.Err()
		}
	}
}

// run runs the job under a watchdog (armed: started ahead with spec, or
// nil: started now), feeding it each new lease deadline and every signal,
// stopping it when the session or the lock's standing is lost, and maps
// how it ended to an exit code.
func (h *holding) run(ctx context.Context, spec jobSpec, armed *guardedJob) (int, error) {
	s, log := h.s, h.s.log
	updates, unsubscribe := s.leases.subscribe()
	defer unsubscribe()
	job := armed
	if job == nil {
		var err error
		if job, err = spawnGuarded(spec); err != nil {
			return ExitUsage, err
		}
	}
	job.Go(s.deadline(s.conn.Lease()), spec.lockEnv)
	sessionLost, timedOut := false, false
	var lost *engine.Loss
	// The retake of the run record must be over before the caller
	// releases the lock: one made after the release would hold the lock
	// for this session (under cron, until the cron process ends).
	var retake sync.WaitGroup
	defer retake.Wait()
	var limit <-chan time.Time
	if h.maxRuntime > 0 {
		t := time.NewTimer(h.maxRuntime)
		defer t.Stop()
		limit = t.C
	}
	for {
		ch := h.sigs.changed()
		for _, sig := range h.sigs.take() {
			if sig, ok := sig.(syscall.Signal); ok {
				log.Debug("forwarding signal", "signal", sig.String())
				job.Signal(sig)
			}
		}
		select {
		case l := <-updates:
			job.SetDeadline(s.deadline(l))
		case <-ch:
		case loss := <-h.standing:
			if lost == nil {
				lost = &loss
				log.Error("lock lost: another client deleted or changed this holder's node; stopping the job",
					"node", loss.Node, "event", loss.Event, "revision", loss.Revision)
				job.Stop()
				retake.Add(1)
				go func() {
					defer retake.Done()
					hctx, cancel := context.WithTimeout(ctx, s.conn.Timeout())
					defer cancel()
					h.e.Retake(hctx, loss)
				}()
			}
		case <-s.conn.Done():
			if !sessionLost {
				sessionLost = true
				log.Error("session lost; stopping the job", "err", s.conn.Err())
				job.Stop()
			}
		case <-limit:
			if !timedOut {
				timedOut = true
				log.Warn("run time limit reached; stopping the job", "max_runtime", h.maxRuntime)
				job.Stop()
			}
		case <-job.Done():
			r := job.Result()
			switch {
			case r.Reason == reasonDeadline:
				return ExitSessionLost, fmt.Errorf("session lease ran out; job killed (exit %d)", r.Code)
			case sessionLost && (r.Reason == reasonStopped || r.Reason == reasonWatchdogDied):
				return ExitSessionLost, fmt.Errorf("session lost; job killed (exit %d)", r.Code)
			case lost != nil:
				return ExitLockLost, fmt.Errorf("lock lost (%s); job stopped (exit %d)", *lost, r.Code)
			case timedOut && r.Reason == reasonStopped:
				return r.Code, fmt.Errorf("%w after %v (exit %d)", errTimedOut, h.maxRuntime, r.Code)
			}
			if !h.endLogged {
				log.Info("job finished", "exit", r.Code, "signal", r.Signal)
			}
			return r.Code, nil
		}
	}
}
