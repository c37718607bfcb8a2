package ensemble

// TLS on the two ports of a member.
//
// Client port (Config.ClientTLS): server-side TLS, optionally requiring
// client certificates. The listener is wrapped as a whole, so everything on
// that port speaks TLS once it is on: ZooKeeper sessions, and the
// four-letter words (ruok, srvr, mbrs, ...) too. A plaintext client, nc or
// a monitoring script that sends "ruok" in the clear gets no answer.
//
// Peer port (Config.PeerTLS): mutual TLS between members. Every connection
// a member accepts must present a certificate signed by the peer CA, and
// every connection it dials verifies the other member against that CA and
// presents this member's certificate. The stream byte that routes raft and
// member RPCs travels inside TLS. Holding a certificate of the peer CA is
// what makes a process a member as far as the transport goes, so that CA
// should sign member certificates only (not client certificates).

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// tlsHandshakeTimeout bounds a server-side handshake. A connection that
// does not finish its handshake in this time is closed.
const tlsHandshakeTimeout = 10 * time.Second

// checkTLS rejects TLS settings that cannot work or would be unsafe.
func (c *Config) checkTLS() error {
	if t := c.ClientTLS; t != nil {
		if len(t.Certificates) == 0 && t.GetCertificate == nil && t.GetConfigForClient == nil {
			return configError("ClientTLS", "client TLS needs the member's certificate")
		}
	}
	if t := c.PeerTLS; t != nil {
		if len(t.Certificates) == 0 && (t.GetCertificate == nil || t.GetClientCertificate == nil) {
			return configError("PeerTLS", "peer TLS needs the member's certificate")
		}
		// Without a CA, dialing would trust the system roots: any
		// certificate a public CA issued for the address would pass.
		if t.RootCAs == nil {
			return configError("PeerTLS", "peer TLS needs the peer CA (RootCAs)")
		}
	}
	return nil
}

// clientTLSConfig is the server side of the client port: TLS 1.2 at least,
// and client certificates required and verified whenever a client CA is
// given.
func clientTLSConfig(base *tls.Config) *tls.Config {
	c := base.Clone()
	if c.MinVersion == 0 {
		c.MinVersion = tls.VersionTLS12
	}
	if c.ClientCAs != nil && c.ClientAuth == tls.NoClientCert {
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

// clientListener wraps the client port's listener in TLS when the member
// is configured for it.
func clientListener(ln net.Listener, base *tls.Config, log *slog.Logger) net.Listener {
	if base == nil {
		return ln
	}
	return &tlsListener{Listener: ln, cfg: clientTLSConfig(base), log: log, port: "client"}
}

// peerTLS is a member's two sides of the peer port: mutual TLS when its
// configs are set, plaintext when they are nil (or the *peerTLS itself is).
type peerTLS struct {
	accept *tls.Config // requires and verifies a certificate of the peer CA
	dial   *tls.Config // verifies the peer against the CA, presents ours
	// local is the IP the member's peer port listens on, when that is a
	// concrete address. Dials to other members leave from it: on a
	// multi-homed host peer traffic then comes from the peer address (the
	// one firewalls and the other members expect), and the source of a
	// member connection tells which member opened it.
	local net.IP
}

func newPeerTLS(base *tls.Config) *peerTLS {
	if base == nil {
		return &peerTLS{}
	}
	p := &peerTLS{accept: base.Clone(), dial: base.Clone()}
	p.accept.ClientAuth = tls.RequireAndVerifyClientCert
	if p.accept.ClientCAs == nil {
		p.accept.ClientCAs = base.RootCAs
	}
	// Both ends are coordrun: nothing older than TLS 1.3 needs serving.
	for _, c := range []*tls.Config{p.accept, p.dial} {
		if c.MinVersion == 0 {
			c.MinVersion = tls.VersionTLS13
		}
	}
	return p
}

// listener wraps the raw peer listener, before connections are routed, and
// notes the address it listens on for the dialing side.
func (p *peerTLS) listener(ln net.Listener, log *slog.Logger, gate *peerGate) net.Listener {
	if p == nil {
		return ln
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsUnspecified() {
		p.local = a.IP
	}
	if p.accept == nil {
		return ln
	}
	return &tlsListener{Listener: ln, cfg: p.accept, log: log, port: "peer", refusedBy: gate}
}

// dialTimeout connects to another member's peer port. With TLS the
// handshake is part of the dial and of its timeout; the server name to
// verify is the host of addr (the address in the member list) unless the
// configuration names one.
func (p *peerTLS) dialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	nd := &net.Dialer{Timeout: timeout}
	if p != nil && p.local != nil {
		nd.LocalAddr = &net.TCPAddr{IP: p.local}
	}
	if p == nil || p.dial == nil {
		return nd.Dial("tcp", addr)
	}
	d := tls.Dialer{NetDialer: nd, Config: p.dial}
	return d.Dial("tcp", addr)
}

// dialStream connects to another member's peer port and opens a stream
// of the given kind: the stream byte, inside TLS when it is on.
func (p *peerTLS) dialStream(addr string, timeout time.Duration, stream byte) (net.Conn, error) {
	c, err := p.dialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte{stream}); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}

// tlsListener is tls.NewListener that logs why a handshake failed: an
// operator needs to see a member or client refused for its certificate.
// Accept does not handshake (that would stall the accept loop); the
// connection does on its first Read or Write, on its own goroutine.
type tlsListener struct {
	net.Listener
	cfg  *tls.Config
	log  *slog.Logger
	port string // "client" or "peer", for the log
	// refusedBy counts refused handshakes on the peer port; nil elsewhere.
	refusedBy *peerGate
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tlsServerConn{Conn: tls.Server(c, l.cfg), l: l}, nil
}

// tlsServerConn is an accepted TLS connection that handshakes explicitly,
// within tlsHandshakeTimeout, so that a failure can be logged once.
// Embedding *tls.Conn keeps ConnectionState available.
type tlsServerConn struct {
	*tls.Conn
	l       *tlsListener
	done    atomic.Bool
	logOnce sync.Once
}

func (c *tlsServerConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *tlsServerConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *tlsServerConn) handshake() error {
	if c.done.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), tlsHandshakeTimeout)
	defer cancel()
	if err := c.Conn.HandshakeContext(ctx); err != nil {
		c.logOnce.Do(func() { c.l.refused(c.Conn, err) })
		return err
	}
	c.done.Store(true)
	return nil
}

// refused logs a failed handshake. A connection closed before it sent a
// byte is a port probe (a load balancer's health check) and is logged at
// debug level only.
func (l *tlsListener) refused(c *tls.Conn, err error) {
	remote := c.RemoteAddr().String()
	var rhe tls.RecordHeaderError
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		l.log.Debug("connection closed before the TLS handshake", "port", l.port, "remote", remote)
	case errors.As(err, &rhe):
		l.log.Warn("plaintext connection on a TLS port refused", "port", l.port, "remote", remote)
	case errors.Is(err, io.ErrUnexpectedEOF):
		// Less than a record header, then EOF: "ruok" sent in the clear.
		l.log.Warn("connection closed inside its first TLS record (plaintext?)", "port", l.port, "remote", remote)
	default:
		l.log.Warn("TLS handshake refused", "port", l.port, "remote", remote, "err", err)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		l.refusedBy.count(refusedHandshake)
	}
}
