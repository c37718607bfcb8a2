package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// notifySocket is a stand-in for systemd's notify socket.
type notifySocket struct {
	path string
	conn *net.UnixConn
}

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	// A short directory: unix socket paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &notifySocket{path: path, conn: conn}
}

// next returns the next message, or ok false if none arrives before the
// deadline.
func (s *notifySocket) next(t *testing.T, deadline time.Time) (string, bool) {
	t.Helper()
	_ = s.conn.SetReadDeadline(deadline)
	buf := make([]byte, 4096)
	n, err := s.conn.Read(buf)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return "", false
		}
		t.Fatalf("notify socket: %v", err)
	}
	return string(buf[:n]), true
}

// await reads messages until one has the line want; it returns that
// message and those before it.
func (s *notifySocket) await(t *testing.T, d time.Duration, want string) (string, []string) {
	t.Helper()
	deadline := time.Now().Add(d)
	var seen []string
	for {
		msg, ok := s.next(t, deadline)
		if !ok {
			t.Fatalf("no %s within %v; messages: %q", want, d, seen)
		}
		if hasLine(msg, want) {
			return msg, seen
		}
		seen = append(seen, msg)
	}
}

func hasLine(msg, line string) bool {
	for _, l := range strings.Split(msg, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// TestNotifySystemd runs the server as systemd would start a Type=notify
// unit with WatchdogSec: READY=1 once it serves, WATCHDOG=1 pings, and
// STOPPING=1 on SIGTERM. WATCHDOG_PID stays unset (systemd sets it to the
// service's pid, which the test learns only after the start), so the
// server takes WATCHDOG_USEC as meant for itself. The same run checks that
// --log-format json writes JSON lines only, raft's lines included.
func TestNotifySystemd(t *testing.T) {
	sock := listenNotify(t)
	t.Setenv("NOTIFY_SOCKET", sock.path)
	t.Setenv("WATCHDOG_USEC", "1000000") // pings every 0.5s
	t.Setenv("WATCHDOG_PID", "")
	client := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	p := procStart(t, "notify server", "server", "--dev", "--client-addr", client, "--log-format", "json")

	ready, before := sock.await(t, 30*time.Second, "READY=1")
	// Ready means serving: the client port answers at once, a leader is
	// known, and a session works.
	if answer, err := procWord(client, "ruok", nil); answer != "imok" {
		t.Fatalf("ruok right after READY=1: %q %v", answer, err)
	}
	if srvr, err := procWord(client, "srvr", nil); !strings.Contains(srvr, "Mode: standalone") {
		t.Fatalf("srvr right after READY=1: %q %v", srvr, err)
	}
	if !hasLine(ready, "STATUS=serving clients on "+client) {
		t.Errorf("READY message %q lacks the serving status", ready)
	}
	for _, msg := range before {
		if hasLine(msg, "STOPPING=1") {
			t.Errorf("STOPPING=1 before READY=1: %q", before)
		}
	}
	conn := testkit.DialZK(t, []string{client}, 10*time.Second)
	if _, err := conn.Create("/notify", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create after READY=1: %v", err)
	}
	conn.Close()

	// Periodic watchdog pings: two of them.
	for i := 0; i < 2; i++ {
		sock.await(t, 10*time.Second, "WATCHDOG=1")
	}

	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sock.await(t, 15*time.Second, "STOPPING=1")
	if code := p.Exit(t, 15*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	// The process is gone, so everything it sent is queued on the socket.
	for {
		msg, ok := sock.next(t, time.Now().Add(50*time.Millisecond))
		if !ok {
			break
		}
		if hasLine(msg, "READY=1") || hasLine(msg, "WATCHDOG=1") {
			t.Errorf("%q after STOPPING=1", msg)
		}
	}

	// Every output line is one JSON object with slog's keys; raft's own
	// lines come through the bridge as messages.
	out := strings.TrimRight(p.Out.String(), "\n")
	raftLines := 0
	for _, line := range strings.Split(out, "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON line: %q (%v)", line, err)
			continue
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("log line without %q: %s", k, line)
			}
		}
		if msg, _ := rec["msg"].(string); strings.Contains(msg, "raft: ") {
			raftLines++
		}
	}
	if raftLines == 0 {
		t.Errorf("no raft lines in the log:\n%s", out)
	}
}

// TestNotifyWaitingStatus: a lone member of a new three-member ensemble
// tells systemd which peers it waits for (systemctl status shows it) and
// logs that once, not once per election round.
func TestNotifyWaitingStatus(t *testing.T) {
	sock := listenNotify(t)
	t.Setenv("NOTIFY_SOCKET", sock.path)
	addrs := testkit.FreeAddrs(t, "127.0.0.1", 4)
	peers := "1=" + addrs[1] + ",2=" + addrs[2] + ",3=" + addrs[3]
	p := procStart(t, "lone member", "server", "--id", "1", "--data-dir", t.TempDir(), "--client-addr", addrs[0],
		"--peer-addr", addrs[1], "--peers", peers, "--heartbeat-timeout", "100ms", "--election-timeout", "100ms", "--log-level", "debug")
	msg, before := sock.await(t, 30*time.Second, "STATUS=waiting for peers 2,3 (unreachable)")
	for _, m := range append(before, msg) {
		if hasLine(m, "READY=1") {
			t.Fatalf("READY=1 without a leader: %q", m)
		}
	}
	// Many election rounds later (100ms each; raft's line of each is at
	// debug level), still one line.
	testkit.WaitFor(t, 30*time.Second, "ten election rounds", func() bool {
		return strings.Count(p.Out.String(), "level=DEBUG msg=\"raft: Election timeout reached") >= 10
	})
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.Exit(t, 15*time.Second)
	out := p.Out.String()
	if n := strings.Count(out, "waiting for peers 2,3 (unreachable)"); n != 1 {
		t.Errorf("%d waiting lines:\n%s", n, out)
	}
	if strings.Contains(out, "level=ERROR") || strings.Contains(out, "level=WARN") || !strings.Contains(out, "level=DEBUG msg=\"raft: failed to make requestVote RPC") {
		t.Errorf("a lone member logged warnings or errors:\n%s", out)
	}
}

// TestWatchdogAbort: SIGABRT, what systemd's watchdog sends a member that
// stopped pinging, ends the server at once with exit 134 and one ERROR
// line naming the reason and a file in the data dir with every
// goroutine's stack, instead of a dump of hundreds of lines on stderr.
func TestWatchdogAbort(t *testing.T) {
	sock := listenNotify(t)
	t.Setenv("NOTIFY_SOCKET", sock.path)
	t.Setenv("WATCHDOG_USEC", "2000000")
	t.Setenv("WATCHDOG_PID", "")
	dir := t.TempDir()
	client := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	p := procStart(t, "server", "server", "--dev", "--data-dir", dir, "--client-addr", client)
	sock.await(t, 30*time.Second, "READY=1")
	sock.await(t, 10*time.Second, "WATCHDOG=1")
	if err := p.Signal(syscall.SIGABRT); err != nil {
		t.Fatal(err)
	}
	if code := p.Exit(t, 10*time.Second); code != 134 {
		t.Errorf("exit %d after SIGABRT, want 134", code)
	}
	out := p.Out.String()
	if n := strings.Count(out, "goroutine "); n > 0 {
		t.Errorf("%d goroutine headers on stderr:\n%s", n, out)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "level=ERROR") {
			if line != "" {
				t.Errorf("more than one ERROR line:\n%s", out)
			}
			line = l
		}
	}
	if !strings.Contains(line, "SIGABRT") || !strings.Contains(line, "watchdog") || !strings.Contains(line, "last_ping_ago=") {
		t.Errorf("the abort's line: %q", line)
	}
	stacks, _ := filepath.Glob(filepath.Join(dir, "abort-*.stacks"))
	if len(stacks) != 1 || !strings.Contains(line, "stacks="+stacks[0]) {
		t.Fatalf("stack files %v; line %q", stacks, line)
	}
	b, err := os.ReadFile(stacks[0])
	if err != nil || !strings.Contains(string(b), "goroutine ") || !strings.Contains(string(b), "ensemble.") {
		t.Errorf("stack file: %v\n%.500s", err, b)
	}
}

// TestSaveStacksKeepsFew: the data dir keeps the newest few stack files.
func TestSaveStacksKeepsFew(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	var last string
	for i := 0; i < abortStacksKept+2; i++ {
		f, err := saveStacks(dir, start.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		last = f
	}
	got, _ := filepath.Glob(filepath.Join(dir, "abort-*.stacks"))
	if len(got) != abortStacksKept || got[len(got)-1] != last {
		t.Errorf("kept %v, want the newest %d ending with %s", got, abortStacksKept, last)
	}
}
