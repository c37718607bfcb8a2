package main

// The faults workload (-workloads faults, etcd): `etcdctl lock` against
// `coordrun run --servers etcd://...` on the same three etcd members,
// under the same faults, one after the other in one run. Three hosts loop
// on the tool around a job that beats (appends a timestamp, its pid and
// its parent's) every 20 ms for 5 s, longer than the 3 s lease; the lock
// holder (the tool's process, not the job) is killed -9 twice and frozen
// past its lease once. Counted: pairs of jobs whose beating overlapped.
// etcdctl never stops the child of a lock it lost; coordrun's watchdog
// does, before the lease can expire.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// faultsResult is one tool's round.
type faultsResult struct {
	Tool     string `json:"tool"`
	System   string `json:"system"`
	Kills    int    `json:"kills"`   // kill -9 of the holding tool
	Freezes  int    `json:"freezes"` // SIGSTOP of it past the lease, then SIGCONT
	Jobs     int    `json:"jobs"`    // jobs that beat
	Overlaps int    `json:"overlaps"`
}

// The faults of a round, and the job's length in beats.
const (
	faultsKills   = 2
	faultsFreezes = 1
	faultsBeats   = 250 // × 20 ms: 5 s
	faultsTTL     = 3   // seconds: etcdctl's --ttl, coordrun's --session-timeout
)

// runFaults runs the round for each tool on s (etcd).
func runFaults(ctx context.Context, e *lockEnv, s *system, etcdBin string) ([]faultsResult, error) {
	etcdctl := filepath.Join(filepath.Dir(etcdBin), "etcdctl")
	if _, err := os.Stat(etcdctl); err != nil {
		if etcdctl, err = exec.LookPath("etcdctl"); err != nil {
			return nil, fmt.Errorf("etcdctl not found (Debian: etcd-client): %w", err)
		}
	}
	var out []faultsResult
	for _, tool := range []string{"etcdctl lock", "coordrun run"} {
		fmt.Fprintf(os.Stderr, "faults: %s on %s ...\n", tool, s.name)
		r, err := faultsRound(ctx, e, s, tool, etcdctl)
		if err != nil {
			return out, fmt.Errorf("faults, %s: %w", tool, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func faultsRound(ctx context.Context, e *lockEnv, s *system, tool, etcdctl string) (faultsResult, error) {
	res := faultsResult{Tool: tool, System: s.name, Kills: faultsKills, Freezes: faultsFreezes}
	e.seq++
	name := fmt.Sprintf("faults-%d", e.seq)
	dir := filepath.Join(e.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	beats := filepath.Join(dir, "beats")
	job := fmt.Sprintf(`for i in $(seq %d); do echo "$(date +%%s.%%N) $$ $PPID" >> %s; sleep 0.02; done`, faultsBeats, beats)
	cli, err := etcdClient(s.addrs()...)
	if err != nil {
		return res, err
	}
	defer cli.Close()
	command := func() *exec.Cmd {
		var cmd *exec.Cmd
		if tool == "etcdctl lock" {
			cmd = exec.Command(etcdctl, "--endpoints", strings.Join(s.addrs(), ","), "lock", "--ttl", strconv.Itoa(faultsTTL), name, "--", "sh", "-c", job)
		} else {
			cmd = exec.Command(e.bin, "run", "-q", "--servers", runServers(s), "--name", name,
				"--session-timeout", fmt.Sprintf("%ds", faultsTTL), "--kill-grace", "300ms", "--", "sh", "-c", job)
		}
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "ETCDCTL_API=3"}
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		return cmd
	}

	// The hosts: each runs the tool again as soon as it exits.
	loopCtx, stop := context.WithCancel(ctx)
	var mu sync.Mutex // guards live
	live := map[*exec.Cmd]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for loopCtx.Err() == nil {
				cmd := command()
				mu.Lock()
				err := cmd.Start()
				if err == nil {
					live[cmd] = true
				}
				mu.Unlock()
				if err != nil {
					errs <- err
					return
				}
				_ = cmd.Wait()
				mu.Lock()
				delete(live, cmd)
				mu.Unlock()
			}
		}()
	}
	halt := func() {
		stop()
		// Kill the tools (a frozen one too) until every host has seen
		// its last one exit; orphaned jobs beat on to their end.
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for {
			mu.Lock()
			for cmd := range live {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				_ = cmd.Process.Signal(syscall.SIGCONT)
			}
			mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	defer halt()

	// holder waits for a holder not seen before whose job has begun to
	// beat, and returns the pid of its tool process: etcdctl is the
	// beating job's parent; coordrun's pid is in its run record.
	seen := map[int]bool{}
	jobsBefore := 0
	holder := func() (int, error) {
		var pid int
		err := poll(ctx, 60*time.Second, 20*time.Millisecond, "a new holder of "+name, func() (bool, error) {
			select {
			case err := <-errs:
				return false, err
			default:
			}
			pid = 0
			if tool == "coordrun run" {
				resp, err := cli.Get(ctx, lockRoot+"/"+name+"/run")
				var ri struct {
					PID int `json:"pid"`
				}
				if err == nil && len(resp.Kvs) == 1 && json.Unmarshal(resp.Kvs[0].Value, &ri) == nil {
					pid = ri.PID
				}
			} else if bs := readJobBeats(beats); len(bs) > 0 {
				pid = bs[len(bs)-1].parent
			}
			jobs := distinctJobs(readJobBeats(beats))
			if pid > 1 && !seen[pid] && jobs > jobsBefore {
				jobsBefore = jobs
				return true, nil
			}
			return false, nil
		})
		seen[pid] = true
		return pid, err
	}
	for range faultsKills {
		pid, err := holder()
		if err != nil {
			return res, err
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for range faultsFreezes {
		frozen, err := holder()
		if err != nil {
			return res, err
		}
		_ = syscall.Kill(frozen, syscall.SIGSTOP)
		_, err = holder() // someone took over
		_ = syscall.Kill(frozen, syscall.SIGCONT)
		if err != nil {
			return res, err
		}
	}
	if _, err := holder(); err != nil {
		return res, err
	}
	halt()
	// Jobs orphaned by a killed etcdctl beat on: wait for them to end.
	err = poll(ctx, 2*faultsBeats*20*time.Millisecond+5*time.Second, 50*time.Millisecond, "orphaned jobs to end", func() (bool, error) {
		out, _ := exec.Command("pgrep", "-f", beats).Output()
		return len(strings.TrimSpace(string(out))) == 0, nil
	})
	if err != nil {
		return res, err
	}
	bs := readJobBeats(beats)
	res.Overlaps = overlaps(bs)
	res.Jobs = distinctJobs(bs)
	_, _ = cli.Delete(ctx, lockRoot+"/"+name, clientv3.WithPrefix())
	return res, nil
}

// jobBeat is one line of a faults job's beats.
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

// distinctJobs counts the jobs that beat.
func distinctJobs(bs []jobBeat) int {
	jobs := map[int]bool{}
	for _, b := range bs {
		jobs[b.job] = true
	}
	return len(jobs)
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
		s.from = minTime(s.from, b.at)
		s.to = maxTime(s.to, b.at)
	}
	var list []*span
	for _, s := range spans {
		list = append(list, s)
	}
	slices.SortFunc(list, func(a, b *span) int { return a.from.Compare(b.from) })
	n := 0
	for i := range list {
		for j := i + 1; j < len(list) && list[j].from.Before(list[i].to); j++ {
			n++
		}
	}
	return n
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// printFaults is the report's part for the faults workload.
func printFaults(out io.Writer, rs []faultsResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(out, "\nfaults (etcd, lease %ds): the lock holder killed -9 %d times and frozen past its lease %d time, a job of %v each:\n",
		faultsTTL, faultsKills, faultsFreezes, time.Duration(faultsBeats)*20*time.Millisecond)
	for _, r := range rs {
		fmt.Fprintf(out, "  %-13s %d jobs, %d overlaps\n", r.Tool, r.Jobs, r.Overlaps)
	}
}
