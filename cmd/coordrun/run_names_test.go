package main

import (
	"os/exec"
	"strings"
	"testing"
)

// A lock name over the limit is refused before anything is sent or
// echoed: one line, cut short, exit 64. (A 66,000-byte name once logged a
// job that never ran as finished with exit 0.)
func TestRunRefusesLongNameOnce(t *testing.T) {
	name := strings.Repeat("n", 66000)
	cmd := exec.Command(procBin, "run", "--servers", "127.0.0.1:1", "--name", name, "--", "true")
	cmd.Env = procEnv()
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != exitUsage {
		t.Fatalf("exit %v, want %d; output %.200q", err, exitUsage, out)
	}
	if len(out) > 1024 || !strings.Contains(string(out), "it is 66000 bytes long") {
		t.Errorf("%d bytes of output, want one short line naming the length: %.300q", len(out), out)
	}
}
