package etcdengine

import (
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordrun/coordrun/supervisor/state"
)

// The rules of interference, as pure functions of what a contender saw:
// the same rules as the ZooKeeper engine's, with one thing etcd adds: a
// previous holder's lease can be asked about (TimeToLive), so a holder
// whose keys are gone but whose lease is gone too is known to have been
// stopped by its own watchdog, and one whose lease lives is known to
// have been interfered with.

// The suspicion itself and its rules are state's (state.Suspicion), shared
// with the ZooKeeper engine; etcd adds what a lease's end tells (afterLease).

// recordOwner is the entry a "held" or "stopping" record names.
func recordOwner(record string) (string, bool) {
	if x, ok := strings.CutPrefix(record, state.RecordHeld); ok {
		return x, true
	}
	return strings.CutPrefix(record, state.RecordStopping)
}

// Evidence of interference.
const (
	evidenceOwnEntryGone = "own queue entry deleted"
	evidenceFolderGone   = "lock folder deleted"
	evidenceRunOrphaned  = "run record held by a contender no longer queued"
	evidenceKeysGone     = "holder's keys deleted while its lease lives"
	evidenceStopping     = "holder recorded that it is stopping"
)

// entryName names a queue entry: "lock-<lease>-<n>", the lease in hex,
// n counting the session's entries. Queue order is the create revision,
// not the name.
func entryName(lease clientv3.LeaseID, n int64) string {
	return state.LockNodePrefix + strconv.FormatInt(int64(lease), 16) + "-" + strconv.FormatInt(n, 10)
}

// entryLease is the lease an entry's name carries.
func entryLease(name string) (clientv3.LeaseID, bool) {
	rest, ok := strings.CutPrefix(name, state.LockNodePrefix)
	if !ok {
		return 0, false
	}
	hex, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(hex, 16, 64)
	return clientv3.LeaseID(id), err == nil && id != 0
}

// leaseObs is what a contender last learned of another's lease: at sent
// it asked, at recv it heard that left (whole seconds, rounded down) was
// left of it.
type leaseObs struct {
	owner      string
	sent, recv time.Time
	left       time.Duration
}

// pollAt is when a contender waiting on owner's lease asks again: every
// third of its own session timeout (as often as a live holder renews),
// and just after the lease would run out unrenewed, so that its end is
// told apart from a revocation.
func (o leaseObs) pollAt(every time.Duration) time.Time {
	next := o.recv.Add(every)
	if t := o.recv.Add(o.left + time.Second + 100*time.Millisecond); t.Before(next) {
		next = t
	}
	return next
}

// Evidence from a lease's end.
const (
	evidenceRevoked    = "holder's lease revoked while it held"
	evidenceLeaseEnded = "holder's lease ended in the second it could have expired in"
)

// afterLease is the suspicion once owner's lease is found gone at now
// while the folder's record still names it (stopping: as stopping), given
// the last observation o. A lease ends by expiry, after which its
// holder's watchdog has killed the work (its deadline never passes the
// store's expiry), or by a revocation, after which the work runs until
// its holder hears of it and its kill grace passes, or, if the holder is
// cut off, until its own deadline: at most its session timeout away.
//
//   - gone before o said it could expire: revoked; the full bound.
//   - gone within the second o's rounding leaves open: until that
//     second is over (an unrenewed holder's deadline is within it).
//   - gone after: expired; a suspicion already held of it keeps only the
//     kill grace.
//   - never observed: a stopping record keeps the kill grace; otherwise
//     the lease's end is taken as an expiry, as on ZooKeeper.
func afterLease(s state.Suspicion, o leaseObs, owner string, info, own state.HolderInfo, stopping bool, now time.Time) state.Suspicion {
	switch {
	case o.owner != owner:
		if stopping {
			s, _ = s.Raise(owner, info, own, evidenceStopping, now)
			return s.LeaseGone(info, own, now)
		}
		if s.Owner == owner {
			return s.LeaseGone(info, own, now)
		}
		return s
	case now.Before(o.sent.Add(o.left)):
		next, _ := s.Raise(owner, info, own, evidenceRevoked, now)
		return next
	case now.Before(o.recv.Add(o.left + time.Second)):
		until := o.recv.Add(o.left + time.Second + state.KillSlack)
		if s.Owner == owner && s.Until.After(until) {
			return s
		}
		return state.Suspicion{Owner: owner, Until: until, Why: evidenceLeaseEnded}
	case s.Owner == owner:
		return s.LeaseGone(info, own, now)
	}
	return s
}
