package difftest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/zookeeper"
)

// startZooKeeperQuorum runs a 3-member Apache ZooKeeper ensemble on
// loopback (testkit's launcher starts standalone servers only) and
// returns the members' client addresses once one leads and two follow.
// Timing is the standalone launcher's: a 200 ms tick, sessions of up to
// 20 s.
func startZooKeeperQuorum(t *testing.T) []string {
	t.Helper()
	java := zookeeper.Require(t)
	dir := t.TempDir()
	ports := testkit.FreeAddrs(t, "127.0.0.1", 9) // client, quorum, election per member
	port := func(a string) string { return a[strings.LastIndexByte(a, ':')+1:] }
	var servers strings.Builder
	for i := 0; i < 3; i++ {
		fmt.Fprintf(&servers, "server.%d=127.0.0.1:%s:%s\n", i+1, port(ports[3+i]), port(ports[6+i]))
	}
	var procs []*testkit.Process
	for i := 0; i < 3; i++ {
		data := filepath.Join(dir, fmt.Sprintf("z%d", i+1))
		if err := os.MkdirAll(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprintf("%d\n", i+1)), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := fmt.Sprintf("tickTime=200\ninitLimit=50\nsyncLimit=25\ndataDir=%s\nclientPort=%s\n"+
			"clientPortAddress=127.0.0.1\nminSessionTimeout=400\nmaxSessionTimeout=20000\n"+
			"admin.enableServer=false\n4lw.commands.whitelist=*\n%s", data, port(ports[i]), servers.String())
		cfgPath := filepath.Join(dir, fmt.Sprintf("zoo%d.cfg", i+1))
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(java, "-cp", "/etc/zookeeper/conf:"+zookeeper.Jar,
			"-Dzookeeper.log.dir="+data, "-Dzookeeper.root.logger=WARN,CONSOLE",
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath)
		procs = append(procs, testkit.Spawn(t, fmt.Sprintf("zookeeper-%d", i+1), cmd))
	}
	addrs := ports[:3]
	serving := func() bool {
		leaders := 0
		for i, a := range addrs {
			if !procs[i].Running() {
				t.Fatalf("zookeeper-%d exited", i+1)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			out, err := client.FourLetter(ctx, a, "srvr", nil)
			cancel()
			switch {
			case err != nil:
				return false
			case strings.Contains(out, "Mode: leader"):
				leaders++
			case !strings.Contains(out, "Mode: follower"):
				return false
			}
		}
		return leaders == 1
	}
	testkit.WaitFor(t, 90*time.Second, "a ZooKeeper quorum with one leader", serving)
	return addrs
}
