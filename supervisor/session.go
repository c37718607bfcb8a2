package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/engine/zkengine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// dialCode is the exit code of a failed dial.
func dialCode(err error) int {
	if errors.Is(err, engine.ErrUnreachable) {
		return ExitUnavailable
	}
	return ExitUsage
}

// session is a connected store with what every run on it needs: the
// margin taken off each lease before it becomes a kill deadline, the
// jobs' kill grace, and the fan-out of its lease updates to every job
// running on it.
//
// Safe for concurrent use: a cron host's firings share one.
type session struct {
	conn   engine.Conn
	margin time.Duration
	grace  time.Duration
	// recordFull: records keep the job's whole command line
	// (--record-command full).
	recordFull bool
	leases     *leaseFanout
	log        *slog.Logger
}

// dial connects to the ensemble of o and checks the granted timing for
// jobs stopped with grace. Close the session when done.
func dial(ctx context.Context, o ConnOptions, grace time.Duration, log *slog.Logger) (*session, error) {
	var conn engine.Conn
	var err error
	if o.Dial != nil {
		conn, err = o.Dial(ctx, log)
	} else {
		conn, err = zkengine.Dial(ctx, zkengine.DialOptions{Servers: o.Servers, SessionTimeout: o.SessionTimeout,
			Auth: o.Auth, TLS: o.TLS, ACL: o.ACL, AskKind: o.ExtraMargin > 0, Log: log})
	}
	if err != nil {
		return nil, err
	}
	margin, err := leaseMargin(o, grace, conn, log)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &session{conn: conn, margin: margin, grace: grace, recordFull: o.recordFull(), leases: newLeaseFanout(conn), log: log}, nil
}

// close ends the session and waits for the lease fan-out to end.
func (s *session) close() {
	s.conn.Close()
	s.leases.wait()
}

// leaseMargin is what is taken off every lease before it becomes the
// job's kill deadline: the drift margin, widened against Apache ZooKeeper.
// It checks the timing again with the timeout the server granted (which
// may be below the one asked for) and the final margin: the kill must not
// fire between two ordinary pings.
func leaseMargin(o ConnOptions, grace time.Duration, conn engine.Session, log *slog.Logger) (time.Duration, error) {
	margin := o.DriftMargin
	if o.ExtraMargin > 0 && conn.Kind() == "zookeeper" {
		margin += o.ExtraMargin
		log.Debug("ensemble is Apache ZooKeeper; widening the lease margin", "margin", margin)
	}
	timeout := conn.Timeout()
	if o.SessionTimeout > 0 && timeout != o.SessionTimeout {
		limit := "most"
		if timeout > o.SessionTimeout {
			limit = "least"
		}
		said := fmt.Sprintf("the members granted a session timeout of %v, not the %v asked for: they grant at %s %v (coordrun server --min-session-timeout and --max-session-timeout; ZooKeeper minSessionTimeout, maxSessionTimeout; etcd grants whole seconds)", timeout, o.SessionTimeout, limit, timeout)
		if o.SessionTimeoutGiven {
			// The timeout is the outage a job rides out and the time a
			// dead host keeps the lock: running on another than the one
			// asked for would break the promise it was chosen for.
			return 0, fmt.Errorf("%s; ask for --session-timeout %v, or change the members' limit", said, timeout)
		}
		log.Warn(said+"; the lease follows theirs", "asked", o.SessionTimeout, "granted", timeout)
	}
	if budget := timeout / 2; grace+margin+killSlack > budget {
		return 0, fmt.Errorf("session timeout %v (as granted by the ensemble) is too short for --kill-grace %v and a lease margin of %v: they must stay under %v; raise --session-timeout or lower --kill-grace", timeout, grace, margin, budget)
	}
	return margin, nil
}

// deadline is the kill deadline of a job on this session's lease.
func (s *session) deadline(lease time.Time) Boottime { return boottimeAt(lease.Add(-s.margin)) }

// releaseDeadline bounds the retries of a release: once the lease has
// passed by a whole session timeout the session is surely gone, and its
// nodes with it.
func (s *session) releaseDeadline() time.Time {
	return later(s.conn.Lease(), time.Now()).Add(s.conn.Timeout())
}

// afterStop is the context of the writes that must outlive a stop (a
// firing's records, its lock's queue): not cancelled with ctx, but once
// ctx ends it lasts only until releaseDeadline, while the session may
// still live, so that a member gone for good cannot hold a stopping
// process until systemd's SIGKILL.
func (s *session) afterStop(ctx context.Context) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopWatch := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(time.Until(s.releaseDeadline()), cancel)
		context.AfterFunc(wctx, func() { t.Stop() })
	})
	return wctx, func() { stopWatch(); cancel() }
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// enter joins the queue of the lock in dir (a semaphore of that many
// holders, if more than 1) as the contender running argv, whose job can
// outlive its standing by the session timeout and the kill grace with the
// margin.
func (s *session) enter(ctx context.Context, dir string, argv []string, holders int) (engine.Entry, error) {
	info := s.holderInfo(argv, s.recordFull)
	if holders > 1 {
		info.Holders = holders
	}
	e, err := engine.EnterSemaphore(ctx, s.conn, dir, info)
	return e, withAccessHint(err)
}

// holderInfo describes this process as a contender running argv.
func (s *session) holderInfo(argv []string, full bool) state.HolderInfo {
	return holderInfo(argv, full, s.conn.Timeout(), s.grace+s.margin)
}

// release leaves e's queue, retrying through other members while the
// session may still live (a no-op once it is gone: the nodes went with
// it).
func (s *session) release(ctx context.Context, e engine.Entry) error {
	rctx, cancel := context.WithDeadline(ctx, s.releaseDeadline())
	defer cancel()
	return e.Release(rctx)
}
