package main

import (
	"fmt"
	"strings"

	"github.com/coordrun/coordrun/supervisor"
)

// exitRow is one exit code of a command and what it means there.
type exitRow struct {
	code    string
	meaning string
}

// Rows shared by every command that talks to the ensemble.
var (
	rowUsage       = exitRow{fmt.Sprint(supervisor.ExitUsage), "bad usage: an unknown command or flag, a missing argument, a bad value (flags, COORDRUN_* variables, config file), a malformed --servers; or no permission (an ACL or an administrator's right refused): fix the command line, retrying cannot help"}
	rowUnavailable = exitRow{fmt.Sprint(supervisor.ExitUnavailable), "no ensemble member answered within the connect timeout (--timeout): trying again later can help"}
	rowFailure     = exitRow{fmt.Sprint(supervisor.ExitFailure), "any other error, said on stderr"}
)

// exitTable is every command's exit codes, the one source of the man
// pages' EXIT STATUS and of docs/exit-codes.md (a test keeps that file
// equal to exitCodesMarkdown). Keys are command paths without "coordrun".
var exitTable = []struct {
	cmd  string
	rows []exitRow
}{
	{"run", []exitRow{
		{"job's", "the job's own exit code, passed through"},
		{"128+N", "signal N killed the job"},
		{"126, 127", "the command could not be started: not executable, not found"},
		rowUsage,
		rowUnavailable,
		{fmt.Sprint(supervisor.ExitNotAcquired), "the lock was not acquired: --try found it held, or --timeout passed (--conflict-exit-code N chooses another code; -q leaves stderr silent)"},
		{fmt.Sprint(supervisor.ExitSessionLost), "the session's lease ran out (members unreachable); the job was killed"},
		{fmt.Sprint(supervisor.ExitLockLost), "another client deleted or changed the holder's lock nodes; the job was stopped"},
	}},
	{"cron", []exitRow{
		{"0", "stopped by SIGTERM or SIGINT (running jobs got the signal and were waited for); --check: the jobs are fine"},
		rowUsage,
		rowUnavailable,
		{fmt.Sprint(supervisor.ExitSessionLost), "the session was lost"},
	}},
	{"cron list, history, pause, resume, trigger, backfill", []exitRow{
		{"0", "success"},
		rowUsage,
		{fmt.Sprint(supervisor.ExitNotFound), "a job named on the command line has never been registered (mistyped, or its hosts never started)"},
		rowUnavailable,
		rowFailure,
	}},
	{"status", []exitRow{
		{"0", "success"},
		rowUsage,
		{fmt.Sprint(supervisor.ExitNotFound), "a lock named on the command line does not exist"},
		rowUnavailable,
		rowFailure,
	}},
	{"lock rm", []exitRow{
		{"0", "every lock named was removed"},
		rowUsage,
		{fmt.Sprint(supervisor.ExitNotFound), "no such lock"},
		rowUnavailable,
		{fmt.Sprint(supervisor.ExitNotAcquired), "the lock is in use (held, waited for, or its previous holder still stopping); left alone"},
		rowFailure,
	}},
	{"fence check, show", []exitRow{
		{"0", "the token was accepted (the mark raised), or shown"},
		rowUsage,
		{fmt.Sprint(supervisor.ExitStaleToken), "a stale token: the resource already accepted a newer holder's"},
		{"1", "the mark could not be written"},
	}},
	{"ensemble status", []exitRow{{"0", "success"}, {"1", "--wait: the ensemble was not healthy in time"}, rowUsage, rowUnavailable}},
	{"ensemble add, remove", []exitRow{{"0", "the membership changed"}, rowUsage, rowUnavailable, {"1", "the change was refused for another reason, said on stderr"}}},
	{"ensemble snapshot save", []exitRow{{"0", "saved"}, rowUsage, rowUnavailable, {"1", "no snapshot saved for another reason, said on stderr (a member sent a bad one, FILE could not be written)"}}},
	{"server", []exitRow{
		{"0", "stopped by SIGTERM or SIGINT"},
		{fmt.Sprint(supervisor.ExitUsage), "an invalid configuration, said on stderr (a missing --id, a duplicate id, a --peers that contradicts the data dir, ...)"},
		{"1", "the member could not start: a port in use, a data dir it cannot write"},
		{"134", "SIGABRT: ended at once, with every goroutine's stack on stderr"},
	}},
	{"ensemble super-digest, secret", []exitRow{{"0", "success"}, rowUsage}},
	{"version", []exitRow{{"0", "success"}, rowUsage}},
	{"completion bash, zsh, fish, powershell", []exitRow{{"0", "the script was printed"}, rowUsage}},
}

// exitRowsFor is the exit table of the command at path ("coordrun cron
// list"), or nil.
func exitRowsFor(path string) []exitRow {
	name := strings.TrimSpace(strings.TrimPrefix(path, "coordrun"))
	if name == "" {
		name = "run"
	}
	for _, e := range exitTable {
		if e.cmd == name {
			return e.rows
		}
		first, rest, _ := strings.Cut(e.cmd, ", ")
		words := strings.Fields(first)
		group := strings.Join(words[:len(words)-1], " ")
		for _, alt := range append([]string{words[len(words)-1]}, strings.Split(rest, ", ")...) {
			if alt != "" && strings.TrimSpace(group+" "+alt) == name {
				return e.rows
			}
		}
	}
	return nil
}

// exitCodesMarkdown is the table of docs/exit-codes.md.
func exitCodesMarkdown() string {
	var b strings.Builder
	b.WriteString("| command | exit | meaning |\n|---|---|---|\n")
	for _, e := range exitTable {
		for i, r := range e.rows {
			cmd := ""
			if i == 0 {
				cmd = "`coordrun " + e.cmd + "`"
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", cmd, r.code, r.meaning)
		}
	}
	return b.String()
}
