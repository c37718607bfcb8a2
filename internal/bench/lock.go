package main

// The lock workloads (-workloads lock): the lock recipe as coordrun's users
// meet it, driven through the real `coordrun run` binary against both
// ensembles.
//
//   - handoff xN: N supervisors `coordrun run -q --session-timeout 10s --
//     STAMP` join one lock's queue behind a gate node that the harness
//     holds; once all N are queued and watching (the members' summed
//     zk_watch_count reaches N) the harness deletes the gate and the N
//     jobs run one after another. STAMP is the job: it writes two
//     CLOCK_REALTIME readings to its stdout (a file per supervisor), one as
//     its first instruction and one just before write+exit_group, and
//     exits. A handoff is the next job's first reading minus the previous
//     job's last one: the previous holder's watchdog reaping it, the
//     supervisor's release (a multi), the watch notification, the next
//     supervisor's re-check (getChildren, the folder's getData alongside),
//     its take (a multi that creates the run node and records the hold),
//     and the start of the job by its watchdog, started ahead. Reported: p50/p99,
//     handoffs/s (N-1 handoffs over the first to the last job's start), and
//     overlaps (a job starting before its predecessor ended: must be 0).
//   - notif/release: watch notifications the members sent during the run
//     (coordrun: coordrun_watch_notifications from mntr; ZooKeeper: the
//     zk_sum_node_*_watch_count summaries of watchers triggered, where
//     present), summed over the members, divided by the releases that had
//     a waiter (the gate's and the first N-1 jobs').
//   - pred xN / herd xN: the same gate-and-queue run in this process, no
//     processes: "pred" is the recipe package's lock queue, the one the
//     supervisor uses (watch the predecessor, take the run node), through
//     the coordrun client (recipelock.go); "herd" the naive recipe through
//     go-zookeeper (every waiter watches the folder's children, so every
//     release wakes all of them). Their handoff is from the holder seeing
//     it holds, just before it releases, to the next holder seeing it
//     holds; pred is the ensemble's floor under the real binary's handoff.
//   - crash T: supervisor A runs a job that sleeps; B queues behind it; the
//     harness finds the holder's pid with `coordrun status --json`, kills
//     it with SIGKILL and times until B's job starts, reported also less
//     the negotiated session timeout (both ensembles clamp requests to at
//     least 4s as started here: coordrun's --min-session-timeout default,
//     ZooKeeper's 2*tickTime). Median of crashRepeats runs.
//   - run -- true: wall time of a whole uncontended `coordrun run -q --name
//     wall -- true`, and of `coordrun version` (the process start alone).
//   - lost wake-ups: a waiter that hears nothing for stallAfter although
//     what it watches has changed missed its notification. In-process it
//     re-checks the queue; a supervisor at the head of the queue whose job
//     has not started is sent SIGTERM (it leaves the queue, waking the
//     next). Both are counted, and handoffs into them left out of the
//     latencies, so a lost notification shows up as a count instead of a
//     hung benchmark.
//
// Every process is registered with the children list, so stopAll ends it
// on error and Ctrl-C, and dies with the harness (Pdeathsig).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-zookeeper/zk"
)

var (
	handoffWaiters = []int{10, 100}
	crashTimeouts  = []time.Duration{2 * time.Second, 4 * time.Second}
)

const (
	crashRepeats = 3
	wallRuns     = 20
	lockRoot     = "/coordrun/locks" // the supervisor's default --root
	// stampEnv makes the bench binary act as the job (the fallback where
	// the static helper cannot be written for this architecture).
	stampEnv = "COORDRUN_BENCH_STAMP"
)

// startJobProc starts a child with stdout and stderr to their own files
// and registers it for stopAll.
func startJobProc(name, outPath, logPath string, env []string, argv ...string) (*proc, error) {
	outf, err := os.Create(outPath)
	if err != nil {
		return nil, err
	}
	defer outf.Close()
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr, cmd.Env = outf, logf, env
	return startChild(name, logPath, cmd)
}

// waitDone waits for p to exit, at most until deadline.
func waitDone(ctx context.Context, p *proc, deadline time.Time) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("%s still running\n%s", p.name, logTail(p.logPath, 10))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// poll calls f every interval until it reports done or an error, or until
// timeout.
func poll(ctx context.Context, timeout, interval time.Duration, what string, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := f()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %v", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// mntrValues is every member's mntr, parsed.
func (s *system) mntrValues() ([]map[string]string, error) {
	var out []map[string]string
	for _, m := range s.members {
		text, err := fourLetter(m.clientAddr, "mntr")
		if err != nil {
			return nil, fmt.Errorf("mntr %s: %w", m.clientAddr, err)
		}
		kv := map[string]string{}
		for _, line := range strings.Split(text, "\n") {
			if k, v, ok := strings.Cut(line, "\t"); ok {
				kv[k] = strings.TrimSpace(v)
			}
		}
		out = append(out, kv)
	}
	return out, nil
}

// mntrSum sums keys over every member; ok is false when no member has any
// of them.
func (s *system) mntrSum(keys ...string) (sum float64, ok bool, err error) {
	all, err := s.mntrValues()
	if err != nil {
		return 0, false, err
	}
	for _, kv := range all {
		for _, k := range keys {
			if v, has := kv[k]; has {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, false, fmt.Errorf("mntr %s=%q: %w", k, v, err)
				}
				sum, ok = sum+f, true
			}
		}
	}
	return sum, ok, nil
}

// Watch notifications sent: coordrun counts them; ZooKeeper 3.6+ keeps
// summaries of the watchers each event triggered.
var (
	coordrunNotifKeys = []string{"coordrun_watch_notifications"}
	zkNotifKeys       = []string{"zk_sum_node_created_watch_count", "zk_sum_node_deleted_watch_count",
		"zk_sum_node_changed_watch_count", "zk_sum_node_children_watch_count"}
)

// notifications is the members' total of watch notifications sent so
// far, or -1 if they do not report one.
func (s *system) notifications() (float64, error) {
	for _, keys := range [][]string{coordrunNotifKeys, zkNotifKeys} {
		v, ok, err := s.mntrSum(keys...)
		if err != nil || ok {
			return v, err
		}
	}
	return -1, nil
}

func (s *system) watchCount() (int, error) {
	v, _, err := s.mntrSum("zk_watch_count")
	return int(v), err
}

// ensureZNodes creates every missing persistent component of p.
func ensureZNodes(c *zk.Conn, p string) error {
	cur := ""
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		cur += "/" + part
		if _, err := c.Create(cur, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", cur, err)
		}
	}
	return nil
}

// createGate puts the harness's own node at the head of dir's queue, named
// like a supervisor's (lock-<id>-<seq>) with holder data.
func createGate(c *zk.Conn, dir string) (string, error) {
	if err := ensureZNodes(c, dir); err != nil {
		return "", err
	}
	host, _ := os.Hostname()
	data, _ := json.Marshal(map[string]any{"host": host, "pid": os.Getpid(), "user": "bench", "command": "bench gate", "since": time.Now().UTC()})
	return c.Create(dir+"/lock-bench0gate-", data, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
}

// lockReport is every lock workload's result.
type lockReport struct {
	Job      string          `json:"job"`
	Handoffs []handoffResult `json:"handoffs"`
	Crashes  []crashResult   `json:"crashes"`
	Walls    []wallResult    `json:"walls"`
}

// newLockEnv prepares dir and the job for the supervisor workloads.
func newLockEnv(bin, dir string) (*lockEnv, error) {
	e := &lockEnv{bin: bin, dir: dir}
	if abs, err := filepath.Abs(bin); err == nil {
		e.bin = abs
	}
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		return nil, err
	}
	st, err := newStamper(e.dir)
	if err != nil {
		return nil, err
	}
	e.stamp = st
	return e, nil
}

// runLock runs the lock workloads on every system.
func runLock(ctx context.Context, cfg config, systems []*system, root string) (*lockReport, error) {
	e, err := newLockEnv(cfg.bin, filepath.Join(root, "lock"))
	if err != nil {
		return nil, err
	}
	rep := &lockReport{Job: e.stamp.desc}

	// Unmeasured: wakes up the JVM's and the members' lock paths.
	for _, s := range systems {
		fmt.Fprintf(os.Stderr, "lock warm-up on %s ...\n", s.name)
		if _, err := runHandoff(ctx, e, s, "bench-warmup", 5); err != nil {
			return nil, fmt.Errorf("%s: lock warm-up: %w", s.name, err)
		}
	}
	for _, n := range handoffWaiters {
		for _, s := range systems {
			fmt.Fprintf(os.Stderr, "lock handoff x%d on %s ...\n", n, s.name)
			r, err := runHandoff(ctx, e, s, fmt.Sprintf("bench-%d", n), n)
			if err != nil {
				return nil, fmt.Errorf("%s: handoff x%d: %w", s.name, n, err)
			}
			rep.Handoffs = append(rep.Handoffs, r)
		}
	}
	for _, recipe := range []string{"pred", "herd"} {
		for _, n := range handoffWaiters {
			for _, s := range systems {
				fmt.Fprintf(os.Stderr, "in-process %s lock x%d on %s ...\n", recipe, n, s.name)
				r, err := goLock(ctx, s, recipe, n, 0)
				if err != nil {
					return nil, fmt.Errorf("%s: %s x%d: %w", s.name, recipe, n, err)
				}
				rep.Handoffs = append(rep.Handoffs, r)
			}
		}
	}
	for _, t := range crashTimeouts {
		for _, s := range systems {
			fmt.Fprintf(os.Stderr, "crash to next holder, session timeout %v, on %s ...\n", t, s.name)
			r, err := crashSeries(ctx, e, s, t)
			if err != nil {
				return nil, err
			}
			rep.Crashes = append(rep.Crashes, r)
		}
	}
	for _, s := range systems {
		fmt.Fprintf(os.Stderr, "coordrun run -- true on %s ...\n", s.name)
		argv := []string{e.bin, "run", "-q", "--servers", strings.Join(s.addrs(), ","), "--name", "wall", "--", "true"}
		r, err := e.wall(ctx, "run -- true", s.name, argv)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		rep.Walls = append(rep.Walls, r)
	}
	r, err := e.wall(ctx, "version", "-", []string{e.bin, "version"})
	if err != nil {
		return nil, err
	}
	rep.Walls = append(rep.Walls, r)
	return rep, nil
}

func (r *lockReport) print(out *os.File) {
	fmt.Fprintf(out, "\nlock: handoff = previous job's end to the next job's start; job = %s\n", r.Job)
	fmt.Fprintln(out, "  handoff xN: N `coordrun run --session-timeout 10s` queued behind a gate; pred/herd xN: sessions in-process, the lock recipe (coordrun client) vs. the herd recipe (go-zookeeper)")
	fmt.Fprintln(out, "  notif/rel: watch notifications sent by all members / releases that had a waiter (N)")
	fmt.Fprintf(out, "  lost wake-ups: waiters whose watch should have fired but that heard nothing for %v; rescued, and left out of the latencies\n", stallAfter)
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tsystem\thandoffs/s\tp50 ms\tp99 ms\tmax ms\tfirst ms\tnotif/rel\toverlaps\tlost wake-ups\t")
	notif := func(x handoffResult) string {
		if x.Notifications < 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2f", x.NotifPerRelease)
	}
	for _, x := range r.Handoffs {
		name := fmt.Sprintf("%s x%d", x.Workload, x.Waiters)
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%d\t%d\t\n", name, x.System, x.HandoffsPerSec, x.P50Ms, x.P99Ms, x.MaxMs, x.FirstMs, notif(x), x.Overlaps, x.Lost)
		if x.System != "zookeeper" {
			continue
		}
		for _, c := range r.Handoffs {
			if c.System == "coordrun" && c.Workload == x.Workload && c.Waiters == x.Waiters {
				nr := "-"
				if c.Notifications >= 0 && x.Notifications > 0 {
					nr = ratio(c.NotifPerRelease, x.NotifPerRelease)
				}
				fmt.Fprintf(tw, "%s\tcoordrun/zk\t%s\t%s\t%s\t%s\t%s\t%s\t\t\t\n", name,
					ratio(c.HandoffsPerSec, x.HandoffsPerSec), ratio(c.P50Ms, x.P50Ms), ratio(c.P99Ms, x.P99Ms), ratio(c.MaxMs, x.MaxMs), ratio(c.FirstMs, x.FirstMs), nr)
			}
		}
	}
	tw.Flush()

	fmt.Fprintf(out, "\ncrash: SIGKILL of the holding supervisor to the waiting one's job start, %d runs each (--kill-grace 500ms)\n", crashRepeats)
	fmt.Fprintln(out, "  the session expires a timeout after the member last heard from it (pings go out every requested timeout / 5), so less than a timeout after the kill")
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "session timeout\tsystem\tnegotiated s\tmedian ms\tminus timeout ms\tsamples ms\t")
	for _, x := range r.Crashes {
		var samples []string
		for _, v := range x.SamplesMs {
			samples = append(samples, fmt.Sprintf("%.0f", v))
		}
		name := fmt.Sprintf("crash %gs", x.Requested)
		fmt.Fprintf(tw, "%s\t%s\t%g\t%.0f\t%.0f\t%s\t\n", name, x.System, x.Negotiated, x.MedianMs, x.OverMs, strings.Join(samples, " "))
		if x.System != "zookeeper" {
			continue
		}
		for _, c := range r.Crashes {
			if c.System == "coordrun" && c.Requested == x.Requested {
				over := "-" // a ratio of a negative is meaningless
				if c.OverMs > 0 && x.OverMs > 0 {
					over = ratio(c.OverMs, x.OverMs)
				}
				fmt.Fprintf(tw, "%s\tcoordrun/zk\t\t%s\t%s\t\t\n", name, ratio(c.MedianMs, x.MedianMs), over)
			}
		}
	}
	tw.Flush()

	fmt.Fprintf(out, "\nwall time of one whole command, %d runs each\n\n", wallRuns)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "command\tsystem\tmedian ms\tp90 ms\t")
	for _, x := range r.Walls {
		fmt.Fprintf(tw, "coordrun %s\t%s\t%.1f\t%.1f\t\n", x.Command, x.System, x.MedianMs, x.P90Ms)
		if x.System != "zookeeper" {
			continue
		}
		for _, c := range r.Walls {
			if c.System == "coordrun" && c.Command == x.Command {
				fmt.Fprintf(tw, "coordrun %s\tcoordrun/zk\t%s\t%s\t\n", x.Command, ratio(c.MedianMs, x.MedianMs), ratio(c.P90Ms, x.P90Ms))
			}
		}
	}
	tw.Flush()
}
