package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordrun/coordrun/fencing"
)

// fenceEnv clears the environment variables that fence reads and sets the
// ones given, as coordrun run would for its job.
func fenceEnv(t *testing.T, kv ...string) {
	t.Helper()
	for _, k := range []string{fencing.EnvToken, fencing.EnvLock, "COORDRUN_TOKEN", "COORDRUN_STATE", "COORDRUN_CONFIG"} {
		t.Setenv(k, "") // viper treats empty as unset, and so does fence
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// fence runs `coordrun args...` in process and returns its stdout and the
// error main would map to an exit code.
func fence(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// fenceMark reads the mark that fence check left for lock.
func fenceMark(t *testing.T, state, lock string) fencing.Token {
	t.Helper()
	g, err := fencing.OpenGuard(state)
	if err != nil {
		t.Fatal(err)
	}
	tok, ok, err := g.HighWater(lock)
	if err != nil || !ok {
		t.Fatalf("HighWater(%q) = %d, %v, %v", lock, tok, ok, err)
	}
	return tok
}

func wantStaleExit(t *testing.T, err error, msg string) {
	t.Helper()
	var ee exitError
	if !errors.As(err, &ee) || ee.code != exitStaleToken {
		t.Fatalf("error %v (%T): want exitError with code %d", err, err, exitStaleToken)
	}
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Errorf("errors.Is(%v, ErrStaleToken) = false", err)
	}
	if err.Error() != msg {
		t.Errorf("message %q, want %q", err, msg)
	}
}

func wantUsage(t *testing.T, err error, contains string) {
	t.Helper()
	var ue usageError
	if !errors.As(err, &ue) {
		t.Fatalf("error %v (%T): want usageError (exit %d)", err, err, exitUsage)
	}
	var ee exitError
	if errors.As(err, &ee) {
		t.Errorf("usage error %v also carries exit code %d", err, ee.code)
	}
	if !strings.Contains(err.Error(), contains) {
		t.Errorf("message %q, want it to contain %q", err, contains)
	}
}

func TestFenceCheckFromEnv(t *testing.T) {
	state := filepath.Join(t.TempDir(), ".fence")
	for _, tok := range []string{"41", "42", "42"} {
		fenceEnv(t, fencing.EnvToken, tok, fencing.EnvLock, "nightly")
		if out, err := fence(t, "fence", "check", "--state", state); err != nil || out != "" {
			t.Fatalf("check with token %s = %q, %v; want silent success", tok, out, err)
		}
	}
	if got := fenceMark(t, state, "nightly"); got != 42 {
		t.Fatalf("mark %d, want 42", got)
	}

	fenceEnv(t, fencing.EnvToken, "41", fencing.EnvLock, "nightly")
	_, err := fence(t, "fence", "check", "--state", state)
	wantStaleExit(t, err, "stale fencing token 41 for lock nightly: resource already accepted 42")
	if got := fenceMark(t, state, "nightly"); got != 42 {
		t.Fatalf("mark %d after a rejection, want 42", got)
	}
}

func TestFenceCheckFlagsOverrideEnv(t *testing.T) {
	state := filepath.Join(t.TempDir(), ".fence")
	fenceEnv(t, fencing.EnvToken, "100", fencing.EnvLock, "nightly")
	if _, err := fence(t, "fence", "check", "--state", state, "--lock", "weekly", "--token", "5"); err != nil {
		t.Fatal(err)
	}
	if got := fenceMark(t, state, "weekly"); got != 5 {
		t.Fatalf("weekly mark %d, want 5", got)
	}
	g, _ := fencing.OpenGuard(state)
	if _, ok, _ := g.HighWater("nightly"); ok {
		t.Fatal("the env's lock got a mark although --lock was given")
	}
	_, err := fence(t, "fence", "check", "--state", state, "--lock", "weekly", "--token", "4")
	wantStaleExit(t, err, "stale fencing token 4 for lock weekly: resource already accepted 5")
}

func TestFenceCheckUsageErrors(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, ".fence")
	corrupt := filepath.Join(dir, "corrupt")
	if err := os.WriteFile(corrupt, []byte(`{"locks": {"nightly": 4`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		env      []string
		args     []string
		contains string
	}{
		{name: "no token", env: []string{fencing.EnvLock, "nightly"}, args: []string{"--state", state},
			contains: "no fencing token: pass --token or set COORDRUN_FENCING_TOKEN"},
		{name: "bad token in env", env: []string{fencing.EnvToken, "4x2", fencing.EnvLock, "nightly"}, args: []string{"--state", state},
			contains: `COORDRUN_FENCING_TOKEN: invalid fencing token "4x2": not a decimal integer`},
		{name: "bad --token", env: []string{fencing.EnvLock, "nightly"}, args: []string{"--state", state, "--token", "forty-two"},
			contains: `--token: invalid fencing token "forty-two"`},
		{name: "negative token", env: []string{fencing.EnvLock, "nightly"}, args: []string{"--state", state, "--token", "-3"},
			contains: "negative"},
		{name: "token overflow", env: []string{fencing.EnvLock, "nightly"}, args: []string{"--state", state, "--token", "9223372036854775808"},
			contains: "larger than"},
		{name: "no lock", env: []string{fencing.EnvToken, "42"}, args: []string{"--state", state},
			contains: "no lock name: pass --lock or set COORDRUN_LOCK"},
		{name: "no state", env: []string{fencing.EnvToken, "42", fencing.EnvLock, "nightly"},
			contains: "--state is required"},
		{name: "state directory missing", env: []string{fencing.EnvToken, "42", fencing.EnvLock, "nightly"}, args: []string{"--state", filepath.Join(dir, "nope", ".fence")},
			contains: "no such file or directory"},
		{name: "state is a directory", env: []string{fencing.EnvToken, "42", fencing.EnvLock, "nightly"}, args: []string{"--state", dir},
			contains: "is a directory"},
		{name: "corrupt state", env: []string{fencing.EnvToken, "42", fencing.EnvLock, "nightly"}, args: []string{"--state", corrupt},
			contains: "corrupt fencing state " + corrupt},
		{name: "extra argument", env: []string{fencing.EnvToken, "42", fencing.EnvLock, "nightly"}, args: []string{"--state", state, "42"},
			contains: "unknown command"},
		{name: "unknown flag", env: []string{fencing.EnvToken, "42", fencing.EnvLock, "nightly"}, args: []string{"--state", state, "--tokn", "42"},
			contains: "unknown flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fenceEnv(t, tc.env...)
			_, err := fence(t, append([]string{"fence", "check"}, tc.args...)...)
			wantUsage(t, err, tc.contains)
		})
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed check created the state file (stat: %v)", err)
	}
	if b, _ := os.ReadFile(corrupt); string(b) != `{"locks": {"nightly": 4` {
		t.Errorf("corrupt state file rewritten to %q", b)
	}
}

func TestFenceShow(t *testing.T) {
	state := filepath.Join(t.TempDir(), ".fence")
	fenceEnv(t)
	_, err := fence(t, "fence", "show", "--state", state)
	wantUsage(t, err, "no token accepted yet")

	for _, a := range [][]string{{"nightly", "42"}, {"backup", "7"}} {
		if _, err := fence(t, "fence", "check", "--state", state, "--lock", a[0], "--token", a[1]); err != nil {
			t.Fatal(err)
		}
	}
	out, err := fence(t, "fence", "show", "--state", state)
	if err != nil {
		t.Fatal(err)
	}
	if want := "LOCK     HIGH-WATER\nbackup   7\nnightly  42\n"; out != want {
		t.Errorf("show printed\n%s\nwant\n%s", out, want)
	}

	out, err = fence(t, "fence", "show", "--state", state, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Locks map[string]int64 }
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Locks) != 2 || got.Locks["nightly"] != 42 || got.Locks["backup"] != 7 {
		t.Errorf("show --json printed %s (%v)", out, err)
	}
}

// fenceProcEnv is the environment for fence subprocesses: ours without
// COORDRUN_* variables, plus kv.
func fenceProcEnv(kv ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "COORDRUN_") {
			env = append(env, e)
		}
	}
	return append(env, kv...)
}

// fenceExec runs cmd and returns its stdout, stderr and exit code.
func fenceExec(t *testing.T, cmd *exec.Cmd) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestFenceBinaryExitCodes checks main's mapping of fence's errors to exit
// codes and messages, in the built binary.
func TestFenceBinaryExitCodes(t *testing.T) {
	state := filepath.Join(t.TempDir(), ".fence")
	run := func(token string, args ...string) (string, int) {
		cmd := exec.Command(procBin, append([]string{"fence", "check", "--state", state}, args...)...)
		cmd.Env = fenceProcEnv(fencing.EnvToken+"="+token, fencing.EnvLock+"=nightly")
		_, stderr, code := fenceExec(t, cmd)
		return stderr, code
	}
	if stderr, code := run("42"); code != 0 || stderr != "" {
		t.Fatalf("token 42: exit %d, stderr %q", code, stderr)
	}
	if stderr, code := run("41"); code != exitStaleToken || stderr != "coordrun: stale fencing token 41 for lock nightly: resource already accepted 42\n" {
		t.Errorf("token 41: exit %d, stderr %q", code, stderr)
	}
	if stderr, code := run("x"); code != exitUsage || !strings.Contains(stderr, "COORDRUN_FENCING_TOKEN") {
		t.Errorf("token x: exit %d, stderr %q", code, stderr)
	}
	if stderr, code := run(""); code != exitUsage || !strings.Contains(stderr, "no fencing token") {
		t.Errorf("no token: exit %d, stderr %q", code, stderr)
	}
}

// TestFenceExampleScript runs examples/fenced-store/write.sh as coordrun
// run would, with the variables set by hand: a holder frozen past its
// session resumes after the next holder wrote, and its write is refused.
func TestFenceExampleScript(t *testing.T) {
	script, err := filepath.Abs("../../examples/fenced-store/write.sh")
	if err != nil {
		t.Fatal(err)
	}
	binDir := t.TempDir()
	if err := os.Symlink(procBin, filepath.Join(binDir, "coordrun")); err != nil {
		t.Fatal(err)
	}
	store := t.TempDir()
	write := func(token, record string) (string, int) {
		cmd := exec.Command("bash", script, record)
		env := []string{"STORE=" + store, fencing.EnvLock + "=nightly", "PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH")}
		if token != "" {
			env = append(env, fencing.EnvToken+"="+token)
		}
		cmd.Env = fenceProcEnv(env...)
		_, stderr, code := fenceExec(t, cmd)
		return stderr, code
	}

	steps := []struct {
		token, record string
		code          int
		stderr        string
	}{
		{token: "41", record: "A: first half", code: 0},
		{token: "42", record: "B: whole job", code: 0},
		{token: "42", record: "B: again", code: 0}, // the same holder writes again
		{token: "41", record: "A: second half, after the freeze", code: exitStaleToken,
			stderr: "coordrun: stale fencing token 41 for lock nightly: resource already accepted 42\n"},
		{token: "", record: "no token", code: exitUsage,
			stderr: "coordrun: no fencing token: pass --token or set COORDRUN_FENCING_TOKEN\n"},
	}
	for _, s := range steps {
		stderr, code := write(s.token, s.record)
		if code != s.code || stderr != s.stderr {
			t.Errorf("write.sh %q with token %q: exit %d, stderr %q; want exit %d, stderr %q", s.record, s.token, code, stderr, s.code, s.stderr)
		}
	}

	b, err := os.ReadFile(filepath.Join(store, "data.log"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	want := []string{"token=41 A: first half", "token=42 B: whole job", "token=42 B: again"}
	if len(lines) != len(want) {
		t.Fatalf("data.log:\n%s\nwant %d lines", b, len(want))
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], " "+w) {
			t.Errorf("data.log line %d = %q, want it to end in %q", i+1, lines[i], w)
		}
	}
	if got := fenceMark(t, filepath.Join(store, ".fence"), "nightly"); got != 42 {
		t.Errorf("mark %d, want 42", got)
	}
}
