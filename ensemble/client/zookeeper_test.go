package client

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/zkserver"
)

// Interop with Apache ZooKeeper: the tests below start a standalone
// ZooKeeper 3.8 (Debian's package) on a free loopback port. Without java
// or the jar they skip, unless CI is set, where they fail.

// zkServer runs one standalone ZooKeeper for all interop tests of a run.
var zkServer struct {
	once sync.Once
	srv  *zkserver.Server
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if zkServer.srv != nil {
		zkServer.srv.Stop()
	}
	os.Exit(code)
}

func startZooKeeper(t *testing.T) string {
	t.Helper()
	java, err := zkserver.Java()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Apache ZooKeeper is required in CI: %v", err)
		}
		t.Skipf("Apache ZooKeeper not installed: %v", err)
	}
	zkServer.once.Do(func() { zkServer.srv, zkServer.err = zkserver.Start(java, "coordrun-zk-") })
	if zkServer.err != nil {
		t.Fatalf("starting ZooKeeper: %v", zkServer.err)
	}
	return zkServer.srv.Addr
}

func TestZooKeeperOps(t *testing.T) {
	addr := startZooKeeper(t)
	opsSuite(t, []string{addr})
}

func TestZooKeeperWatches(t *testing.T) {
	addr := startZooKeeper(t)
	watchSuite(t, []string{addr})
}

func TestZooKeeperMissedChange(t *testing.T) {
	addr := startZooKeeper(t)
	missedChangeSuite(t, addr)
}

func TestZooKeeperClose(t *testing.T) {
	addr := startZooKeeper(t)
	closeSuite(t, addr)
}

func TestZooKeeperExpiry(t *testing.T) {
	addr := startZooKeeper(t)
	expirySuite(t, []string{addr})
}

func TestZooKeeperConnectionLoss(t *testing.T) {
	addr := startZooKeeper(t)
	lossSuite(t, addr)
}

func TestZooKeeperLeaseProperty(t *testing.T) {
	addr := startZooKeeper(t)
	leasePropertySuite(t, addr, 1)
}

func TestZooKeeperPipelining(t *testing.T) {
	addr := startZooKeeper(t)
	ctx := ctxT(t, 60*time.Second)
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
