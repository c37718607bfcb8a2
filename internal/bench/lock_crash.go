package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
)

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
