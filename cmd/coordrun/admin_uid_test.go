package main

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// nobody is the uid and gid another local user's commands run as.
const nobody = 65534

// adminMember starts a member as this (root) test process, with an admin
// socket and a super digest for admin:s3cret, and returns it with its
// socket's path.
func adminMember(t *testing.T, id string, join bool, peers []ensemble.Peer, pl net.Listener) (*ensemble.Member, string) {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "crs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sum := sha1.Sum([]byte("admin:s3cret"))
	cl := testkit.Listen(t)
	m, err := ensemble.Start(ensemble.Config{
		ID: id, DataDir: t.TempDir(), PeerListener: pl, ClientListener: cl, ClientAddr: cl.Addr().String(),
		Peers: peers, Join: join,
		AdminSocket:       filepath.Join(sockDir, "admin.sock"),
		SuperDigest:       "admin:" + base64.StdEncoding.EncodeToString(sum[:]),
		MinSessionTimeout: 500 * time.Millisecond, HeartbeatTimeout: time.Second, ElectionTimeout: time.Second,
		Logger: testkit.Logger("member-" + id),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, filepath.Join(sockDir, "admin.sock")
}

// runAs runs the coordrun binary bin with args as uid (0: this process's
// own), and returns its combined output and exit error.
func runAs(t *testing.T, uid uint32, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(procEnv(), "HOME=/")
	cmd.Dir = "/"
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestAdminCommandsAsAnotherUser: another local user (uid 65534) gets
// neither a snapshot nor a membership change from a member run as root,
// whether over loopback TCP or the admin socket; root gets both on the
// admin socket, and the super digest's credentials get a change over TCP.
// The saved snapshot holds the data but no digest hash.
func TestAdminCommandsAsAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to run commands as another uid")
	}
	// A copy of the binary that uid 65534 may run, and a folder it may
	// write to.
	shared, err := os.MkdirTemp("", "coordrun-uid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(shared, "coordrun")
	copyFile(t, procBin, bin, 0o755)

	pl1 := testkit.Listen(t)
	p1 := ensemble.Peer{ID: "1", Addr: pl1.Addr().String()}
	m1, sock := adminMember(t, "1", false, []ensemble.Peer{p1}, pl1)
	addr := m1.ClientAddr()
	zc := testkit.DialZK(t, []string{addr}, 4*time.Second)
	testkit.WaitFor(t, 10*time.Second, "a leader", func() bool { _, err := zc.Sync("/"); return err == nil })
	if err := zc.AddAuth("digest", []byte("ops:pw")); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.Create("/secret", []byte("TOPSECRET"), 0, zk.DigestACL(zk.PermAll, "ops", "pw")); err != nil {
		t.Fatal(err)
	}
	hash := strings.TrimPrefix(zk.DigestACL(zk.PermAll, "ops", "pw")[0].ID, "ops:")

	// uid 65534: refused every way, with the fix named.
	theirs := filepath.Join(shared, "theirs.snap")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ensemble", "snapshot", "save", theirs, "--servers", addr}, "snapshots need an administrator"},
		{[]string{"ensemble", "snapshot", "save", theirs, "--servers", addr, "--with-digests"}, "snapshots need an administrator"},
		{[]string{"ensemble", "snapshot", "save", theirs, "--admin-socket", sock}, "admin.sock"},
		{[]string{"ensemble", "add", "9", "127.0.0.1:1", "--servers", addr, "--timeout", "5s"}, "need an administrator"},
		{[]string{"ensemble", "remove", "1", "--servers", addr, "--timeout", "5s"}, "need an administrator"},
		{[]string{"ensemble", "add", "9", "127.0.0.1:1", "--admin-socket", sock, "--timeout", "5s"}, "admin.sock"},
		{[]string{"ensemble", "add", "9", "127.0.0.1:1", "--servers", addr, "--auth", "admin:wrong", "--timeout", "5s"}, "need an administrator"},
	} {
		out, err := runAs(t, nobody, bin, tc.args...)
		if err == nil || !strings.Contains(out, tc.want) || strings.Contains(out, "TOPSECRET") {
			t.Errorf("as uid %d: coordrun %s: %v\n%s\nwant a refusal naming %q", nobody, strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
	if _, err := os.Stat(theirs); err == nil {
		t.Error("uid 65534 saved a snapshot")
	}
	if st := m1.EnsembleStatus(testkit.Context(t, 5*time.Second)); len(st.Members) != 1 {
		t.Fatalf("members after refused changes: %+v", st.Members)
	}

	// Root on the admin socket: a snapshot without the digest hash, and a
	// member added.
	mine := filepath.Join(t.TempDir(), "mine.snap")
	if out, err := runAs(t, 0, procBin, "ensemble", "snapshot", "save", mine, "--admin-socket", sock); err != nil {
		t.Fatalf("snapshot save on the admin socket as root: %v\n%s", err, out)
	}
	b, err := os.ReadFile(mine)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("TOPSECRET")) || bytes.Contains(b, []byte(hash)) {
		t.Errorf("saved snapshot: data %v, digest hash %v; want the data without the hash",
			bytes.Contains(b, []byte("TOPSECRET")), bytes.Contains(b, []byte(hash)))
	}
	if fi, _ := os.Stat(mine); fi.Mode().Perm() != 0o600 {
		t.Errorf("snapshot file mode %v, want 0600", fi.Mode().Perm())
	}
	full := filepath.Join(t.TempDir(), "full.snap")
	if out, err := runAs(t, 0, procBin, "ensemble", "snapshot", "save", full, "--admin-socket", sock, "--with-digests"); err != nil {
		t.Fatalf("snapshot save --with-digests: %v\n%s", err, out)
	} else if b, _ := os.ReadFile(full); !bytes.Contains(b, []byte(hash)) {
		t.Error("--with-digests left the digest hash out")
	}

	pl2 := testkit.Listen(t)
	p2 := ensemble.Peer{ID: "2", Addr: pl2.Addr().String()}
	adminMember(t, "2", true, []ensemble.Peer{p1, p2}, pl2)
	if out, err := runAs(t, 0, procBin, "ensemble", "add", "2", p2.Addr, "--admin-socket", sock); err != nil || !strings.Contains(out, "server.2=") {
		t.Fatalf("ensemble add on the admin socket as root: %v\n%s", err, out)
	}
	// The super digest's credentials over TCP, from any local user.
	if out, err := runAs(t, nobody, bin, "ensemble", "remove", "2", "--servers", addr, "--auth", "admin:s3cret"); err != nil {
		t.Fatalf("ensemble remove with the super digest as uid %d: %v\n%s", nobody, err, out)
	}
	testkit.WaitFor(t, 10*time.Second, "member 2 removed", func() bool { return len(m1.EnsembleStatus(testkit.Context(t, 5*time.Second)).Members) == 1 })
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSuperDigestCommand: the password comes from stdin, the digest is
// ZooKeeper's, and a member takes it as its super-digest.
func TestSuperDigestCommand(t *testing.T) {
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetIn(strings.NewReader("s3cret\n"))
	root.SetArgs([]string{"ensemble", "super-digest", "admin"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum([]byte("admin:s3cret"))
	if want := "admin:" + base64.StdEncoding.EncodeToString(sum[:]) + "\n"; out.String() != want {
		t.Errorf("super-digest printed %q, want %q", out.String(), want)
	}
}

// TestServerSuperDigestFromConfig: a member takes super-digest from its
// config file, warns when others may read that file, and its admin socket
// and four-letter word list come from the flags.
func TestServerSuperDigestFromConfig(t *testing.T) {
	sum := sha1.Sum([]byte("admin:s3cret"))
	conf := filepath.Join(t.TempDir(), "member.yaml")
	if err := os.WriteFile(conf, []byte("super-digest: admin:"+base64.StdEncoding.EncodeToString(sum[:])+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "crs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "admin.sock")
	addr := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	p := procStart(t, "member", "server", "--dev", "--config", conf, "--client-addr", addr,
		"--admin-socket", sock, "--four-letter-words", "ruok,mntr")
	testkit.WaitFor(t, 20*time.Second, "the member serving", func() bool { out, _ := procWord(addr, "ruok", nil); return out == "imok" })
	if out := p.Out.String(); !strings.Contains(out, "holds super-digest but others may read it") {
		t.Errorf("no warning about a world-readable super-digest:\n%s", out)
	}
	if out, _ := procWord(addr, "srvr", nil); out != "srvr is not executed because it is not in the whitelist.\n" {
		t.Errorf("srvr off the list: %q", out)
	}
	testkit.WaitFor(t, 20*time.Second, "srvr on the admin socket", func() bool {
		out, _ := procWord(client.UnixPrefix+sock, "srvr", nil)
		return strings.Contains(out, "Mode: standalone")
	})
	// The super digest from the file lets a client reconfigure over TCP.
	out, err := runAs(t, 0, procBin, "ensemble", "remove", "99", "--servers", addr, "--auth", "admin:s3cret", "--timeout", "5s")
	if err == nil || strings.Contains(out, "need an administrator") || !strings.Contains(out, "bad arguments") {
		t.Errorf("remove 99 as super: %v\n%s\nwant bad arguments, past the identity check", err, out)
	}
}
