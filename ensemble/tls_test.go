package ensemble

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/go-zookeeper/zk"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// testCA is a throwaway certificate authority for TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          testSerial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue makes a certificate for loopback (127.0.0.1, ::1, localhost) good
// for both server and client authentication, as member certificates are.
func (ca *testCA) issue(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: testSerial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func testSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// logBuffer collects the members' logs so that tests can wait for a line.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// has reports whether one log line contains every one of parts.
func (l *logBuffer) has(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(l.b.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

func tlsConnect(ctx context.Context, servers []string, tc *tls.Config) (*client.Client, error) {
	return client.Connect(ctx, client.Config{Servers: servers, SessionTimeout: 4 * time.Second, TLS: tc})
}

func TestTLSConfigChecks(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cert := ca.issue(t, "member")
	for name, tweak := range map[string]func(*Config){
		"client TLS without a certificate": func(c *Config) { c.ClientTLS = &tls.Config{ClientCAs: ca.pool} },
		"peer TLS without a certificate":   func(c *Config) { c.PeerTLS = &tls.Config{RootCAs: ca.pool} },
		"peer TLS without a CA":            func(c *Config) { c.PeerTLS = &tls.Config{Certificates: []tls.Certificate{cert}} },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := Config{ID: "1", DataDir: t.TempDir(), PeerAddr: "127.0.0.1:0", ClientAddr: "127.0.0.1:0"}
			tweak(&cfg)
			m, err := Start(cfg)
			if err == nil {
				m.Close()
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("Start: %v, want ErrConfig", err)
			}
		})
	}
}

// TestTLSEnsemble runs three members with client TLS (client certificates
// required) and peer mutual TLS, and checks that trusted clients work and
// replicate, and that everyone else is refused without disturbing raft.
func TestTLSEnsemble(t *testing.T) {
	ca := newTestCA(t, "coordrun test client-port CA")
	peerCA := newTestCA(t, "coordrun test peer CA")
	rogueCA := newTestCA(t, "someone else's CA")
	logs := &logBuffer{}
	c := startCluster(t, 3, func(cfg *Config) {
		cfg.ClientTLS = &tls.Config{
			Certificates: []tls.Certificate{ca.issue(t, "member "+cfg.ID)},
			ClientCAs:    ca.pool, // ClientAuth left unset: requiring is the default then
		}
		cfg.PeerTLS = &tls.Config{
			Certificates: []tls.Certificate{peerCA.issue(t, "member "+cfg.ID)},
			RootCAs:      peerCA.pool,
		}
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("m", cfg.ID)
	})
	t.Cleanup(func() {
		if t.Failed() {
			logs.mu.Lock()
			t.Logf("member logs:\n%s", logs.b.String())
			logs.mu.Unlock()
		}
	})
	trusted := &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{ca.issue(t, "client")}}

	t.Run("replication over TLS", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		w, err := tlsConnect(ctx, c.servers()[:1], trusted)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := w.Create(ctx, "/tls", []byte("over tls"), 0, client.OpenACL); err != nil {
			t.Fatalf("create: %v", err)
		}
		// Every member serves the write to its own TLS clients.
		for i, s := range c.servers() {
			r, err := tlsConnect(ctx, []string{s}, trusted)
			if err != nil {
				t.Fatalf("member %d: %v", i+1, err)
			}
			if err := r.Sync(ctx, "/tls"); err != nil {
				t.Fatalf("member %d: sync: %v", i+1, err)
			}
			data, _, err := r.Get(ctx, "/tls")
			if err != nil || string(data) != "over tls" {
				t.Fatalf("member %d: get: %q %v", i+1, data, err)
			}
			r.Close()
		}
		// Member RPCs (status) run over peer mutual TLS.
		for _, m := range c.members {
			st := m.EnsembleStatus(ctx)
			if len(st.Members) != 3 {
				t.Fatalf("member %s sees %d members", m.ID(), len(st.Members))
			}
			for _, ms := range st.Members {
				if ms.Error != "" {
					t.Fatalf("member %s: status of %s: %s", m.ID(), ms.ID, ms.Error)
				}
			}
		}
	})

	t.Run("go-zookeeper over TLS", func(t *testing.T) {
		dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, network, address, trusted)
		}
		conn, events, err := zk.Connect(c.servers(), 4*time.Second, zk.WithLogger(quietLogger{}), zk.WithDialer(dial))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		deadline := time.After(10 * time.Second)
	wait:
		for {
			select {
			case ev := <-events:
				if ev.State == zk.StateHasSession {
					break wait
				}
			case <-deadline:
				t.Fatal("go-zookeeper: no session over TLS")
			}
		}
		if _, err := conn.Create("/tls-zk", []byte("zk"), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("create: %v", err)
		}
		if data, _, err := conn.Get("/tls"); err != nil || string(data) != "over tls" {
			t.Fatalf("get: %q %v", data, err)
		}
	})

	t.Run("four-letter words go over TLS", func(t *testing.T) {
		tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", c.servers()[0], trusted)
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := tc.Write([]byte("ruok")); err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(tc); string(b) != "imok" {
			t.Fatalf("ruok over TLS: %q %v", b, err)
		}
		if b := plainWord(t, c.servers()[0], "ruok"); len(b) != 0 {
			t.Fatalf("plaintext ruok on the TLS port answered %q", b)
		}
		waitFor(t, 5*time.Second, "the refusal in the log", func() bool {
			return logs.has("connection closed inside its first TLS record", "port=client")
		})
	})

	t.Run("plaintext client refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if cl, err := tlsConnect(ctx, c.servers(), nil); err == nil {
			cl.Close()
			t.Fatal("a plaintext client got a session on the TLS client port")
		}
		waitFor(t, 5*time.Second, "the refusal in the log", func() bool {
			return logs.has("plaintext connection on a TLS port refused", "port=client")
		})
	})

	t.Run("client that does not trust the server", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		untrusting := &tls.Config{RootCAs: rogueCA.pool, Certificates: trusted.Certificates}
		cl, err := tlsConnect(ctx, c.servers(), untrusting)
		if err == nil {
			cl.Close()
			t.Fatal("connected to a server signed by a CA the client does not trust")
		}
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Fatalf("err = %v, want x509.UnknownAuthorityError", err)
		}
		if ctx.Err() != nil {
			t.Fatalf("Connect retried until its deadline: %v", err)
		}
	})

	t.Run("client certificate required and verified", func(t *testing.T) {
		for name, tc := range map[string]*tls.Config{
			"no certificate":          {RootCAs: ca.pool},
			"certificate of other CA": {RootCAs: ca.pool, Certificates: []tls.Certificate{rogueCA.issue(t, "intruder")}},
			"peer CA is no client CA": {RootCAs: ca.pool, Certificates: []tls.Certificate{peerCA.issue(t, "member 9")}},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			cl, err := tlsConnect(ctx, c.servers(), tc)
			cancel()
			if err == nil {
				cl.Close()
				t.Fatalf("%s: got a session", name)
			}
		}
		waitFor(t, 5*time.Second, "the refusal in the log", func() bool {
			return logs.has("TLS handshake refused", "port=client", "certificate")
		})
	})

	t.Run("untrusted peer refused", func(t *testing.T) {
		termBefore := maxTerm(c)
		// A would-be member with a certificate of another CA, which
		// knows (and trusts) the ensemble's public peer CA.
		rogue := newPeerTLS(&tls.Config{Certificates: []tls.Certificate{rogueCA.issue(t, "member 4")}, RootCAs: peerCA.pool})
		// One with a proper member certificate: the control.
		proper := newPeerTLS(&tls.Config{Certificates: []tls.Certificate{peerCA.issue(t, "member 5")}, RootCAs: peerCA.pool})
		rogueTrans := peerTransport(t, rogue)
		properTrans := peerTransport(t, proper)

		for i, cfg := range c.cfgs {
			addr := cfg.Peers[i].Addr
			// Raft: an AppendEntries with a far higher term would depose
			// the leader if a member accepted it.
			req := &raft.AppendEntriesRequest{
				RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("4"), Addr: []byte(rogueTrans.LocalAddr())},
				Term:      termBefore + 100,
			}
			var resp raft.AppendEntriesResponse
			if err := rogueTrans.AppendEntries(raft.ServerID(cfg.ID), raft.ServerAddress(addr), req, &resp); err == nil {
				t.Fatalf("member %s accepted raft traffic from an untrusted peer: %+v", cfg.ID, resp)
			}
			// The control: the same path with a member certificate gets
			// through (a stale term, so the member ignores it).
			stale := &raft.AppendEntriesRequest{
				RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("5"), Addr: []byte(properTrans.LocalAddr())},
				Term:      0,
			}
			if err := properTrans.AppendEntries(raft.ServerID(cfg.ID), raft.ServerAddress(addr), stale, &resp); err != nil {
				t.Fatalf("member %s refused a peer with a member certificate: %v", cfg.ID, err)
			}

			// Member RPCs: no status for the rogue, nor for a plaintext
			// caller, nor for one that does not trust the member.
			if st, err := peerStatus(addr, rogue); err == nil {
				t.Fatalf("member %s answered an untrusted peer: %s", cfg.ID, st)
			}
			if st, err := peerStatus(addr, nil); err == nil {
				t.Fatalf("member %s answered a plaintext peer: %s", cfg.ID, st)
			}
			untrusting := newPeerTLS(&tls.Config{Certificates: []tls.Certificate{peerCA.issue(t, "member 6")}, RootCAs: rogueCA.pool})
			var unknown x509.UnknownAuthorityError
			if _, err := peerStatus(addr, untrusting); !errors.As(err, &unknown) {
				t.Fatalf("dialing member %s while trusting another CA: %v, want x509.UnknownAuthorityError", cfg.ID, err)
			}
			if _, err := peerStatus(addr, proper); err != nil {
				t.Fatalf("member %s refused a status call with a member certificate: %v", cfg.ID, err)
			}
		}
		waitFor(t, 5*time.Second, "the refusal in the log", func() bool {
			return logs.has("TLS handshake refused", "port=peer", "certificate")
		})

		// No effect on the ensemble: nobody took the rogue's term, and
		// writes still replicate.
		if term := maxTerm(c); term >= termBefore+100 {
			t.Fatalf("a member took the untrusted peer's term %d", term)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		w, err := tlsConnect(ctx, c.servers(), trusted)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := w.Create(ctx, "/after-rogue", nil, 0, client.OpenACL); err != nil {
			t.Fatalf("create after the rogue's attempts: %v", err)
		}
	})
}

// plainWord sends a four-letter word in the clear and returns the answer.
func plainWord(t *testing.T, addr, word string) []byte {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write([]byte(word)); err != nil {
		return nil
	}
	// Half-close like nc does: the server sees the end of the request.
	_ = nc.(*net.TCPConn).CloseWrite()
	b, _ := io.ReadAll(nc)
	return b
}

// peerTransport is a raft transport as a member would have it, dialing
// with pt; its own listener refuses everything.
func peerTransport(t *testing.T, pt *peerTLS) *raft.NetworkTransport {
	t.Helper()
	mux := newPeerMux(listen(t), func(c net.Conn) { c.Close() }, slog.New(slog.DiscardHandler))
	mux.tls = pt
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  mux,
		MaxPool: 1,
		Timeout: 5 * time.Second,
		Logger:  hclog.NewNullLogger(),
	})
	t.Cleanup(func() { trans.Close() })
	return trans
}

// peerStatus makes one status member RPC to addr, dialing with pt.
func peerStatus(addr string, pt *peerTLS) (string, error) {
	rc, err := dialRPC(addr, 2*time.Second, pt)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kind, payload, err := rc.call(ctx, rpcStatus, nil)
	if err != nil {
		return "", err
	}
	if kind != rpcStatus {
		return "", errors.New(rpcErrorText(kind, payload))
	}
	return string(payload), nil
}

// maxTerm is the highest raft term among the running members.
func maxTerm(c *cluster) uint64 {
	var top uint64
	for _, m := range c.members {
		if m == nil {
			continue
		}
		term, _ := strconv.ParseUint(m.raft.Stats()["term"], 10, 64)
		top = max(top, term)
	}
	return top
}
