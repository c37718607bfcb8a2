package chaos

import (
	"syscall"
	"time"
)

// DumpStacks makes every running member write its goroutines' stacks to
// its log and exit: Go's own answer to SIGQUIT, which the server leaves to
// the runtime. When an ensemble fails to become healthy after the faults,
// a member that stopped catching up shows there what it is blocked on;
// the harness would otherwise kill it and keep only its last log lines.
func (c *Cluster) DumpStacks() {
	for i, m := range c.members {
		c.procMu.Lock()
		p, paused := m.proc, m.paused
		c.procMu.Unlock()
		if p == nil {
			continue
		}
		if paused {
			_ = p.Signal(syscall.SIGCONT)
		}
		if p.Signal(syscall.SIGQUIT) == nil {
			p.Wait(10 * time.Second)
		}
		_ = c.Kill(i)
	}
}
