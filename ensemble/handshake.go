package ensemble

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// The session handshake of a new client connection: create or resume the
// session, make the connect reply a lease proof, and hand over to conn.

// handshake establishes or resumes the session of a new connection. It
// returns the reply to send; ok is false when the connection must close
// after it (or without any reply, when resp is nil).
func (env *connEnv) handshake(nc net.Conn, req *wire.ConnectRequest) (c *conn, resp []byte, ok bool) {
	h := env.host
	remote := nc.RemoteAddr().String()
	if req.LastZxidSeen > h.lastZxid() {
		// The client has seen state this member has not applied yet;
		// refusing makes it try another member instead of going back
		// in time.
		env.log.Info("refusing client ahead of this member", "remote", remote,
			"client_zxid", req.LastZxidSeen, "zxid", h.lastZxid())
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(env.ctx, env.maxTimeout)
	defer cancel()
	cr := wire.ConnectResponse{HasReadOnly: req.HasReadOnly}
	if req.SessionID == 0 {
		timeout := env.negotiate(req.Timeout)
		txn := &tree.Txn{Kind: tree.TxnCreateSession, Timeout: int32(timeout / time.Millisecond)}
		p, err := h.submit(txn)(ctx)
		// A session create that failed for want of a leader, or whose
		// leader was lost before it could tell, is asked for again: an
		// election during a storm of new sessions costs them a wait
		// rather than their connection. A create that did commit after
		// all leaves a session no one uses, which expires after its
		// timeout. Only for a third of the timeout, though: about when
		// a client gives up on this member and tries the next.
		for until := time.Now().Add(timeout / 3); leaderTrouble(err) && time.Now().Before(until); {
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return nil, nil, false
			}
			p, err = h.submit(txn)(ctx)
		}
		if err == nil {
			err = h.waitApplied(ctx, p.index)
		}
		if err != nil {
			env.log.Info("session create failed", "remote", remote, "err", err)
			return nil, nil, false
		}
		cr.SessionID = p.out.Session
	} else {
		cr.SessionID = req.SessionID
	}
	s, found := env.session(cr.SessionID)
	if !found && req.SessionID != 0 {
		// "Expired" is final for the client, so say it only of a session
		// the ensemble has ended: a member behind the leader may not have
		// applied a new session's creation yet (a client that lost its
		// first connection before any reply knows no zxid to send).
		idx, err := h.readIndex(ctx)
		if err == nil {
			err = h.waitApplied(ctx, idx)
		}
		if err != nil {
			env.log.Info("unknown session and no leader to ask; refusing", "remote", remote, "session", fmt.Sprintf("0x%x", req.SessionID))
			return nil, nil, false
		}
		s, found = env.session(cr.SessionID)
	}
	if !found || (req.SessionID != 0 && !equalBytes(s.Password, req.Passwd)) {
		return nil, expiredReply(req), false
	}
	timeout := time.Duration(s.Timeout) * time.Millisecond
	cr.Timeout = s.Timeout
	cr.Passwd = s.Password
	c = newConn(env, nc, cr.SessionID, timeout)
	// Register first: a session that ends from here on finds the
	// connection and closes it.
	if !h.register(c) {
		return nil, nil, false
	}
	// The connect reply is a lease proof like any other reply.
	if g := h.noteLive(c.session); g != 0 {
		wctx, wcancel := context.WithTimeout(ctx, timeout)
		err := h.waitLive(wctx, g, c.session)
		wcancel()
		if errors.Is(err, errSessionGone) {
			h.unregister(c)
			return nil, expiredReply(req), false
		}
		if err != nil {
			h.unregister(c)
			env.log.Info("no leader acknowledged the session; refusing", "remote", remote)
			return nil, nil, false
		}
	}
	if _, alive := env.session(cr.SessionID); !alive {
		h.unregister(c)
		return nil, expiredReply(req), false
	}
	return c, encodeFrame(&cr), true
}

// session looks a session up in the tree.
func (env *connEnv) session(id int64) (s tree.SessionInfo, ok bool) {
	env.host.view(func(t *tree.Tree, _ int64) { s, ok = t.Session(id) })
	return s, ok
}

func (env *connEnv) negotiate(requested int32) time.Duration {
	t := time.Duration(requested) * time.Millisecond
	return min(max(t, env.minTimeout), env.maxTimeout)
}

// expiredReply is the answer to a connect for an expired or unknown
// session, or with a wrong password: as ZooKeeper does, a zero timeout and
// session id, after which the connection closes.
func expiredReply(req *wire.ConnectRequest) []byte {
	resp := wire.ConnectResponse{Passwd: make([]byte, 16), HasReadOnly: req.HasReadOnly}
	return encodeFrame(&resp)
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

// leaderTrouble reports whether a write failed for want of a leader, or
// lost its leader before its outcome was known.
func leaderTrouble(err error) bool {
	return errors.Is(err, ErrNoLeader) || errors.Is(err, errNotLeader) || errors.Is(err, ErrUncertain)
}
