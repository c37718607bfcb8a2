package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

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
