package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// Client is one ZooKeeper session.
//
// All methods are safe for concurrent use. A Client runs one goroutine that
// (re)connects and watches the live connection for silence, one per
// connection attempt in flight while it reconnects, and two per live
// connection: a writer that sends queued requests and pings, and a reader
// that matches replies to requests, fires watches and extends the lease,
// in wire order. None of them ever waits
// for the caller: state events, lease updates and watch events are
// delivered through channels that never block the client (see Events,
// LeaseUpdates and Event).
//
// A Client ends when its session expires or Close is called; Done is
// closed then and every later operation fails with Err().
type Client struct {
	cfg     Config
	log     *slog.Logger
	servers []string // shuffled once; tried round robin

	out     *outbox
	watches *watchSet
	lease   *leaseKeeper
	events  *eventQueue
	gate    gate // test hook: freezes reader and pinger
	xid     atomic.Int32

	ctx    context.Context // cancelled by Close or on expiry
	cancel context.CancelFunc
	done   chan struct{}
	ran    chan struct{} // closed when the run loop has ended

	mu           sync.Mutex // guards the fields below it, state to leaseNoticed
	state        State
	server       string // of the current or last connection
	cur          *conn  // the live connection, nil while suspended
	sessionID    int64
	passwd       []byte
	timeout      time.Duration
	lastZxid     int64
	auth         []Auth
	nextServer   int
	closing      bool
	err          error
	leaseNoticed bool // ErrLeaseExpired reported for this suspension
}

// Connect establishes a new session with one of cfg.Servers and returns
// once it is established and the configured credentials are accepted. It
// keeps trying the servers until ctx ends, unless every server in a round
// failed TLS verification (either side refused the other's certificate).
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	servers := append([]string(nil), cfg.Servers...)
	rand.Shuffle(len(servers), func(i, j int) { servers[i], servers[j] = servers[j], servers[i] })
	c := &Client{
		cfg:     cfg,
		log:     cfg.Logger,
		servers: servers,
		out:     newOutbox(),
		watches: newWatchSet(),
		events:  newEventQueue(),
		done:    make(chan struct{}),
		ran:     make(chan struct{}),
		auth:    cfg.Auth,
	}
	var onProof func(time.Time, time.Duration, time.Time)
	if cfg.hooks != nil {
		onProof = cfg.hooks.onProof
	}
	c.lease = newLeaseKeeper(onProof)
	c.ctx, c.cancel = context.WithCancel(context.Background())

	var cn *conn
	var lastErr error
	delay := minBackoff
	for {
		var errs []error
		cn, errs = c.attemptRound(ctx)
		if cn != nil {
			break
		}
		refused := 0
		for _, err := range errs {
			if tlsRefused(err) {
				refused++
			}
			// The attempts cut short when ctx ended say the least.
			if lastErr == nil || ctx.Err() == nil {
				lastErr = err
			}
		}
		if refused == len(c.servers) {
			// Certificates do not fix themselves: fail now, not at ctx's end.
			c.cancel()
			return nil, fmt.Errorf("connect: %w", lastErr)
		}
		if err := c.backoff(ctx, &delay); err != nil {
			c.cancel()
			if lastErr != nil {
				return nil, fmt.Errorf("connect: %w (last attempt: %v)", err, lastErr)
			}
			return nil, fmt.Errorf("connect: %w", err)
		}
	}
	c.mu.Lock()
	c.state, c.server = StateConnected, cn.server
	c.mu.Unlock()
	c.emit(StateEvent{State: StateConnected, Server: cn.server, Lease: c.Lease()})
	primed := cn.primed
	go c.run(cn)

	for _, r := range primed {
		if r.op != wire.OpAuth {
			continue
		}
		select {
		case err := <-r.done:
			if errors.Is(err, wire.ErrAuthFailed) {
				c.Close()
				return nil, fmt.Errorf("connect: auth %s: %w", r.body.(*wire.AuthPacket).Scheme, err)
			}
			// Connection loss: the credentials go out again with the
			// next handshake.
		case <-ctx.Done():
			c.Close()
			return nil, fmt.Errorf("connect: %w", ctx.Err())
		}
	}
	return c, nil
}

const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = time.Second
)

// backoff waits before the next round over the servers.
func (c *Client) backoff(ctx context.Context, delay *time.Duration) error {
	t := time.NewTimer(*delay)
	defer t.Stop()
	*delay = min(*delay*2, maxBackoff)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// attemptRound races one attempt per server for the session, in the
// shuffled round robin order starting after the server of the last
// connection, so that the member just lost is tried last. The next round
// starts after the winner.
func (c *Client) attemptRound(ctx context.Context) (*conn, []error) {
	c.mu.Lock()
	first := c.nextServer
	order := make([]string, len(c.servers))
	for i := range order {
		order[i] = c.servers[(first+i)%len(c.servers)]
	}
	c.mu.Unlock()
	cn, pos, errs := c.race(ctx, order, c.sessionKey())
	if cn == nil {
		return nil, errs
	}
	c.mu.Lock()
	c.nextServer = (first + pos + 1) % len(c.servers)
	c.mu.Unlock()
	c.adopt(cn)
	return cn, nil
}

// run owns the connection sequence: serve a connection until it dies,
// then reconnect, until the session is lost for good.
func (c *Client) run(cn *conn) {
	defer close(c.ran)
	for {
		c.serve(cn)
		if c.isClosing() {
			c.finish(ErrClosed)
			return
		}
		c.setState(StateSuspended, cn.server, cn.err())
		next, err := c.reconnect()
		if err != nil {
			c.finish(err)
			return
		}
		cn = next
		c.setState(StateConnected, cn.server, nil)
	}
}

// serve runs cn's reader and writer until cn dies or the client ends, then
// fails what was outstanding on it. Meanwhile it gives up on a member
// that has left a packet unanswered too long (see minStall).
func (c *Client) serve(cn *conn) {
	c.mu.Lock()
	c.cur = cn
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.cur = nil
		c.mu.Unlock()
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); cn.readLoop() }()
	go func() { defer wg.Done(); cn.writeLoop() }()
	check := time.NewTimer(cn.stallAllowance(wire.OpPing))
	defer check.Stop()
	var thawed <-chan struct{} // non-nil while the test gate is frozen
	var since time.Time        // when the gate last thawed
	stalled := false
watch:
	for {
		select {
		case <-cn.dead:
			break watch
		case <-c.ctx.Done():
			cn.kill(ErrClosed)
			break watch
		case <-thawed:
			// A frozen client's silence was its own, not the member's.
			thawed, since = nil, time.Now()
			check.Reset(cn.stallAllowance(wire.OpPing))
		case <-check.C:
			if ch := c.gate.thawedC(); ch != nil {
				thawed = ch
				continue
			}
			next, err := cn.checkStall(time.Now(), since)
			if err != nil {
				stalled = true
				cn.kill(err)
				break watch
			}
			check.Reset(next)
		}
	}
	if stalled {
		// The member may come back with our unsent packets still queued
		// for it; they are of no use to anyone then.
		abandon(cn.raw)
	} else {
		cn.raw.Close()
	}
	wg.Wait()
	loss := ErrConnectionLoss
	if c.ctx.Err() != nil {
		loss = ErrClosed
	}
	cn.failAll(loss)
	if loss == ErrClosed {
		c.log.Debug("connection ended", "server", cn.server, "err", cn.err())
	} else {
		c.log.Info("connection ended", "server", cn.server, "err", cn.err())
	}
}

// reconnect races the servers for the session, round after round, until
// one resumes it, a server says it expired, or the client is closed.
func (c *Client) reconnect() (*conn, error) {
	delay := minBackoff
	for {
		c.gate.wait(c.ctx.Done())
		if c.isClosing() || c.ctx.Err() != nil {
			return nil, ErrClosed
		}
		c.noticeLease()
		cn, errs := c.attemptRound(c.ctx)
		if cn != nil {
			return cn, nil
		}
		for _, err := range errs {
			if errors.Is(err, ErrSessionExpired) {
				if c.isClosing() {
					return nil, ErrClosed
				}
				return nil, ErrSessionExpired
			}
		}
		if c.backoff(c.ctx, &delay) != nil {
			return nil, ErrClosed
		}
	}
}

// noticeLease reports, once per suspension, that the client's own lease
// deadline has passed.
func (c *Client) noticeLease() {
	l := c.Lease()
	if !c.cfg.Now().After(l) {
		return
	}
	c.mu.Lock()
	report := !c.leaseNoticed && c.state == StateSuspended
	c.leaseNoticed = true
	server := c.server
	c.mu.Unlock()
	if report {
		c.emit(StateEvent{State: StateSuspended, Server: server, Lease: l, Err: ErrLeaseExpired})
	}
}

func (c *Client) setState(s State, server string, err error) {
	c.mu.Lock()
	c.state, c.server = s, server
	if s == StateConnected {
		c.leaseNoticed = false
	}
	c.mu.Unlock()
	c.emit(StateEvent{State: s, Server: server, Lease: c.Lease(), Err: err})
}

func (c *Client) emit(ev StateEvent) { c.events.push(ev, false) }

// finish ends the client for good with err (ErrClosed or
// ErrSessionExpired).
func (c *Client) finish(err error) {
	state := StateClosed
	if errors.Is(err, ErrSessionExpired) {
		state = StateExpired
	}
	c.mu.Lock()
	c.state, c.err = state, err
	server := c.server
	c.mu.Unlock()
	c.cancel()
	for _, r := range c.out.shut(err) {
		r.finish(err)
	}
	c.watches.closeAll(err)
	c.events.push(StateEvent{State: state, Server: server, Lease: c.Lease(), Err: err}, true)
	close(c.done)
	if errors.Is(err, ErrClosed) {
		c.log.Debug("session ended", "session", fmt.Sprintf("0x%x", c.SessionID()), "err", err)
	} else {
		c.log.Warn("session ended", "session", fmt.Sprintf("0x%x", c.SessionID()), "err", err)
	}
}

func (c *Client) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

func (c *Client) nextXid() int32 {
	for {
		x := c.xid.Add(1)
		if x > 0 {
			return x
		}
		// Wrapped: start again at 1 (0 and negatives are reserved).
		c.xid.CompareAndSwap(x, 0)
	}
}

func (c *Client) noteZxid(z int64) {
	c.mu.Lock()
	if z > c.lastZxid {
		c.lastZxid = z
	}
	c.mu.Unlock()
}

func (c *Client) keepAuth(a Auth) {
	c.mu.Lock()
	c.auth = append(c.auth, a)
	c.mu.Unlock()
}

func (c *Client) prove(sent time.Time, timeout time.Duration) { c.lease.prove(sent, timeout) }

// Close ends the session: it sends closeSession, so that the server
// removes the session's ephemeral nodes at once, waits for the reply at
// most Config.DialTimeout, and stops. Without a connection it just stops
// (the session then expires on the server after its timeout). Requests
// still outstanding fail with ErrClosed and watches get EventNotWatching.
// Close is idempotent; it returns an error only when the first call could
// not confirm that the server closed the session.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		<-c.ran
		return nil
	}
	c.closing = true
	connected := c.state == StateConnected
	c.mu.Unlock()

	var err error
	if connected {
		r := newRequest(context.Background(), wire.OpCloseSession, "", nil, nil)
		r.noProof = true
		if perr := c.out.pushLast(r, ErrClosed); perr == nil {
			t := time.NewTimer(c.cfg.DialTimeout)
			select {
			case err = <-r.done:
			case <-t.C:
				err = errors.New("no reply")
			case <-c.done:
				// A server closes the connection right after its reply;
				// that reply, when it came, was handled first.
				select {
				case err = <-r.done:
				default:
					err = c.Err()
				}
			}
			t.Stop()
		}
	}
	c.out.refuse(ErrClosed)
	c.cancel()
	<-c.ran
	if err != nil {
		return fmt.Errorf("close session: %w", err)
	}
	return nil
}

// SessionID is the session's id.
func (c *Client) SessionID() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionID
}

// SessionTimeout is the timeout negotiated with the server on the latest
// handshake.
func (c *Client) SessionTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.timeout
}

// State is the current state.
func (c *Client) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Events delivers every state change, starting with the StateConnected of
// Connect. It never blocks the client: 64 events are buffered and beyond
// that they are held in memory until read. The channel is closed after the
// final event (StateExpired or StateClosed).
func (c *Client) Events() <-chan StateEvent { return c.events.ch }

// Lease is the deadline until which the server has proven the session
// alive (see the package documentation for what that proof is worth).
func (c *Client) Lease() time.Time { return c.lease.get() }

// LeaseUpdates holds the latest lease deadline after every increase: a
// capacity-1 channel in which an undelivered older value is replaced by
// the newer one. Read Lease for the current value at any time.
func (c *Client) LeaseUpdates() <-chan time.Time { return c.lease.ch }

// Done is closed when the session is lost for good: expired, or Close
// was called.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is nil until Done is closed, then ErrSessionExpired or ErrClosed.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// LastZxid is the highest zxid seen in a reply. The handshake sends it so
// that no member behind the client accepts it.
func (c *Client) LastZxid() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastZxid
}

// currentServer is the server of the current or last connection.
func (c *Client) currentServer() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.server
}
