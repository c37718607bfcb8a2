package ensemble

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/coordrun/coordrun/internal/testkit"
)

// A host name that does not resolve cannot be compared: said once, as a
// warning, not refused as bad configuration (64 stops systemd's restarts;
// name service may come up after the member).
func TestPeerAddrUnresolvableWarns(t *testing.T) {
	var buf testkit.SyncBuffer
	cfg := Config{ID: "1", DataDir: t.TempDir(), ClientAddr: ":2181", PeerAddr: "10.0.0.1:2888", InsecurePeers: true,
		Peers: []Peer{{ID: "1", Addr: "no-such-host.invalid:2888"}}, Logger: slog.New(slog.NewTextHandler(&buf, nil))}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, `entry="1=no-such-host.invalid:2888"`) {
		t.Errorf("log: %s", out)
	}
}

func TestCheckAddrs(t *testing.T) {
	peers := []Peer{{ID: "1", Addr: "10.0.0.1:2888"}, {ID: "2", Addr: "10.0.0.2:2888"}}
	for _, c := range []struct {
		name      string
		client    string
		peer      string
		peers     []Peer
		forwarded bool
		wantErr   string
	}{
		{name: "as listed", client: "127.0.0.1:2181", peer: "10.0.0.1:2888", peers: peers},
		{name: "wildcard bind", client: ":2181", peer: "0.0.0.0:2888", peers: peers},
		{name: "IPv6 wildcard bind", client: ":2181", peer: "[::]:2888", peers: peers},
		{name: "no peer list", client: ":2181", peer: "127.0.0.1:2888"},
		{name: "another port", client: ":2181", peer: "10.0.0.1:2889", peers: peers,
			wantErr: "peer address 10.0.0.1:2889 is not this member's entry 1=10.0.0.1:2888"},
		{name: "another host", client: ":2181", peer: "10.0.0.2:2888", peers: peers, wantErr: "--peer-forwarded"},
		{name: "wildcard bind on another port", client: ":2181", peer: "0.0.0.0:2889", peers: peers, wantErr: "bind every interface, 0.0.0.0:2888"},
		{name: "forwarded", client: ":2181", peer: "10.0.0.9:2999", peers: peers, forwarded: true},
		{name: "a name for the same address", client: ":2181", peer: "127.0.0.1:2888", peers: []Peer{{ID: "1", Addr: "localhost:2888"}}},
		{name: "empty client port", client: "127.0.0.1:", peer: "10.0.0.1:2888", peers: peers, wantErr: `client address "127.0.0.1:" has no port`},
		{name: "empty peer port", client: ":2181", peer: "127.0.0.1:", wantErr: `peer address "127.0.0.1:" has no port`},
		{name: "client without port", client: "127.0.0.1", peer: "10.0.0.1:2888", peers: peers, wantErr: `client address "127.0.0.1": want host:port`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{ID: "1", DataDir: t.TempDir(), ClientAddr: c.client, PeerAddr: c.peer, Peers: c.peers, InsecurePeers: true, PeerForwarded: c.forwarded}
			err := cfg.setDefaults()
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, ErrConfig)):
				t.Fatalf("got %v, want a config error with %q", err, c.wantErr)
			}
		})
	}
}

func TestCheckPeersAgainstStore(t *testing.T) {
	conf := raft.Configuration{Servers: []raft.Server{
		{ID: "1", Address: "127.0.0.1:2001"}, {ID: "2", Address: "127.0.0.1:2002"}, {ID: "4", Address: "127.0.0.1:2004"},
	}}
	// Members added and removed since the list was written: allowed.
	lagging := []Peer{{ID: "1", Addr: "127.0.0.1:2001"}, {ID: "2", Addr: "127.0.0.1:2002"}, {ID: "3", Addr: "127.0.0.1:2003"}}
	if err := checkPeersAgainstStore(conf, lagging, testkit.Logger("t")); err != nil {
		t.Errorf("a lagging list: %v", err)
	}
	moved := []Peer{{ID: "1", Addr: "127.0.0.1:2001"}, {ID: "2", Addr: "127.0.0.1:2992"}}
	err := checkPeersAgainstStore(conf, moved, testkit.Logger("t"))
	if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "knows it at 127.0.0.1:2002") ||
		!strings.Contains(err.Error(), "coordrun ensemble remove 2") {
		t.Errorf("a moved member: %v", err)
	}
}

// A start that fails on a busy client port writes nothing into the data
// dir, and a restart whose peer list moves the member is refused rather
// than silently ignored.
func TestStartLeavesNoStateOnBadStart(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addrs := testkit.FreeAddrs(t, "127.0.0.1", 3)
	dir := t.TempDir()
	cfg := Config{ID: "1", DataDir: dir, ClientAddr: busy.Addr().String(), PeerAddr: addrs[0],
		Peers: []Peer{{ID: "1", Addr: addrs[0]}}, Logger: testkit.Logger("m1")}
	if m, err := Start(cfg); err == nil {
		m.Close()
		t.Fatal("started on a busy client port")
	}
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a start refused for its client port left raft.db behind (%v)", err)
	}

	cfg.ClientAddr = addrs[1]
	m, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	cfg.PeerAddr, cfg.Peers = addrs[2], []Peer{{ID: "1", Addr: addrs[2]}}
	if m, err := Start(cfg); err == nil {
		m.Close()
		t.Fatal("a restart with the member moved in --peers started")
	} else if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "knows it at "+addrs[0]) {
		t.Fatalf("restart with the member moved: %v", err)
	}
	cfg.PeerAddr, cfg.Peers = addrs[0], []Peer{{ID: "1", Addr: addrs[0]}}
	m, err = Start(cfg)
	if err != nil {
		t.Fatalf("restart as before: %v", err)
	}
	m.Close()
}
