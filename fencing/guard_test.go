package fencing

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func openTestGuard(t *testing.T) *Guard {
	t.Helper()
	g, err := OpenGuard(filepath.Join(t.TempDir(), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func wantMark(t *testing.T, g *Guard, lock string, want Token) {
	t.Helper()
	got, ok, err := g.HighWater(lock)
	if err != nil || !ok || got != want {
		t.Fatalf("HighWater(%q) = %d, %v, %v; want %d, true, nil", lock, got, ok, err, want)
	}
}

func TestGuardAcceptRejectEqual(t *testing.T) {
	g := openTestGuard(t)
	if _, ok, err := g.HighWater("nightly"); ok || err != nil {
		t.Fatalf("fresh guard: HighWater = _, %v, %v; want no mark", ok, err)
	}
	if _, err := os.Stat(g.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenGuard created the state file (stat: %v)", err)
	}
	for _, tok := range []Token{41, 42, 42} {
		if err := g.Accept("nightly", tok); err != nil {
			t.Fatalf("Accept(%d): %v", tok, err)
		}
		wantMark(t, g, "nightly", tok)
	}

	err := g.Accept("nightly", 41)
	var stale *StaleTokenError
	if !errors.As(err, &stale) {
		t.Fatalf("Accept(41) after 42 = %v, want *StaleTokenError", err)
	}
	if *stale != (StaleTokenError{Lock: "nightly", Token: 41, HighWater: 42}) {
		t.Errorf("StaleTokenError = %+v", *stale)
	}
	if !errors.Is(err, ErrStaleToken) {
		t.Errorf("errors.Is(%v, ErrStaleToken) = false", err)
	}
	if want := "stale fencing token 41 for lock nightly: resource already accepted 42"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	wantMark(t, g, "nightly", 42)

	// Marks are per lock: another lock's low token is its own first holder.
	if err := g.Accept("weekly", 3); err != nil {
		t.Fatal(err)
	}
	marks, err := g.Marks()
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != 2 || marks["nightly"] != 42 || marks["weekly"] != 3 {
		t.Fatalf("Marks() = %v", marks)
	}
}

func TestGuardCheckDoesNotRaise(t *testing.T) {
	g := openTestGuard(t)
	if err := g.Check("nightly", 7); err != nil {
		t.Fatalf("Check on a fresh guard: %v", err)
	}
	if _, ok, _ := g.HighWater("nightly"); ok {
		t.Fatal("Check raised a mark")
	}
	if err := g.Accept("nightly", 10); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tok   Token
		stale bool
	}{{9, true}, {10, false}, {11, false}} {
		err := g.Check("nightly", tc.tok)
		if got := errors.Is(err, ErrStaleToken); got != tc.stale {
			t.Errorf("Check(%d) = %v, want stale=%v", tc.tok, err, tc.stale)
		}
	}
	wantMark(t, g, "nightly", 10)
}

func TestGuardPersistsAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	g, err := OpenGuard(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Accept("nightly", 42); err != nil {
		t.Fatal(err)
	}
	if err := g.Accept("weekly", 1<<40); err != nil {
		t.Fatal(err)
	}

	// The documented format, readable by other tools.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ Locks map[string]int64 }
	if err := json.Unmarshal(b, &st); err != nil || st.Locks["nightly"] != 42 || st.Locks["weekly"] != 1<<40 {
		t.Fatalf("state file %s: %v, %+v", b, err, st)
	}

	g2, err := OpenGuard(path)
	if err != nil {
		t.Fatal(err)
	}
	wantMark(t, g2, "nightly", 42)
	if err := g2.Accept("nightly", 41); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("reopened guard accepted a stale token: %v", err)
	}
	if err := g2.Accept("nightly", 43); err != nil {
		t.Fatal(err)
	}
	wantMark(t, g, "nightly", 43) // the first Guard reads the same file
	for _, leftover := range []string{path + ".tmp"} {
		if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind (stat: %v)", leftover, err)
		}
	}
}

func TestGuardCorruptFile(t *testing.T) {
	for _, content := range []string{
		"",
		"\n",
		"garbage",
		`{"locks": {"nightly": 42}`,
		`{}`,
		`null`,
		`[]`,
		`{"locks": null}`,
		`{"locks": []}`,
		`{"locks": {"nightly": -1}}`,
		`{"locks": {"nightly": 4.2}}`,
		`{"locks": {"nightly": "42"}}`,
		`{"locks": {"nightly": 9223372036854775808}}`,
		`{"locks": {"": 1}}`,
		`{"locks": {"nightly": 42}, "version": 2}`,
		`{"locks": {"nightly": 42}} {"locks": {}}`,
		`{"locks": {"nightly": 42}} x`,
	} {
		t.Run(fmt.Sprintf("%q", content), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := OpenGuard(path); !errors.Is(err, ErrCorruptState) {
				t.Fatalf("OpenGuard = %v, want ErrCorruptState", err)
			}

			// Corrupted after opening: every call fails, the file stays.
			if err := os.WriteFile(path, []byte(`{"locks": {}}`), 0o644); err != nil {
				t.Fatal(err)
			}
			g, err := OpenGuard(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := g.Accept("nightly", 50); !errors.Is(err, ErrCorruptState) || !strings.Contains(err.Error(), path) {
				t.Errorf("Accept = %v, want ErrCorruptState naming the file", err)
			}
			if err := g.Check("nightly", 50); !errors.Is(err, ErrCorruptState) {
				t.Errorf("Check = %v, want ErrCorruptState", err)
			}
			if _, _, err := g.HighWater("nightly"); !errors.Is(err, ErrCorruptState) {
				t.Errorf("HighWater = %v, want ErrCorruptState", err)
			}
			if b, _ := os.ReadFile(path); string(b) != content {
				t.Errorf("corrupt file rewritten to %q", b)
			}
		})
	}
}

func TestGuardOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenGuard(""); err == nil {
		t.Error("OpenGuard(\"\") succeeded")
	}
	if _, err := OpenGuard(filepath.Join(dir, "missing", "state.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenGuard in a missing directory = %v", err)
	}
	if _, err := OpenGuard(dir); err == nil {
		t.Error("OpenGuard on a directory succeeded")
	}
}

func TestGuardInvalidArguments(t *testing.T) {
	g := openTestGuard(t)
	if err := g.Accept("", 1); !errors.Is(err, ErrNoLock) {
		t.Errorf("Accept with empty lock = %v", err)
	}
	if err := g.Accept("nightly", -1); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("Accept(-1) = %v", err)
	}
	if err := g.Check("", 1); !errors.Is(err, ErrNoLock) {
		t.Errorf("Check with empty lock = %v", err)
	}
}

func TestGuardDo(t *testing.T) {
	g := openTestGuard(t)
	called := 0
	if err := g.Do("nightly", 5, func() error {
		called++
		// The mark is raised before fn runs.
		wantMark(t, g, "nightly", 5)
		return nil
	}); err != nil || called != 1 {
		t.Fatalf("Do = %v, fn called %d times", err, called)
	}

	boom := errors.New("disk full")
	if err := g.Do("nightly", 6, func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	wantMark(t, g, "nightly", 6)

	err := g.Do("nightly", 4, func() error {
		t.Error("fn ran for a stale token")
		return nil
	})
	if !errors.Is(err, ErrStaleToken) {
		t.Fatalf("Do(4) = %v", err)
	}
}

func TestGuardKeepsFileModeAndClearsLeftovers(t *testing.T) {
	g := openTestGuard(t)
	if err := g.Accept("nightly", 1); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(g.Path(), 0o600); err != nil {
		t.Fatal(err)
	}
	// A temporary file left by a crash mid-write.
	if err := os.WriteFile(g.Path()+".tmp", []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := g.Accept("nightly", 2); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(g.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v after rewrite, want 0600", fi.Mode().Perm())
	}
	if _, err := os.Stat(g.Path() + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover temporary file still there (stat: %v)", err)
	}
	wantMark(t, g, "nightly", 2)
}

// hammer is one worker of the concurrency tests: it opens its own Guard on
// path and, for rounds rounds, presents token round*workers+id+1 through
// Do, whose fn appends "id token" to logPath. Workers race, so many tokens
// are stale by the time they arrive; that is the point.
func hammer(path, logPath string, id, workers, rounds int) error {
	g, err := OpenGuard(path)
	if err != nil {
		return err
	}
	for r := range rounds {
		tok := Token(r*workers + id + 1)
		err := g.Do("nightly", tok, func() error {
			f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(f, "%d %d\n", id, tok)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		})
		var stale *StaleTokenError
		switch {
		case err == nil:
		case errors.As(err, &stale):
			if stale.Token != tok || stale.HighWater <= tok || stale.Lock != "nightly" {
				return fmt.Errorf("worker %d: bad rejection %+v of token %d", id, *stale, tok)
			}
		default:
			return fmt.Errorf("worker %d: %w", id, err)
		}
	}
	return nil
}

// checkHammered verifies what the workers left: the writes that got
// through are in non-decreasing token order (no stale write slipped in
// after a newer one), and the mark is the highest token, which no worker
// can have been refused.
func checkHammered(t *testing.T, path, logPath string, workers, rounds int) {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last, n int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			t.Fatalf("log line %q", sc.Text())
		}
		tok, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if tok < last {
			t.Fatalf("write with token %d accepted after a write with token %d", tok, last)
		}
		last = tok
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	max := Token(rounds * workers)
	if last != int64(max) {
		t.Errorf("last write has token %d, want %d", last, max)
	}
	g, err := OpenGuard(path)
	if err != nil {
		t.Fatal(err)
	}
	wantMark(t, g, "nightly", max)
	t.Logf("%d of %d writes accepted", n, workers*rounds)
}

func TestGuardConcurrentGuards(t *testing.T) {
	const workers, rounds = 8, 50
	dir := t.TempDir()
	path, logPath := filepath.Join(dir, "state.json"), filepath.Join(dir, "data.log")
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for id := range workers {
		wg.Go(func() {
			if err := hammer(path, logPath, id, workers, rounds); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkHammered(t, path, logPath, workers, rounds)
}

// Environment of TestGuardHelperProcess, set by
// TestGuardConcurrentProcesses when it re-executes the test binary.
const (
	helperEnvState   = "FENCING_TEST_HELPER_STATE"
	helperEnvLog     = "FENCING_TEST_HELPER_LOG"
	helperEnvID      = "FENCING_TEST_HELPER_ID"
	helperEnvWorkers = "FENCING_TEST_HELPER_WORKERS"
	helperEnvRounds  = "FENCING_TEST_HELPER_ROUNDS"
)

// TestGuardHelperProcess is one worker process of
// TestGuardConcurrentProcesses; run directly it does nothing.
func TestGuardHelperProcess(t *testing.T) {
	path := os.Getenv(helperEnvState)
	if path == "" {
		t.Skip("helper process for TestGuardConcurrentProcesses")
	}
	atoi := func(name string) int {
		n, err := strconv.Atoi(os.Getenv(name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return n
	}
	// Start together: the parent closes stdin once every worker runs.
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		t.Fatal(err)
	}
	if err := hammer(path, os.Getenv(helperEnvLog), atoi(helperEnvID), atoi(helperEnvWorkers), atoi(helperEnvRounds)); err != nil {
		t.Fatal(err)
	}
}

func TestGuardConcurrentProcesses(t *testing.T) {
	const workers, rounds = 4, 50
	dir := t.TempDir()
	path, logPath := filepath.Join(dir, "state.json"), filepath.Join(dir, "data.log")
	type proc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   strings.Builder
	}
	procs := make([]*proc, workers)
	for id := range workers {
		p := &proc{cmd: exec.Command(os.Args[0], "-test.run=^TestGuardHelperProcess$", "-test.count=1", "-test.v")}
		p.cmd.Env = append(os.Environ(),
			helperEnvState+"="+path,
			helperEnvLog+"="+logPath,
			helperEnvID+"="+strconv.Itoa(id),
			helperEnvWorkers+"="+strconv.Itoa(workers),
			helperEnvRounds+"="+strconv.Itoa(rounds),
		)
		p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
		var err error
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[id] = p
	}
	for _, p := range procs {
		p.stdin.Close()
	}
	for id, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("worker %d: %v\n%s", id, err, p.out.String())
		} else if !strings.Contains(p.out.String(), "--- PASS: TestGuardHelperProcess") {
			t.Errorf("worker %d did not run the helper:\n%s", id, p.out.String())
		}
	}
	if t.Failed() {
		return
	}
	checkHammered(t, path, logPath, workers, rounds)
}
