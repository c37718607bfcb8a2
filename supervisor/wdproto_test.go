package supervisor

import (
	"bytes"
	"syscall"
	"testing"
)

// What one end of the watchdog's pipes writes, the other reads back.
func TestWatchdogProtocolRoundTrip(t *testing.T) {
	for _, m := range []control{
		{kind: ctrlGo, deadline: 1234567890123},
		{kind: ctrlDeadline, deadline: 9e18},
		{kind: ctrlDeadline, deadline: -5}, // a deadline before boot: kill at once
		{kind: ctrlSignal, signal: syscall.SIGUSR1},
		{kind: ctrlSignal, signal: syscall.Signal(64)},
		{kind: ctrlStop},
		{kind: ctrlEnv, env: "COORDRUN_FENCING_TOKEN=42"},
		{kind: ctrlEnv, env: "X=a value with spaces, \"quotes\" and a\nnewline"},
		{kind: ctrlEnv, env: "EMPTY="},
	} {
		var b bytes.Buffer
		send(&b, m)
		line := b.String()
		if line[len(line)-1] != '\n' {
			t.Errorf("%v: %q lacks its newline", m, line)
		}
		got, ok := parseControl(line[:len(line)-1])
		if !ok || got != m {
			t.Errorf("control %+v: wrote %q, read back %+v (%v)", m, line, got, ok)
		}
	}
	for _, r := range []report{
		{kind: reportStarted, pid: 4242},
		{kind: reportExited, result: jobResult{Code: 0, Reason: reasonExit}},
		{kind: reportExited, result: jobResult{Code: 137, Signal: 9, Reason: reasonDeadline}},
		{kind: reportExited, result: jobResult{Code: 143, Signal: 15, Reason: reasonStopped}},
		{kind: reportExited, result: jobResult{Reason: reasonOrphaned}},
	} {
		var b bytes.Buffer
		send(&b, r)
		line := b.String()
		got, ok := parseReport(line[:len(line)-1])
		if !ok || got != r {
			t.Errorf("report %+v: wrote %q, read back %+v (%v)", r, line, got, ok)
		}
	}
}

// The wire form is fixed: an older watchdog (the binary may be replaced
// while a supervisor runs) and a newer supervisor must agree.
func TestWatchdogProtocolText(t *testing.T) {
	for _, c := range []struct {
		m    interface{ String() string }
		want string
	}{
		{control{kind: ctrlGo, deadline: 17}, "G 17"},
		{control{kind: ctrlDeadline, deadline: 18}, "D 18"},
		{control{kind: ctrlSignal, signal: syscall.SIGTERM}, "S 15"},
		{control{kind: ctrlStop}, "K"},
		{control{kind: ctrlEnv, env: "A=b c"}, `E "A=b c"`},
		{report{kind: reportStarted, pid: 7}, "P 7"},
		{report{kind: reportExited, result: jobResult{Code: 130, Signal: 2, Reason: reasonWatchdogDied}}, "X 130 2 watchdog-died"},
	} {
		if got := c.m.String(); got != c.want {
			t.Errorf("%+v = %q, want %q", c.m, got, c.want)
		}
	}
}

// Lines that are not messages are ignored, not misread.
func TestWatchdogProtocolRejects(t *testing.T) {
	for _, line := range []string{"", " ", "G", "G x", "G 1 2", "D", "D 1.5", "S 0", "S 65", "S -1", "S TERM", "K now", "Q 1", "g 1",
		"E", "E ", `E A=b`, `E "A=b`, `E "=b"`, `E "noequals"`} {
		if m, ok := parseControl(line); ok {
			t.Errorf("parseControl(%q) = %+v", line, m)
		}
	}
	for _, line := range []string{"", "P", "P x", "P 1 2", "X 1 2", "X a 0 exit", "X 0 b exit", "X 0 0 exit extra", "x 0 0 exit"} {
		if r, ok := parseReport(line); ok {
			t.Errorf("parseReport(%q) = %+v", line, r)
		}
	}
}
