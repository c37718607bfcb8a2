// Package supervisor runs a command only while it holds a lock in a
// ZooKeeper-compatible ensemble, and makes sure the command is dead before
// the lock could pass to anyone else.
//
// The guarantee rests on the session lease: a reply to a request sent at
// time t proves the session lives at least until t + timeout (see
// ensemble/client). The job may run only until the newest proven lease,
// less a drift margin; a watchdog process (see RunWatchdog) enforces that
// deadline even if the supervisor is killed or frozen.
package supervisor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/fencing"
)

// Exit codes of coordrun run besides the job's own (which is passed
// through; 128+N when a signal N killed it).
const (
	ExitUsage       = 64 // bad invocation or configuration, or no ensemble reachable
	ExitNotAcquired = 75 // --try or --timeout: the lock was held by another
	ExitSessionLost = 76 // the session's lease ran out; the job was killed
	// ExitLockLost: another client deleted or changed the holder's lock
	// nodes while the job ran; the job was stopped (TERM, then KILL after
	// the kill grace).
	ExitLockLost = 78
)

// Options configure one supervised run.
type Options struct {
	Servers        []string
	SessionTimeout time.Duration
	Auth           []client.Auth
	TLS            *tls.Config
	Root           string // folder of all locks, e.g. /coordrun/locks
	Name           string // the lock's name
	Argv           []string
	Env            []string // the job's environment, without coordrun's variables

	KillGrace   time.Duration // SIGTERM to SIGKILL
	DriftMargin time.Duration // subtracted from every lease, for clock rate differences
	LockDelay   time.Duration // wait after a predecessor's session ended uncleanly
	Timeout     time.Duration // longest wait for the lock; 0 waits forever
	Try         bool          // do not wait at all

	Exe     string         // the coordrun binary, which runs the watchdog
	Signals chan os.Signal // terminating and user signals to forward
	Log     *slog.Logger
	Status  io.Writer // where the waiting status goes (stderr)
	TTY     bool      // Status is a terminal: redraw one status line
	// ExtraMargin is added to DriftMargin when the ensemble is Apache
	// ZooKeeper, whose followers answer pings without the leader.
	ExtraMargin time.Duration
	// ACL is set on every node coordrun creates. Nil: the session's
	// authenticated identities (--auth, a client certificate) get every
	// permission and world:anyone may read; without credentials, the
	// open ACL, with a warning.
	ACL []wire.ACL
}

// UsageError is an error in the invocation.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Validate checks the timing constraints: the job must survive an
// ordinary ping gap, so the grace and margin must leave room for it.
func (o *Options) Validate() error {
	if len(o.Argv) == 0 {
		return UsageError{errors.New("no command given")}
	}
	if o.Name == "" || strings.ContainsAny(o.Name, "/\x00") || o.Name == "." || o.Name == ".." {
		return UsageError{fmt.Errorf("bad lock name %q", o.Name)}
	}
	if !strings.HasPrefix(o.Root, "/") || (len(o.Root) > 1 && strings.HasSuffix(o.Root, "/")) {
		return UsageError{fmt.Errorf("lock root %q must be an absolute znode path", o.Root)}
	}
	if o.SessionTimeout <= 0 || o.KillGrace < 0 || o.DriftMargin < 0 || o.LockDelay < 0 || o.Timeout < 0 {
		return UsageError{errors.New("durations must not be negative, and the session timeout must be positive")}
	}
	if budget := o.SessionTimeout / 2; o.KillGrace+o.DriftMargin+killSlack > budget {
		return UsageError{fmt.Errorf("--kill-grace %v + drift margin %v must stay under half the session timeout (%v)", o.KillGrace, o.DriftMargin, budget)}
	}
	return nil
}

// DefaultName derives a lock name from a command: its base name, with
// characters other than letters, digits, '.', '_' and '-' replaced.
func DefaultName(argv []string, shell bool) string {
	cmd := argv[0]
	if shell {
		if f := strings.Fields(cmd); len(f) > 0 {
			cmd = f[0]
		}
	}
	b := []byte(path.Base(cmd))
	for i, ch := range b {
		ok := ch == '.' || ch == '_' || ch == '-' || (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
		if !ok {
			b[i] = '_'
		}
	}
	name := strings.Trim(string(b), ".")
	if name == "" {
		name = "job"
	}
	return name
}

// Run supervises one run of the job and returns coordrun's exit code.
func Run(ctx context.Context, o Options) (int, error) {
	if err := o.Validate(); err != nil {
		return ExitUsage, err
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
		o.Log = log
	}
	// One owner of the signal channel for the whole run, so that no
	// signal falls between waiting (where TERM means leave the queue) and
	// holding (where every signal goes to the job).
	sigs := newSignalPump(o.Signals)
	defer sigs.close()
	s, err := dial(ctx, o)
	if err != nil {
		return ExitUsage, err
	}
	defer s.c.Close()
	c := s.c
	dir := path.Join(o.Root, o.Name)
	log.Info("waiting for lock", "lock", o.Name, "node_dir", dir, "session", fmt.Sprintf("0x%x", c.SessionID()))

	e, err := enter(ctx, c, dir, holderInfo(o.Argv, c.SessionTimeout(), o.KillGrace+s.margin), s.acl, log)
	if err != nil {
		return ExitUsage, err
	}
	reportFolderACL(ctx, c, dir, s.acl, log)
	held := false
	defer func() {
		// Whatever happened, leave the queue, retrying through other
		// members while the session may still live (a no-op once it is
		// gone: the nodes went with it).
		rctx, rcancel := context.WithDeadline(context.Background(), releaseDeadline(c))
		defer rcancel()
		if err := e.release(rctx, held); err != nil && !errors.Is(err, client.ErrSessionExpired) && !errors.Is(err, client.ErrClosed) {
			log.Warn("could not release", "node", e.node, "err", err)
		}
	}()

	// Next in line, the watchdog is started ahead (armed, not yet running
	// the job), so the handoff does not wait for a process start. Its
	// environment names the queue node and its token: if the node is
	// replaced (deleted by someone, joined again), so is the watchdog.
	var armed *guardedJob
	var armedToken int64
	disarm := func() {
		if armed != nil {
			armed.Disarm()
			<-armed.Done()
			armed = nil
		}
	}
	code, err := waitForLock(ctx, o, e, sigs, log, func(st QueueStatus) {
		if armed != nil && armedToken != e.czxid {
			disarm()
		}
		if armed == nil && !o.Try && (st.Position == 1 || st.Position == 0 && st.Stopping) {
			// On error, the start is tried again once the lock is held,
			// where its failure is reported.
			armed, _ = spawnGuarded(o.Exe, o.Argv, jobEnv(o, e, nil), o.KillGrace)
			armedToken = e.czxid
		}
	})
	if err != nil || code != 0 {
		disarm()
		return code, err
	}
	if armed != nil && armedToken != e.czxid {
		disarm()
	}
	env := jobEnv(o, e, nil)
	held = true
	sctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	standing := e.watchStanding(sctx)
	if code, err := waitToStart(ctx, o, c, e, sigs, standing, log); err != nil || code != 0 {
		disarm()
		return code, err
	}
	log.Info("lock acquired; starting job", "lock", o.Name, "node", e.node, "token", e.czxid)
	h := &holding{c: c, e: e, leases: newLeaseFanout(c), margin: s.margin, log: log, sigs: sigs, standing: standing, grace: o.KillGrace}
	return h.run(sctx, o.Exe, o.Argv, env, armed)
}

// releaseDeadline bounds the retries of a release: once the lease has
// passed by a whole session timeout the session is surely gone, and its
// nodes with it.
func releaseDeadline(c *client.Client) time.Time {
	return later(c.Lease(), time.Now()).Add(c.SessionTimeout())
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// waitForLock waits in the queue; onStatus sees every change of position.
// A terminating signal ends the wait (the caller leaves the queue) but
// stays queued in sigs, so it is seen again at the start of the job.
func waitForLock(ctx context.Context, o Options, e *entry, sigs *signalPump, log *slog.Logger, onStatus func(QueueStatus)) (int, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.Timeout > 0 {
		var tcancel context.CancelFunc
		wctx, tcancel = context.WithTimeout(wctx, o.Timeout)
		defer tcancel()
	}
	go sigs.cancelOnStop(wctx, cancel)
	sl := newStatusLine(o.Status, o.TTY, o.Name, log)
	err := e.acquire(wctx, o.Try, func(st QueueStatus) {
		sl.update(st)
		onStatus(st)
	})
	sl.clear()
	if s, ok := sigs.stopSignal(); ok {
		log.Info("signal while waiting; leaving the queue", "signal", s.String())
		return 128 + int(s), nil
	}
	switch {
	case err == nil:
		return 0, nil
	case errors.Is(err, ErrNotAcquired):
		return ExitNotAcquired, fmt.Errorf("lock %s is held by another: %w", o.Name, ErrNotAcquired)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return ExitNotAcquired, fmt.Errorf("lock %s not acquired within %v: %w", o.Name, o.Timeout, ErrNotAcquired)
	case errors.Is(err, client.ErrSessionExpired):
		return ExitSessionLost, fmt.Errorf("session lost while waiting: %w", err)
	}
	return ExitUsage, err
}

// waitToStart is the time between taking the lock and starting the job:
// --lock-delay after an unclean end of the previous holder, and the wait
// for a previous holder whose job may still run after someone else
// deleted its nodes. It returns 0 when the job may start.
func waitToStart(ctx context.Context, o Options, c *client.Client, e *entry, sigs *signalPump, standing <-chan standingLoss, log *slog.Logger) (int, error) {
	var wait time.Duration
	if e.unclean() && o.LockDelay > 0 {
		log.Info("previous holder's session ended without release; waiting lock-delay", "lock_delay", o.LockDelay)
		wait = o.LockDelay
	}
	if w, why := e.mustWait(); w > 0 {
		log.Warn("waiting until the previous holder's job must be gone", "wait", w.Round(time.Millisecond), "evidence", why)
		wait = max(wait, w)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		ch := sigs.changed()
		if s, ok := sigs.stopSignal(); ok {
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
		case loss := <-standing:
			log.Error("lock lost before the job started: another client deleted or changed this holder's node", "node", loss.Node, "event", loss.Event, "zxid", fmt.Sprintf("0x%x", loss.Zxid))
			return ExitLockLost, fmt.Errorf("lock lost: %s", loss)
		case <-c.Done():
			return ExitSessionLost, fmt.Errorf("session lost before the job started: %w", c.Err())
		case <-ctx.Done():
			return ExitUsage, ctx.Err()
		}
	}
}

// jobEnv is the job's environment: the caller's, the lock's identity and
// its fencing token, then extra.
func jobEnv(o Options, e *entry, extra []string) []string {
	env := append(append([]string(nil), o.Env...),
		fencing.EnvToken+"="+strconv.FormatInt(e.czxid, 10),
		fencing.EnvLock+"="+o.Name,
		fencing.EnvLockNode+"="+e.node)
	return append(env, extra...)
}

// holding is a held lock whose job runs under a watchdog.
type holding struct {
	c        *client.Client
	e        *entry
	leases   *leaseFanout
	margin   time.Duration // taken off every lease
	grace    time.Duration // SIGTERM to SIGKILL
	log      *slog.Logger
	sigs     *signalPump
	standing <-chan standingLoss
}

// run runs the job under a watchdog (armed: started ahead with env, or
// nil: started now), feeding it each new lease deadline and every signal,
// stopping it when the session or the lock's standing is lost, and maps
// how it ended to an exit code.
func (h *holding) run(ctx context.Context, exe string, argv, env []string, armed *guardedJob) (int, error) {
	updates, unsubscribe := h.leases.subscribe()
	defer unsubscribe()
	deadline := func(lease time.Time) Boottime { return BoottimeAt(lease.Add(-h.margin)) }
	job := armed
	if job == nil {
		var err error
		if job, err = spawnGuarded(exe, argv, env, h.grace); err != nil {
			return ExitUsage, err
		}
	}
	job.Go(deadline(h.c.Lease()))
	sessionLost := false
	var lost *standingLoss
	for {
		ch := h.sigs.changed()
		for _, s := range h.sigs.take() {
			if sig, ok := s.(syscall.Signal); ok {
				h.log.Debug("forwarding signal", "signal", s.String())
				job.Signal(sig)
			}
		}
		select {
		case l := <-updates:
			job.SetDeadline(deadline(l))
		case <-ch:
		case loss := <-h.standing:
			if lost == nil {
				lost = &loss
				h.log.Error("lock lost: another client deleted or changed this holder's node; stopping the job",
					"node", loss.Node, "event", loss.Event, "zxid", fmt.Sprintf("0x%x", loss.Zxid))
				job.Stop()
				go func() {
					hctx, cancel := context.WithTimeout(ctx, h.c.SessionTimeout())
					defer cancel()
					h.e.hold(hctx, loss)
				}()
			}
		case <-h.c.Done():
			if !sessionLost {
				sessionLost = true
				h.log.Error("session lost; stopping the job", "err", h.c.Err())
				job.Stop()
			}
		case <-job.Done():
			r := job.Result()
			switch {
			case r.Reason == ReasonDeadline:
				return ExitSessionLost, fmt.Errorf("session lease ran out; job killed (exit %d)", r.Code)
			case sessionLost && (r.Reason == ReasonStopped || r.Reason == ReasonWatchdogDied):
				return ExitSessionLost, fmt.Errorf("session lost; job killed (exit %d)", r.Code)
			case lost != nil:
				return ExitLockLost, fmt.Errorf("lock lost (%s); job stopped (exit %d)", *lost, r.Code)
			}
			h.log.Info("job finished", "exit", r.Code, "signal", r.Signal)
			return r.Code, nil
		}
	}
}

// holderInfo describes this process as a contender; timeout and grace
// bound how long its job can outlive the loss of its standing.
func holderInfo(argv []string, timeout, grace time.Duration) HolderInfo {
	host, _ := os.Hostname()
	name := strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	cmd := strings.Join(argv, " ")
	if len(cmd) > 512 {
		cmd = cmd[:512]
	}
	return HolderInfo{Host: host, PID: os.Getpid(), User: name, Command: cmd, Since: time.Now().UTC().Truncate(time.Millisecond),
		SessionTimeoutMS: timeout.Milliseconds(), KillGraceMS: grace.Milliseconds()}
}
