package ensemble

import (
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// With raft's commit timer out of the way, a follower learns of a commit
// only from the commit pusher: its clients must still see the leader's
// writes, their watches fire and their own writes complete.
func TestCommitPushReachesFollowers(t *testing.T) {
	c := startCluster(t, 3, func(cfg *Config) { cfg.commitTimeout = time.Hour })
	defer c.Close()
	leader := c.waitLeader()
	var follower string
	for _, m := range c.Members() {
		if m != leader {
			follower = m.ClientAddr()
			break
		}
	}
	fc := testkit.DialZK(t, []string{follower}, 5*time.Second)
	lc := testkit.DialZK(t, []string{leader.ClientAddr()}, 5*time.Second)

	_, _, ch, err := fc.ExistsW("/pushed")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Create("/pushed", []byte("v1"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-ch:
		if ev.Type != zk.EventNodeCreated || ev.Path != "/pushed" {
			t.Fatalf("follower's watch: %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower's watch did not fire: it never learned of the commit")
	}
	for i := 0; i < 20; i++ {
		want := []byte{byte('a' + i)}
		if _, err := fc.Set("/pushed", want, -1); err != nil {
			t.Fatal(err)
		}
		got, _, err := fc.Get("/pushed")
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("follower read %q after its own write of %q", got, want)
		}
	}
	// Every member ends with the same tree.
	testkit.WaitFor(t, 10*time.Second, "members at the same zxid", func() bool {
		z := c.Member(0).LastZxid()
		return c.Member(1).LastZxid() == z && c.Member(2).LastZxid() == z
	})
}
