package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
)

// TestEnsembleSecret: each run prints a new secret of 32 random bytes in
// base64, which a server takes from a 0600 file.
func TestEnsembleSecret(t *testing.T) {
	var seen []string
	for i := 0; i < 2; i++ {
		code, out := procRun(t, 10*time.Second, "ensemble", "secret")
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
		if code != 0 || err != nil || len(b) != 32 {
			t.Fatalf("exit %d, %d bytes (%v): %q", code, len(b), err, out)
		}
		seen = append(seen, out)
	}
	if seen[0] == seen[1] {
		t.Fatal("the same secret twice")
	}
}

// TestPeerCredentialFlags: a member on a routable peer address refuses to
// start without peer credentials, and says how to give them; the secret
// file must be its owner's alone and long enough; --insecure-peers starts
// it with one WARN line.
func TestPeerCredentialFlags(t *testing.T) {
	addrs := testkit.FreeAddrs(t, "127.0.0.1", 2)
	base := func(dir string, extra ...string) []string {
		return append([]string{"server", "--id", "1", "--data-dir", dir, "--client-addr", addrs[0], "--peer-addr", addrs[1],
			// Dialed by the others at a routable address, forwarded here.
			"--peers", "1=192.0.2.1:2888", "--peer-forwarded"}, extra...)
	}
	secretFile := func(text string, mode os.FileMode) string {
		p := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name  string
		extra []string
		want  []string
	}{
		{"no credentials", nil, []string{"192.0.2.1:2888 is not loopback", "coordrun ensemble secret > FILE", "--peer-secret-file", "--insecure-peers"}},
		{"secret readable by others", []string{"--peer-secret-file", secretFile("c2hvcnQ=", 0o644)}, []string{"chmod 600"}},
		{"short secret", []string{"--peer-secret-file", secretFile("c2hvcnQ=", 0o600)}, []string{"too short", "coordrun ensemble secret > FILE"}},
	} {
		code, out := procRun(t, 15*time.Second, base(t.TempDir(), tc.extra...)...)
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d:\n%s", tc.name, code, exitUsage, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: the error does not say %q:\n%s", tc.name, w, out)
			}
		}
	}

	p := procStart(t, "insecure member", base(t.TempDir(), "--insecure-peers")...)
	testkit.WaitFor(t, 15*time.Second, "the member to serve", func() bool {
		return strings.Contains(p.Out.String(), "serving") || !p.Running()
	})
	if n := strings.Count(p.Out.String(), "level=WARN msg=\"peer port unauthenticated"); n != 1 {
		t.Fatalf("%d WARN lines about the open peer port, want 1:\n%s", n, p.Out.String())
	}
}
