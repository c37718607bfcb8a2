package ensemble

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
)

// Requests that only the leader can answer: writes, the read index of a
// sync, session liveness, membership changes. leaderCall is the one place
// that decides where they run; the peer handlers below are the leader's
// side of the calls followers forward.

// pending is a request started where the leader is, not yet answered.
type pending[T any] func(ctx context.Context) (T, error)

// answered is a pending request whose answer is known already.
func answered[T any](v T, err error) pending[T] {
	return func(context.Context) (T, error) { return v, err }
}

// leaderCall starts a request where the leader is and returns its pending
// answer. When this member leads, local starts it here. Otherwise the
// payload that encode gives (nil encode: none) goes to the leader as a
// call of kind, and decode reads the reply (and when it arrived). Requests started in order by
// one goroutine reach the leader in that order.
//
// Errors: no leader to call wraps ErrNoLeader (or is ErrClosed); a
// failure the leader answered is a *peerError; a connection lost or ctx
// ended while waiting wraps ErrUncertain for a call that changes state
// (the leader may have acted on it), ErrNoLeader for others.
func leaderCall[T any](m *Member, kind byte, encode func() ([]byte, error), local func() pending[T], decode func([]byte, time.Time) (T, error)) pending[T] {
	if m.IsLeader() {
		return local()
	}
	lost := ErrNoLeader
	if kind == rpcPropose || kind == rpcReconfig {
		lost = ErrUncertain
	}
	var zero T
	var payload []byte
	if encode != nil {
		var err error
		if payload, err = encode(); err != nil {
			return answered(zero, err)
		}
	}
	addr, err := m.leaderAddr()
	if err != nil {
		return answered(zero, err)
	}
	rc, err := m.pool.get(addr)
	if err != nil {
		return answered(zero, fmt.Errorf("%w: %v", ErrNoLeader, err))
	}
	ch := rc.start(kind, payload)
	return func(ctx context.Context) (T, error) {
		var r rpcResult
		select {
		case r = <-ch:
		case <-ctx.Done():
			return zero, fmt.Errorf("%w: %v", lost, ctx.Err())
		}
		switch {
		case r.err != nil:
			return zero, fmt.Errorf("%w: %v", lost, r.err)
		case r.kind != kind:
			return zero, peerErrorOf(r.kind, r.payload)
		case decode == nil:
			return zero, nil
		}
		return decode(r.payload, r.at)
	}
}

// leaderAddr waits up to an election's worth of time for a known leader.
func (m *Member) leaderAddr() (string, error) {
	deadline := time.Now().Add(4 * m.cfg.ElectionTimeout)
	for {
		addr, _ := m.raft.LeaderWithID()
		if addr != "" {
			return string(addr), nil
		}
		if time.Now().After(deadline) {
			return "", ErrNoLeader
		}
		select {
		case <-m.ctx.Done():
			return "", ErrClosed
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// proposal is a committed write: its zxid and outcome, and when this
// member learnt them (the apply on the leader, the reply on a follower).
type proposal struct {
	index     int64
	out       zk.Outcome
	ready     time.Time
	forwarded bool
}

// submit hands a write to raft — directly when leading, else through the
// leader — and returns the wait for its outcome. Writes submitted in order
// by one goroutine are committed in that order. A forwarded write is
// committed when its wait returns, but may not be applied here yet; the
// caller decides whether its reply must wait for that.
//
// A txn larger than a leader accepts from a follower fails here, alone,
// rather than end the connection that other writes share.
func (m *Member) submit(txn *tree.Txn) pending[proposal] {
	encode := func() ([]byte, error) {
		b, err := txn.MarshalBinary()
		if limit := m.rpcBounds().propose; err == nil && len(b) > limit {
			err = fmt.Errorf("%w: a write of %d bytes, %d at most", errFrameTooLarge, len(b), limit)
		}
		return b, err
	}
	return leaderCall(m, rpcPropose, encode,
		func() pending[proposal] {
			f, err := m.applyAsLeader(txn)
			if err != nil {
				return answered(proposal{}, err)
			}
			return func(context.Context) (proposal, error) { return m.waitApply(f) }
		},
		func(b []byte, at time.Time) (proposal, error) {
			p, err := decodeProposeReply(rpcPropose, b)
			p.ready, p.forwarded = at, true
			return p, err
		})
}

// readIndex returns a zxid this member must have applied before answering
// a sync: the leader's applied zxid after a barrier, which proves that it
// still leads (the barrier commits through a quorum) and that everything
// committed before the sync began is applied there.
func (m *Member) readIndex(ctx context.Context) (int64, error) {
	idx, err := leaderCall(m, rpcReadIndex, nil,
		func() pending[int64] { return m.localReadIndex },
		func(b []byte, _ time.Time) (int64, error) {
			if len(b) != 8 {
				return 0, fmt.Errorf("read index of %d bytes", len(b))
			}
			return int64(binary.BigEndian.Uint64(b)), nil
		})(ctx)
	if err != nil && !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrClosed) {
		err = fmt.Errorf("%w: %v", ErrNoLeader, err)
	}
	return idx, err
}

func (m *Member) localReadIndex(context.Context) (int64, error) {
	if err := m.raft.Barrier(5 * time.Second).Error(); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoLeader, err)
	}
	return m.fsm.lastZxid(), nil
}

// sendTouch relays session liveness to the leader (or records it here)
// and returns the sessions the leader does not consider alive. Only
// sessions with a connection here go (sessionowner.go); a batch larger
// than a leader accepts in one call goes in several.
func (m *Member) sendTouch(ctx context.Context, ids []int64) ([]int64, error) {
	ids = m.clients.holding(ids)
	var dead []int64
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), maxTouchIDs)]
		ids = ids[len(chunk):]
		d, err := leaderCall(m, rpcTouch,
			func() ([]byte, error) { return encodeIDs(chunk), nil },
			func() pending[[]int64] { return answered(m.touchAll(chunk), nil) },
			func(b []byte, _ time.Time) ([]int64, error) { return decodeIDs(b), nil })(ctx)
		if err != nil {
			return nil, err
		}
		dead = append(dead, d...)
	}
	return dead, nil
}

func encodeIDs(ids []int64) []byte {
	b := make([]byte, 8*len(ids))
	for i, id := range ids {
		binary.BigEndian.PutUint64(b[8*i:], uint64(id))
	}
	return b
}

func decodeIDs(b []byte) []int64 {
	ids := make([]int64, 0, len(b)/8)
	for i := 0; i+8 <= len(b); i += 8 {
		ids = append(ids, int64(binary.BigEndian.Uint64(b[i:])))
	}
	return ids
}

// decodeProposeReply reads the leader's answer to a forwarded write: its
// zxid and outcome.
func decodeProposeReply(kind byte, payload []byte) (proposal, error) {
	if kind != rpcPropose {
		return proposal{}, peerErrorOf(kind, payload)
	}
	d := wire.NewDecoder(payload)
	p := proposal{index: d.Long()}
	if err := p.out.Decode(d); err != nil {
		return proposal{}, fmt.Errorf("%w: bad propose reply: %v", ErrUncertain, err)
	}
	return p, nil
}

// peerHandler serves one kind of member RPC. It runs on the connection's
// read loop, so work that must keep the arrival order (proposing forwarded
// writes) is done before it returns; its pending answer is awaited on a
// goroutine of its own. The reply has the call's kind, or is the error's
// peer code.
type peerHandler func(payload []byte) pending[[]byte]

// peerHandlers is the table servePeer dispatches by.
func (m *Member) peerHandlers() map[byte]peerHandler {
	return map[byte]peerHandler{
		rpcPropose:   m.leaderOnly(m.servePropose),
		rpcTouch:     m.leaderOnly(m.serveTouch),
		rpcReadIndex: m.leaderOnly(func([]byte) pending[[]byte] { return m.serveReadIndex }),
		rpcReconfig:  m.leaderOnly(m.serveReconfig),
		rpcSilence:   m.leaderOnly(m.serveSilence),
		rpcStatus: func([]byte) pending[[]byte] {
			b, err := json.Marshal(m.localStatus())
			return answered(b, err)
		},
	}
}

// servePeer answers member RPCs on the peer port.
func (m *Member) servePeer(c net.Conn) {
	// Peers may call before this member has finished starting.
	select {
	case <-m.ready:
	case <-m.ctx.Done():
		c.Close()
		return
	}
	serveRPC(&m.tr, c, m.rpcBounds(), func(kind byte, payload []byte) func() (byte, []byte) {
		h, ok := m.peer[kind]
		if !ok {
			return func() (byte, []byte) {
				return rpcError, encodePeerError(fmt.Errorf("%w: kind %d", errUnknownRPC, kind))
			}
		}
		answer := h(payload)
		return func() (byte, []byte) {
			b, err := answer(m.ctx)
			if err != nil {
				return rpcError, encodePeerError(err)
			}
			return kind, b
		}
	}, func(err error) { m.gate.refuse(c, refusedFrame, "", err) })
}

// rpcBounds are the limits of the member RPCs this member serves.
func (m *Member) rpcBounds() rpcBounds {
	b := rpcBounds{propose: 2 * m.env.maxFrame, idle: defaultPeerIdle, frame: defaultPeerFrame}
	if m.cfg.peerIdleTimeout > 0 {
		b.idle = m.cfg.peerIdleTimeout
	}
	if m.cfg.peerFrameTimeout > 0 {
		b.frame = m.cfg.peerFrameTimeout
	}
	return b
}

// leaderOnly refuses calls while this member does not lead.
func (m *Member) leaderOnly(h peerHandler) peerHandler {
	return func(payload []byte) pending[[]byte] {
		if !m.IsLeader() {
			return answered[[]byte](nil, errNotLeader)
		}
		return h(payload)
	}
}

// servePropose proposes a forwarded write. The raft.Apply happens before
// returning, on the connection's read loop, so forwarded writes from one
// follower connection commit in the order they were sent.
func (m *Member) servePropose(payload []byte) pending[[]byte] {
	var txn tree.Txn
	if err := txn.UnmarshalBinary(payload); err != nil {
		return answered[[]byte](nil, fmt.Errorf("%w: txn: %v", errBadRequest, err))
	}
	if txn.Session != 0 {
		m.track.touch(txn.Session)
	}
	f, err := m.applyAsLeader(&txn)
	if err != nil {
		return answered[[]byte](nil, err)
	}
	return func(context.Context) ([]byte, error) {
		p, err := m.waitApply(f)
		if err != nil {
			return nil, err
		}
		e := wire.NewEncoder(nil)
		e.Long(p.index)
		p.out.Encode(e)
		return e.Bytes(), nil
	}
}

func (m *Member) serveTouch(payload []byte) pending[[]byte] {
	return answered(encodeIDs(m.touchAll(decodeIDs(payload))), nil)
}

func (m *Member) serveReadIndex(ctx context.Context) ([]byte, error) {
	idx, err := m.localReadIndex(ctx)
	if err != nil {
		return nil, err
	}
	return binary.BigEndian.AppendUint64(nil, uint64(idx)), nil
}

func (m *Member) serveReconfig(payload []byte) pending[[]byte] {
	ch, err := decodeMemberChange(payload)
	if err != nil {
		return answered[[]byte](nil, fmt.Errorf("%w: member change: %v", errBadRequest, err))
	}
	return func(ctx context.Context) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return nil, m.applyChange(ctx, ch)
	}
}
