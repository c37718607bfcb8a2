package main

// The key-value workloads: every client a session doing synchronous
// requests on its own znode, timed one by one.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// result is one workload on one system.
type result struct {
	Workload   string  `json:"workload"`
	System     string  `json:"system"`
	Clients    int     `json:"clients"`
	Ops        int     `json:"ops"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	// CPUPerOpUs is the CPU time of all three members together during the
	// measured window, per op (10 ms resolution per member).
	CPUPerOpUs float64 `json:"server_cpu_us_per_op"`
	// Stages is where coordrun's writes spent their time in the window.
	Stages []stageRow `json:"stages,omitempty"`
}

// clientStats is what one client saw in the measured window.
type clientStats struct {
	lat      []time.Duration
	errs     int
	firstErr error
}

// worker is one simulated client of any system: op issues one request, a
// write or a read, and waits for its answer.
type worker struct {
	op    func(ctx context.Context, write bool) error
	close func()
}

// target opens the workers of one system for one workload.
type target struct {
	name string
	open func(ctx context.Context, i int) (worker, error)
	cpu  func() time.Duration // the servers' CPU time so far; nil if not measurable
	// stages scrapes coordrun's write stages; nil for other systems.
	stages func() (map[string]stageHist, error)
}

// zkTarget drives s through go-zookeeper: client i has its own session on
// the i-th member of s.clientOrder() (round robin) and its own znode.
func zkTarget(s *system, value []byte) target {
	order := s.clientOrder()
	return target{name: s.name, cpu: s.cpu, stages: s.stages, open: func(ctx context.Context, i int) (worker, error) {
		c, err := connect(ctx, order[i%len(order)])
		if err != nil {
			return worker{}, err
		}
		path := nodePath(i)
		return worker{close: c.Close, op: func(_ context.Context, write bool) error {
			if write {
				_, err := c.Set(path, value, -1)
				return err
			}
			_, _, err := c.Get(path)
			return err
		}}, nil
	}}
}

// closeWorkers closes workers in parallel (a zk Close may wait up to 1s).
func closeWorkers(ws []worker) {
	var wg sync.WaitGroup
	for _, w := range ws {
		if w.close != nil {
			wg.Add(1)
			go func() { defer wg.Done(); w.close() }()
		}
	}
	wg.Wait()
}

// openWorkers opens n workers, at most 32 at a time.
func openWorkers(ctx context.Context, t target, n int) ([]worker, error) {
	ws := make([]worker, n)
	err := parallelLimit(n, 32, func(i int) (err error) {
		ws[i], err = t.open(ctx, i)
		return err
	})
	if err != nil {
		closeWorkers(ws)
		return nil, err
	}
	return ws, nil
}

// measure runs one workload of op ("setData" or "getData") with n
// go-zookeeper sessions.
func measure(ctx context.Context, s *system, op string, n int, value []byte, cfg config) (result, error) {
	writeEvery := 0
	if op == "setData" {
		writeEvery = 1
	}
	return measureOps(ctx, zkTarget(s, value), op, n, writeEvery, cfg)
}

// measureOps runs one workload: n workers each issuing synchronous
// requests until the window ends. Every writeEvery-th request of a worker
// is a write (1: all, 0: none), the rest reads.
func measureOps(ctx context.Context, t target, workload string, n, writeEvery int, cfg config) (result, error) {
	res := result{Workload: workload, System: t.name, Clients: n}
	ws, err := openWorkers(ctx, t, n)
	if err != nil {
		return res, err
	}
	var closeOnce sync.Once
	closeAll := func() { closeOnce.Do(func() { closeWorkers(ws) }) }
	defer closeAll()

	start := time.Now()
	from := start.Add(cfg.warmup)
	to := from.Add(cfg.duration)
	stats := make([]clientStats, n)
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); stats[i] = drive(ctx, w, i, writeEvery, from, to) }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	cpu := func() time.Duration {
		if t.cpu == nil {
			return 0
		}
		return t.cpu()
	}
	if !sleepUntil(ctx, from) {
		closeAll()
		<-done
		return res, ctx.Err()
	}
	stagesAt := func() map[string]stageHist {
		if t.stages == nil {
			return nil
		}
		st, err := t.stages()
		if err != nil {
			fmt.Fprintf(os.Stderr, "  (no write stages: %v)\n", err)
		}
		return st
	}
	cpu0, st0 := cpu(), stagesAt()
	if !sleepUntil(ctx, to) {
		closeAll()
		<-done
		return res, ctx.Err()
	}
	cpu1, st1 := cpu(), stagesAt()
	// No request starts after the window; one stuck past it is cut off by
	// closing its client.
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		closeAll()
		<-done
	case <-ctx.Done():
		closeAll()
		<-done
		return res, ctx.Err()
	}

	var all []time.Duration
	for _, st := range stats {
		all = append(all, st.lat...)
		res.Errors += st.errs
		if st.firstErr != nil && res.FirstError == "" {
			res.FirstError = st.firstErr.Error()
		}
	}
	slices.Sort(all)
	res.Ops = len(all)
	res.OpsPerSec = float64(len(all)) / cfg.duration.Seconds()
	res.P50Ms = ms(percentile(all, 0.50))
	res.P99Ms = ms(percentile(all, 0.99))
	if st0 != nil {
		res.Stages = stageRows(st0, st1)
	}
	if len(all) > 0 && t.cpu != nil {
		res.CPUPerOpUs = float64((cpu1 - cpu0).Microseconds()) / float64(len(all))
	}
	return res, nil
}

// drive issues worker w's (number i's) requests back to back until the
// window [from, to] ends, recording those that complete inside it. The
// offset i spreads the writes of a mix over time.
func drive(ctx context.Context, w worker, i, writeEvery int, from, to time.Time) clientStats {
	st := clientStats{lat: make([]time.Duration, 0, 1<<14)}
	for k := i; ctx.Err() == nil; k++ {
		t0 := time.Now()
		if !t0.Before(to) {
			break
		}
		err := w.op(ctx, writeEvery > 0 && k%writeEvery == 0)
		t1 := time.Now()
		inWindow := !t1.Before(from) && !t1.After(to)
		switch {
		case err != nil:
			if inWindow {
				st.errs++
				if st.firstErr == nil {
					st.firstErr = err
				}
			}
			time.Sleep(10 * time.Millisecond) // pacing: don't spin on a broken client
		case inWindow:
			st.lat = append(st.lat, t1.Sub(t0))
		}
	}
	return st
}

// sleepUntil sleeps until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
