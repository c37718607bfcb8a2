package etcdengine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor/state"
)

// `etcdctl lock` against `coordrun run --servers etcd://...` under the
// same faults, side by side in one run (go test -bench EtcdFaults -run ^$
// -benchtime 1x): three hosts loop on the tool around a job that beats
// for several seconds (longer than the lease), while the lock holder (the tool's process, not the
// job) is killed -9 twice and frozen past its lease once. Reported: how
// many pairs of jobs ran at the same time (overlaps).
func BenchmarkEtcdFaults(b *testing.B) {
	for _, tool := range []string{"etcdctl-lock", "coordrun-run"} {
		b.Run(tool, func(b *testing.B) {
			total := 0
			for i := 0; i < b.N; i++ {
				total += faultRound(b, tool)
			}
			b.ReportMetric(float64(total)/float64(b.N), "overlaps")
		})
	}
}

// faultRound runs one round of faults against tool and counts overlaps.
func faultRound(b *testing.B, tool string) int {
	c := testkit.StartEtcd(b, 3)
	dir := b.TempDir()
	beats := filepath.Join(dir, "beats")
	// Each beat: time, the job's own pid, its parent's (etcdctl's).
	job := fmt.Sprintf(`for i in $(seq 250); do echo "$(date +%%s.%%N) $$ $PPID" >> %s; sleep 0.02; done`, beats)
	eps := strings.Join(c.Endpoints(), ",")
	command := func() *exec.Cmd {
		var cmd *exec.Cmd
		if tool == "etcdctl-lock" {
			cmd = exec.Command(testkit.EtcdctlBin, "--endpoints", eps, "lock", "--ttl", "3", "job", "--", "sh", "-c", job)
		} else {
			cmd = exec.Command(coordrun(b), "run", "--servers", c.Servers(), "--session-timeout", "3s", "--kill-grace", "300ms",
				"--name", "job", "-q", "--", "sh", "-c", job)
		}
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "ETCDCTL_API=3"}
		return cmd
	}
	// holder is the pid of the process holding the lock for the job now
	// beating: etcdctl is the job's parent; coordrun's pid is in its run
	// record.
	holder := func(skip map[int]bool) int {
		var pid int
		testkit.WaitFor(b, 30*time.Second, "a new holder", func() bool {
			if tool == "coordrun-run" {
				out, err := c.EtcdctlErr("get", "--print-value-only", "/coordrun/locks/job/run")
				var ri state.RunInfo
				if err == nil && json.Unmarshal([]byte(strings.TrimSpace(out)), &ri) == nil {
					pid = ri.PID
				}
			} else if bs := readJobBeats(beats); len(bs) > 0 {
				pid = bs[len(bs)-1].parent
			}
			return pid > 0 && !skip[pid]
		})
		skip[pid] = true
		return pid
	}

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				p, err := testkit.StartProcess(command())
				if err != nil {
					b.Error(err)
					return
				}
				select {
				case <-p.Done():
				case <-ctx.Done():
					p.Kill()
				}
			}
		}()
	}
	seen := map[int]bool{}
	for range 2 {
		_ = syscall.Kill(holder(seen), syscall.SIGKILL)
	}
	frozen := holder(seen)
	_ = syscall.Kill(frozen, syscall.SIGSTOP)
	holder(seen) // someone took over
	_ = syscall.Kill(frozen, syscall.SIGCONT)
	holder(seen)
	stop()
	wg.Wait()
	// Jobs orphaned by a killed etcdctl beat on: wait for them to end.
	testkit.WaitFor(b, 10*time.Second, "orphaned jobs to end", func() bool {
		out, _ := exec.Command("pgrep", "-f", beats).Output()
		return len(strings.TrimSpace(string(out))) == 0
	})
	return overlaps(readJobBeats(beats))
}

type jobBeat struct {
	at          time.Time
	job, parent int
}

func readJobBeats(file string) []jobBeat {
	b, _ := os.ReadFile(file)
	var bs []jobBeat
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		secs, err := strconv.ParseFloat(f[0], 64)
		job, err1 := strconv.Atoi(f[1])
		parent, err2 := strconv.Atoi(f[2])
		if err != nil || err1 != nil || err2 != nil {
			continue
		}
		bs = append(bs, jobBeat{at: time.Unix(0, int64(secs*1e9)), job: job, parent: parent})
	}
	return bs
}

// overlaps counts the pairs of jobs whose beating spans intersect.
func overlaps(bs []jobBeat) int {
	type span struct{ from, to time.Time }
	spans := map[int]*span{}
	for _, b := range bs {
		s := spans[b.job]
		if s == nil {
			spans[b.job] = &span{b.at, b.at}
			continue
		}
		if b.at.Before(s.from) {
			s.from = b.at
		}
		if b.at.After(s.to) {
			s.to = b.at
		}
	}
	var list []*span
	for _, s := range spans {
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].from.Before(list[j].from) })
	n := 0
	for i := range list {
		for j := i + 1; j < len(list) && list[j].from.Before(list[i].to); j++ {
			n++
		}
	}
	return n
}
