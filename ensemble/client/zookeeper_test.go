package client

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Interop with Apache ZooKeeper: the tests below start a standalone
// ZooKeeper 3.8 (Debian's package) on a free loopback port. Without java
// or the jar they skip, unless CI is set, where they fail.

const zkJar = "/usr/share/java/zookeeper.jar"

// zkServer runs one standalone ZooKeeper for all interop tests of a run.
var zkServer struct {
	once sync.Once
	addr string
	err  error
	cmd  *exec.Cmd
	log  *bytes.Buffer
	dir  string
}

// lockedBuffer is safe for the java process's writes and a test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var zkLog lockedBuffer

func TestMain(m *testing.M) {
	code := m.Run()
	if zkServer.cmd != nil {
		zkServer.cmd.Process.Kill()
		zkServer.cmd.Wait()
		os.RemoveAll(zkServer.dir)
	}
	os.Exit(code)
}

func startZooKeeper(t *testing.T) string {
	t.Helper()
	java, err := exec.LookPath("java")
	if err == nil {
		_, err = os.Stat(zkJar)
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Apache ZooKeeper is required in CI: %v", err)
		}
		t.Skipf("Apache ZooKeeper not installed: %v", err)
	}
	zkServer.once.Do(func() {
		zkServer.addr, zkServer.err = launchZooKeeper(java)
	})
	if zkServer.err != nil {
		t.Fatalf("starting ZooKeeper: %v\n%s", zkServer.err, zkLog.String())
	}
	return zkServer.addr
}

func launchZooKeeper(java string) (string, error) {
	dir, err := os.MkdirTemp("", "coordrun-zk-")
	if err != nil {
		return "", err
	}
	zkServer.dir = dir
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := fmt.Sprintf(`tickTime=200
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
minSessionTimeout=400
maxSessionTimeout=20000
admin.enableServer=false
4lw.commands.whitelist=*
`, filepath.Join(dir, "data"), port)
	cfgPath := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return "", err
	}
	cmd := exec.Command(java, "-cp", "/etc/zookeeper/conf:"+zkJar,
		"-Dzookeeper.log.dir="+dir, "-Dzookeeper.root.logger=INFO,CONSOLE",
		"org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath)
	cmd.Stdout, cmd.Stderr = &zkLog, &zkLog
	if err := cmd.Start(); err != nil {
		return "", err
	}
	zkServer.cmd = cmd
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Connect retries until the server listens; one session proves it up.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{Servers: []string{addr}, SessionTimeout: 4 * time.Second})
	if err != nil {
		return "", err
	}
	c.Close()
	return addr, nil
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
