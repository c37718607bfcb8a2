package etcdengine

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
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

// Bad input is told before anything runs, with the exit code that says
// whether trying again can help.
func TestEtcdRunBadInput(t *testing.T) {
	c := testkit.StartEtcd(t, 1)
	ep := endpoints(c)[0]
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
