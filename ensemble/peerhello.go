package ensemble

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// The hello: after the stream byte, inside the authenticated channel when
// there is one, the dialing member names itself — u8 length, its raft
// server id. The accepting member serves the stream only if that id is in
// its raft configuration. Credentials (peerauth.go, tls.go) say that a
// process belongs to this ensemble; the hello and the configuration say
// that it is one of the members now, not one removed, nor one started
// with the secret but never added.

// maxHelloID is the longest member id a hello can carry.
const maxHelloID = 255

// errBadHello: the stream did not start with a well-formed hello.
var errBadHello = errors.New("bad peer hello")

// helloFrame is what a dialer sends first: the stream byte and the hello.
func helloFrame(stream byte, id string) []byte {
	b := make([]byte, 0, 2+len(id))
	b = append(b, stream, byte(len(id)))
	return append(b, id...)
}

// readHello reads the hello after the stream byte.
func readHello(r io.Reader) (string, error) {
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", fmt.Errorf("%w: %v", errBadHello, err)
	}
	if n[0] == 0 {
		return "", fmt.Errorf("%w: no member id", errBadHello)
	}
	id := make([]byte, n[0])
	if _, err := io.ReadFull(r, id); err != nil {
		return "", fmt.Errorf("%w: %v", errBadHello, err)
	}
	return string(id), nil
}

// admitted reports whether a peer that says it is id may use the peer
// port of a member whose latest raft configuration is servers. A member
// started with --join has no configuration until the leader adds it: it
// admits any member holding the ensemble's credentials, since the leader
// that adds it is one it cannot know yet.
func admitted(servers []raft.Server, id string) bool {
	if len(servers) == 0 {
		return true
	}
	for _, s := range servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

// Reasons a peer connection is refused, as the label of
// coordrun_peer_refused_total.
const (
	refusedHandshake = "handshake"  // no credentials, or another ensemble's
	refusedHello     = "hello"      // no or a malformed hello
	refusedNotMember = "not_member" // an id not in the configuration
	refusedFrame     = "frame"      // a member RPC frame over its kind's bound
)

// peerGate is the accepting side's check of who is on the other end, and
// the count of those refused. Safe for concurrent use.
type peerGate struct {
	log     *slog.Logger
	refused *prometheus.CounterVec

	r    atomic.Pointer[raft.Raft] // set once raft runs
	up   chan struct{}             // closed when r is set
	once sync.Once
}

func newPeerGate(log *slog.Logger, reg prometheus.Registerer) *peerGate {
	g := &peerGate{log: log, up: make(chan struct{}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordrun_peer_refused_total",
			Help: "Peer port connections refused, by reason: handshake (no or foreign credentials), hello, not_member (an id not in the configuration), frame (a member RPC over its bound).",
		}, []string{"reason"})}
	for _, r := range []string{refusedHandshake, refusedHello, refusedNotMember, refusedFrame} {
		g.refused.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(g.refused)
	}
	return g
}

// setRaft gives the gate the configuration to check against.
func (g *peerGate) setRaft(r *raft.Raft) {
	g.r.Store(r)
	g.once.Do(func() { close(g.up) })
}

// admit waits until raft runs (connections may arrive before it does) or
// stop closes, and says whether id may use the peer port.
func (g *peerGate) admit(id string, stop <-chan struct{}) bool {
	select {
	case <-g.up:
	case <-stop:
		return false
	}
	return admitted(g.r.Load().GetConfiguration().Configuration().Servers, id)
}

// refuse logs and counts one refused connection. Called once per
// connection, which is closed right after.
func (g *peerGate) refuse(c net.Conn, reason, id string, err error) {
	g.count(reason)
	attrs := []any{"remote", c.RemoteAddr().String(), "reason", reason}
	if id != "" {
		attrs = append(attrs, "claimed_id", id)
	}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	msg := "peer connection refused"
	if reason == refusedNotMember {
		msg = "peer connection refused: member id not in the configuration"
	}
	g.log.Warn(msg, attrs...)
}

func (g *peerGate) count(reason string) {
	if g != nil {
		g.refused.WithLabelValues(reason).Inc()
	}
}
