package ensemble

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// maxQueuedReplyBytes bounds what a connection may have waiting to be
// written; a client that does not read its replies is disconnected rather
// than allowed to grow the member's memory.
const maxQueuedReplyBytes = 64 << 20

// maxPipelined bounds requests read ahead of their replies on one
// connection; reading stops until replies catch up.
const maxPipelined = 1024

func (m *Member) acceptClients() {
	defer m.acceptEnded.Store(true)
	for {
		nc, err := m.client.Accept()
		if err != nil {
			if m.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.log.Error("client accept", "err", err)
			return
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		m.stats.connections.Add(1)
		go func() {
			defer m.stats.connections.Add(-1)
			m.serveClient(nc)
		}()
	}
}

// maxFrame is the largest request frame accepted: the data limit plus room
// for the path, ACLs and headers around it.
func (m *Member) maxFrame() int { return m.cfg.MaxDataBytes + 64<<10 }

// serveClient runs one client connection from handshake to close.
func (m *Member) serveClient(nc net.Conn) {
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 64<<10)
	_ = nc.SetReadDeadline(time.Now().Add(m.cfg.MaxSessionTimeout))
	var first [4]byte
	if _, err := io.ReadFull(r, first[:]); err != nil {
		return
	}
	if word, ok := wire.IsFourLetterWord(first); ok {
		m.fourLetter(word, nc)
		return
	}
	switch string(first[:]) {
	case statusWord:
		m.fourLetter(statusWord, nc)
		return
	case snapshotWord:
		if !m.adminAllowed(nc.RemoteAddr()) {
			_, _ = nc.Write([]byte("error: snapshots are served to loopback and --admin-from clients only\n"))
			return
		}
		w := bufio.NewWriterSize(nc, 1<<20)
		_ = m.streamSnapshot(w)
		_ = w.Flush()
		return
	}
	n := int(int32(binary.BigEndian.Uint32(first[:])))
	if n < 0 || n > m.maxFrame() {
		m.log.Debug("bad connect frame length", "remote", nc.RemoteAddr().String(), "len", n)
		return
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return
	}
	m.metrics.bytesIn.Add(int64(4 + n))
	var req wire.ConnectRequest
	if err := req.Decode(wire.NewDecoder(body)); err != nil {
		m.log.Debug("bad connect request", "remote", nc.RemoteAddr().String(), "err", err)
		return
	}
	c, resp, ok := m.handshake(nc, &req)
	if !ok {
		if resp != nil {
			n, _ := nc.Write(resp)
			m.metrics.bytesOut.Add(int64(n))
		}
		return
	}
	_ = nc.SetReadDeadline(time.Time{})
	c.run(r, resp)
}

// handshake establishes or resumes the session. It returns the reply to
// send; ok is false when the connection must close after it (or without
// any reply, when resp is nil).
func (m *Member) handshake(nc net.Conn, req *wire.ConnectRequest) (*conn, []byte, bool) {
	remote := nc.RemoteAddr().String()
	if req.LastZxidSeen > m.fsm.applied.Load() {
		// The client has seen state this member has not applied yet;
		// refusing makes it try another member instead of going back
		// in time.
		m.log.Info("refusing client ahead of this member", "remote", remote,
			"client_zxid", req.LastZxidSeen, "zxid", m.fsm.applied.Load())
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.MaxSessionTimeout)
	defer cancel()
	resp := wire.ConnectResponse{HasReadOnly: req.HasReadOnly}
	var timeout time.Duration
	if req.SessionID == 0 {
		timeout = m.negotiate(req.Timeout)
		txn := &tree.Txn{Kind: tree.TxnCreateSession, Timeout: int32(timeout / time.Millisecond)}
		p := m.submit(txn)(ctx)
		if p.err == nil {
			p.err = m.fsm.waitApplied(ctx, p.index)
		}
		if p.err != nil {
			m.log.Info("session create failed", "remote", remote, "err", p.err)
			return nil, nil, false
		}
		resp.SessionID = p.out.session
	} else {
		resp.SessionID = req.SessionID
	}
	m.fsm.mu.RLock()
	s, found := m.fsm.tree.Session(resp.SessionID)
	m.fsm.mu.RUnlock()
	if !found && req.SessionID != 0 {
		// "Expired" is final for the client, so say it only of a session
		// the ensemble has ended: a member behind the leader may not have
		// applied a new session's creation yet (a client that lost its
		// first connection before any reply knows no zxid to send).
		idx, err := m.readIndex(ctx)
		if err == nil {
			err = m.fsm.waitApplied(ctx, idx)
		}
		if err != nil {
			m.log.Info("unknown session and no leader to ask; refusing", "remote", remote, "session", fmt.Sprintf("0x%x", req.SessionID))
			return nil, nil, false
		}
		m.fsm.mu.RLock()
		s, found = m.fsm.tree.Session(resp.SessionID)
		m.fsm.mu.RUnlock()
	}
	if !found || (req.SessionID != 0 && !equalBytes(s.Password, req.Passwd)) {
		return nil, expiredReply(req), false
	}
	timeout = time.Duration(s.Timeout) * time.Millisecond
	resp.Timeout = s.Timeout
	resp.Passwd = s.Password
	c := newConn(m, nc, resp.SessionID, timeout)
	// Register first: a session that ends from here on finds the
	// connection and closes it.
	m.register(c)
	// The connect reply is a lease proof like any other reply.
	if g := m.noteLive(c.session); g != 0 {
		wctx, wcancel := context.WithTimeout(ctx, timeout)
		err := m.relay.wait(wctx, g, c.session)
		wcancel()
		if errors.Is(err, errSessionGone) {
			m.unregister(c)
			return nil, expiredReply(req), false
		}
		if err != nil {
			m.unregister(c)
			m.log.Info("no leader acknowledged the session; refusing", "remote", remote)
			return nil, nil, false
		}
	}
	m.fsm.mu.RLock()
	_, alive := m.fsm.tree.Session(resp.SessionID)
	m.fsm.mu.RUnlock()
	if !alive {
		m.unregister(c)
		return nil, expiredReply(req), false
	}
	return c, encodeFrame(&resp), true
}

// expiredReply is the answer to a connect for an expired or unknown
// session, or with a wrong password: as ZooKeeper does, a zero timeout and
// session id, after which the connection closes.
func expiredReply(req *wire.ConnectRequest) []byte {
	resp := wire.ConnectResponse{Passwd: make([]byte, 16), HasReadOnly: req.HasReadOnly}
	return encodeFrame(&resp)
}

func (m *Member) negotiate(requested int32) time.Duration {
	t := time.Duration(requested) * time.Millisecond
	if t < m.cfg.MinSessionTimeout {
		t = m.cfg.MinSessionTimeout
	}
	if t > m.cfg.MaxSessionTimeout {
		t = m.cfg.MaxSessionTimeout
	}
	return t
}

func (m *Member) register(c *conn) {
	m.connMu.Lock()
	old := m.bySess[c.session]
	m.bySess[c.session] = c
	m.conns[c] = struct{}{}
	m.connMu.Unlock()
	if old != nil {
		old.close()
	}
}

func (m *Member) unregister(c *conn) {
	m.connMu.Lock()
	if m.bySess[c.session] == c {
		delete(m.bySess, c.session)
	}
	delete(m.conns, c)
	m.connMu.Unlock()
	m.watch.removeOwner(c)
}

func encodeFrame(r interface{ Encode(*wire.Encoder) }) []byte {
	e := wire.NewFrameEncoder(nil)
	r.Encode(e)
	return e.Frame()
}

func equalBytes(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	var v byte
	for i := range a {
		v |= a[i] ^ b[i]
	}
	return v == 0
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
	m       *Member
	nc      net.Conn
	session int64
	timeout time.Duration
	remote  string

	auth  []tree.Identity // replaced, never mutated: slots keep a snapshot
	slots chan slot
	// sharedAuth is auth for other goroutines: the FSM checks watch
	// notifications against it. The reader goroutine alone writes both.
	sharedAuth atomic.Pointer[[]tree.Identity]
	// certIDs are the x509 identities of the client's verified
	// certificate; an auth packet of scheme x509 re-authenticates with
	// them.
	certIDs []tree.Identity

	outMu    sync.Mutex
	out      [][]byte
	outBytes int
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

// slot is one request awaiting its reply, finished by the sequencer.
type slot struct {
	finish     func() []byte // the reply frame, or nil for none
	read       bool          // finish reads state: wait for the session's writes first
	locked     bool          // finish runs under the tree's read lock (held by the sequencer)
	arrived    time.Time
	op         int32  // request opcode, for the latency metric
	gen        uint64 // liveness generation the reply waits for
	closeAfter bool
}

func newConn(m *Member, nc net.Conn, session int64, timeout time.Duration) *conn {
	host, _, _ := net.SplitHostPort(nc.RemoteAddr().String())
	c := &conn{
		m:       m,
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
	c.certIDs, hasCert = connCertIdentities(nc, m.cfg.ClientIdentity)
	if hasCert {
		if len(c.certIDs) == 0 {
			m.log.Info("client certificate carries no identity of the configured kind",
				"remote", c.remote, "session", session, "identity", string(m.cfg.ClientIdentity))
		} else {
			m.log.Debug("client authenticated by its certificate", "remote", c.remote, "session", session, "ids", c.certIDs)
		}
	}
	c.setAuth(append([]tree.Identity{{Scheme: "ip", ID: host}}, c.certIDs...))
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

// addIdentities returns auth with ids appended, skipping those it holds.
func addIdentities(auth []tree.Identity, ids ...tree.Identity) []tree.Identity {
	out := slices.Clip(auth)
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func (c *conn) run(r *bufio.Reader, connectReply []byte) {
	defer c.m.unregister(c)
	c.push(connectReply)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.writeLoop() }()
	go func() { defer wg.Done(); c.sequence() }()
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

// sessionEnded is called by the FSM when the session was closed or
// expired: the client learns it on reconnecting.
func (c *conn) sessionEnded(int64) {
	c.outMu.Lock()
	c.closing = true
	c.outMu.Unlock()
	c.kick()
}

func (c *conn) kick() {
	select {
	case c.outKick <- struct{}{}:
	default:
	}
}

// push queues a frame for the writer.
func (c *conn) push(frame []byte) {
	c.outMu.Lock()
	c.out = append(c.out, frame)
	c.outBytes += len(frame)
	over := c.outBytes > maxQueuedReplyBytes
	c.outMu.Unlock()
	if over {
		c.m.log.Warn("client not reading replies; closing", "remote", c.remote)
		c.close()
		return
	}
	c.kick()
}

func (c *conn) writeLoop() {
	w := bufio.NewWriterSize(c.nc, 64<<10)
	for {
		select {
		case <-c.done:
			return
		case <-c.outKick:
		}
		c.outMu.Lock()
		frames := c.out
		c.out = nil
		c.outBytes = 0
		closing := c.closing
		c.outMu.Unlock()
		for _, f := range frames {
			if _, err := w.Write(f); err != nil {
				c.close()
				return
			}
			c.m.stats.sent.Add(1)
			c.m.metrics.bytesOut.Add(int64(len(f)))
		}
		if err := w.Flush(); err != nil {
			c.close()
			return
		}
		if closing {
			c.close()
			return
		}
	}
}

func (c *conn) notify(ev wire.WatcherEvent, zxid int64) {
	c.notifyFrame(notificationFrame(ev, zxid))
}

// notifyFrame queues an encoded notification. The frame may be shared
// with other connections: queued frames are only ever read.
func (c *conn) notifyFrame(frame []byte) {
	c.m.stats.notifications.Add(1)
	c.push(frame)
}

func (c *conn) sequence() {
	for s := range c.slots {
		c.deliver(s)
		c.m.metrics.outstanding.Add(-1) // read, now answered (or dropped)
	}
}

// deliver finishes one request and queues its reply.
func (c *conn) deliver(s slot) {
	ctx, cancel := context.WithTimeout(c.m.ctx, c.timeout)
	defer cancel()
	if w := c.lastWrite.Load(); s.read && c.m.fsm.applied.Load() < w {
		if err := c.m.fsm.waitApplied(ctx, w); err != nil {
			c.close()
			return
		}
	}
	// The lease proof is awaited before the request runs, not after: a
	// read that sets a watch must have its reply queued at once, before
	// any notification for that watch could be (clients arm a watch only
	// when its reply arrives, and would drop an earlier notification).
	if s.gen != 0 {
		if err := c.m.relay.wait(ctx, s.gen, c.session); err != nil {
			// No leader heard of this session in a whole timeout, or it
			// is gone: a reply now would be a false lease proof.
			c.m.log.Info("leader does not vouch for the session; dropping client", "remote", c.remote, "err", err)
			c.close()
			return
		}
	}
	if s.locked {
		// Held from the read to the queueing of its reply, so no
		// notification of a later change gets in between.
		c.m.fsm.mu.RLock()
		defer c.m.fsm.mu.RUnlock()
	}
	frame := s.finish()
	if frame != nil {
		select {
		case <-c.done:
			return
		default:
		}
		// No reply may carry a zxid below the session's own writes
		// (clients keep the last zxid they saw for reconnecting).
		if len(frame) >= 16 {
			if z := c.lastWrite.Load(); int64(binary.BigEndian.Uint64(frame[8:16])) < z {
				binary.BigEndian.PutUint64(frame[8:16], uint64(z))
			}
		}
		c.push(frame)
		d := time.Since(s.arrived)
		c.m.stats.observe(d)
		c.m.metrics.observe(s.op, d)
	}
	if s.closeAfter {
		c.sessionEnded(0)
	}
}

func (c *conn) readLoop(r *bufio.Reader) {
	var buf []byte
	for {
		// A client pings every third of its timeout; silence for a
		// whole timeout means it is gone.
		_ = c.nc.SetReadDeadline(time.Now().Add(c.timeout))
		frame, err := wire.ReadFrame(r, buf, c.m.maxFrame())
		if err != nil {
			if errors.Is(err, wire.ErrFrameTooLarge) {
				c.m.log.Warn("oversized request; closing", "remote", c.remote, "err", err)
			}
			c.close()
			return
		}
		buf = frame[:0]
		c.m.stats.received.Add(1)
		c.m.metrics.bytesIn.Add(int64(4 + len(frame)))
		d := wire.NewDecoder(frame)
		var hdr wire.RequestHeader
		if hdr.Decode(d) != nil {
			c.close()
			return
		}
		gen := c.m.noteLive(c.session)
		s, err := c.start(hdr, d)
		if err != nil {
			c.m.log.Info("bad request; closing", "remote", c.remote, "op", wire.OpName(hdr.Opcode), "err", err)
			c.close()
			return
		}
		s.gen = gen
		s.arrived = time.Now()
		s.op = hdr.Opcode
		c.m.metrics.outstanding.Add(1) // until the sequencer is done with it
		select {
		case c.slots <- s:
		case <-c.done:
			c.m.metrics.outstanding.Add(-1)
			return
		}
		if s.closeAfter {
			return
		}
	}
}

// reply builds a reply frame: header, then the body written by fill.
func reply(xid int32, zxid int64, fill func(e *wire.Encoder) wire.Code) []byte {
	e := wire.NewFrameEncoder(make([]byte, 0, 128))
	(&wire.ReplyHeader{Xid: xid}).Encode(e)
	code := wire.OK
	if fill != nil {
		code = fill(e)
	}
	if code != wire.OK {
		e.Reset()
		(&wire.ReplyHeader{Xid: xid, Zxid: zxid, Err: code}).Encode(e)
		return e.Frame()
	}
	f := e.Frame()
	// Patch the zxid now that the body is known to be good.
	binary.BigEndian.PutUint64(f[8:16], uint64(zxid))
	return f
}

func errorReply(xid int32, zxid int64, code wire.Code) []byte {
	return reply(xid, zxid, func(*wire.Encoder) wire.Code { return code })
}

// start begins one request and returns its slot. A decoding error closes
// the connection, as ZooKeeper does.
func (c *conn) start(hdr wire.RequestHeader, d *wire.Decoder) (slot, error) {
	xid, op := hdr.Xid, hdr.Opcode
	m := c.m
	switch op {
	case wire.OpPing:
		return slot{finish: func() []byte { return reply(xid, c.zxid(), nil) }}, nil
	case wire.OpAuth:
		return c.startAuth(xid, d)
	case wire.OpCloseSession:
		c.selfClose.Store(true)
		wait := m.submit(&tree.Txn{Kind: tree.TxnCloseSession, Session: c.session})
		return slot{closeAfter: true, finish: func() []byte {
			p := wait(m.ctx)
			return reply(xid, p.index, nil)
		}}, nil
	case wire.OpCreate, wire.OpCreate2, wire.OpCreateContainer, wire.OpCreateTTL,
		wire.OpDelete, wire.OpSetData, wire.OpSetACL, wire.OpCheck, wire.OpMulti:
		return c.startWrite(xid, op, d)
	case wire.OpSync:
		var req wire.PathRequest
		if err := req.Decode(d); err != nil {
			return slot{}, err
		}
		return slot{finish: func() []byte {
			if err := tree.ValidatePath(req.Path, false); err != nil {
				return errorReply(xid, m.fsm.applied.Load(), wire.ErrBadArguments)
			}
			ctx, cancel := context.WithTimeout(m.ctx, c.timeout)
			defer cancel()
			idx, err := m.readIndex(ctx)
			if err == nil {
				err = m.fsm.waitApplied(ctx, idx)
			}
			if err != nil {
				return errorReply(xid, m.fsm.applied.Load(), wire.ErrConnectionLoss)
			}
			return reply(xid, m.fsm.applied.Load(), func(e *wire.Encoder) wire.Code {
				(&wire.SyncResponse{Path: req.Path}).Encode(e)
				return wire.OK
			})
		}}, nil
	case wire.OpReconfig:
		return c.reconfigSlot(xid, d)
	}
	if read := c.readOp(xid, op, d); read != nil {
		if err := d.Err(); err != nil {
			return slot{}, err
		}
		return slot{finish: read, read: true, locked: true}, nil
	}
	if err := d.Err(); err != nil {
		return slot{}, err
	}
	return slot{finish: func() []byte { return errorReply(xid, m.fsm.applied.Load(), wire.ErrUnimplemented) }}, nil
}

// digestID is ZooKeeper's digest identity for "user:password":
// user:base64(sha1("user:password")).
func digestID(userPass string) string {
	user, _, _ := strings.Cut(userPass, ":")
	sum := sha1.Sum([]byte(userPass))
	return user + ":" + base64.StdEncoding.EncodeToString(sum[:])
}

func (c *conn) startAuth(xid int32, d *wire.Decoder) (slot, error) {
	var req wire.AuthPacket
	if err := req.Decode(d); err != nil {
		return slot{}, err
	}
	zxid := c.m.fsm.applied.Load()
	failed := slot{closeAfter: true, finish: func() []byte {
		e := wire.NewFrameEncoder(nil)
		(&wire.ReplyHeader{Xid: xid, Zxid: zxid, Err: wire.ErrAuthFailed}).Encode(e)
		return e.Frame()
	}}
	switch {
	case req.Scheme == schemeX509:
		// ZooKeeper's X509AuthenticationProvider ignores the payload and
		// authenticates the connection's certificate again: OK when
		// it yields identities (already held, so nothing changes),
		// AuthFailed and the end of the connection without one.
		if len(c.certIDs) == 0 {
			return failed, nil
		}
		c.setAuth(addIdentities(c.auth, c.certIDs...))
		return slot{finish: func() []byte { return reply(xid, zxid, nil) }}, nil
	case req.Scheme != "digest" || !strings.Contains(string(req.Auth), ":"):
		// Unknown scheme or malformed credentials: ZooKeeper answers
		// AuthFailed and ends the connection.
		return failed, nil
	}
	id := tree.Identity{Scheme: "digest", ID: digestID(string(req.Auth))}
	auth := make([]tree.Identity, 0, len(c.auth)+1)
	for _, a := range c.auth {
		if a != id {
			auth = append(auth, a)
		}
	}
	c.setAuth(append(auth, id))
	return slot{finish: func() []byte { return reply(xid, zxid, nil) }}, nil
}

// startWrite validates a write, hands it to raft, and returns the slot
// that waits for its outcome. Requests that cannot succeed are answered
// without a round through raft.
func (c *conn) startWrite(xid, op int32, d *wire.Decoder) (slot, error) {
	m := c.m
	txn := &tree.Txn{Kind: tree.TxnOps, Session: c.session, Auth: c.auth}
	var types []int32
	var bad wire.Code
	addCreate := func(path string, data []byte, acl []wire.ACL, flags int32, opType int32) {
		mode := tree.Mode(flags)
		if opType == wire.OpCreateTTL || flags == wire.FlagPersistentWithTTL || flags == wire.FlagPersistentSequentialWithTTL {
			// TTL nodes are off, as on a default ZooKeeper.
			bad = firstCode(bad, wire.ErrUnimplemented)
		}
		switch {
		case opType == wire.OpCreateContainer && flags != wire.FlagContainer,
			opType != wire.OpCreateContainer && flags == wire.FlagContainer && opType != wire.OpCreate2 && opType != wire.OpCreate,
			flags < 0 || flags > wire.FlagPersistentSequentialWithTTL:
			bad = firstCode(bad, wire.ErrBadArguments)
		}
		if tree.ValidatePath(path, flags&wire.FlagPersistentSequential != 0) != nil {
			bad = firstCode(bad, wire.ErrBadArguments)
		}
		if len(data) > m.cfg.MaxDataBytes {
			bad = firstCode(bad, wire.ErrBadArguments)
		}
		txn.Ops = append(txn.Ops, tree.Op{Kind: tree.OpCreate, Path: path, Data: data, ACL: treeACLs(acl), Mode: mode})
		types = append(types, opType)
	}
	addPathOp := func(kind tree.OpKind, path string, data []byte, version int32, acl []wire.ACL, opType int32) {
		if tree.ValidatePath(path, false) != nil {
			bad = firstCode(bad, wire.ErrBadArguments)
		}
		if len(data) > m.cfg.MaxDataBytes {
			bad = firstCode(bad, wire.ErrBadArguments)
		}
		var tacl []tree.ACL
		if acl != nil {
			tacl = treeACLs(acl)
		}
		txn.Ops = append(txn.Ops, tree.Op{Kind: kind, Path: path, Data: data, Version: version, ACL: tacl})
		types = append(types, opType)
	}
	switch op {
	case wire.OpCreate, wire.OpCreate2, wire.OpCreateContainer:
		var req wire.CreateRequest
		if err := req.Decode(d); err != nil {
			return slot{}, err
		}
		addCreate(req.Path, req.Data, req.ACL, req.Flags, op)
	case wire.OpCreateTTL:
		var req wire.CreateTTLRequest
		if err := req.Decode(d); err != nil {
			return slot{}, err
		}
		addCreate(req.Path, req.Data, req.ACL, req.Flags, op)
	case wire.OpDelete:
		var req wire.DeleteRequest
		if err := req.Decode(d); err != nil {
			return slot{}, err
		}
		addPathOp(tree.OpDelete, req.Path, nil, req.Version, nil, op)
	case wire.OpSetData:
		var req wire.SetDataRequest
		if err := req.Decode(d); err != nil {
			return slot{}, err
		}
		if req.Data == nil {
			req.Data = []byte{}
		}
		addPathOp(tree.OpSetData, req.Path, req.Data, req.Version, nil, op)
	case wire.OpSetACL:
		var req wire.SetACLRequest
		if err := req.Decode(d); err != nil {
			return slot{}, err
		}
		addPathOp(tree.OpSetACL, req.Path, nil, req.Version, req.ACL, op)
	case wire.OpCheck:
		var req wire.CheckVersionRequest
		if err := req.Decode(d); err != nil {
			return slot{}, err
		}
		addPathOp(tree.OpCheck, req.Path, nil, req.Version, nil, op)
	case wire.OpMulti:
		var req wire.MultiRequest
		if err := req.Decode(d); err != nil {
			return slot{}, err
		}
		txn.Multi = true
		for _, o := range req.Ops {
			switch o.Type {
			case wire.OpCreate, wire.OpCreate2, wire.OpCreateContainer, wire.OpCreateTTL:
				addCreate(o.Path, o.Data, o.ACL, o.Flags, o.Type)
			case wire.OpDelete:
				addPathOp(tree.OpDelete, o.Path, nil, o.Version, nil, o.Type)
			case wire.OpSetData:
				data := o.Data
				if data == nil {
					data = []byte{}
				}
				addPathOp(tree.OpSetData, o.Path, data, o.Version, nil, o.Type)
			case wire.OpCheck:
				addPathOp(tree.OpCheck, o.Path, nil, o.Version, nil, o.Type)
			default:
				// A read inside a write multi is a malformed request.
				bad = firstCode(bad, wire.ErrBadArguments)
				txn.Ops = append(txn.Ops, tree.Op{})
				types = append(types, o.Type)
			}
		}
	}
	if bad != wire.OK {
		zxid := m.fsm.applied.Load()
		if op == wire.OpMulti {
			return slot{finish: func() []byte {
				return reply(xid, zxid, func(e *wire.Encoder) wire.Code {
					o := outcome{err: bad, ops: make([]opOutcome, len(types))}
					for i := range o.ops {
						o.ops[i].err = wire.ErrRuntimeInconsistency
					}
					if len(o.ops) > 0 {
						o.ops[0].err = bad
					}
					return appendWriteReply(e, op, types, &o)
				})
			}}, nil
		}
		return slot{finish: func() []byte { return errorReply(xid, zxid, bad) }}, nil
	}
	if op == wire.OpMulti && len(txn.Ops) == 0 {
		zxid := m.fsm.applied.Load()
		return slot{finish: func() []byte {
			return reply(xid, zxid, func(e *wire.Encoder) wire.Code {
				(&wire.MultiResponse{}).Encode(e)
				return wire.OK
			})
		}}, nil
	}
	m.stats.writes.Add(1)
	wait := m.submit(txn)
	return slot{finish: func() []byte {
		ctx, cancel := context.WithTimeout(m.ctx, 2*c.timeout)
		defer cancel()
		p := wait(ctx)
		if p.err == nil && m.fsm.applied.Load() < p.index && m.watch.hasAny(c) {
			// This connection has watches: notifications of everything
			// up to this write must reach it before the reply does, so
			// wait until the write is applied here. Without watches the
			// reply can go at once; later reads wait (see lastWrite).
			p.err = m.fsm.waitApplied(ctx, p.index)
		}
		if p.err != nil {
			// Unknown outcome: only a lost connection tells the client
			// that honestly.
			m.log.Info("write failed; closing client", "remote", c.remote, "err", p.err)
			c.close()
			return nil
		}
		if p.index > c.lastWrite.Load() {
			c.lastWrite.Store(p.index)
		}
		return reply(xid, p.index, func(e *wire.Encoder) wire.Code {
			return appendWriteReply(e, op, types, &p.out)
		})
	}}, nil
}

func firstCode(have, c wire.Code) wire.Code {
	if have != wire.OK {
		return have
	}
	return c
}

// readOp decodes a read and returns the function that runs it in order, or
// nil when op is not a read.
func (c *conn) readOp(xid, op int32, d *wire.Decoder) func() []byte {
	m := c.m
	auth := c.auth
	switch op {
	case wire.OpExists, wire.OpGetData, wire.OpGetChildren, wire.OpGetChildren2:
		var req wire.PathWatchRequest
		if req.Decode(d) != nil {
			return nil
		}
		return func() []byte { return c.read(xid, op, &req, auth) }
	case wire.OpGetACL, wire.OpGetAllChildrenNumber, wire.OpGetEphemerals:
		var req wire.PathRequest
		if req.Decode(d) != nil {
			return nil
		}
		return func() []byte { return c.readPath(xid, op, req.Path, auth) }
	case wire.OpWhoAmI:
		return func() []byte {
			return reply(xid, m.fsm.applied.Load(), func(e *wire.Encoder) wire.Code {
				var r wire.WhoAmIResponse
				for _, a := range auth {
					user := a.ID
					if a.Scheme == "digest" {
						user, _, _ = strings.Cut(a.ID, ":")
					}
					r.ClientInfo = append(r.ClientInfo, wire.ClientInfo{AuthScheme: a.Scheme, User: user})
				}
				r.Encode(e)
				return wire.OK
			})
		}
	case wire.OpSetWatches, wire.OpSetWatches2:
		var sw wire.SetWatches2
		if op == wire.OpSetWatches {
			var v1 wire.SetWatches
			if v1.Decode(d) != nil {
				return nil
			}
			sw = wire.SetWatches2{RelativeZxid: v1.RelativeZxid, DataWatches: v1.DataWatches, ExistWatches: v1.ExistWatches, ChildWatches: v1.ChildWatches}
		} else if sw.Decode(d) != nil {
			return nil
		}
		return func() []byte { return c.setWatches(xid, &sw, auth) }
	case wire.OpAddWatch:
		var req wire.AddWatchRequest
		if req.Decode(d) != nil {
			return nil
		}
		return func() []byte {
			zxid := m.fsm.applied.Load()
			if tree.ValidatePath(req.Path, false) != nil {
				return errorReply(xid, zxid, wire.ErrBadArguments)
			}
			kind := watchPersistent
			switch req.Mode {
			case wire.AddWatchPersistent:
			case wire.AddWatchPersistentRecursive:
				kind = watchRecursive
			default:
				// ZooKeeper fails to read such a request: MarshallingError.
				return errorReply(xid, zxid, wire.ErrMarshallingError)
			}
			m.watch.add(kind, req.Path, c)
			// ZooKeeper answers addWatch with an ErrorResponse body of 0;
			// the Java client reads it and fails without it.
			return reply(xid, zxid, func(e *wire.Encoder) wire.Code {
				(&wire.ErrorResponse{}).Encode(e)
				return wire.OK
			})
		}
	case wire.OpCheckWatches, wire.OpRemoveWatches:
		var req wire.RemoveWatchesRequest
		if req.Decode(d) != nil {
			return nil
		}
		return func() []byte { return c.removeWatches(xid, op == wire.OpRemoveWatches, &req) }
	case wire.OpMultiRead:
		var req wire.MultiRequest
		if req.Decode(d) != nil {
			return nil
		}
		return func() []byte { return c.multiRead(xid, &req, auth) }
	}
	return nil
}

func (c *conn) read(xid, op int32, req *wire.PathWatchRequest, auth []tree.Identity) []byte {
	m := c.m
	if tree.ValidatePath(req.Path, false) != nil {
		return errorReply(xid, m.fsm.applied.Load(), wire.ErrBadArguments)
	}
	m.stats.reads.Add(1)
	// The sequencer holds the tree's read lock (slot.locked).
	zxid := m.fsm.applied.Load()
	t := m.fsm.tree
	return reply(xid, zxid, func(e *wire.Encoder) wire.Code {
		switch op {
		case wire.OpExists:
			st, err := t.Exists(req.Path)
			if req.Watch {
				// exists sets a watch whether or not the node is there:
				// on its data if it is, on its creation if not.
				if err == nil {
					m.watch.add(watchData, req.Path, c)
				} else if errors.Is(err, tree.ErrNoNode) {
					m.watch.add(watchExist, req.Path, c)
				}
			}
			if err != nil {
				return codeOf(err)
			}
			s := statOf(st)
			s.Encode(e)
		case wire.OpGetData:
			data, st, err := t.Get(req.Path, auth)
			if err != nil {
				return codeOf(err)
			}
			if req.Watch {
				m.watch.add(watchData, req.Path, c)
			}
			(&wire.GetDataResponse{Data: data, Stat: statOf(st)}).Encode(e)
		case wire.OpGetChildren, wire.OpGetChildren2:
			kids, st, err := t.Children(req.Path, auth)
			if err != nil {
				return codeOf(err)
			}
			if req.Watch {
				m.watch.add(watchChild, req.Path, c)
			}
			if kids == nil {
				kids = []string{}
			}
			if op == wire.OpGetChildren {
				(&wire.GetChildrenResponse{Children: kids}).Encode(e)
			} else {
				(&wire.GetChildren2Response{Children: kids, Stat: statOf(st)}).Encode(e)
			}
		}
		return wire.OK
	})
}

func (c *conn) readPath(xid, op int32, path string, auth []tree.Identity) []byte {
	m := c.m
	// getEphemerals takes a prefix, not a path: ZooKeeper does not
	// validate it, and an empty one means every ephemeral.
	if op != wire.OpGetEphemerals && tree.ValidatePath(path, false) != nil {
		return errorReply(xid, m.fsm.applied.Load(), wire.ErrBadArguments)
	}
	// The sequencer holds the tree's read lock (slot.locked).
	zxid := m.fsm.applied.Load()
	t := m.fsm.tree
	return reply(xid, zxid, func(e *wire.Encoder) wire.Code {
		switch op {
		case wire.OpGetACL:
			acl, st, err := t.GetACL(path, auth)
			if err != nil {
				return codeOf(err)
			}
			(&wire.GetACLResponse{ACL: aclsOf(acl), Stat: statOf(st)}).Encode(e)
		case wire.OpGetAllChildrenNumber:
			if err := t.CheckACL(path, tree.PermRead, auth); err != nil {
				return codeOf(err)
			}
			n, err := t.AllChildrenNumber(path)
			if err != nil {
				return codeOf(err)
			}
			(&wire.GetAllChildrenNumberResponse{TotalNumber: int32(n)}).Encode(e)
		case wire.OpGetEphemerals:
			eph := t.Ephemerals(c.session, path)
			if eph == nil {
				eph = []string{}
			}
			(&wire.GetEphemeralsResponse{Ephemerals: eph}).Encode(e)
		}
		return wire.OK
	})
}

func (c *conn) multiRead(xid int32, req *wire.MultiRequest, auth []tree.Identity) []byte {
	m := c.m
	// The sequencer holds the tree's read lock (slot.locked).
	zxid := m.fsm.applied.Load()
	t := m.fsm.tree
	return reply(xid, zxid, func(e *wire.Encoder) wire.Code {
		var mr wire.MultiResponse
		for _, o := range req.Ops {
			if tree.ValidatePath(o.Path, false) != nil {
				mr.Results = append(mr.Results, wire.MultiResult{Type: wire.OpError, Err: wire.ErrBadArguments})
				continue
			}
			switch o.Type {
			case wire.OpGetData:
				data, st, err := t.Get(o.Path, auth)
				if err != nil {
					mr.Results = append(mr.Results, wire.MultiResult{Type: wire.OpError, Err: codeOf(err)})
					continue
				}
				mr.Results = append(mr.Results, wire.MultiResult{Type: o.Type, Data: data, Stat: statOf(st)})
			case wire.OpGetChildren:
				kids, _, err := t.Children(o.Path, auth)
				if err != nil {
					mr.Results = append(mr.Results, wire.MultiResult{Type: wire.OpError, Err: codeOf(err)})
					continue
				}
				mr.Results = append(mr.Results, wire.MultiResult{Type: o.Type, Children: kids})
			default:
				return wire.ErrBadArguments
			}
		}
		mr.Encode(e)
		return wire.OK
	})
}

// setWatches re-registers a reconnecting client's watches. A change the
// client missed (newer than relativeZxid, the last zxid it saw) fires at
// once instead, if the session may read the node (for a child watch, the
// node whose children changed); otherwise the watch is used up silently,
// like any one-shot watch fired by a change the session may not read (see
// watchManager.trigger). ZooKeeper delivers these missed-change events
// without an ACL check. A deletion fires unchecked, the node's ACL being
// gone with it: the session named the path itself, and exists (which
// checks no ACL) would tell it the same.
func (c *conn) setWatches(xid int32, sw *wire.SetWatches2, auth []tree.Identity) []byte {
	m := c.m
	// The sequencer holds the tree's read lock (slot.locked).
	zxid := m.fsm.applied.Load()
	t := m.fsm.tree
	rel := sw.RelativeZxid
	fire := func(typ int32, path string) {
		if typ != wire.EventNodeDeleted && t.CheckACL(path, tree.PermRead, auth) != nil {
			return
		}
		c.notify(wire.WatcherEvent{Type: typ, State: wire.StateSyncConnected, Path: path}, zxid)
	}
	for _, p := range sw.DataWatches {
		st, err := t.Exists(p)
		switch {
		case err != nil:
			fire(wire.EventNodeDeleted, p)
		case st.Mzxid > rel:
			fire(wire.EventNodeDataChanged, p)
		default:
			m.watch.add(watchData, p, c)
		}
	}
	for _, p := range sw.ExistWatches {
		if _, err := t.Exists(p); err == nil {
			fire(wire.EventNodeCreated, p)
		} else {
			m.watch.add(watchExist, p, c)
		}
	}
	for _, p := range sw.ChildWatches {
		st, err := t.Exists(p)
		switch {
		case err != nil:
			fire(wire.EventNodeDeleted, p)
		case st.Pzxid > rel:
			fire(wire.EventNodeChildrenChanged, p)
		default:
			m.watch.add(watchChild, p, c)
		}
	}
	for _, p := range sw.PersistentWatches {
		m.watch.add(watchPersistent, p, c)
	}
	for _, p := range sw.PersistentRecursiveWatches {
		m.watch.add(watchRecursive, p, c)
	}
	return reply(xid, zxid, nil)
}

func (c *conn) removeWatches(xid int32, remove bool, req *wire.RemoveWatchesRequest) []byte {
	m := c.m
	zxid := m.fsm.applied.Load()
	var kinds []watchKind
	switch req.Type {
	case wire.WatcherChildren:
		kinds = []watchKind{watchChild}
	case wire.WatcherData:
		kinds = []watchKind{watchData, watchExist}
	case wire.WatcherAny:
		kinds = []watchKind{watchChild, watchData, watchExist, watchPersistent, watchRecursive}
	default:
		return errorReply(xid, zxid, wire.ErrMarshallingError)
	}
	found := false
	for _, k := range kinds {
		if remove {
			found = m.watch.remove(k, req.Path, c) || found
		} else if m.watch.has(k, req.Path, c) {
			found = true
		}
	}
	if !found {
		return errorReply(xid, zxid, wire.ErrNoWatcher)
	}
	return reply(xid, zxid, nil)
}

// zxid is the zxid a reply that reads no particular state carries.
func (c *conn) zxid() int64 {
	return max(c.m.fsm.applied.Load(), c.lastWrite.Load())
}
