package difftest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// replyWait bounds every read. A server that neither answers nor closes
// within it is reported as hung rather than waited for; it is far above
// any loopback round trip, so a slow machine does not make it a finding.
const replyWait = 10 * time.Second

// closeWait is how long a server that is to end a connection is given.
const closeWait = 2 * time.Second

// maxReply is the largest reply frame accepted: a getData of the largest
// node plus headers, with room to spare.
const maxReply = 4 << 20

// errClosed is what a call on a connection the server has closed (or one
// that failed earlier) returns; the trace shows it as "closed".
var errClosed = errors.New("connection closed")

// errHung reports a reply that did not come within replyWait.
var errHung = errors.New("no reply")

// session is one raw client connection, used from one goroutine. Calls
// are synchronous: a call writes one request and reads frames until the
// reply with its xid, handing every notification (xid -1) read on the way
// to onEvent, so events keep their place relative to the replies.
type session struct {
	nc      net.Conn
	resp    wire.ConnectResponse
	xid     int32
	buf     []byte
	broken  bool
	onEvent func(wire.WatcherEvent)
}

// dial connects and performs the session handshake.
func dial(addr string, timeoutMs int32) (*session, error) {
	nc, err := net.DialTimeout("tcp", addr, replyWait)
	if err != nil {
		return nil, err
	}
	s := &session{nc: nc}
	e := wire.NewFrameEncoder(nil)
	req := wire.ConnectRequest{Timeout: timeoutMs, Passwd: make([]byte, 16), HasReadOnly: true}
	req.Encode(e)
	if err := s.write(e.Frame()); err != nil {
		nc.Close()
		return nil, err
	}
	body, err := s.readFrame()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	if err := s.resp.Decode(wire.NewDecoder(body)); err != nil {
		nc.Close()
		return nil, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	if s.resp.SessionID == 0 {
		nc.Close()
		return nil, fmt.Errorf("handshake with %s: session refused", addr)
	}
	return s, nil
}

func (s *session) write(frame []byte) error {
	_ = s.nc.SetWriteDeadline(time.Now().Add(replyWait))
	if _, err := s.nc.Write(frame); err != nil {
		s.broken = true
		return errClosed
	}
	return nil
}

func (s *session) readFrame() ([]byte, error) {
	_ = s.nc.SetReadDeadline(time.Now().Add(replyWait))
	b, err := wire.ReadFrame(s.nc, s.buf, maxReply)
	if err != nil {
		s.broken = true
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, errHung
		}
		return nil, errClosed
	}
	s.buf = b[:0]
	return b, nil
}

// nextXid numbers requests from 1, as ZooKeeper's clients do.
func (s *session) nextXid() int32 {
	s.xid++
	return s.xid
}

// request frames a header and either an encoded body or raw body bytes.
func request(xid, op int32, body wire.Record, raw []byte) []byte {
	e := wire.NewFrameEncoder(nil)
	(&wire.RequestHeader{Xid: xid, Opcode: op}).Encode(e)
	if body != nil {
		body.Encode(e)
	}
	if raw == nil {
		return e.Frame()
	}
	return wire.AppendFrame(nil, append(append([]byte(nil), e.Bytes()...), raw...))
}

// call sends op with xid and returns the reply header and body. The body
// aliases the session's buffer until the next call.
func (s *session) call(xid, op int32, body wire.Record, raw []byte) (wire.ReplyHeader, []byte, error) {
	if s.broken {
		return wire.ReplyHeader{}, nil, errClosed
	}
	if err := s.write(request(xid, op, body, raw)); err != nil {
		return wire.ReplyHeader{}, nil, err
	}
	return s.reply(xid)
}

// sendFrame writes a complete frame as is and returns the first reply
// that is not a notification, whatever its xid.
func (s *session) sendFrame(frame []byte) (wire.ReplyHeader, []byte, error) {
	if err := s.write(frame); err != nil {
		return wire.ReplyHeader{}, nil, err
	}
	return s.reply(0)
}

// reply reads up to the reply with xid (any xid when xid is 0).
func (s *session) reply(xid int32) (wire.ReplyHeader, []byte, error) {
	for {
		b, err := s.readFrame()
		if err != nil {
			return wire.ReplyHeader{}, nil, err
		}
		d := wire.NewDecoder(b)
		var h wire.ReplyHeader
		if err := h.Decode(d); err != nil {
			s.broken = true
			return h, nil, fmt.Errorf("reply header: %w", err)
		}
		rest := b[len(b)-d.Remaining():]
		if h.Xid == wire.XidNotification {
			var ev wire.WatcherEvent
			if err := ev.Decode(wire.NewDecoder(rest)); err != nil {
				s.broken = true
				return h, nil, fmt.Errorf("notification: %w", err)
			}
			if s.onEvent != nil {
				s.onEvent(ev)
			}
			continue
		}
		if xid != 0 && h.Xid != xid {
			s.broken = true
			return h, nil, fmt.Errorf("reply xid %d, want %d", h.Xid, xid)
		}
		return h, rest, nil
	}
}

// closedWithin reports whether the server ends the connection within d,
// reading (and dropping) whatever it sends meanwhile.
func (s *session) closedWithin(d time.Duration) bool {
	if s.broken {
		return true
	}
	_ = s.nc.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, s.nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	s.broken = true
	return true
}

// close ends the session politely (closeSession) and drops the connection.
func (s *session) close() {
	if !s.broken {
		_, _, _ = s.call(s.nextXid(), wire.OpCloseSession, nil, nil)
	}
	s.nc.Close()
}
