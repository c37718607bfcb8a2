// Package etcdengine is the supervisor's engine on etcd (v3 API, servers
// 3.4 and later): the session is an etcd lease, the tree of records is
// keys under one prefix (a record's key is its path), ephemeral records
// are keys attached to the lease, and the lock queue is keys ordered by
// their create revision.
//
// The session's lease is renewed by one unary keep-alive per renewal,
// never the client library's keep-alive stream: a stream's replies cannot
// be matched to the request they answer, so their send time is unknown,
// and the deadline a reply proves is that send time plus the TTL.
package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordrun/coordrun/supervisor/engine"
)

// Conn is a session on etcd: an engine.Conn.
type Conn struct {
	cli       *clientv3.Client
	endpoints []string // host:port, for messages
	prefix    string   // every key lies under it; ends in "/"
	log       *slog.Logger
	lease     clientv3.LeaseID
	ttl       time.Duration

	updates chan time.Time // capacity 1, newest deadline only
	done    chan struct{}  // closed once, by end
	// base is cancelled by Close: the keeper and its request in flight
	// stop.
	base  context.Context
	stop  context.CancelFunc
	check chan struct{} // capacity 1: renew now (a watch saw our keys go)
	seq   atomic.Int64  // numbers this session's queue entries
	// revoked is set when a holder's standing watch found the lease gone
	// before its proven deadline: another client revoked it. The holder
	// reports that as its lock lost, and the session ends at the deadline
	// (see keep), not before: the job is being stopped for the loss, and
	// the watchdog kills it at the deadline whatever happens.
	revoked atomic.Bool

	// wg joins the keeper and every watch goroutine; Close waits for it.
	wg        sync.WaitGroup
	closeOnce sync.Once // the client is closed once, however often Close is

	mu       sync.Mutex // guards deadline, err, ended
	deadline time.Time
	err      error
	ended    bool
}

var _ engine.Conn = (*Conn)(nil)

// ID is the lease id in hex, as etcdctl prints it.
func (c *Conn) ID() string { return strconv.FormatInt(int64(c.lease), 16) }

// Kind is "etcd".
func (c *Conn) Kind() string { return "etcd" }

// Timeout is the lease's TTL as granted.
func (c *Conn) Timeout() time.Duration { return c.ttl }

// Lease is the send time of the newest acknowledged renewal (or of the
// grant) plus the TTL.
func (c *Conn) Lease() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline
}

// LeaseUpdates delivers each new Lease.
func (c *Conn) LeaseUpdates() <-chan time.Time { return c.updates }

// Done is closed when the lease is gone or Close was called.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why Done is closed.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// LeaseID is the lease every ephemeral record of the session is attached
// to.
func (c *Conn) LeaseID() clientv3.LeaseID { return c.lease }

// Client is the underlying etcd client (for tests and diagnostics).
func (c *Conn) Client() *clientv3.Client { return c.cli }

// Close revokes the lease, so that etcd deletes the session's keys now
// rather than at its expiry, and closes the client.
func (c *Conn) Close() error {
	c.mu.Lock()
	already := c.ended
	c.mu.Unlock()
	var err error
	c.stop()
	if !already {
		ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
		_, err = c.cli.Revoke(ctx, c.lease)
		cancel()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			err = nil
		}
		c.end(nil)
	}
	c.wg.Wait()
	c.closeOnce.Do(func() {
		if cerr := c.cli.Close(); err == nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
			err = cerr
		}
	})
	return mapErr(err)
}

// end closes Done with why (nil: closed by its owner), once.
func (c *Conn) end(why error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.ended, c.err = true, why
	close(c.done)
}

// proven raises the lease deadline to sent + ttl: the store renewed the
// lease no earlier than the request was sent.
func (c *Conn) proven(sent time.Time, ttl time.Duration) {
	d := sent.Add(ttl)
	c.mu.Lock()
	if !d.After(c.deadline) {
		c.mu.Unlock()
		return
	}
	c.deadline = d
	c.mu.Unlock()
	select { // keep only the newest
	case <-c.updates:
	default:
	}
	c.updates <- d
}

// checkNow asks the keeper to renew at once: a watch saw one of the
// session's keys deleted, which is how a revoked lease shows first.
func (c *Conn) checkNow() {
	select {
	case c.check <- struct{}{}:
	default:
	}
}

// keep renews the lease every third of its TTL (as a ZooKeeper client
// pings), sooner when asked, until the store says the lease is gone or
// Close. A renewal that gets no answer is retried at once: the deadline
// it would have proven is what the supervisor's watchdog is waiting on.
func (c *Conn) keep() {
	defer c.wg.Done()
	every := c.ttl / 3
	retry := min(every, 200*time.Millisecond)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-c.base.Done():
			return
		case <-t.C:
		case <-c.check:
		}
		ctx, cancel := context.WithTimeout(c.base, every)
		sent := time.Now()
		resp, err := c.cli.KeepAliveOnce(ctx, c.lease)
		cancel()
		switch {
		case err == nil:
			c.proven(sent, time.Duration(resp.TTL)*time.Second)
			t.Reset(every)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			if c.revoked.Load() {
				c.endAtDeadline()
				return
			}
			c.end(fmt.Errorf("%w: etcd lease %s expired or was revoked", engine.ErrSessionLost, c.ID()))
			return
		default:
			if c.base.Err() != nil {
				return
			}
			c.log.Debug("etcd lease renewal failed; retrying", "lease", c.ID(), "err", err)
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
			t.Reset(retry)
		}
	}
}

// endAtDeadline ends the session, whose lease another client revoked,
// once its proven deadline has passed (or at Close).
func (c *Conn) endAtDeadline() {
	t := time.NewTimer(time.Until(c.Lease()))
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.base.Done():
	}
	c.end(fmt.Errorf("%w: etcd lease %s was revoked by another client", engine.ErrSessionLost, c.ID()))
}

// leaseRevoked asks the store whether the lease is gone; if it is while
// its proven deadline is still ahead, it cannot have expired: another
// client revoked it. It marks the session so.
func (c *Conn) leaseRevoked(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, c.ttl/4) // Close waits for the caller
	defer cancel()
	resp, err := c.cli.TimeToLive(ctx, c.lease)
	if err != nil || resp.TTL >= 0 || !time.Now().Before(c.Lease()) { // -1: gone
		return false
	}
	c.revoked.Store(true)
	return true
}

// grant starts the session: a lease of ttl (rounded up to whole seconds,
// etcd's unit; the store may grant more), renewed from then on.
func (c *Conn) grant(ctx context.Context, ttl time.Duration) error {
	secs := int64((ttl + time.Second - 1) / time.Second)
	// A proposal made while the members elect a leader waits out etcd's
	// request timeout (7 s by default) before the server gives up on it:
	// ask again every second instead. A grant that lands late leaves a
	// lease nothing is attached to, which expires on its own.
	var resp *clientv3.LeaseGrantResponse
	var sent time.Time
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		sent = time.Now()
		var err error
		resp, err = c.cli.Grant(actx, secs)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || actx.Err() == nil && !isUnavailable(err) {
			return err
		}
	}
	c.lease, c.ttl = resp.ID, time.Duration(resp.TTL)*time.Second
	c.proven(sent, c.ttl)
	// A grant that took long (the client retried it through a leader
	// election, say) proves a deadline already close: renew once now,
	// so that the session does not start with its lease nearly spent.
	if time.Since(sent) > c.ttl/4 {
		sent = time.Now()
		if resp, err := c.cli.KeepAliveOnce(ctx, c.lease); err == nil {
			c.proven(sent, time.Duration(resp.TTL)*time.Second)
		}
	}
	c.wg.Add(1)
	go c.keep()
	return nil
}
