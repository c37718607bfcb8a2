package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// TestServerClientIdentity: --tls-client-identity (or its config key)
// picks what of a client certificate is its x509 identity; bad values are
// usage errors naming the flag and the key.
func TestServerClientIdentity(t *testing.T) {
	ca := testkit.NewCA(t, "identity")
	srvCert, srvKey := tlsIssue(t, ca, "server")
	addr := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	dev := []string{"server", "--dev", "--client-addr", addr}
	tlsFlags := []string{"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", ca.File}

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
		cfg := "tls-cert: " + srvCert + "\ntls-key: " + srvKey + "\ntls-client-ca: " + ca.File + "\ntls-client-identity: o\n"
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
func orgClient(t *testing.T, ca *testkit.CA, addr, cn, o string, server *proc) *zk.Conn {
	t.Helper()
	tc := ca.ClientTLS(ca.Issue(t, orgCert(cn, o)))
	testkit.WaitFor(t, 15*time.Second, "ruok over TLS", func() bool {
		ans, _ := procWord(addr, "ruok", tc)
		return ans == "imok" || !server.Running()
	})
	if !server.Running() {
		t.Fatalf("the server exited:\n%s", server.Out.String())
	}
	return testkit.DialZK(t, []string{addr}, 5*time.Second, testkit.ZKTLS(tc))
}
