package etcdengine

import (
	"errors"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor/engine"
)

// The lease deadline moves with acknowledged renewals only: while the
// only member is down, no renewal is acknowledged and the deadline stays
// where the last one put it; once the member is back, it moves again.
// Every deadline is at most a TTL past the moment it was delivered.
func TestEtcdSessionDeadlineMovesWithAcknowledgedRenewals(t *testing.T) {
	c := testkit.StartEtcd(t, 1)
	conn := dial(t, c, 3*time.Second)
	if conn.Timeout() != 3*time.Second {
		t.Fatalf("timeout %v, want the 3s asked for", conn.Timeout())
	}
	first := conn.Lease()
	if first.IsZero() || time.Until(first) > conn.Timeout() {
		t.Fatalf("lease after grant %v: want within a TTL from now", time.Until(first))
	}
	// Two renewals, each proving a later deadline no further than a TTL
	// ahead of its arrival.
	// (The channel may still hold the grant's own deadline.)
	last := first
	for renewals := 0; renewals < 2; {
		d := testkit.Recv(t, conn.LeaseUpdates(), 5*time.Second, "a lease renewal")
		if d.Equal(first) {
			continue
		}
		renewals++
		if !d.After(last) || time.Until(d) > conn.Timeout() {
			t.Fatalf("renewal deadline %v after %v, %v from now", d, last, time.Until(d))
		}
		last = d
	}

	c.Kill(0)
	stalled := conn.Lease()
	// Wait until the deadline itself has passed: renewals were due all along.
	testkit.WaitFor(t, 10*time.Second, "the stalled deadline to pass", func() bool { return time.Now().After(stalled) })
	if got := conn.Lease(); !got.Equal(stalled) {
		t.Fatalf("lease moved from %v to %v with no member to acknowledge it", stalled, got)
	}
	select {
	case <-conn.Done():
		t.Fatalf("session ended without the store saying so: %v", conn.Err())
	default:
	}

	c.Restart(0)
	c.WaitHealthy(30 * time.Second)
	// etcd extends every lease by its TTL when a leader takes over, so
	// the session survives the outage.
	testkit.WaitFor(t, 15*time.Second, "a renewal acknowledged after the restart", func() bool { return conn.Lease().After(stalled) })
}

// A lease revoked by another client ends the session: the next renewal
// hears that the lease is gone.
func TestEtcdSessionRevokedByAnotherClientIsNoticed(t *testing.T) {
	c := testkit.StartEtcd(t, 1)
	conn := dial(t, c, 3*time.Second)
	c.Etcdctl("lease", "revoke", conn.ID())
	testkit.Recv(t, conn.Done(), 5*time.Second, "the session's end after its lease was revoked")
	if !errors.Is(conn.Err(), engine.ErrSessionLost) {
		t.Fatalf("Err() = %v, want ErrSessionLost", conn.Err())
	}
}
