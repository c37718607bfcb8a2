package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// request is one call on its way: queued in the outbox, then outstanding
// on a connection, then finished exactly once through done.
type request struct {
	ctx  context.Context
	op   int32
	xid  int32 // 0: assign a fresh positive xid when written
	path string
	body wire.Record // nil: no body
	resp wire.Record // filled by the reader on success; nil: no body

	// watch is the kind a successful reply arms, with wch as its channel;
	// exists arms an exist watch instead when the node is missing.
	watch watchKind
	wch   chan Event

	noProof  bool             // closeSession: a reply proves nothing
	auth     *Auth            // auth added by AddAuth: kept on success
	setWatch *wire.SetWatches // setWatches: its watches end if refused
	sent     time.Time        // stamped by the writer before the write
	done     chan error       // capacity 1
	// state hands the request between the caller and the reader: the
	// reader claims it (reqWaiting → reqDelivering) before decoding into
	// resp, the caller abandons it (reqWaiting → reqGone) when its ctx
	// ends. Only one wins, so a late reply never writes into a resp the
	// caller has already returned.
	state atomic.Int32
}

const (
	reqWaiting int32 = iota
	reqDelivering
	reqGone
)

func newRequest(ctx context.Context, op int32, path string, body, resp wire.Record) *request {
	return &request{ctx: ctx, op: op, path: path, body: body, resp: resp, done: make(chan error, 1)}
}

func (r *request) finish(err error) { r.done <- err }

// conn is one connection with an established session.
//
// Ownership: the run loop creates it (handshake, priming), then a reader
// goroutine and a writer goroutine serve it until it is killed; the run
// loop then closes the socket, waits for both, and fails what is still
// outstanding. mu guards the three FIFOs of outstanding packets.
type conn struct {
	cl      *Client
	nc      net.Conn
	br      *bufio.Reader
	bw      *bufio.Writer
	server  string
	timeout time.Duration // negotiated on this connection
	enc     *wire.Encoder // writer-owned scratch

	mu      sync.Mutex
	pending []*request  // numbered requests and setWatches, in wire order
	auths   []*request  // auth packets: ZooKeeper answers them out of band
	pings   []time.Time // send stamps of unanswered pings

	primed []*request // the auth packets written by the handshake

	dead     chan struct{}
	killOnce sync.Once
	cause    error
}

func (cn *conn) kill(err error) {
	cn.killOnce.Do(func() {
		cn.cause = err
		close(cn.dead)
	})
}

// err is the reason the connection died; valid once dead is closed.
func (cn *conn) err() error {
	<-cn.dead
	return cn.cause
}

// write stamps r, records it as outstanding and encodes it into the
// buffered writer. Only the goroutine that owns the connection's writes
// (the run loop while priming, then the writer) calls it.
func (cn *conn) write(r *request) error {
	if r.xid == 0 {
		r.xid = cn.cl.nextXid()
	}
	r.sent = cn.cl.cfg.Now()
	cn.mu.Lock()
	if r.xid == wire.XidAuth {
		cn.auths = append(cn.auths, r)
	} else {
		cn.pending = append(cn.pending, r)
	}
	cn.mu.Unlock()
	cn.enc.Reset()
	(&wire.RequestHeader{Xid: r.xid, Opcode: r.op}).Encode(cn.enc)
	if r.body != nil {
		r.body.Encode(cn.enc)
	}
	_, err := cn.bw.Write(cn.enc.Frame())
	return err
}

func (cn *conn) writePing() error {
	now := cn.cl.cfg.Now()
	cn.mu.Lock()
	cn.pings = append(cn.pings, now)
	cn.mu.Unlock()
	cn.enc.Reset()
	(&wire.RequestHeader{Xid: wire.XidPing, Opcode: wire.OpPing}).Encode(cn.enc)
	_, err := cn.bw.Write(cn.enc.Frame())
	return err
}

// failAll finishes every outstanding request with err.
func (cn *conn) failAll(err error) {
	cn.mu.Lock()
	p, a := cn.pending, cn.auths
	cn.pending, cn.auths, cn.pings = nil, nil, nil
	cn.mu.Unlock()
	for _, r := range p {
		r.finish(err)
	}
	for _, r := range a {
		r.finish(err)
	}
}

// pingInterval is Config.PingInterval capped at a third of the negotiated
// timeout, so that a healthy idle connection always hears a reply well
// within the read timeout.
func (cn *conn) pingInterval() time.Duration {
	max := cn.timeout / 3
	if p := cn.cl.cfg.PingInterval; p > 0 && p < max {
		return p
	}
	return max
}

// readTimeout: a connection that has not delivered a single frame for two
// thirds of the session timeout is dead (as in the Java client); the last
// third is left for finding another member before the server gives up.
func (cn *conn) readTimeout() time.Duration { return cn.timeout * 2 / 3 }

func (cn *conn) writeLoop() {
	t := time.NewTicker(cn.pingInterval())
	defer t.Stop()
	// Requests queued while no connection was up go out first.
	cn.flushOutbox()
	for {
		select {
		case <-cn.dead:
			return
		case <-cn.cl.out.kick:
			cn.flushOutbox()
		case <-t.C:
			if cn.cl.gate.frozen() {
				continue
			}
			if err := cn.writePing(); err != nil {
				cn.kill(err)
				return
			}
			if err := cn.bw.Flush(); err != nil {
				cn.kill(err)
				return
			}
		}
	}
}

func (cn *conn) flushOutbox() {
	batch := cn.cl.out.take()
	for i, r := range batch {
		select {
		case <-cn.dead:
			// Never written: they can go out on the next connection.
			cn.cl.out.requeue(batch[i:])
			return
		default:
		}
		if err := r.ctx.Err(); err != nil {
			r.finish(err)
			continue
		}
		if err := cn.write(r); err != nil {
			cn.cl.out.requeue(batch[i+1:])
			cn.kill(err)
			return
		}
	}
	if err := cn.bw.Flush(); err != nil {
		cn.kill(err)
	}
}

func (cn *conn) readLoop() {
	var buf []byte
	for {
		cn.cl.gate.wait(cn.dead)
		_ = cn.nc.SetReadDeadline(time.Now().Add(cn.readTimeout()))
		frame, err := wire.ReadFrame(cn.br, buf, maxReplyFrame)
		// A frozen client must not act on anything, not even a broken
		// connection: reconnecting would renew the session.
		cn.cl.gate.wait(cn.dead)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				err = fmt.Errorf("no reply from %s for %v: %w", cn.server, cn.readTimeout(), err)
			}
			cn.kill(err)
			return
		}
		buf = frame[:0]
		if err := cn.handle(frame); err != nil {
			cn.kill(err)
			return
		}
	}
}

func protocolError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

// handle processes one frame from the server, in wire order.
func (cn *conn) handle(frame []byte) error {
	cl := cn.cl
	d := wire.NewDecoder(frame)
	var h wire.ReplyHeader
	if err := h.Decode(d); err != nil {
		return protocolError("reply header: %v", err)
	}
	switch h.Xid {
	case wire.XidNotification:
		var ev wire.WatcherEvent
		if err := ev.Decode(d); err != nil {
			return protocolError("notification: %v", err)
		}
		cl.watches.fire(ev)
		return nil
	case wire.XidPing:
		cn.mu.Lock()
		if len(cn.pings) == 0 {
			cn.mu.Unlock()
			return protocolError("ping reply without a ping outstanding")
		}
		sent := cn.pings[0]
		cn.pings = cn.pings[1:]
		cn.mu.Unlock()
		if provesLiveness(h.Err) {
			cl.prove(sent, cn.timeout)
		}
		return nil
	case wire.XidAuth:
		cn.mu.Lock()
		if len(cn.auths) == 0 {
			cn.mu.Unlock()
			return protocolError("auth reply without an auth outstanding")
		}
		r := cn.auths[0]
		cn.auths = cn.auths[1:]
		cn.mu.Unlock()
		if provesLiveness(h.Err) {
			cl.prove(r.sent, cn.timeout)
		}
		err := codeErr(h.Err)
		if err == nil && r.auth != nil {
			cl.keepAuth(*r.auth)
		}
		if err != nil && r.auth == nil {
			cl.log.Error("server rejected configured credentials", "server", cn.server, "err", err)
			cl.emit(StateEvent{State: cl.State(), Server: cn.server, Lease: cl.Lease(), Err: err})
		}
		r.finish(err)
		return nil
	}
	cn.mu.Lock()
	if len(cn.pending) == 0 {
		cn.mu.Unlock()
		return protocolError("reply xid %d without a request outstanding", h.Xid)
	}
	r := cn.pending[0]
	if r.xid != h.Xid {
		cn.mu.Unlock()
		return protocolError("reply xid %d, oldest outstanding request has xid %d", h.Xid, r.xid)
	}
	cn.pending = cn.pending[1:]
	cn.mu.Unlock()

	if h.Zxid > 0 {
		cl.noteZxid(h.Zxid)
	}
	if provesLiveness(h.Err) && !r.noProof {
		cl.prove(r.sent, cn.timeout)
	}
	err := codeErr(h.Err)
	claimed := r.state.CompareAndSwap(reqWaiting, reqDelivering)
	if err == nil && r.resp != nil && claimed {
		if derr := r.resp.Decode(d); derr != nil {
			r.finish(ErrConnectionLoss)
			return protocolError("%s reply: %v", wire.OpName(r.op), derr)
		}
	}
	if r.watch != 0 && claimed {
		switch {
		case err == nil:
			cl.watches.add(watchKey{r.watch, r.path}, r.wch)
		case r.op == wire.OpExists && h.Err == wire.ErrNoNode:
			cl.watches.add(watchKey{watchExist, r.path}, r.wch)
		}
	}
	if r.setWatch != nil && err != nil {
		cl.log.Warn("server refused to re-arm watches", "server", cn.server, "err", err)
		cl.watches.drop(r.setWatch, err)
	}
	r.finish(err)
	if h.Err == wire.ErrSessionExpired || h.Err == wire.ErrSessionMoved {
		// Let a fresh handshake tell whether the session still exists.
		return fmt.Errorf("server answered %w", h.Err)
	}
	return nil
}

// provesLiveness: a reply proves the session alive unless it says the
// session is gone or elsewhere.
func provesLiveness(c wire.Code) bool {
	return c != wire.ErrSessionExpired && c != wire.ErrSessionMoved
}

// errRefused: the server closed the connection without answering the
// handshake (it is behind the client, read-only, or cut off).
var errRefused = errors.New("server closed the connection during the handshake")

// dial opens a connection to server and establishes or resumes the session
// on it. It returns ErrSessionExpired when the server rejects a known
// session.
func (cl *Client) dial(ctx context.Context, server string) (*conn, error) {
	d := net.Dialer{Timeout: cl.cfg.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if cl.cfg.TLS != nil {
		tc, err := cl.startTLS(ctx, nc, server)
		if err != nil {
			nc.Close()
			return nil, err
		}
		nc = tc
	}
	cn, err := cl.handshake(ctx, nc, server)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return cn, nil
}

func (cl *Client) handshake(ctx context.Context, nc net.Conn, server string) (*conn, error) {
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	cl.mu.Lock()
	sid, passwd, zxid, known := cl.sessionID, cl.passwd, cl.lastZxid, cl.timeout
	auth := append([]Auth(nil), cl.auth...)
	cl.mu.Unlock()
	if passwd == nil {
		passwd = make([]byte, 16)
	}
	// A new session is created through consensus and an existing one is
	// confirmed with the leader before the member answers, so allow more
	// than a dial; but a handshake that takes most of the session timeout
	// is no use.
	wait := cl.cfg.SessionTimeout * 2 / 3
	if known > 0 {
		wait = known * 2 / 3
	}
	wait = max(wait, cl.cfg.DialTimeout)
	_ = nc.SetDeadline(time.Now().Add(wait))

	req := wire.ConnectRequest{
		LastZxidSeen: zxid,
		Timeout:      int32(cl.cfg.SessionTimeout / time.Millisecond),
		SessionID:    sid,
		Passwd:       passwd,
		HasReadOnly:  true,
	}
	e := wire.NewFrameEncoder(nil)
	req.Encode(e)
	sent := cl.cfg.Now()
	if _, err := nc.Write(e.Frame()); err != nil {
		return nil, fmt.Errorf("handshake with %s: %w", server, err)
	}
	br := bufio.NewReaderSize(nc, 64<<10)
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
		if sid != 0 {
			return nil, ErrSessionExpired
		}
		return nil, fmt.Errorf("handshake with %s: server refused a new session", server)
	}
	if sid != 0 && resp.SessionID != sid {
		return nil, protocolError("resumed session 0x%x, server answered session 0x%x", sid, resp.SessionID)
	}
	timeout := time.Duration(resp.Timeout) * time.Millisecond
	cl.mu.Lock()
	cl.sessionID, cl.passwd, cl.timeout = resp.SessionID, resp.Passwd, timeout
	cl.mu.Unlock()
	cl.prove(sent, timeout)

	cn := &conn{
		cl:      cl,
		nc:      nc,
		br:      br,
		bw:      bufio.NewWriterSize(nc, 64<<10),
		server:  server,
		timeout: timeout,
		enc:     wire.NewFrameEncoder(make([]byte, 0, 512)),
		dead:    make(chan struct{}),
	}
	// Priming, before any queued request: credentials, then the watches
	// armed on earlier connections, relative to the last zxid seen so the
	// server fires at once what changed meanwhile.
	for i := range auth {
		r := newRequest(context.Background(), wire.OpAuth, "", &wire.AuthPacket{Scheme: auth[i].Scheme, Auth: auth[i].Secret}, nil)
		r.xid = wire.XidAuth
		cn.primed = append(cn.primed, r)
		if err := cn.write(r); err != nil {
			return nil, err
		}
	}
	for _, sw := range cl.watches.setWatches(zxid) {
		r := newRequest(context.Background(), wire.OpSetWatches, "", sw, nil)
		r.xid = wire.XidSetWatches
		r.setWatch = sw
		if err := cn.write(r); err != nil {
			return nil, err
		}
	}
	if err := cn.bw.Flush(); err != nil {
		return nil, err
	}
	if !stop() {
		return nil, ctx.Err()
	}
	_ = nc.SetDeadline(time.Time{})
	return cn, nil
}
