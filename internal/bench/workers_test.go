package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
	"github.com/go-zookeeper/zk"
)

// TestMain lets the test binary serve as its own session worker, as the
// bench binary does.
func TestMain(m *testing.M) {
	runWorkerIfChild()
	os.Exit(m.Run())
}

func TestWorkerShares(t *testing.T) {
	for _, c := range []struct {
		n, per int
		want   [][2]int
	}{
		{0, 15000, nil},
		{10, 15000, [][2]int{{0, 10}}},
		{15000, 15000, [][2]int{{0, 15000}}},
		{15001, 15000, [][2]int{{0, 7501}, {7501, 7500}}},
		{50000, 15000, [][2]int{{0, 12500}, {12500, 12500}, {25000, 12500}, {37500, 12500}}},
	} {
		got := workerShares(c.n, c.per)
		if len(got) != len(c.want) {
			t.Fatalf("workerShares(%d, %d) = %v, want %v", c.n, c.per, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("workerShares(%d, %d) = %v, want %v", c.n, c.per, got, c.want)
			}
		}
	}
}

// The parent's p99 over merged worker histograms is the p99 of all the
// round trips together (to a bucket's width), not of any one worker's.
func TestRttHistAggregation(t *testing.T) {
	var a, b rttHist
	for i := 1; i <= 90; i++ {
		a.add(time.Millisecond)
	}
	for i := 1; i <= 10; i++ {
		b.add(time.Duration(i) * 100 * time.Millisecond) // 100 ms .. 1 s
	}
	if p := a.percentileMs(0.99); p < 1 || p > 1.1 {
		t.Fatalf("one worker's p99 %v ms, want 1 ms (+9%%)", p)
	}
	var sum workerReply
	for _, r := range []workerReply{{Opened: 3, Lost: 1, Pings: &a}, {Opened: 4, Refused: 2, Killed: 1, Pings: &b}, {Unanswered: 5}} {
		sum.add(r)
	}
	if sum.Opened != 7 || sum.Refused != 2 || sum.Killed != 1 || sum.Lost != 1 || sum.Unanswered != 5 || sum.Err != "" {
		t.Fatalf("sum %+v", sum)
	}
	// 100 round trips: the 99th is 900 ms.
	if p := sum.Pings.percentileMs(0.99); p < 900 || p > 900*1.091 {
		t.Fatalf("merged p99 %v ms, want 900 ms (+9%%)", p)
	}
	if (&rttHist{}).percentileMs(0.99) != 0 {
		t.Fatal("p99 of no round trips")
	}
	// A reply crosses the pipe as JSON.
	raw, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	var back workerReply
	if err := json.Unmarshal(raw, &back); err != nil || back.Pings.percentileMs(0.99) != sum.Pings.percentileMs(0.99) {
		t.Fatalf("round trip through JSON: %v, %s", err, raw)
	}
}

// A bad step gets an error naming it and leaves the worker serving.
func TestWorkerProtocolErrors(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serveWorker(context.Background(), inR, outW) }()
	enc, dec := json.NewEncoder(inW), json.NewDecoder(outR)
	for _, c := range []struct {
		cmd  workerCmd
		want string
	}{
		{workerCmd{Op: "nap"}, `unknown op "nap"`},
		{workerCmd{Op: "open"}, "open: want n > 0 and addrs"},
		{workerCmd{Op: "kill"}, "kill: kill_every must be positive"},
		{workerCmd{Op: "stats"}, ""},
		{workerCmd{Op: "close"}, ""},
	} {
		if err := enc.Encode(c.cmd); err != nil {
			t.Fatal(err)
		}
		var r workerReply
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		if r.Err != c.want {
			t.Fatalf("%s: err %q, want %q", c.cmd.Op, r.Err, c.want)
		}
	}
	inW.Close() // stdin ends: the worker returns
	if err := testkit.Recv(t, done, 10*time.Second, "worker's return"); err != nil {
		t.Fatal(err)
	}
}

// Three worker processes (this test binary re-executed) hold a storm's
// sessions on a real ensemble: the parent's sums match what the ensemble
// holds.
func TestWorkerPoolStorm(t *testing.T) {
	c := ensembletest.Start(t, 3)
	ctx := testkit.Context(t, time.Minute)
	addrs := c.Servers()
	admin := testkit.DialZK(t, addrs[:1], 10*time.Second)
	if _, err := admin.Create(stormPath, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	const n = 45
	pool, err := startWorkers(n, 15, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.stop()
	if len(pool.workers) != 3 {
		t.Fatalf("%d workers for %d sessions at 15 each", len(pool.workers), n)
	}
	children := func() int {
		_, st, err := admin.Exists(stormPath)
		if err != nil {
			t.Fatal(err)
		}
		return int(st.NumChildren)
	}

	r, err := pool.open(ctx, addrs, 8, stormPath)
	if err != nil || r.Opened != n || r.Refused != 0 {
		t.Fatalf("open: %+v, %v", r, err)
	}
	if got := children(); got != n {
		t.Fatalf("%d ephemerals after opening %d sessions", got, n)
	}
	names, _, err := admin.Children(stormPath)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, name := range names {
		seen[name] = true
	}
	for _, want := range []string{"e000000", "e000014", "e000015", "e000044"} {
		if !seen[want] {
			t.Fatalf("no ephemeral %s: each session's is named by its global index (%v)", want, names)
		}
	}
	if _, err := pool.open(ctx, addrs, 8, stormPath); err == nil {
		t.Fatal("a second open over open sessions was accepted")
	}

	r, err = pool.step(ctx, workerCmd{Op: "kill", KillEvery: 10})
	if err != nil || r.Killed != 5 { // 0, 10, 20, 30, 40 over the three workers
		t.Fatalf("kill every 10th of %d: %+v, %v", n, r, err)
	}
	r, err = pool.step(ctx, workerCmd{Op: "stats"})
	if err != nil || r.Lost != 0 || r.Pings == nil {
		t.Fatalf("stats: %+v, %v", r, err)
	}
	r, err = pool.step(ctx, workerCmd{Op: "close"})
	if err != nil || r.Unanswered != 0 {
		t.Fatalf("close: %+v, %v", r, err)
	}
	// The closed sessions' ephemerals are gone; the killed ones' stay
	// until their sessions expire.
	testkit.WaitFor(t, 10*time.Second, "the closed sessions' ephemerals gone", func() bool { return children() <= 5 })

	// The pool serves the next workload.
	r, err = pool.open(ctx, addrs, 8, "")
	if err != nil || r.Opened != n {
		t.Fatalf("open again: %+v, %v", r, err)
	}
	if _, err := pool.step(ctx, workerCmd{Op: "close"}); err != nil {
		t.Fatal(err)
	}
}

// A workload cancelled mid-step (the harness stopping) ends its workers
// at once, though a worker reads its stdin only between steps.
func TestWorkerPoolCancelKills(t *testing.T) {
	ln := testkit.Listen(t) // accepts, never answers a handshake
	accepted := make(chan struct{})
	conns := make(chan struct{}, 2)
	go func() {
		defer close(accepted)
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // the listener closed at the test's end
			}
			held = append(held, c)
			select {
			case conns <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { ln.Close(); <-accepted })
	pool, err := startWorkers(2, 1, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.stop()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := pool.open(ctx, []string{ln.Addr().String()}, 1, "")
		errc <- err
	}()
	// Both workers are inside the step, each waiting for a handshake.
	testkit.Recv(t, conns, 10*time.Second, "worker 1's connection")
	testkit.Recv(t, conns, 10*time.Second, "worker 2's connection")
	cancel()
	if err := testkit.Recv(t, errc, 10*time.Second, "the cancelled open's return (a handshake waits 30 s)"); err != context.Canceled {
		t.Fatalf("open returned %v, want context.Canceled", err)
	}
	for i, w := range pool.workers {
		if !w.p.exited() {
			t.Fatalf("worker %d still running after the cancelled step", i)
		}
	}
}
