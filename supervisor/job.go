package supervisor

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// WatchdogCommand is the hidden subcommand of the coordrun binary that
// runs RunWatchdog.
const WatchdogCommand = "__watchdog"

// jobResult is how a guarded job ended.
type jobResult struct {
	Code   int    // exit code, or 128+signal
	Signal int    // the signal that killed it, 0 if it exited
	Reason string // one of the Reason constants
}

// guardedJob is a job running under a watchdog process.
//
// Concurrency: SetDeadline, Signal and Stop may be called from any
// goroutine; Done closes once the job and its group are gone, and Result
// is valid after that.
type guardedJob struct {
	wd      *exec.Cmd
	mu      sync.Mutex // guards ctrl, and the writes of control messages to it
	ctrl    *os.File
	started chan int // the job's pid
	done    chan struct{}
	result  jobResult
}

// jobSpec is a job as its watchdog starts it.
type jobSpec struct {
	exe  string // the coordrun binary, which runs the watchdog
	argv []string
	env  []string // the watchdog's and the job's
	// lockEnv is added to the job's environment when it starts (sent with
	// Go): the lock's identity and token, so that a watchdog can be
	// started before the lock is entered.
	lockEnv []string
	grace   time.Duration // SIGTERM to SIGKILL
	// stdout and stderr, when set, replace this process's as the job's
	// (and its watchdog's); cron passes pipes to keep the output's tail.
	stdout, stderr *os.File
}

// spawnGuarded starts spec's watchdog, armed to run the job: it waits for
// Go. Starting it ahead of time takes the process start (the Go runtime,
// the command line) off a lock handoff's critical path. Disarm (or the
// supervisor's death) before Go makes it exit without running anything.
func spawnGuarded(spec jobSpec) (*guardedJob, error) {
	ctrlR, ctrlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		ctrlR.Close()
		ctrlW.Close()
		return nil, err
	}
	args := append([]string{WatchdogCommand, "--grace", spec.grace.String(), "--armed", "--" + WatchdogLockEnvFlag, "--"}, spec.argv...)
	wd := exec.Command(spec.exe, args...)
	wd.Stdin, wd.Stdout, wd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if spec.stdout != nil {
		wd.Stdout = spec.stdout
	}
	if spec.stderr != nil {
		wd.Stderr = spec.stderr
	}
	// Filtered here, where every job starts, whatever the caller passed.
	wd.Env = JobEnv(spec.env)
	wd.ExtraFiles = []*os.File{ctrlR, repW} // fds 3 and 4
	wd.SysProcAttr = &syscall.SysProcAttr{
		// If this process dies, the watchdog hears of it at once (the
		// control pipe's EOF says the same; this is the backstop).
		Pdeathsig: syscall.SIGTERM,
		// Its own group: terminal signals reach only the supervisor,
		// which forwards them.
		Setpgid: true,
	}
	if err := wd.Start(); err != nil {
		ctrlR.Close()
		ctrlW.Close()
		repR.Close()
		repW.Close()
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	ctrlR.Close()
	repW.Close()
	j := &guardedJob{wd: wd, ctrl: ctrlW, started: make(chan int, 1), done: make(chan struct{})}
	go j.readReports(repR)
	return j, nil
}

func (j *guardedJob) readReports(r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	got := false
	for !got && sc.Scan() {
		r, ok := parseReport(sc.Text())
		switch {
		case !ok:
		case r.kind == reportStarted:
			j.started <- r.pid
		case r.kind == reportExited:
			j.result, got = r.result, true
		}
	}
	if !got {
		// The watchdog itself died without reporting (killed with
		// SIGKILL): its job may not have been reaped, so say so.
		err := j.wd.Wait()
		code := 1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		j.result = jobResult{Code: code, Reason: reasonWatchdogDied}
	}
	j.mu.Lock()
	if j.ctrl != nil {
		j.ctrl.Close()
		j.ctrl = nil
	}
	j.mu.Unlock()
	// The report comes after the job's whole group is gone, so the lock
	// may go now; the watchdog's own exit is reaped below.
	close(j.done)
	if got {
		_ = j.wd.Wait()
	}
}

func (j *guardedJob) send(m control) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ctrl != nil {
		send(j.ctrl, m)
	}
}

// Go lets an armed watchdog start the job with env added to its
// environment, to be killed by deadline.
func (j *guardedJob) Go(deadline Boottime, env []string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ctrl == nil {
		return
	}
	for _, kv := range env {
		send(j.ctrl, control{kind: ctrlEnv, env: kv})
	}
	send(j.ctrl, control{kind: ctrlGo, deadline: deadline})
}

// Disarm ends a watchdog that has not been told to Go; it exits without
// starting the job. Done closes once it has.
func (j *guardedJob) Disarm() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ctrl != nil {
		j.ctrl.Close()
		j.ctrl = nil
	}
}

// SetDeadline moves the kill deadline.
func (j *guardedJob) SetDeadline(d Boottime) { j.send(control{kind: ctrlDeadline, deadline: d}) }

// Signal delivers sig to the job's process group.
func (j *guardedJob) Signal(sig syscall.Signal) { j.send(control{kind: ctrlSignal, signal: sig}) }

// Stop asks for the job to be stopped: SIGTERM, then SIGKILL after grace.
func (j *guardedJob) Stop() { j.send(control{kind: ctrlStop}) }

func (j *guardedJob) Done() <-chan struct{} { return j.done }

func (j *guardedJob) Result() jobResult {
	<-j.done
	return j.result
}
