package ensemble

import (
	"bytes"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// sessionAlive reports whether m's tree holds the session.
func sessionAlive(m *Member, id int64) bool {
	var ok bool
	m.view(func(t *tree.Tree, _ int64) { _, ok = t.Session(id) })
	return ok
}

// TestClientClosesOnlyItsOwnSession: closeSession on one connection ends
// that connection's session and no other, and a session's password as a
// snapshot gives it does not let another client take the session over and
// close it (the redacted snapshot's passwords are not the session's).
func TestClientClosesOnlyItsOwnSession(t *testing.T) {
	dir := socketDir(t)
	c := startCluster(t, 1, withAdminSocket(dir))
	addr := c.Servers()[0]
	victim := testkit.DialZK(t, []string{addr}, 4*time.Second)
	if _, err := victim.Create("/held", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	vid := victim.SessionID()

	other := rawSession(t, addr, 4*time.Second)
	if code := other.call(wire.OpCloseSession, nil, nil); code != wire.OK {
		t.Fatalf("closeSession: %v", code)
	}
	m := c.Member(0)
	testkit.WaitFor(t, 5*time.Second, "the closing session gone", func() bool { return !sessionAlive(m, other.resp.SessionID) })
	if !sessionAlive(m, vid) {
		t.Fatal("another connection's closeSession ended the victim's session")
	}

	// The victim's session as a snapshot tells it: its id and a password.
	_, snap, err := ReadBackup(bytes.NewReader(snapOver(t, "unix", filepath.Join(dir, "1.sock"), snapshotWord)))
	if err != nil {
		t.Fatal(err)
	}
	s, ok := snap.Session(vid)
	if !ok {
		t.Fatal("the snapshot lacks the victim's session")
	}
	hijack, ok := rawHandshake(t, addr, wire.ConnectRequest{LastZxidSeen: 0, Timeout: 4000, SessionID: vid, Passwd: s.Password})
	if ok && hijack.resp.SessionID == vid {
		// Taken over: its close would end the victim's session.
		hijack.call(wire.OpCloseSession, nil, nil)
		t.Fatal("a client resumed the victim's session with the password from a snapshot")
	}
	if _, _, err := victim.Exists("/held"); err != nil || !sessionAlive(m, vid) {
		t.Fatalf("victim after the attempt: %v, alive %v", err, sessionAlive(m, vid))
	}
}

// TestFollowerRelaysOnlyHeldSessions: a follower relays to the leader the
// liveness of the sessions it holds connections for and no other, so a
// session whose client is gone is not kept alive from a member it never
// used.
func TestFollowerRelaysOnlyHeldSessions(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.waitLeader()
	var fol *Member
	for _, m := range c.Members() {
		if m != leader {
			fol = m
			break
		}
	}
	// A session on the leader whose client then vanishes without closing.
	gone := rawSession(t, leader.ClientAddr(), testkit.MinSessionTimeout)
	id := gone.resp.SessionID
	timeout := time.Duration(gone.resp.Timeout) * time.Millisecond
	gone.nc.Close()
	testkit.WaitFor(t, 5*time.Second, "the session on the follower", func() bool { return sessionAlive(fol, id) })

	// The follower is asked, as its relay would be, to vouch for it all
	// the while: it holds no connection of the session, so nothing goes.
	stop := make(chan struct{})
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		tick := time.NewTicker(timeout / 10)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_, _ = fol.sendTouch(testkit.Context(t, time.Second), []int64{id})
			}
		}
	}()
	defer func() { close(stop); <-relayed }()
	testkit.WaitFor(t, 4*timeout+5*time.Second, "the abandoned session expired", func() bool { return !sessionAlive(leader, id) })

	// A held session still goes through.
	held := rawSession(t, fol.ClientAddr(), 4*time.Second)
	if got := fol.clients.holding([]int64{id, held.resp.SessionID}); !slices.Equal(got, []int64{held.resp.SessionID}) {
		t.Errorf("holding: %x, want only the held session %x", got, held.resp.SessionID)
	}
	if dead, err := fol.sendTouch(testkit.Context(t, 5*time.Second), []int64{held.resp.SessionID}); err != nil || len(dead) != 0 {
		t.Errorf("relay of a held session: dead %v, %v", dead, err)
	}
}
