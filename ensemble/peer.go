package ensemble

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The peer port carries two protocols. The first byte of every connection
// says which: raft's own transport, or the member RPCs of rpc.go (write
// forwarding, session liveness relay, read index, status).
const (
	streamRaft   byte = 'R'
	streamMember byte = 'M'
)

// peerMux accepts connections on the peer port and routes them by their
// first byte. It implements raft.StreamLayer for the raft side.
type peerMux struct {
	ln      net.Listener
	adv     net.Addr // the address other members dial; raft tells it to them
	raftCh  chan net.Conn
	handler func(net.Conn)
	log     *slog.Logger
	tr      *tracker
	closed  chan struct{}
	accepts acceptState // the accept loop's; Live reads it
	once    sync.Once
	tls     *peerTLS  // dialing side of peer TLS; nil: plaintext
	gate    *peerGate // checks who accepted streams come from; nil: none (tests' dial-only muxes)
	// raftEnded, if set, is told when a connection handed to raft ends
	// (leadergone.go).
	raftEnded func()

	// open holds the accepted connections not handed to raft: Close ends
	// them, so that their goroutines end too (raft closes its own).
	mu   sync.Mutex // guards open
	open map[net.Conn]struct{}
}

// newPeerMux makes a mux of ln; start serves it. Its goroutines are
// started through tr.
func newPeerMux(tr *tracker, ln net.Listener, handler func(net.Conn), log *slog.Logger) *peerMux {
	return &peerMux{ln: ln, raftCh: make(chan net.Conn), handler: handler, log: log, tr: tr,
		closed: make(chan struct{}), open: map[net.Conn]struct{}{}}
}

// start serves the listener. The fields the accepted connections read
// (tls, gate, adv, raftEnded) are set before it: they are not guarded.
func (m *peerMux) start() { m.tr.Go(m.serve) }

// hold records an accepted connection until release; false when the mux
// is closed (the connection is closed then).
func (m *peerMux) hold(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open == nil {
		c.Close()
		return false
	}
	m.open[c] = struct{}{}
	return true
}

func (m *peerMux) release(c net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.open, c)
}

func (m *peerMux) serve() {
	acceptLoop("peer", m.ln, &m.accepts, m.closed, m.log, func(c net.Conn) {
		if m.hold(c) {
			m.tr.Go(func() { m.route(c) })
		}
	})
}

func (m *peerMux) route(c net.Conn) {
	var b [1]byte
	// The stream byte comes within this time, the TLS handshake before
	// it included.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, b[:]); err != nil {
		m.release(c)
		c.Close()
		return
	}
	if (b[0] == streamRaft || b[0] == streamMember) && !m.admit(c) {
		m.release(c)
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	switch b[0] {
	case streamRaft:
		m.release(c)
		select {
		case m.raftCh <- c:
		case <-m.closed:
			c.Close()
		}
	case streamMember:
		m.handler(c)
		m.release(c)
	default:
		m.release(c)
		c.Close()
	}
}

// admit says whether the member on the other end of an accepted stream
// may use the peer port; a refusal is logged and counted here, once for
// the connection.
func (m *peerMux) admit(c net.Conn) bool {
	if m.gate == nil || !m.gate.checkIDs {
		return true
	}
	id := certID(c)
	if !m.gate.admit(id, m.closed) {
		select {
		case <-m.closed:
		default:
			m.gate.refuse(c, refusedNotMember, id, nil)
		}
		return false
	}
	return true
}

// Accept implements net.Listener for raft.
func (m *peerMux) Accept() (net.Conn, error) {
	select {
	case c := <-m.raftCh:
		if m.raftEnded != nil {
			c = &endConn{Conn: c, end: m.raftEnded}
		}
		return c, nil
	case <-m.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and ends every connection not handed to raft.
func (m *peerMux) Close() error {
	m.once.Do(func() { close(m.closed) })
	m.mu.Lock()
	open := m.open
	m.open = nil
	m.mu.Unlock()
	for c := range open {
		c.Close()
	}
	return m.ln.Close()
}

// Addr is the advertised address: raft sends it to followers as the
// leader's address, so it must be dialable, never a wildcard bind.
func (m *peerMux) Addr() net.Addr {
	if m.adv != nil {
		return m.adv
	}
	return m.ln.Addr()
}

// Dial implements raft.StreamLayer.
func (m *peerMux) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return m.tls.dialStream(string(addr), timeout, streamRaft)
}
