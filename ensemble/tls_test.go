package ensemble

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func tlsConnect(ctx context.Context, servers []string, tc *tls.Config) (*client.Client, error) {
	return client.Connect(ctx, client.Config{Servers: servers, SessionTimeout: 4 * time.Second, TLS: tc})
}

func TestTLSConfigChecks(t *testing.T) {
	ca := testkit.NewCA(t, "test CA")
	cert := ca.Issue(t, testkit.Loopback("member"))
	for name, tweak := range map[string]func(*Config){
		"client TLS without a certificate": func(c *Config) { c.ClientTLS = &tls.Config{ClientCAs: ca.Pool} },
		"peer TLS without a certificate":   func(c *Config) { c.PeerTLS = &tls.Config{RootCAs: ca.Pool} },
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
	ca := testkit.NewCA(t, "coordrun test client-port CA")
	peerCA := testkit.NewCA(t, "coordrun test peer CA")
	rogueCA := testkit.NewCA(t, "someone else's CA")
	logs := &testkit.SyncBuffer{}
	c := startCluster(t, 3, func(cfg *Config) {
		cfg.ClientTLS = &tls.Config{
			Certificates: []tls.Certificate{ca.Issue(t, testkit.Loopback("member "+cfg.ID))},
			ClientCAs:    ca.Pool, // ClientAuth left unset: requiring is the default then
		}
		cfg.PeerTLS = &tls.Config{
			Certificates: []tls.Certificate{peerCA.Issue(t, testkit.Loopback("member "+cfg.ID))},
			RootCAs:      peerCA.Pool,
		}
		cfg.PeerSecret = nil
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("m", cfg.ID)
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("member logs:\n%s", logs.String())
		}
	})
	trusted := &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{ca.Issue(t, testkit.Loopback("client"))}}

	t.Run("replication over TLS", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		w, err := tlsConnect(ctx, c.Servers()[:1], trusted)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := w.Create(ctx, "/tls", []byte("over tls"), 0, client.OpenACL); err != nil {
			t.Fatalf("create: %v", err)
		}
		// Every member serves the write to its own TLS clients.
		for i, s := range c.Servers() {
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
		for _, m := range c.Members() {
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
		conn := testkit.DialZK(t, c.Servers(), 4*time.Second, testkit.ZKTLS(trusted))
		if _, err := conn.Create("/tls-zk", []byte("zk"), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("create: %v", err)
		}
		if data, _, err := conn.Get("/tls"); err != nil || string(data) != "over tls" {
			t.Fatalf("get: %q %v", data, err)
		}
	})

	t.Run("four-letter words go over TLS", func(t *testing.T) {
		if b, err := client.FourLetter(testkit.Context(t, 5*time.Second), c.Servers()[0], "ruok", trusted); b != "imok" {
			t.Fatalf("ruok over TLS: %q %v", b, err)
		}
		if b := plainWord(t, c.Servers()[0], "ruok"); len(b) != 0 {
			t.Fatalf("plaintext ruok on the TLS port answered %q", b)
		}
		testkit.WaitFor(t, 5*time.Second, "the refusal in the log", func() bool {
			return logs.HasLine("connection closed inside its first TLS record", "port=client")
		})
	})

	t.Run("plaintext client refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if cl, err := tlsConnect(ctx, c.Servers(), nil); err == nil {
			cl.Close()
			t.Fatal("a plaintext client got a session on the TLS client port")
		}
		testkit.WaitFor(t, 5*time.Second, "the refusal in the log", func() bool {
			return logs.HasLine("plaintext connection on a TLS port refused", "port=client")
		})
	})

	t.Run("client that does not trust the server", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		untrusting := &tls.Config{RootCAs: rogueCA.Pool, Certificates: trusted.Certificates}
		cl, err := tlsConnect(ctx, c.Servers(), untrusting)
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
			"no certificate":          {RootCAs: ca.Pool},
			"certificate of other CA": {RootCAs: ca.Pool, Certificates: []tls.Certificate{rogueCA.Issue(t, testkit.Loopback("intruder"))}},
			"peer CA is no client CA": {RootCAs: ca.Pool, Certificates: []tls.Certificate{peerCA.Issue(t, testkit.Loopback("member 9"))}},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			cl, err := tlsConnect(ctx, c.Servers(), tc)
			cancel()
			if err == nil {
				cl.Close()
				t.Fatalf("%s: got a session", name)
			}
		}
		testkit.WaitFor(t, 5*time.Second, "the refusal in the log", func() bool {
			return logs.HasLine("TLS handshake refused", "port=client", "certificate")
		})
	})

	t.Run("untrusted peer refused", func(t *testing.T) {
		termBefore := maxTerm(c)
		// A would-be member with a certificate of another CA, which
		// knows (and trusts) the ensemble's public peer CA.
		rogue := newPeerTLS(&tls.Config{Certificates: []tls.Certificate{rogueCA.Issue(t, testkit.Loopback("member 4"))}, RootCAs: peerCA.Pool})
		// One with a proper member certificate: the control.
		proper := newPeerTLS(&tls.Config{Certificates: []tls.Certificate{peerCA.Issue(t, testkit.Loopback("member 5"))}, RootCAs: peerCA.Pool})
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
			untrusting := newPeerTLS(&tls.Config{Certificates: []tls.Certificate{peerCA.Issue(t, testkit.Loopback("member 6"))}, RootCAs: rogueCA.Pool})
			var unknown x509.UnknownAuthorityError
			if _, err := peerStatus(addr, untrusting); !errors.As(err, &unknown) {
				t.Fatalf("dialing member %s while trusting another CA: %v, want x509.UnknownAuthorityError", cfg.ID, err)
			}
			if _, err := peerStatus(addr, proper); err != nil {
				t.Fatalf("member %s refused a status call with a member certificate: %v", cfg.ID, err)
			}
		}
		testkit.WaitFor(t, 5*time.Second, "the refusal in the log", func() bool {
			return logs.HasLine("TLS handshake refused", "port=peer", "certificate")
		})

		// No effect on the ensemble: nobody took the rogue's term, and
		// writes still replicate.
		if term := maxTerm(c); term >= termBefore+100 {
			t.Fatalf("a member took the untrusted peer's term %d", term)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		w, err := tlsConnect(ctx, c.Servers(), trusted)
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
// Unlike client.FourLetter it half-closes after the word, as nc does: the
// test is about what a TLS port makes of that.
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
	mux := newPeerMux(nil, testkit.Listen(t), func(c net.Conn) { c.Close() }, slog.New(slog.DiscardHandler))
	mux.start()
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
	rc, err := dialRPC(nil, addr, 2*time.Second, pt)
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
	for _, m := range c.Members() {
		term, _ := strconv.ParseUint(m.raft.Stats()["term"], 10, 64)
		top = max(top, term)
	}
	return top
}
