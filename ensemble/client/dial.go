package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// sessionKey is what a handshake asks for: a new session (id 0), or the
// known one resumed. A round of attempts shares one, taken at its start.
type sessionKey struct {
	id      int64
	passwd  []byte
	zxid    int64         // the last zxid seen: no member behind it may accept
	timeout time.Duration // negotiated last; 0 before the first handshake
}

func (c *Client) sessionKey() sessionKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sessionKey{id: c.sessionID, passwd: c.passwd, zxid: c.lastZxid, timeout: c.timeout}
}

// stagger is how long an attempt has to complete its handshake before the
// next one starts alongside it. It is far above a healthy handshake (a
// round trip to the member and one from it to the leader), so that
// usually one member sees the session's handshake: two concurrent ones
// can move an Apache ZooKeeper session to the slower member. And it is
// short against the failover budget (see minStall): at a twentieth of the
// timeout, four silent members cost 0.2 of it.
func (c *Client) stagger(key sessionKey) time.Duration {
	t := key.timeout
	if t == 0 {
		t = c.cfg.SessionTimeout
	}
	return t / 20
}

// attemptWait bounds one attempt, from dial to handshake reply. A new
// session is created through consensus: allow more than a dial, but not
// most of the timeout. A known session is worth waiting for as long as
// its lease lasts, and once little or nothing is left of it, for a third
// of the timeout: the server may hold the session a little longer than
// the lease says (its clock started when it received the packet the lease
// was stamped before), and a fresh round of attempts follows.
func (c *Client) attemptWait(key sessionKey) time.Duration {
	if key.id == 0 {
		return max(c.cfg.SessionTimeout*2/3, c.cfg.DialTimeout)
	}
	left := c.Lease().Sub(c.cfg.Now())
	return min(max(left, key.timeout/3), key.timeout)
}

type attemptResult struct {
	pos int // in the race's server order
	cn  *conn
	err error
}

// race establishes the session on one of servers, tried in that order,
// happy-eyeballs style: each attempt starts when the one before it has
// failed, or has not completed its handshake within the stagger. The first
// attempt to complete wins; every other one is abandoned (cancelled, its
// socket closed) before race returns, so that none of them can still
// reach a member later. Without a winner race returns each attempt's
// error in the order they failed; an authoritative answer that the
// session expired ends the race at once.
func (c *Client) race(ctx context.Context, servers []string, key sessionKey) (*conn, int, []error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan attemptResult, len(servers))
	stagger := c.stagger(key)
	next, running := 0, 0
	launch := func() {
		pos, wait := next, c.attemptWait(key)
		next++
		running++
		go func() {
			actx, acancel := context.WithTimeout(rctx, wait)
			defer acancel()
			cn, err := c.dial(actx, servers[pos], key)
			results <- attemptResult{pos: pos, cn: cn, err: err}
		}()
	}
	launch()
	timer := time.NewTimer(stagger)
	defer timer.Stop()

	var win *attemptResult
	var errs []error
	expired := false
	for running > 0 {
		var staggered <-chan time.Time
		if win == nil && !expired && next < len(servers) {
			staggered = timer.C
		}
		select {
		case r := <-results:
			running--
			switch {
			case r.err == nil && win == nil:
				// Also after an expired answer that came first: a member
				// that resumed the session has confirmed it with the
				// leader, and knows better than one that has not heard
				// of it yet.
				win = &r
				cancel()
			case r.err == nil:
				r.cn.discard()
			default:
				errs = append(errs, r.err)
				if win == nil && !expired {
					c.log.Debug("connect attempt failed", "server", servers[r.pos], "err", r.err)
				}
				if errors.Is(r.err, ErrSessionExpired) {
					expired = true
					cancel()
				} else if win == nil && !expired && next < len(servers) {
					launch()
					timer.Reset(stagger)
				}
			}
		case <-staggered:
			launch()
			timer.Reset(stagger)
		}
	}
	if win != nil {
		return win.cn, win.pos, nil
	}
	return nil, -1, errs
}

// errRefused: the server closed the connection without answering the
// handshake (it is behind the client, read-only, or cut off).
var errRefused = errors.New("server closed the connection during the handshake")

// dial opens a connection to server and establishes or resumes the session
// on it, within ctx. It returns ErrSessionExpired when the server rejects
// a known session. It changes nothing in the client: the caller adopts
// the connection if it wants it.
func (c *Client) dial(ctx context.Context, server string, key sessionKey) (*conn, error) {
	d := net.Dialer{Timeout: c.cfg.DialTimeout}
	network, addr := splitNetwork(server)
	raw, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	nc := raw
	if c.cfg.TLS != nil && network == "tcp" {
		tc, err := c.startTLS(ctx, raw, server)
		if err != nil {
			abandon(raw)
			return nil, err
		}
		nc = tc
	}
	cn, err := c.handshake(ctx, raw, nc, server, key)
	if err != nil {
		abandon(raw)
		return nil, err
	}
	return cn, nil
}

func (c *Client) handshake(ctx context.Context, raw, nc net.Conn, server string, key sessionKey) (*conn, error) {
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	passwd := key.passwd
	if passwd == nil {
		passwd = make([]byte, 16)
	}
	req := wire.ConnectRequest{
		LastZxidSeen: key.zxid,
		Timeout:      int32(c.cfg.SessionTimeout / time.Millisecond),
		SessionID:    key.id,
		Passwd:       passwd,
		HasReadOnly:  true,
	}
	e := wire.NewFrameEncoder(nil)
	req.Encode(e)
	sent := c.cfg.Now()
	if _, err := nc.Write(e.Frame()); err != nil {
		return nil, fmt.Errorf("handshake with %s: %w", server, err)
	}
	heard := newHeardReader(nc)
	br := bufio.NewReaderSize(heard, 64<<10)
	frame, err := wire.ReadFrame(br, nil, maxReplyFrame)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("handshake with %s: %w", server, errRefused)
		}
		return nil, fmt.Errorf("handshake with %s: %w", server, err)
	}
	var resp wire.ConnectResponse
	if err := resp.Decode(wire.NewDecoder(frame)); err != nil {
		return nil, protocolError("connect response from %s: %v", server, err)
	}
	if resp.Timeout <= 0 {
		if key.id != 0 {
			return nil, ErrSessionExpired
		}
		return nil, fmt.Errorf("handshake with %s: server refused a new session", server)
	}
	if key.id != 0 && resp.SessionID != key.id {
		return nil, protocolError("resumed session 0x%x, server answered session 0x%x", key.id, resp.SessionID)
	}
	if !stop() {
		return nil, ctx.Err()
	}
	_ = nc.SetDeadline(time.Time{})
	return &conn{
		cl:         c,
		nc:         nc,
		raw:        raw,
		heard:      heard,
		br:         br,
		bw:         bufio.NewWriterSize(nc, 64<<10),
		server:     server,
		timeout:    time.Duration(resp.Timeout) * time.Millisecond,
		enc:        wire.NewFrameEncoder(make([]byte, 0, 512)),
		dead:       make(chan struct{}),
		sessionID:  resp.SessionID,
		passwd:     resp.Passwd,
		sent:       sent,
		newSession: key.id == 0,
	}, nil
}

// adopt makes cn, the winner of a race, the session's connection: the
// client takes over the session as its handshake established it and the
// lease proof of that handshake, and prepares what the connection sends
// before anything queued: the credentials, then the watches armed on
// earlier connections, relative to the last zxid seen so that the server
// fires at once what changed meanwhile.
func (c *Client) adopt(cn *conn) {
	c.mu.Lock()
	c.sessionID, c.passwd, c.timeout = cn.sessionID, cn.passwd, cn.timeout
	auth := append([]Auth(nil), c.auth...)
	zxid := c.lastZxid
	c.mu.Unlock()
	c.prove(cn.sent, cn.timeout)
	for i := range auth {
		r := newRequest(context.Background(), wire.OpAuth, "", &wire.AuthPacket{Scheme: auth[i].Scheme, Auth: auth[i].Secret}, nil)
		r.xid = wire.XidAuth
		cn.primed = append(cn.primed, r)
	}
	for _, sw := range c.watches.setWatches(zxid) {
		r := newRequest(context.Background(), wire.OpSetWatches, "", sw, nil)
		r.xid = wire.XidSetWatches
		r.setWatch = sw
		cn.primed = append(cn.primed, r)
	}
}

// discard lets go of a connection that completed its handshake but lost
// the race. A session it created is closed at once rather than left to
// expire on the server; a resumed one needs only the socket closed.
func (cn *conn) discard() {
	if !cn.newSession {
		abandon(cn.raw)
		return
	}
	e := wire.NewFrameEncoder(nil)
	(&wire.RequestHeader{Xid: 1, Opcode: wire.OpCloseSession}).Encode(e)
	_ = cn.raw.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = cn.nc.Write(e.Frame())
	// A plain close: the request goes out before the FIN, and the server
	// acts on it without anyone reading the reply.
	_ = cn.raw.Close()
}

// abandon closes a socket with a reset instead of a FIN, discarding what
// is still unsent. A ConnectRequest left in the send queue would otherwise
// be retransmitted to a member that comes back and, on Apache ZooKeeper,
// move the session there, away from the connection that won.
func abandon(raw net.Conn) {
	if tc, ok := raw.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = raw.Close()
}
