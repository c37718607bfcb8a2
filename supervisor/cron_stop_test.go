package supervisor_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
)

// TestCronStopWhileConnecting: a terminating signal while the first
// session is still being made (no member answers) ends RunCron at once
// with exit 0, as a stop does once the jobs are scheduled, rather than
// after the connect timeout with exit 64 (under systemd: a stopped unit
// that ends failed).
func TestCronStopWhileConnecting(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGTERM
	start := time.Now()
	code, err := supervisor.RunCron(context.Background(), supervisor.CronOptions{
		ConnOptions: supervisor.ConnOptions{Servers: testkit.FreeAddrs(t, "127.0.0.1", 1), SessionTimeout: 10 * time.Second},
		JobOptions:  supervisor.JobOptions{KillGrace: 2 * time.Second, Signals: sigs},
		Root:        "/coordrun/cron",
		Jobs:        []*supervisor.CronJob{{Name: "tick", Spec: "@every 1s", Argv: []string{"true"}}},
	})
	if code != supervisor.ExitOK || err != nil {
		t.Errorf("RunCron after SIGTERM while connecting: exit %d, %v; want 0", code, err)
	}
	// The connect timeout is 10s; a stop takes a moment.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("RunCron took %v to stop", d)
	}
}
