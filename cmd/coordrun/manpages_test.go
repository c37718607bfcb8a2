package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Man pages carry what a reader of a man page looks for: EXIT STATUS,
// ENVIRONMENT, FILES and EXAMPLES, in man-pages(7)'s order.
func TestManPagesSections(t *testing.T) {
	dir := t.TempDir()
	if err := genManPages(newRootCommand(), dir); err != nil {
		t.Fatal(err)
	}
	for _, page := range []string{"coordrun.1", "coordrun-run.1", "coordrun-status.1", "coordrun-server.1", "coordrun-lock-rm.1", "coordrun-cron.1", "coordrun-ensemble-status.1"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Fatal(err)
		}
		text, last := string(b), -1
		for _, sec := range []string{".SH OPTIONS", ".SH EXIT STATUS", ".SH ENVIRONMENT", ".SH FILES", ".SH EXAMPLES", ".SH SEE ALSO"} {
			i := strings.Index(text, "\n"+sec+"\n")
			if i < 0 || i < last {
				t.Errorf("%s: %s missing or out of order", page, sec)
			}
			last = i
		}
		for _, want := range []string{"COORDRUN_SERVERS", `/etc/coordrun/coordrun.yaml`} {
			if page != "coordrun-server.1" && !strings.Contains(text, want) {
				t.Errorf("%s lacks %s", page, want)
			}
		}
	}
	run, _ := os.ReadFile(filepath.Join(dir, "coordrun-run.1"))
	for _, want := range []string{"\\fB75\\fP", "COORDRUN_FENCING_TOKEN", `\-\-conflict\-exit\-code`} {
		if !strings.Contains(string(run), want) {
			t.Errorf("coordrun-run.1 lacks %q", want)
		}
	}
}

// --version answers as coordrun version's first line does; --help shows
// examples.
func TestVersionFlagAndExamples(t *testing.T) {
	out, stderr, code := firstHourExec(t, 10*time.Second, nil, "--version")
	verOut, _, _ := firstHourExec(t, 10*time.Second, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "coordrun ") || out != strings.SplitAfter(verOut, "\n")[0] {
		t.Errorf("--version: exit %d, %q (version says %q) %s", code, out, verOut, stderr)
	}
	out, _, code = firstHourExec(t, 10*time.Second, nil, "status", "--help")
	if code != 0 || !strings.Contains(out, "Examples:\n  coordrun status") {
		t.Errorf("status --help has no examples:\n%s", out)
	}
}

// Shell completion offers the lock names the ensemble holds, and the
// values of enumerated flags.
func TestCompletionOffersLockNames(t *testing.T) {
	addr := firstHourMember(t)
	for _, name := range []string{"nightly", "night-backup"} {
		if _, stderr, code := firstHourExec(t, 30*time.Second, nil, "run", "--servers", addr, "--auth", "ops:secret", "--name", name, "--", "true"); code != 0 {
			t.Fatalf("run: %d %s", code, stderr)
		}
	}
	out, _, code := firstHourExec(t, 10*time.Second, nil, "__complete", "status", "--servers", addr, "--auth", "ops:secret", "nig")
	if code != 0 || !strings.HasPrefix(out, "night-backup\nnightly\n:4\n") {
		t.Errorf("completing status nig: exit %d, %q", code, out)
	}
	out, _, _ = firstHourExec(t, 10*time.Second, nil, "__complete", "lock", "rm", "--servers", addr, "--auth", "ops:secret", "nightly", "")
	if strings.Contains(out, "nightly\n") || !strings.Contains(out, "night-backup\n") {
		t.Errorf("completing lock rm after nightly: %q; want the other name only", out)
	}
	out, _, _ = firstHourExec(t, 10*time.Second, nil, "__complete", "run", "--log-format", "")
	if !strings.HasPrefix(out, "text\njson\n") {
		t.Errorf("completing --log-format: %q", out)
	}
}
