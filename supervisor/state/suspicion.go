package state

import (
	"strings"
	"time"
)

// The rules of interference every engine's lock queue applies, as pure
// functions of what a contender saw: a previous holder whose entries
// someone else deleted (or whose lease was revoked) may still be running
// its work, and the next holder must not start before that work is over.

// Suspicion is that a previous holder's work may still run although its
// entries are gone, at most until Until; its release record confirms its
// end earlier. The zero Suspicion suspects no one.
type Suspicion struct {
	Owner string // its queue entry's base name
	Until time.Time
	Why   string // the evidence
}

// UnknownOwner stands for a holder never seen: no release record can name
// it, so a suspicion of it runs its full length.
const UnknownOwner = "(unknown)"

// Raise returns the suspicion after new evidence against owner at now,
// whose work outlives its standing by as much as info says (by as much as
// own's, when info does not say). A suspicion of the same owner is only
// ever extended. fresh reports evidence against a new owner.
func (s Suspicion) Raise(owner string, info, own HolderInfo, why string, now time.Time) (next Suspicion, fresh bool) {
	if info.SessionTimeoutMS == 0 {
		// Its settings are unknown: assume ours.
		info.SessionTimeoutMS, info.KillGraceMS = own.SessionTimeoutMS, own.KillGraceMS
	}
	until := now.Add(info.Outlives())
	if s.Owner == owner && s.Until.After(until) {
		return s, false
	}
	return Suspicion{Owner: owner, Until: until, Why: why}, s.Owner != owner
}

// LeaseGone shortens the suspicion once the owner's lease is known gone
// at now (a store that can tell, as etcd's TimeToLive does): its session
// has ended, so its work hears of it at once (a revocation) or was killed
// already (an expiry); either way it is dead after the kill grace.
func (s Suspicion) LeaseGone(info, own HolderInfo, now time.Time) Suspicion {
	grace := info.KillGraceMS
	if info.SessionTimeoutMS == 0 {
		grace = own.KillGraceMS
	}
	if until := now.Add(time.Duration(grace)*time.Millisecond + KillSlack); until.Before(s.Until) {
		s.Until = until
	}
	return s
}

// Blocks reports whether the suspicion keeps the head of the queue from
// taking the lock at now, given the folder's record: the suspected
// holder's work may still run and it has not recorded its release.
func (s Suspicion) Blocks(record string, now time.Time) bool {
	return s.Owner != "" && record != RecordReleased+s.Owner && now.Before(s.Until)
}

// MustWait is how long a new holder, whose predecessor left record, must
// still wait at now before its work may start, and the evidence: the
// suspected holder's work may still run and nothing confirmed its end.
// Once the bound has passed the wait is zero or less, and the evidence is
// still named (the handoff was not clean); with no suspicion, or its end
// confirmed, it is 0 and "".
func (s Suspicion) MustWait(record string, now time.Time) (time.Duration, string) {
	if s.Owner == "" || record == RecordReleased+s.Owner {
		return 0, ""
	}
	return s.Until.Sub(now), s.Why
}

// Unclean reports whether the record a new holder (queue entry me) found
// says that the previous holder did not release: its session ended, or it
// was stopping after someone else touched its entries.
func Unclean(record, me string) bool {
	return strings.HasPrefix(record, RecordHeld) && record != RecordHeld+me || strings.HasPrefix(record, RecordStopping)
}
