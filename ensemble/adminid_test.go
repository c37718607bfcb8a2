package ensemble

import (
	"bytes"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// The super user's credentials in these tests, and the digest a member is
// configured with for them.
const testSuperAuth = "admin:s3cret"

func testSuperDigest() string {
	sum := sha1.Sum([]byte(testSuperAuth))
	return "admin:" + base64.StdEncoding.EncodeToString(sum[:])
}

// withSuper configures members with the test's super digest.
func withSuper(cfg *Config) { cfg.SuperDigest = testSuperDigest() }

// socketDir is a directory for admin sockets with a short path: a Unix
// socket's path is limited to 108 bytes, more than t.TempDir may leave.
func socketDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "crs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// withAdminSocket gives each member an admin socket in dir, named by its id.
func withAdminSocket(dir string) func(*Config) {
	return func(cfg *Config) { cfg.AdminSocket = filepath.Join(dir, cfg.ID+".sock") }
}

func connectAs(t *testing.T, servers []string, auth ...string) *client.Client {
	t.Helper()
	var a []client.Auth
	for _, s := range auth {
		a = append(a, client.Auth{Scheme: "digest", Secret: []byte(s)})
	}
	cl, err := client.Connect(testkit.Context(t, 10*time.Second), client.Config{Servers: servers, SessionTimeout: 4 * time.Second, Auth: a})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestReconfigNeedsSuper: a loopback address is not enough for a
// membership change; the super digest is, and bad input is then judged.
func TestReconfigNeedsSuper(t *testing.T) {
	c := startCluster(t, 1, withSuper)
	ctx := testkit.Context(t, 20*time.Second)
	for _, who := range [][]string{nil, {"admin:wrong"}, {"other:s3cret"}} {
		cl := connectAs(t, c.Servers(), who...)
		if _, err := cl.Reconfig(ctx, "server.9=127.0.0.1:1", ""); !errors.Is(err, wire.ErrNoAuth) {
			t.Errorf("reconfig with auth %q: %v, want NOAUTH", who, err)
		}
	}
	if n := len(c.Member(0).raft.GetConfiguration().Configuration().Servers); n != 1 {
		t.Fatalf("%d members after refused reconfigs, want 1", n)
	}
	super := connectAs(t, c.Servers(), testSuperAuth)
	for _, tc := range []struct{ join, leave string }{
		{"server.9", ""},
		{"bogus=1.2.3.4:5", ""},
		{"server.9=nohostport", ""},
		{"", ""},
		{"", "99"},
	} {
		if _, err := super.Reconfig(ctx, tc.join, tc.leave); !errors.Is(err, wire.ErrBadArguments) {
			t.Errorf("super reconfig(%q, %q): %v, want BADARGUMENTS", tc.join, tc.leave, err)
		}
	}
	// The super identity also passes ACLs, as on ZooKeeper.
	zc := testkit.DialZK(t, c.Servers(), 4*time.Second)
	if err := zc.AddAuth("digest", []byte("u:p")); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.Create("/locked", []byte("x"), 0, zk.DigestACL(zk.PermAll, "u", "p")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := super.Get(ctx, "/locked"); err != nil {
		t.Errorf("super read of a digest-only node: %v", err)
	}
	// Super over TCP still needs loopback or --admin-from.
	m := c.Member(0)
	for _, tc := range []struct {
		addr net.Addr
		auth []tree.Identity
		want wire.Code
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, []tree.Identity{superID}, wire.OK},
		{&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 1}, []tree.Identity{superID}, wire.ErrReconfigDisabled},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, []tree.Identity{{Scheme: "ip", ID: "127.0.0.1"}}, wire.ErrNoAuth},
		{&net.UnixAddr{Name: "uid=0@admin-socket", Net: "unix"}, []tree.Identity{superID}, wire.OK},
	} {
		if got := m.reconfigRefusal(tc.addr, tc.auth); got != tc.want {
			t.Errorf("reconfig from %v as %v: %v, want %v", tc.addr, tc.auth, got, tc.want)
		}
	}
}

// snapOver asks for a snapshot with word on a fresh connection to addr
// (network tcp or unix) and returns what came back.
func snapOver(t *testing.T, network, addr, word string) []byte {
	t.Helper()
	nc, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := nc.Write([]byte(word)); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(nc)
	return b
}

// TestSnapshotNeedsAdmin: snap over TCP from loopback is refused without
// an administrator's certificate; on the admin socket it is served, with
// digest hashes and session passwords only when snpf asks for them.
func TestSnapshotNeedsAdmin(t *testing.T) {
	dir := socketDir(t)
	c := startCluster(t, 1, withAdminSocket(dir))
	sock := filepath.Join(dir, "1.sock")
	zc := testkit.DialZK(t, c.Servers(), 4*time.Second)
	if err := zc.AddAuth("digest", []byte("u:p")); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.Create("/secret", []byte("TOPSECRET"), 0, zk.DigestACL(zk.PermAll, "u", "p")); err != nil {
		t.Fatal(err)
	}
	hash := strings.TrimPrefix(zk.DigestACL(zk.PermAll, "u", "p")[0].ID, "u:")

	for _, word := range []string{snapshotWord, snapshotFullWord} {
		out := snapOver(t, "tcp", c.Servers()[0], word)
		if !bytes.HasPrefix(out, []byte("error: snapshots need an administrator")) || bytes.Contains(out, []byte("TOPSECRET")) {
			t.Fatalf("%s over TCP from loopback: %q", word, out)
		}
	}

	red := snapOver(t, "unix", sock, snapshotWord)
	_, rt, err := ReadBackup(bytes.NewReader(red))
	if err != nil {
		t.Fatalf("snap on the admin socket: %v (%q)", err, red[:min(len(red), 200)])
	}
	if bytes.Contains(red, []byte(hash)) {
		t.Error("the redacted snapshot holds the digest hash")
	}
	if !bytes.Contains(red, []byte("TOPSECRET")) {
		t.Error("the redacted snapshot lacks the node's data")
	}
	acl, _, err := rt.GetACL("/secret", []tree.Identity{superID})
	if err != nil || len(acl) != 1 || acl[0].ID != "u:"+tree.RedactedDigest {
		t.Errorf("redacted ACL %+v %v, want u:%s", acl, err, tree.RedactedDigest)
	}
	if rt.RedactedDigests() != 1 {
		t.Errorf("%d redacted digests counted, want 1", rt.RedactedDigests())
	}
	// Session passwords are replaced: the live session's is not there.
	var live tree.SessionInfo
	c.Member(0).view(func(tr *tree.Tree, _ int64) { live = tr.Sessions()[0] })
	if got, ok := rt.Session(live.ID); !ok || bytes.Equal(got.Password, live.Password) || len(got.Password) != 16 {
		t.Errorf("redacted session %x: password %x (live %x), found %v", live.ID, got.Password, live.Password, ok)
	}

	full := snapOver(t, "unix", sock, snapshotFullWord)
	_, ft, err := ReadBackup(bytes.NewReader(full))
	if err != nil {
		t.Fatalf("snpf on the admin socket: %v", err)
	}
	if !bytes.Contains(full, []byte(hash)) {
		t.Error("snpf left out the digest hash")
	}
	if got, _ := ft.Session(live.ID); !bytes.Equal(got.Password, live.Password) {
		t.Error("snpf changed a session password")
	}

	// A member restored from the redacted snapshot holds the data; the
	// digest entry matches no password, and super still reads it.
	file := filepath.Join(t.TempDir(), "backup")
	if err := os.WriteFile(file, red, 0o600); err != nil {
		t.Fatal(err)
	}
	r := startCluster(t, 1, func(cfg *Config) { cfg.Restore = file; withSuper(cfg) })
	rc := testkit.DialZK(t, r.Servers(), 4*time.Second)
	if err := rc.AddAuth("digest", []byte("u:p")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rc.Get("/secret"); err != zk.ErrNoAuth {
		t.Errorf("restored redacted /secret with u:p: %v, want NOAUTH", err)
	}
	super := connectAs(t, r.Servers(), testSuperAuth)
	if data, _, err := super.Get(testkit.Context(t, 5*time.Second), "/secret"); err != nil || string(data) != "TOPSECRET" {
		t.Errorf("super read of restored /secret: %q %v", data, err)
	}
}

// TestAdminSocket: a connection on the admin socket is the super user for
// sessions, reconfig and every four-letter word; one from a uid not
// allowed is refused with a line naming the setting, and the socket file
// is 0600 and gone after Close.
func TestAdminSocket(t *testing.T) {
	dir := socketDir(t)
	c := startCluster(t, 1, withAdminSocket(dir))
	sock := filepath.Join(dir, "1.sock")
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket %v %v, want mode 0600", fi, err)
	}
	ctx := testkit.Context(t, 20*time.Second)
	admin := connectAs(t, []string{client.UnixPrefix + sock})
	if _, err := admin.Reconfig(ctx, "", "99"); !errors.Is(err, wire.ErrBadArguments) {
		t.Errorf("reconfig on the admin socket: %v, want BADARGUMENTS (past the identity check)", err)
	}
	ids, err := admin.WhoAmI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var schemes []string
	for _, id := range ids {
		schemes = append(schemes, id.AuthScheme)
	}
	if !strings.Contains(strings.Join(schemes, ","), "super") {
		t.Errorf("whoami on the admin socket: %v, want super among them", ids)
	}
	if out, err := client.FourLetter(ctx, client.UnixPrefix+sock, "envi", nil); err != nil || !strings.Contains(out, "Environment:") {
		t.Errorf("envi on the admin socket: %q %v", out, err)
	}
	if out := fourLetter(t, c.Servers()[0], "envi"); out != notWhitelisted("envi") {
		t.Errorf("envi on the client port: %q", out)
	}

	c.Stop(0)
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("admin socket left after Close: %v", err)
	}

	// A member that allows another uid only refuses this one (the test's),
	// whatever it asks; its socket is open to the member's group.
	o := startCluster(t, 1, withAdminSocket(dir), func(cfg *Config) { cfg.AdminSocketUIDs = []int{12345} })
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("admin socket with other uids: %v %v, want mode 0660", fi, err)
	}
	me := os.Getuid()
	for _, word := range []string{"snap", "ruok"} {
		out, _ := client.FourLetter(ctx, client.UnixPrefix+sock, word, nil)
		if !strings.Contains(out, fmt.Sprintf("uid %d may not use the admin socket", me)) || !strings.Contains(out, "--admin-socket-uids") {
			t.Errorf("%s as a uid not allowed: %q", word, out)
		}
	}
	if _, err := client.Connect(testkit.Context(t, 2*time.Second), client.Config{Servers: []string{client.UnixPrefix + sock}}); err == nil {
		t.Error("a session on the admin socket from a uid not allowed")
	}
	_ = o
}

// TestAdminSocketStale: a socket file left by a member that died is
// replaced; a file that is not a socket is refused.
func TestAdminSocketStale(t *testing.T) {
	dir := socketDir(t)
	stale := filepath.Join(dir, "1.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	c := startCluster(t, 1, withAdminSocket(dir))
	if out := snapOver(t, "unix", stale, "ruok"); string(out) != "imok" {
		t.Errorf("ruok on the replaced socket: %q", out)
	}
	c.Stop(0)
	plain := filepath.Join(dir, "2.sock")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Start(Config{ID: "2", DataDir: t.TempDir(), PeerAddr: "127.0.0.1:0", ClientAddr: "127.0.0.1:0", AdminSocket: plain})
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("start on a plain file as admin socket: %v", err)
	}
}

// TestSuperX509: a client certificate whose identity SuperX509 names is
// the super user: it gets a snapshot over TLS and may reconfigure; another
// certificate of the same CA gets neither.
func TestSuperX509(t *testing.T) {
	ca := testkit.NewCA(t, "admin CA")
	c := startCluster(t, 1, func(cfg *Config) {
		cfg.ClientTLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, testkit.Loopback("member"))}, ClientCAs: ca.Pool}
		cfg.SuperX509 = []string{"CN=ops-admin"}
	})
	addr := c.Servers()[0]
	admin := ca.ClientTLS(ca.Issue(t, testkit.CertSpec{Subject: pkix.Name{CommonName: "ops-admin"}}))
	user := ca.ClientTLS(ca.Issue(t, testkit.CertSpec{Subject: pkix.Name{CommonName: "ops-user"}}))
	ctx := testkit.Context(t, 20*time.Second)

	out, err := client.FourLetter(ctx, addr, snapshotWord, admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadBackup(strings.NewReader(out)); err != nil {
		t.Errorf("snap with the admin certificate: %v (%.80q)", err, out)
	}
	if out, _ := client.FourLetter(ctx, addr, snapshotWord, user); !strings.HasPrefix(out, "error: snapshots need an administrator") {
		t.Errorf("snap with another certificate: %.80q", out)
	}
	for cert, want := range map[*tls.Config]wire.Code{admin: wire.ErrBadArguments, user: wire.ErrNoAuth} {
		cl, err := client.Connect(ctx, client.Config{Servers: []string{addr}, SessionTimeout: 4 * time.Second, TLS: cert})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Reconfig(ctx, "", "99"); !errors.Is(err, want) {
			t.Errorf("reconfig as %v: %v, want %v", cert.Certificates[0].Leaf, err, want)
		}
		cl.Close()
	}
}

func TestAdminConfig(t *testing.T) {
	ca := testkit.NewCA(t, "config CA")
	withTLS := func(cfg *Config) {
		cfg.ClientTLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, testkit.Loopback("m"))}, ClientCAs: ca.Pool}
	}
	for name, c := range map[string]struct {
		tweak func(*Config)
		field string // "" for a valid config
	}{
		"super digest":             {withSuper, ""},
		"super digest, no hash":    {func(cfg *Config) { cfg.SuperDigest = "admin" }, "SuperDigest"},
		"super digest, plain text": {func(cfg *Config) { cfg.SuperDigest = "admin:s3cret" }, "SuperDigest"},
		"super x509 without TLS":   {func(cfg *Config) { cfg.SuperX509 = []string{"CN=a"} }, "SuperX509"},
		"super x509 with TLS":      {func(cfg *Config) { withTLS(cfg); cfg.SuperX509 = []string{"CN=a"} }, ""},
		"uids without a socket":    {func(cfg *Config) { cfg.AdminSocketUIDs = []int{1000} }, "AdminSocketUIDs"},
		"negative uid":             {func(cfg *Config) { cfg.AdminSocket = "/x"; cfg.AdminSocketUIDs = []int{-1} }, "AdminSocketUIDs"},
		"unknown word":             {func(cfg *Config) { cfg.FourLetterWords = []string{"dump"} }, "FourLetterWords"},
	} {
		cfg := Config{ID: "1", DataDir: t.TempDir(), PeerAddr: "127.0.0.1:0"}
		c.tweak(&cfg)
		err := cfg.setDefaults()
		var ce *ConfigError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.field != "" && (!errors.As(err, &ce) || ce.Field != c.field):
			t.Errorf("%s: %v, want an error of field %s", name, err, c.field)
		}
	}
	if err := checkSuperDigest("admin:x"); err == nil || !strings.Contains(err.Error(), "coordrun ensemble super-digest USER") {
		t.Errorf("bad digest error: %v", err)
	}
}
