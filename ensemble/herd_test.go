package ensemble

import (
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// TestNoLostWakeUpsOnFollowers runs a herd lock (every waiter watches the
// lock folder's children) with all sessions on followers. A watch set by
// a read must be armed at the client before any notification for it
// arrives: a notification overtaking the read's reply is dropped by the
// client, and a waiter then sleeps through its turn.
func TestNoLostWakeUpsOnFollowers(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader()
	var followers []string
	for i, cfg := range c.cfgs {
		if i != leader {
			followers = append(followers, cfg.ClientAddr)
		}
	}
	setup := testkit.DialZK(t, followers, 4*time.Second)
	if _, err := setup.Create("/herd", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	const waiters = 40
	var lost atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		conn := testkit.DialZK(t, []string{followers[i%len(followers)]}, 4*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			me, err := conn.Create("/herd/n-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
			if err != nil {
				errs <- err
				return
			}
			for {
				kids, _, ev, err := conn.ChildrenW("/herd")
				if err != nil {
					errs <- err
					return
				}
				sort.Strings(kids)
				if "/herd/"+kids[0] == me {
					errs <- conn.Delete(me, -1)
					return
				}
				select {
				case <-ev:
				case <-time.After(3 * time.Second):
					// Children changed meanwhile but no event came.
					lost.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := lost.Load(); n > 0 {
		t.Fatalf("%d wake-ups lost", n)
	}
}
