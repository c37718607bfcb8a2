package recipe

import (
	"slices"
	"strings"
	"time"
)

// The rules of interference, as pure functions of what a contender saw.

// suspicion: a previous holder's work may still run although its nodes
// are gone, at most until until; its release record confirms its end
// earlier.
type suspicion struct {
	owner string // its queue node's base name
	until time.Time
	why   string
}

// unknownOwner stands for a holder never seen: no release record can
// name it, so a suspicion of it runs its full length.
const unknownOwner = "(unknown)"

// raise returns the suspicion after new evidence against owner at now,
// whose work outlives its standing by as much as info says (by as much as
// own's, when info does not say). A suspicion of the same owner is only
// ever extended. fresh reports evidence against a new owner.
func (s suspicion) raise(owner string, info, own Info, why string, now time.Time) (next suspicion, fresh bool) {
	if info.SessionTimeoutMS == 0 {
		// Its settings are unknown: assume ours.
		info.SessionTimeoutMS, info.KillGraceMS = own.SessionTimeoutMS, own.KillGraceMS
	}
	until := now.Add(info.Outlives())
	if s.owner == owner && s.until.After(until) {
		return s, false
	}
	return suspicion{owner: owner, until: until, why: why}, s.owner != owner
}

// blocks reports whether the suspicion keeps the head of the queue from
// taking the lock at now, given the folder's record: the suspected
// holder's work may still run and it has not recorded its release.
func (s suspicion) blocks(record string, now time.Time) bool {
	return s.owner != "" && record != releasedRecord(s.owner) && now.Before(s.until)
}

// mustWait is how long a new holder, whose predecessor left record, must
// still wait at now before its work may start: the suspected holder's
// work may still run and nothing confirmed its end.
func (s suspicion) mustWait(record string, now time.Time) (time.Duration, string) {
	if s.owner == "" || record == releasedRecord(s.owner) {
		return 0, ""
	}
	return s.until.Sub(now), s.why
}

// unclean reports whether the record a new holder (queue node me) found
// says that the previous holder did not release: its session ended, or it
// was stopping after someone else touched its nodes.
func unclean(record, me string) bool {
	return strings.HasPrefix(record, recordHeld) && record != heldRecord(me) || strings.HasPrefix(record, recordStopping)
}

// Evidence of interference.
const (
	evidenceOwnNodeGone  = "own queue node deleted"
	evidenceFolderGone   = "lock folder deleted"
	evidenceRunOrphaned  = "run node held by a contender no longer queued"
	evidenceHeadUnminded = "holder queued without its run node"
	evidenceStopping     = "holder recorded that it is stopping"
)

// orphanedRun reports evidence in a run node held by runNode while the
// queue is q: its holder's queue node was deleted while it still runs.
func orphanedRun(runNode string, q []string) bool {
	return !slices.Contains(q, runNode)
}

// headWithoutRun reports evidence when there is no run node although the
// record says the queue's head holds: the record and the run node are
// written in one multi, and the head's session lives (its queue node is
// there), so someone else deleted the run node.
func headWithoutRun(record, head string) bool {
	return record == heldRecord(head)
}
