package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
)

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
