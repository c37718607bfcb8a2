package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// session is a deliberately plain ZooKeeper client: one TCP connection,
// one session, no reconnect. A checker needs what a real client hides —
// the zxid in every reply header and notification, the order frames
// arrive in, whether a reply came out of order — and a session that ends
// with its connection gives a clear line between sessions that survived
// the run (all their guarantees apply) and sessions that were abandoned
// (their ephemerals must go).
type session struct {
	n       int // harness-wide session number
	id      int64
	timeout time.Duration
	nc      net.Conn
	wmu     sync.Mutex
	w       *bufio.Writer

	mu      sync.Mutex
	xid     int32
	pending []*call
	err     error // set once the connection is gone
	frames  []Frame
	events  []WatchEvent
	dead    chan struct{}
}

// Frame is one reply or notification as it arrived on a session.
type Frame struct {
	Seq   int   // arrival order on the session
	Xid   int32 // wire.XidNotification for a watch event
	Zxid  int64
	Err   int32
	Order bool // false: the reply did not answer the oldest outstanding request
}

// WatchEvent is one notification a session received.
type WatchEvent struct {
	Session int    `json:"session"`
	Seq     int    `json:"seq"`
	Type    int32  `json:"type"`
	Path    string `json:"path"`
	Zxid    int64  `json:"zxid"`
}

type call struct {
	xid  int32
	op   int32
	resp wire.Record
	done chan struct{}
	hdr  wire.ReplyHeader
	seq  int
	err  error // connection loss: the outcome is unknown
}

var errConnLost = errors.New("connection lost")

func dialSession(ctx context.Context, n int, addr string, timeout time.Duration) (*session, error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Now().Add(timeout))
	e := wire.NewFrameEncoder(nil)
	(&wire.ConnectRequest{Timeout: int32(timeout / time.Millisecond), Passwd: make([]byte, 16)}).Encode(e)
	if _, err := nc.Write(e.Frame()); err != nil {
		nc.Close()
		return nil, err
	}
	r := bufio.NewReaderSize(nc, 64<<10)
	f, err := wire.ReadFrame(r, nil, 4<<20)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("handshake: %w", err)
	}
	var resp wire.ConnectResponse
	if err := resp.Decode(wire.NewDecoder(f)); err != nil || resp.SessionID == 0 {
		nc.Close()
		return nil, fmt.Errorf("handshake refused: %v", err)
	}
	_ = nc.SetDeadline(time.Time{})
	s := &session{n: n, id: resp.SessionID, timeout: time.Duration(resp.Timeout) * time.Millisecond,
		nc: nc, w: bufio.NewWriter(nc), dead: make(chan struct{})}
	go s.readLoop(r)
	go s.pingLoop()
	return s, nil
}

func (s *session) readLoop(r *bufio.Reader) {
	var buf []byte
	for {
		// A member that stops answering (paused, cut off) ends the
		// session's connection after two thirds of the timeout, as
		// ZooKeeper clients do.
		_ = s.nc.SetReadDeadline(time.Now().Add(s.timeout * 2 / 3))
		f, err := wire.ReadFrame(r, buf, 4<<20)
		if err != nil {
			s.fail(err)
			return
		}
		buf = f[:0]
		d := wire.NewDecoder(f)
		var h wire.ReplyHeader
		if h.Decode(d) != nil {
			s.fail(errors.New("bad reply header"))
			return
		}
		s.mu.Lock()
		seq := len(s.frames)
		fr := Frame{Seq: seq, Xid: h.Xid, Zxid: h.Zxid, Err: int32(h.Err), Order: true}
		switch h.Xid {
		case wire.XidPing:
			s.mu.Unlock()
			continue
		case wire.XidNotification:
			var ev wire.WatcherEvent
			if ev.Decode(d) != nil {
				s.mu.Unlock()
				s.fail(errors.New("bad notification"))
				return
			}
			s.frames = append(s.frames, fr)
			s.events = append(s.events, WatchEvent{Session: s.n, Seq: seq, Type: ev.Type, Path: ev.Path, Zxid: h.Zxid})
			s.mu.Unlock()
			continue
		}
		idx := -1
		for i, c := range s.pending {
			if c.xid == h.Xid {
				idx = i
				break
			}
		}
		if idx < 0 {
			s.mu.Unlock()
			s.fail(fmt.Errorf("reply xid %d without a request", h.Xid))
			return
		}
		fr.Order = idx == 0
		c := s.pending[idx]
		s.pending = append(s.pending[:idx], s.pending[idx+1:]...)
		s.frames = append(s.frames, fr)
		s.mu.Unlock()
		c.hdr, c.seq = h, seq
		if h.Err == wire.OK && c.resp != nil {
			if err := c.resp.Decode(d); err != nil {
				c.err = err
			}
		}
		close(c.done)
	}
}

func (s *session) pingLoop() {
	t := time.NewTicker(s.timeout / 3)
	defer t.Stop()
	e := wire.NewFrameEncoder(nil)
	(&wire.RequestHeader{Xid: wire.XidPing, Opcode: wire.OpPing}).Encode(e)
	ping := e.Frame()
	for {
		select {
		case <-s.dead:
			return
		case <-t.C:
			s.wmu.Lock()
			_, err := s.w.Write(ping)
			if err == nil {
				err = s.w.Flush()
			}
			s.wmu.Unlock()
			if err != nil {
				s.fail(err)
				return
			}
		}
	}
}

func (s *session) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	pending := s.pending
	s.pending = nil
	close(s.dead)
	s.mu.Unlock()
	s.nc.Close()
	for _, c := range pending {
		c.err = errConnLost
		close(c.done)
	}
}

// lost reports whether the connection (and so, for the harness, the
// session) is gone.
func (s *session) lost() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

// send writes a request; its reply arrives on the returned call.
func (s *session) send(op int32, req, resp wire.Record) *call {
	c := &call{op: op, resp: resp, done: make(chan struct{})}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		c.err = errConnLost
		close(c.done)
		return c
	}
	s.xid++
	c.xid = s.xid
	s.pending = append(s.pending, c)
	// Written under mu so requests hit the wire in xid order.
	e := wire.NewFrameEncoder(nil)
	(&wire.RequestHeader{Xid: c.xid, Opcode: op}).Encode(e)
	if req != nil {
		req.Encode(e)
	}
	s.wmu.Lock()
	_, err := s.w.Write(e.Frame())
	if err == nil {
		err = s.w.Flush()
	}
	s.wmu.Unlock()
	s.mu.Unlock()
	if err != nil {
		s.fail(err)
	}
	return c
}

// wait waits for a call's reply. A reply that does not come in time ends
// the connection, so the outcome is then unknown.
func (s *session) wait(c *call, d time.Duration) error {
	select {
	case <-c.done:
	case <-time.After(d):
		s.fail(errors.New("reply timeout"))
		<-c.done
	}
	if c.err != nil {
		return c.err
	}
	if c.hdr.Err != wire.OK {
		return c.hdr.Err
	}
	return nil
}

// closeSession ends the session properly and waits for the reply.
func (s *session) closeSession() error {
	c := s.send(wire.OpCloseSession, nil, nil)
	err := s.wait(c, s.timeout)
	s.abandon()
	return err
}

// abandon drops the connection without closing the session, which then
// expires.
func (s *session) abandon() { s.fail(errors.New("abandoned")) }

func (s *session) record() ([]Frame, []WatchEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Frame(nil), s.frames...), append([]WatchEvent(nil), s.events...)
}
