package main

// Process-level tests: the real coordrun binary, started as separate
// processes on loopback, driven by stock clients (Apache ZooKeeper's
// zkCli.sh, go-zookeeper) and by its own `ensemble status`.

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// procBin is the coordrun binary under test: $COORDRUN_BIN, or one built
// from this package by TestMain.
var procBin string

func TestMain(m *testing.M) {
	os.Exit(testkit.RunWithBinary(m, &procBin))
}

// --- helpers ----------------------------------------------------------------

// procEnv is the environment for child processes: ours without COORDRUN_*
// variables, which would configure the server behind the test's back.
func procEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COORDRUN_") {
			env = append(env, kv)
		}
	}
	return env
}

// procWord asks the client port at addr a four-letter word, over TLS
// with tc, allowing it 3s.
func procWord(addr, word string, tc *tls.Config) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return client.FourLetter(ctx, addr, word, tc)
}

// proc is one running coordrun process.
type proc = testkit.Process

// procStart starts the binary with args; the process is killed when the
// test ends, and its output is shown if the test failed.
func procStart(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(procBin, args...)
	cmd.Env = procEnv()
	return testkit.Spawn(t, name, cmd)
}

// procListening reports whether something accepts connections on addr.
func procListening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// procEnsemble is a 3-member ensemble of coordrun processes.
type procEnsemble struct {
	*testkit.ProcessEnsemble
	t     *testing.T
	procs []*proc
}

func procStartEnsemble(t *testing.T) *procEnsemble {
	t.Helper()
	layout, err := testkit.NewProcessEnsemble(procBin, "127.0.0.1", t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	layout.Args = append(testkit.RaftFlags(), "--log-level", "info")
	e := &procEnsemble{ProcessEnsemble: layout, t: t, procs: make([]*proc, 3)}
	for i := range e.procs {
		e.start(i)
	}
	e.waitHealthy(30*time.Second, 0)
	return e
}

// start (re)starts member i on its data dir and addresses.
func (e *procEnsemble) start(i int) {
	e.t.Helper()
	e.procs[i] = procStart(e.t, fmt.Sprintf("member %d", i+1), e.ServerArgs(i)...)
}

// status runs `coordrun ensemble status --json` against servers.
func procStatus(servers string) (ensemble.Status, error) {
	var st ensemble.Status
	cmd := exec.Command(procBin, "ensemble", "status", "--json", "--timeout", "2s", "--servers", servers)
	cmd.Env = procEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return st, fmt.Errorf("ensemble status: %v: %s", err, stderr.String())
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("ensemble status output %q: %v", out, err)
	}
	return st, nil
}

// healthy reports whether st shows three reachable members, one leader
// that all of them follow, and every member applied up to minApplied.
func procHealthy(st ensemble.Status, minApplied uint64) bool {
	if st.Leader == "" || len(st.Members) != 3 {
		return false
	}
	leaders := 0
	for _, m := range st.Members {
		if m.Error != "" || m.Leader != st.Leader || m.AppliedIndex < minApplied {
			return false
		}
		switch m.State {
		case "leader":
			leaders++
		case "follower":
		default:
			return false
		}
	}
	return leaders == 1
}

func (e *procEnsemble) waitHealthy(d time.Duration, minApplied uint64) ensemble.Status {
	e.t.Helper()
	var st ensemble.Status
	var err error
	testkit.WaitFor(e.t, d, "a healthy 3-member ensemble", func() bool {
		st, err = procStatus(e.Servers())
		return err == nil && procHealthy(st, minApplied)
	})
	return st
}

func procRetryable(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrClosing)
}

// procCreate creates path, retrying through connection loss until the
// deadline; ErrNodeExists after a lost reply means an earlier try won.
func procCreate(t *testing.T, conn *zk.Conn, path, data string, deadline time.Time) {
	t.Helper()
	uncertain := false
	for {
		_, err := conn.Create(path, []byte(data), 0, zk.WorldACL(zk.PermAll))
		if err == nil || (uncertain && errors.Is(err, zk.ErrNodeExists)) {
			return
		}
		if !procRetryable(err) || time.Now().After(deadline) {
			t.Fatalf("create %s: %v", path, err)
		}
		uncertain = true
		testkit.WaitFor(t, time.Until(deadline)+time.Second, "the client to reconnect", func() bool {
			return conn.State() == zk.StateHasSession || time.Now().After(deadline)
		})
	}
}

// --- zkCli.sh -----------------------------------------------------------------

const procZkCliPath = "/usr/share/zookeeper/bin/zkCli.sh"

// procZkCli runs Apache ZooKeeper's CLI against server: with args as a single
// command, or, without args, in its line mode reading stdin (one JVM for
// many commands). Stdout and stderr share one pipe so that command output
// and error messages stay in order. It returns the output and exit code.
func procZkCli(t *testing.T, server, stdin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, procZkCliPath, append([]string{"-server", server}, args...)...)
	// Logging goes nowhere (no SLF4J binding); keep log4j quiet should one
	// be installed, and make the JVM start quickly.
	cmd.Env = append(procEnv(),
		"JVMFLAGS=-Dzookeeper.root.logger=ERROR,CONSOLE -Dzookeeper.console.threshold=ERROR",
		"CLIENT_JVMFLAGS=-XX:TieredStopAtLevel=1 -Xshare:auto",
		"ZOO_LOG_DIR="+t.TempDir(),
	)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ctx.Err() != nil {
			t.Fatalf("zkCli.sh %v: %v\n%s", args, err, out.String())
		}
		code = ee.ExitCode()
	}
	// Drop the SLF4J "no binding" notices.
	var keep []string
	for _, l := range strings.Split(out.String(), "\n") {
		if !strings.HasPrefix(l, "SLF4J:") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n"), code
}

// procInOrder checks that each of wants occurs in out, after the previous one.
func procInOrder(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	rest := out
	for _, w := range wants {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("%s: %q missing (or out of order) in zkCli output:\n%s", what, w, out)
		}
		rest = rest[i+len(w):]
	}
}

func procDigest(userPass string) string {
	user, _, _ := strings.Cut(userPass, ":")
	sum := sha1.Sum([]byte(userPass))
	return user + ":" + base64.StdEncoding.EncodeToString(sum[:])
}

// --- tests ------------------------------------------------------------------

// TestZkCliAgainstEnsemble drives a 3-process ensemble with Apache
// ZooKeeper's own CLI, each session on a different member.
func TestZkCliAgainstEnsemble(t *testing.T) {
	if _, err := os.Stat(procZkCliPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("zkCli.sh is required in CI: %v", err)
		}
		t.Skipf("Apache ZooKeeper's CLI is not installed (%v)", err)
	}
	e := procStartEnsemble(t)
	alice := procDigest("alice:secret")

	// Session 1, on member 1: the basic commands, then a node only alice
	// may touch. Quitting closes the session, which removes its ephemeral.
	out, code := procZkCli(t, e.ClientAddrs[0], strings.Join([]string{
		"create /zkcli v1",
		"create /zkcli/child c1",
		"ls /zkcli",
		"get /zkcli",
		"set /zkcli v2",
		"get -s /zkcli",
		"stat /zkcli",
		"create -e -s /zkcli/eph- e1",
		"ls /zkcli",
		"delete /zkcli/child",
		"create /zkcli/tree t",
		"create /zkcli/tree/a a",
		"create /zkcli/tree/a/b b",
		"deleteall /zkcli/tree",
		"ls /zkcli",
		"addauth digest alice:secret",
		"create /zkcli/secure s3cret",
		"setAcl /zkcli/secure digest:" + alice + ":cdrwa",
		"getAcl /zkcli/secure",
		"get /zkcli/secure",
		"quit",
	}, "\n")+"\n")
	t.Logf("zkCli session 1 (exit %d):\n%s", code, out)
	eph := regexp.MustCompile(`Created /zkcli/(eph-\d{10})`).FindStringSubmatch(out)
	if eph == nil {
		t.Fatalf("create -e -s: no sequential node created:\n%s", out)
	}
	procInOrder(t, "session 1", out,
		"Created /zkcli\n",
		"Created /zkcli/child\n",
		"[child]\n",
		"v1\n",
		"v2\n", "dataVersion = 1\n", "numChildren = 1\n", // get -s
		"dataVersion = 1\n", "numChildren = 1\n", // stat
		"Created /zkcli/"+eph[1]+"\n",
		"[child, "+eph[1]+"]\n",
		"Created /zkcli/tree\n", "Created /zkcli/tree/a\n", "Created /zkcli/tree/a/b\n",
		"["+eph[1]+"]\n", // child deleted, tree deleted
		"Created /zkcli/secure\n",
		"'digest,'"+alice+"\n: cdrwa\n",
		"s3cret\n",
	)
	if strings.Contains(out, "Exception") || strings.Contains(out, "Insufficient permission") {
		t.Fatalf("session 1 reported an error:\n%s", out)
	}

	// Session 2, on member 2, without alice's credentials at first: every
	// access the node's ACL governs is denied, also with a wrong password.
	// (Deleting it is not among them: as in ZooKeeper, delete is checked
	// against the parent's ACL, here world:anyone.)
	out, code = procZkCli(t, e.ClientAddrs[1], strings.Join([]string{
		"ls /zkcli",
		"get /zkcli/secure",
		"getAcl /zkcli/secure",
		"set /zkcli/secure hacked",
		"create /zkcli/secure/kid k",
		"addauth digest alice:wrong",
		"get /zkcli/secure",
		"addauth digest alice:secret",
		"get /zkcli/secure",
		"create /zkcli/secure/kid k",
		"ls /zkcli/secure",
		"delete /zkcli/secure/kid",
		"get -s /zkcli",
		"quit",
	}, "\n")+"\n")
	t.Logf("zkCli session 2 (exit %d):\n%s", code, out)
	denied := "Insufficient permission : /zkcli/secure"
	procInOrder(t, "session 2", out,
		"[secure]\n", // the ephemeral left with session 1
		denied+"\n", denied+"\n", denied+"\n", denied+"/kid\n", denied+"\n",
		"s3cret\n",
		"Created /zkcli/secure/kid\n",
		"[kid]\n",
		"v2\n", "dataVersion = 1\n",
	)
	if n := strings.Count(out, denied); n != 5 {
		t.Fatalf("session 2: %d denials, want 5 (get, getAcl, set, create a child, get with a wrong password):\n%s", n, out)
	}
	if strings.Contains(out, "hacked") || strings.Contains(out, "Node does not exist") {
		t.Fatalf("session 2: unexpected output:\n%s", out)
	}

	// One command on the command line, on member 3: the exit code tells
	// success from failure.
	out, code = procZkCli(t, e.ClientAddrs[2], "", "ls", "/zkcli")
	if code != 0 || !strings.Contains(out, "[secure]\n") {
		t.Fatalf("zkCli.sh ls /zkcli on member 3: exit %d\n%s", code, out)
	}
	out, code = procZkCli(t, e.ClientAddrs[2], "", "get", "/zkcli/secure")
	if code == 0 || !strings.Contains(out, denied+"\n") {
		t.Fatalf("zkCli.sh get /zkcli/secure without auth on member 3: exit %d\n%s", code, out)
	}

	// The state as a Go client sees it on member 3.
	conn := testkit.DialZK(t, []string{e.ClientAddrs[2]}, 10*time.Second)
	if _, err := conn.Sync("/zkcli"); err != nil {
		t.Fatal(err)
	}
	data, st, err := conn.Get("/zkcli")
	if err != nil || string(data) != "v2" || st.Version != 1 || st.NumChildren != 1 {
		t.Fatalf("get /zkcli: %q %+v %v", data, st, err)
	}
	if _, _, err := conn.Get("/zkcli/secure"); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("get /zkcli/secure without auth: %v, want ErrNoAuth", err)
	}
	if _, _, err := conn.GetACL("/zkcli/secure"); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("getACL /zkcli/secure without auth: %v, want ErrNoAuth", err)
	}
	if err := conn.AddAuth("digest", []byte("alice:secret")); err != nil {
		t.Fatal(err)
	}
	acl, _, err := conn.GetACL("/zkcli/secure")
	if err != nil || len(acl) != 1 || acl[0].Scheme != "digest" || acl[0].ID != alice || acl[0].Perms != zk.PermAll {
		t.Fatalf("getACL /zkcli/secure: %+v %v", acl, err)
	}
	if data, _, err := conn.Get("/zkcli/secure"); err != nil || string(data) != "s3cret" {
		t.Fatalf("get /zkcli/secure as alice: %q %v", data, err)
	}
}

// TestProcessKillLeader kills the leader process with SIGKILL, checks that
// writes go on, restarts it on its data dir and waits until every member
// reports the same applied index.
func TestProcessKillLeader(t *testing.T) {
	e := procStartEnsemble(t)
	conn := testkit.DialZK(t, e.ClientAddrs, 10*time.Second)
	deadline := time.Now().Add(60 * time.Second) // a backstop
	procCreate(t, conn, "/kill", "", deadline)
	for i := 0; i < 20; i++ {
		procCreate(t, conn, fmt.Sprintf("/kill/before-%02d", i), fmt.Sprint(i), deadline)
	}

	// The leader per `ensemble status`, confirmed by the member itself.
	var lead int
	testkit.WaitFor(t, 15*time.Second, "the leader to be identified", func() bool {
		st := e.waitHealthy(10*time.Second, 0)
		if _, err := fmt.Sscan(st.Leader, &lead); err != nil || lead < 1 || lead > 3 {
			t.Fatalf("leader id %q", st.Leader)
		}
		srvr, err := procWord(e.ClientAddrs[lead-1], "srvr", nil)
		return err == nil && strings.Contains(srvr, "Mode: leader")
	})
	victim := e.procs[lead-1]
	killed := time.Now()
	victim.Kill()
	t.Logf("killed leader %d", lead)

	// Writes resume through a new leader.
	for i := 0; i < 20; i++ {
		procCreate(t, conn, fmt.Sprintf("/kill/after-%02d", i), fmt.Sprint(i), killed.Add(30*time.Second))
		if i == 0 {
			t.Logf("first write acknowledged %v after the kill", time.Since(killed).Round(time.Millisecond))
		}
	}
	var others []string
	for i, a := range e.ClientAddrs {
		if i != lead-1 {
			others = append(others, a)
		}
	}
	testkit.WaitFor(t, 15*time.Second, "a new leader among the survivors", func() bool {
		st, err := procStatus(strings.Join(others, ","))
		return err == nil && st.Leader != "" && st.Leader != fmt.Sprint(lead)
	})

	// Restart it on its data dir: the ensemble is whole again, every
	// member at the same applied index.
	e.start(lead - 1)
	var last ensemble.Status
	testkit.WaitFor(t, 30*time.Second, "three members at the same applied index", func() bool {
		st, err := procStatus(e.ClientAddrs[lead-1] + "," + e.Servers())
		if err != nil || !procHealthy(st, 0) {
			return false
		}
		last = st
		for _, m := range st.Members {
			if m.AppliedIndex != st.Members[0].AppliedIndex || m.LastZxid != st.Members[0].LastZxid {
				return false
			}
		}
		return true
	})
	for _, m := range last.Members {
		t.Logf("member %s: %s term %d applied %d zxid 0x%x", m.ID, m.State, m.Term, m.AppliedIndex, m.LastZxid)
	}

	// The restarted member serves every write.
	rc := testkit.DialZK(t, []string{e.ClientAddrs[lead-1]}, 10*time.Second)
	if _, err := rc.Sync("/kill"); err != nil {
		t.Fatal(err)
	}
	kids, _, err := rc.Children("/kill")
	if err != nil || len(kids) != 40 {
		t.Fatalf("children of /kill on the restarted member: %d %v", len(kids), err)
	}
	for i := 0; i < 20; i++ {
		for _, kind := range []string{"before", "after"} {
			p := fmt.Sprintf("/kill/%s-%02d", kind, i)
			data, _, err := rc.Get(p)
			if err != nil || string(data) != fmt.Sprint(i) {
				t.Fatalf("restarted member: get %s: %q %v", p, data, err)
			}
		}
	}
}

// TestBadConfig: configuration mistakes end the server at once with exit
// code 64 and a message that names the problem, before it listens anywhere.
func TestBadConfig(t *testing.T) {
	addrs := testkit.FreeAddrs(t, "127.0.0.1", 2)
	client, peer := addrs[0], addrs[1]
	cases := []struct {
		name   string
		args   func(dir string) []string
		config string // written to a file passed with --config
		want   string // on stderr
	}{
		{
			name: "peers without port",
			args: func(dir string) []string {
				return []string{"--id", "1", "--data-dir", dir, "--client-addr", client, "--peer-addr", peer, "--peers", "1=127.0.0.1"}
			},
			want: "--peers",
		},
		{
			name: "peers with a duplicate id",
			args: func(dir string) []string {
				return []string{"--id", "1", "--data-dir", dir, "--client-addr", client, "--peer-addr", peer,
					"--peers", "1=" + peer + ",1=127.0.0.1:1"}
			},
			want: "listed twice",
		},
		{
			name: "id not among peers",
			args: func(dir string) []string {
				return []string{"--id", "4", "--data-dir", dir, "--client-addr", client, "--peer-addr", peer,
					"--peers", "1=" + peer + ",2=127.0.0.1:1,3=127.0.0.1:2"}
			},
			want: "not in the peer list",
		},
		{
			name:   "unknown config key",
			config: "id: \"1\"\nclient-addr: %CLIENT%\npeer-addr: %PEER%\ndata-dir: %DIR%\nclinet-addr: 127.0.0.1:2181\n",
			want:   `unknown key "clinet-addr"`,
		},
		{
			name: "missing id",
			args: func(dir string) []string {
				return []string{"--data-dir", dir, "--client-addr", client, "--peer-addr", peer}
			},
			want: "--id is required (or config key id, COORDRUN_ID; or --dev)",
		},
		{
			// The shipped config file with the member's keys left out, as
			// in `systemctl enable --now coordrun-server` before editing it.
			name:   "missing id in the config file",
			config: "data-dir: %DIR%\nclient-addr: %CLIENT%\npeer-addr: %PEER%\n",
			want:   "config key id is not set in ",
		},
		{
			name: "profiles without an admin listener",
			args: func(dir string) []string {
				return []string{"--id", "1", "--data-dir", dir, "--client-addr", client, "--peer-addr", peer, "--admin-pprof"}
			},
			want: "pprof needs an admin address",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"server"}
			if tc.args != nil {
				args = append(args, tc.args(dir)...)
			}
			if tc.config != "" {
				cfg := strings.NewReplacer("%CLIENT%", client, "%PEER%", peer, "%DIR%", dir).Replace(tc.config)
				file := filepath.Join(t.TempDir(), "coordrun.yaml")
				if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", file)
			}
			p := procStart(t, "server", args...)
			code := p.Exit(t, 15*time.Second)
			stderr := p.Out.String()
			if code != exitUsage {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr)
			}
			if strings.Contains(stderr, "serving") || strings.Contains(stderr, "member started") {
				t.Errorf("the server started serving:\n%s", stderr)
			}
			for _, a := range []string{client, peer} {
				if procListening(a) {
					t.Errorf("something listens on %s", a)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "raft.db")); err == nil {
				t.Errorf("a raft store was created in %s", dir)
			}
		})
	}
}

// TestServerDev: a --dev server answers clients and exits 0 on SIGTERM,
// removing its throwaway data dir.
func TestServerDev(t *testing.T) {
	client := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	p := procStart(t, "dev server", "server", "--dev", "--client-addr", client)
	var answer string
	testkit.WaitFor(t, 15*time.Second, "ruok to be answered", func() bool {
		answer, _ = procWord(client, "ruok", nil)
		return answer == "imok" || !p.Running()
	})
	if answer != "imok" {
		t.Fatalf("ruok: %q; the server exited with %d", answer, p.Exit(t, time.Second))
	}
	var srvr string
	testkit.WaitFor(t, 15*time.Second, "srvr to report standalone mode", func() bool {
		srvr, _ = procWord(client, "srvr", nil)
		return strings.Contains(srvr, "Mode: standalone")
	})
	conn := testkit.DialZK(t, []string{client}, 10*time.Second)
	if _, err := conn.Create("/dev", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create: %v", err)
	}
	if data, _, err := conn.Get("/dev"); err != nil || string(data) != "x" {
		t.Fatalf("get: %q %v", data, err)
	}
	conn.Close()

	var dataDir string
	if m := regexp.MustCompile(`data_dir=(\S+)`).FindStringSubmatch(p.Out.String()); m != nil {
		dataDir = m[1]
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Exit(t, 15*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0; output:\n%s", code, p.Out.String())
	}
	if procListening(client) {
		t.Fatalf("%s still accepts connections after exit", client)
	}
	if dataDir == "" {
		t.Fatalf("no data_dir in the log:\n%s", p.Out.String())
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the --dev data dir %s is still there after exit (%v)", dataDir, err)
	}
}
