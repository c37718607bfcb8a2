package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
)

// runRecipeLock is one handoff run of the "pred" workload on coordrun or
// ZooKeeper: n sessions of the coordrun client in this process, each an
// entry of the recipe package's lock queue (the recipe coordrun run uses:
// each waiter watches its predecessor), queued behind the harness's gate.
// It measures the first limit holders (all when limit <= 0); the limit-th
// holder keeps the lock, and the waiters behind it stop.
//
// A handoff is from the holder seeing it holds, just before its release
// (one multi: delete its queue node and the run node, record the
// release), to the next holder seeing it holds: the release's commit, the
// notification, the next one's listing (with the folder's record read
// alongside) and its take (one multi: check its node, create the run
// node, record the hold).
//
// Lost wake-ups: when no one has taken the lock for stallAfter, the
// harness looks at the head of the queue; an entry there that has not
// taken it missed its wake-up. It is counted and rescued: it leaves the
// queue, which wakes its successor, and the handoff across it is left out
// of the latencies.
func runRecipeLock(ctx context.Context, s *system, n, limit int) (handoffResult, error) {
	res := handoffResult{Workload: "pred", System: s.name, Waiters: n}
	if limit <= 0 || limit > n {
		limit = n
	}
	dir := fmt.Sprintf("/bench-lock/pred-%d", n)
	order := s.clientOrder()
	gc, err := connect(ctx, order[0])
	if err != nil {
		return res, err
	}
	defer gc.Close()
	gate, err := createGate(gc, dir)
	if err != nil {
		return res, err
	}
	clients := make([]*client.Client, n)
	defer closeClients(clients)
	if err := parallelLimit(n, 32, func(i int) (err error) {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		clients[i], err = client.Connect(cctx, client.Config{Servers: []string{order[i%len(order)]}, SessionTimeout: 10 * time.Second})
		return err
	}); err != nil {
		return res, err
	}
	// Phase 1: everyone queues; phase 2: everyone waits, and the gate
	// opens once every waiter watches its predecessor.
	host, _ := os.Hostname()
	entries := make([]*recipe.Entry, n)
	if err := parallel(n, func(i int) (err error) {
		info := recipe.Info{Host: host, PID: os.Getpid(), User: "bench", Command: fmt.Sprintf("bench waiter %d", i)}
		entries[i], err = recipe.Enter(ctx, clients[i], dir, info, recipe.Options{ACL: client.OpenACL})
		return err
	}); err != nil {
		return res, err
	}
	byNode := map[string]int{}
	for i, e := range entries {
		byNode[e.Node()] = i
	}

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(n)*time.Second)
	defer cancel()
	stopCtx, stop := context.WithCancel(wctx) // ends the unmeasured waiters
	defer stop()
	spans := make([]stamp, n)
	held := make([]atomic.Bool, n)
	var holders atomic.Int64
	lastHold := make(chan struct{}, n) // a tick per hold, for the stall watch
	// rescue makes a waiter leave the queue; rescuedAt says when.
	rescue := make([]context.CancelFunc, n)
	var mu sync.Mutex // guards rescuedAt and errs
	rescuedAt := map[int]time.Time{}
	var errs []error
	fail := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	failures := func() error {
		mu.Lock()
		defer mu.Unlock()
		return errors.Join(errs...)
	}
	var wg sync.WaitGroup
	for i, e := range entries {
		ictx, icancel := context.WithCancel(stopCtx)
		rescue[i] = icancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer icancel()
			err := e.Acquire(ictx, nil)
			if err != nil {
				mu.Lock()
				_, rescued := rescuedAt[i]
				mu.Unlock()
				switch {
				case rescued:
					fail(e.Release(wctx)) // wakes its successor
				case stopCtx.Err() == nil:
					fail(fmt.Errorf("%s: %w", e.Node(), err))
				}
				return
			}
			spans[i].start = time.Now()
			spans[i].end = spans[i].start
			held[i].Store(true)
			lastHold <- struct{}{}
			if holders.Add(1) == int64(limit) {
				stop()
				return
			}
			fail(e.Release(wctx))
		}()
	}
	abort := func(err error) (handoffResult, error) {
		stop()
		wg.Wait()
		return res, err
	}
	err = poll(ctx, 60*time.Second, 10*time.Millisecond, fmt.Sprintf("%d recipe waiters watching on %s", n, s.name), func() (bool, error) {
		w, err := s.watchCount()
		return w >= n, errors.Join(err, failures())
	})
	if err != nil {
		return abort(err)
	}
	before, err := s.notifications()
	if err != nil {
		return abort(err)
	}
	stagesBefore, _ := s.stages() // the handoffs only, not the queueing
	released := time.Now()
	if err := gc.Delete(gate, -1); err != nil {
		return abort(fmt.Errorf("delete gate: %w", err))
	}
	// Wait for the limit-th holder, rescuing a head that misses its
	// wake-up.
	stall := time.NewTimer(stallAfter)
	defer stall.Stop()
	for stopCtx.Err() == nil {
		select {
		case <-stopCtx.Done():
		case <-lastHold:
			stall.Reset(stallAfter)
		case <-stall.C:
			kids, _, err := gc.Children(dir)
			if err != nil {
				return abort(err)
			}
			kids = slices.Clone(kids)
			slices.SortFunc(kids, func(a, b string) int { return strings.Compare(seqSuffix(a), seqSuffix(b)) })
			if len(kids) > 0 {
				if i, ok := byNode[dir+"/"+kids[0]]; ok && !held[i].Load() {
					mu.Lock()
					if _, done := rescuedAt[i]; !done {
						rescuedAt[i] = time.Now()
						res.Lost++
						rescue[i]()
					}
					mu.Unlock()
				}
			}
			stall.Reset(stallAfter)
		}
	}
	// Before the unmeasured waiters leave the queue.
	if stagesBefore != nil {
		if after, err := s.stages(); err == nil {
			res.Stages = stageRows(stagesBefore, after)
		}
	}
	wg.Wait()
	if err := wctx.Err(); err != nil && int(holders.Load()) < limit {
		return res, fmt.Errorf("%d of %d holders before %v", holders.Load(), limit, err)
	}
	if err := failures(); err != nil {
		return res, err
	}
	after, err := s.notifications()
	if err != nil {
		return res, err
	}
	var got []stamp
	for i := range spans {
		if held[i].Load() {
			got = append(got, spans[i])
		}
	}
	// A handoff across a rescue measures the rescue.
	slices.SortFunc(got, func(a, b stamp) int { return a.start.Compare(b.start) })
	for i := 1; i < len(got); i++ {
		for _, at := range rescuedAt {
			if at.After(got[i-1].end) && at.Before(got[i].start) {
				got[i].stalled = true
			}
		}
	}
	res.summarize(got, released)
	res.setNotifications(before, after, limit)
	return res, nil
}

// closeClients closes sessions in parallel.
func closeClients(cs []*client.Client) {
	var wg sync.WaitGroup
	for _, c := range cs {
		if c != nil {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
	}
	wg.Wait()
}
