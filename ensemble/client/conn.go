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
	sent     time.Time        // Config.Now when written: the lease stamp
	wrote    time.Time        // time.Now when written: how long it has waited
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
// Ownership: a dial attempt creates it (handshake); the run loop adopts
// it, then a reader goroutine and a writer goroutine serve it until it is
// killed, while the run loop watches it for silence; the run loop then
// closes the socket, waits for both, and fails what is still outstanding.
// mu guards the three FIFOs of outstanding packets.
type conn struct {
	cl      *Client
	nc      net.Conn // the session's stream: TLS over raw, or raw itself
	raw     net.Conn // the TCP socket; closing it unblocks everything at once
	heard   *heardReader
	br      *bufio.Reader
	bw      *bufio.Writer
	server  string
	timeout time.Duration // negotiated on this connection
	enc     *wire.Encoder // writer-owned scratch

	// The session as this connection's handshake established it; the
	// client takes it over only if this connection wins its race.
	sessionID  int64
	passwd     []byte
	sent       time.Time // the ConnectRequest's stamp: its answer is a lease proof
	newSession bool

	mu      sync.Mutex // guards pending, auths, pings and primed
	pending []*request // numbered requests and setWatches, in wire order
	auths   []*request // auth packets: ZooKeeper answers them out of band
	pings   []ping     // unanswered pings, in wire order

	// primed goes out before anything queued: the session's credentials
	// (Connect waits for their verdict), then the watches armed on
	// earlier connections.
	primed []*request

	dead     chan struct{}
	killOnce sync.Once
	cause    error
}

type ping struct {
	sent  time.Time // Config.Now: the lease stamp
	wrote time.Time // time.Now: how long it has waited
}

// heardReader notes when bytes last came in from the server. A reply
// still arriving (a large one, or one trickling in over a slow link)
// shows the member is there even before its frame is complete.
type heardReader struct {
	r     io.Reader
	epoch time.Time
	last  atomic.Int64 // time.Since(epoch) at the latest read: monotonic
}

func newHeardReader(r io.Reader) *heardReader { return &heardReader{r: r, epoch: time.Now()} }

func (h *heardReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if n > 0 {
		h.last.Store(int64(time.Since(h.epoch)))
	}
	return n, err
}

func (h *heardReader) at() time.Time { return h.epoch.Add(time.Duration(h.last.Load())) }

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
	r.wrote = time.Now()
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
	p := ping{sent: cn.cl.cfg.Now(), wrote: time.Now()}
	cn.mu.Lock()
	cn.pings = append(cn.pings, p)
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
// thirds of the session timeout is dead (as in the Java client). The stall
// check below gives up on a silent member long before; this is the
// backstop.
func (cn *conn) readTimeout() time.Duration { return cn.timeout * 2 / 3 }

// A member cut off by the network (packets dropped, not refused) shows up
// only as silence: TCP reports nothing for minutes. How long the client
// may wait for an answer follows from the lease budget of its most
// demanding user, the supervisor: it pings every timeout/5, and kills its
// job when only its margins are left of the lease (drift margin, kill
// grace and slack: 2.35s of a 6s timeout with the defaults, never more
// than half the timeout). Say a member falls silent just after answering
// a ping. The next ping goes out up to timeout/5 later, when the lease has
// 4.8s of 6s left: 2.45s before the kill, in which the client must notice
// the silence and get an answer from another member.
//
//   - An unanswered ping at the head of the line is given up after
//     timeout/6, 1s of 6s. That leaves 1.45s for the failover: a handshake
//     with a healthy member takes milliseconds, and the stagger between
//     attempts (timeout/20, see race) lets four silent members be tried
//     before the one that answers. A healthy member answers a ping within
//     a round trip to the leader (a follower answers only once the leader
//     has acknowledged the session's liveness), orders of magnitude below;
//     pings every PingInterval never come near it, since the clock runs
//     from each ping's own send time.
//   - A request at the head of the line may take longer: a write or sync
//     waits for a quorum round with disk syncs, which load can stretch, a
//     read for the session's earlier writes to be applied on the member,
//     and a ping behind it waits too (replies come in request order). It
//     is given up after timeout/4, 1.5s of 6s, which still leaves 0.95s
//     for the failover.
//
// The clock of the oldest packet restarts whenever any bytes arrive: a
// member that is sending is not silent. Neither allowance goes below
// minStall, so that short timeouts do not turn hiccups of a loaded
// machine into reconnects. It stays under a sixth of the shortest
// timeout the supervisor accepts with its default kill grace (4.7s), so it
// changes nothing there.
const minStall = 750 * time.Millisecond

// stallAllowance is how long the oldest unanswered packet, of type op, may
// wait without a byte from the server.
func (cn *conn) stallAllowance(op int32) time.Duration {
	d := cn.timeout / 4
	if op == wire.OpPing || op == wire.OpAuth {
		// Answered at once by a member that has the leader's ear.
		d = cn.timeout / 6
	}
	return max(d, minStall)
}

// errStalled: the member left the oldest packet unanswered too long.
var errStalled = errors.New("server stalled")

// checkStall gives up on cn if its oldest unanswered packet has waited
// longer than its allowance since the later of its send, the last bytes
// heard, and since (when the client last stopped being frozen). Otherwise
// it says when to look again: at the head's deadline, and never more than
// the shortest allowance ahead, because a packet that becomes the head
// later (one written into an empty line, or the next after an answer) has
// its deadline at least that far after its own start.
func (cn *conn) checkStall(now, since time.Time) (time.Duration, error) {
	wrote, op, ok := cn.head()
	next := cn.stallAllowance(wire.OpPing)
	if !ok {
		return next, nil
	}
	from := wrote
	if h := cn.heard.at(); h.After(from) {
		from = h
	}
	if since.After(from) {
		from = since
	}
	allow := cn.stallAllowance(op)
	waited := now.Sub(from)
	if waited >= allow {
		return 0, fmt.Errorf("%w: no answer from %s for %v to %s", errStalled, cn.server, waited.Round(time.Millisecond), wire.OpName(op))
	}
	return min(allow-waited, next), nil
}

// head is the oldest unanswered packet: the server answers in request
// order, so it is the one the connection is waiting for.
func (cn *conn) head() (wrote time.Time, op int32, ok bool) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if len(cn.pending) > 0 {
		wrote, op, ok = cn.pending[0].wrote, cn.pending[0].op, true
	}
	if len(cn.pings) > 0 && (!ok || cn.pings[0].wrote.Before(wrote)) {
		wrote, op, ok = cn.pings[0].wrote, wire.OpPing, true
	}
	if len(cn.auths) > 0 && (!ok || cn.auths[0].wrote.Before(wrote)) {
		wrote, op, ok = cn.auths[0].wrote, wire.OpAuth, true
	}
	return wrote, op, ok
}

func (cn *conn) writeLoop() {
	t := time.NewTicker(cn.pingInterval())
	defer t.Stop()
	// Priming first, then the requests queued while no connection was up.
	for i, r := range cn.primed {
		if err := cn.write(r); err != nil {
			// The ones written are outstanding and fail with the
			// connection; the rest never went out.
			for _, r := range cn.primed[i+1:] {
				r.finish(ErrConnectionLoss)
			}
			cn.kill(err)
			return
		}
	}
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
		p, ok := shift(&cn.mu, &cn.pings)
		if !ok {
			return protocolError("ping reply without a ping outstanding")
		}
		if !provesLiveness(h.Err) {
			return fmt.Errorf("server answered a ping with %w", h.Err)
		}
		cl.prove(p.sent, cn.timeout)
		return nil
	case wire.XidAuth:
		r, ok := shift(&cn.mu, &cn.auths)
		if !ok {
			return protocolError("auth reply without an auth outstanding")
		}
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
	if h.Err == wire.ErrSessionMoved && r.xid > 0 && r.op != wire.OpCloseSession && r.state.Load() == reqWaiting {
		// Another member took the session over, as Apache ZooKeeper does
		// when a second handshake of the session (an abandoned attempt
		// that still got through) reached its leader after this one's. It
		// checks the owner before it makes a transaction, so the request
		// was not applied: it goes out again on the next connection, whose
		// handshake moves the session back to where the client is.
		// The connection dies first, so that its writer cannot take the
		// request again.
		err := fmt.Errorf("server answered %w", h.Err)
		cn.kill(err)
		r.xid = 0
		cl.out.requeue([]*request{r})
		return err
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
	// A session error says nothing about the watches: the next handshake
	// re-arms them, or the session's end ends them.
	if r.setWatch != nil && err != nil && provesLiveness(h.Err) {
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

// shift takes the first element off *q under mu; false when *q is empty.
func shift[T any](mu *sync.Mutex, q *[]T) (T, bool) {
	mu.Lock()
	defer mu.Unlock()
	var v T
	if len(*q) == 0 {
		return v, false
	}
	v, *q = (*q)[0], (*q)[1:]
	return v, true
}
