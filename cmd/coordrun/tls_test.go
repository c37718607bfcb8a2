package main

// TLS at the process level: the --tls-* flags of the server and of the
// client commands, against the real binary.

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/internal/testkit"
)

// tlsIssue writes a loopback certificate of ca named name, good for
// servers and clients, and its key as PEM files.
func tlsIssue(t *testing.T, ca *testkit.CA, name string) (certFile, keyFile string) {
	t.Helper()
	return ca.Files(t, name, ca.Issue(t, testkit.Loopback(name)))
}

// orgCert is a client certificate CN=cn,O=o.
func orgCert(cn, o string) testkit.CertSpec {
	return testkit.CertSpec{Subject: pkix.Name{CommonName: cn, Organization: []string{o}}}
}

// procRun runs the binary to completion and returns its exit code and
// combined output.
func procRun(t *testing.T, d time.Duration, args ...string) (int, string) {
	t.Helper()
	p := procStart(t, args[0], args...)
	code := p.Exit(t, d)
	return code, p.Out.String()
}

// TestTLSClientPort: a --dev server with client TLS (client certificates
// required) serves run, status, cron list and ensemble status given the
// right --tls-* flags, and refuses the rest with exit 64.
func TestTLSClientPort(t *testing.T) {
	ca := testkit.NewCA(t, "test")
	srvCert, srvKey := tlsIssue(t, ca, "server")
	cliCert, cliKey := tlsIssue(t, ca, "client")
	addr := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	p := procStart(t, "tls server", "server", "--dev", "--client-addr", addr,
		"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", ca.File)
	trusted := &tls.Config{RootCAs: ca.Pool, Certificates: mustKeyPair(t, cliCert, cliKey)}
	testkit.WaitFor(t, 15*time.Second, "ruok over TLS", func() bool {
		ans, _ := procWord(addr, "ruok", trusted)
		return ans == "imok" || !p.Running()
	})
	if !p.Running() {
		t.Fatalf("the server exited with %d", p.Exit(t, time.Second))
	}
	if ans, _ := procWord(addr, "ruok", nil); ans != "" {
		t.Fatalf("plaintext ruok on the TLS port answered %q", ans)
	}

	// A plaintext client keeps being refused until the connect timeout
	// (10s): start it now and collect it last.
	plain := procStart(t, "plaintext run", "run", "--servers", addr, "--", "true")

	creds := []string{"--servers", addr, "--tls-ca", ca.File, "--tls-cert", cliCert, "--tls-key", cliKey}
	if code, out := procRun(t, 30*time.Second, append(append([]string{"run"}, creds...), "--", "true")...); code != 0 {
		t.Fatalf("run over TLS: exit %d\n%s", code, out)
	}
	if code, out := procRun(t, 30*time.Second, append([]string{"status"}, creds...)...); code != 0 {
		t.Fatalf("status over TLS: exit %d\n%s", code, out)
	}
	if code, out := procRun(t, 30*time.Second, append([]string{"cron", "list"}, creds...)...); code != 0 {
		t.Fatalf("cron list over TLS: exit %d\n%s", code, out)
	}
	cmd := exec.Command(procBin, append([]string{"ensemble", "status", "--json"}, creds...)...)
	cmd.Env = procEnv()
	out, err := cmd.Output()
	var st ensemble.Status
	if err != nil || json.Unmarshal(out, &st) != nil || st.Leader != "1" {
		t.Fatalf("ensemble status over TLS: %v: %s", err, out)
	}

	// The server's certificate is not from a CA the system trusts, and
	// the server wants a client certificate: both fail at once (no wait
	// for the connect timeout) with exit 64 and say why.
	start := time.Now()
	code, msg := procRun(t, 30*time.Second, "run", "--servers", addr, "--tls-cert", cliCert, "--tls-key", cliKey, "--", "true")
	if code != 64 || !strings.Contains(msg, "certificate") {
		t.Fatalf("run trusting only the system roots: exit %d, want 64 naming the certificate problem\n%s", code, msg)
	}
	code, msg = procRun(t, 30*time.Second, "run", "--servers", addr, "--tls-ca", ca.File, "--", "true")
	if code != 64 {
		t.Fatalf("run without a client certificate: exit %d, want 64\n%s", code, msg)
	}
	t.Logf("certificate failures took %v", time.Since(start))

	if code := plain.Exit(t, 30*time.Second); code != 64 {
		t.Fatalf("plaintext run against the TLS port: exit %d, want 64\n%s", code, plain.Out.String())
	}
}

// TestTLSPeers: three member processes with peer mutual TLS and client
// TLS form a healthy ensemble, and a job runs against it.
func TestTLSPeers(t *testing.T) {
	ca := testkit.NewCA(t, "client")
	peerCA := testkit.NewCA(t, "peer")
	e, err := testkit.NewProcessEnsemble(procBin, "127.0.0.1", t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	e.Args = testkit.RaftFlags()
	e.SecretFile = "" // peer TLS instead
	for i := 0; i < 3; i++ {
		cert, key := tlsIssue(t, ca, fmt.Sprintf("member%d", i+1))
		pcert, pkey := tlsIssue(t, peerCA, fmt.Sprintf("peer%d", i+1))
		procStart(t, fmt.Sprintf("member %d", i+1), e.ServerArgs(i, "--tls-cert", cert, "--tls-key", key,
			"--peer-tls-cert", pcert, "--peer-tls-key", pkey, "--peer-tls-ca", peerCA.File)...)
	}
	servers := e.Servers()
	code, out := procRun(t, 60*time.Second, "ensemble", "status", "--servers", servers, "--tls-ca", ca.File, "--wait", "45s")
	if code != 0 {
		t.Fatalf("ensemble status --wait over TLS: exit %d\n%s", code, out)
	}
	if code, out := procRun(t, 30*time.Second, "run", "--servers", servers, "--tls-ca", ca.File, "--", "true"); code != 0 {
		t.Fatalf("run over TLS: exit %d\n%s", code, out)
	}
}

// TestTLSFlagErrors: unreadable, malformed or mismatched files and
// incomplete flag sets are usage errors (exit 64) that name the file.
func TestTLSFlagErrors(t *testing.T) {
	ca := testkit.NewCA(t, "test")
	cert, key := tlsIssue(t, ca, "a")
	_, otherKey := tlsIssue(t, ca, "b")
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	addr := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	server := []string{"server", "--dev", "--client-addr", addr}
	for _, tc := range []struct {
		name string
		args []string
		want []string // in the message
	}{
		{"server: missing cert", append(server, "--tls-cert", missing, "--tls-key", key), []string{missing}},
		{"server: cert not PEM", append(server, "--tls-cert", garbage, "--tls-key", key), []string{garbage, "no PEM certificate"}},
		{"server: key not PEM", append(server, "--tls-cert", cert, "--tls-key", garbage), []string{garbage, "no PEM private key"}},
		{"server: key of another cert", append(server, "--tls-cert", cert, "--tls-key", otherKey), []string{otherKey, cert, "not the key"}},
		{"server: cert without key", append(server, "--tls-cert", cert), []string{"--tls-key"}},
		{"server: client CA missing", append(server, "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", missing), []string{missing}},
		{"server: client CA without cert", append(server, "--tls-client-ca", ca.File), []string{"--tls-cert"}},
		{"server: peer cert without CA", append(server, "--peer-tls-cert", cert, "--peer-tls-key", key), []string{"--peer-tls-ca"}},
		{"server: peer CA not PEM", append(server, "--peer-tls-cert", cert, "--peer-tls-key", key, "--peer-tls-ca", garbage), []string{garbage}},
		{"run: missing CA", []string{"run", "--servers", addr, "--tls-ca", missing, "--", "true"}, []string{missing}},
		{"run: key of another cert", []string{"run", "--servers", addr, "--tls-cert", cert, "--tls-key", otherKey, "--", "true"}, []string{otherKey}},
		{"status: CA not PEM", []string{"status", "--servers", addr, "--tls-ca", garbage}, []string{garbage}},
		{"cron history: missing CA", []string{"cron", "history", "job", "--servers", addr, "--tls-ca", missing}, []string{missing}},
		{"ensemble status: missing key", []string{"ensemble", "status", "--servers", addr, "--tls-cert", cert, "--tls-key", missing}, []string{missing}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := procRun(t, 15*time.Second, tc.args...)
			if code != 64 {
				t.Fatalf("exit %d, want 64\n%s", code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not mention %q:\n%s", w, out)
				}
			}
		})
	}
}

func mustKeyPair(t *testing.T, cert, key string) []tls.Certificate {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return []tls.Certificate{kp}
}
