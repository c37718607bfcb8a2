package ensemble

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// Which member is on the other end of a peer connection. Under the
// ensemble secret every leaf certificate is minted by a member for itself
// (peerauth.go) and names its raft server id as the subject's common
// name; the accepting member serves the connection only if that id is in
// its raft configuration. The secret says that a process belongs to the
// ensemble; the id and the configuration say that it is one of the
// members now, not one removed, nor one started with the secret but never
// added. The id travels in the TLS handshake, so the streams themselves
// are as they were, and members with peer TLS of their own certificates
// or plaintext ones upgrade one at a time as before; for those no id is
// checked (a plaintext id would prove nothing, and an operator's
// certificates follow no naming rule of ours).

// certID is the member id that the verified certificate of an accepted
// TLS connection names, "" when there is none.
func certID(c net.Conn) string {
	tc, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return ""
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return ""
	}
	return st.VerifiedChains[0][0].Subject.CommonName
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
	refusedNotMember = "not_member" // an id not in the configuration
	refusedFrame     = "frame"      // a member RPC frame over its kind's bound
)

// peerGate is the accepting side's check of who is on the other end, and
// the count of those refused. Safe for concurrent use.
type peerGate struct {
	log     *slog.Logger
	refused *prometheus.CounterVec
	// checkIDs: connections name their member in their certificate
	// (the ensemble secret), and only members in the configuration are
	// served.
	checkIDs bool

	r    atomic.Pointer[raft.Raft] // set once raft runs
	up   chan struct{}             // closed when r is set
	once sync.Once
}

func newPeerGate(log *slog.Logger, reg prometheus.Registerer, checkIDs bool) *peerGate {
	g := &peerGate{log: log, up: make(chan struct{}), checkIDs: checkIDs,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordrun_peer_refused_total",
			Help: "Peer port connections refused, by reason: handshake (no or foreign credentials), not_member (an id not in the configuration), frame (a member RPC over its bound).",
		}, []string{"reason"})}
	for _, r := range []string{refusedHandshake, refusedNotMember, refusedFrame} {
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

// sameEnsemble refuses a member to be added whose peer credentials are not
// this ensemble's: it could never take part, and as a voter it would
// only lower how many failures the ensemble survives. One not reachable
// yet passes, as before: it learns the log once it starts.
func (m *Member) sameEnsemble(addr string) error {
	_, err := m.pool.get(addr)
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) {
		return errors.New("holds credentials of another ensemble (another peer secret or CA); give it this ensemble's")
	}
	return nil
}
