package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/fencing"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
	"golang.org/x/sys/unix"
)

// A firing's run on the host that claimed it.

// schedule fires the job at each scheduled time until ctx ends.
//
// loop ends the scheduling (and the job's watches) alone, as a reload
// does for a job it drops or changes; ctx ends the runs too. It returns
// once loop has ended and the runs it started are over.
func (h *cronHost) schedule(loop, ctx context.Context, j *CronJob) {
	var runs sync.WaitGroup
	defer runs.Wait()
	if j.CatchUp > 0 {
		if t, ok := state.LatestMissed(j.schedule, h.now(), j.CatchUp); ok {
			runs.Add(1)
			go func() { defer runs.Done(); h.fire(ctx, j, t, state.ReasonCatchUp) }()
		}
	}
	runs.Add(2)
	go func() { defer runs.Done(); h.watchLosses(loop, ctx, j, &runs) }()
	go func() { defer runs.Done(); h.watchRequests(loop, ctx, j, &runs) }()
	next := j.Next(h.now())
	// Once per job at start (and at each reload that changes it): what a
	// reader of the journal checks first when a job did not run.
	h.s.log.Info("job scheduled", "job", j.Name, "schedule", j.Spec, "next", next.Add(j.Offset(next)).Format(time.RFC3339))
	for {
		// Sleep until this host's clock reaches the firing; re-check on
		// waking, since the clock is this host's own and may be skewed.
		for {
			d := next.Add(j.Offset(next)).Sub(h.now())
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
		go func() { defer runs.Done(); h.fire(ctx, j, at, "") }()
		next = state.NextAfter(j.schedule, at, h.now())
	}
}

// fire claims one firing and, if this host won it, runs it, unless the
// job is paused.
func (h *cronHost) fire(ctx context.Context, j *CronJob, at time.Time, reason string) {
	node := h.paths(j).Firing(at)
	rec, v, won := h.claim(ctx, j, node, at, reason)
	if !won {
		return
	}
	if paused, err := CronPaused(ctx, h.s.conn, h.o.Root, j.Name); err == nil && paused != nil {
		rec = state.Pause(rec, *paused, j.rules()).Rec
		h.record(ctx, node, &rec, &v)
		h.ended(j, rec)
		return
	}
	h.runClaimed(ctx, j, node, &rec, v)
}

// claim tries to win the firing at (record node) for this host; v is the
// version of the record it made.
func (h *cronHost) claim(ctx context.Context, j *CronJob, node string, at time.Time, reason string) (rec state.FiringRecord, v engine.Version, won bool) {
	log := h.s.log
	rec = state.Claim(j.Name, at, reason, h.claimant(j), h.now()).Rec
	if h.isStopping() {
		// Leave it to the hosts that stay.
		return rec, 0, false
	}
	b, _ := json.Marshal(rec)
	// A claim in flight when a stop comes is seen through, so that its
	// outcome is known: a record this host created is then recorded
	// lost (host stopping) rather than left claimed by no one.
	cctx, endClaim := h.s.afterStop(ctx)
	defer endClaim()
	won, v, err := h.s.conn.Claim(cctx, node, b, func(data []byte) bool {
		var other state.FiringRecord
		_ = json.Unmarshal(data, &other)
		return other.Nonce == rec.Nonce
	})
	if err != nil {
		log.Warn("claim failed", "job", j.Name, "scheduled", at, "err", err)
		return rec, 0, false
	}
	if !won {
		log.Debug("firing already claimed", "job", j.Name, "scheduled", at)
		return rec, 0, false
	}
	log.Info("firing claimed", "job", j.Name, "scheduled", at.Format(time.RFC3339), "reason", reason)
	return rec, v, true
}

// runClaimed runs a firing this host claimed (v: the record's version
// the claim left) and tidies up.
func (h *cronHost) runClaimed(ctx context.Context, j *CronJob, node string, rec *state.FiringRecord, v engine.Version) {
	h.runFiring(ctx, j, node, rec, v)
	h.ended(j, *rec)
	h.mu.Lock()
	counted, ok := h.counted[j.Name]
	h.mu.Unlock()
	if !ok {
		counted = -1
	}
	counted = pruneFirings(ctx, h.s.conn, h.paths(j), j.historyLimits(), state.KeptFrom(h.now(), j.CatchUp), counted)
	h.mu.Lock()
	h.counted[j.Name] = counted
	h.mu.Unlock()
}

// record writes the firing's record over the version this host last
// wrote, *ver, and advances *ver; it reports whether it wrote. A record
// changed by another host since (one that found this host gone and
// recorded the loss) is left as it is.
func (h *cronHost) record(ctx context.Context, node string, rec *state.FiringRecord, ver *engine.Version) bool {
	b, _ := json.Marshal(rec)
	for {
		st, err := h.s.conn.Update(ctx, node, b, *ver)
		if err == nil {
			*ver = st.Version
			return true
		}
		if errors.Is(err, engine.ErrUnreachable) {
			// The write may have gone through: the record says.
			got, st, gerr := h.s.conn.Get(ctx, node)
			switch {
			case gerr != nil && ctx.Err() == nil && errors.Is(gerr, engine.ErrUnreachable):
				continue
			case gerr == nil && string(got) == string(b):
				*ver = st.Version
				return true
			case gerr == nil && st.Version == *ver:
				continue
			case gerr == nil:
				err = engine.ErrVersion
			default:
				err = gerr
			}
		}
		if errors.Is(err, engine.ErrVersion) {
			h.s.log.Warn("firing record changed by another host; leaving it", "job", rec.Job, "node", node)
		} else {
			h.s.log.Warn("could not record firing", "job", rec.Job, "node", node, "err", err)
		}
		return false
	}
}

// replaceEarlier marks the job's earlier firings that still run, or wait
// to, as replaced by rec's: each with a write conditional on its record's
// version, so a firing that ended meanwhile keeps its own record.
func (h *cronHost) replaceEarlier(ctx context.Context, j *CronJob, rec state.FiringRecord) {
	p := h.paths(j)
	kids, err := h.s.conn.Children(ctx, p.Firings())
	if err != nil {
		return
	}
	for _, k := range kids {
		node := p.FiringNamed(k)
		b, st, err := h.s.conn.Get(ctx, node)
		if err != nil {
			continue
		}
		var old state.FiringRecord
		if json.Unmarshal(b, &old) != nil {
			continue
		}
		step, ok := state.Replace(old, rec, h.now(), j.rules())
		if !ok {
			continue
		}
		nb, _ := json.Marshal(step.Rec)
		if _, err := h.s.conn.Update(ctx, node, nb, st.Version); err == nil {
			// Its end line (result replaced) names its host and pid.
			h.ended(j, step.Rec)
		}
	}
}

// runFiring runs a claimed firing under the job's lock; v is the version
// of the record the claim left. The firing's record and the lock's
// records are watched while the job runs: if another client deletes or
// changes them, the run is stopped.
func (h *cronHost) runFiring(ctx context.Context, j *CronJob, node string, rec *state.FiringRecord, v engine.Version) {
	rules := j.rules()
	// The session as this job sees it: every line logged on its behalf,
	// the lock's and the watchdog's too, names the job.
	s := h.jobSession(j)
	log := s.log
	// Records must be written even while shutting down, as long as the
	// session may live.
	wctx, endWrites := s.afterStop(ctx)
	defer endWrites()
	e, err := s.enter(wctx, h.paths(j).Lock(), j.Argv, j.Holders)
	if err != nil {
		*rec = state.Lose(*rec, err.Error(), rules).Rec
		h.record(wctx, node, rec, &v)
		return
	}
	defer func() { _ = s.release(wctx, e) }()
	try, replace := state.Acquisition(j.Overlap)
	acquire := e.Acquire
	if try {
		acquire = e.TryAcquire
	}
	if replace {
		// Their hosts watch their records: a run replaced stops (TERM,
		// then KILL after its kill grace) and lets the lock go once its
		// group is gone, which is when Acquire returns here.
		h.replaceEarlier(wctx, j, *rec)
	}
	if err := withAccessHint(acquire(ctx, nil)); err != nil {
		if errors.Is(err, engine.ErrNotAcquired) {
			*rec = state.Skip(*rec, rules).Rec
		} else {
			*rec = state.Lose(*rec, err.Error(), rules).Rec
		}
		h.record(wctx, node, rec, &v)
		return
	}
	hctx, stopWatch := context.WithCancel(wctx)
	defer stopWatch()
	standing := e.WatchStanding(hctx)
	*rec = state.Start(*rec, e.Token(), h.now()).Rec
	if !h.record(wctx, node, rec, &v) {
		// Another host has changed the record while this one waited
		// for the lock (a later firing replaced it, or found this host
		// gone): it is not this host's to run any more.
		log.Info("firing not run: its record changed while it waited", "scheduled", rec.Scheduled.Format(time.RFC3339))
		return
	}
	losses, watching := h.watchFiring(hctx, node, v, standing)
	defer watching.Wait()
	defer stopWatch()

	// Register for signals and check for a stop in one step: a job
	// started after the stop signal was forwarded would never get it.
	sigs := make(chan os.Signal, 4)
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		*rec = state.Lose(*rec, state.ReasonStopping, rules).Rec
		h.record(wctx, node, rec, &v)
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
	hd := &holding{s: s, e: e, sigs: pump, standing: losses, maxRuntime: j.MaxRuntime, endLogged: true}
	var x state.Exit
	code, err := hd.waitToStart(ctx, 0)
	if err == nil && code == 0 {
		extra := []string{fencing.EnvScheduledTime + "=" + rec.Scheduled.Format(time.RFC3339),
			fencing.EnvAttempt + "=" + strconv.Itoa(rec.Attempts())}
		log.Info("running", "scheduled", rec.Scheduled.Format(time.RFC3339), "token", e.Token(), "attempt", rec.Attempts())
		spec := jobSpec{exe: h.o.Exe, argv: j.Argv, env: h.o.Env, lockEnv: lockEnv(j.Name, e, extra...), grace: h.o.KillGrace}
		// Captured even when the record keeps none of it: the journal's
		// lines get the job's prefix.
		out, cerr := newCapture(j.OutputBytes, outputPrefix(j.Name, rec.Attempts()), os.Stdout, os.Stderr)
		if cerr != nil {
			log.Warn("cannot capture the job's output; it goes to the journal unprefixed and unkept", "err", cerr)
			out = nil
		} else {
			spec.stdout, spec.stderr = out.w[0], out.w[1]
		}
		code, err = hd.run(hctx, spec, nil)
		if out != nil {
			output, n := out.finish(h.o.KillGrace + time.Second)
			if j.OutputBytes > 0 {
				x.Output, x.OutputBytes = output, n
			}
			if h.o.Metrics != nil {
				h.o.Metrics.cutLines(j.Name, out.cuts.Load())
			}
		}
	}
	x.Code, x.Cause = code, exitCause(code, err)
	if code > 128 && code < 128+65 {
		x.Signal = unix.SignalName(syscall.Signal(code - 128))
	}
	if err != nil {
		x.Err = err.Error()
	}
	if x.Cause == state.SessionLost {
		h.sessionLost.Store(true)
	}
	step := state.Finish(*rec, path.Base(node), x, h.now(), rules)
	*rec = step.Rec
	// The run's end is logged once, by ended, with its result.
	if req := step.Retry; req != nil {
		// Any host may take the retry: it is a request like a trigger.
		if _, err := RequestCron(wctx, h.s.conn, h.o.Root, j.Name, *req, h.now()); err != nil {
			log.Warn("cannot ask for a retry of the failed run", "scheduled", rec.Scheduled.Format(time.RFC3339), "err", err)
		}
	}
	h.record(wctx, node, rec, &v)
}

// jobSession is the host's session as j's firings use it: the same
// connection and lease, with a log whose every line names the job.
func (h *cronHost) jobSession(j *CronJob) *session {
	s := *h.s
	s.log = h.s.log.With("job", j.Name)
	return &s
}

// exitCause is why a run that ended with code and err ended.
func exitCause(code int, err error) state.Cause {
	switch {
	case code == ExitSessionLost && err != nil:
		return state.SessionLost
	case code == ExitLockLost && err != nil:
		return state.LockLost
	case errors.Is(err, errTimedOut):
		return state.TimedOut
	}
	return state.Exited
}

// watchFiring delivers the first loss of the holder's standing or of the
// firing's record: its deletion, or a change by anyone (this host writes
// it only once the watch is over). It ends with ctx; wait for it with the
// WaitGroup.
func (h *cronHost) watchFiring(ctx context.Context, node string, v engine.Version, standing <-chan engine.Loss) (<-chan engine.Loss, *sync.WaitGroup) {
	out := make(chan engine.Loss, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ev <-chan engine.Event
		for {
			_, st, ch, err := h.s.conn.GetW(ctx, node)
			switch {
			case errors.Is(err, engine.ErrUnreachable) && ctx.Err() == nil:
				continue
			case errors.Is(err, engine.ErrNotFound):
				out <- engine.Loss{Node: node, Event: engine.LossMissing}
				return
			case err == nil && st.Version != v:
				out <- engine.Loss{Node: node, Event: engine.LossChanged, Revision: st.Modified}
				return
			}
			ev = ch // nil after any other error: the session or ctx is over
			break
		}
		select {
		case l := <-standing:
			out <- l
		case e := <-ev:
			l := engine.Loss{Node: node, Event: engine.LossChanged}
			if e.Kind == engine.Deleted {
				l.Event = engine.LossDeleted
			}
			out <- l
		case <-ctx.Done():
		}
	}()
	return out, &wg
}
