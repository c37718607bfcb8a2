package state

import "time"

// FiringState is where a firing stands, as its record says.
type FiringState string

// States of a firing's record.
const (
	FiringClaimed = FiringState("claimed") // a host won the firing
	FiringRunning = FiringState("running") // its job runs under the lock
	FiringDone    = FiringState("done")    // its job ended; ExitCode says how
	// FiringSkipped: overlap skip, the previous run still held the lock.
	FiringSkipped = FiringState("skipped")
	// FiringLost: the firing could not run or was stopped (no lock,
	// session or lock lost, host stopping); Reason says why.
	FiringLost = FiringState("lost")
	// FiringTimedOut: the job ran past the job's max-runtime and was
	// stopped (TERM, then KILL after the kill grace).
	FiringTimedOut = FiringState("timed-out")
	// FiringReplaced: a later firing stopped this one's run (overlap
	// replace).
	FiringReplaced = FiringState("replaced")
	// FiringPaused: the job was paused at the firing's time; not run.
	FiringPaused = FiringState("paused")
	// FiringUnreadable: the record's data is not a FiringRecord (a reader's
	// view only; never written).
	FiringUnreadable = FiringState("unreadable")
)

// InFlight reports whether a firing in state s still runs or is about to:
// its claimant owns it.
func (s FiringState) InFlight() bool { return s == FiringClaimed || s == FiringRunning }

// FiringRecord is the data of a firing's record.
type FiringRecord struct {
	Job       string      `json:"job"`
	Scheduled time.Time   `json:"scheduled"`
	State     FiringState `json:"state"`
	Reason    string      `json:"reason,omitempty"`
	Host      string      `json:"host"`
	PID       int         `json:"pid"`
	Nonce     string      `json:"nonce"`
	Claimed   time.Time   `json:"claimed"`
	Token     int64       `json:"token,omitempty"`
	Start     time.Time   `json:"start,omitzero"`
	End       time.Time   `json:"end,omitzero"`
	ExitCode  *int        `json:"exit_code,omitempty"`
	// Signal names the signal the job died of, when its exit code says
	// one did (128 + the signal's number, as coordrun reports it).
	Signal string `json:"signal,omitempty"`
	// HostNode names the claimant's record under hosts/: the firing is
	// lost with the claimant once that record is gone (its session
	// ended) while the firing's record still says claimed or running.
	HostNode string `json:"host_node,omitempty"`
	// Attempt counts the runs of this firing: 1, then one more for each
	// run lost with its host (retry-lost) or failed (retry-failed) that
	// was run again. Earlier holds those runs, oldest first.
	Attempt int           `json:"attempt,omitempty"`
	Earlier []PastAttempt `json:"earlier,omitempty"`
	// Output is the end of the run's stdout and stderr, as text, at
	// most the job's output-bytes of it; OutputBytes counts all of it.
	Output      string `json:"output,omitempty"`
	OutputBytes int64  `json:"output_bytes,omitempty"`
}

// Attempts is the record's attempt, counting a record written before
// attempts were counted as the first.
func (r FiringRecord) Attempts() int { return max(r.Attempt, 1) }

// PastAttempt is an earlier run of a firing: one lost with its host
// (Lost, LostBy: when it was noticed, and by which host), or one that
// exited non-zero and was run again (End, ExitCode).
type PastAttempt struct {
	Attempt  int       `json:"attempt"`
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Token    int64     `json:"token,omitempty"`
	Start    time.Time `json:"start,omitzero"`
	End      time.Time `json:"end,omitzero"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Lost     time.Time `json:"lost,omitzero"`
	LostBy   string    `json:"lost_by,omitempty"`
	Reason   string    `json:"reason"`
}

// CronJobInfo is what a cron process publishes about a job in the job's
// folder record, for coordrun cron list and the status page.
type CronJobInfo struct {
	Name     string `json:"name"`
	Schedule string `json:"schedule"`
	TZ       string `json:"tz,omitempty"`
	// Command is the command's base name, or its whole command line with
	// --record-command full.
	Command     []string `json:"command"`
	Overlap     string   `json:"overlap"`
	CatchUp     string   `json:"catch_up,omitempty"`
	RetryLost   int      `json:"retry_lost,omitempty"`
	RetryFailed int      `json:"retry_failed,omitempty"`
	MaxRuntime  string   `json:"max_runtime,omitempty"`
	Jitter      string   `json:"jitter,omitempty"`
}

// Kinds of CronRequest.
const (
	RequestTrigger  = "trigger"
	RequestBackfill = "backfill"
	RequestRetry    = "retry" // retry-failed
)

// CronRequest is a request to run a job's firings outside its schedule:
// one now (trigger) or each missed scheduled time of a range (backfill),
// both made by hand, or a failed run again (retry). One host takes it
// (deleting the request is the claim) and runs the times in order, under
// the job's overlap policy.
type CronRequest struct {
	Kind  string      `json:"kind"` // RequestTrigger, RequestBackfill or RequestRetry
	Times []time.Time `json:"times"`
	By    string      `json:"by"`
	At    time.Time   `json:"at"`
	// A retry names the firing's record, the attempt that failed, and
	// when the next may start (retry-backoff).
	Firing    string    `json:"firing,omitempty"`
	Attempt   int       `json:"attempt,omitempty"`
	NotBefore time.Time `json:"not_before,omitzero"`
}

// CronControl is the record of a pause: who paused the job, and when.
type CronControl struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}
