package supervisor

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
)

// The watchdog's pipe protocol, one message per line, encoded and parsed
// here for both ends: the supervisor (job.go) and the watchdog
// (watchdog.go).
//
// Control messages, supervisor → watchdog:
//
//	E <quoted>       one KEY=VALUE for the job's environment, sent before G:
//	                 the lock's identity and token, known only once held
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
//	                             one of the Reason constants
//
// A line that does not parse is ignored, and so is a message the receiver
// does not expect in its state (D before G, G after it).

// WatchdogLockEnvFlag is the watchdog's flag that says E lines will come
// (see cmd/coordrun/watchdog.go): a watchdog binary older than them
// refuses it rather than run a job without its lock environment.
const WatchdogLockEnvFlag = "lock-env"

// Control message kinds.
const (
	ctrlEnv      = "E"
	ctrlGo       = "G"
	ctrlDeadline = "D"
	ctrlSignal   = "S"
	ctrlStop     = "K"
)

// control is one control message.
type control struct {
	kind     string
	deadline Boottime       // of ctrlGo and ctrlDeadline
	signal   syscall.Signal // of ctrlSignal
	env      string         // of ctrlEnv: KEY=VALUE
}

func (m control) String() string {
	switch m.kind {
	case ctrlGo, ctrlDeadline:
		return fmt.Sprintf("%s %d", m.kind, int64(m.deadline))
	case ctrlSignal:
		return fmt.Sprintf("%s %d", m.kind, int(m.signal))
	case ctrlEnv:
		return m.kind + " " + strconv.Quote(m.env)
	}
	return m.kind
}

// parseControl reads one control line.
func parseControl(line string) (control, bool) {
	if q, ok := strings.CutPrefix(line, ctrlEnv+" "); ok {
		env, err := strconv.Unquote(q)
		return control{kind: ctrlEnv, env: env}, err == nil && strings.IndexByte(env, '=') > 0
	}
	f := strings.Fields(line)
	switch {
	case len(f) == 2 && (f[0] == ctrlGo || f[0] == ctrlDeadline):
		d, err := strconv.ParseInt(f[1], 10, 64)
		return control{kind: f[0], deadline: Boottime(d)}, err == nil
	case len(f) == 2 && f[0] == ctrlSignal:
		v, err := strconv.Atoi(f[1])
		return control{kind: f[0], signal: syscall.Signal(v)}, err == nil && v > 0 && v < 65
	case len(f) == 1 && f[0] == ctrlStop:
		return control{kind: ctrlStop}, true
	}
	return control{}, false
}

// Report message kinds.
const (
	reportStarted = "P"
	reportExited  = "X"
)

// report is one report message.
type report struct {
	kind   string
	pid    int       // of reportStarted
	result jobResult // of reportExited
}

func (r report) String() string {
	if r.kind == reportStarted {
		return fmt.Sprintf("%s %d", r.kind, r.pid)
	}
	return fmt.Sprintf("%s %d %d %s", r.kind, r.result.Code, r.result.Signal, r.result.Reason)
}

// parseReport reads one report line.
func parseReport(line string) (report, bool) {
	f := strings.Fields(line)
	switch {
	case len(f) == 2 && f[0] == reportStarted:
		pid, err := strconv.Atoi(f[1])
		return report{kind: reportStarted, pid: pid}, err == nil
	case len(f) == 4 && f[0] == reportExited:
		code, cerr := strconv.Atoi(f[1])
		sig, serr := strconv.Atoi(f[2])
		return report{kind: reportExited, result: jobResult{Code: code, Signal: sig, Reason: f[3]}}, cerr == nil && serr == nil
	}
	return report{}, false
}

// send writes one message and its newline.
func send(w io.Writer, m fmt.Stringer) { fmt.Fprintln(w, m.String()) }
