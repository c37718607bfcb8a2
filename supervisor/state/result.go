package state

// Result is how a firing ended, as the history, the status page, the
// metrics and the hooks name it: the state of its record, with a run that
// ended split into done (exit 0) and failed (any other exit). While the
// firing has not ended it is its state (claimed, running).
type Result string

// Results of an ended firing.
const (
	ResultDone     = Result("done")
	ResultFailed   = Result("failed")
	ResultLost     = Result(FiringLost)
	ResultTimedOut = Result(FiringTimedOut)
	ResultReplaced = Result(FiringReplaced)
	ResultSkipped  = Result(FiringSkipped)
	ResultPaused   = Result(FiringPaused)
)

// Results are the results of an ended firing, in the order the metrics
// list them.
var Results = []Result{ResultDone, ResultFailed, ResultLost, ResultTimedOut, ResultReplaced, ResultSkipped, ResultPaused}

// ResultOf is the one derivation of a firing's result from its record.
func ResultOf(r FiringRecord) Result {
	if r.State == FiringDone {
		if r.ExitCode != nil && *r.ExitCode == 0 {
			return ResultDone
		}
		return ResultFailed
	}
	return Result(r.State)
}

// HistoryKind sorts a record for the history limits by kind.
type HistoryKind int

const (
	// KindTotal: counts toward the total only (skipped, paused, and a
	// firing still claimed or running).
	KindTotal HistoryKind = iota
	// KindSuccess: a run that exited 0.
	KindSuccess
	// KindFailed: a firing that ended otherwise (failed, lost, timed
	// out, replaced) or whose record cannot be read.
	KindFailed
)

// Kind is the history kind of a firing with this result.
func (r Result) Kind() HistoryKind {
	switch r {
	case ResultDone:
		return KindSuccess
	case ResultFailed, ResultLost, ResultTimedOut, ResultReplaced, Result(FiringUnreadable):
		return KindFailed
	}
	return KindTotal
}
