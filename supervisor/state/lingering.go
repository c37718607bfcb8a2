package state

import (
	"fmt"
	"time"
)

// Whether a holder's entry may outlast its holder: the one rule the
// status page and `coordrun status` both apply, so that they never
// disagree about the same holder.

// Silence is what the store's leader knows of a session: how long it has
// not heard from it, and the session's timeout. Only the leader knows
// (it alone expires sessions); an etcd lease tells it as the part of its
// TTL already run down.
type Silence struct {
	Silent  time.Duration
	Timeout time.Duration
}

// Liveness is what a reader knows of the owner of a holder's entry.
type Liveness struct {
	// Persistent: the entry is not tied to a session at all.
	Persistent bool
	// Gone: the owner's session has ended, yet the entry is still read.
	Gone bool
	// Silence is the leader's view of the owner's session; nil when the
	// reader cannot learn it (a follower's page, Apache ZooKeeper).
	Silence *Silence
}

// LingeringQueueGone is the verdict on a holder whose queue entry is gone
// while its run record stays.
const LingeringQueueGone = "the holder's queue node is gone; its run node stays until its job has stopped"

// Lingering says why a holder's entry may outlive its holder, or "" when
// nothing looks wrong: it is not ephemeral, its session is gone, or its
// session has been silent for most of its timeout, as when the holder's
// host died or the holder is frozen and the session waits to expire.
func Lingering(l Liveness) string {
	switch {
	case l.Persistent:
		return "the holder's node is not ephemeral: it stays until deleted by hand"
	case l.Gone:
		return "the holder's session is gone but its node lingers"
	}
	s := l.Silence
	// A client pings every third of its timeout: two pings missed.
	if s != nil && s.Timeout > 0 && s.Silent > s.Timeout*2/3 {
		return fmt.Sprintf("the holder's session has been silent for %s of its %s timeout: its node lingers until the session expires",
			s.Silent.Round(100*time.Millisecond), s.Timeout)
	}
	return ""
}
