package main

// TLS at the process level: the --tls-* flags of the server and of the
// client commands, against the real binary.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble"
)

// tlsFiles is a throwaway CA whose certificates are written as PEM files.
type tlsFiles struct {
	t    *testing.T
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	CA   string // the CA certificate's file
}

func newTLSFiles(t *testing.T, name string) *tlsFiles {
	t.Helper()
	f := &tlsFiles{t: t, dir: t.TempDir()}
	f.key = tlsKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          tlsSerial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &f.key.PublicKey, f.key)
	if err != nil {
		t.Fatal(err)
	}
	if f.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	f.CA = f.write(name+"-ca.pem", "CERTIFICATE", der)
	return f
}

// issue writes a loopback certificate (127.0.0.1, localhost) for server
// and client use and its key; it returns both files.
func (f *tlsFiles) issue(name string) (certFile, keyFile string) {
	f.t.Helper()
	key := tlsKey(f.t)
	tmpl := &x509.Certificate{
		SerialNumber: tlsSerial(f.t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.cert, &key.PublicKey, f.key)
	if err != nil {
		f.t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.write(name+".pem", "CERTIFICATE", der), f.write(name+"-key.pem", "PRIVATE KEY", kder)
}

func (f *tlsFiles) write(name, typ string, der []byte) string {
	f.t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *tlsFiles) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(f.cert)
	return p
}

func tlsKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func tlsSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// tlsRuok asks a TLS client port "ruok".
func tlsRuok(addr string, tc *tls.Config) string {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, tc)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("ruok")); err != nil {
		return ""
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

// procRun runs the binary to completion and returns its exit code and
// combined output.
func procRun(t *testing.T, d time.Duration, args ...string) (int, string) {
	t.Helper()
	p := procStart(t, args[0], args...)
	code := p.exitCode(t, d)
	return code, p.stderr.String()
}

// TestTLSClientPort: a --dev server with client TLS (client certificates
// required) serves run, status, cron list and ensemble status given the
// right --tls-* flags, and refuses the rest with exit 64.
func TestTLSClientPort(t *testing.T) {
	ca := newTLSFiles(t, "test")
	srvCert, srvKey := ca.issue("server")
	cliCert, cliKey := ca.issue("client")
	addr := procPorts(t, 1)[0]
	p := procStart(t, "tls server", "server", "--dev", "--client-addr", addr,
		"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", ca.CA)
	trusted := &tls.Config{RootCAs: ca.pool(), Certificates: mustKeyPair(t, cliCert, cliKey)}
	procWait(t, 15*time.Second, "ruok over TLS", func() bool {
		return tlsRuok(addr, trusted) == "imok" || !p.running()
	})
	if !p.running() {
		t.Fatalf("the server exited with %d", p.exitCode(t, time.Second))
	}
	if ans, _ := procFourLetter(addr, "ruok"); ans != "" {
		t.Fatalf("plaintext ruok on the TLS port answered %q", ans)
	}

	// A plaintext client keeps being refused until the connect timeout
	// (10s): start it now and collect it last.
	plain := procStart(t, "plaintext run", "run", "--servers", addr, "--", "true")

	creds := []string{"--servers", addr, "--tls-ca", ca.CA, "--tls-cert", cliCert, "--tls-key", cliKey}
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
	code, msg = procRun(t, 30*time.Second, "run", "--servers", addr, "--tls-ca", ca.CA, "--", "true")
	if code != 64 {
		t.Fatalf("run without a client certificate: exit %d, want 64\n%s", code, msg)
	}
	t.Logf("certificate failures took %v", time.Since(start))

	if code := plain.exitCode(t, 30*time.Second); code != 64 {
		t.Fatalf("plaintext run against the TLS port: exit %d, want 64\n%s", code, plain.stderr.String())
	}
}

// TestTLSPeers: three member processes with peer mutual TLS and client
// TLS form a healthy ensemble, and a job runs against it.
func TestTLSPeers(t *testing.T) {
	ca := newTLSFiles(t, "client")
	peerCA := newTLSFiles(t, "peer")
	addrs := procPorts(t, 6)
	var peers []string
	for i := 0; i < 3; i++ {
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, addrs[3+i]))
	}
	for i := 0; i < 3; i++ {
		cert, key := ca.issue(fmt.Sprintf("member%d", i+1))
		pcert, pkey := peerCA.issue(fmt.Sprintf("peer%d", i+1))
		procStart(t, fmt.Sprintf("member %d", i+1), "server",
			"--id", fmt.Sprint(i+1), "--data-dir", t.TempDir(),
			"--client-addr", addrs[i], "--peer-addr", addrs[3+i], "--peers", strings.Join(peers, ","),
			"--heartbeat-timeout", "1s", "--election-timeout", "1s",
			"--tls-cert", cert, "--tls-key", key,
			"--peer-tls-cert", pcert, "--peer-tls-key", pkey, "--peer-tls-ca", peerCA.CA)
	}
	servers := strings.Join(addrs[:3], ",")
	code, out := procRun(t, 60*time.Second, "ensemble", "status", "--servers", servers, "--tls-ca", ca.CA, "--wait", "45s")
	if code != 0 {
		t.Fatalf("ensemble status --wait over TLS: exit %d\n%s", code, out)
	}
	if code, out := procRun(t, 30*time.Second, "run", "--servers", servers, "--tls-ca", ca.CA, "--", "true"); code != 0 {
		t.Fatalf("run over TLS: exit %d\n%s", code, out)
	}
}

// TestTLSFlagErrors: unreadable, malformed or mismatched files and
// incomplete flag sets are usage errors (exit 64) that name the file.
func TestTLSFlagErrors(t *testing.T) {
	ca := newTLSFiles(t, "test")
	cert, key := ca.issue("a")
	_, otherKey := ca.issue("b")
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	addr := procPorts(t, 1)[0]
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
		{"server: client CA without cert", append(server, "--tls-client-ca", ca.CA), []string{"--tls-cert"}},
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
