package supervisor

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The lease running out is said when the watchdog signals the group, not
// when the supervisor next runs: a real job, a deadline 200 ms ahead, no
// supervisor renewing it.
func TestGuardSaysLeaseKill(t *testing.T) {
	for _, c := range []struct {
		name  string
		grace time.Duration
		want  []string
	}{
		{"with grace", 100 * time.Millisecond, []string{"lease runs out", "SIGTERM to the job's process group", "SIGKILL 100ms later"}},
		{"without grace", 0, []string{"lease runs out", "SIGKILL to the job's process group"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "30")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var say lockedBuffer
			plan := &killPlan{deadline: BoottimeNow() + Boottime(200*time.Millisecond+killSlack+c.grace), grace: c.grace}
			done := make(chan int, 1)
			go func() { done <- guard(cmd, plan, make(chan string), make(chan os.Signal), io.Discard, &say) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				t.Fatal("the job outlived its deadline by 10s")
			}
			got := say.String()
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("said %q; want %q in it", got, w)
				}
			}
			if !strings.Contains(got, fmt.Sprint(cmd.Process.Pid)) {
				t.Errorf("said %q; want the group %d named", got, cmd.Process.Pid)
			}
			if n := strings.Count(got, "\n"); n != 1 {
				t.Errorf("said %d lines, want 1:\n%s", n, got)
			}
		})
	}
}

// A job that ends on its own says nothing.
func TestGuardQuietOnExit(t *testing.T) {
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var say lockedBuffer
	plan := &killPlan{deadline: BoottimeNow() + Boottime(time.Minute), grace: time.Second}
	if code := guard(cmd, plan, make(chan string), make(chan os.Signal), io.Discard, &say); code != 0 || say.String() != "" {
		t.Errorf("exit %d, said %q; want 0 and nothing", code, say.String())
	}
}
