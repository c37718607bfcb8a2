package recipe

import (
	"slices"
)

// The rules of interference, as pure functions of what a contender saw.

// The suspicion of a previous holder, and whether a handoff was clean,
// are state's rules (state.Suspicion, state.Unclean), shared with every
// engine; what a ZooKeeper contender takes as evidence is below.

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
