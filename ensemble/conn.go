package ensemble

// A client connection: the session handshake (handshake.go), then the
// reader, the sequencer and the writer, with the write queue and its
// bound. What a request means is package zk's; what it needs of the member
// goes through host.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
)

// maxQueuedReplyBytes bounds what a connection may have waiting to be
// written; a client that does not read its replies is disconnected rather
// than allowed to grow the member's memory.
const maxQueuedReplyBytes = 64 << 20

// maxPipelined bounds requests read ahead of their replies on one
// connection; reading stops until replies catch up. Every connection has
// a queue this long from its start, so it is kept small: 128 requests in
// flight already fill a round trip of any client library.
const maxPipelined = 128

// writers are the buffers replies are written through, one per write in
// progress rather than one per connection: most connections are idle most
// of the time, and tens of thousands of them would otherwise hold a
// buffer each.
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 32<<10) }}

// host is what a client connection needs of its member; *Member is the
// one implementation.
type host interface {
	// submit hands a write to raft and returns the wait for its outcome;
	// writes submitted in order by one goroutine commit in that order.
	submit(txn *tree.Txn) pending[proposal]
	// readIndex names a zxid to apply before a sync may be answered.
	readIndex(ctx context.Context) (int64, error)
	// noteLive records that the session was heard from and returns the
	// liveness generation a reply must wait for (0: none); waitLive
	// waits for it, failing with errSessionGone for a session the leader
	// holds dead.
	noteLive(session int64) uint64
	waitLive(ctx context.Context, gen uint64, session int64) error
	// view runs fn on the tree under the state machine's read lock: no
	// apply, and so no notification, happens while it runs.
	view(fn func(t *tree.Tree, zxid int64))
	lastZxid() int64
	waitApplied(ctx context.Context, zxid int64) error
	watches() *watchManager
	// register makes c the connection of its session (false: the member
	// is closing); unregister forgets it and its watches.
	register(c *conn) bool
	unregister(c *conn)
	// reconfig serves a reconfig request from remote, read with the
	// identities auth.
	reconfig(ctx context.Context, remote net.Addr, auth []tree.Identity, req *wire.ReconfigRequest) ([]byte, wire.Stat, wire.Code)
	// silence is the leader's view of a session's liveness, as asker may
	// see it (zk.MaySeeSilence).
	silence(ctx context.Context, asker zk.Session, id int64) (wire.Silence, error)
}

// connEnv is what the connections of a member share.
type connEnv struct {
	host   host
	ctx    context.Context // ends when the member closes
	log    *slog.Logger
	stats  *requestStats
	bounds *limitStats
	tr     *tracker

	limits     zk.Limits
	quota      *treeQuota // the member-wide tree quota (treequota.go); nil: none
	maxFrame   int        // largest request frame accepted
	minTimeout time.Duration
	maxTimeout time.Duration
	identity   CertIdentity // what of a client certificate is its x509 identity
	admins     admins       // which identities are the super user (adminid.go)
}

// conn is one client connection with an established session.
//
// Three goroutines serve it: the reader decodes requests in order and
// starts each (a write is handed to raft at once, so a connection's writes
// pipeline); the sequencer finishes them strictly in request order (a read
// runs only after the session's earlier writes are applied here) and waits
// for the liveness acknowledgement that makes each reply a lease proof; the
// writer sends replies and watch notifications. Notifications are queued
// by the FSM at apply time, before any later read could see the change.
type conn struct {
	env     *connEnv
	nc      net.Conn
	session int64
	timeout time.Duration
	remote  string

	auth  []tree.Identity // ids.List() as of the last auth: slots keep it
	ids   *zk.Identities  // the reader's; auth is its list
	slots chan slot
	// sharedAuth is auth for other goroutines: the FSM checks watch
	// notifications against it. The reader goroutine alone writes both.
	sharedAuth atomic.Pointer[[]tree.Identity]
	// certIDs are the x509 identities of the client's verified
	// certificate; an auth packet of scheme x509 re-authenticates with
	// them.
	certIDs []tree.Identity
	// The reader's: when the request it starts was read.
	readAt time.Time
	// The sequencer's: the read it runs now, and scratch space for it;
	// when the outcome of the write it finishes was known here.
	current   slot
	read      zk.Result
	viewRead  func(t *tree.Tree, zxid int64) // c.runCurrent, bound once
	outcomeAt time.Time

	outMu    sync.Mutex // guards out, outBytes, outSince, outWrite, outNote and closing
	out      [][]byte
	outBytes int
	outSince time.Time // when out became non-empty
	outWrite bool      // out holds a write's reply
	outNote  time.Time // when the first notification in out was queued
	outKick  chan struct{}
	closing  bool // stop after what is queued

	done      chan struct{}
	closeOnce sync.Once
	// lastWrite is the zxid of the session's latest acknowledged write
	// here. Reads wait until this member has applied it (read your
	// writes), and no reply carries a lower zxid, so a client that
	// reconnects is never accepted by a member behind its own writes.
	// Only the sequencer writes it.
	lastWrite atomic.Int64
	// selfClose: the client asked to close its session; the sequencer
	// sends the reply and then ends the connection, so the FSM must not
	// end it first.
	selfClose atomic.Bool
}

// slot is one request awaiting its reply, finished by the sequencer. A
// connection's queue holds maxPipelined of them, so they stay small.
type slot struct {
	// read is a read request, run against the tree in a view once the
	// session's earlier writes are applied here. Other requests have
	// finish, which gives the reply frame, or nil for none.
	read       *readRequest
	finish     func() []byte
	arrived    time.Time
	gen        uint64 // liveness generation the reply waits for
	op         int32  // request opcode, for the latency metric
	closeAfter bool
}

// readRequest is a read and the identities it was read with.
type readRequest struct {
	req  zk.Request
	auth []tree.Identity
}

func newConn(env *connEnv, nc net.Conn, session int64, timeout time.Duration) *conn {
	host, _, _ := net.SplitHostPort(nc.RemoteAddr().String())
	c := &conn{
		env:     env,
		nc:      nc,
		session: session,
		timeout: timeout,
		remote:  nc.RemoteAddr().String(),
		slots:   make(chan slot, maxPipelined),
		outKick: make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	// As on ZooKeeper: the ip identity, then those of the certificate,
	// which need no auth packet.
	var hasCert bool
	c.certIDs, hasCert = connCertIdentities(nc, env.identity)
	if hasCert {
		if len(c.certIDs) == 0 {
			env.log.Info("client certificate carries no identity of the configured kind",
				"remote", c.remote, "session", session, "identity", string(env.identity))
		} else {
			env.log.Debug("client authenticated by its certificate", "remote", c.remote, "session", session, "ids", c.certIDs)
		}
	}
	c.ids = zk.NewIdentities(env.admins.connIdentities(nc, append([]tree.Identity{{Scheme: "ip", ID: host}}, c.certIDs...))...)
	c.setAuth(c.ids.List())
	c.viewRead = c.runCurrent
	return c
}

// setAuth replaces the connection's identities; reader goroutine only.
func (c *conn) setAuth(auth []tree.Identity) {
	c.auth = auth
	c.sharedAuth.Store(&auth)
}

// identities are the connection's current identities, for the READ check
// of watch notifications.
func (c *conn) identities() []tree.Identity {
	return *c.sharedAuth.Load()
}

// run serves the connection until it closes: the reader here, the writer
// and the sequencer on goroutines of their own.
func (c *conn) run(r *bufio.Reader, connectReply []byte) {
	defer c.env.host.unregister(c)
	c.push(connectReply)
	var wg sync.WaitGroup
	wg.Add(2)
	c.env.tr.Go(func() { defer wg.Done(); c.writeLoop() })
	c.env.tr.Go(func() { defer wg.Done(); c.sequence() })
	c.readLoop(r)
	close(c.slots)
	wg.Wait()
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		c.nc.Close()
	})
}

// sessionEnded is called when the session was closed or expired: the
// writer sends what is queued and closes; the client learns the rest on
// reconnecting.
func (c *conn) sessionEnded() {
	c.outMu.Lock()
	c.closing = true
	c.outMu.Unlock()
	kick(c.outKick)
}

func (c *conn) readLoop(r *bufio.Reader) {
	env := c.env
	var buf []byte
	var d wire.Decoder
	for {
		// A client pings every third of its timeout; silence for a
		// whole timeout means it is gone.
		_ = c.nc.SetReadDeadline(time.Now().Add(c.timeout))
		frame, err := wire.ReadFrame(r, buf, env.maxFrame)
		if err != nil {
			if errors.Is(err, wire.ErrFrameTooLarge) {
				env.log.Warn("oversized request; closing", "remote", c.remote, "err", err)
			}
			c.close()
			return
		}
		buf = frame[:0]
		if cap(buf) > 64<<10 {
			buf = nil // not kept for the connection's life: big frames are rare
		}
		c.readAt = time.Now()
		env.stats.received.Add(1)
		env.stats.bytesIn.Add(int64(4 + len(frame)))
		d.Reset(frame)
		var hdr wire.RequestHeader
		if hdr.Decode(&d) != nil {
			c.close()
			return
		}
		gen := env.host.noteLive(c.session)
		s, err := c.start(hdr, &d)
		if err != nil {
			env.log.Info("bad request; closing", "remote", c.remote, "op", wire.OpName(hdr.Opcode), "err", err)
			c.close()
			return
		}
		s.gen = gen
		s.arrived = c.readAt
		s.op = hdr.Opcode
		env.stats.outstanding.Add(1) // until the sequencer is done with it
		select {
		case c.slots <- s:
		case <-c.done:
			env.stats.outstanding.Add(-1)
			return
		}
		if s.closeAfter {
			return
		}
	}
}

// start begins one request and returns its slot. A request whose body
// does not decode is answered MARSHALLINGERROR when ZooKeeper's request
// processors would have decoded it, and otherwise (auth, setWatches)
// closes the connection, as ZooKeeper does.
func (c *conn) start(hdr wire.RequestHeader, d *wire.Decoder) (slot, error) {
	req, err := zk.Decode(hdr, d)
	if err != nil {
		if !zk.AnswersUndecodable(hdr.Opcode) {
			return slot{}, err
		}
		xid, zxid := hdr.Xid, c.env.host.lastZxid()
		return slot{finish: func() []byte { return zk.ErrorReply(xid, zxid, wire.ErrMarshallingError) }}, nil
	}
	h := c.env.host
	xid := req.Xid
	switch req.Kind() {
	case zk.KindPing:
		return slot{finish: func() []byte { return zk.OKReply(xid, c.zxid()) }}, nil
	case zk.KindAuth:
		zxid := h.lastZxid()
		if why := c.ids.Auth(c.certIDs, req.Auth); why != zk.AuthAccepted {
			c.env.bounds.authFailed(why, c.remote, c.env.log)
			// ZooKeeper answers AuthFailed and ends the connection.
			return slot{closeAfter: true, finish: func() []byte { return zk.ErrorReply(xid, zxid, wire.ErrAuthFailed) }}, nil
		}
		c.setAuth(c.env.admins.grant(c.ids.List()))
		return slot{finish: func() []byte { return zk.OKReply(xid, zxid) }}, nil
	case zk.KindCloseSession:
		c.selfClose.Store(true)
		wait := h.submit(&tree.Txn{Kind: tree.TxnCloseSession, Session: c.session})
		return slot{closeAfter: true, finish: func() []byte {
			p, _ := wait(c.env.ctx)
			return zk.OKReply(xid, p.index)
		}}, nil
	case zk.KindWrite:
		return c.startWrite(&req), nil
	case zk.KindSync:
		path := req.Path
		return slot{finish: func() []byte { return c.sync(xid, path) }}, nil
	case zk.KindReconfig:
		rr, auth := req.Reconfig, c.auth
		return slot{finish: func() []byte {
			zxid := c.zxid()
			config, st, code := h.reconfig(c.env.ctx, c.nc.RemoteAddr(), auth, rr)
			if code != wire.OK {
				return zk.ErrorReply(xid, zxid, code)
			}
			return zk.ReconfigReply(xid, c.zxid(), config, st)
		}}, nil
	case zk.KindRead:
		if id, ok := zk.SilenceQuery(&req); ok {
			asker := zk.Session{ID: c.session, Auth: c.auth}
			return slot{finish: func() []byte { return c.silence(xid, asker, id) }}, nil
		}
		// Only reads keep their request: writes are planned here.
		return slot{read: &readRequest{req: req, auth: c.auth}}, nil
	}
	// An opcode ZooKeeper does not know: it answers UNIMPLEMENTED and
	// ends the connection.
	return slot{closeAfter: true, finish: func() []byte { return zk.ErrorReply(xid, h.lastZxid(), wire.ErrUnimplemented) }}, nil
}

// carryAllAuth is how many identities a write's transaction may carry
// without being trimmed to what its apply needs (zk.NeededAuth): real
// clients hold one to three, and for them the read lock the trim takes is
// not worth the few bytes it saves. Past it, an entry carries only the
// identities its apply can consult, so the identity cap bounds no entry's
// size.
const carryAllAuth = 4

// startWrite plans a write and hands it to raft; the slot waits for its
// outcome. A write that cannot succeed is answered without raft.
func (c *conn) startWrite(req *zk.Request) slot {
	h := c.env.host
	xid := req.Xid
	stats := c.env.stats
	plan := zk.PlanWrite(req, zk.Session{ID: c.session, Auth: c.auth}, c.env.limits)
	if plan.Txn == nil || c.env.quotaRefusal(&plan) {
		zxid := h.lastZxid()
		return slot{finish: func() []byte { return plan.Answer(xid, zxid) }}
	}
	if len(plan.Txn.Auth) > carryAllAuth {
		h.view(func(t *tree.Tree, _ int64) {
			plan.Txn.Auth = zk.NeededAuth(plan.Txn.Ops, plan.Txn.Auth, t.CheckedACL)
		})
	}
	planned := time.Now()
	stats.stage(stageDecode, planned.Sub(c.readAt))
	wait := h.submit(plan.Txn)
	submitted := time.Now()
	stats.stage(stagePropose, submitted.Sub(planned))
	return slot{finish: func() []byte {
		ctx, cancel := context.WithTimeout(c.env.ctx, 2*c.timeout)
		defer cancel()
		p, err := wait(ctx)
		if err == nil && p.forwarded {
			stats.stage(stageForward, p.ready.Sub(submitted))
		}
		if err == nil && h.lastZxid() < p.index && h.watches().hasAny(c) {
			// This connection has watches: notifications of everything
			// up to this write must reach it before the reply does, so
			// wait until the write is applied here. Without watches the
			// reply can go at once; later reads wait (see lastWrite).
			err = h.waitApplied(ctx, p.index)
			now := time.Now()
			stats.stage(stageOwnApply, now.Sub(p.ready))
			p.ready = now
		}
		c.outcomeAt = p.ready
		if err != nil {
			// Unknown outcome: only a lost connection tells the client
			// that honestly.
			c.env.log.Info("write failed; closing client", "remote", c.remote, "err", err)
			c.close()
			return nil
		}
		if p.index > c.lastWrite.Load() {
			c.lastWrite.Store(p.index)
		}
		return plan.Reply(xid, p.index, &p.out)
	}}
}

// sync catches this member up with the leader's commit index at the time
// of the request, then answers.
func (c *conn) sync(xid int32, path string) []byte {
	// ZooKeeper syncs whatever path it is given and echoes it.
	h := c.env.host
	ctx, cancel := context.WithTimeout(c.env.ctx, c.timeout)
	defer cancel()
	idx, err := h.readIndex(ctx)
	if err == nil {
		err = h.waitApplied(ctx, idx)
	}
	if err != nil {
		return zk.ErrorReply(xid, h.lastZxid(), wire.ErrConnectionLoss)
	}
	return zk.SyncReply(xid, h.lastZxid(), path)
}

// silence answers a read of a session's silence with the leader's view.
// A leader that cannot be asked (none, or one too old to know the call)
// is answered as a session it does not track: the reader knows nothing
// more than without the read.
func (c *conn) silence(xid int32, asker zk.Session, id int64) []byte {
	ctx, cancel := context.WithTimeout(c.env.ctx, c.timeout)
	defer cancel()
	s, err := c.env.host.silence(ctx, asker, id)
	if err != nil {
		c.env.log.Debug("session silence unknown", "session", fmt.Sprintf("0x%x", id), "err", err)
		s = wire.Silence{}
	}
	return zk.SilenceReply(xid, c.zxid(), s)
}

func (c *conn) sequence() {
	for s := range c.slots {
		c.deliver(&s)
		c.env.stats.outstanding.Add(-1) // read, now answered (or dropped)
	}
}

// deliver finishes one request and queues its reply.
func (c *conn) deliver(s *slot) {
	h := c.env.host
	c.outcomeAt = time.Time{} // set by a write's finish
	// A deadline only for what may wait: on the leader most requests
	// wait for nothing.
	var ctx context.Context
	var cancel context.CancelFunc
	defer func() {
		if cancel != nil {
			cancel()
		}
	}()
	deadline := func() context.Context {
		if ctx == nil {
			ctx, cancel = context.WithTimeout(c.env.ctx, c.timeout)
		}
		return ctx
	}
	if w := c.lastWrite.Load(); s.read != nil && h.lastZxid() < w {
		if err := h.waitApplied(deadline(), w); err != nil {
			c.close()
			return
		}
	}
	// The lease proof is awaited before the request runs, not after: a
	// read that sets a watch must have its reply queued at once, before
	// any notification for that watch could be (clients arm a watch only
	// when its reply arrives, and would drop an earlier notification).
	if s.gen != 0 {
		if err := h.waitLive(deadline(), s.gen, c.session); err != nil {
			// No leader heard of this session in a whole timeout, or it
			// is gone: a reply now would be a false lease proof.
			c.env.log.Info("leader does not vouch for the session; dropping client", "remote", c.remote, "err", err)
			c.close()
			return
		}
	}
	if s.read != nil {
		// The reply is queued inside the view, so no notification of a
		// later change gets in before it.
		c.current = *s
		h.view(c.viewRead)
		c.current = slot{}
	} else {
		c.reply(s, s.finish())
	}
	if s.closeAfter {
		c.sessionEnded()
	}
}

// runCurrent runs the read in c.current and queues its reply, in a view.
func (c *conn) runCurrent(t *tree.Tree, zxid int64) {
	c.reply(&c.current, c.runRead(t, zxid, &c.current))
}

// runRead runs a read and does what it leaves to do, but for queueing its
// reply: register its watches, queue its immediate notifications, look up
// the watches it names.
func (c *conn) runRead(t *tree.Tree, zxid int64, s *slot) []byte {
	res := &c.read
	zk.Read(t, zk.Session{ID: c.session, Auth: s.read.auth}, &s.read.req, zxid, res)
	if res.TooLarge {
		c.env.bounds.repliesRefused.Add(1)
		if c.env.bounds.logged.allow("reply", c.remote, time.Now()) {
			c.env.log.Warn("reply too large; answered MARSHALLINGERROR", "remote", c.remote,
				"session", fmt.Sprintf("0x%x", c.session), "op", s.read.req.Op, "max_bytes", zk.MaxReply)
		}
	}
	w := c.env.host.watches()
	for _, reg := range res.Watches {
		w.add(reg.Kind, reg.Path, c)
	}
	for _, ev := range res.Fires {
		c.notify(ev, zxid)
	}
	if u := res.Unwatch; u != nil {
		found := false
		for _, k := range u.Kinds {
			if u.Remove {
				found = w.remove(k, u.Path, c) || found
			} else if w.has(k, u.Path, c) {
				found = true
			}
		}
		return u.Reply(found)
	}
	return res.Frame
}

// reply queues a request's reply, if it has one.
func (c *conn) reply(s *slot, frame []byte) {
	if frame == nil {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	// No reply may carry a zxid below the session's own writes (clients
	// keep the last zxid they saw for reconnecting).
	if z := c.lastWrite.Load(); z != 0 {
		if fz, ok := wire.ReplyZxid(frame); ok && fz < z {
			wire.PatchReplyZxid(frame, z)
		}
	}
	write := !c.outcomeAt.IsZero()
	kind := frameOther
	if write {
		kind = frameWriteReply
	}
	c.pushFrame(frame, kind)
	now := time.Now()
	c.env.stats.observe(s.op, now.Sub(s.arrived))
	if write {
		c.env.stats.stage(stageSequence, now.Sub(c.outcomeAt))
	}
}

// zxid is the zxid a reply that reads no particular state carries.
func (c *conn) zxid() int64 {
	return max(c.env.host.lastZxid(), c.lastWrite.Load())
}
