package ensemble

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/coordrun/coordrun/ensemble/statuspage"
)

// Peer is one initial member of the ensemble: its raft server id and the
// address of its peer port.
type Peer struct {
	ID   string
	Addr string
}

// ParsePeers parses "id=host:port,id=host:port".
func ParsePeers(s string) ([]Peer, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var peers []Peer
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("peer %q: want id=host:port", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("peer %q: %w", part, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("peer id %q listed twice", id)
		}
		seen[id] = true
		peers = append(peers, Peer{ID: id, Addr: addr})
	}
	return peers, nil
}

// Config is the configuration of one member. Zero durations and sizes take
// the defaults below.
type Config struct {
	ID         string // raft server id, unique in the ensemble
	DataDir    string // raft log, stable store and snapshots
	ClientAddr string // ZooKeeper client port
	PeerAddr   string // raft and member-to-member traffic
	// Peers lists every initial member including this one. Empty means a
	// single-member ensemble of this member alone.
	Peers []Peer

	// ClientTLS, when set, makes the client port TLS only: it holds the
	// member's certificate, and ClientCAs to require client certificates
	// signed by them (ClientAuth then defaults to
	// RequireAndVerifyClientCert). Four-letter words go over TLS too.
	// Nil (the default) serves plaintext. See tls.go.
	ClientTLS *tls.Config
	// ClientIdentity chooses what of a client certificate verified by
	// ClientCAs becomes the connection's x509 identities, which ACL
	// entries x509:<id> grant to: the subject DN (CertIdentityDN, the
	// default, as ZooKeeper does), the SANs of one type, or the values
	// of one subject attribute. See certid.go.
	ClientIdentity CertIdentity
	// PeerTLS, when set, runs raft and member RPCs over mutual TLS. It
	// needs the member's certificate (Certificates) and the peer CA
	// (RootCAs, also used as ClientCAs unless those are set). Accepted
	// connections must present a certificate of that CA; dialed ones are
	// verified against it with the host of the peer address as server
	// name (unless ServerName is set), so member certificates need the
	// peer addresses as SANs and both the server and client auth key
	// usages. Every member must use TLS, or none.
	PeerTLS *tls.Config
	// PeerSecret, when set, authenticates peers by a secret every member
	// holds (32 bytes at least; see peerauth.go): mutual TLS against a CA
	// derived from it. Excludes PeerTLS.
	PeerSecret []byte
	// InsecurePeers lets a member whose peer address is not loopback run
	// without PeerTLS or PeerSecret: anyone who reaches its peer port can
	// then act as a member. Without it such a member refuses to start.
	InsecurePeers bool
	// PeerForwarded accepts a PeerAddr unlike this member's own entry in
	// Peers: the entry, which the others dial, reaches PeerAddr through a
	// proxy or a port mapping. Without it such a member refuses to start.
	PeerForwarded bool

	MinSessionTimeout time.Duration // default 2 ticks (4s with ZooKeeper's 2s tick)
	MaxSessionTimeout time.Duration // default 40s
	MaxDataBytes      int           // largest znode data; default 1 MiB like jute.maxbuffer
	// MaxTreeNodes and MaxTreeBytes bound the tree (treequota.go):
	// writes that would grow it past either are refused with
	// QUOTAEXCEEDED. Defaults 1,000,000 znodes and 1 GiB.
	MaxTreeNodes int
	MaxTreeBytes int64
	// EnforceQuota refuses writes past a ZooKeeper hard quota set under
	// /zookeeper/quota (zkCli setquota -N/-B) with QUOTAEXCEEDED, as
	// ZooKeeper's zookeeper.enforceQuota does. Off by default, as there.
	EnforceQuota bool
	// MaxClientConns caps the client connections open from one IP
	// address, as ZooKeeper's maxClientCnxns does; more are closed at
	// once. Default 60 (ZooKeeper's); negative: no cap.
	MaxClientConns int

	// Raft timing. Loopback and LAN ensembles fail over faster with smaller
	// values; the defaults suit a LAN.
	HeartbeatTimeout time.Duration // default 300ms
	ElectionTimeout  time.Duration // default 300ms
	// SnapshotThreshold is how many log entries accumulate before a
	// snapshot compacts the log.
	SnapshotThreshold uint64 // default 8192
	SnapshotInterval  time.Duration
	// SnapshotRetain is how many snapshots the data dir keeps; the
	// newest is the one that counts, the others are spares.
	SnapshotRetain int // default 2
	// TrailingLogs is how many log entries a snapshot leaves behind, so
	// that a follower a little behind catches up from the log rather
	// than with a whole snapshot.
	TrailingLogs uint64 // default 4096

	Logger *slog.Logger

	// Join starts a member that is not in the initial member list: it
	// does not bootstrap, and waits to be added (coordrun ensemble add).
	Join bool
	// Restore seeds a new data dir from a backup file (coordrun ensemble
	// snapshot save) instead of an empty tree.
	Restore string
	// AdminFrom lists client networks besides loopback from which an
	// administrator (see SuperDigest) may change the membership and read
	// snapshots over TCP: an address alone is not enough.
	AdminFrom []netip.Prefix
	// SuperDigest, as ZooKeeper's superDigest "user:base64(sha1(user:
	// password))", makes a connection that authenticates with that
	// digest (addauth digest user:password) the super user: it may
	// reconfigure the ensemble and passes every ACL. Empty: none.
	SuperDigest string
	// SuperX509 lists x509 identities (as Config.ClientIdentity derives
	// them from a verified client certificate) that are the super user,
	// as ZooKeeper's X509AuthenticationProvider superUser; only such a
	// client may read a snapshot over TCP. See adminid.go.
	SuperX509 []string
	// AdminSocket is the path of a Unix socket that serves the client
	// protocol to the member's administrator: a connection whose peer
	// uid is in AdminSocketUIDs is the super user. Empty: none. See
	// adminsock.go.
	AdminSocket string
	// AdminSocketUIDs are the uids allowed on AdminSocket; empty means
	// root and the uid the member runs as.
	AdminSocketUIDs []int
	// FourLetterWords lists the four-letter words the client port
	// answers; "*" means all. Empty: defaultFourLetterWords. The admin
	// socket answers every word. See fourletter_allow.go.
	FourLetterWords []string
	// AdminAddr is where the admin HTTP listener serves /metrics,
	// /healthz and /readyz; empty (the default) means no listener.
	AdminAddr string
	// Pprof serves Go's runtime profiles on the admin listener.
	Pprof bool
	// AdminAllow lists client networks besides loopback that the admin
	// listener answers (all of it: metrics, health, pprof, the page);
	// AdminHosts the host names, besides IP addresses, localhost and
	// AdminAddr's host, that requests to it may carry in Host.
	AdminAllow []netip.Prefix
	AdminHosts []string
	// StatusLockRoot and StatusCronRoot are the znode folders whose locks
	// and cron jobs the status page on the admin listener shows: default
	// those of coordrun run and coordrun cron, /coordrun/locks and
	// /coordrun/cron.
	StatusLockRoot string
	StatusCronRoot string
	// RemoveIdleLocks: the leader removes a lock folder under
	// StatusLockRoot that stayed empty and unchanged this long
	// (idlelocks.go); 0 never.
	RemoveIdleLocks time.Duration

	// StoreCheck verifies the raft store before it is opened; nil means
	// CheckStore in this process. It returns a *DamagedStoreError for a
	// file the member must not start from.
	StoreCheck func(path string) error
	// StorageFault is called when a write or sync of the data dir fails
	// other than for want of space (storage.go); it must not return. nil
	// logs the error and exits the process with status 1: a member must
	// not serve on from a page cache the disk may not hold.
	StorageFault func(error)

	// Listeners already bound for the peer and client ports; when set they
	// are used instead of PeerAddr and ClientAddr (tests bind port 0 first
	// to learn every member's address before any starts).
	PeerListener   net.Listener
	ClientListener net.Listener

	// connectTimeout is how long a new client connection has to send its
	// connect request; default connectTimeout (limits.go).
	connectTimeout time.Duration
	// commitTimeout overrides raft's CommitTimeout (tests: a long one shows
	// that followers learn commits from the commit pusher).
	commitTimeout time.Duration
	// peerIdleTimeout and peerFrameTimeout override the member RPC
	// deadlines (rpc.go) in tests.
	peerIdleTimeout, peerFrameTimeout time.Duration
	// legacyEntries makes the member behave, as to the log's format, like
	// a version before group commit: it never proposes group entries and
	// does not say it reads them (tests of the upgrade gate).
	legacyEntries bool
}

const (
	defaultMinSessionTimeout = 4 * time.Second
	defaultMaxSessionTimeout = 40 * time.Second
	defaultMaxData           = 1 << 20
	defaultMaxClientConns    = 60
)

// ErrConfig marks an invalid Config; every such error is a *ConfigError.
var ErrConfig = errors.New("invalid member configuration")

// ErrRequired marks a ConfigError for a setting left empty that has no
// default.
var ErrRequired = errors.New("required")

// ConfigError is an invalid Config: the field at fault and what is wrong
// with it. errors.Is matches it against ErrConfig and against its Err.
type ConfigError struct {
	Field string // the Config field, as "ID" or "DataDir"
	Err   error
}

func (e *ConfigError) Error() string { return ErrConfig.Error() + ": " + e.Err.Error() }

func (e *ConfigError) Unwrap() []error { return []error{ErrConfig, e.Err} }

func configError(field string, format string, args ...any) error {
	return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}

// setDefaults fills in the defaults and reports the first invalid setting.
// It is the one place a member's configuration is checked; commands only
// translate its errors into their flags' terms.
func (c *Config) setDefaults() error {
	if c.ID == "" {
		return configError("ID", "member id is %w", ErrRequired)
	}
	if c.DataDir == "" {
		return configError("DataDir", "data dir is %w", ErrRequired)
	}
	if c.ClientAddr == "" {
		c.ClientAddr = "127.0.0.1:2181"
	}
	if c.PeerAddr == "" && c.PeerListener != nil {
		c.PeerAddr = c.PeerListener.Addr().String()
	}
	if c.PeerAddr == "" {
		return configError("PeerAddr", "peer address is %w", ErrRequired)
	}
	if c.MinSessionTimeout == 0 {
		c.MinSessionTimeout = defaultMinSessionTimeout
	}
	if c.MaxSessionTimeout == 0 {
		c.MaxSessionTimeout = defaultMaxSessionTimeout
	}
	if c.MinSessionTimeout > c.MaxSessionTimeout {
		return configError("MinSessionTimeout", "min session timeout %v exceeds max %v", c.MinSessionTimeout, c.MaxSessionTimeout)
	}
	if c.MaxDataBytes == 0 {
		c.MaxDataBytes = defaultMaxData
	}
	if c.MaxTreeNodes == 0 {
		c.MaxTreeNodes = defaultMaxTreeNodes
	}
	if c.MaxTreeBytes == 0 {
		c.MaxTreeBytes = defaultMaxTreeBytes
	}
	if c.MaxTreeNodes < 0 || c.MaxTreeBytes < 0 {
		return configError("MaxTreeNodes", "the tree's quota must be positive, not %d znodes and %d bytes", c.MaxTreeNodes, c.MaxTreeBytes)
	}
	if c.MaxDataBytes < 0 {
		return configError("MaxDataBytes", "max data bytes must be positive")
	}
	if c.MaxClientConns == 0 {
		c.MaxClientConns = defaultMaxClientConns
	}
	if c.connectTimeout == 0 {
		c.connectTimeout = connectTimeout
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = 300 * time.Millisecond
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = 300 * time.Millisecond
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 8192
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = 30 * time.Second
	}
	if c.SnapshotRetain == 0 {
		c.SnapshotRetain = 2
	}
	if c.SnapshotRetain < 1 {
		return configError("SnapshotRetain", "snapshots to retain must be at least 1, not %d", c.SnapshotRetain)
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 4096
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if len(c.Peers) > 0 && c.advertised() == "" {
		return configError("Peers", "member id %q is not in the peer list", c.ID)
	}
	if err := c.checkAddrs(); err != nil {
		return err
	}
	if c.StatusLockRoot == "" {
		c.StatusLockRoot = statuspage.DefaultLockRoot
	}
	if c.StatusCronRoot == "" {
		c.StatusCronRoot = statuspage.DefaultCronRoot
	}
	for _, r := range []struct{ field, what, root string }{
		{"StatusLockRoot", "lock root", c.StatusLockRoot},
		{"StatusCronRoot", "cron root", c.StatusCronRoot},
	} {
		if !strings.HasPrefix(r.root, "/") || (len(r.root) > 1 && strings.HasSuffix(r.root, "/")) {
			return configError(r.field, "the status page's %s %q must be an absolute znode path", r.what, r.root)
		}
	}
	if c.RemoveIdleLocks < 0 {
		return configError("RemoveIdleLocks", "the idle time before a lock folder is removed must not be negative (0: never)")
	}
	if c.Pprof && c.AdminAddr == "" {
		return configError("Pprof", "profiles are served on the admin listener: pprof needs an admin address")
	}
	if (len(c.AdminAllow) > 0 || len(c.AdminHosts) > 0) && c.AdminAddr == "" {
		return configError("AdminAllow", "--admin-allow and --admin-host say whom the admin listener answers: they need --admin-addr")
	}
	for _, h := range c.AdminHosts {
		if err := checkAdminHost(h); err != nil {
			return &ConfigError{Field: "AdminHosts", Err: err}
		}
	}
	if err := c.checkTLS(); err != nil {
		return err
	}
	if err := c.checkAdmin(); err != nil {
		return err
	}
	if c.ClientIdentity == "" {
		c.ClientIdentity = CertIdentityDN
	}
	if err := c.ClientIdentity.check(); err != nil {
		return &ConfigError{Field: "ClientIdentity", Err: err}
	}
	if c.ClientIdentity != CertIdentityDN && c.ClientTLS == nil {
		return configError("ClientIdentity", "client certificate identity %q needs client TLS with a client CA", c.ClientIdentity)
	}
	// Last: a mistake in a setting is reported before the lack of one.
	return c.checkPeerAuth()
}

// advertised is this member's peer address as the others know it.
func (c *Config) advertised() string {
	for _, p := range c.Peers {
		if p.ID == c.ID {
			return p.Addr
		}
	}
	return ""
}
