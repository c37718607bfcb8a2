package main

// The tree workload of -compare: -tree-nodes znodes (100 directories of
// leaves with -value-size bytes each) are created, then 32 clients set
// random leaves for the measured window, and then a follower is stopped,
// the writes go on for a while without it, and it is started again: the
// time from its start to having applied everything the leader had applied
// at that moment is "catch-up". On coordrun that is a snapshot install or
// a log replay after loading its own snapshot; on ZooKeeper, a JVM start,
// loading its snapshot and a DIFF or SNAP sync.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

const (
	treeRoot    = "/bench-tree"
	treeDirs    = 100
	treeWriters = 32
)

// treeResult is one tree run; its write row is in the report's KV rows.
type treeResult struct {
	System     string  `json:"system"`
	Nodes      int     `json:"nodes"`
	PopulateMs float64 `json:"populate_ms"`
	CatchUpMs  float64 `json:"catch_up_ms"` // the follower's start → applied the leader's zxid
	RSSKiB     int64   `json:"max_rss_kib"` // the largest member's after populating
}

func treeLeaf(i int) string {
	return fmt.Sprintf("%s/d%03d/n%07d", treeRoot, i%treeDirs, i)
}

// populateTree creates the tree through 8 sessions, 64 creates in flight.
func populateTree(ctx context.Context, s *system, nodes int, value []byte) error {
	order := s.clientOrder()
	conns := make([]*zk.Conn, 8)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range conns {
		c, err := connect(ctx, order[i%len(order)])
		if err != nil {
			return err
		}
		conns[i] = c
	}
	mk := func(c *zk.Conn, p string, v []byte) error {
		_, err := c.Create(p, v, 0, zk.WorldACL(zk.PermAll))
		if err == zk.ErrNodeExists {
			return nil
		}
		return err
	}
	if err := mk(conns[0], treeRoot, nil); err != nil {
		return err
	}
	for d := 0; d < treeDirs; d++ {
		if err := mk(conns[0], fmt.Sprintf("%s/d%03d", treeRoot, d), nil); err != nil {
			return err
		}
	}
	return parallelLimit(nodes, 64, func(i int) error {
		return mk(conns[i%len(conns)], treeLeaf(i), value)
	})
}

// treeTarget: client i has its own session and sets random leaves.
func treeTarget(s *system, value []byte, nodes int) target {
	order := s.clientOrder()
	return target{name: s.name, cpu: s.cpu, stages: s.stages, open: func(ctx context.Context, i int) (worker, error) {
		c, err := connect(ctx, order[i%len(order)])
		if err != nil {
			return worker{}, err
		}
		r := rand.New(rand.NewPCG(uint64(i), 7))
		return worker{close: c.Close, op: func(_ context.Context, _ bool) error {
			_, err := c.Set(treeLeaf(r.IntN(nodes)), value, -1)
			return err
		}}, nil
	}}
}

// zxidOf is the zxid a member reports in srvr.
func zxidOf(m *member) (int64, error) {
	out, err := fourLetter(m.clientAddr, "srvr")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimPrefix(field(out, "Zxid"), "0x"), 16, 64)
}

// runTree populates the tree, measures the writes, and restarts a
// follower.
func runTree(ctx context.Context, s *system, nodes int, value []byte, cfg config) (treeResult, result, error) {
	res := treeResult{System: s.name, Nodes: nodes}
	start := time.Now()
	if err := populateTree(ctx, s, nodes, value); err != nil {
		return res, result{}, fmt.Errorf("populate: %w", err)
	}
	res.PopulateMs = ms(time.Since(start))
	for _, m := range s.members {
		if rss, _, err := memory(m.proc.pid()); err == nil {
			res.RSSKiB = max(res.RSSKiB, rss)
		}
	}
	kv, err := measureOps(ctx, treeTarget(s, value, nodes), "tree", treeWriters, 1, cfg)
	if err != nil {
		return res, kv, err
	}

	var fol, lead *member
	for _, m := range s.members {
		switch m.role {
		case "leader":
			lead = m
		case "follower":
			if fol == nil {
				fol = m
			}
		}
	}
	if fol == nil || lead == nil {
		return res, kv, fmt.Errorf("no leader and follower to restart")
	}
	// Writes go on through the other members while the follower is down
	// and while it catches up.
	wctx, stopWrites := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var werr atomic.Value
	c, err := connect(ctx, lead.clientAddr)
	if err != nil {
		stopWrites()
		return res, kv, err
	}
	defer c.Close()
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 11))
			for wctx.Err() == nil {
				if _, err := c.Set(treeLeaf(r.IntN(nodes)), value, -1); err != nil && wctx.Err() == nil {
					werr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	defer func() {
		stopWrites()
		wg.Wait()
	}()
	fol.proc.stop(10 * time.Second)
	if !sleepUntil(ctx, time.Now().Add(3*time.Second)) {
		return res, kv, ctx.Err()
	}
	p, err := fol.proc.restart()
	if err != nil {
		return res, kv, err
	}
	fol.proc = p
	started := time.Now()
	target, err := zxidOf(lead)
	if err != nil {
		return res, kv, err
	}
	err = poll(ctx, 120*time.Second, 10*time.Millisecond, "the restarted follower to catch up", func() (bool, error) {
		if fol.proc.exited() {
			return false, fmt.Errorf("the restarted follower exited: %s", logTail(fol.proc.logPath, 20))
		}
		z, err := zxidOf(fol)
		return err == nil && z >= target, nil
	})
	if err != nil {
		return res, kv, err
	}
	res.CatchUpMs = ms(time.Since(started))
	if e, ok := werr.Load().(error); ok {
		fmt.Fprintf(os.Stderr, "  (a write during the restart failed: %v)\n", e)
	}
	return res, kv, nil
}
