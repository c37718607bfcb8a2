package main

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// TestServerClientIdentity: --tls-client-identity (or its config key)
// picks what of a client certificate is its x509 identity; bad values are
// usage errors naming the flag and the key.
func TestServerClientIdentity(t *testing.T) {
	ca := newTLSFiles(t, "identity")
	srvCert, srvKey := ca.issue("server")
	addr := procPorts(t, 1)[0]
	dev := []string{"server", "--dev", "--client-addr", addr}
	tlsFlags := []string{"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", ca.CA}

	t.Run("bad values", func(t *testing.T) {
		badFile := filepath.Join(t.TempDir(), "coordrun.yaml")
		if err := os.WriteFile(badFile, []byte("tls-client-identity: spiffe\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			args []string
			want []string
		}{
			{"unknown flag value", append(append(dev, tlsFlags...), "--tls-client-identity", "subject"),
				[]string{"--tls-client-identity", "config key tls-client-identity", `"subject"`, "dn, san-dns, san-uri, san-email, san-ip, cn, o, ou"}},
			{"unknown config value", append(append(dev, tlsFlags...), "--config", badFile),
				[]string{"config key tls-client-identity", `"spiffe"`}},
			{"attribute without a client CA", append(dev, "--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-identity", "o"),
				[]string{"--tls-client-identity o needs --tls-client-ca"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, out := procRun(t, 15*time.Second, tc.args...)
				if code != exitUsage {
					t.Fatalf("exit %d, want %d\n%s", code, exitUsage, out)
				}
				for _, w := range tc.want {
					if !strings.Contains(out, w) {
						t.Errorf("output does not mention %q:\n%s", w, out)
					}
				}
			})
		}
	})

	t.Run("shared identity from the config file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "coordrun.yaml")
		cfg := "tls-cert: " + srvCert + "\ntls-key: " + srvKey + "\ntls-client-ca: " + ca.CA + "\ntls-client-identity: o\n"
		if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		p := procStart(t, "server", append(dev, "--config", file)...)
		host1 := orgClient(t, ca, addr, "host1", "ops", p)
		host2 := orgClient(t, ca, addr, "host2", "ops", p)
		host3 := orgClient(t, ca, addr, "host3", "other", p)
		if _, err := host1.Create("/ops", []byte("shared"), 0, []zk.ACL{{Perms: zk.PermAll, Scheme: "x509", ID: "O=ops"}}); err != nil {
			t.Fatal(err)
		}
		if data, _, err := host2.Get("/ops"); err != nil || string(data) != "shared" {
			t.Fatalf("host2 (O=ops): %q, %v", data, err)
		}
		if _, _, err := host3.Get("/ops"); !errors.Is(err, zk.ErrNoAuth) {
			t.Fatalf("host3 (O=other): %v, want NOAUTH", err)
		}
	})
}

// orgClient connects over TLS with a new certificate CN=cn,O=o of ca.
func orgClient(t *testing.T, ca *tlsFiles, addr, cn, o string, server *proc) *zk.Conn {
	t.Helper()
	key := tlsKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: tlsSerial(t),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{o}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{RootCAs: ca.pool(), Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	procWait(t, 15*time.Second, "ruok over TLS", func() bool {
		return tlsRuok(addr, tc) == "imok" || !server.running()
	})
	if !server.running() {
		t.Fatalf("the server exited:\n%s", server.stderr.String())
	}
	dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
		return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, network, address, tc)
	}
	conn, events, err := zk.Connect([]string{addr}, 5*time.Second, zk.WithLogger(procQuiet{}), zk.WithDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	deadline := time.After(15 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn
			}
		case <-deadline:
			t.Fatalf("%s: no session over TLS", cn)
		}
	}
}
