package supervisor

import (
	"syscall"
	"time"
)

// killPlan decides when the watchdog signals the job's process group, as
// a pure function of the boottime it is asked at; RunWatchdog reads the
// clock, sends the signals and sleeps until the wake-up it names.
//
//   - At deadline − killSlack − grace it sends SIGTERM, and at deadline −
//     killSlack SIGKILL, unless a later deadline arrived meanwhile (TERM
//     is never taken back).
//   - A stop (on request, or because the supervisor went away) sends
//     SIGTERM at once and SIGKILL grace later, or at the deadline's KILL
//     if that comes first.
//   - SIGKILL is repeated every killSlack until the job is gone.
type killPlan struct {
	deadline Boottime      // the kill deadline: the lease, less the margin
	grace    time.Duration // SIGTERM to SIGKILL
	stopAt   Boottime      // when stopping: SIGKILL at the latest then (0: not stopping)
	termSent bool
	lastKill Boottime // the last SIGKILL (0: none yet)
	reason   string   // why the job is being ended; "" while it may run
}

// next is what to do at now: the signal to send to the group (0 for
// none), and when to ask again.
func (p *killPlan) next(now Boottime) (sig syscall.Signal, wake Boottime) {
	killAt := p.deadline - Boottime(killSlack)
	if p.stopAt != 0 && p.stopAt < killAt {
		killAt = p.stopAt
	}
	termAt := p.deadline - Boottime(killSlack) - Boottime(p.grace)
	switch {
	case now >= killAt:
		if p.reason == "" {
			p.reason = reasonDeadline
		}
		if p.lastKill == 0 || now-p.lastKill >= Boottime(killSlack) {
			sig = syscall.SIGKILL
			p.lastKill = now
		}
		killAt = p.lastKill + Boottime(killSlack)
	case now >= termAt && !p.termSent:
		if p.reason == "" {
			p.reason = reasonDeadline
		}
		sig = syscall.SIGTERM
		p.termSent = true
	}
	wake = killAt
	// A TERM time already passed matters no more once KILL goes out
	// (with no grace they coincide): waking for it would spin.
	if !p.termSent && termAt < wake && termAt > now {
		wake = termAt
	}
	return sig, wake
}

// stop ends the job at now for why (ReasonStopped, ReasonOrphaned; the
// first reason given sticks): it returns SIGTERM unless that was sent
// already (0 then), and brings SIGKILL to now + grace at the latest.
func (p *killPlan) stop(now Boottime, why string) syscall.Signal {
	if p.reason == "" {
		p.reason = why
	}
	var sig syscall.Signal
	if !p.termSent {
		sig = syscall.SIGTERM
		p.termSent = true
	}
	if s := now + Boottime(p.grace); p.stopAt == 0 || s < p.stopAt {
		p.stopAt = s
	}
	return sig
}

// exitReason is why the job ended, once it has, noticed at now.
func (p *killPlan) exitReason(now Boottime) string {
	switch {
	case p.reason != "":
		return p.reason
	case now >= p.deadline-Boottime(killSlack):
		// It ended past its deadline (the watchdog was frozen, say, and
		// the exit and the timer became ready together): it ran without
		// a lease at the end, whatever its code.
		return reasonDeadline
	}
	return reasonExit
}
