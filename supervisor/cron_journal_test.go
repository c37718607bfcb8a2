package supervisor_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
)

// What `journalctl -u coordrun-cron` shows of a real coordrun cron with
// three jobs: every line of a job's output carries the job's name (and
// the attempt after the first), stdout and stderr each on their own
// stream, an unended last line flushed, a long line cut into prefixed
// pieces; every log line about a firing names its job; each firing's end
// is one line with its result; at start, one line per job with its
// schedule and next firing.
func TestCronJournal(t *testing.T) {
	forEachCronBackend(t, cronJournal)
}

func cronJournal(t *testing.T, b *backend) {
	r := newRig(t, b)
	root := cronRoot(b, "cron-journal")
	const long = 40000
	file := r.path("jobs.yaml")
	jobs := fmt.Sprintf(`jobs:
  - name: alpha
    schedule: "@every 2s"
    command: 'echo out-a; echo err-a >&2; head -c %d /dev/zero | tr "\0" x; echo; printf partial-a'
  - name: beta
    schedule: "@every 2s"
    retry-failed: 1
    retry-backoff: 100ms
    command: 'echo "beta attempt $COORDRUN_ATTEMPT"; [ "$COORDRUN_ATTEMPT" = 2 ]'
    on-success: 'echo hooked; echo hook-err >&2'
  - name: gamma
    schedule: "@every 2s"
    max-runtime: 300ms
    command: 'echo long; exec sleep 5'
`, long)
	if err := os.WriteFile(file, []byte(jobs), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(e2eBin, "cron", "--servers", b.serverArg(), "--root", root, "--jobs", file,
		"--session-timeout", cronSessionTimeout.String(), "--kill-grace", cronKillGrace.String(),
		"--drift-margin", cronDriftMargin.String(), "--zookeeper-margin", zkMargin.String(), "-v", "--log-format", "json", "--textfile", r.dir)
	cmd.Env = append(baseEnv(), r.mark)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr testkit.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	p, err := testkit.StartProcess(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			// Lines cut short: one of them is 40 kB.
			cut := func(s string) string {
				ls := strings.Split(s, "\n")
				for i, l := range ls {
					if len(l) > 300 {
						ls[i] = l[:300] + "…"
					}
				}
				return strings.Join(ls, "\n")
			}
			t.Logf("--- stdout:\n%s\n--- stderr:\n%s", cut(stdout.String()), cut(stderr.String()))
		}
	})

	// The log lines on stderr (JSON) and the job's lines (the rest).
	split := func() (logs []map[string]any, jobLines []string) {
		for _, l := range strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n") {
			var m map[string]any
			if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &m) == nil {
				logs = append(logs, m)
			} else if l != "" {
				jobLines = append(jobLines, l)
			}
		}
		return logs, jobLines
	}
	ends := func(logs []map[string]any) map[string][]map[string]any {
		out := map[string][]map[string]any{}
		for _, m := range logs {
			if m["msg"] == "firing ended" {
				k := fmt.Sprint(m["job"])
				out[k] = append(out[k], m)
			}
		}
		return out
	}
	has := func(ms []map[string]any, f func(map[string]any) bool) bool {
		for _, m := range ms {
			if f(m) {
				return true
			}
		}
		return false
	}
	done := func(m map[string]any) bool { return m["result"] == "done" }
	testkit.WaitFor(t, 30*time.Second, "alpha done, beta done at attempt 2, gamma timed out", func() bool {
		logs, _ := split()
		e := ends(logs)
		return has(e["alpha"], done) &&
			has(e["beta"], func(m map[string]any) bool { return done(m) && m["attempt"] == 2.0 }) &&
			has(e["gamma"], func(m map[string]any) bool { return m["result"] == "timed-out" })
	})
	p.Signal(syscall.SIGTERM)
	if code := p.Exit(t, 15*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
	logs, errLines := split()

	// Output: each line prefixed, each stream its own, the last unended
	// line flushed, the long line cut.
	outLines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	prefixes := []string{"alpha: ", "beta: ", "beta#2: ", "gamma: ", "beta on-success: "}
	xs := 0
	for _, l := range outLines {
		pre := ""
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				pre = p
			}
		}
		if pre == "" {
			t.Errorf("stdout line without a job's prefix: %.80q", l)
			continue
		}
		if len(l) > len(pre)+16<<10 {
			t.Errorf("stdout line of %d bytes, past the bound", len(l))
		}
		if body := strings.TrimPrefix(l, pre); pre == "alpha: " && strings.Trim(body, "x") == "" {
			xs += len(body)
		}
	}
	for _, want := range []string{"alpha: out-a", "alpha: partial-a", "beta: beta attempt 1", "beta#2: beta attempt 2", "gamma: long", "beta on-success: hooked"} {
		if !strings.Contains("\n"+stdout.String(), "\n"+want+"\n") {
			t.Errorf("stdout has no line %q", want)
		}
	}
	if xs == 0 || xs%long != 0 {
		t.Errorf("the %d-byte line came out as %d bytes of pieces, want whole multiples", long, xs)
	}
	if strings.Contains(stdout.String(), "err-a") {
		t.Errorf("the job's stderr reached stdout")
	}
	for _, l := range errLines {
		if !strings.HasPrefix(l, "alpha: ") && !strings.HasPrefix(l, "beta on-success: ") {
			t.Errorf("stderr line neither a log line nor a job's or hook's output: %.80q", l)
		}
	}
	for _, want := range []string{"alpha: err-a", "beta on-success: hook-err"} {
		if !slices.Contains(errLines, want) {
			t.Errorf("stderr has no line %q", want)
		}
	}

	// Log lines: one per job at start, every firing's line names its job,
	// one end line per firing's attempt and no other.
	for _, job := range []string{"alpha", "beta", "gamma"} {
		if !has(logs, func(m map[string]any) bool {
			_, err := time.Parse(time.RFC3339, fmt.Sprint(m["next"]))
			return m["msg"] == "job scheduled" && m["job"] == job && m["schedule"] == "@every 2s" && err == nil
		}) {
			t.Errorf("no start-up line for %s with its schedule and next firing", job)
		}
	}
	seen := map[string]bool{}
	for _, m := range logs {
		msg := fmt.Sprint(m["msg"])
		if _, ok := m["scheduled"]; ok && m["job"] == nil {
			t.Errorf("log line about a firing without its job: %v", m)
		}
		if msg == "job finished" || msg == "finished" {
			t.Errorf("a second end line: %v", m)
		}
		if strings.Contains(msg, "run time limit") && m["job"] != "gamma" {
			t.Errorf("max-runtime line without job=gamma: %v", m)
		}
		if msg == "firing ended" {
			k := fmt.Sprint(m["job"], m["scheduled"], m["attempt"])
			if seen[k] {
				t.Errorf("firing %s ended twice in the log", k)
			}
			seen[k] = true
			if m["result"] == nil || m["token"] == nil || m["duration"] == nil {
				t.Errorf("end line without result, token or duration: %v", m)
			}
		}
	}
	e := ends(logs)
	if !has(e["beta"], func(m map[string]any) bool {
		return m["result"] == "failed" && m["exit"] == 1.0 && m["attempt"] == 1.0 && m["retry_after"] != nil
	}) {
		t.Errorf("no end line for beta's failed first attempt with exit 1 and its retry: %v", e["beta"])
	}
	if !has(logs, func(m map[string]any) bool { return strings.Contains(fmt.Sprint(m["msg"]), "run time limit") }) {
		t.Errorf("no max-runtime line")
	}
	// The bound on a line has its metric: two cuts per run of alpha.
	prom, err := os.ReadFile(r.path("coordrun_cron_jobs.prom"))
	if err != nil {
		t.Fatal(err)
	}
	if cut, ok := cronMetric(cronParseMetrics(t, prom), "coordrun_cron_output_lines_cut_total", "alpha", ""); !ok || cut < 2 {
		t.Errorf("coordrun_cron_output_lines_cut_total{cron_job=alpha} = %v (%v), want 2 per whole run", cut, ok)
	}
}
