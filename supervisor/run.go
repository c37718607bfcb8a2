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
	"github.com/coordrun/coordrun/fencing"
)

// Exit codes of coordrun run besides the job's own (which is passed
// through; 128+N when a signal N killed it).
const (
	ExitUsage       = 64 // bad invocation or configuration, or no ensemble reachable
	ExitNotAcquired = 75 // --try or --timeout: the lock was held by another
	ExitSessionLost = 76 // the session's lease ran out; the job was killed
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

// leaseMargin is what is taken off every lease before it becomes the
// job's kill deadline: the drift margin, widened against Apache ZooKeeper.
// It checks the timing again with the timeout the server granted (which
// may be below the one asked for) and the final margin: the kill must not
// fire between two ordinary pings.
func leaseMargin(o Options, c *client.Client) (time.Duration, error) {
	margin := o.DriftMargin
	if o.ExtraMargin > 0 && isApacheZooKeeper(o.Servers, o.TLS) {
		margin += o.ExtraMargin
		o.Log.Debug("ensemble is Apache ZooKeeper; widening the lease margin", "margin", margin)
	}
	timeout := c.SessionTimeout()
	if budget := timeout / 2; o.KillGrace+margin+killSlack > budget {
		return 0, UsageError{fmt.Errorf("session timeout %v (as granted by the ensemble) is too short for --kill-grace %v and a lease margin of %v: they must stay under %v; raise --session-timeout or lower --kill-grace", timeout, o.KillGrace, margin, budget)}
	}
	return margin, nil
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
	cctx, cancel := context.WithTimeout(ctx, max(o.SessionTimeout, 10*time.Second))
	c, err := client.Connect(cctx, client.Config{
		Servers:        o.Servers,
		SessionTimeout: o.SessionTimeout,
		// Frequent pings keep the proven lease far ahead of the kill
		// deadline in ordinary operation.
		PingInterval: o.SessionTimeout / 5,
		Auth:         o.Auth,
		TLS:          o.TLS,
		Logger:       log,
	})
	cancel()
	if err != nil {
		return ExitUsage, fmt.Errorf("connect to %s: %w", strings.Join(o.Servers, ","), err)
	}
	defer c.Close()
	margin, err := leaseMargin(o, c)
	if err != nil {
		return ExitUsage, err
	}
	dir := path.Join(o.Root, o.Name)
	log.Info("waiting for lock", "lock", o.Name, "node_dir", dir, "session", fmt.Sprintf("0x%x", c.SessionID()))

	info := holderInfo(o.Argv)
	e, err := enter(ctx, c, dir, info)
	if err != nil {
		return ExitUsage, err
	}
	held := false
	defer func() {
		// Whatever happened, leave the queue (a no-op once the session is
		// gone: the node went with it).
		// Once the lease has lapsed the session is likely gone (and the
		// node with it); do not hang on an unreachable ensemble.
		wait := 5 * time.Second
		if time.Until(c.Lease()) <= 0 {
			wait = 500 * time.Millisecond
		}
		rctx, rcancel := context.WithTimeout(context.Background(), wait)
		defer rcancel()
		if err := e.release(rctx, held); err != nil && !errors.Is(err, client.ErrSessionExpired) && !errors.Is(err, client.ErrClosed) {
			log.Warn("could not release", "node", e.node, "err", err)
		}
	}()

	// Next in line, the watchdog is started ahead (armed, not yet running
	// the job), so the handoff does not wait for a process start.
	var armed *guardedJob
	env := jobEnv(o, e, nil)
	code, err := waitForLock(ctx, o, c, e, log, func(st QueueStatus) {
		if armed == nil && !o.Try && st.Position == 1 {
			// On error, the start is tried again once the lock is held,
			// where its failure is reported.
			armed, _ = spawnGuarded(o.Exe, o.Argv, env, o.KillGrace)
		}
	})
	if err != nil || code != 0 {
		if armed != nil {
			armed.Disarm()
			<-armed.Done()
		}
		return code, err
	}
	held = true
	disarm := func() {
		if armed != nil {
			armed.Disarm()
			<-armed.Done()
		}
	}
	unclean, err := e.markHeld(ctx)
	if err != nil {
		disarm()
		return ExitSessionLost, fmt.Errorf("record holder: %w", err)
	}
	if unclean && o.LockDelay > 0 {
		log.Info("previous holder's session ended without release; waiting lock-delay", "lock_delay", o.LockDelay)
		select {
		case <-time.After(o.LockDelay):
		case <-c.Done():
			disarm()
			return ExitSessionLost, fmt.Errorf("session lost during lock-delay: %w", c.Err())
		case <-ctx.Done():
			disarm()
			return ExitUsage, ctx.Err()
		}
	}
	log.Info("lock acquired; starting job", "lock", o.Name, "node", e.node, "token", e.czxid)
	leases := newLeaseFanout(c)
	return runHeld(o, c, leases, e, margin, armed, env, log)
}

// waitForLock waits in the queue; onStatus sees every change of position.
func waitForLock(ctx context.Context, o Options, c *client.Client, e *entry, log *slog.Logger, onStatus func(QueueStatus)) (int, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.Timeout > 0 {
		var tcancel context.CancelFunc
		wctx, tcancel = context.WithTimeout(wctx, o.Timeout)
		defer tcancel()
	}
	stopSigs := make(chan os.Signal, 1)
	go func() {
		for {
			select {
			case s := <-o.Signals:
				if s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGHUP || s == syscall.SIGQUIT {
					stopSigs <- s
					cancel()
					return
				}
			case <-wctx.Done():
				return
			}
		}
	}()
	sl := newStatusLine(o.Status, o.TTY, o.Name, log)
	err := e.wait(wctx, o.Try, func(st QueueStatus) {
		sl.update(st)
		onStatus(st)
	})
	sl.clear()
	select {
	case s := <-stopSigs:
		log.Info("signal while waiting; leaving the queue", "signal", s.String())
		return 128 + int(s.(syscall.Signal)), nil
	default:
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

// jobEnv is the job's environment: the caller's, the lock's identity and
// its fencing token, then extra.
func jobEnv(o Options, e *entry, extra []string) []string {
	env := append(append([]string(nil), o.Env...),
		fencing.EnvVar+"="+strconv.FormatInt(e.czxid, 10),
		fencing.EnvLock+"="+o.Name,
		fencing.EnvLockNode+"="+e.node)
	return append(env, extra...)
}

// runHeld runs the job under a watchdog (armed: started ahead with env, or
// nil: started now) while feeding it each new lease deadline, and maps how
// it ended to an exit code.
func runHeld(o Options, c *client.Client, leases *leaseFanout, e *entry, margin time.Duration, armed *guardedJob, env []string, log *slog.Logger) (int, error) {
	updates, unsubscribe := leases.subscribe()
	defer unsubscribe()
	deadline := func(lease time.Time) Boottime { return BoottimeAt(lease.Add(-margin)) }
	job := armed
	if job == nil {
		var err error
		if job, err = spawnGuarded(o.Exe, o.Argv, env, o.KillGrace); err != nil {
			return ExitUsage, err
		}
	}
	job.Go(deadline(c.Lease()))
	sessionLost := false
	for {
		select {
		case l := <-updates:
			job.SetDeadline(deadline(l))
		case s := <-o.Signals:
			if sig, ok := s.(syscall.Signal); ok {
				log.Debug("forwarding signal", "signal", s.String())
				job.Signal(sig)
			}
		case <-c.Done():
			if !sessionLost {
				sessionLost = true
				log.Error("session lost; stopping the job", "err", c.Err())
				job.Stop()
			}
		case <-job.Done():
			r := job.Result()
			switch r.Reason {
			case ReasonDeadline:
				return ExitSessionLost, fmt.Errorf("session lease ran out; job killed (exit %d)", r.Code)
			case ReasonStopped, "watchdog-died":
				if sessionLost {
					return ExitSessionLost, fmt.Errorf("session lost; job killed (exit %d)", r.Code)
				}
			}
			log.Info("job finished", "exit", r.Code, "signal", r.Signal)
			return r.Code, nil
		}
	}
}

func holderInfo(argv []string) HolderInfo {
	host, _ := os.Hostname()
	name := strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	cmd := strings.Join(argv, " ")
	if len(cmd) > 512 {
		cmd = cmd[:512]
	}
	return HolderInfo{Host: host, PID: os.Getpid(), User: name, Command: cmd, Since: time.Now().UTC().Truncate(time.Millisecond)}
}
