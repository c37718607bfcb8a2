package main

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
)

// help of a word that names no command is bad usage with a suggestion,
// as the word alone is; help of a command still shows it.
func TestHelpUnknownTopic(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"help", "statsu"}, exitUsage, "did you mean status?"},
		{[]string{"help", "cron", "lsit"}, exitUsage, "did you mean list?"},
		{[]string{"help", "lock", "rm"}, 0, "Remove the folders of locks"},
		{[]string{"help"}, 0, "Available Commands"},
	} {
		out, stderr, code := firstHourExec(t, 20*time.Second, nil, c.args...)
		if code != c.code || !strings.Contains(out+stderr, c.says) {
			t.Errorf("coordrun %s: exit %d, want %d saying %q:\n%s%s", strings.Join(c.args, " "), code, c.code, c.says, out, stderr)
		}
	}
}

// A snapshot refused for want of an administrator is bad usage, as a
// membership change refused for it is (docs/exit-codes.md); members that
// do not answer are 69.
func TestSnapshotSaveExitCodes(t *testing.T) {
	addr := firstHourMember(t)
	dead := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	file := filepath.Join(t.TempDir(), "s.snap")
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"ensemble", "snapshot", "save", file, "--servers", addr}, exitUsage, "snapshots need an administrator"},
		{[]string{"ensemble", "add", "2", dead, "--servers", addr}, exitUsage, "need an administrator"},
		{[]string{"ensemble", "snapshot", "save", file, "--servers", dead, "--timeout", "2s"}, supervisor.ExitUnavailable, "no snapshot saved"},
	} {
		_, stderr, code := firstHourExec(t, 30*time.Second, nil, c.args...)
		if code != c.code || !strings.Contains(stderr, c.says) {
			t.Errorf("coordrun %s: exit %d, want %d saying %q:\n%s", strings.Join(c.args, " "), code, c.code, c.says, stderr)
		}
	}
}

// A member start that fails leaves no data dir it created (a busy peer
// port here); one that was there before stays.
func TestFailedServerStartLeavesNoDataDir(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	peer := busy.Addr().String()
	base := t.TempDir()
	existing := filepath.Join(base, "existing")
	if err := os.Mkdir(existing, 0o750); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(base, "new", "member"), existing} {
		_, stderr, code := firstHourExec(t, 30*time.Second, nil, "server", "--id", "1", "--data-dir", dir,
			"--client-addr", "127.0.0.1:0", "--peer-addr", peer, "--peers", "1="+peer)
		if code == 0 || !strings.Contains(stderr, "address already in use") {
			t.Fatalf("server on a busy peer port: exit %d\n%s", code, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "new")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the failed start left %s/new behind: %v", base, err)
	}
	if _, err := os.Stat(existing); err != nil {
		t.Errorf("the failed start removed a data dir that was there before: %v", err)
	}
}

// An idle time too short to keep a lock's record for its next holder is
// refused, naming the least.
func TestRemoveIdleLocksBound(t *testing.T) {
	_, stderr, code := firstHourExec(t, 30*time.Second, nil, "server", "--dev", "--client-addr", "127.0.0.1:0", "--remove-idle-locks", "5s")
	if code != exitUsage || !strings.Contains(stderr, "--remove-idle-locks 5s: at least 1m0s, or 0 for never") {
		t.Errorf("server --remove-idle-locks 5s: exit %d\n%s", code, stderr)
	}
}
