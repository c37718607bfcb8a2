package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The watchdog is a small process between the supervisor and the job:
//
//	coordrun (supervisor) ── pipes ──▶ coordrun __watchdog ──▶ job (own process group)
//
// It exists because the supervisor can be killed or frozen (SIGKILL,
// SIGSTOP, swap, a debugger) while the job runs, and then nothing would
// stop the job when the session's lease runs out. The watchdog holds the
// current kill deadline and acts on it by itself:
//
//   - at deadline − grace it sends SIGTERM to the job's process group, and
//     at deadline − killSlack SIGKILL, unless a later deadline arrived;
//   - when the supervisor goes away (its control pipe reaches EOF, or
//     PR_SET_PDEATHSIG fires) it stops the group at once;
//   - it is a child subreaper, so grandchildren the job orphans become its
//     children, and it reaps them all before it reports the job's end.
//
// Control messages, one per line, supervisor → watchdog:
//
//	G <boottime-ns>  an armed watchdog may start the job, to be killed by
//	                 that deadline
//	D <boottime-ns>  new kill deadline
//	S <signum>       deliver a signal to the job's process group
//	K                stop the job now (TERM, then KILL after grace)
//
// Report messages, watchdog → supervisor:
//
//	P <pid>                      the job started
//	X <code> <signal> <reason>   the job and its group are gone; reason is
//	                             exit, deadline, orphaned or stopped
//
// The watchdog exits with the job's exit code, or 128+N if a signal
// killed it.

// killSlack is how long before the deadline SIGKILL goes out: time for the
// kernel to tear the processes down and for the watchdog to reap them.
const killSlack = 100 * time.Millisecond

// Reasons a job ended, as reported by the watchdog.
const (
	ReasonExit     = "exit"     // the job ended on its own
	ReasonDeadline = "deadline" // the lease ran out; the watchdog killed it
	ReasonOrphaned = "orphaned" // the supervisor disappeared
	ReasonStopped  = "stopped"  // the supervisor asked for it to be stopped
	// ReasonWatchdogDied: the watchdog was killed without reporting, so
	// the job's group may not have been reaped.
	ReasonWatchdogDied = "watchdog-died"
)

// WatchdogConfig is the watchdog's invocation.
type WatchdogConfig struct {
	Argv     []string      // the job
	Grace    time.Duration // SIGTERM to SIGKILL
	Deadline Boottime      // the first kill deadline
	Armed    bool          // wait for "G <deadline>" on Control before starting the job
	Control  io.Reader     // from the supervisor
	Report   io.Writer     // to the supervisor
}

// RunWatchdog runs the job under the watchdog's guard and returns the exit
// code the watchdog process should exit with.
func RunWatchdog(cfg WatchdogConfig) int {
	// Adopt orphaned grandchildren so none outlives the job unseen.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	sigs := make(chan os.Signal, 8)
	// TERM arrives from PR_SET_PDEATHSIG when the supervisor dies, or from
	// a service manager stopping everything. Terminal signals are the
	// supervisor's to forward; they must not kill the guard.
	signal.Notify(sigs, syscall.SIGTERM)
	// Caught and dropped rather than ignored: an ignored disposition
	// would be inherited by the job through exec, and the job must get
	// the supervisor's forwarded INT/HUP/QUIT with default handling.
	terminal := make(chan os.Signal, 8)
	signal.Notify(terminal, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for range terminal {
		}
	}()

	ctrl := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(cfg.Control)
		for sc.Scan() {
			ctrl <- sc.Text()
		}
		close(ctrl)
	}()
	deadline := cfg.Deadline
	if cfg.Armed {
		// The first process start of a Go program probes for pidfd
		// support with a throwaway clone; looking up a process runs the
		// same one-time probe, so it is paid now rather than after Go.
		_, _ = os.FindProcess(os.Getpid())
		var ok bool
		if deadline, ok = awaitGo(ctrl, sigs); !ok {
			// Disarmed, or the supervisor is gone: nothing ran.
			fmt.Fprintf(cfg.Report, "X 0 0 %s\n", ReasonOrphaned)
			return 0
		}
	}

	cmd := exec.Command(cfg.Argv[0], cfg.Argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "coordrun: cannot start %s: %v\n", cfg.Argv[0], err)
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		fmt.Fprintf(cfg.Report, "X %d 0 %s\n", code, ReasonExit)
		return code
	}
	pgid := cmd.Process.Pid
	fmt.Fprintf(cfg.Report, "P %d\n", pgid)

	exited := make(chan syscall.WaitStatus, 1)
	go func() {
		_ = cmd.Wait()
		exited <- cmd.ProcessState.Sys().(syscall.WaitStatus)
	}()

	reason := ""
	termSent := false
	var stopAt Boottime   // when stopping on request: KILL after grace
	var lastKill Boottime // SIGKILL is repeated every killSlack until the job is gone
	timer := time.NewTimer(0)
	defer timer.Stop()
	group := func(sig syscall.Signal) { _ = syscall.Kill(-pgid, sig) }
	stop := func(why string) {
		if reason == "" {
			reason = why
		}
		if !termSent {
			group(syscall.SIGTERM)
			termSent = true
		}
		if s := BoottimeNow() + Boottime(cfg.Grace); stopAt == 0 || s < stopAt {
			stopAt = s
		}
	}
	for {
		now := BoottimeNow()
		killAt := deadline - Boottime(killSlack)
		if stopAt != 0 && stopAt < killAt {
			killAt = stopAt
		}
		termAt := deadline - Boottime(killSlack) - Boottime(cfg.Grace)
		switch {
		case now >= killAt:
			if reason == "" {
				reason = ReasonDeadline
			}
			if lastKill == 0 || now-lastKill >= Boottime(killSlack) {
				group(syscall.SIGKILL)
				lastKill = now
			}
			killAt = lastKill + Boottime(killSlack)
		case now >= termAt && !termSent:
			if reason == "" {
				reason = ReasonDeadline
			}
			group(syscall.SIGTERM)
			termSent = true
		}
		next := killAt
		if !termSent && termAt < next {
			next = termAt
		}
		timer.Reset(max(time.Duration(next-BoottimeNow()), time.Millisecond))
		select {
		case ws := <-exited:
			// The job is gone; nothing of its group may outlive it.
			group(syscall.SIGKILL)
			reapOrphans()
			code, sig := exitCode(ws)
			if reason == "" && BoottimeNow() >= deadline-Boottime(killSlack) {
				// It ended past its deadline (this process was frozen,
				// say, and the exit and the timer became ready together):
				// it ran without a lease at the end, whatever its code.
				reason = ReasonDeadline
			}
			if reason == "" {
				reason = ReasonExit
			}
			fmt.Fprintf(cfg.Report, "X %d %d %s\n", code, sig, reason)
			return code
		case line, ok := <-ctrl:
			if !ok {
				ctrl = nil
				stop(ReasonOrphaned)
				continue
			}
			handleControl(line, &deadline, group, stop)
		case <-sigs:
			stop(ReasonOrphaned)
		case <-timer.C:
		}
	}
}

// awaitGo waits for the supervisor's go-ahead and returns the deadline it
// names; false if the control pipe closed, a stop was asked for or TERM
// arrived first.
func awaitGo(ctrl <-chan string, sigs <-chan os.Signal) (Boottime, bool) {
	for {
		select {
		case line, ok := <-ctrl:
			if !ok {
				return 0, false
			}
			f := strings.Fields(line)
			if len(f) == 2 && f[0] == "G" {
				if d, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					return Boottime(d), true
				}
			}
			if len(f) == 1 && f[0] == "K" {
				return 0, false
			}
		case <-sigs:
			return 0, false
		}
	}
}

func handleControl(line string, deadline *Boottime, group func(syscall.Signal), stop func(string)) {
	op, arg, _ := strings.Cut(line, " ")
	switch op {
	case "D":
		if v, err := strconv.ParseInt(arg, 10, 64); err == nil {
			*deadline = Boottime(v)
		}
	case "S":
		if v, err := strconv.Atoi(arg); err == nil && v > 0 && v < 65 {
			group(syscall.Signal(v))
		}
	case "K":
		stop(ReasonStopped)
	}
}

// reapOrphans kills and reaps every remaining child: grandchildren the job
// left behind were reparented here (we are a subreaper).
func reapOrphans() {
	for {
		pids := childrenOf(os.Getpid())
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		for range pids {
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(-1, &ws, 0, nil); err != nil {
				return
			}
		}
	}
}

// childrenOf lists the live children of pid from /proc.
func childrenOf(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err == nil {
		var out []int
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	// Kernels without the children file: scan every process's parent.
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name may contain spaces; fields follow the last ')'.
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 {
			if pp, _ := strconv.Atoi(f[1]); pp == pid {
				out = append(out, n)
			}
		}
	}
	return out
}

func exitCode(ws syscall.WaitStatus) (code, sig int) {
	if ws.Signaled() {
		return 128 + int(ws.Signal()), int(ws.Signal())
	}
	return ws.ExitStatus(), 0
}
