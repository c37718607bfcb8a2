package ensemble

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
	"github.com/hashicorp/raft"
	dto "github.com/prometheus/client_model/go"
)

// loggedCluster is a cluster whose members log to one buffer.
func loggedCluster(t *testing.T, n int, tweak ...func(*Config)) (*cluster, *testkit.SyncBuffer) {
	t.Helper()
	logs := &testkit.SyncBuffer{}
	c := startCluster(t, n, append([]func(*Config){func(cfg *Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("m", cfg.ID)
	}}, tweak...)...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("member logs:\n%s", logs.String())
		}
	})
	return c, logs
}

// linesWith counts the lines of logs holding every one of parts.
func linesWith(logs *testkit.SyncBuffer, parts ...string) int {
	n := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// refusals is how many peer connections the members refused for reason.
func refusals(c *cluster, reason string) int {
	n := 0
	for _, m := range c.Members() {
		var mm dto.Metric
		_ = m.gate.refused.WithLabelValues(reason).Write(&mm)
		n += int(mm.GetCounter().GetValue())
	}
	return n
}

// forgeRPC is what the probe of the peer port did, from a process with
// no credentials: a raw TCP connection, the stream byte 'M', one member
// RPC frame. It returns the reply's kind, or why none came; from is the
// connection's local address, as the member logs it.
func forgeRPC(t *testing.T, addr string, kind byte, payload []byte) (reply byte, from string, err error) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	from = nc.LocalAddr().String()
	if _, err := nc.Write(appendRPC([]byte{streamMember}, kind, 1, payload)); err != nil {
		return 0, from, err
	}
	k, _, _, err := readRPC(bufio.NewReader(nc), anyFrame)
	return k, from, err
}

// TestPeerPortRefusesForgedCalls sends, from a process without
// credentials, each call the security probe forged against a plaintext
// peer port: a propose as super, a membership change, a session touch, a
// close-session, and raft AppendEntries. With the ensemble secret on,
// each is refused at the handshake, logged once, and changes nothing.
func TestPeerPortRefusesForgedCalls(t *testing.T) {
	c, logs := loggedCluster(t, 3)
	leader := c.waitLeader()
	conn := testkit.DialZK(t, c.Servers(), 4*time.Second)
	defer conn.Close()
	digest := zk.DigestACL(zk.PermAll, "ops", "pw")
	if _, err := conn.Create("/secret", []byte("original"), 0, digest); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Create("/eph", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	sid := conn.SessionID()

	super := []tree.Identity{{Scheme: "super"}}
	propose := func(txn tree.Txn) []byte {
		b, err := txn.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	forgeries := []struct {
		name    string
		kind    byte
		payload []byte
	}{
		{"propose as super", rpcPropose, propose(tree.Txn{Kind: tree.TxnOps, Auth: super,
			Ops: []tree.Op{{Kind: tree.OpSetData, Path: "/secret", Data: []byte("overwritten"), Version: -1}}})},
		{"propose a new node", rpcPropose, propose(tree.Txn{Kind: tree.TxnOps, Auth: super,
			Ops: []tree.Op{{Kind: tree.OpCreate, Path: "/planted", ACL: tree.OpenACL}}})},
		{"reconfig", rpcReconfig, encodeMemberChange(memberChange{add: []Peer{{ID: "9", Addr: "127.0.0.1:1"}}})},
		{"touch", rpcTouch, encodeIDs([]int64{sid})},
		{"close session", rpcPropose, propose(tree.Txn{Kind: tree.TxnCloseSession, Session: sid})},
	}
	addr := leader.PeerAddr()
	for _, f := range forgeries {
		k, from, err := forgeRPC(t, addr, f.kind, f.payload)
		if err == nil {
			t.Fatalf("%s: the leader answered (kind %d)", f.name, k)
		}
		testkit.WaitFor(t, 5*time.Second, f.name+": the refusal in the log", func() bool {
			return linesWith(logs, "port=peer", "remote="+from) > 0
		})
		if n := linesWith(logs, "port=peer", "remote="+from); n != 1 {
			t.Fatalf("%s: the refusal was logged %d times, want once", f.name, n)
		}
	}

	// Raft: an AppendEntries with a far higher term would depose the
	// leader; one that a follower accepted would let entries in.
	termBefore := maxTerm(c)
	plain := peerTransport(t, nil)
	for i, cfg := range c.cfgs {
		req := &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("9"), Addr: []byte(plain.LocalAddr())},
			Term:      termBefore + 100,
		}
		var resp raft.AppendEntriesResponse
		if err := plain.AppendEntries(raft.ServerID(cfg.ID), raft.ServerAddress(cfg.Peers[i].Addr), req, &resp); err == nil {
			t.Fatalf("member %s accepted AppendEntries without credentials: %+v", cfg.ID, resp)
		}
	}
	want := len(forgeries) + len(c.cfgs)
	testkit.WaitFor(t, 5*time.Second, "every refusal counted", func() bool { return refusals(c, refusedHandshake) >= want })
	if n := refusals(c, refusedHandshake); n != want {
		t.Fatalf("%d handshakes refused, want %d (one per forged connection)", n, want)
	}

	// Nothing changed: the data, the membership, the session, the term.
	if term := maxTerm(c); term >= termBefore+100 {
		t.Fatalf("a member took the forged term %d", term)
	}
	conn.AddAuth("digest", []byte("ops:pw"))
	for _, m := range c.Members() {
		if err := m.fsm.waitApplied(t.Context(), leader.LastZxid()); err != nil {
			t.Fatal(err)
		}
		var data []byte
		var planted error
		m.fsm.view(func(tr *tree.Tree, _ int64) {
			data, _, _ = tr.Get("/secret", super)
			_, _, planted = tr.Get("/planted", super)
		})
		if string(data) != "original" || planted == nil {
			t.Fatalf("member %s: /secret = %q, /planted err %v", m.ID(), data, planted)
		}
	}
	if n := len(leader.raft.GetConfiguration().Configuration().Servers); n != 3 {
		t.Fatalf("%d members in the configuration after a forged reconfig", n)
	}
	if ok, _, err := conn.Exists("/eph"); err != nil || !ok {
		t.Fatalf("the session's ephemeral after a forged close-session: exists %v, %v", ok, err)
	}
	if _, err := conn.Set("/secret", []byte("by its owner"), -1); err != nil {
		t.Fatalf("the session after a forged close-session: %v", err)
	}
}

// TestPeerOtherEnsembleRefused: a member holding another ensemble's
// secret is refused at the handshake, raft and member RPCs alike; one
// holding this ensemble's is answered.
func TestPeerOtherEnsembleRefused(t *testing.T) {
	c, logs := loggedCluster(t, 3)
	c.waitLeader()
	dialer := func(secret []byte) *peerTLS {
		cfg, err := secretTLSConfig(secret, "2", time.Now)
		if err != nil {
			t.Fatal(err)
		}
		return newPeerTLS(cfg)
	}
	other := make([]byte, 32)
	copy(other, "another ensemble's secret, 32 b")
	foreign, own := dialer(other), dialer(c.cfgs[0].PeerSecret)
	addr := c.cfgs[0].Peers[0].Addr
	var unknown x509.UnknownAuthorityError
	if st, err := peerStatus(addr, foreign); !errors.As(err, &unknown) {
		t.Fatalf("status with another ensemble's secret: %q, %v; want x509.UnknownAuthorityError", st, err)
	}
	if _, err := peerStatus(addr, own); err != nil {
		t.Fatalf("status with the ensemble's secret: %v", err)
	}
	termBefore := maxTerm(c)
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("2")}, Term: termBefore + 100}
	var resp raft.AppendEntriesResponse
	if err := peerTransport(t, foreign).AppendEntries("1", raft.ServerAddress(addr), req, &resp); err == nil {
		t.Fatalf("AppendEntries with another ensemble's secret accepted: %+v", resp)
	}
	if term := maxTerm(c); term >= termBefore+100 {
		t.Fatalf("a member took the foreign term %d", term)
	}

	// A whole member with the other secret, started to join, is not
	// added: it could never take part.
	foreignMember, err := Start(Config{ID: "4", DataDir: t.TempDir(), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", Join: true,
		PeerSecret: other, Logger: testkit.Logger("foreign")})
	if err != nil {
		t.Fatal(err)
	}
	defer foreignMember.Close()
	leader := c.waitLeader()
	err = leader.applyChange(t.Context(), memberChange{add: []Peer{{ID: "4", Addr: foreignMember.PeerAddr()}}})
	if !errors.Is(err, errBadChange) || !strings.Contains(err.Error(), "another ensemble") {
		t.Fatalf("adding a member with another ensemble's secret: %v", err)
	}
	if n := len(leader.raft.GetConfiguration().Configuration().Servers); n != 3 {
		t.Fatalf("%d members after refusing the foreign one", n)
	}
	testkit.WaitFor(t, 5*time.Second, "the refusals in the log", func() bool {
		return linesWith(logs, "TLS handshake refused", "port=peer") >= 1
	})
	if refusals(c, refusedHandshake) < 1 {
		t.Fatal("the refused handshakes are not counted")
	}
}

// TestPeerNotInConfigurationRefused: a process with the ensemble's secret
// that names itself as a member not in the configuration (one removed,
// or never added) gets neither member RPCs nor raft; the refusal is
// logged once per connection with the id it claimed.
func TestPeerNotInConfigurationRefused(t *testing.T) {
	c, logs := loggedCluster(t, 3)
	c.waitLeader()
	cfg, err := secretTLSConfig(c.cfgs[0].PeerSecret, "9", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	stranger := newPeerTLS(cfg)
	addr := c.cfgs[0].Peers[0].Addr
	if st, err := peerStatus(addr, stranger); err == nil {
		t.Fatalf("member 1 answered member 9, not in its configuration: %s", st)
	}
	testkit.WaitFor(t, 5*time.Second, "the refusal in the log", func() bool {
		return linesWith(logs, "not in the configuration", "claimed_id=9") == 1
	})

	termBefore := maxTerm(c)
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("9")}, Term: termBefore + 100}
	var resp raft.AppendEntriesResponse
	if err := peerTransport(t, stranger).AppendEntries("1", raft.ServerAddress(addr), req, &resp); err == nil {
		t.Fatalf("member 1 took AppendEntries from member 9: %+v", resp)
	}
	if term := maxTerm(c); term >= termBefore+100 {
		t.Fatalf("a member took the stranger's term %d", term)
	}
	testkit.WaitFor(t, 5*time.Second, "both refusals counted", func() bool { return refusals(c, refusedNotMember) == 2 })
	if n := linesWith(logs, "not in the configuration", "claimed_id=9"); n != 2 {
		t.Fatalf("%d refusals logged for two connections", n)
	}

	// The control: the same secret, naming a member, is served.
	cfg, err = secretTLSConfig(c.cfgs[0].PeerSecret, "2", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peerStatus(addr, newPeerTLS(cfg)); err != nil {
		t.Fatalf("member 1 refused member 2: %v", err)
	}
}

func TestAdmitted(t *testing.T) {
	three := voters([]Peer{{ID: "1", Addr: "a:1"}, {ID: "2", Addr: "b:1"}, {ID: "3", Addr: "c:1"}})
	for _, tc := range []struct {
		servers []raft.Server
		id      string
		want    bool
	}{
		{three, "2", true},
		{three, "4", false},
		{three, "", false},
		{nil, "7", true}, // a joining member knows no one yet
	} {
		if got := admitted(tc.servers, tc.id); got != tc.want {
			t.Errorf("admitted(%d servers, %q) = %v", len(tc.servers), tc.id, got)
		}
	}
}

func TestPeersOnLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:2888": true,
		"127.0.0.2:2888": true,
		"[::1]:2888":     true,
		"localhost:2888": true,
		":2888":          false,
		"0.0.0.0:2888":   false,
		"[::]:2888":      false,
		"10.0.0.1:2888":  false,
		"db1.example:1":  false,
		"not an address": false,
	} {
		if got := peersOnLoopback(addr); got != want {
			t.Errorf("peersOnLoopback(%q) = %v", addr, got)
		}
	}
	if peersOnLoopback("127.0.0.1:1", "192.0.2.1:2888") {
		t.Error("a member dialed at a routable address counts as loopback")
	}
}

// TestInsecurePeersMustBeSaid: a member whose peer address is not
// loopback refuses to start without peer credentials, naming the ways
// out; with InsecurePeers it starts and warns once. On loopback it
// starts with a notice; with a secret, neither.
func TestInsecurePeersMustBeSaid(t *testing.T) {
	start := func(t *testing.T, tweak func(*Config)) (*Member, *testkit.SyncBuffer, error) {
		logs := &testkit.SyncBuffer{}
		ln := testkit.Listen(t)
		cfg := Config{ID: "1", DataDir: t.TempDir(), ClientAddr: "127.0.0.1:0", PeerListener: ln,
			// Advertised on a routable address: others would dial it there.
			Peers:  []Peer{{ID: "1", Addr: "192.0.2.1:2888"}},
			Logger: slog.New(slog.NewTextHandler(logs, nil))}
		tweak(&cfg)
		m, err := Start(cfg)
		if err != nil {
			ln.Close()
			return nil, logs, err
		}
		t.Cleanup(func() { m.Close() })
		return m, logs, nil
	}
	t.Run("refused", func(t *testing.T) {
		_, _, err := start(t, func(*Config) {})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "InsecurePeers" {
			t.Fatalf("Start: %v, want a ConfigError on InsecurePeers", err)
		}
		for _, fix := range []string{"192.0.2.1:2888", "not loopback", "coordrun ensemble secret", "chmod 600", "--peer-secret-file", "--peer-tls-cert", "--insecure-peers"} {
			if !strings.Contains(err.Error(), fix) {
				t.Errorf("the error does not say %q: %v", fix, err)
			}
		}
	})
	t.Run("insecure peers said", func(t *testing.T) {
		m, logs, err := start(t, func(c *Config) { c.InsecurePeers = true })
		if err != nil {
			t.Fatal(err)
		}
		if !m.InsecurePeers() || !strings.Contains((pageSource{m}).Warning(), "unauthenticated") {
			t.Errorf("InsecurePeers() = %v, the page's warning %q", m.InsecurePeers(), (pageSource{m}).Warning())
		}
		if n := linesWith(logs, "level=WARN", "peer port unauthenticated"); n != 1 {
			t.Fatalf("%d WARN lines about the open peer port, want 1:\n%s", n, logs)
		}
	})
	t.Run("loopback", func(t *testing.T) {
		m, logs, err := start(t, func(c *Config) { c.Peers = nil })
		if err != nil {
			t.Fatal(err)
		}
		if m.InsecurePeers() || (pageSource{m}).Warning() != "" {
			t.Errorf("InsecurePeers() on loopback, or the page warns: %q", (pageSource{m}).Warning())
		}
		if n := linesWith(logs, "level=INFO", "peer port on loopback without authentication"); n != 1 {
			t.Fatalf("%d notices, want 1:\n%s", n, logs)
		}
	})
	t.Run("secret", func(t *testing.T) {
		m, logs, err := start(t, func(c *Config) { c.PeerSecret = make([]byte, 32) })
		if err != nil {
			t.Fatal(err)
		}
		if m.InsecurePeers() || linesWith(logs, "unauthenticated") > 0 || linesWith(logs, "without authentication") > 0 {
			t.Fatalf("a member with a secret warned about its peer port:\n%s", logs)
		}
	})
	t.Run("both credentials", func(t *testing.T) {
		cfg := Config{ID: "1", DataDir: "d", PeerAddr: "127.0.0.1:1", PeerSecret: make([]byte, 32), PeerTLS: secretTLSConfigOrFail(t)}
		if err := cfg.setDefaults(); err == nil || !strings.Contains(err.Error(), "choose one") {
			t.Fatalf("setDefaults: %v", err)
		}
		cfg = Config{ID: "1", DataDir: "d", PeerAddr: "127.0.0.1:1", PeerSecret: make([]byte, 16)}
		if err := cfg.setDefaults(); err == nil || !strings.Contains(err.Error(), "coordrun ensemble secret") {
			t.Fatalf("setDefaults with a short secret: %v", err)
		}
	})
}

func secretTLSConfigOrFail(t *testing.T) *tls.Config {
	t.Helper()
	cfg, err := secretTLSConfig(make([]byte, 32), "1", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestPeerSecretFile: the file must be the owner's alone and hold a
// secret as `coordrun ensemble secret` prints it.
func TestPeerSecretFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	s, err := NewPeerSecret()
	if err != nil {
		t.Fatal(err)
	}
	good := write("good", s+"\n", 0o600)
	b, err := ReadPeerSecretFile(good)
	if err != nil || len(b) != MinPeerSecretBytes {
		t.Fatalf("ReadPeerSecretFile: %d bytes, %v", len(b), err)
	}
	for _, tc := range []struct {
		name, text string
		mode       os.FileMode
		want       string
	}{
		{"world", s, 0o644, "chmod 600"},
		{"group", s, 0o640, "chmod 600"},
		{"short", "c2hvcnQ=", 0o600, "coordrun ensemble secret > FILE"},
		{"garbage", "not base64!", 0o600, "coordrun ensemble secret > FILE"},
	} {
		if _, err := ReadPeerSecretFile(write(tc.name, tc.text, tc.mode)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// TestSecretCA: every member derives the same CA from the secret, so a
// leaf one mints verifies against another's CA; another secret's does
// not. Leaves are renewed once half their life has passed.
func TestSecretCA(t *testing.T) {
	secret, other := make([]byte, 32), make([]byte, 32)
	other[0] = 1
	a, err := deriveCA(secret)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := deriveCA(secret)
	o, _ := deriveCA(other)
	if !a.cert.Equal(b.cert) {
		t.Fatal("one secret, two CAs")
	}
	now := time.Now()
	leaf, err := b.mintLeaf("2", now)
	if err != nil {
		t.Fatal(err)
	}
	verify := func(ca *peerCA) error {
		pool := x509.NewCertPool()
		pool.AddCert(ca.cert)
		_, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: peerServerName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	if err := verify(a); err != nil {
		t.Fatalf("a leaf of the same secret: %v", err)
	}
	if err := verify(o); err == nil {
		t.Fatal("a leaf verified against another secret's CA")
	}

	clock := now
	src := &leafSource{ca: a, id: "1", now: func() time.Time { return clock }}
	first, _ := src.get()
	clock = now.Add(leafLifetime/2 - time.Minute)
	if again, _ := src.get(); again != first {
		t.Fatal("a leaf renewed before half its life")
	}
	clock = now.Add(leafLifetime/2 + time.Minute)
	if renewed, _ := src.get(); renewed == first || !renewed.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Fatal("a leaf not renewed after half its life")
	}
}

func TestRPCBounds(t *testing.T) {
	b := rpcBounds{propose: 2 * (1<<20 + 64<<10)}
	for kind, want := range map[byte]int{rpcPropose: b.propose, rpcTouch: 8 * maxTouchIDs, rpcReconfig: 64 << 10, rpcStatus: 64, rpcReadIndex: 64, 77: 64} {
		if got := b.limit(kind); got != want {
			t.Errorf("limit(%d) = %d, want %d", kind, got, want)
		}
	}
}

// TestRPCFrameRefusedBeforeAllocation: a header that declares a payload
// over its kind's bound is refused from the header alone: nothing is
// read or allocated for the payload.
func TestRPCFrameRefusedBeforeAllocation(t *testing.T) {
	hdr := appendRPC(nil, rpcStatus, 1, nil)
	hdr[0], hdr[1], hdr[2], hdr[3] = 0x03, 0xc0, 0, 0 // 60 MiB
	b := rpcBounds{propose: 1 << 20}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, _, err := readRPC(bufio.NewReader(strings.NewReader(string(hdr))), b.limit)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errFrameTooLarge) {
		t.Fatalf("readRPC: %v, want errFrameTooLarge", err)
	}
	t.Logf("allocated %d bytes for a refused frame declaring 60 MiB", after.TotalAlloc-before.TotalAlloc)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("%d bytes allocated for a refused frame", grew)
	}
}

// TestPeerRPCBoundsAndDeadlines: on an authenticated member connection,
// a frame over its bound ends the connection (logged once, counted), a
// half-sent frame is dropped after the frame deadline, an idle
// connection after the idle one.
func TestPeerRPCBoundsAndDeadlines(t *testing.T) {
	c, logs := loggedCluster(t, 1, func(cfg *Config) {
		cfg.peerFrameTimeout, cfg.peerIdleTimeout = 300*time.Millisecond, time.Second
	})
	m := c.waitLeader()
	cfg, err := secretTLSConfig(c.cfgs[0].PeerSecret, "1", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	pt := newPeerTLS(cfg)
	open := func() net.Conn {
		nc, err := pt.dialStream(m.PeerAddr(), 2*time.Second, streamMember)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	// closedWithin reads until the member closes nc, and says how long
	// that took.
	closedWithin := func(nc net.Conn) time.Duration {
		start := time.Now()
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		var buf [64]byte
		for {
			if _, err := nc.Read(buf[:]); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("the member kept the connection open")
				}
				return time.Since(start)
			}
		}
	}

	big := open()
	hdr := appendRPC(nil, rpcPropose, 1, nil)
	limit := m.rpcBounds().limit(rpcPropose)
	hdr[0], hdr[1], hdr[2], hdr[3] = byte((limit+10)>>24), byte((limit+10)>>16), byte((limit+10)>>8), byte(limit+10)
	if _, err := big.Write(hdr); err != nil {
		t.Fatal(err)
	}
	closedWithin(big)
	testkit.WaitFor(t, 5*time.Second, "the refusal logged", func() bool { return linesWith(logs, "peer connection refused", "reason=frame") == 1 })
	if refusals(c, refusedFrame) != 1 {
		t.Fatalf("%d oversized frames counted, want 1", refusals(c, refusedFrame))
	}

	half := open()
	if _, err := half.Write(appendRPC(nil, rpcStatus, 1, nil)[:5]); err != nil {
		t.Fatal(err)
	}
	if d := closedWithin(half); d > 5*time.Second {
		t.Fatalf("a half-sent frame held the connection %v", d)
	}

	idle := open()
	// Served while in use...
	rc, err := dialRPC(nil, m.PeerAddr(), 2*time.Second, pt)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if k, _, err := rc.call(t.Context(), rpcStatus, nil); err != nil || k != rpcStatus {
		t.Fatalf("status: kind %d, %v", k, err)
	}
	// ...and closed once idle.
	if d := closedWithin(idle); d > 5*time.Second {
		t.Fatalf("an idle connection held %v", d)
	}
}

// TestOversizedWriteFailsAlone: a follower does not forward a write
// larger than the leader accepts (which would end the connection its
// other forwarded writes share): that write fails, the next goes through.
func TestOversizedWriteFailsAlone(t *testing.T) {
	c := startCluster(t, 3, func(cfg *Config) { cfg.MaxDataBytes = 1024 })
	leader := c.waitLeader()
	var follower *Member
	for _, m := range c.Members() {
		if m != leader {
			follower = m
		}
	}
	limit := follower.rpcBounds().propose
	var ids []tree.Identity
	for n := 0; n <= limit; n += 1000 {
		ids = append(ids, tree.Identity{Scheme: "digest", ID: strings.Repeat("x", 1000)})
	}
	create := func(path string, auth []tree.Identity) error {
		txn := tree.Txn{Kind: tree.TxnOps, Auth: auth, Ops: []tree.Op{{Kind: tree.OpCreate, Path: path, ACL: tree.OpenACL}}}
		_, err := follower.submit(&txn)(t.Context())
		return err
	}
	if err := create("/big", ids); !errors.Is(err, errFrameTooLarge) {
		t.Fatalf("a write over %d bytes: %v, want errFrameTooLarge", limit, err)
	}
	if err := create("/small", nil); err != nil {
		t.Fatalf("the next write: %v", err)
	}
	if refusals(c, refusedFrame) != 0 {
		t.Fatal("the leader saw the oversized frame")
	}
}
