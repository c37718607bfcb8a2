package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/zookeeper"
	"github.com/coordrun/coordrun/supervisor"
)

// A frozen holder (SIGSTOP) keeps its node until its session expires;
// before that, status calls it lingering, in text and in --json, as the
// leader's status page does.
func TestStatusShowsLingeringHolder(t *testing.T) {
	t.Run("coordrun", func(t *testing.T) {
		statusShowsLingering(t, []string{"--servers", firstHourMember(t), "--auth", "ops:secret"})
	})
	// A semaphore's frozen holder, in its slot.
	t.Run("coordrun semaphore", func(t *testing.T) {
		addr := firstHourMember(t)
		auth := []string{"--servers", addr, "--auth", "ops:secret"}
		started := filepath.Join(t.TempDir(), "started")
		holder := procStart(t, "holder", append(append([]string{"run", "--name", "sem", "--holders", "2", "--session-timeout", "6s", "--kill-grace", "500ms"}, auth...),
			"--", "sh", "-c", "touch "+started+"; exec sleep 600")...)
		testkit.WaitFor(t, 30*time.Second, "the holder's job to start", func() bool {
			_, err := os.Stat(started)
			return err == nil || !holder.Running()
		})
		if err := holder.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = holder.Signal(syscall.SIGCONT) })
		var out string
		testkit.WaitFor(t, 12*time.Second, "status to call the semaphore's frozen holder lingering", func() bool {
			o, stderr, _ := firstHourExec(t, 30*time.Second, nil, append([]string{"status", "sem"}, auth...)...)
			out = o + stderr
			return strings.Contains(out, "lingering")
		})
		if !strings.Contains(out, "holder 1/2 (lingering)") || !strings.Contains(out, "silent for") {
			t.Errorf("status of a semaphore's frozen holder:\n%s", out)
		}
	})
	t.Run("etcd", func(t *testing.T) {
		testkit.RequireEtcd(t)
		statusShowsLingering(t, []string{"--servers", testkit.StartEtcd(t, 1).Servers()})
	})
	// Apache ZooKeeper has no read of a session's silence: status shows
	// its holders as before, without an error.
	t.Run("zookeeper", func(t *testing.T) {
		srv, err := zookeeper.Start(zookeeper.Require(t), "coordrun-status-zk-", client.FourLetter)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Stop()
		auth := []string{"--servers", srv.Addr}
		started := filepath.Join(t.TempDir(), "started")
		holder := procStart(t, "holder", append(append([]string{"run", "--name", "zk"}, auth...),
			"--", "sh", "-c", "touch "+started+"; exec sleep 600")...)
		testkit.WaitFor(t, 60*time.Second, "the holder's job to start", func() bool {
			_, err := os.Stat(started)
			return err == nil || !holder.Running()
		})
		out, stderr, code := firstHourExec(t, 30*time.Second, nil, append([]string{"status", "zk"}, auth...)...)
		if code != 0 || !strings.Contains(out, "holder") || strings.Contains(out+stderr, "lingering") {
			t.Errorf("status on Apache ZooKeeper: exit %d\n%s%s", code, out, stderr)
		}
	})
}

func statusShowsLingering(t *testing.T, auth []string) {
	started := filepath.Join(t.TempDir(), "started")
	const timeout = 6 * time.Second
	holder := procStart(t, "holder", append(append([]string{"run", "--name", "frozen", "--session-timeout", timeout.String(), "--kill-grace", "500ms"}, auth...),
		"--", "sh", "-c", "touch "+started+"; exec sleep 600")...)
	testkit.WaitFor(t, 30*time.Second, "the holder's job to start", func() bool {
		_, err := os.Stat(started)
		return err == nil || !holder.Running()
	})
	status := func(json bool) string {
		args := append([]string{"status", "frozen"}, auth...)
		if json {
			args = append(args, "--json")
		}
		out, stderr, code := firstHourExec(t, 30*time.Second, nil, args...)
		if code != 0 {
			t.Fatalf("status: exit %d\n%s%s", code, out, stderr)
		}
		return out + stderr
	}
	if out := status(false); strings.Contains(out, "lingering") || !strings.Contains(out, "holder") {
		t.Fatalf("a live holder:\n%s", out)
	}

	if err := holder.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Signal(syscall.SIGCONT) })
	// The one waiting right behind it says so too, before it gets the
	// lock (-v: the waiting line is informational).
	waiter := procStart(t, "waiter", append(append([]string{"run", "-v", "--name", "frozen", "--session-timeout", timeout.String(), "--kill-grace", "500ms"}, auth...),
		"--", "echo", "waiter ran")...)
	var text string
	testkit.WaitFor(t, 2*timeout, "status to call the frozen holder lingering", func() bool {
		text = status(false)
		return strings.Contains(text, "lingering")
	})
	if !strings.Contains(text, "holder (lingering)") || !strings.Contains(text, "silent for") || !strings.Contains(text, "until the session expires") {
		t.Errorf("status of a frozen holder:\n%s", text)
	}
	var locks []supervisor.LockState
	if err := json.Unmarshal([]byte(status(true)), &locks); err != nil {
		t.Fatal(err)
	}
	if len(locks) != 1 || locks[0].Holder == nil || !strings.Contains(locks[0].Lingering, "silent for") ||
		locks[0].Holder.Lingering != locks[0].Lingering {
		t.Errorf("status --json of a frozen holder: %+v", locks)
	}
	testkit.WaitFor(t, 4*timeout, "the waiter to run its job", func() bool { return !waiter.Running() })
	out := waiter.Out.String()
	saw, ran := strings.Index(out, "holder_lingering="), strings.Index(out, "waiter ran")
	if code := waiter.ExitCode(); code != 0 || saw < 0 || ran < saw || !strings.Contains(out[saw:], "silent for") {
		t.Errorf("the waiter behind a frozen holder (exit %d) did not call it lingering before it ran:\n%s", code, out)
	}
}
