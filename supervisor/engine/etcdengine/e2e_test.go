package etcdengine

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
)

// The coordrun binary (COORDRUN_BIN, else built once for the package).
var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func coordrun(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "coordrun-etcd-e2e")
		if binErr == nil {
			binPath, binErr = testkit.Binary(binDir)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// runCmd is `coordrun run` on c's members with a short session, running
// script under sh; its output goes to the test's log on failure.
func runCmd(t *testing.T, c *testkit.EtcdCluster, name string, extra []string, script string) *testkit.Process {
	t.Helper()
	args := append([]string{"run", "--servers", c.Servers(), "--session-timeout", "3s", "--kill-grace", "500ms", "--name", "job"}, extra...)
	args = append(args, "--", "sh", "-c", script)
	cmd := exec.Command(coordrun(t), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	return testkit.Spawn(t, name, cmd)
}

// marks is a job that appends "start <now> <token>" to file, runs body,
// then appends "end <now> <token>".
func marks(file, body string) string {
	return fmt.Sprintf(`echo "start $(date +%%s.%%N) $COORDRUN_FENCING_TOKEN" >> %[1]s; %[2]s; echo "end $(date +%%s.%%N) $COORDRUN_FENCING_TOKEN" >> %[1]s`, file, body)
}

type mark struct {
	kind  string
	at    time.Time
	token int64
}

func readMarks(t *testing.T, file string) []mark {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var ms []mark
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		secs, _ := strconv.ParseFloat(f[1], 64)
		tok, _ := strconv.ParseInt(f[2], 10, 64)
		ms = append(ms, mark{kind: f[0], at: time.Unix(0, int64(secs*1e9)), token: tok})
	}
	return ms
}

// Several `coordrun run` processes on one lock: their jobs never overlap
// (each start follows the previous end) and the tokens rise.
func TestEtcdRunMutualExclusion(t *testing.T) {
	c := testkit.StartEtcd(t, 3)
	file := filepath.Join(t.TempDir(), "marks")
	var ps []*testkit.Process
	for i := range 4 {
		ps = append(ps, runCmd(t, c, fmt.Sprintf("run %d", i), nil, marks(file, "sleep 0.2")))
	}
	for _, p := range ps {
		if code := p.Exit(t, 60*time.Second); code != 0 {
			t.Fatalf("%s exited %d", p.Name, code)
		}
	}
	ms := readMarks(t, file)
	if len(ms) != 8 {
		t.Fatalf("%d marks, want 8: %+v", len(ms), ms)
	}
	for i := 0; i < len(ms); i += 2 {
		if ms[i].kind != "start" || ms[i+1].kind != "end" || ms[i].token != ms[i+1].token {
			t.Fatalf("jobs overlapped: %+v", ms)
		}
		if i > 0 && ms[i].token <= ms[i-2].token {
			t.Fatalf("token %d after %d", ms[i].token, ms[i-2].token)
		}
	}
}

// A foreign client's `etcdctl del` of the holder's queue key, or its
// `etcdctl lease revoke` of the holder's lease: the holder stops its job
// and exits 78, and the next holder's job starts only after the first
// one is gone.
func TestEtcdRunForeignInterferenceStopsHolder(t *testing.T) {
	for _, how := range []string{"del", "revoke"} {
		t.Run(how, func(t *testing.T) {
			c := testkit.StartEtcd(t, 1)
			file := filepath.Join(t.TempDir(), "marks")
			// The holder's job marks its end when it gets SIGTERM: its
			// last act, which the next job must come after.
			first := runCmd(t, c, "holder", nil, marks(file, `trap 'echo "end $(date +%s.%N) $COORDRUN_FENCING_TOKEN" >> `+file+`; exit 0' TERM; sleep 60 & wait`))
			testkit.WaitFor(t, 15*time.Second, "the first job to start", func() bool { return len(readMarks(t, file)) == 1 })
			second := runCmd(t, c, "next", nil, marks(file, "true"))
			testkit.WaitFor(t, 15*time.Second, "the second run to queue", func() bool {
				out := c.Etcdctl("get", "--prefix", "--keys-only", "/coordrun/locks/job/lock-")
				return strings.Count(out, "lock-") == 2
			})
			// coordrun status on etcd shows the holder with its token.
			st := exec.Command(coordrun(t), "status", "--servers", c.Servers(), "--json")
			st.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
			sout, err := st.CombinedOutput()
			if err != nil || !strings.Contains(string(sout), fmt.Sprintf(`"token": %d`, readMarks(t, file)[0].token)) {
				t.Fatalf("status: %v\n%s", err, sout)
			}
			out := c.Etcdctl("get", "--prefix", "--keys-only", "--limit", "1", "/coordrun/locks/job/lock-")
			holderKey := strings.TrimSpace(strings.Split(out, "\n")[0])
			switch how {
			case "del":
				c.Etcdctl("del", holderKey)
			case "revoke":
				lease, ok := entryLease(filepath.Base(holderKey))
				if !ok {
					t.Fatalf("no lease in %q", holderKey)
				}
				c.Etcdctl("lease", "revoke", strconv.FormatInt(int64(lease), 16))
			}
			if code := first.Exit(t, 15*time.Second); code != supervisor.ExitLockLost {
				t.Fatalf("holder exited %d, want %d", code, supervisor.ExitLockLost)
			}
			if code := second.Exit(t, 30*time.Second); code != 0 {
				t.Fatalf("next run exited %d", code)
			}
			ms := readMarks(t, file)
			if len(ms) < 4 || ms[0].kind != "start" || ms[1].kind != "end" || ms[2].kind != "start" {
				t.Fatalf("marks %+v", ms)
			}
			if !ms[2].at.After(ms[1].at) {
				t.Fatalf("the next job started at %v, before the holder's job ended at %v", ms[2].at, ms[1].at)
			}
			if ms[2].token <= ms[0].token {
				t.Fatalf("token %d after %d", ms[2].token, ms[0].token)
			}
		})
	}
}

// Tokens rise across a kill of the etcd leader between two holders.
func TestEtcdRunTokensRiseAcrossLeaderKill(t *testing.T) {
	c := testkit.StartEtcd(t, 3)
	file := filepath.Join(t.TempDir(), "marks")
	if code := runCmd(t, c, "before", nil, marks(file, "true")).Exit(t, 30*time.Second); code != 0 {
		t.Fatalf("first run exited %d", code)
	}
	conn := dial(t, c, 3*time.Second)
	c.Kill(leaderIndex(t, conn, c))
	if code := runCmd(t, c, "after", nil, marks(file, "true")).Exit(t, 60*time.Second); code != 0 {
		t.Fatalf("run after the leader kill exited %d", code)
	}
	ms := readMarks(t, file)
	if len(ms) != 4 || ms[2].token <= ms[0].token {
		t.Fatalf("marks %+v: want a greater token after the leader kill", ms)
	}
}

// Bad input is told before anything runs, with the exit code that says
// whether trying again can help.
func TestEtcdRunBadInput(t *testing.T) {
	c := testkit.StartEtcd(t, 1)
	ep := strings.TrimPrefix(c.Endpoints()[0], "http://")
	free := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	// Users: root (to enable auth), app (readwrite on /coordrun/), other
	// (readwrite on /other/ only).
	for _, args := range [][]string{
		{"user", "add", "root:rootpw"}, {"role", "add", "root"}, {"user", "grant-role", "root", "root"},
		{"user", "add", "app:apppw"}, {"role", "add", "app"},
		{"role", "grant-permission", "app", "--prefix=true", "readwrite", "/coordrun/"}, {"user", "grant-role", "app", "app"},
		{"user", "add", "other:otherpw"}, {"role", "add", "other"},
		{"role", "grant-permission", "other", "--prefix=true", "readwrite", "/other/"}, {"user", "grant-role", "other", "other"},
		{"user", "add", "reader:readerpw"}, {"role", "add", "reader"},
		{"role", "grant-permission", "reader", "--prefix=true", "read", "/coordrun/"}, {"user", "grant-role", "reader", "reader"},
		{"auth", "enable"},
	} {
		c.Etcdctl(args...)
	}
	for _, tc := range []struct {
		name    string
		servers string
		extra   []string
		code    int
		says    string
	}{
		{"path", "etcd://" + ep + "/v3", nil, supervisor.ExitUsage, "has a path"},
		{"port", "etcd://127.0.0.1:70000", nil, supervisor.ExitUsage, "port \"70000\""},
		{"unreachable", "etcd://" + free, nil, supervisor.ExitUnavailable, "no etcd member"},
		{"password", "etcd://" + ep, []string{"--auth", "app:wrong"}, supervisor.ExitUsage, "wrong user name or password"},
		{"no-auth", "etcd://" + ep, nil, supervisor.ExitUsage, "requires authentication"},
		{"prefix", "etcd://" + ep, []string{"--auth", "other:otherpw"}, supervisor.ExitUsage, "may not read the keys under the prefix /coordrun/"},
		{"read-only", "etcd://" + ep, []string{"--auth", "reader:readerpw"}, supervisor.ExitUsage, "may not write key \"/coordrun/"},
		{"ok", "etcd://" + ep, []string{"--auth", "app:apppw"}, 0, ""},
		{"own-prefix", "etcd://" + ep, []string{"--auth", "other:otherpw", "--prefix", "/other/"}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--servers", tc.servers, "--session-timeout", "3s", "--kill-grace", "500ms"}, tc.extra...)
			cmd := exec.Command(coordrun(t), append(args, "--", "true")...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.Contains(string(out), tc.says) {
				t.Fatalf("exit %d, want %d; output:\n%s", code, tc.code, out)
			}
		})
	}
	// A reader may inspect: status checks read access only.
	st := exec.Command(coordrun(t), "status", "--servers", "etcd://"+ep, "--auth", "reader:readerpw")
	st.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if out, err := st.CombinedOutput(); err != nil {
		t.Fatalf("status as a reader: %v\n%s", err, out)
	}
}

// Two `coordrun cron` hosts on etcd: each firing runs once, on one host,
// with a token greater than the last.
func TestEtcdCronEachFiringOnce(t *testing.T) {
	c := testkit.StartEtcd(t, 1)
	file := filepath.Join(t.TempDir(), "firings")
	var hosts []*testkit.Process
	for h := range 2 {
		cmd := exec.Command(coordrun(t), "cron", "--servers", c.Servers(), "--session-timeout", "3s", "--kill-grace", "500ms",
			"--name", "tick", "--schedule", "*/1 * * * * *", "--",
			"sh", "-c", fmt.Sprintf(`echo "$COORDRUN_SCHEDULED_TIME $COORDRUN_FENCING_TOKEN host%d" >> %s`, h, file))
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		hosts = append(hosts, testkit.Spawn(t, fmt.Sprintf("cron host %d", h), cmd))
	}
	lines := func() []string {
		b, _ := os.ReadFile(file)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	testkit.WaitFor(t, 30*time.Second, "five firings", func() bool { return len(lines()) >= 5 })
	for _, h := range hosts {
		_ = h.Signal(syscall.SIGTERM)
		h.Exit(t, 15*time.Second)
	}
	// cron history on etcd lists the same firings.
	hist := exec.Command(coordrun(t), "cron", "history", "tick", "--servers", c.Servers(), "--json")
	hist.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := hist.CombinedOutput()
	if err != nil {
		t.Fatalf("cron history: %v\n%s", err, out)
	}
	var recs []state.FiringRecord
	if err := json.Unmarshal(out, &recs); err != nil || len(recs) < len(lines()) {
		t.Fatalf("cron history: %d records for %d firings (%v):\n%s", len(recs), len(lines()), err, out)
	}
	seen := map[string]bool{}
	var last int64
	for _, l := range lines() {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("line %q", l)
		}
		if seen[f[0]] {
			t.Fatalf("firing %s ran twice:\n%s", f[0], strings.Join(lines(), "\n"))
		}
		seen[f[0]] = true
		tok, _ := strconv.ParseInt(f[1], 10, 64)
		if tok <= last {
			t.Fatalf("token %d after %d", tok, last)
		}
		last = tok
	}
}

// etcd with TLS on its client port and client certificates required: the
// --tls-* flags reach it; without them coordrun is refused.
func TestEtcdRunTLS(t *testing.T) {
	ca := testkit.NewCA(t, "etcd-test-ca")
	c := testkit.StartEtcdTLS(t, 1, ca)
	file := filepath.Join(t.TempDir(), "marks")
	p := runCmd(t, c, "tls", []string{"--tls-ca", ca.File, "--tls-cert", c.ClientCert, "--tls-key", c.ClientKey}, marks(file, "true"))
	if code := p.Exit(t, 30*time.Second); code != 0 {
		t.Fatalf("run over TLS exited %d", code)
	}
	if ms := readMarks(t, file); len(ms) != 2 || ms[0].token <= 0 {
		t.Fatalf("marks %+v", ms)
	}
	if code := runCmd(t, c, "plain", nil, "true").Exit(t, 30*time.Second); code == 0 {
		t.Fatal("run without TLS flags succeeded against a TLS-only etcd")
	}
}

// --try and --timeout on etcd: a held lock is not waited for (75), or
// only as long as asked (75 after it).
func TestEtcdRunTryAndTimeout(t *testing.T) {
	c := testkit.StartEtcd(t, 1)
	dir := t.TempDir()
	held, gone := filepath.Join(dir, "held"), filepath.Join(dir, "go")
	holder := runCmd(t, c, "holder", nil, fmt.Sprintf(`touch %s; while [ ! -e %s ]; do sleep 0.01; done`, held, gone))
	testkit.WaitFor(t, 15*time.Second, "the holder's job", func() bool { _, err := os.Stat(held); return err == nil })
	if code := runCmd(t, c, "try", []string{"--try"}, "true").Exit(t, 15*time.Second); code != supervisor.ExitNotAcquired {
		t.Fatalf("--try exited %d, want %d", code, supervisor.ExitNotAcquired)
	}
	start := time.Now()
	if code := runCmd(t, c, "timeout", []string{"--timeout", "1s"}, "true").Exit(t, 15*time.Second); code != supervisor.ExitNotAcquired {
		t.Fatalf("--timeout exited %d, want %d", code, supervisor.ExitNotAcquired)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("--timeout 1s gave up after %v", waited)
	}
	if err := os.WriteFile(gone, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := holder.Exit(t, 15*time.Second); code != 0 {
		t.Fatalf("holder exited %d", code)
	}
	// Nothing of the two that gave up is left in the queue.
	if out := c.Etcdctl("get", "--prefix", "--keys-only", "/coordrun/locks/job/lock-"); strings.Contains(out, "lock-") {
		t.Fatalf("queue keys left:\n%s", out)
	}
}
