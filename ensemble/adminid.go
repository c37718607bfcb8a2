package ensemble

// Who administers a member. Membership changes (reconfig) and snapshots
// (snap) can take the ensemble apart or hand out every znode regardless of
// ACLs, so they need the super user, as on ZooKeeper: a client is super by
// authenticating with Config.SuperDigest (ZooKeeper's superDigest), by a
// verified client certificate whose identity Config.SuperX509 lists
// (ZooKeeper's x509 superUser), or by connecting to the admin socket
// (adminsock.go) as an allowed uid. An address is never enough: loopback
// is every local user, and every container sharing the host's network.
// Over TCP the address rule (loopback or Config.AdminFrom) still applies on
// top, as a network restriction.

import (
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// superID is the identity that passes every ACL check (tree.permitted).
var superID = tree.Identity{Scheme: "super"}

// admins says which identities make a connection the super user. It is
// set once at Start and only read afterwards.
type admins struct {
	digest string   // Config.SuperDigest
	x509   []string // Config.SuperX509
}

// grant returns auth with the super identity added when one of its
// identities is an administrator's; auth itself is not modified (requests
// read earlier keep the set they were read with).
func (a admins) grant(auth []tree.Identity) []tree.Identity {
	if isSuper(auth) {
		return auth
	}
	for _, id := range auth {
		if a.isAdmin(id) {
			return append(slices.Clip(auth), superID)
		}
	}
	return auth
}

func (a admins) isAdmin(id tree.Identity) bool {
	switch id.Scheme {
	case "digest":
		// Constant time: the digest is the one secret compared here.
		return a.digest != "" && subtle.ConstantTimeCompare([]byte(id.ID), []byte(a.digest)) == 1
	case "x509":
		return slices.Contains(a.x509, id.ID)
	}
	return false
}

// connIdentities are the identities a new connection starts with: ids
// (its address and certificate), super on the admin socket or for an
// administrator's certificate.
func (a admins) connIdentities(nc net.Conn, ids []tree.Identity) []tree.Identity {
	if _, ok := nc.(*adminConn); ok {
		return append(slices.Clip(ids), superID)
	}
	return a.grant(ids)
}

func isSuper(auth []tree.Identity) bool { return slices.Contains(auth, superID) }

// reconfigRefusal is the error code a reconfig from remote with the
// identities auth is refused with, or OK. A client that is not super gets
// NOAUTH, as from ZooKeeper with reconfig enabled; one at an address
// outside loopback and AdminFrom gets ZooKeeper's RECONFIGDISABLED.
func (m *Member) reconfigRefusal(remote net.Addr, auth []tree.Identity) wire.Code {
	if !isSuper(auth) {
		m.stats.refused.WithLabelValues(refusedReconfig).Inc()
		m.log.Warn("reconfig refused: the client is not the super user", "remote", remote.String())
		return wire.ErrNoAuth
	}
	if _, unix := remote.(*net.UnixAddr); !unix && !m.adminAllowed(remote) {
		m.stats.refused.WithLabelValues(refusedReconfig).Inc()
		m.log.Warn("reconfig refused: address outside loopback and --admin-from", "remote", remote.String())
		return wire.ErrReconfigDisabled
	}
	return wire.OK
}

// A snapshot's refusals, after "error: " in the snapshot words' answer:
// the client lacks the administrator's right, which `coordrun ensemble
// snapshot save` reports as bad usage (its fix is on the command line).
const (
	SnapshotNeedsAdmin  = "snapshots need an administrator: use the member's --admin-socket, or over TLS a client certificate named by its --super-x509"
	SnapshotNotFromHere = "snapshots over TCP are served to loopback and --admin-from clients only"
)

// snapshotRefusal says why a snapshot is not served on nc, or "". Over
// TCP there is no session to authenticate on before the stream starts,
// so only a client certificate can prove the administrator there.
func (m *Member) snapshotRefusal(nc net.Conn) string {
	if _, ok := nc.(*adminConn); ok {
		return ""
	}
	ids, _ := connCertIdentities(nc, m.cfg.ClientIdentity)
	if !isSuper(m.env.admins.grant(ids)) {
		m.stats.refused.WithLabelValues(refusedSnapshot).Inc()
		m.log.Warn("snapshot refused: the client is not the super user", "remote", nc.RemoteAddr().String())
		return "error: " + SnapshotNeedsAdmin
	}
	if !m.adminAllowed(nc.RemoteAddr()) {
		m.stats.refused.WithLabelValues(refusedSnapshot).Inc()
		m.log.Warn("snapshot refused: address outside loopback and --admin-from", "remote", nc.RemoteAddr().String())
		return "error: " + SnapshotNotFromHere
	}
	return ""
}

// checkAdmin checks the administrator settings.
func (c *Config) checkAdmin() error {
	if c.SuperDigest != "" {
		if err := checkSuperDigest(c.SuperDigest); err != nil {
			return &ConfigError{Field: "SuperDigest", Err: err}
		}
	}
	for _, id := range c.SuperX509 {
		if strings.TrimSpace(id) == "" {
			return configError("SuperX509", "an empty super x509 identity")
		}
	}
	if len(c.SuperX509) > 0 && (c.ClientTLS == nil || c.ClientTLS.ClientCAs == nil) {
		return configError("SuperX509", "super x509 identities come from client certificates: they need client TLS with a client CA (--tls-client-ca)")
	}
	for _, uid := range c.AdminSocketUIDs {
		if uid < 0 {
			return configError("AdminSocketUIDs", "admin socket uid %d is negative", uid)
		}
	}
	if len(c.AdminSocketUIDs) > 0 && c.AdminSocket == "" {
		return configError("AdminSocketUIDs", "admin socket uids need an admin socket (--admin-socket PATH)")
	}
	words, err := parseFourLetterWords(c.FourLetterWords)
	if err != nil {
		return &ConfigError{Field: "FourLetterWords", Err: err}
	}
	c.FourLetterWords = words
	return nil
}

// errSuperDigest explains the form of a super digest.
var errSuperDigest = errors.New("want user:BASE64(SHA1(user:password)), as ZooKeeper's superDigest; make one with: coordrun ensemble super-digest USER")

func checkSuperDigest(s string) error {
	user, hash, ok := strings.Cut(s, ":")
	if !ok || user == "" {
		return fmt.Errorf("super digest: %w", errSuperDigest)
	}
	b, err := base64.StdEncoding.DecodeString(hash)
	if err != nil || len(b) != 20 {
		return fmt.Errorf("super digest of %s: %w", user, errSuperDigest)
	}
	return nil
}

// What an administrative refusal counts as in coordrun_admin_refused_total.
const (
	refusedWord     = "four_letter_word" // a word off Config.FourLetterWords
	refusedReconfig = "reconfig"
	refusedSnapshot = "snapshot"
	refusedSocket   = "admin_socket" // a uid not allowed on the admin socket
)

func newRefusedCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coordrun_admin_refused_total",
		Help: "Administrative requests refused: four-letter words off the list, reconfig and snapshots from non-administrators, admin socket connections from other uids.",
	}, []string{"what"})
	for _, w := range []string{refusedWord, refusedReconfig, refusedSnapshot, refusedSocket} {
		c.WithLabelValues(w)
	}
	return c
}
