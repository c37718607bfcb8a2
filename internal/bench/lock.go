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
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/go-zookeeper/zk"
	"golang.org/x/sys/unix"
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

func init() {
	if os.Getenv(stampEnv) == "1" {
		stampMain()
	}
}

// stampMain is the job when the bench binary itself is the job: the same
// two readings and write as the static helper, then exit, or with an
// argument, wait for a signal.
func stampMain() {
	var b [32]byte
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	binary.LittleEndian.PutUint64(b[0:], uint64(ts.Sec))
	binary.LittleEndian.PutUint64(b[8:], uint64(ts.Nsec))
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	binary.LittleEndian.PutUint64(b[16:], uint64(ts.Sec))
	binary.LittleEndian.PutUint64(b[24:], uint64(ts.Nsec))
	_, _ = syscall.Write(1, b[:])
	if len(os.Args) > 1 {
		for {
			time.Sleep(time.Hour) // until a signal ends it
		}
	}
	syscall.Exit(0)
}

// stampCode is the static helper's machine code (x86-64, no libc):
//
//	mov r12,[rsp]              ; argc
//	sub rsp,32
//	clock_gettime(CLOCK_REALTIME, rsp)      ; start
//	clock_gettime(CLOCK_REALTIME, rsp+16)   ; end
//	write(1, rsp, 32)
//	if argc > 1: for { pause() }
//	exit_group(0)
var stampCode = []byte{
	0x4c, 0x8b, 0x24, 0x24, 0x48, 0x83, 0xec, 0x20, 0xb8, 0xe4, 0x00, 0x00,
	0x00, 0x31, 0xff, 0x48, 0x89, 0xe6, 0x0f, 0x05, 0xb8, 0xe4, 0x00, 0x00,
	0x00, 0x31, 0xff, 0x48, 0x8d, 0x74, 0x24, 0x10, 0x0f, 0x05, 0xb8, 0x01,
	0x00, 0x00, 0x00, 0xbf, 0x01, 0x00, 0x00, 0x00, 0x48, 0x89, 0xe6, 0xba,
	0x20, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x49, 0x83, 0xfc, 0x01, 0x7e, 0x09,
	0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7, 0xb8, 0xe7, 0x00,
	0x00, 0x00, 0x31, 0xff, 0x0f, 0x05,
}

// elf64 wraps x86-64 code in a minimal static executable: the ELF header
// and one loadable segment holding the whole file.
func elf64(code []byte) []byte {
	const base, hdr = 0x400000, 64 + 56
	b := make([]byte, hdr+len(code))
	le := binary.LittleEndian
	copy(b, "\x7fELF\x02\x01\x01") // 64-bit, little endian, version 1
	le.PutUint16(b[16:], 2)        // ET_EXEC
	le.PutUint16(b[18:], 62)       // EM_X86_64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], base+hdr) // entry
	le.PutUint64(b[32:], 64)       // program headers right after this one
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[54:], 56)
	le.PutUint16(b[56:], 1)
	p := b[64:]
	le.PutUint32(p[0:], 1) // PT_LOAD
	le.PutUint32(p[4:], 5) // R+X
	le.PutUint64(p[16:], base)
	le.PutUint64(p[24:], base)
	le.PutUint64(p[32:], uint64(len(b)))
	le.PutUint64(p[40:], uint64(len(b)))
	le.PutUint64(p[48:], 0x1000)
	copy(b[hdr:], code)
	return b
}

// stamper is the job the supervisors run.
type stamper struct {
	path string
	env  []string // the supervisors' environment (nil: inherit)
	desc string
}

// newStamper writes the static helper into dir, or falls back to the
// bench binary itself; either way it checks that the job works.
func newStamper(dir string) (*stamper, error) {
	var st *stamper
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
		p := filepath.Join(dir, "stamp")
		if err := os.WriteFile(p, elf64(stampCode), 0o755); err != nil {
			return nil, err
		}
		st = &stamper{path: p, desc: fmt.Sprintf("a %d-byte static x86-64 ELF (2 clock_gettime, write, exit_group)", len(stampCode)+120)}
	} else {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		st = &stamper{path: exe, env: append(os.Environ(), stampEnv+"=1"), desc: "the bench binary re-executed (" + stampEnv + "=1)"}
	}
	cmd := exec.Command(st.path)
	cmd.Env = st.env
	out, err := cmd.Output()
	if err != nil || len(out) != 32 {
		return nil, fmt.Errorf("job helper %s: %v, %d bytes of output", st.path, err, len(out))
	}
	return st, nil
}

// stamp is what one job wrote (or when an in-process holder held).
type stamp struct {
	start, end time.Time
	// stalled: this holder's wake-up was lost and the harness had to
	// rescue it, so the handoff into it measures the rescue, not the lock.
	stalled bool
}

func readStamp(path string) (stamp, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 32 {
		return stamp{}, false
	}
	le := binary.LittleEndian
	at := func(o int) time.Time { return time.Unix(int64(le.Uint64(b[o:])), int64(le.Uint64(b[o+8:]))) }
	return stamp{start: at(0), end: at(16)}, true
}

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

// lockEnv is what every lock workload needs.
type lockEnv struct {
	bin   string
	dir   string // scratch dir for job output and logs
	stamp *stamper
	seq   int // makes file names unique
}

func (e *lockEnv) files(tag string) (out, log string) {
	e.seq++
	base := filepath.Join(e.dir, fmt.Sprintf("%04d-%s", e.seq, tag))
	return base + ".out", base + ".log"
}

func (e *lockEnv) runArgv(s *system, name string, extra ...string) []string {
	argv := []string{e.bin, "run", "-q", "--servers", strings.Join(s.addrs(), ","), "--name", name}
	argv = append(argv, extra...)
	return append(argv, "--", e.stamp.path)
}

// handoffResult is one handoff run (real binary or in-process).
type handoffResult struct {
	Workload       string  `json:"workload"` // handoff, pred, herd
	System         string  `json:"system"`
	Waiters        int     `json:"waiters"`
	Handoffs       int     `json:"handoffs"`
	HandoffsPerSec float64 `json:"handoffs_per_sec"`
	P50Ms          float64 `json:"p50_ms"`
	P99Ms          float64 `json:"p99_ms"`
	MaxMs          float64 `json:"max_ms"`
	// FirstMs is from the harness deleting the gate to the first holder
	// (job start, or seeing it holds).
	FirstMs float64 `json:"first_ms"`
	// Notifications is the watch notifications the members sent; -1 when
	// they do not say.
	Notifications   float64 `json:"notifications"`
	NotifPerRelease float64 `json:"notifications_per_release"`
	// Stages is coordrun's write stages and notification delay in the run.
	Stages   []stageRow `json:"stages,omitempty"`
	Overlaps int        `json:"overlaps"`
	// Lost counts lost wake-ups: a waiter whose watch should have fired
	// (its predecessor, or the folder's children, changed) but that heard
	// nothing within stallAfter. Handoffs into a rescued holder are left
	// out of the latency figures.
	Lost int `json:"lost_wakeups"`
}

// stallAfter is how long a waiter may hear nothing before the harness
// checks whether its wake-up was lost.
const stallAfter = 2 * time.Second

// summarize fills the latency fields from each holder's (start, end),
// in any order.
func (r *handoffResult) summarize(spans []stamp, gateReleased time.Time) {
	slices.SortFunc(spans, func(a, b stamp) int { return a.start.Compare(b.start) })
	var hs []time.Duration
	for i := 1; i < len(spans); i++ {
		h := spans[i].start.Sub(spans[i-1].end)
		if h < 0 {
			r.Overlaps++
		}
		if !spans[i].stalled {
			hs = append(hs, h)
		}
	}
	slices.Sort(hs)
	r.Handoffs = len(hs)
	if len(hs) > 0 {
		r.P50Ms, r.P99Ms, r.MaxMs = ms(percentile(hs, 0.5)), ms(percentile(hs, 0.99)), ms(hs[len(hs)-1])
		if span := spans[len(spans)-1].start.Sub(spans[0].start); span > 0 {
			r.HandoffsPerSec = float64(len(spans)-1) / span.Seconds()
		}
	}
	if len(spans) > 0 {
		r.FirstMs = ms(spans[0].start.Sub(gateReleased))
	}
}

// setNotifications records the notifications sent over releases that
// had a waiter: the gate's and every measured holder's but the last.
func (r *handoffResult) setNotifications(before, after float64, releases int) {
	r.Notifications = -1
	if before >= 0 && after >= 0 {
		r.Notifications = after - before
		r.NotifPerRelease = r.Notifications / float64(releases)
	}
}

// runHandoff is one handoff run of n real supervisors.
func runHandoff(ctx context.Context, e *lockEnv, s *system, name string, n int) (handoffResult, error) {
	res := handoffResult{Workload: "handoff", System: s.name, Waiters: n}
	dir := lockRoot + "/" + name
	c, err := connect(ctx, s.clientOrder()[0])
	if err != nil {
		return res, err
	}
	defer c.Close()
	gate, err := createGate(c, dir)
	if err != nil {
		return res, err
	}
	procs := make([]*proc, 0, n)
	outs := make([]string, 0, n)
	defer func() {
		for _, p := range procs {
			p.stop(5 * time.Second)
		}
	}()
	for i := range n {
		out, log := e.files(fmt.Sprintf("%s-%s-%d", s.name, name, i))
		p, err := startJobProc(fmt.Sprintf("supervisor %s #%d", name, i), out, log, e.stamp.env,
			e.runArgv(s, name, "--session-timeout", "10s")...)
		if err != nil {
			return res, err
		}
		procs, outs = append(procs, p), append(outs, out)
	}
	// Every supervisor queued and watching its predecessor.
	err = poll(ctx, 60*time.Second, 20*time.Millisecond, fmt.Sprintf("%d supervisors queued on %s", n, s.name), func() (bool, error) {
		for _, p := range procs {
			if p.exited() {
				return false, fmt.Errorf("%s exited before the gate opened: %v\n%s", p.name, p.exitErr, logTail(p.logPath, 10))
			}
		}
		kids, _, err := c.Children(dir)
		if err != nil || len(kids) < n+1 {
			return false, err
		}
		w, err := s.watchCount()
		return w >= n, err
	})
	if err != nil {
		return res, err
	}
	before, err := s.notifications()
	if err != nil {
		return res, err
	}
	released := time.Now()
	if err := c.Delete(gate, -1); err != nil {
		return res, fmt.Errorf("delete gate: %w", err)
	}
	rescued, err := e.watchHandoff(ctx, c, dir, procs, outs, 30*time.Second+time.Duration(n)*time.Second)
	if err != nil {
		return res, err
	}
	res.Lost = len(rescued)
	after, err := s.notifications()
	if err != nil {
		return res, err
	}
	var spans []stamp
	for i, out := range outs {
		if _, ok := rescued[i]; ok {
			continue
		}
		if procs[i].exitErr != nil {
			return res, fmt.Errorf("%s: %v\n%s", procs[i].name, procs[i].exitErr, logTail(procs[i].logPath, 10))
		}
		st, ok := readStamp(out)
		if !ok {
			return res, fmt.Errorf("%s: job wrote no stamp\n%s", procs[i].name, logTail(procs[i].logPath, 10))
		}
		spans = append(spans, st)
	}
	// A handoff across a rescue measures the rescue.
	slices.SortFunc(spans, func(a, b stamp) int { return a.start.Compare(b.start) })
	for i := 1; i < len(spans); i++ {
		for _, at := range rescued {
			if at.After(spans[i-1].end) && at.Before(spans[i].start) {
				spans[i].stalled = true
			}
		}
	}
	res.summarize(spans, released)
	res.setNotifications(before, after, n)
	return res, nil
}

// watchHandoff waits until every supervisor has exited. When no job has
// started for stallAfter, it looks at the head of the queue: a supervisor
// there whose job has not started missed its wake-up (its predecessor is
// gone, yet it still waits). It is counted and sent SIGTERM, which makes
// it leave the queue and so wakes its successor. It returns the rescued
// supervisors' indexes and when each was rescued.
func (e *lockEnv) watchHandoff(ctx context.Context, c *zk.Conn, dir string, procs []*proc, outs []string, timeout time.Duration) (map[int]time.Time, error) {
	rescued := map[int]time.Time{}
	byPID := map[int]int{}
	for i, p := range procs {
		byPID[p.pid()] = i
	}
	started := make([]bool, len(procs))
	progress := time.Now()
	deadline := time.Now().Add(timeout)
	for {
		running := 0
		for i, p := range procs {
			if !started[i] {
				if _, ok := readStamp(outs[i]); ok {
					started[i], progress = true, time.Now()
				}
			}
			if !p.exited() {
				running++
			}
		}
		if running == 0 {
			return rescued, nil
		}
		now := time.Now()
		if now.After(deadline) {
			return rescued, fmt.Errorf("%d supervisors still running after %v", running, timeout)
		}
		if now.Sub(progress) > stallAfter {
			kids, _, err := c.Children(dir)
			if err != nil {
				return rescued, err
			}
			kids = slices.Clone(kids)
			slices.SortFunc(kids, func(a, b string) int { return strings.Compare(seqSuffix(a), seqSuffix(b)) })
			if len(kids) > 0 {
				data, _, err := c.Get(dir + "/" + kids[0])
				var info struct {
					PID int `json:"pid"`
				}
				if err == nil && json.Unmarshal(data, &info) == nil {
					if i, ok := byPID[info.PID]; ok && !started[i] {
						if _, done := rescued[i]; !done {
							rescued[i] = now
							_ = syscall.Kill(procs[i].pid(), syscall.SIGTERM)
						}
					}
				}
			}
			progress = now
		}
		select {
		case <-ctx.Done():
			return rescued, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// errStopped ends a waiter that is no longer measured.
var errStopped = errors.New("measurement over")

// runHerdLock is one handoff run of n go-zookeeper sessions in this
// process with the naive "herd" recipe: every waiter watches the folder's
// children, so every release wakes all of them. It measures the first
// limit holders (all when limit <= 0); the limit-th holder keeps the lock,
// and the waiters behind it stop.
func runHerdLock(ctx context.Context, s *system, n, limit int) (handoffResult, error) {
	res := handoffResult{Workload: "herd", System: s.name, Waiters: n}
	if limit <= 0 || limit > n {
		limit = n
	}
	dir := fmt.Sprintf("/bench-lock/herd-%d", n)
	order := s.clientOrder()
	c, err := connect(ctx, order[0])
	if err != nil {
		return res, err
	}
	defer c.Close()
	gate, err := createGate(c, dir)
	if err != nil {
		return res, err
	}
	conns := make([]*zk.Conn, n)
	defer closeAll(conns)
	if err := parallelLimit(n, 32, func(i int) (err error) {
		conns[i], err = connect(ctx, order[i%len(order)])
		return err
	}); err != nil {
		return res, err
	}
	// Phase 1: everyone queues; phase 2: everyone arms its first watch.
	// Apart, so that no create wakes a watcher before the measurement.
	nodes := make([]string, n)
	if err := parallel(n, func(i int) (err error) {
		nodes[i], err = conns[i].Create(dir+"/lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		return err
	}); err != nil {
		return res, err
	}
	sorted := func(kids []string) []string {
		slices.SortFunc(kids, func(a, b string) int { return strings.Compare(seqSuffix(a), seqSuffix(b)) })
		return kids
	}
	// check re-reads the queue with a watch on it, reports whether i
	// holds, and otherwise returns the watch and the child list it saw.
	check := func(i int) (bool, <-chan zk.Event, string, error) {
		kids, _, ch, err := conns[i].ChildrenW(dir)
		if err != nil {
			return false, nil, "", err
		}
		kids = sorted(kids)
		pos := slices.Index(kids, strings.TrimPrefix(nodes[i], dir+"/"))
		if pos < 0 {
			return false, nil, "", fmt.Errorf("%s vanished", nodes[i])
		}
		return pos == 0, ch, strings.Join(kids, ","), nil
	}
	// changed reports whether the child list differs from the one a watch
	// was armed on, so that the watch must have fired.
	changed := func(i int, watched string) (bool, error) {
		kids, _, err := conns[i].Children(dir)
		return err == nil && strings.Join(sorted(kids), ",") != watched, err
	}
	watches := make([]<-chan zk.Event, n)
	watched := make([]string, n)
	if err := parallel(n, func(i int) error {
		held, ch, what, err := check(i)
		if err == nil && held {
			err = fmt.Errorf("%s: queue changed before the gate opened", nodes[i])
		}
		watches[i], watched[i] = ch, what
		return err
	}); err != nil {
		return res, err
	}
	before, err := s.notifications()
	if err != nil {
		return res, err
	}
	spans := make([]stamp, n)
	holds := make([]bool, n)
	var holders atomic.Int64
	stopCh := make(chan struct{})
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(n)*time.Second)
	defer cancel()
	var lost sync.Mutex // guards res.Lost
	// wait waits for ch to fire. A waiter that hears nothing for
	// stallAfter looks whether its watch should have fired; if so (and it
	// still does not within another stallAfter), the wake-up was lost: it
	// is counted and the waiter rescued (it re-checks the queue).
	wait := func(i int, ch <-chan zk.Event, what string) (rescued bool, err error) {
		for {
			select {
			case ev := <-ch:
				return false, ev.Err
			case <-wctx.Done():
				return false, wctx.Err()
			case <-stopCh:
				return false, errStopped
			case <-time.After(stallAfter):
			}
			gone, err := changed(i, what)
			if err != nil || !gone {
				if err != nil {
					return false, err
				}
				continue
			}
			select {
			case ev := <-ch:
				return false, ev.Err
			case <-wctx.Done():
				return false, wctx.Err()
			case <-time.After(stallAfter):
				lost.Lock()
				res.Lost++
				lost.Unlock()
				return true, nil
			}
		}
	}
	released := time.Now()
	if err := c.Delete(gate, -1); err != nil {
		return res, fmt.Errorf("delete gate: %w", err)
	}
	err = parallel(n, func(i int) error {
		ch, what := watches[i], watched[i]
		rescued := false
		for {
			if ch != nil {
				r, err := wait(i, ch, what)
				if errors.Is(err, errStopped) {
					return nil
				}
				if err != nil {
					return fmt.Errorf("%s: %w", nodes[i], err)
				}
				rescued = r
			}
			held, next, nextWhat, err := check(i)
			if err != nil {
				return err
			}
			if held {
				spans[i].start = time.Now()
				spans[i].end = time.Now()
				spans[i].stalled = rescued
				holds[i] = true
				if holders.Add(1) == int64(limit) {
					close(stopCh)
					return nil
				}
				return conns[i].Delete(nodes[i], -1)
			}
			ch, what = next, nextWhat
		}
	})
	if err != nil {
		closeAll(conns) // unblocks every waiter
		return res, err
	}
	after, err := s.notifications()
	if err != nil {
		return res, err
	}
	var got []stamp
	for i, h := range holds {
		if h {
			got = append(got, spans[i])
		}
	}
	res.summarize(got, released)
	res.setNotifications(before, after, limit)
	return res, nil
}

// parallelLimit is parallel with at most limit calls of f at a time.
func parallelLimit(n, limit int, f func(i int) error) error {
	sem := make(chan struct{}, limit)
	return parallel(n, func(i int) error {
		sem <- struct{}{}
		defer func() { <-sem }()
		return f(i)
	})
}

// seqSuffix is the zero-padded sequence number ending a sequential name.
func seqSuffix(name string) string { return name[max(0, len(name)-10):] }

// parallel runs f(0..n-1) concurrently and returns the first error.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(i) }()
	}
	wg.Wait()
	return errors.Join(slices.DeleteFunc(errs, func(e error) bool { return e == nil })...)
}

// crashResult is crashRepeats crash-to-next-holder runs at one timeout.
type crashResult struct {
	System     string    `json:"system"`
	Requested  float64   `json:"requested_timeout_sec"`
	Negotiated float64   `json:"negotiated_timeout_sec"`
	SamplesMs  []float64 `json:"samples_ms"` // kill to the next job's start
	MedianMs   float64   `json:"median_ms"`
	OverMs     float64   `json:"median_over_timeout_ms"` // MedianMs less the negotiated timeout
}

// negotiated is the session timeout s grants a request for t.
func negotiated(ctx context.Context, s *system, t time.Duration) (time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := client.Connect(cctx, client.Config{Servers: s.addrs(), SessionTimeout: t})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.SessionTimeout(), nil
}

// lockStatus is what the harness reads of `coordrun status --json`.
type lockStatus struct {
	Name   string `json:"name"`
	Holder *struct {
		Node string `json:"node"`
		Info struct {
			PID int `json:"pid"`
		} `json:"info"`
	} `json:"holder"`
	Waiters []json.RawMessage `json:"waiters"`
}

func (e *lockEnv) status(ctx context.Context, s *system, name string) (lockStatus, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, e.bin, "status", "--json", "--timeout", "10s", "--servers", strings.Join(s.addrs(), ","), name)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := startCmd(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return lockStatus{}, fmt.Errorf("coordrun status: %v: %s", err, errb.String())
	}
	var ls []lockStatus
	if err := json.Unmarshal(out.Bytes(), &ls); err != nil || len(ls) != 1 {
		return lockStatus{}, fmt.Errorf("coordrun status --json: %v: %s", err, out.String())
	}
	return ls[0], nil
}

// runCrash kills the holding supervisor of a 2-supervisor lock and
// returns the time from the kill to the other's job starting.
func runCrash(ctx context.Context, e *lockEnv, s *system, name string, timeout time.Duration) (time.Duration, error) {
	argv := e.runArgv(s, name, "--session-timeout", timeout.String(), "--kill-grace", "500ms",
		// Short timeouts leave no room for the default 2s ZooKeeper margin.
		"--zookeeper-margin", "500ms")
	argv = append(argv, "hold")
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop(5 * time.Second)
		}
	}()
	start := func(tag string) (*proc, string, error) {
		out, log := e.files(fmt.Sprintf("%s-%s-%s", s.name, name, tag))
		p, err := startJobProc("supervisor "+name+" "+tag, out, log, e.stamp.env, argv...)
		if err == nil {
			procs = append(procs, p)
		}
		return p, out, err
	}
	alive := func(p *proc) error {
		if p.exited() {
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.exitErr, logTail(p.logPath, 10))
		}
		return nil
	}
	a, aOut, err := start("A")
	if err != nil {
		return 0, err
	}
	if err := poll(ctx, 30*time.Second, 5*time.Millisecond, name+": first job started", func() (bool, error) {
		_, ok := readStamp(aOut)
		return ok, alive(a)
	}); err != nil {
		return 0, err
	}
	b, bOut, err := start("B")
	if err != nil {
		return 0, err
	}
	if err := poll(ctx, 30*time.Second, 10*time.Millisecond, name+": second supervisor queued", func() (bool, error) {
		if err := alive(b); err != nil {
			return false, err
		}
		ls, err := e.status(ctx, s, name)
		if err != nil || len(ls.Waiters) < 1 {
			return false, err
		}
		w, err := s.watchCount()
		return w >= 1, err
	}); err != nil {
		return 0, err
	}
	ls, err := e.status(ctx, s, name)
	if err != nil {
		return 0, err
	}
	if ls.Holder == nil || ls.Holder.Info.PID != a.pid() {
		return 0, fmt.Errorf("%s: coordrun status names holder %+v, want pid %d", name, ls.Holder, a.pid())
	}
	killed := time.Now()
	if err := syscall.Kill(ls.Holder.Info.PID, syscall.SIGKILL); err != nil {
		return 0, err
	}
	var got stamp
	if err := poll(ctx, 4*timeout+30*time.Second, 5*time.Millisecond, name+": second job started", func() (bool, error) {
		var ok bool
		got, ok = readStamp(bOut)
		return ok, alive(b)
	}); err != nil {
		return 0, err
	}
	// B forwards TERM to its job and releases; A is already gone.
	for _, p := range procs {
		p.stop(5 * time.Second)
	}
	if b.exitErr != nil {
		if ee, ok := b.exitErr.(*exec.ExitError); !ok || ee.ExitCode() != 128+int(syscall.SIGTERM) {
			return 0, fmt.Errorf("%s: %v\n%s", b.name, b.exitErr, logTail(b.logPath, 10))
		}
	}
	return got.start.Sub(killed), nil
}

// wallResult is the wall time of a whole command, run again and again.
type wallResult struct {
	Command  string  `json:"command"`
	System   string  `json:"system"`
	Runs     int     `json:"runs"`
	MedianMs float64 `json:"median_ms"`
	P90Ms    float64 `json:"p90_ms"`
}

func (e *lockEnv) wall(ctx context.Context, label, sys string, argv []string) (wallResult, error) {
	res := wallResult{Command: label, System: sys, Runs: wallRuns}
	var ds []time.Duration
	for i := 0; i < wallRuns; i++ {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		out, log := e.files("wall-" + sys)
		t0 := time.Now()
		p, err := startJobProc(label, out, log, nil, argv...)
		if err != nil {
			return res, err
		}
		if err := waitDone(ctx, p, time.Now().Add(30*time.Second)); err != nil {
			p.stop(time.Second)
			return res, err
		}
		d := time.Since(t0)
		if p.exitErr != nil {
			return res, fmt.Errorf("%s: %v\n%s", label, p.exitErr, logTail(p.logPath, 10))
		}
		ds = append(ds, d)
	}
	slices.Sort(ds)
	res.MedianMs, res.P90Ms = ms(percentile(ds, 0.5)), ms(percentile(ds, 0.9))
	return res, nil
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
