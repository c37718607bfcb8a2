package client

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/zookeeper"
)

// Interop with Apache ZooKeeper: the tests below start a standalone
// ZooKeeper 3.8 (Debian's package) on a free loopback port. Without java
// or the jar they skip, unless CI is set, where they fail.

// zooKeeper runs one standalone ZooKeeper for all interop tests of a run.
var zooKeeper = zookeeper.Shared{Prefix: "coordrun-zk-", FourLetter: FourLetter}

func TestMain(m *testing.M) {
	code := m.Run()
	zooKeeper.Stop()
	os.Exit(code)
}

func TestZooKeeperOps(t *testing.T) {
	addr := zooKeeper.Addr(t)
	opsSuite(t, []string{addr})
}

func TestZooKeeperWatches(t *testing.T) {
	addr := zooKeeper.Addr(t)
	watchSuite(t, []string{addr})
}

func TestZooKeeperMissedChange(t *testing.T) {
	addr := zooKeeper.Addr(t)
	missedChangeSuite(t, addr)
}

func TestZooKeeperClose(t *testing.T) {
	addr := zooKeeper.Addr(t)
	closeSuite(t, addr)
}

func TestZooKeeperExpiry(t *testing.T) {
	addr := zooKeeper.Addr(t)
	expirySuite(t, []string{addr})
}

func TestZooKeeperConnectionLoss(t *testing.T) {
	addr := zooKeeper.Addr(t)
	lossSuite(t, addr)
}

func TestZooKeeperLeaseProperty(t *testing.T) {
	addr := zooKeeper.Addr(t)
	leasePropertySuite(t, addr, 1)
}

func TestZooKeeperPipelining(t *testing.T) {
	addr := zooKeeper.Addr(t)
	ctx := testkit.Context(t, 60*time.Second)
	c := connect(t, []string{addr}, 4*time.Second)
	root := fmt.Sprintf("/pipe-%x", c.SessionID())
	_, err := c.Create(ctx, root, nil, 0, OpenACL)
	must(t, err)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				p := fmt.Sprintf("%s/w%d-%d", root, w, i)
				if _, err := c.Create(ctx, p, []byte(p), 0, OpenACL); err != nil {
					t.Error(err)
					return
				}
				if data, _, err := c.Get(ctx, p); err != nil || string(data) != p {
					t.Errorf("get %s: %q %v", p, data, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	kids, _, err := c.Children(ctx, root)
	if err != nil || len(kids) != 16*20 {
		t.Fatalf("children: %d %v", len(kids), err)
	}
}
