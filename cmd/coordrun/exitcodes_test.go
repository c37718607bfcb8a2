package main

import (
	"os"

	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
)

func TestParseServers(t *testing.T) {
	for in, want := range map[string][]string{
		"127.0.0.1":                 {"127.0.0.1:2181"},
		"zk1, zk2:2182":             {"zk1:2181", "zk2:2182"},
		"[::1]":                     {"[::1]:2181"},
		"[::1]:2190,127.0.0.1:2181": {"[::1]:2190", "127.0.0.1:2181"},
		"etcd://10.0.0.1:2379":      {"etcd://10.0.0.1:2379"},
		"zk://zk1:2182,zk://zk2/":   {"zk1:2182", "zk2:2181"},
	} {
		if got, err := parseServers(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("parseServers(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"":                      "empty",
		"127.0.0.1:abc":         `port "abc"`,
		"127.0.0.1:0":           `port "0"`,
		"http://127.0.0.1:2181": "without http://, as 127.0.0.1:2181",
		"::1":                   "[::1]:2181",
		":2181":                 "no host",
		"a/b:2181":              "want host:port",
	} {
		if _, err := parseServers(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("parseServers(%q): %v, want an error saying %q", in, err, why)
		}
	}
}

// Exit codes of the commands that are not run: a mistake on the command
// line is 64 at once, naming the fix; members that do not answer are 69.
func TestCommandExitCodes(t *testing.T) {
	dead := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"status", "--servers", "127.0.0.1:abc"}, exitUsage, `port "abc"`},
		{[]string{"status", "--servers", "http://127.0.0.1:2181"}, exitUsage, "a URL"},
		{[]string{"run", "--servers", "127.0.0.1:abc", "--", "true"}, exitUsage, `port "abc"`},
		{[]string{"ensemble", "status", "--servers", "http://" + dead}, exitUsage, "a URL"},
		{[]string{"ensemble", "statsu"}, exitUsage, "did you mean status?"},
		{[]string{"sttaus"}, exitUsage, "did you mean status?"},
		{[]string{"run", "--severs", dead, "--", "true"}, exitUsage, "did you mean --servers?"},
		{[]string{"ensemble", "add", "4"}, exitUsage, "accepts 2 arg(s), received 1"},
		{[]string{"cron", "history"}, exitUsage, "accepts 1 arg(s), received 0"},
		{[]string{"cron", "backfill", "tick"}, exitUsage, `required flag(s) "from", "to" not set`},
		{[]string{"status", "--servers", dead, "--timeout", "1s"}, supervisor.ExitUnavailable, "connect to " + dead},
		{[]string{"ensemble", "status", "--servers", dead, "--timeout", "1s"}, supervisor.ExitUnavailable, "no member answered"},
		{[]string{"ensemble", "remove", "3", "--servers", dead, "--timeout", "1s"}, supervisor.ExitUnavailable, "connect to " + dead},
	} {
		_, stderr, code := firstHourExec(t, 20*time.Second, nil, c.args...)
		if code != c.code || !strings.Contains(stderr, c.says) {
			t.Errorf("coordrun %s: exit %d, want %d saying %q:\n%s", strings.Join(c.args, " "), code, c.code, c.says, stderr)
		}
	}
}

// A membership change the member refuses for want of an administrator is
// bad usage, as status says for records it may not read.
func TestEnsembleAddNoAuthIsUsage(t *testing.T) {
	addr := firstHourMember(t)
	peer := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	_, stderr, code := firstHourExec(t, 30*time.Second, nil, "ensemble", "add", "2", peer, "--servers", addr)
	if code != exitUsage || !strings.Contains(stderr, "membership change refused") {
		t.Errorf("ensemble add without an administrator: exit %d, want %d:\n%s", code, exitUsage, stderr)
	}
}

// Every command that does something has its exit codes in the table,
// and docs/exit-codes.md shows the table as it is.
func TestExitTableComplete(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.IsAvailableCommand() && c.Runnable() && !c.HasSubCommands() && exitRowsFor(c.CommandPath()) == nil {
			t.Errorf("%s has no exit codes in exitTable", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := newRootCommand()
	root.InitDefaultCompletionCmd()
	walk(root)
	doc, err := os.ReadFile("../../docs/exit-codes.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), exitCodesMarkdown()) {
		t.Errorf("docs/exit-codes.md does not hold the exit table as exitCodesMarkdown writes it:\n%s", exitCodesMarkdown())
	}
}

// Unreachable members with no --servers given say where the members are
// set; given ones (flag, variable, file) do not get the hint.
func TestDefaultServersHint(t *testing.T) {
	cmd := newRunCommand()
	v, err := loadConfig(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if h := defaultServersHint(v); !strings.Contains(h, "COORDRUN_SERVERS") {
		t.Errorf("no --servers: hint %q", h)
	}
	t.Setenv("COORDRUN_SERVERS", "10.0.0.1:2181")
	if v, err = loadConfig(newRunCommand()); err != nil || defaultServersHint(v) != "" {
		t.Errorf("COORDRUN_SERVERS set: hint %q (%v)", defaultServersHint(v), err)
	}
	t.Setenv("COORDRUN_SERVERS", "")
	os.Unsetenv("COORDRUN_SERVERS")
	cmd = newRunCommand()
	if err := cmd.ParseFlags([]string{"--servers", "10.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if v, err = loadConfig(cmd); err != nil || defaultServersHint(v) != "" {
		t.Errorf("--servers given: hint %q (%v)", defaultServersHint(v), err)
	}
}
