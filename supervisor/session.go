package supervisor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// ErrUnreachable: no ensemble member answered within the connect
// timeout (ExitUnavailable).
var ErrUnreachable = errors.New("no ensemble member reachable")

// dialCode is the exit code of a failed dial.
func dialCode(err error) int {
	if errors.Is(err, ErrUnreachable) {
		return ExitUnavailable
	}
	return ExitUsage
}

// speaksTLS reports whether one of servers answers a TLS handshake: it
// sends its certificate, or refuses ours for want of a client
// certificate (a TLS alert). A ZooKeeper port reads the ClientHello as a
// frame far too long and closes the connection.
func speaksTLS(ctx context.Context, servers []string) bool {
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		d := tls.Dialer{Config: &tls.Config{
			// Only whether the port speaks TLS is asked, nothing is
			// sent over it: which certificate it shows does not matter.
			InsecureSkipVerify: true, //nolint:gosec
			MinVersion:         tls.VersionTLS12,
		}}
		c, err := d.DialContext(ctx, "tcp", s)
		cancel()
		var oe *net.OpError
		switch {
		case err == nil:
			c.Close()
			return true
		case errors.As(err, &oe) && oe.Op == "remote error":
			return true
		}
	}
	return false
}

// session is a connected client with what every run on it needs: the
// margin taken off each lease before it becomes a kill deadline, the
// jobs' kill grace, the ACL of the nodes it creates, and the fan-out of
// its lease updates to every job running on it.
//
// Safe for concurrent use: a cron host's firings share one.
type session struct {
	c      *client.Client
	margin time.Duration
	grace  time.Duration
	acl    []wire.ACL
	// recordFull: records keep the job's whole command line
	// (--record-command full).
	recordFull bool
	leases     *leaseFanout
	log        *slog.Logger
}

// dial connects to the ensemble of o and checks the granted timing for
// jobs stopped with grace. Close the session when done.
func dial(ctx context.Context, o ConnOptions, grace time.Duration, log *slog.Logger) (*session, error) {
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
	timedOut := cctx.Err() != nil && ctx.Err() == nil
	cancel()
	if err != nil {
		if timedOut {
			// Not a certificate or auth refusal, which end the connect
			// at once. A plaintext client at TLS ports looks like
			// members that close every connection (as one without a
			// leader does): ask them for a TLS handshake to tell.
			if o.TLS == nil && speaksTLS(ctx, o.Servers) {
				return nil, fmt.Errorf("connect to %s: %w (the members serve TLS: give tls-ca, and tls-cert and tls-key if they want client certificates)", strings.Join(o.Servers, ","), err)
			}
			return nil, fmt.Errorf("connect to %s: %w: %w", strings.Join(o.Servers, ","), ErrUnreachable, err)
		}
		return nil, fmt.Errorf("connect to %s: %w", strings.Join(o.Servers, ","), err)
	}
	margin, err := leaseMargin(ctx, o, grace, c, log)
	if err != nil {
		c.Close()
		return nil, err
	}
	acl, err := lockACL(ctx, o, c, log)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &session{c: c, margin: margin, grace: grace, acl: acl, recordFull: o.recordFull(), leases: newLeaseFanout(c), log: log}, nil
}

func (s *session) close() { s.c.Close() }

// leaseMargin is what is taken off every lease before it becomes the
// job's kill deadline: the drift margin, widened against Apache ZooKeeper.
// It checks the timing again with the timeout the server granted (which
// may be below the one asked for) and the final margin: the kill must not
// fire between two ordinary pings.
func leaseMargin(ctx context.Context, o ConnOptions, grace time.Duration, c *client.Client, log *slog.Logger) (time.Duration, error) {
	margin := o.DriftMargin
	if o.ExtraMargin > 0 && isApacheZooKeeper(ctx, o.Servers, o.TLS) {
		margin += o.ExtraMargin
		log.Debug("ensemble is Apache ZooKeeper; widening the lease margin", "margin", margin)
	}
	timeout := c.SessionTimeout()
	if o.SessionTimeout > 0 && timeout != o.SessionTimeout {
		limit := "most"
		if timeout > o.SessionTimeout {
			limit = "least"
		}
		log.Warn(fmt.Sprintf("the members granted a session timeout of %v, not the %v asked for: they grant at %s %v (coordrun server --min-session-timeout and --max-session-timeout; ZooKeeper minSessionTimeout, maxSessionTimeout); the lease follows theirs", timeout, o.SessionTimeout, limit, timeout), "asked", o.SessionTimeout, "granted", timeout)
	}
	if budget := timeout / 2; grace+margin+killSlack > budget {
		return 0, fmt.Errorf("session timeout %v (as granted by the ensemble) is too short for --kill-grace %v and a lease margin of %v: they must stay under %v; raise --session-timeout or lower --kill-grace", timeout, grace, margin, budget)
	}
	return margin, nil
}

// deadline is the kill deadline of a job on this session's lease.
func (s *session) deadline(lease time.Time) Boottime { return BoottimeAt(lease.Add(-s.margin)) }

// releaseDeadline bounds the retries of a release: once the lease has
// passed by a whole session timeout the session is surely gone, and its
// nodes with it.
func (s *session) releaseDeadline() time.Time {
	return later(s.c.Lease(), time.Now()).Add(s.c.SessionTimeout())
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

// enter joins the queue of the lock in dir as the contender running argv,
// whose job can outlive its standing by the session timeout and the kill
// grace with the margin.
func (s *session) enter(ctx context.Context, dir string, argv []string) (*recipe.Entry, error) {
	info := holderInfo(argv, s.recordFull, s.c.SessionTimeout(), s.grace+s.margin)
	e, err := recipe.Enter(ctx, s.c, dir, info, recipe.Options{ACL: s.acl, Log: s.log})
	return e, withAccessHint(err)
}

// release leaves e's queue, retrying through other members while the
// session may still live (a no-op once it is gone: the nodes went with
// it).
func (s *session) release(ctx context.Context, e *recipe.Entry) error {
	rctx, cancel := context.WithDeadline(ctx, s.releaseDeadline())
	defer cancel()
	return e.Release(rctx)
}
