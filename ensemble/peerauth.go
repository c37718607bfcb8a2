package ensemble

// Peer authentication with a shared ensemble secret.
//
// Every member holds the same secret (Config.PeerSecret, from
// --peer-secret-file). From it each derives, with HKDF-SHA256, the same
// ed25519 key: the key of a certificate authority that exists nowhere but
// in the members' memory. At start a member mints itself a short-lived
// leaf certificate signed by that key, and from then on the peer port runs
// the mutual TLS 1.3 of tls.go against that CA alone. So the secret never
// crosses the wire, every connection is authenticated by a handshake with
// fresh randomness from both sides (a recorded one cannot be replayed),
// and every record is encrypted and MACed. A member of another ensemble
// (another secret, another CA) is refused at the handshake.
//
// Holding the secret is what makes a process a member as far as the
// transport goes; which member it is, its certificate says, and that id
// must be in the raft configuration (peergate.go).

import (
	"crypto"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
)

// MinPeerSecretBytes is the shortest secret accepted: 256 bits, what
// `coordrun ensemble secret` prints.
const MinPeerSecretBytes = 32

// peerServerName is the name every leaf certificate carries and every
// dial verifies. The CA signs nothing but member leaves, so one name
// serves all (and works through proxies and NAT, whatever the address);
// which member a leaf belongs to, its common name says.
const peerServerName = "member.coordrun.invalid"

// leafLifetime is how long a minted leaf certificate is valid; a member
// mints a new one when half of it has passed. Validity starts an hour
// early so that members whose clocks differ a little accept each other.
const (
	leafLifetime = 24 * time.Hour
	leafSkew     = time.Hour
)

// NewPeerSecret returns a fresh ensemble secret as `coordrun ensemble
// secret` prints it: 32 random bytes, base64.
func NewPeerSecret() (string, error) {
	b := make([]byte, MinPeerSecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// ParsePeerSecret decodes a secret as NewPeerSecret writes it (spaces and
// newlines around it ignored) and checks its length.
func ParsePeerSecret(text string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil {
		return nil, fmt.Errorf("not base64 (%v): generate one with `coordrun ensemble secret > FILE`", err)
	}
	if len(b) < MinPeerSecretBytes {
		return nil, fmt.Errorf("%d bytes is too short, want %d at least: generate one with `coordrun ensemble secret > FILE`", len(b), MinPeerSecretBytes)
	}
	return b, nil
}

// ReadPeerSecretFile reads the ensemble secret from path. The file must
// be readable by its owner alone: anyone who can read it can join the
// ensemble and write every znode.
func ReadPeerSecretFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("peer secret file: %w", err)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("peer secret file %s is readable by others (mode %04o): chmod 600 %s", path, perm, path)
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("peer secret file: %w", err)
	}
	b, err := ParsePeerSecret(string(text))
	if err != nil {
		return nil, fmt.Errorf("peer secret file %s: %w", path, err)
	}
	return b, nil
}

// checkPeerAuth checks the peer credentials: one kind at most, a secret
// long enough, and some unless the peer port is on loopback or
// InsecurePeers says to run it open.
func (c *Config) checkPeerAuth() error {
	if c.PeerSecret != nil && c.PeerTLS != nil {
		return configError("PeerSecret", "peer TLS and a peer secret exclude each other: choose one")
	}
	if c.PeerSecret != nil && len(c.PeerSecret) < MinPeerSecretBytes {
		return configError("PeerSecret", "peer secret of %d bytes is too short, want %d at least: generate one with `coordrun ensemble secret > FILE`",
			len(c.PeerSecret), MinPeerSecretBytes)
	}
	if exposed := exposedPeerAddr(c.PeerAddr, c.advertised()); exposed != "" && c.PeerTLS == nil && c.PeerSecret == nil && !c.InsecurePeers {
		return configError("InsecurePeers", "peer address %s is not loopback and the peer port has no credentials, so anyone who reaches it "+
			"could act as a member: give every member the same secret (coordrun ensemble secret > FILE; chmod 600 FILE; --peer-secret-file FILE), "+
			"or peer TLS (--peer-tls-cert, --peer-tls-key, --peer-tls-ca), or run it open behind a firewall with --insecure-peers", exposed)
	}
	return nil
}

// peersOnLoopback reports whether the peer port listens, and is dialed,
// on loopback only: then only local processes reach it.
func peersOnLoopback(addrs ...string) bool { return exposedPeerAddr(addrs...) == "" }

// exposedPeerAddr is the first of addrs not on loopback, or "". A wildcard
// or a host name other than localhost counts as reachable from elsewhere.
func exposedPeerAddr(addrs ...string) string {
	for _, a := range addrs {
		if a == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil || !loopbackHost(host) {
			return a
		}
	}
	return ""
}

// loopbackHost reports whether host names a loopback address.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// secretTLSConfig is the peer TLS configuration of member id under the
// ensemble secret: the CA derived from the secret as the only root, and a
// leaf certificate minted now and again before it runs out.
func secretTLSConfig(secret []byte, id string, now func() time.Time) (*tls.Config, error) {
	ca, err := deriveCA(secret)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	leaves := &leafSource{ca: ca, id: id, now: now}
	if _, err := leaves.get(); err != nil {
		return nil, err
	}
	return &tls.Config{
		GetCertificate:       func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return leaves.get() },
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return leaves.get() },
		RootCAs:              pool,
		ClientCAs:            pool,
		ClientAuth:           tls.RequireAndVerifyClientCert,
		ServerName:           peerServerName,
		MinVersion:           tls.VersionTLS13,
	}, nil
}

// peerCA is the ensemble's certificate authority, derived from its secret.
type peerCA struct {
	key  ed25519.PrivateKey
	cert *x509.Certificate
}

// deriveCA derives the ensemble CA from the secret. The key and the
// certificate are the same on every member: HKDF and ed25519 are
// deterministic, and so is every field of the certificate.
func deriveCA(secret []byte) (*peerCA, error) {
	seed, err := hkdf.Key(sha256.New, secret, nil, "coordrun peer CA v1", ed25519.SeedSize)
	if err != nil {
		return nil, err
	}
	key := ed25519.NewKeyFromSeed(seed)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "coordrun ensemble peer CA"},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("peer CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("peer CA: %w", err)
	}
	return &peerCA{key: key, cert: cert}, nil
}

// mintLeaf issues a leaf certificate for member id, valid from now (less
// the skew) for leafLifetime, on a fresh key.
func (ca *peerCA) mintLeaf(id string, now time.Time) (*tls.Certificate, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// The member's id, which the accepting member checks against its
		// configuration (peergate.go).
		Subject:     pkix.Name{CommonName: id, Organization: []string{"coordrun ensemble member"}},
		DNSNames:    []string{peerServerName},
		NotBefore:   now.Add(-leafSkew),
		NotAfter:    now.Add(leafLifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("peer certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: crypto.Signer(priv), Leaf: leaf}, nil
}

// leafSource hands out the member's current leaf, minting a new one once
// half of the current one's life has passed.
type leafSource struct {
	ca  *peerCA
	id  string
	now func() time.Time

	mu  sync.Mutex // guards cur
	cur *tls.Certificate
}

func (s *leafSource) get() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.cur != nil && now.Before(s.cur.Leaf.NotAfter.Add(-leafLifetime/2)) {
		return s.cur, nil
	}
	c, err := s.ca.mintLeaf(s.id, now)
	if err != nil {
		if s.cur != nil && now.Before(s.cur.Leaf.NotAfter) {
			return s.cur, nil
		}
		return nil, errors.Join(errors.New("minting a peer certificate"), err)
	}
	s.cur = c
	return c, nil
}

// logPeerAuth says once, at start, how the peer port is protected when
// it is not: a WARN line when it is open beyond loopback, a notice when
// any local process could reach it.
func (m *Member) logPeerAuth() {
	switch {
	case m.cfg.PeerSecret != nil || m.cfg.PeerTLS != nil:
	case m.InsecurePeers():
		m.log.Warn("peer port unauthenticated on a non-loopback address (--insecure-peers): anyone who reaches it can write "+
			"every znode, change the membership and end sessions; firewall it to the members, or set --peer-secret-file", "peer", m.cfg.PeerAddr)
	default:
		m.log.Info("peer port on loopback without authentication: any local process can act as a member; --peer-secret-file authenticates peers",
			"peer", m.cfg.PeerAddr)
	}
}
