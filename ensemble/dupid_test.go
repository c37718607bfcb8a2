package ensemble

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/hashicorp/raft"
)

// A member started with the id of one already serving is refused before
// it writes anything, and says which member holds the id and where; the
// running ensemble is not disturbed.
func TestDuplicateIDRefused(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.waitLeader()
	imposter := c.cfgs[0]
	imposter.DataDir = filepath.Join(t.TempDir(), "imposter")
	imposter.PeerListener, imposter.ClientListener = nil, nil
	addrs := testkit.FreeAddrs(t, "127.0.0.1", 2)
	imposter.PeerAddr, imposter.ClientAddr = addrs[0], addrs[1]
	imposter.Logger = testkit.Logger("imposter")
	// Its peer address is not entry 1: that alone is refused first
	// (checkAddrs). Behind a forwarding entry the check that remains is
	// the probe of the entry, which finds member 1 serving there.
	if _, err := Start(imposter); err == nil || !strings.Contains(err.Error(), "is not this member's entry 1=") {
		t.Fatalf("an imposter on another peer address: %v; want its address refused", err)
	}
	imposter.PeerForwarded = true
	m, err := Start(imposter)
	if err == nil {
		m.Close()
		t.Fatal("a second member with id 1 started")
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "ID" || !strings.Contains(err.Error(), "member 1 is already serving at "+c.cfgs[0].Peers[0].Addr) {
		t.Fatalf("second member with id 1: %v; want a ConfigError naming member 1 and its address", err)
	}
	if _, err := os.Stat(filepath.Join(imposter.DataDir, "raft.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused start left a raft store behind (%v)", err)
	}
	if n := len(leader.raft.GetConfiguration().Configuration().Servers); n != 3 || c.Leader() < 0 {
		t.Errorf("the ensemble after the refusal: %d members, leader %d", n, c.Leader())
	}
}

// A data dir bootstrapped as a lone member (a first start without
// --peers) restarted with a peer list of several is refused, naming
// ensemble add: it would silently stay an ensemble of its own.
func TestLoneStoreWithPeersRefused(t *testing.T) {
	conf := raft.Configuration{Servers: []raft.Server{{ID: "1", Address: "127.0.0.1:2001"}}}
	peers := []Peer{{ID: "1", Addr: "127.0.0.1:2001"}, {ID: "2", Addr: "127.0.0.1:2002"}, {ID: "3", Addr: "127.0.0.1:2003"}}
	err := checkPeersAgainstStore(conf, peers, testkit.Logger("t"))
	if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "member 1 alone") || !strings.Contains(err.Error(), "coordrun ensemble add") {
		t.Errorf("a lone store under a list of three: %v", err)
	}
	if err := checkPeersAgainstStore(conf, peers[:1], testkit.Logger("t")); err != nil {
		t.Errorf("a lone store under a list of itself: %v", err)
	}
}

// An entry that names this member another way (a host name for its
// address) is this member, not a duplicate.
func TestDuplicateIDNotSelf(t *testing.T) {
	addrs := testkit.FreeAddrs(t, "127.0.0.1", 2)
	_, port, _ := net.SplitHostPort(addrs[0])
	secret := make([]byte, MinPeerSecretBytes)
	copy(secret, "the ensemble secret of this test")
	m, err := Start(Config{ID: "1", DataDir: t.TempDir(), PeerAddr: addrs[0], ClientAddr: addrs[1], PeerSecret: secret,
		Peers: []Peer{{ID: "1", Addr: "localhost:" + port}}, Logger: testkit.Logger("m1")})
	if err != nil {
		t.Fatalf("a member whose entry is a host name for its own address: %v", err)
	}
	m.Close()
}
