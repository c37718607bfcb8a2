package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
)

// TestRunX509Identity: supervisors on two hosts with their own
// certificates share the identity of their organization (the members map
// certificates by O), so both join one lock whose nodes only that
// identity may change; a client of another organization can read the
// lock (--acl world:anyone:r) but not touch it, and its supervisor is
// refused with exit 64.
func TestRunX509Identity(t *testing.T) {
	ca := testkit.NewCA(t, "test")
	srvCert, srvKey := tlsIssue(t, ca, "server")
	addr := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	srv := procStart(t, "tls server", "server", "--dev", "--client-addr", addr,
		"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", ca.File, "--tls-client-identity", "o")
	h1Cert, h1Key := ca.Files(t, "host1", ca.Issue(t, orgCert("host1", "ops")))
	h2Cert, h2Key := ca.Files(t, "host2", ca.Issue(t, orgCert("host2", "ops")))
	evCert, evKey := ca.Files(t, "eve", ca.Issue(t, orgCert("eve", "other")))
	evTLS := &tls.Config{RootCAs: ca.Pool, Certificates: mustKeyPair(t, evCert, evKey)}
	testkit.WaitFor(t, 15*time.Second, "ruok over TLS", func() bool { ans, _ := procWord(addr, "ruok", evTLS); return ans == "imok" || !srv.Running() })
	if !srv.Running() {
		t.Fatalf("the server exited with %d:\n%s", srv.Exit(t, time.Second), srv.Out.String())
	}
	creds := func(cert, key string) []string {
		return []string{"--servers", addr, "--tls-ca", ca.File, "--tls-cert", cert, "--tls-key", key}
	}
	const lock = "x509"
	dir := path.Join("/coordrun/locks", lock)
	gate := t.TempDir() + "/go"
	hold := []string{"--", "sh", "-c", "while [ ! -e " + gate + " ]; do sleep 0.02; done"}
	run := func(name, cert, key string) *proc {
		args := append(append([]string{"run", "--name", lock, "--session-timeout", "6s", "--acl", "world:anyone:r"}, creds(cert, key)...), hold...)
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
	testkit.WaitFor(t, 15*time.Second, "host1 to hold the lock", func() bool { st := state(); return st.Holder != nil && st.Holder.Holding })
	b := run("host2", h2Cert, h2Key)
	var st supervisor.LockState
	testkit.WaitFor(t, 15*time.Second, "host2 to queue behind host1", func() bool { st = state(); return len(st.Waiters) == 1 })
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
	if code := e.Exit(t, 20*time.Second); code != exitUsage || !strings.Contains(e.Out.String(), "x509:O=other") || !strings.Contains(e.Out.String(), "x509:O=ops") {
		t.Errorf("eve's supervisor: exit %d, want %d naming the ACL found and eve's identity:\n%s", code, exitUsage, e.Out.String())
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{a, b} {
		if code := p.Exit(t, 20*time.Second); code != 0 {
			t.Errorf("%s exited %d:\n%s", p.Name, code, p.Out.String())
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
