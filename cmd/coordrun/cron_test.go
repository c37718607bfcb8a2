package main

// Tests of `coordrun cron` as a command: bad schedules and jobs files are
// refused before anything connects or starts, and `cron history` and
// `cron list` show what the hosts recorded. The multi-host behaviour
// (skew, crashes, outages, overlap) is tested in supervisor/cron_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
)

// cronTestDeadAddr is a loopback address nobody listens on: a command
// that tried to connect there would fail only after its connect timeout
// (10s), and with a connection error.
func cronTestDeadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// cronTestExec runs the binary with args for at most limit and returns
// its stdout, stderr, exit code (-1 if it had to be killed) and run time.
func cronTestExec(t *testing.T, limit time.Duration, args ...string) (string, string, int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, procBin, args...)
	cmd.Env = procEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok && ctx.Err() == nil {
			code = ee.ExitCode()
		}
	}
	return stdout.String(), stderr.String(), code, took
}

// 5. Bad schedules, time zones, flags and jobs files: exit 64 at once
// with the problem (and for a file its name and line), and nothing
// started: --servers points at a port nobody listens on, so a command that
// went on to connect would hang for its connect timeout and then report a
// connection error instead.
func TestCronBadInput(t *testing.T) {
	dead := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	dir := t.TempDir()
	jobsFile := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const ok1 = "  - name: fine\n    schedule: \"@every 1s\"\n    command: \"true\"\n"
	type tc struct {
		name string
		args []string // after cron --servers dead
		want []string // substrings of stderr
	}
	cases := []tc{
		{"never fires", []string{"--schedule", "0 3 31 2 *", "--", "true"}, []string{`schedule "0 3 31 2 *" never fires`}},
		{"minute 61", []string{"--schedule", "61 * * * *", "--", "true"}, []string{`schedule "61 * * * *"`, "above maximum"}},
		{"empty schedule", []string{"--schedule", "", "--", "true"}, []string{"--schedule"}},
		{"blank schedule", []string{"--schedule", "   ", "--", "true"}, []string{"empty schedule"}},
		{"every negative", []string{"--schedule", "@every -1s", "--", "true"}, []string{"@every -1s"}},
		{"every zero", []string{"--schedule", "@every 0s", "--", "true"}, []string{"@every 0s"}},
		{"bogus descriptor", []string{"--schedule", "@bogus", "--", "true"}, []string{"@bogus", "unrecognized descriptor"}},
		{"seven fields", []string{"--schedule", "* * * * * * *", "--", "true"}, []string{"expected 5 to 6 fields"}},
		{"bad tz", []string{"--schedule", "0 3 * * *", "--tz", "Mars/Olympus", "--", "true"}, []string{"Mars/Olympus", "unknown time zone"}},
		{"bad CRON_TZ", []string{"--schedule", "CRON_TZ=Nowhere/Land 0 3 * * *", "--", "true"}, []string{"Nowhere/Land"}},
		{"bad overlap", []string{"--schedule", "@every 1s", "--overlap", "sometimes", "--", "true"}, []string{`overlap "sometimes"`}},
		{"negative catch-up", []string{"--schedule", "@every 1s", "--catch-up", "-1s", "--", "true"}, []string{"negative catch-up"}},
		{"bad catch-up", []string{"--schedule", "@every 1s", "--catch-up", "soon", "--", "true"}, []string{"--catch-up"}},
		{"negative history", []string{"--schedule", "@every 1s", "--history", "-1", "--", "true"}, []string{"history"}},
		{"negative history-failed", []string{"--schedule", "@every 1s", "--history-failed", "-2", "--", "true"}, []string{"history-failed"}},
		{"negative retry-lost", []string{"--schedule", "@every 1s", "--retry-lost", "-1", "--", "true"}, []string{"negative retry-lost"}},
		{"negative max-runtime", []string{"--schedule", "@every 1s", "--max-runtime", "-1s", "--", "true"}, []string{"negative max-runtime"}},
		{"bad max-runtime", []string{"--schedule", "@every 1s", "--max-runtime", "long", "--", "true"}, []string{"--max-runtime"}},
		{"negative jitter", []string{"--schedule", "@every 1s", "--jitter", "-1s", "--", "true"}, []string{"negative jitter"}},
		{"negative retry-failed", []string{"--schedule", "@every 1s", "--retry-failed", "-1", "--", "true"}, []string{"negative retry-failed"}},
		{"output-bytes too big", []string{"--schedule", "@every 1s", "--output-bytes", "1000000", "--", "true"}, []string{"output-bytes 1000000", "one znode"}},
		{"bad name", []string{"--schedule", "@every 1s", "--name", "a/b", "--", "true"}, []string{`bad job name "a/b"`}},
		{"no command", []string{"--schedule", "@every 1s"}, []string{"need --schedule"}},
		{"jobs and schedule", []string{"--jobs", jobsFile("both.yaml", "jobs:\n"+ok1), "--schedule", "@every 1s", "--", "true"}, []string{"not both"}},
	}
	files := []struct {
		name, content string
		want          []string
	}{
		{"notyaml.yaml", "jobs:\n" + ok1 + "  - name: b\n    schedule: \"@every 1s\n    command: true\n", []string{"notyaml.yaml: yaml: line 6:"}},
		{"tabs.yaml", "jobs:\n\t- name: a\n", []string{"tabs.yaml: yaml: line 2:"}},
		{"unknown-key.yaml", "jobs:\n" + ok1 + "  - name: b\n    schedule: \"@every 1s\"\n    comand: \"true\"\n", []string{"unknown-key.yaml:7:", `unknown job key "comand"`}},
		{"unknown-top.yaml", "job:\n" + ok1, []string{"unknown-top.yaml:1:", `unknown top-level key "job"`, `one key, "jobs:"`}},
		{"jobs-map.yaml", "jobs:\n  fine:\n    schedule: \"@every 1s\"\n", []string{"jobs-map.yaml:2:", `"jobs:" is not a list`, `"- name:"`}},
		{"top-list.yaml", ok1, []string{"top-list.yaml:1:", `one key, "jobs:"`}},
		{"never-fires.yaml", "jobs:\n" + ok1 + "  - name: feb31\n    schedule: \"0 3 31 2 *\"\n    command: \"true\"\n", []string{"never-fires.yaml:5:", "job feb31", "never fires"}},
		{"missing-name.yaml", "jobs:\n" + ok1 + "  - schedule: \"@every 2s\"\n    command: \"true\"\n", []string{"missing-name.yaml:5:", "without a name"}},
		{"duplicate.yaml", "jobs:\n" + ok1 + "  - name: other\n    schedule: \"@every 1s\"\n    command: \"true\"\n  - name: fine\n    schedule: \"@every 2s\"\n    command: \"true\"\n",
			[]string{"duplicate.yaml:8:", "job fine already defined at line 2"}},
		{"bad-schedule.yaml", "jobs:\n" + ok1 + "  - name: b\n    schedule: \"61 * * * *\"\n    command: \"true\"\n", []string{"bad-schedule.yaml:5:", `job b: schedule "61 * * * *"`}},
		{"every-negative.yaml", "jobs:\n" + ok1 + "  - name: b\n    schedule: \"@every -1s\"\n    command: \"true\"\n", []string{"every-negative.yaml:5:", "job b"}},
		{"bad-tz.yaml", "jobs:\n" + ok1 + "  - name: b\n    schedule: \"0 3 * * *\"\n    tz: Mars/Olympus\n    command: \"true\"\n", []string{"bad-tz.yaml:5:", "Mars/Olympus"}},
		{"bad-catch-up.yaml", "jobs:\n" + ok1 + "  - name: b\n    schedule: \"@every 1s\"\n    command: \"true\"\n    catch-up: 10 minutes\n", []string{"bad-catch-up.yaml:5:", "job b: catch-up"}},
		{"bad-overlap.yaml", "jobs:\n" + ok1 + "  - name: b\n    schedule: \"@every 1s\"\n    command: \"true\"\n    overlap: never\n", []string{"bad-overlap.yaml:5:", `overlap "never"`}},
		{"bad-retry-lost.yaml", "jobs:\n" + ok1 + "  - name: b\n    schedule: \"@every 1s\"\n    command: \"true\"\n    retry-lost: -2\n", []string{"bad-retry-lost.yaml:5:", "job b: negative retry-lost"}},
		{"bad-max-runtime.yaml", "jobs:\n" + ok1 + "  - name: b\n    schedule: \"@every 1s\"\n    command: \"true\"\n    max-runtime: forever\n", []string{"bad-max-runtime.yaml:5:", "job b: max-runtime"}},
		{"bad-history.yaml", "jobs:\n" + ok1 + "  - name: b\n    schedule: \"@every 1s\"\n    command: \"true\"\n    history: many\n", []string{"bad-history.yaml:5:", "many"}},
		{"command-map.yaml", "jobs:\n" + ok1 + "  - name: b\n    schedule: \"@every 1s\"\n    command:\n      run: \"true\"\n", []string{"command-map.yaml:5:", "command must be a string or a list"}},
		{"command-nested.yaml", "jobs:\n" + ok1 + "  - name: b\n    schedule: \"@every 1s\"\n    command:\n      - [a, b]\n", []string{"command-nested.yaml:5:", "job b: command"}},
		{"command-missing.yaml", "jobs:\n" + ok1 + "  - name: b\n    schedule: \"@every 1s\"\n", []string{"command-missing.yaml:5:", "no command"}},
		{"scalar-job.yaml", "jobs:\n" + ok1 + "  - just-a-string\n", []string{"scalar-job.yaml:5:"}},
		{"empty.yaml", "", []string{"empty.yaml", "empty file"}},
		{"no-jobs.yaml", "jobs: []\n", []string{"no-jobs.yaml", "no jobs"}},
	}
	for _, f := range files {
		cases = append(cases, tc{"file " + f.name, []string{"--jobs", jobsFile(f.name, f.content)}, f.want})
	}
	cases = append(cases, tc{"missing file", []string{"--jobs", filepath.Join(dir, "absent.yaml")}, []string{"absent.yaml", "no such file"}})

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"cron", "--servers", dead}, c.args...)
			_, stderr, code, took := cronTestExec(t, 3*time.Second, args...)
			if code != exitUsage {
				t.Errorf("coordrun %q: exit %d after %v, want %d at once; stderr:\n%s", args, code, cronTestMS(took), exitUsage, stderr)
			}
			if took > 2*time.Second {
				t.Errorf("coordrun %q took %v to refuse its input: it did not fail before connecting", args, cronTestMS(took))
			}
			if strings.Contains(stderr, "connect to") || strings.Contains(stderr, "connection refused") {
				t.Errorf("coordrun %q tried to connect (nothing may start on bad input): %s", args, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("coordrun %q: stderr %q lacks %q", args, stderr, w)
				}
			}
		})
	}
}

func cronTestExit(code *int) string {
	if code == nil {
		return "none"
	}
	return strconv.Itoa(*code)
}

func cronTestMS(d time.Duration) string { return d.Round(time.Millisecond).String() }

// cronTestEnsemble starts a single-member in-process ensemble and returns
// its client address.
func cronTestEnsemble(t *testing.T) string {
	t.Helper()
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ensemble.Start(ensemble.Config{
		ID:                "1",
		DataDir:           t.TempDir(),
		PeerListener:      pl,
		ClientListener:    cl,
		ClientAddr:        cl.Addr().String(),
		Peers:             []ensemble.Peer{{ID: "1", Addr: pl.Addr().String()}},
		MinSessionTimeout: 500 * time.Millisecond,
		HeartbeatTimeout:  time.Second,
		ElectionTimeout:   time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return cl.Addr().String()
}

// cronTestClient connects to addr; closed at cleanup.
func cronTestClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, client.Config{Servers: []string{addr}, SessionTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// 6. After a few firings on two hosts, `cron history JOB --json` shows
// each firing's scheduled time, host, pid, token, start, end and exit
// code, and `cron list --json` the job's definition, last firing, next
// firing and the hosts taking part; the text forms show the same rows.
func TestCronHistoryAndList(t *testing.T) {
	addr := ensembletest.Start(t, 1).ClientAddr(0)
	c := cronTestClient(t, addr)
	const root, job = "/coordrun/cron", "hist"
	out := filepath.Join(t.TempDir(), "runs.log")
	script := fmt.Sprintf(`echo "$COORDRUN_SCHEDULED_TIME $COORDRUN_FENCING_TOKEN" >> %s; exit 3`, out)
	argv := []string{"/bin/sh", "-c", script}
	var hosts []*proc
	for _, name := range []string{"cronA", "cronB"} {
		args := append([]string{"cron", "--servers", addr, "--name", job, "--schedule", "@every 1s",
			"--session-timeout", "3s", "--kill-grace", "300ms", "--drift-margin", "100ms", "--catch-up", "1m", "--"}, argv...)
		hosts = append(hosts, procStart(t, name, args...))
	}
	pids := []int{hosts[0].Pid(), hosts[1].Pid()}

	// Wait for both hosts, then for three firings after that to finish.
	var registered time.Time
	testkit.WaitFor(t, 20*time.Second, "both hosts to register", func() bool {
		kids, _, err := c.Children(context.Background(), root+"/"+job+"/hosts")
		registered = time.Now()
		return err == nil && len(kids) == 2
	})
	var recs []state.FiringRecord
	testkit.WaitFor(t, 20*time.Second, "three firings to finish", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		recs, err = supervisor.CronHistory(ctx, storeOf(c), root, job)
		n := 0
		for _, r := range recs {
			if r.State == "done" && r.Scheduled.After(registered) {
				n++
			}
		}
		return err == nil && n >= 3
	})

	// cron history --json
	stdout, stderr, code, _ := cronTestExec(t, 20*time.Second, "cron", "history", job, "--json", "--servers", addr)
	if code != 0 {
		t.Fatalf("cron history --json: exit %d\n%s", code, stderr)
	}
	var hist []struct {
		state.FiringRecord
		Result string `json:"result"`
	}
	if err := json.Unmarshal([]byte(stdout), &hist); err != nil {
		t.Fatalf("cron history --json: %v\n%s", err, stdout)
	}
	hostname, _ := os.Hostname()
	var done []state.FiringRecord
	for _, r := range hist {
		if r.State == "done" {
			// The job exits 3: a failed run, as the status page and the
			// metrics name it.
			if r.Result != "failed" {
				t.Errorf("cron history --json: a run that exited %v has result %q, want failed", cronTestExit(r.ExitCode), r.Result)
			}
			done = append(done, r.FiringRecord)
		}
	}
	if len(done) < 3 {
		t.Fatalf("cron history --json: %d done firings, want ≥ 3:\n%s", len(done), stdout)
	}
	var prev state.FiringRecord
	for i, r := range done {
		where := fmt.Sprintf("history record %d (%s)", i, r.Scheduled.Format(time.RFC3339))
		if r.Job != job || r.Host != hostname || !slices.Contains(pids, r.PID) {
			t.Errorf("%s: job %q host %q pid %d; want %q, %q, one of %v", where, r.Job, r.Host, r.PID, job, hostname, pids)
		}
		if r.Scheduled.Nanosecond() != 0 || r.Scheduled.Location() != time.UTC {
			t.Errorf("%s: scheduled time %v not a whole UTC second", where, r.Scheduled)
		}
		if r.Token <= 0 || (i > 0 && r.Token <= prev.Token) {
			t.Errorf("%s: token %d, want positive and above the previous %d", where, r.Token, prev.Token)
		}
		if i > 0 && !r.Scheduled.After(prev.Scheduled) {
			t.Errorf("%s: not after the previous record's %v (oldest first)", where, prev.Scheduled)
		}
		if r.Start.Before(r.Scheduled) || r.Start.Sub(r.Scheduled) > 2*time.Second || r.End.Before(r.Start) || r.Claimed.After(r.Start) {
			t.Errorf("%s: claimed %v start %v end %v, want scheduled ≤ claimed ≤ start (within 2s) ≤ end", where, r.Claimed, r.Start, r.End)
		}
		if r.ExitCode == nil || *r.ExitCode != 3 {
			t.Errorf("%s: exit code %v, want the job's 3", where, r.ExitCode)
		}
		if r.Nonce == "" {
			t.Errorf("%s: no nonce", where)
		}
		prev = r
	}
	// The job saw the same scheduled times and tokens.
	runs, _ := os.ReadFile(out)
	for _, r := range done {
		line := fmt.Sprintf("%s %d\n", r.Scheduled.Format(time.RFC3339), r.Token)
		if strings.Count(string(runs), line) != 1 {
			t.Errorf("job log has %q %d times, want once:\n%s", line, strings.Count(string(runs), line), runs)
		}
	}
	t.Logf("history: %d records, %d done, tokens %d..%d", len(hist), len(done), done[0].Token, done[len(done)-1].Token)

	stdout, _, code, _ = cronTestExec(t, 20*time.Second, "cron", "history", job, "--json", "--last", "2", "--servers", addr)
	var last2 []state.FiringRecord
	if code != 0 || json.Unmarshal([]byte(stdout), &last2) != nil || len(last2) != 2 {
		t.Errorf("cron history --last 2: exit %d, %d records:\n%s", code, len(last2), stdout)
	}

	// cron list --json
	stdout, stderr, code, _ = cronTestExec(t, 20*time.Second, "cron", "list", "--json", "--servers", addr)
	if code != 0 {
		t.Fatalf("cron list --json: exit %d\n%s", code, stderr)
	}
	var list []cronListEntry
	if err := json.Unmarshal([]byte(stdout), &list); err != nil || len(list) != 1 {
		t.Fatalf("cron list --json: %v, %d entries:\n%s", err, len(list), stdout)
	}
	var lastResult []struct {
		Last *struct {
			State  string `json:"state"`
			Result string `json:"result"`
		} `json:"last"`
	}
	if err := json.Unmarshal([]byte(stdout), &lastResult); err != nil || len(lastResult) != 1 || lastResult[0].Last == nil ||
		lastResult[0].Last.State == "done" && lastResult[0].Last.Result != "failed" {
		t.Errorf("cron list --json: the last firing exited 3 and must have result failed:\n%s", stdout)
	}
	e := list[0]
	listed := time.Now()
	// The command's name only: its arguments are not for every reader.
	if e.Name != job || e.Schedule != "@every 1s" || !slices.Equal(e.Command, []string{"sh"}) || e.Overlap != state.OverlapSkip || e.CatchUp != "1m0s" {
		t.Errorf("cron list: job %+v, want %s, @every 1s, [sh], skip, catch-up 1m0s", e.CronJobInfo, job)
	}
	if e.Next == nil || e.Next.Nanosecond() != 0 || e.Next.Before(listed.Add(-2*time.Second)) || e.Next.After(listed.Add(time.Second)) {
		t.Errorf("cron list: next %v, want the next whole second after %v", e.Next, listed)
	}
	if e.Last == nil || e.Last.Scheduled.Before(done[len(done)-1].Scheduled) {
		t.Errorf("cron list: last %+v, want the newest firing (≥ %v)", e.Last, done[len(done)-1].Scheduled)
	}
	var hostPids []int
	for _, h := range e.Hosts {
		hostPids = append(hostPids, h.PID)
		if h.Host != hostname {
			t.Errorf("cron list: host %+v, want host %q", h, hostname)
		}
	}
	slices.Sort(hostPids)
	wantPids := slices.Clone(pids)
	slices.Sort(wantPids)
	if !slices.Equal(hostPids, wantPids) {
		t.Errorf("cron list: hosts with pids %v, want %v", hostPids, wantPids)
	}

	// The text forms.
	stdout, _, code, _ = cronTestExec(t, 20*time.Second, "cron", "history", job, "--servers", addr)
	if code != 0 || !strings.Contains(stdout, "SCHEDULED") || !strings.Contains(stdout, "failed") || strings.Contains(stdout, "done") || strings.Count(stdout, "\n") < 4 {
		t.Errorf("cron history: exit %d, want the runs that exited 3 shown failed, none done:\n%s", code, stdout)
	}
	stdout, _, code, _ = cronTestExec(t, 20*time.Second, "cron", "list", "--servers", addr)
	if code != 0 || !strings.Contains(stdout, "JOB") || !strings.Contains(stdout, job) || !strings.Contains(stdout, "@every 1s") || strings.Contains(stdout, "done") {
		t.Errorf("cron list: exit %d:\n%s", code, stdout)
	}
	// A job nobody runs.
	// pause, resume and trigger --json say what they did, also when there
	// was nothing to do.
	for _, step := range []struct {
		args    []string
		action  string
		changed bool
	}{
		{[]string{"pause"}, "paused", true},
		{[]string{"pause"}, "paused", false},
		{[]string{"resume"}, "resumed", true},
		{[]string{"resume"}, "resumed", false},
		{[]string{"trigger"}, "triggered", true},
	} {
		args := append([]string{"cron", step.args[0], job, "--json", "--servers", addr}, step.args[1:]...)
		stdout, stderr, code, _ := cronTestExec(t, 20*time.Second, args...)
		var a cronAction
		if err := json.Unmarshal([]byte(stdout), &a); code != 0 || err != nil {
			t.Errorf("coordrun %q: exit %d, stdout %q (%v), stderr %q; want a JSON object", args, code, stdout, err, stderr)
			continue
		}
		if a.Job != job || a.Action != step.action || a.Changed != step.changed || (step.action == "triggered" && (a.Request == "" || len(a.Times) != 1)) {
			t.Errorf("coordrun %q: %+v; want job %s, action %s, changed %v", args, a, job, step.action, step.changed)
		}
	}
	for _, sub := range [][]string{{"history"}, {"pause"}, {"resume"}, {"trigger"}, {"backfill", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"}} {
		args := append([]string{"cron", sub[0], "nosuchjob", "--servers", addr}, sub[1:]...)
		_, stderr, code, _ = cronTestExec(t, 20*time.Second, args...)
		if code != supervisor.ExitNotFound || !strings.Contains(stderr, `no cron job "nosuchjob"`) {
			t.Errorf("coordrun %q: exit %d, stderr %q; want %d and an error naming the job", args, code, stderr, supervisor.ExitNotFound)
		}
	}
	stdout, _, code, _ = cronTestExec(t, 20*time.Second, "cron", "list", "--json", "--root", "/nothing/here", "--servers", addr)
	if code != 0 || strings.TrimSpace(stdout) != "[]" {
		t.Errorf("cron list --json of an empty root: exit %d, %q; want []", code, stdout)
	}

	// SIGTERM stops a cron host with exit 0.
	for _, h := range hosts {
		_ = h.Signal(syscall.SIGTERM)
	}
	for _, h := range hosts {
		if code := h.Exit(t, 15*time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", h.Name, code)
		}
	}
}

// TestCronCheck: --check reads and checks the jobs without connecting,
// exits 0 printing each job's next firing, and 64 with the file's line
// and reason on a bad one, as a start would.
func TestCronCheck(t *testing.T) {
	dead := cronTestDeadAddr(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("jobs:\n  - name: tick\n    schedule: \"@every 5s\"\n    command: /bin/true\n  - name: nightly\n    schedule: \"0 3 * * *\"\n    command: [/bin/true]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("jobs:\n  - name: tick\n    schedule: \"@every 5s\"\n    command: /bin/true\n  - name: b\n    schedule: \"61 * * * *\"\n    command: /bin/true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code, _ := cronTestExec(t, 5*time.Second, "cron", "--check", "--servers", dead, "--jobs", good)
	if code != 0 || !strings.Contains(stdout, good+": 2 jobs, fine") || !strings.Contains(stdout, "tick") || !strings.Contains(stdout, "nightly") {
		t.Errorf("--check of a good file: exit %d\n%s%s", code, stdout, stderr)
	}
	if strings.Contains(stderr, "connect") {
		t.Errorf("--check connected: %s", stderr)
	}
	_, stderr, code, _ = cronTestExec(t, 5*time.Second, "cron", "--check", "--servers", dead, "--jobs", bad)
	if code != exitUsage || !strings.Contains(stderr, bad+":5:") || !strings.Contains(stderr, "above maximum") {
		t.Errorf("--check of a bad file: exit %d, want %d naming line 5\n%s", code, exitUsage, stderr)
	}
	missing := filepath.Join(dir, "missing.yaml")
	_, stderr, code, _ = cronTestExec(t, 5*time.Second, "cron", "--check", "--jobs", missing)
	if code != exitUsage || !strings.Contains(stderr, "cannot read jobs file "+missing+": no such file or directory") {
		t.Errorf("--check of a missing file: exit %d\n%s", code, stderr)
	}
}

// TestCronUnreachableExit: no member answering is exit 69, apart from bad
// input's 64, so that a unit can retry the one and not the other.
func TestCronUnreachableExit(t *testing.T) {
	dead := cronTestDeadAddr(t)
	_, stderr, code, took := cronTestExec(t, 30*time.Second, "cron", "--servers", dead, "--schedule", "@every 1s", "--", "true")
	if code != supervisor.ExitUnavailable || !strings.Contains(stderr, "no ensemble member reachable") {
		t.Errorf("cron with no member: exit %d after %v, want %d\n%s", code, cronTestMS(took), supervisor.ExitUnavailable, stderr)
	}
	_, stderr, code, _ = cronTestExec(t, 30*time.Second, "run", "--servers", dead, "--", "true")
	if code != supervisor.ExitUnavailable {
		t.Errorf("run with no member: exit %d, want %d\n%s", code, supervisor.ExitUnavailable, stderr)
	}
}

// TestCronNotifyReady: under systemd (NOTIFY_SOCKET), cron says READY=1
// once it is connected and its jobs registered; with a bad jobs file it
// exits 64 without it.
func TestCronNotifyReady(t *testing.T) {
	addr := cronTestEnsemble(t)
	sock := listenNotify(t)
	t.Setenv("NOTIFY_SOCKET", sock.path)
	dir := t.TempDir()
	file := filepath.Join(dir, "demo.yaml")
	if err := os.WriteFile(file, []byte("jobs:\n  - name: notify-tick\n    schedule: \"@every 1h\"\n    command: /bin/true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := procStart(t, "cron", "cron", "--servers", addr, "--jobs", file)
	msg, _ := sock.await(t, 20*time.Second, "READY=1")
	if !hasLine(msg, "STATUS=scheduling 1 job of "+file) {
		t.Errorf("READY message %q", msg)
	}
	c := cronTestClient(t, addr)
	if _, ok, err := c.Exists(context.Background(), "/coordrun/cron/notify-tick"); err != nil || !ok {
		t.Errorf("job not registered at READY=1: %v %v", ok, err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Exit(t, 15*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}

	if err := os.WriteFile(file, []byte("jobs:\n  - name: b\n    schedule: \"@every 1h\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p = procStart(t, "cron", "cron", "--servers", addr, "--jobs", file)
	if code := p.Exit(t, 15*time.Second); code != exitUsage {
		t.Errorf("bad jobs file: exit %d, want %d", code, exitUsage)
	}
	if msg, ok := sock.next(t, time.Now().Add(100*time.Millisecond)); ok && hasLine(msg, "READY=1") {
		t.Errorf("READY=1 with a bad jobs file: %q", msg)
	}
}

// A job whose nodes only its owner may touch: pause, trigger and history
// without credentials are refused with a hint at --auth, and with them
// they work; bad credentials syntax is a usage error.
func TestCronControlAuth(t *testing.T) {
	addr := ensembletest.Start(t, 1).ClientAddr(0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner, err := client.Connect(ctx, client.Config{Servers: []string{addr}, SessionTimeout: 10 * time.Second,
		Auth: []client.Auth{{Scheme: "digest", Secret: []byte("alice:pw")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	acl := []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: zk.DigestID("alice:pw")}}}
	for _, p := range []string{"/owned", "/owned/job", "/owned/job/firings", "/owned/job/triggers"} {
		if _, err := owner.Create(ctx, p, nil, 0, acl); err != nil {
			t.Fatal(err)
		}
	}
	common := []string{"--servers", addr, "--root", "/owned"}
	for _, args := range [][]string{{"cron", "pause", "job"}, {"cron", "trigger", "job"}, {"cron", "history", "job"}} {
		_, stderr, code, _ := cronTestExec(t, 20*time.Second, append(args, common...)...)
		if code == 0 || !strings.Contains(stderr, "--auth") {
			t.Errorf("%v without credentials: exit %d, stderr %q; want a refusal naming --auth", args, code, stderr)
		}
		stdout, stderr, code, _ := cronTestExec(t, 20*time.Second, append(append(args, common...), "--auth", "alice:pw")...)
		if code != 0 {
			t.Errorf("%v --auth alice:pw: exit %d\n%s%s", args, code, stdout, stderr)
		}
	}
	if _, _, err := owner.Get(ctx, "/owned/job/paused"); err != nil {
		t.Errorf("the paused node after cron pause --auth: %v", err)
	}
	if kids, _, err := owner.Children(ctx, "/owned/job/triggers"); err != nil || len(kids) != 1 {
		t.Errorf("triggers after cron trigger --auth: %v, %v; want one request", kids, err)
	}
	if _, stderr, code, _ := cronTestExec(t, 20*time.Second, append([]string{"cron", "resume", "job", "--auth", "alice"}, common...)...); code != 64 || !strings.Contains(stderr, "user:password") {
		t.Errorf("--auth without a password: exit %d, %q; want 64 and the form wanted", code, stderr)
	}
}
