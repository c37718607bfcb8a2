package ensemble

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/internal/testkit/zookeeper"
)

// zkCliQuotaScript sets, lists and deletes quotas the way an operator
// does, with zkCli's bad inputs among them: a nested quota, a path that
// does not exist, a negative and a non-numeric limit, a path under
// /zookeeper/quota.
var zkCliQuotaScript = []string{
	"create /app x",
	"create /app/a 12345",
	"setquota -N 3 /app",
	"setquota -B 100 /app",
	"listquota /app",
	"create /app/b",
	"create /app/c",
	"set /app/a " + strings.Repeat("y", 200),
	"setquota -n 10 /app",
	"listquota /app",
	"setquota -n 5 /app/a",
	"create /other",
	"create /other/sub",
	"setquota -n 5 /other/sub",
	"setquota -n 5 /other",
	"setquota -n 5 /nope",
	"setquota -n -1 /other",
	"setquota -b abc /other",
	"setquota -n 5 /zookeeper/quota/x",
	"delquota -N /app",
	"create /app/c",
	"listquota /app",
	"delquota /app",
	"listquota /app",
	// ZooKeeper takes a quota on /zookeeper itself and counts its nodes.
	"setquota -n 100 /zookeeper",
	"listquota /zookeeper",
	"quit",
}

// Apache ZooKeeper's CLI sets, lists and deletes quotas on a member that
// enforces them and prints what it prints against a ZooKeeper 3.8 started
// with -Dzookeeper.enforceQuota=true, refusals and errors included.
func TestZkCliQuota(t *testing.T) {
	if _, err := exec.LookPath(zkCliPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is required in CI: %v", zkCliPath, err)
		}
		t.Skipf("%s is not installed (%v)", zkCliPath, err)
	}
	srv, err := zookeeper.Start(zookeeper.Require(t), "coordrun-zkcli-quota-", client.FourLetter, "zookeeper.enforceQuota=true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	c := startCluster(t, 1, func(cfg *Config) { cfg.EnforceQuota = true })
	c.waitLeader()
	script := strings.Join(zkCliQuotaScript, "\n") + "\n"
	want := zkCliTranscript(runZkCli(t, srv.Addr, nil, script))
	got := zkCliTranscript(runZkCli(t, c.cfgs[0].ClientAddr, nil, script))
	if got != want {
		t.Fatalf("zkCli against coordrun:\n%s\nagainst ZooKeeper 3.8:\n%s", got, want)
	}
	for _, line := range []string{
		"Output quota for /app count=-1,bytes=-1=;byteHardLimit=100;countHardLimit=3",
		"Output stat for /app count=2,bytes=6",
		"/app/a has a parent /app which has a quota",
		"/other has a child /other/sub which has a quota",
		"/nope does not exist.",
		"the num quota must be greater than zero",
		"cannot set a quota under the path: /zookeeper/quota",
		"quota for /app does not exist.",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("zkCli did not print %q:\n%s", line, got)
		}
	}
	if n := strings.Count(got, "Quota has exceeded"); n != 2 {
		t.Errorf("%d refusals printed, want 2 (a create and a set past the hard limits):\n%s", n, got)
	}
	if hard, _ := c.Member(0).zkq.counts(); hard != 2 {
		t.Errorf("coordrun_zk_quota_refusals_total %v, want 2", hard)
	}
}

// zkCliTranscript keeps what zkCli says about the commands, without its
// logger's noise and the address it connected to.
func zkCliTranscript(out string) string {
	noise := regexp.MustCompile(`^(SLF4J:|Connecting to |Welcome to|JLine|WATCHER::|WatchedEvent|\s*$)`)
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if !noise.MatchString(l) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
