package main

// The scale workloads' sessions live in worker processes, one per
// sessionsPerWorker sessions: a process here may open 20,000 files, so one
// process cannot hold 50,000 sockets. A worker is a copy of this binary
// (started with workerEnv set) that reads one JSON command per line on
// stdin and answers each with one JSON line on stdout; the parent sends
// every worker the same step at once and adds up the answers. A worker
// whose stdin ends closes its sessions and exits.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// workerEnv marks a child started as a session worker.
const workerEnv = "COORDRUN_BENCH_WORKER"

// sessionsPerWorker is what one worker holds at most: with its replies'
// pipes and the runtime's own files it stays well under 20,000 open files.
const sessionsPerWorker = 15000

// workerCmd is one step for a worker.
type workerCmd struct {
	// Op is open (Addrs, Base, N, Inflight, Ephemeral), kill (KillEvery),
	// stats or close.
	Op       string   `json:"op"`
	Addrs    []string `json:"addrs,omitempty"`
	Base     int      `json:"base,omitempty"` // global index of this worker's first session
	N        int      `json:"n,omitempty"`
	Inflight int      `json:"inflight,omitempty"`
	// Ephemeral, when set, is the parent under which each opened session
	// creates one ephemeral, e<global index>.
	Ephemeral string `json:"ephemeral,omitempty"`
	KillEvery int    `json:"kill_every,omitempty"` // drop sessions whose global index is a multiple
}

// workerReply is a worker's answer to one step.
type workerReply struct {
	Err        string   `json:"err,omitempty"`
	Opened     int      `json:"opened,omitempty"`
	Refused    int      `json:"refused,omitempty"`
	Killed     int      `json:"killed,omitempty"`
	Lost       int      `json:"lost,omitempty"`
	Unanswered int      `json:"unanswered,omitempty"` // closes the server did not finish in time
	Pings      *rttHist `json:"pings,omitempty"`
}

// add folds o into r (the parent's sum over workers).
func (r *workerReply) add(o workerReply) {
	if r.Err == "" {
		r.Err = o.Err
	}
	r.Opened += o.Opened
	r.Refused += o.Refused
	r.Killed += o.Killed
	r.Lost += o.Lost
	r.Unanswered += o.Unanswered
	if o.Pings != nil {
		if r.Pings == nil {
			r.Pings = &rttHist{}
		}
		r.Pings.merge(o.Pings)
	}
}

// rttHist is a histogram of round trips in log buckets (8 per doubling,
// from histBase), so that workers can hand the parent millions of pings
// in a few hundred numbers; a percentile read from it is at most 9% high.
type rttHist struct {
	Counts []uint64 `json:"counts"` // index: bucket; trailing zero buckets omitted
}

const (
	histBase    = 10 * time.Microsecond
	histPerOct  = 8
	histBuckets = 26 * histPerOct // up to 10 µs × 2^26, about 11 minutes
)

func histBucket(d time.Duration) int {
	if d <= histBase {
		return 0
	}
	b := int(math.Ceil(math.Log2(float64(d)/float64(histBase)) * histPerOct))
	return min(b, histBuckets-1)
}

// histUpper is bucket b's upper bound.
func histUpper(b int) time.Duration {
	return time.Duration(float64(histBase) * math.Exp2(float64(b)/histPerOct))
}

func (h *rttHist) add(d time.Duration) {
	b := histBucket(d)
	if b >= len(h.Counts) {
		h.Counts = append(h.Counts, make([]uint64, b+1-len(h.Counts))...)
	}
	h.Counts[b]++
}

func (h *rttHist) merge(o *rttHist) {
	if len(o.Counts) > len(h.Counts) {
		h.Counts = append(h.Counts, make([]uint64, len(o.Counts)-len(h.Counts))...)
	}
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
}

// percentileMs is the upper bound of the bucket holding the p-th round
// trip, in ms (0 with none).
func (h *rttHist) percentileMs(p float64) float64 {
	var total uint64
	for _, c := range h.Counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(p * float64(total)))
	var seen uint64
	for b, c := range h.Counts {
		seen += c
		if seen >= max(want, 1) {
			return ms(histUpper(b))
		}
	}
	return ms(histUpper(len(h.Counts) - 1))
}

// runWorkerIfChild serves the worker protocol on stdin/stdout and exits
// if this process is a session worker; it returns at once otherwise.
// Called first thing in main.
func runWorkerIfChild() {
	if os.Getenv(workerEnv) != "1" {
		return
	}
	if err := serveWorker(context.Background(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// sessionWorker is one worker's sessions, driven by serveWorker's one
// goroutine (so it needs no lock of its own).
type sessionWorker struct {
	base      int
	sess      []*rawSession // index: global index - base; nil: refused or killed
	pongs     *pingLog
	stopPings context.CancelFunc
	pings     sync.WaitGroup // the sessions' keepAlive goroutines
}

// serveWorker answers commands from in on out until in ends.
func serveWorker(ctx context.Context, in io.Reader, out io.Writer) error {
	w := &sessionWorker{}
	defer w.closeAll()
	dec := json.NewDecoder(bufio.NewReader(in))
	enc := json.NewEncoder(out)
	for {
		var c workerCmd
		if err := dec.Decode(&c); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := enc.Encode(w.do(ctx, c)); err != nil {
			return err
		}
	}
}

func (w *sessionWorker) do(ctx context.Context, c workerCmd) workerReply {
	switch c.Op {
	case "open":
		return w.open(ctx, c)
	case "kill":
		var r workerReply
		if c.KillEvery <= 0 {
			return workerReply{Err: "kill: kill_every must be positive"}
		}
		for i, rs := range w.sess {
			if rs != nil && (w.base+i)%c.KillEvery == 0 {
				rs.nc.Close()
				w.sess[i] = nil
				r.Killed++
			}
		}
		return r
	case "stats":
		w.endPings()
		r := workerReply{Lost: countLost(w.sess), Pings: &rttHist{}}
		if w.pongs != nil {
			w.pongs.mu.Lock()
			for _, d := range w.pongs.rtt {
				r.Pings.add(d)
			}
			w.pongs.mu.Unlock()
		}
		return r
	case "close":
		return workerReply{Unanswered: w.closeAll()}
	default:
		return workerReply{Err: fmt.Sprintf("unknown op %q", c.Op)}
	}
}

// open opens c.N sessions, each pinged from its opening on (opening many
// can take longer than a session's timeout), each with its ephemeral
// when c.Ephemeral is set.
func (w *sessionWorker) open(ctx context.Context, c workerCmd) workerReply {
	if w.sess != nil {
		return workerReply{Err: "open: sessions already open (close them first)"}
	}
	if c.N <= 0 || len(c.Addrs) == 0 {
		return workerReply{Err: "open: want n > 0 and addrs"}
	}
	w.base = c.Base
	w.pongs = &pingLog{}
	pctx, stop := context.WithCancel(ctx)
	w.stopPings = stop
	addrs := make([]string, len(c.Addrs))
	for i := range addrs { // dealt by global index, as from one process
		addrs[i] = c.Addrs[(c.Base+i)%len(c.Addrs)]
	}
	sess, err := openMany(ctx, addrs, c.N, max(1, c.Inflight), func(i int, rs *rawSession) error {
		rs.pongs.Store(w.pongs)
		w.pings.Add(1)
		go func() {
			defer w.pings.Done()
			keepAlive(pctx, rs)
		}()
		if c.Ephemeral == "" {
			return nil
		}
		return createEphemeral(rs, fmt.Sprintf("%s/e%06d", c.Ephemeral, c.Base+i))
	})
	w.sess = sess
	r := workerReply{}
	for _, rs := range sess {
		if rs == nil {
			r.Refused++
		} else {
			r.Opened++
		}
	}
	if r.Opened == 0 && err != nil {
		r.Err = err.Error()
	}
	return r
}

// createEphemeral creates path as an ephemeral of rs's session and waits
// for the answer.
func createEphemeral(rs *rawSession, path string) error {
	err := rs.sendBody(1, wire.OpCreate, func(e *wire.Encoder) {
		(&wire.CreateRequest{Path: path, ACL: []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "world", ID: "anyone"}}}, Flags: wire.FlagEphemeral}).Encode(e)
	})
	if err != nil {
		return err
	}
	select {
	case h := <-rs.replies:
		if h.Err != wire.OK {
			return fmt.Errorf("create: %v", h.Err)
		}
		return nil
	case <-rs.closed:
		return fmt.Errorf("connection closed before the create's reply")
	case <-time.After(30 * time.Second):
		return fmt.Errorf("no reply to the create in 30s")
	}
}

func (w *sessionWorker) endPings() {
	if w.stopPings != nil {
		w.stopPings()
	}
	w.pings.Wait()
}

// closeAll closes every session and forgets them; it returns how many
// closes the server did not finish in time.
func (w *sessionWorker) closeAll() int {
	w.endPings()
	n := closeMany(w.sess)
	w.sess, w.pongs, w.stopPings = nil, nil, nil
	return n
}

// workerPool is the running workers of one scale run.
type workerPool struct {
	n       int // sessions over all workers
	workers []*workerProc
}

// workerProc is one worker and its pipes.
type workerProc struct {
	p    *proc
	in   *os.File // the worker's stdin
	out  *os.File // its stdout
	enc  *json.Encoder
	dec  *json.Decoder
	base int
	n    int
}

// startWorkers starts one worker per per sessions (of n), logging into
// dir.
func startWorkers(n, per int, dir string) (*workerPool, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("session workers: %w", err)
	}
	pool := &workerPool{n: n}
	for i, share := range workerShares(n, per) {
		wp, err := startWorker(self, i, filepath.Join(dir, fmt.Sprintf("worker-%d.log", i)))
		if err != nil {
			pool.stop()
			return nil, err
		}
		wp.base, wp.n = share[0], share[1]
		pool.workers = append(pool.workers, wp)
	}
	return pool, nil
}

// workerShares splits n sessions into [base, count] shares of at most per
// each, as even as they go.
func workerShares(n, per int) [][2]int {
	if n <= 0 {
		return nil
	}
	k := (n + per - 1) / per
	out := make([][2]int, k)
	base := 0
	for i := range out {
		c := n / k
		if i < n%k {
			c++
		}
		out[i] = [2]int{base, c}
		base += c
	}
	return out
}

func startWorker(self string, i int, logPath string) (*workerProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, logf
	p, err := startChild(fmt.Sprintf("worker-%d", i), logPath, cmd)
	inR.Close() // the child's ends
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	return &workerProc{p: p, in: inW, out: outR, enc: json.NewEncoder(inW), dec: json.NewDecoder(bufio.NewReader(outR))}, nil
}

// each sends every worker the step mk makes for it, all at once, and
// returns the sum of their answers. If ctx ends first the workers are
// stopped (their sessions die with them) and ctx's error returned.
func (pool *workerPool) each(ctx context.Context, mk func(w *workerProc) workerCmd) (workerReply, error) {
	replies := make([]workerReply, len(pool.workers))
	errs := make([]error, len(pool.workers))
	var wg sync.WaitGroup
	for i, w := range pool.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.enc.Encode(mk(w)); err != nil {
				errs[i] = fmt.Errorf("worker %d: %w", i, err)
				return
			}
			if err := w.dec.Decode(&replies[i]); err != nil {
				errs[i] = fmt.Errorf("worker %d: %w (its log: %s)", i, err, w.p.logPath)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		// A worker reads its stdin only between steps, so it would not
		// see it close until this step ended: kill them.
		pool.kill()
		<-done
		return workerReply{}, ctx.Err()
	}
	var sum workerReply
	for i := range replies {
		if errs[i] != nil {
			return sum, errs[i]
		}
		sum.add(replies[i])
	}
	if sum.Err != "" {
		return sum, errors.New(sum.Err)
	}
	return sum, nil
}

// open opens the pool's sessions over addrs, inflight handshakes at a time
// over all workers, each with an ephemeral under ephemeral when set.
func (pool *workerPool) open(ctx context.Context, addrs []string, inflight int, ephemeral string) (workerReply, error) {
	return pool.each(ctx, func(w *workerProc) workerCmd {
		return workerCmd{Op: "open", Addrs: addrs, Base: w.base, N: w.n, Inflight: max(1, inflight*w.n/pool.n), Ephemeral: ephemeral}
	})
}

func (pool *workerPool) step(ctx context.Context, c workerCmd) (workerReply, error) {
	return pool.each(ctx, func(*workerProc) workerCmd { return c })
}

// kill ends the workers at once (their sessions end with them).
func (pool *workerPool) kill() {
	for _, w := range pool.workers {
		w.p.stop(0)
	}
}

// stop ends the workers: their stdin closes (they close their sessions
// and exit), and any still running after 30 s are killed.
func (pool *workerPool) stop() {
	for _, w := range pool.workers {
		w.in.Close()
	}
	for _, w := range pool.workers {
		select {
		case <-w.p.done:
		case <-time.After(30 * time.Second):
			w.p.stop(0)
		}
		w.out.Close()
	}
}
