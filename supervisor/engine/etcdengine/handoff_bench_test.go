package etcdengine

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
	"github.com/coordrun/coordrun/internal/testkit/zookeeper"
)

// `coordrun run` handoff on the three engines in one run (go test -bench
// RunHandoff -run ^$ -benchtime 20x): a holder's job ends, and the one
// supervisor waiting behind it starts its own; the time from the first
// job's last act to the second job's first, both stamped by the jobs.
// Three etcd members, three coordrun members (in-process), one Apache
// ZooKeeper (skipped without it).
func BenchmarkRunHandoff(b *testing.B) {
	b.Run("etcd", func(b *testing.B) {
		c := testkit.StartEtcd(b, 3)
		runHandoff(b, c.Servers())
	})
	b.Run("coordrun", func(b *testing.B) {
		c := ensembletest.Start(b, 3)
		runHandoff(b, strings.Join(c.Servers(), ","))
	})
	b.Run("zookeeper", func(b *testing.B) {
		z := zookeeper.Shared{Prefix: "coordrun-etcd-bench-zk-", FourLetter: client.FourLetter}
		defer z.Stop()
		runHandoff(b, z.Addr(b))
	})
}

func runHandoff(b *testing.B, servers string) {
	dir := b.TempDir()
	bin := coordrun(b)
	var samples []time.Duration
	start := func(name, script string) *testkit.Process {
		cmd := exec.Command(bin, "run", "--servers", servers, "--name", "handoff", "--session-timeout", "6s", "--kill-grace", "500ms", "-q",
			"--", "sh", "-c", script)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
		return testkit.Spawn(b, name, cmd)
	}
	stamp := func(file string) time.Time {
		raw, err := os.ReadFile(file)
		if err != nil {
			b.Fatal(err)
		}
		secs, err := strconv.ParseFloat(strings.TrimSpace(string(raw)), 64)
		if err != nil {
			b.Fatalf("%s: %q", file, raw)
		}
		return time.Unix(0, int64(secs*1e9))
	}
	exists := func(file string) bool { _, err := os.Stat(file); return err == nil }
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		round := filepath.Join(dir, strconv.Itoa(i))
		held, gone, ended, began := round+".held", round+".go", round+".end", round+".start"
		first := start("holder", fmt.Sprintf(`touch %s; while [ ! -e %s ]; do sleep 0.01; done; date +%%s.%%N > %s`, held, gone, ended))
		testkit.WaitFor(b, 30*time.Second, "the holder's job", func() bool { return exists(held) })
		second := start("next", fmt.Sprintf(`date +%%s.%%N > %s`, began))
		waitWaiting(b, bin, servers)
		if err := os.WriteFile(gone, nil, 0o644); err != nil {
			b.Fatal(err)
		}
		for _, p := range []*testkit.Process{first, second} {
			if code := p.Exit(b, 30*time.Second); code != 0 {
				b.Fatalf("%s exited %d", p.Name, code)
			}
		}
		samples = append(samples, stamp(began).Sub(stamp(ended)))
	}
	b.StopTimer()
	reportP50(b, samples)
}

// waitWaiting waits until the lock's queue has two contenders, as
// `coordrun status` on the same servers shows it.
func waitWaiting(b *testing.B, bin, servers string) {
	testkit.WaitFor(b, 30*time.Second, "the second supervisor queued", func() bool {
		out, err := exec.Command(bin, "status", "--servers", servers, "--json", "handoff").Output()
		return err == nil && strings.Count(string(out), `"node"`) >= 2
	})
}
