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
//   - at deadline − killSlack − grace it sends SIGTERM to the job's process
//     group, and at deadline − killSlack SIGKILL, unless a later deadline
//     arrived;
//   - when the supervisor goes away (its control pipe reaches EOF, or
//     PR_SET_PDEATHSIG fires) it stops the group at once;
//   - it is a child subreaper, so grandchildren the job orphans become its
//     children, and it reaps them all before it reports the job's end.
//
// The messages on the two pipes are in wdproto.go; the kill timing is
// killPlan's (killplan.go).
//
// The watchdog exits with the job's exit code, or 128+N if a signal
// killed it.

// killSlack is how long before the deadline SIGKILL goes out: time for the
// kernel to tear the processes down and for the watchdog to reap them.
const killSlack = 100 * time.Millisecond

// Reasons a job ended, as reported by the watchdog.
const (
	reasonExit     = "exit"     // the job ended on its own
	reasonDeadline = "deadline" // the lease ran out; the watchdog killed it
	reasonOrphaned = "orphaned" // the supervisor disappeared
	reasonStopped  = "stopped"  // the supervisor asked for it to be stopped
	// reasonWatchdogDied: the watchdog was killed without reporting, so
	// the job's group may not have been reaped.
	reasonWatchdogDied = "watchdog-died"
)

// WatchdogConfig is the watchdog's invocation.
type WatchdogConfig struct {
	Argv     []string      // the job
	Grace    time.Duration // SIGTERM to SIGKILL
	Deadline Boottime      // the first kill deadline
	Armed    bool          // wait for "G <deadline>" on Control before starting the job
	Control  io.Reader     // from the supervisor
	Report   io.Writer     // to the supervisor
	// Say is where the watchdog tells the operator what it does on its
	// own (stderr when nil): a frozen or cut-off supervisor cannot.
	Say io.Writer
}

// RunWatchdog runs the job under the watchdog's guard and returns the exit
// code the watchdog process should exit with.
func RunWatchdog(cfg WatchdogConfig) int {
	// Adopt orphaned grandchildren so none outlives the job unseen.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	sigs := guardSignals()
	ctrl := readLines(cfg.Control)
	deadline := cfg.Deadline
	var env []string // added to the job's, from the supervisor's E lines
	if cfg.Armed {
		// The first process start of a Go program probes for pidfd
		// support with a throwaway clone; looking up a process runs the
		// same one-time probe, so it is paid now rather than after Go.
		_, _ = os.FindProcess(os.Getpid())
		var ok bool
		if deadline, env, ok = awaitGo(ctrl, sigs); !ok {
			// Disarmed, or the supervisor is gone: nothing ran.
			send(cfg.Report, report{kind: reportExited, result: jobResult{Reason: reasonOrphaned}})
			return 0
		}
	}
	cmd, code := startJob(cfg.Argv, env)
	if cmd == nil {
		send(cfg.Report, report{kind: reportExited, result: jobResult{Code: code, Reason: reasonExit}})
		return code
	}
	send(cfg.Report, report{kind: reportStarted, pid: cmd.Process.Pid})
	say := cfg.Say
	if say == nil {
		say = os.Stderr
	}
	return guard(cmd, &killPlan{deadline: deadline, grace: cfg.Grace}, ctrl, sigs, cfg.Report, say)
}

// guardSignals sets up the watchdog's signals and returns the ones that
// make it stop the job.
func guardSignals() <-chan os.Signal {
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
	// Drains for the watchdog process's whole life: not joined.
	go func() {
		for range terminal {
		}
	}()
	return sigs
}

// readLines delivers r's lines until its EOF, then closes the channel.
func readLines(r io.Reader) <-chan string {
	out := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(r)
		// Lines carry the lock's environment (its node path): bounded by
		// the name and root limits, far below this.
		sc.Buffer(make([]byte, 0, 4096), 1<<20)
		for sc.Scan() {
			out <- sc.Text()
		}
		if err := sc.Err(); err != nil {
			fmt.Fprintf(os.Stderr, "coordrun: watchdog: reading the supervisor's control pipe: %v\n", err)
		}
		close(out)
	}()
	return out
}

// startJob starts argv in its own process group, or returns the exit code
// of a job that could not start (126, or 127 when it is not found).
func startJob(argv, env []string) (*exec.Cmd, int) {
	cmd := exec.Command(argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "coordrun: cannot start %s: %v\n", argv[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return nil, 127
		}
		return nil, 126
	}
	return cmd, 0
}

// guard signals the started job's group as plan says, takes the
// supervisor's control messages and the stop signals, and reports the
// job's end once it and its group are gone.
//
// The lease running out is said on say at the moment the first signal
// goes: the supervisor, frozen or cut off, may say nothing for a while.
func guard(cmd *exec.Cmd, plan *killPlan, ctrl <-chan string, sigs <-chan os.Signal, rep io.Writer, say io.Writer) int {
	pgid := cmd.Process.Pid
	exited := make(chan syscall.WaitStatus, 1)
	// Ends with the job, which guard waits for.
	go func() {
		_ = cmd.Wait()
		exited <- cmd.ProcessState.Sys().(syscall.WaitStatus)
	}()
	group := func(sig syscall.Signal) {
		if sig != 0 {
			_ = syscall.Kill(-pgid, sig)
		}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	announced := false
	for {
		sig, wake := plan.next(BoottimeNow())
		if sig != 0 && !announced && plan.reason == reasonDeadline {
			announced = true
			then := ""
			if sig == syscall.SIGTERM {
				then = fmt.Sprintf(", SIGKILL %v later", plan.grace)
			}
			fmt.Fprintf(say, "coordrun: the session's lease runs out before the supervisor renewed it: %s to the job's process group %d%s\n",
				unix.SignalName(sig), pgid, then)
		}
		group(sig)
		timer.Reset(max(time.Duration(wake-BoottimeNow()), time.Millisecond))
		select {
		case ws := <-exited:
			// The job is gone; nothing of its group may outlive it.
			group(syscall.SIGKILL)
			reapOrphans()
			code, sig := exitCode(ws)
			send(rep, report{kind: reportExited, result: jobResult{Code: code, Signal: sig, Reason: plan.exitReason(BoottimeNow())}})
			return code
		case line, ok := <-ctrl:
			if !ok {
				ctrl = nil
				group(plan.stop(BoottimeNow(), reasonOrphaned))
				continue
			}
			m, ok := parseControl(line)
			switch {
			case !ok:
			case m.kind == ctrlDeadline:
				plan.deadline = m.deadline
			case m.kind == ctrlSignal:
				group(m.signal)
			case m.kind == ctrlStop:
				group(plan.stop(BoottimeNow(), reasonStopped))
			}
		case <-sigs:
			group(plan.stop(BoottimeNow(), reasonOrphaned))
		case <-timer.C:
		}
	}
}

// awaitGo waits for the supervisor's go-ahead and returns the deadline it
// names and the environment sent before it; false if the control pipe
// closed, a stop was asked for or TERM arrived first.
func awaitGo(ctrl <-chan string, sigs <-chan os.Signal) (Boottime, []string, bool) {
	var env []string
	for {
		select {
		case line, ok := <-ctrl:
			if !ok {
				return 0, nil, false
			}
			m, ok := parseControl(line)
			switch {
			case ok && m.kind == ctrlEnv:
				env = append(env, m.env)
			case ok && m.kind == ctrlGo:
				return m.deadline, env, true
			case ok && m.kind == ctrlStop:
				return 0, nil, false
			}
		case <-sigs:
			return 0, nil, false
		}
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
