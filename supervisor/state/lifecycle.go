package state

import (
	"fmt"
	"slices"
	"time"
)

// The firing lifecycle as pure transitions. Each takes a firing's record
// and the time on the host's one clock, and returns a Step: the next
// record, the precondition of the write that saves it, and what the write
// causes. The supervisor's cron host only reads, applies steps with the
// versioned write, and acts on their events; every rule of a firing's
// life is here.
//
//	claimed ─start─▶ running ─finish─▶ done (exit 0) | failed (done, exit ≠ 0)
//	   │                │                 | lost | timed-out
//	   ├─pause─▶ paused ├─replace─▶ replaced
//	   ├─skip──▶ skipped└─lose with host─▶ lost, or claimed again (retry-lost)
//	   └─lose──▶ lost        failed ─retry-failed─▶ claimed again

// Claimant is the host that takes a firing: its process and its record
// under hosts/, and a nonce fresh for each claim, by which it tells its own
// record from another's after a lost reply.
type Claimant struct {
	Host     string
	PID      int
	HostNode string
	Nonce    string
}

// Rules are the job's settings the lifecycle reads.
type Rules struct {
	RetryLost    int
	RetryFailed  int
	RetryBackoff time.Duration
	CatchUp      time.Duration
}

// Write is the precondition of the write that saves a step.
type Write int

const (
	// Create: the record must not exist. Of the hosts that claim a
	// firing, exactly one create succeeds; a host whose clock lags finds
	// the record made and does not run the firing again (the skew guard).
	Create Write = iota + 1
	// Update: only over the version the record was read, or last written,
	// at. A host that finds it changed leaves the record as it is: another
	// host recorded the firing first.
	Update
)

// Hook is which of the job's hooks an ended firing runs.
type Hook int

const (
	NoHook Hook = iota
	OnSuccess
	OnFailure
)

// Events are what a step causes besides its write. The host acts on them
// only once the write succeeded, except Retry, which is filed before.
type Events struct {
	// Ended: the firing ended, or was recorded as not run: the host tells
	// its observers (metrics, OnFire) and runs Hook.
	Ended bool
	Hook  Hook
	// Run: the step gives this host a firing to run (a claim, a retry).
	Run bool
	// Retried: the step claims the firing again for another attempt (the
	// retries metric counts it).
	Retried bool
	// Retry is a retry-failed request to file before the write, so that
	// no host that reads the failure finds the retry missing; should the
	// write fail, the request finds the record unchanged and does nothing.
	Retry *CronRequest
}

// Step is one transition's outcome.
type Step struct {
	Rec   FiringRecord
	Write Write
	Events
}

// HookFor is the hook an ended firing runs: on-success after a run that
// exited 0; on-failure after one that failed for good (no retry-failed
// left), was lost for good or timed out; none otherwise (a failed run to
// be run again has not ended yet).
func HookFor(r FiringRecord, rules Rules) Hook {
	switch ResultOf(r) {
	case ResultDone:
		return OnSuccess
	case ResultFailed:
		if r.Attempts() <= rules.RetryFailed {
			return NoHook
		}
		return OnFailure
	case ResultLost, ResultTimedOut:
		return OnFailure
	}
	return NoHook
}

func ended(r FiringRecord, rules Rules) Events {
	return Events{Ended: true, Hook: HookFor(r, rules)}
}

// Reasons a firing is claimed.
const (
	ReasonCatchUp  = "catch-up"
	ReasonSkipped  = "previous run still going"
	ReasonStopping = "host stopping"
)

// Claim is the record a host creates to take the firing of job scheduled
// at: attempt 1, claimed now, with reason (catch-up, triggered by,
// backfill requested by; "" for a scheduled firing).
func Claim(job string, at time.Time, reason string, c Claimant, now time.Time) Step {
	r := FiringRecord{Job: job, Scheduled: at.UTC(), State: FiringClaimed, Reason: reason, Attempt: 1}
	claimBy(&r, c, now)
	return Step{Rec: r, Write: Create, Events: Events{Run: true}}
}

func claimBy(r *FiringRecord, c Claimant, now time.Time) {
	r.Host, r.PID, r.Nonce, r.Claimed, r.HostNode = c.Host, c.PID, c.Nonce, now.UTC(), c.HostNode
}

// Pause records a claimed firing of a paused job as not run. The claimant
// checks the pause after its claim, so that each firing has one record
// whichever host took it.
func Pause(r FiringRecord, by CronControl, rules Rules) Step {
	r.State, r.Reason = FiringPaused, fmt.Sprintf("job paused by %s at %s", by.By, by.At.Format(time.RFC3339))
	return Step{Rec: r, Write: Update, Events: ended(r, rules)}
}

// Acquisition is how a firing takes its job's lock under an overlap
// policy: skip tries it once (a run still holding it means skipped);
// queue waits for it; replace first marks the earlier firings still in
// flight replaced (their hosts stop them), then waits.
func Acquisition(overlap string) (try, replaceEarlier bool) {
	switch overlap {
	case OverlapSkip:
		return true, false
	case OverlapReplace:
		return false, true
	}
	return false, false
}

// Skip records a firing that found the previous run still holding the
// lock (overlap skip).
func Skip(r FiringRecord, rules Rules) Step {
	r.State, r.Reason = FiringSkipped, ReasonSkipped
	return Step{Rec: r, Write: Update, Events: ended(r, rules)}
}

// Lose records a firing that could not run, or was stopped before it
// started: no lock, the session lost, the host stopping.
func Lose(r FiringRecord, reason string, rules Rules) Step {
	r.State, r.Reason = FiringLost, reason
	return Step{Rec: r, Write: Update, Events: ended(r, rules)}
}

// Start records that the firing's job starts under the lock, holding it
// with token.
func Start(r FiringRecord, token int64, now time.Time) Step {
	r.State, r.Token, r.Start = FiringRunning, token, now.UTC()
	return Step{Rec: r, Write: Update}
}

// Cause is why a run ended.
type Cause int

const (
	// Exited: the job exited by itself (or of a signal it got), or was
	// stopped by a signal to the host.
	Exited Cause = iota
	// SessionLost: the host's session ended, and the job was killed.
	SessionLost
	// LockLost: another client deleted or changed the lock's or the
	// firing's records, and the job was stopped.
	LockLost
	// TimedOut: the job ran past max-runtime and was stopped.
	TimedOut
)

// Exit is how a run ended.
type Exit struct {
	Code   int
	Signal string // the signal's name, when Code says the job died of one
	Cause  Cause
	Err    string // what stopped it, for every cause but Exited
	// Output is the end of the run's output kept with the record;
	// OutputBytes counts all of it.
	Output      string
	OutputBytes int64
}

// Finish records the end of a run: done (failed, as a result, unless it
// exited 0), or lost or timed-out by its cause. A run that failed with
// retry-failed attempts left asks for the next attempt (Retry), due
// retry-backoff from now; name is the record's name.
func Finish(r FiringRecord, name string, x Exit, now time.Time, rules Rules) Step {
	code := x.Code
	r.End, r.ExitCode, r.Signal = now.UTC(), &code, x.Signal
	r.Output, r.OutputBytes = x.Output, x.OutputBytes
	r.State = FiringDone
	switch x.Cause {
	case SessionLost, LockLost:
		r.State, r.Reason = FiringLost, x.Err
	case TimedOut:
		r.State, r.Reason = FiringTimedOut, x.Err
	}
	s := Step{Rec: r, Write: Update, Events: ended(r, rules)}
	if ResultOf(r) == ResultFailed && r.Attempts() <= rules.RetryFailed {
		s.Retry = &CronRequest{Kind: RequestRetry, Times: []time.Time{r.Scheduled}, By: r.HostNode, Firing: name,
			Attempt: r.Attempts(), NotBefore: now.Add(rules.RetryBackoff).UTC()}
	}
	return s
}

// LostWithHost reports whether a firing was lost with its claimant: its
// record still says claimed or running, but the claimant's host record
// is gone (live says which are there).
func LostWithHost(r FiringRecord, live func(hostNode string) bool) bool {
	return r.HostNode != "" && r.State.InFlight() && !live(r.HostNode)
}

// LoseWithHost records a firing lost with its claimant, noticed now by c.
// With retry-lost attempts left, c claims it again and runs it (a new
// attempt, Earlier keeping the lost one); otherwise it is lost. A firing
// scheduled before KeptFrom is not run again: its record is about to be
// pruned, and a host whose clock lags would take it for a new one. ok is
// false when c should leave it: c is stopping and would record a retry
// lost at once, while a host that stays (or the next to start) can run it.
func LoseWithHost(r FiringRecord, c Claimant, stopping bool, now time.Time, rules Rules) (s Step, ok bool) {
	attempt := r.Attempts()
	lost := PastAttempt{Attempt: attempt, Host: r.Host, PID: r.PID, Token: r.Token, Start: r.Start,
		Lost: now.UTC(), LostBy: c.HostNode, Reason: "its host's session ended while it " + string(r.State)}
	retry := attempt <= rules.RetryLost && !r.Scheduled.Before(KeptFrom(now, rules.CatchUp))
	if retry && stopping {
		return Step{}, false
	}
	next := r
	next.Earlier = append(slices.Clone(r.Earlier), lost)
	if !retry {
		next.State, next.Reason = FiringLost, lost.Reason
		return Step{Rec: next, Write: Update, Events: ended(next, rules)}, true
	}
	next.State, next.Reason = FiringClaimed, fmt.Sprintf("run again after attempt %d was lost", attempt)
	claimBy(&next, c, now)
	next.Attempt, next.Token, next.Start, next.End, next.ExitCode = attempt+1, 0, time.Time{}, time.Time{}, nil
	return Step{Rec: next, Write: Update, Events: Events{Run: true, Retried: true}}, true
}

// RetryDue is how long a request must still wait: a retry until its
// NotBefore; any other at once.
func RetryDue(req CronRequest, now time.Time) time.Duration {
	if req.Kind != RequestRetry {
		return 0
	}
	return max(req.NotBefore.Sub(now), 0)
}

// RetryAwaitsRecord reports whether the record of a retry's firing still
// shows the failed attempt in flight: the request is filed just before the
// failure is recorded, and with a short backoff the requester's write may
// not have landed yet (if the requester dies first, the firing is lost
// with it instead).
func RetryAwaitsRecord(r FiringRecord, req CronRequest) bool {
	return r.Attempts() == req.Attempt && r.HostNode == req.By && r.State.InFlight()
}

// RetryFailed claims a failed run's firing again for c, if its record
// still says the attempt the request names failed; the claim's write is
// conditional on the record's version, so one host runs it.
func RetryFailed(r FiringRecord, req CronRequest, c Claimant, now time.Time) (s Step, ok bool) {
	if ResultOf(r) != ResultFailed || r.Attempts() != req.Attempt {
		return Step{}, false
	}
	exit := "exited"
	if r.ExitCode != nil {
		exit = fmt.Sprintf("exited %d", *r.ExitCode)
	}
	past := PastAttempt{Attempt: req.Attempt, Host: r.Host, PID: r.PID, Token: r.Token, Start: r.Start, End: r.End,
		ExitCode: r.ExitCode, Reason: exit}
	next := r
	next.Earlier = append(slices.Clone(r.Earlier), past)
	next.State, next.Reason = FiringClaimed, fmt.Sprintf("run again after attempt %d failed", req.Attempt)
	claimBy(&next, c, now)
	next.Attempt, next.Token, next.Start, next.End, next.ExitCode, next.Signal = req.Attempt+1, 0, time.Time{}, time.Time{}, nil, ""
	next.Output, next.OutputBytes = "", 0
	return Step{Rec: next, Write: Update, Events: Events{Run: true, Retried: true}}, true
}

// Replace marks an earlier firing still in flight as replaced by the
// firing of by (overlap replace); its host watches its record and stops
// its run. ok is false for a record it does not apply to: by's own, a
// later one, or one that has ended.
func Replace(old, by FiringRecord, now time.Time, rules Rules) (s Step, ok bool) {
	if old.Nonce == by.Nonce || !old.Scheduled.Before(by.Scheduled) || !old.State.InFlight() {
		return Step{}, false
	}
	old.State = FiringReplaced
	old.Reason = "replaced by the firing of " + by.Scheduled.Format(time.RFC3339)
	old.End = now.UTC()
	return Step{Rec: old, Write: Update, Events: ended(old, rules)}, true
}

// Planned is one firing a request asks for: its record's name, its
// scheduled time and the claim's reason.
type Planned struct {
	Name   string
	At     time.Time
	Reason string
}

// Plan is what a trigger or backfill request runs, oldest first, each
// claimed (Claim) and run after the previous one ended. A triggered firing
// gets a record of its own (seq: the request's sequence number); a
// backfilled one the record its scheduled time would have had, so it runs
// only if that time has none.
func Plan(req CronRequest, seq string) []Planned {
	times := slices.Clone(req.Times)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	out := make([]Planned, 0, len(times))
	for _, at := range times {
		p := Planned{Name: FiringName(at), At: at, Reason: "backfill requested by " + req.By}
		if req.Kind == RequestTrigger {
			p.Name, p.Reason = TriggeredName(at, seq), "triggered by "+req.By
		}
		out = append(out, p)
	}
	return out
}
