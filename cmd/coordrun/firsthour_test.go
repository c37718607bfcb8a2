package main

// What a new operator meets first: what coordrun run prints on a good
// day, what a losing --try says, which lock a command takes.

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
)

// firstHourMember is a one-member ensemble in this process (cron's test
// member, whose timing suits these tests too); its client address.
func firstHourMember(t *testing.T) string { return cronTestEnsemble(t) }

// firstHourExec runs the binary with args and extra environment, and
// returns its stdout, stderr and exit code (-1 if it outlived limit).
func firstHourExec(t *testing.T, limit time.Duration, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, procBin, args...)
	cmd.Env = append(procEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok && ctx.Err() == nil {
			code = ee.ExitCode()
		}
	}
	return stdout.String(), stderr.String(), code
}

// A successful run prints nothing of coordrun's own: from a crontab with
// MAILTO every line is mail from every host on every run. The open-ACL
// notice comes once, not once per step; -v says what coordrun did.
func TestRunQuietByDefault(t *testing.T) {
	addr := firstHourMember(t)
	out, stderr, code := firstHourExec(t, 30*time.Second, nil, "run", "--servers", addr, "--auth", "ops:secret", "--", "echo", "job says hi")
	if code != 0 || out != "job says hi\n" || stderr != "" {
		t.Errorf("run with credentials: exit %d, stdout %q, stderr %q; want 0, the job's line, nothing", code, out, stderr)
	}
	_, stderr, code = firstHourExec(t, 30*time.Second, nil, "run", "--servers", addr, "--root", "/open", "--", "true")
	if lines := strings.Split(strings.TrimSpace(stderr), "\n"); code != 0 || len(lines) != 1 || !strings.Contains(stderr, "open ACL") {
		t.Errorf("run without credentials: exit %d, stderr %q; want one ACL notice", code, stderr)
	}
	if _, stderr, code := firstHourExec(t, 30*time.Second, nil, "run", "--servers", addr, "--root", "/open", "--", "false"); code != 1 {
		t.Fatalf("run false: exit %d %s", code, stderr)
	}
	out, _, code = firstHourExec(t, 30*time.Second, nil, "status", "--servers", addr, "--root", "/open")
	if n := strings.Count(out, "warning:"); code != 0 || n != 1 {
		t.Errorf("status of two open locks: exit %d, %d warnings, want one:\n%s", code, n, out)
	}
	_, stderr, code = firstHourExec(t, 30*time.Second, nil, "run", "-v", "--servers", addr, "--auth", "ops:secret", "--", "true")
	for _, want := range []string{"lock named after the command line", "lock acquired", "job finished"} {
		if code != 0 || !strings.Contains(stderr, want) {
			t.Errorf("run -v: exit %d, stderr lacks %q:\n%s", code, want, stderr)
		}
	}
}

// A losing --try under -q says it by its exit code alone, which
// --conflict-exit-code chooses (flock -E).
func TestRunTryQuietConflictCode(t *testing.T) {
	addr := firstHourMember(t)
	started := filepath.Join(t.TempDir(), "started")
	holder := procStart(t, "holder", "run", "-q", "--servers", addr, "--auth", "ops:secret", "--name", "contended", "--", "sh", "-c", "touch "+started+"; exec sleep 600")
	testkit.WaitFor(t, 30*time.Second, "the holder's job to start", func() bool {
		_, err := os.Stat(started)
		return err == nil || !holder.Running()
	})
	try := []string{"run", "--servers", addr, "--auth", "ops:secret", "--name", "contended", "--try"}
	for _, c := range []struct {
		flags  []string
		code   int
		stderr string
	}{
		{[]string{"-q"}, supervisor.ExitNotAcquired, ""},
		{[]string{"-q", "--conflict-exit-code", "0"}, 0, ""},
		{[]string{"--conflict-exit-code", "3"}, 3, "coordrun: lock contended is held by another: lock not acquired\n"},
		{nil, supervisor.ExitNotAcquired, "coordrun: lock contended is held by another: lock not acquired\n"},
	} {
		args := append(append(append([]string{}, try...), c.flags...), "--", "echo", "loser ran")
		out, stderr, code := firstHourExec(t, 30*time.Second, nil, args...)
		if code != c.code || stderr != c.stderr || out != "" {
			t.Errorf("--try %v: exit %d, stdout %q, stderr %q; want %d, nothing, %q", c.flags, code, out, stderr, c.code, c.stderr)
		}
	}
	_, stderr, code := firstHourExec(t, 5*time.Second, nil, append(try, "--conflict-exit-code", "300", "--", "true")...)
	if code != exitUsage || !strings.Contains(stderr, "want 0 to 255") {
		t.Errorf("--conflict-exit-code 300: exit %d, %q", code, stderr)
	}
}

// The implicit lock name: unrelated command lines never share a lock,
// the same command line always maps to the same one, and the name shows
// what runs.
func TestImplicitLockName(t *testing.T) {
	addr := firstHourMember(t)
	lockOf := func(args ...string) string {
		t.Helper()
		out, stderr, code := firstHourExec(t, 30*time.Second, nil, append([]string{"run", "--servers", addr, "--auth", "ops:secret"}, append(args, "--", "sh", "-c", `echo "$COORDRUN_LOCK"`)...)...)
		if code != 0 {
			t.Fatalf("run %v: exit %d\n%s", args, code, stderr)
		}
		return strings.TrimSpace(out)
	}
	// The lock name of sh -c 'echo $COORDRUN_LOCK' itself, twice: stable.
	a, b := lockOf(), lockOf()
	if a != b || !strings.HasPrefix(a, "sh-") || len(a) != len("sh-")+8 {
		t.Errorf("the same command line took locks %q and %q; want one sh-XXXXXXXX", a, b)
	}
	for _, c := range []struct {
		a, b  []string
		shell bool
	}{
		{[]string{"python3", "a.py"}, []string{"python3", "b.py"}, false},
		{[]string{"cd /srv/a && make"}, []string{"cd /srv/b && make"}, true},
		{[]string{"a", "b c"}, []string{"a b", "c"}, false},
	} {
		na, nb := supervisor.DefaultName(c.a, c.shell), supervisor.DefaultName(c.b, c.shell)
		if na == nb {
			t.Errorf("%q and %q share the lock %q", c.a, c.b, na)
		}
	}
	if n := supervisor.DefaultName([]string{"/usr/bin/pg_dump", "app"}, false); !strings.HasPrefix(n, "pg_dump-") {
		t.Errorf("implicit name %q does not start with the command's base name", n)
	}
	if n := supervisor.DefaultName([]string{"cd /srv && ./backup.sh"}, true); !strings.HasPrefix(n, "cd-") {
		t.Errorf("--shell implicit name %q", n)
	}
}

// Durations, booleans and numbers from the environment and the config
// file are held to the flags' syntax, and refused naming the fix before
// anything is dialled.
func TestEnvAndFileValuesStrict(t *testing.T) {
	dead := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	dir := t.TempDir()
	conf := func(body string) string {
		p := filepath.Join(dir, strings.TrimSuffix(strings.Fields(body)[0], ":")+".yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		env  []string
		args []string
		says string
	}{
		{[]string{"COORDRUN_TIMEOUT=2"}, nil, `COORDRUN_TIMEOUT="2": a duration needs its unit: write 2s`},
		{[]string{"COORDRUN_TRY=yes"}, nil, `COORDRUN_TRY="yes": want true or false`},
		{[]string{"COORDRUN_CONFLICT_EXIT_CODE=x"}, nil, "want a whole number"},
		{nil, []string{"--config", conf("session-timeout: 10\n")}, "session-timeout: 10: a duration needs its unit: write 10s"},
		{nil, []string{"--config", conf("try: yes\n")}, "try: yes: want true or false"},
		{nil, []string{"--config", conf("kill-grace: soon\n")}, "want a duration with its unit"},
	} {
		args := append(append([]string{"run", "--servers", dead}, c.args...), "--", "true")
		_, stderr, code := firstHourExec(t, 10*time.Second, c.env, args...)
		if code != exitUsage || !strings.Contains(stderr, c.says) {
			t.Errorf("%v %v: exit %d, want %d saying %q:\n%s", c.env, c.args, code, exitUsage, c.says, stderr)
		}
	}
	// Good values still work, the command line wins over a bad variable
	// it overrides, and a variable no flag reads (a version) is no error.
	_, stderr, code := firstHourExec(t, 10*time.Second, []string{"COORDRUN_TRY=1", "COORDRUN_TIMEOUT=2", "COORDRUN_VERSION=1.2.3"}, "run", "--servers", dead, "--timeout", "1s", "--conflict-exit-code", "300", "--", "true")
	if code != exitUsage || !strings.Contains(stderr, "--conflict-exit-code 300") {
		t.Errorf("good variables: exit %d:\n%s", code, stderr)
	}
}

// A session timeout asked for and clamped by the members is refused
// before the job runs, naming their limit and the value to ask for; the
// default timeout clamped is a warning, as nobody chose it.
func TestSessionTimeoutClamp(t *testing.T) {
	addr := firstHourMember(t)
	ran := filepath.Join(t.TempDir(), "ran")
	for _, c := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flag", nil, []string{"--session-timeout", "5m"}},
		{"environment", []string{"COORDRUN_SESSION_TIMEOUT=5m"}, nil},
	} {
		args := slices.Concat([]string{"run", "--servers", addr, "--auth", "ops:secret"}, c.args, []string{"--", "touch", ran})
		_, stderr, code := firstHourExec(t, 30*time.Second, c.env, args...)
		if code != exitUsage || !strings.Contains(stderr, "granted a session timeout of 40s, not the 5m0s asked for: they grant at most 40s") ||
			!strings.Contains(stderr, "ask for --session-timeout 40s") {
			t.Errorf("%s: exit %d, stderr %q; want %d naming the members' 40s", c.name, code, stderr, exitUsage)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Errorf("%s: the job ran on a session timeout other than the one asked for", c.name)
		}
	}
}

// An unknown lock is "no such lock" with an exit code of its own, not a
// free row; lock rm removes a lock nobody uses and leaves a held one.
func TestLockRmAndNoSuchLock(t *testing.T) {
	addr := firstHourMember(t)
	cli, auth := authedCLI(t, addr)
	if out, code := cli("run", "--name", "once", "--", "true"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	started := filepath.Join(t.TempDir(), "started")
	holder := procStart(t, "holder", slices.Concat([]string{"run", "--name", "busy"}, auth, []string{"--", "sh", "-c", "touch " + started + "; exec sleep 600"})...)
	testkit.WaitFor(t, 30*time.Second, "the holder's job to start", func() bool {
		_, err := os.Stat(started)
		return err == nil || !holder.Running()
	})
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"status", "once"}, 0, "once"},
		{[]string{"status", "nosuch"}, supervisor.ExitNotFound, `no such lock "nosuch" under /coordrun/locks`},
		{[]string{"lock", "rm", "nosuch"}, supervisor.ExitNotFound, `no such lock "nosuch"`},
		{[]string{"lock", "rm", "busy"}, supervisor.ExitNotAcquired, "lock busy is in use: its holder is"},
		{[]string{"lock", "rm", "once"}, 0, "removed lock once"},
		{[]string{"status", "once"}, supervisor.ExitNotFound, `no such lock "once"`},
		{[]string{"status", "busy"}, 0, "holder"},
		{[]string{"lock", "rm"}, exitUsage, "requires at least 1 arg"},
	} {
		out, code := cli(c.args...)
		if code != c.code || !strings.Contains(out, c.says) {
			t.Errorf("coordrun %s: exit %d, want %d saying %q:\n%s", strings.Join(c.args, " "), code, c.code, c.says, out)
		}
	}
}

// authedCLI runs coordrun against addr as the user ops (its flags before
// a "--"), returning stdout and stderr together and the exit code.
// The flags themselves come back too, for a process started on its own.
func authedCLI(t *testing.T, addr string) (func(args ...string) (string, int), []string) {
	auth := []string{"--servers", addr, "--auth", "ops:secret"}
	return func(args ...string) (string, int) {
		t.Helper()
		if i := slices.Index(args, "--"); i >= 0 {
			args = slices.Concat(args[:i], auth, args[i:])
		} else {
			args = append(args, auth...)
		}
		out, stderr, code := firstHourExec(t, 30*time.Second, nil, args...)
		return out + stderr, code
	}, auth
}
