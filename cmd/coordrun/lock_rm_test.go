package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
)

// lock rm of a semaphore (run --holders N) removes its gate, markers and
// slots with it when nobody is in any of them, and refuses while a
// holder or a waiter is there, as for a plain lock.
func TestLockRmSemaphore(t *testing.T) {
	addr := firstHourMember(t)
	cli, auth := authedCLI(t, addr)
	if out, code := cli("run", "--name", "idle", "--holders", "2", "--", "true"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	dir := t.TempDir()
	hold := func(name string) {
		t.Helper()
		started := filepath.Join(dir, name)
		p := procStart(t, name, slices.Concat([]string{"run", "--name", "busy", "--holders", "2"}, auth,
			[]string{"--", "sh", "-c", "touch " + started + "; exec sleep 600"})...)
		testkit.WaitFor(t, 30*time.Second, name+"'s job to start", func() bool {
			_, err := os.Stat(started)
			return err == nil || !p.Running()
		})
	}
	hold("first")
	hold("second")
	waiter := procStart(t, "waiter", slices.Concat([]string{"run", "--name", "busy", "--holders", "2"}, auth, []string{"--", "true"})...)
	testkit.WaitFor(t, 30*time.Second, "the waiter to queue", func() bool {
		out, _ := cli("status", "busy")
		return strings.Contains(out, "waiter 1") || !waiter.Running()
	})
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"lock", "rm", "busy"}, supervisor.ExitNotAcquired, "lock busy is in use: 2 of its 2 slots held"},
		{[]string{"lock", "rm", "busy"}, supervisor.ExitNotAcquired, "1 waiting"},
		{[]string{"status", "busy"}, 0, "holder 2/2"},
		{[]string{"lock", "rm", "idle"}, 0, "removed lock idle"},
		{[]string{"status", "idle"}, supervisor.ExitNotFound, `no such lock "idle"`},
		{[]string{"run", "--name", "idle", "--holders", "2", "--", "true"}, 0, ""},
		{[]string{"lock", "rm", "idle"}, 0, "removed lock idle"},
	} {
		out, code := cli(c.args...)
		if code != c.code || !strings.Contains(out, c.says) {
			t.Errorf("coordrun %s: exit %d, want %d saying %q:\n%s", strings.Join(c.args, " "), code, c.code, c.says, out)
		}
	}
}
