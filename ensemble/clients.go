package ensemble

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// The member's side of its client port: accepting connections, telling
// four-letter words and snapshots from ZooKeeper sessions, and keeping the
// set of connections. The connection itself is conn.go's.

func (m *Member) acceptClients() {
	acceptLoop("client", m.client, &m.clientAccept, m.ctx.Done(), m.log, func(nc net.Conn) {
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		remote := nc.RemoteAddr()
		counted := m.perAddr.take(remote)
		if !counted && !m.probes.is(remote) {
			nc.Close()
			m.bounds.connsRefused.Add(1)
			if ip, _ := addrIP(remote); m.bounds.logged.allow("conns", ip.String(), time.Now()) {
				m.log.Warn("client connection refused: too many from its address",
					"remote", remote.String(), "max", m.cfg.MaxClientConns, "setting", "--max-client-conns")
			}
			return
		}
		release := func() {
			if counted {
				m.perAddr.release(remote)
			}
		}
		if !m.clients.accept(nc) {
			release()
			return
		}
		m.stats.connections.Add(1)
		m.tr.Go(func() {
			defer m.stats.connections.Add(-1)
			defer release()
			defer m.clients.done(nc)
			m.serveClient(nc)
		})
	})
}

// serveClient runs one client connection from its first bytes to close.
func (m *Member) serveClient(nc net.Conn) {
	defer nc.Close()
	// Small: it is held for the connection's life, and requests are small;
	// a frame larger than it is read into the frame's buffer directly.
	r := bufio.NewReaderSize(nc, 4<<10)
	_ = nc.SetReadDeadline(time.Now().Add(m.cfg.connectTimeout))
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
	case snapshotWord, snapshotFullWord:
		m.serveSnapshot(nc, string(first[:]) == snapshotFullWord)
		return
	}
	n := int(int32(binary.BigEndian.Uint32(first[:])))
	if n < 0 || n > maxConnectFrame {
		// Closed before anything is allocated for it: a connection that
		// has proved nothing may not make the member hold a frame of
		// the full request size.
		m.bounds.connectRefused.Add(1)
		m.log.Debug("bad connect frame length", "remote", nc.RemoteAddr().String(), "len", n, "max", maxConnectFrame)
		return
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return
	}
	m.stats.bytesIn.Add(int64(4 + n))
	var req wire.ConnectRequest
	if err := req.Decode(wire.NewDecoder(body)); err != nil {
		m.log.Debug("bad connect request", "remote", nc.RemoteAddr().String(), "err", err)
		return
	}
	// Handshakes are bounded per member: in a storm of new sessions the
	// rest wait here, holding only their socket, instead of all of them
	// crowding the scheduler and the log at once (raft's heartbeats
	// among them, whose delay would cost the leader its lease).
	select {
	case m.handshakes <- struct{}{}:
	case <-m.ctx.Done():
		return
	}
	c, resp, ok := m.env.handshake(nc, &req)
	<-m.handshakes
	if !ok {
		if resp != nil {
			n, _ := nc.Write(resp)
			m.stats.bytesOut.Add(int64(n))
		}
		return
	}
	_ = nc.SetReadDeadline(time.Time{})
	c.run(r, resp)
}

// clientSet holds a member's client connections: every accepted one until
// it is served, and the established ones by session. Once closed it takes
// no more, so that Close ends every connection.
type clientSet struct {
	mu       sync.Mutex // guards accepted, conns, bySess and closed
	accepted map[net.Conn]struct{}
	conns    map[*conn]struct{}
	bySess   map[int64]*conn
	closed   bool
}

func newClientSet() *clientSet {
	return &clientSet{accepted: map[net.Conn]struct{}{}, conns: map[*conn]struct{}{}, bySess: map[int64]*conn{}}
}

// accept records a new connection until done; false (and the connection
// closed) once the set is closed.
func (s *clientSet) accept(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		nc.Close()
		return false
	}
	s.accepted[nc] = struct{}{}
	return true
}

func (s *clientSet) done(nc net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.accepted, nc)
}

// register makes c the connection of its session, closing the one it
// replaces; false once the set is closed.
func (s *clientSet) register(c *conn) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	old := s.bySess[c.session]
	s.bySess[c.session] = c
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
	return true
}

func (s *clientSet) unregister(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bySess[c.session] == c {
		delete(s.bySess, c.session)
	}
	delete(s.conns, c)
}

// bySession is the connection of a session, or nil.
func (s *clientSet) bySession(id int64) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bySess[id]
}

// each calls f for every established connection, under the set's lock.
func (s *clientSet) each(f func(c *conn)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		f(c)
	}
}

// close ends every connection and takes no more.
func (s *clientSet) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.close()
	}
	for nc := range s.accepted {
		nc.Close()
	}
}

// The member as its connections' host (see conn.go).

func (m *Member) register(c *conn) bool { return m.clients.register(c) }

func (m *Member) unregister(c *conn) {
	m.clients.unregister(c)
	m.watch.removeOwner(c)
}

func (m *Member) view(fn func(t *tree.Tree, zxid int64)) { m.fsm.view(fn) }

func (m *Member) lastZxid() int64 { return m.fsm.lastZxid() }

func (m *Member) waitApplied(ctx context.Context, zxid int64) error {
	return m.fsm.waitApplied(ctx, zxid)
}

func (m *Member) watches() *watchManager { return m.watch }

var _ host = (*Member)(nil)
