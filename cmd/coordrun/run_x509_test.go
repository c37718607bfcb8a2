package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor"
)

// issueOrg is issue with an organization in the subject.
func (f *tlsFiles) issueOrg(name, org string) (certFile, keyFile string) {
	f.t.Helper()
	key := tlsKey(f.t)
	tmpl := &x509.Certificate{
		SerialNumber: tlsSerial(f.t),
		Subject:      pkix.Name{CommonName: name, Organization: []string{org}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
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

// TestRunX509Identity: supervisors on two hosts with their own
// certificates share the identity of their organization (the members map
// certificates by O), so both join one lock whose nodes only that
// identity may change; a client of another organization can read the
// lock but not touch it, and its supervisor is refused with exit 64.
func TestRunX509Identity(t *testing.T) {
	ca := newTLSFiles(t, "test")
	srvCert, srvKey := ca.issue("server")
	addr := procPorts(t, 1)[0]
	srv := procStart(t, "tls server", "server", "--dev", "--client-addr", addr,
		"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", ca.CA, "--tls-client-identity", "o")
	h1Cert, h1Key := ca.issueOrg("host1", "ops")
	h2Cert, h2Key := ca.issueOrg("host2", "ops")
	evCert, evKey := ca.issueOrg("eve", "other")
	evTLS := &tls.Config{RootCAs: ca.pool(), Certificates: mustKeyPair(t, evCert, evKey)}
	procWait(t, 15*time.Second, "ruok over TLS", func() bool { return tlsRuok(addr, evTLS) == "imok" || !srv.running() })
	if !srv.running() {
		t.Fatalf("the server exited with %d:\n%s", srv.exitCode(t, time.Second), srv.stderr.String())
	}
	creds := func(cert, key string) []string {
		return []string{"--servers", addr, "--tls-ca", ca.CA, "--tls-cert", cert, "--tls-key", key}
	}
	const lock = "x509"
	dir := path.Join("/coordrun/locks", lock)
	gate := t.TempDir() + "/go"
	hold := []string{"--", "sh", "-c", "while [ ! -e " + gate + " ]; do sleep 0.02; done"}
	run := func(name, cert, key string) *proc {
		args := append(append([]string{"run", "--name", lock, "--session-timeout", "6s"}, creds(cert, key)...), hold...)
		return procStart(t, name, args...)
	}
	a := run("host1", h1Cert, h1Key)
	state := func() supervisor.LockState {
		cmd := exec.Command(procBin, append([]string{"status", "--json", lock}, creds(evCert, evKey)...)...)
		cmd.Env = procEnv()
		out, err := cmd.Output()
		var ls []supervisor.LockState
		if err != nil || json.Unmarshal(out, &ls) != nil || len(ls) != 1 {
			return supervisor.LockState{}
		}
		return ls[0]
	}
	procWait(t, 15*time.Second, "host1 to hold the lock", func() bool { st := state(); return st.Holder != nil && st.Holder.Holding })
	b := run("host2", h2Cert, h2Key)
	var st supervisor.LockState
	procWait(t, 15*time.Second, "host2 to queue behind host1", func() bool { st = state(); return len(st.Waiters) == 1 })
	if st.ACL != "x509:O=ops:cdrwa,world:anyone:r" || st.Open {
		t.Errorf("lock folder ACL %q (open %v), want x509:O=ops:cdrwa,world:anyone:r", st.ACL, st.Open)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eve, err := client.Connect(ctx, client.Config{Servers: []string{addr}, TLS: evTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer eve.Close()
	ids, err := eve.WhoAmI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !containsInfo(ids, wire.ClientInfo{AuthScheme: "x509", User: "O=other"}) {
		t.Errorf("whoAmI of eve's certificate = %+v, want x509 O=other", ids)
	}
	for what, err := range map[string]error{
		"delete the holder's queue node": eve.Delete(ctx, st.Holder.Node, -1),
		"delete the run node":            eve.Delete(ctx, path.Join(dir, "run"), -1),
		"set the folder's data":          func() error { _, err := eve.Set(ctx, dir, nil, -1); return err }(),
		"set the holder's node's data":   func() error { _, err := eve.Set(ctx, st.Holder.Node, nil, -1); return err }(),
		"create a node in the folder": func() error {
			_, err := eve.Create(ctx, path.Join(dir, "lock-x-"), nil, wire.FlagEphemeralSequential, client.OpenACL)
			return err
		}(),
	} {
		if !errors.Is(err, wire.ErrNoAuth) {
			t.Errorf("eve could %s: %v, want NOAUTH", what, err)
		}
	}
	e := run("eve", evCert, evKey)
	if code := e.exitCode(t, 20*time.Second); code != exitUsage || !strings.Contains(e.stderr.String(), "x509:O=other") || !strings.Contains(e.stderr.String(), "x509:O=ops") {
		t.Errorf("eve's supervisor: exit %d, want %d naming the ACL found and eve's identity:\n%s", code, exitUsage, e.stderr.String())
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{a, b} {
		if code := p.exitCode(t, 20*time.Second); code != 0 {
			t.Errorf("%s exited %d:\n%s", p.name, code, p.stderr.String())
		}
	}
}

func containsInfo(ids []wire.ClientInfo, want wire.ClientInfo) bool {
	for _, id := range ids {
		if id == want {
			return true
		}
	}
	return false
}
