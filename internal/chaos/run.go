package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// Options describe one run.
type Options struct {
	Cluster  Config
	Duration time.Duration // of the faulty phase
	Seed     uint64
	Workers  int // default 4
	Watchers int // default 2
	Keys     int // registers, default 4
	// Faults are the kinds the nemesis picks from (Fault*); nil: the
	// process and network faults. A disk rebuild happens in every run.
	Faults []string
	// KeepDir receives the history and visualization when a check fails;
	// default: Cluster.Dir.
	KeepDir string
}

// Report is the outcome of a run.
type Report struct {
	Seed                       uint64
	Ops, OK, Failed, Unknown   int
	Sessions, Abandoned        int
	Checked                    map[string]int // what the checks had to work on
	Faults                     map[string]int
	Checks                     []string
	Violations                 []Violation
	HistoryFile, VisualizeFile string
	Wall                       time.Duration
}

// Summary is the report as text.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos run: seed %d, %s\n", r.Seed, r.Wall.Round(time.Millisecond))
	fmt.Fprintf(&b, "  ops: %d (ok %d, failed %d, ambiguous %d); sessions %d (abandoned %d)\n", r.Ops, r.OK, r.Failed, r.Unknown, r.Sessions, r.Abandoned)
	var kinds []string
	for k := range r.Faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	b.WriteString("  faults:")
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s=%d", k, r.Faults[k])
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  checks: %s\n", strings.Join(r.Checks, ", "))
	fmt.Fprintf(&b, "  checked: linearizable ops %d (sync+reads %d), watches armed %d, events %d, final probes %d, surviving sessions %d, durable creates %d\n",
		r.Checked["lin-ops"], r.Checked["sync-reads"], r.Checked["arms"], r.Checked["events"], r.Checked["probes"], r.Checked["survivors"], r.Checked["creates"])
	fmt.Fprintf(&b, "  violations: %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "    %s\n", v)
	}
	if r.HistoryFile != "" {
		fmt.Fprintf(&b, "  history: %s\n", r.HistoryFile)
	}
	if r.VisualizeFile != "" {
		fmt.Fprintf(&b, "  visualization: %s\n", r.VisualizeFile)
	}
	return b.String()
}

// Run starts a cluster, runs the workload under the fault schedule for
// opts.Duration, then heals everything, kills and restarts every member at
// once, and runs every check. An error means the harness itself could not
// do its job; broken guarantees are in Report.Violations.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Workers == 0 {
		opts.Workers = 4
	}
	if opts.Watchers == 0 {
		opts.Watchers = 2
	}
	if opts.Keys == 0 {
		opts.Keys = 4
	}
	if opts.KeepDir == "" {
		opts.KeepDir = opts.Cluster.Dir
	}
	logw := opts.Cluster.Log
	if logw == nil {
		logw = io.Discard
	}
	began := time.Now()
	rep := &Report{Seed: opts.Seed, Faults: map[string]int{}}
	c, err := Start(ctx, opts.Cluster)
	if err != nil {
		return nil, err
	}
	defer c.Close()

	w := &workload{c: c, h: &History{}, start: time.Now(), timeout: 3 * time.Second, opWait: 4 * time.Second,
		stop: make(chan struct{}), nextDur: make([]atomic.Int64, opts.Workers)}
	// Registers are replaced by fresh ones every keyEpoch, so that
	// each partition porcupine searches is short and holds few writes of
	// unknown outcome (each of those stays pending to the end of its
	// partition, which makes the search grow fast). The workload runs
	// past the faulty phase for the recovery, hence the spare epochs.
	epochs := int((opts.Duration+2*time.Minute)/keyEpoch) + 1
	for e := 0; e < epochs; e++ {
		var ks []string
		for i := 0; i < opts.Keys; i++ {
			ks = append(ks, fmt.Sprintf("%s/e%d-k%d", regDir, e, i))
		}
		w.epochKeys = append(w.epochKeys, ks)
		w.keys = append(w.keys, ks...)
	}
	if err := setup(ctx, c, w.keys); err != nil {
		return nil, err
	}
	for i := 0; i < opts.Workers; i++ {
		w.wg.Add(1)
		go w.worker(i, opts.Seed)
	}
	for i := 0; i < opts.Watchers; i++ {
		w.wg.Add(1)
		go w.watcher(i, opts.Seed, opts.Workers)
	}
	nem := &nemesis{c: c, kinds: opts.Faults, rng: rand.New(rand.NewPCG(opts.Seed, 7)), log: logw, faults: rep.Faults, fullSeen: map[int]int{}}
	nerr := nem.run(ctx, opts.Duration)

	// Recovery: everything healed and running, then a quiet moment for
	// the workload to show the ensemble serves again.
	nem.recover(ctx)
	hctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.WaitHealthy(hctx); err != nil {
		close(w.stop)
		w.wg.Wait()
		c.DumpStacks()
		return nil, fmt.Errorf("after the faults: %w (each member's goroutines at the end of its log)", err)
	}
	time.Sleep(time.Second) // load under a healthy ensemble before stopping
	close(w.stop)
	w.wg.Wait()
	w.probe()
	if err := finalReads(ctx, c, w); err != nil {
		return nil, err
	}
	rep.Checks = append(rep.Checks, "linearizability", "session-fifo", "session-monotonic", "watches")

	// Durability: every member killed at the same moment, then restarted.
	for i := 0; i < c.N(); i++ {
		_ = c.Kill(i)
	}
	rep.Faults["kill-all"]++
	for i := 0; i < c.N(); i++ {
		if err := c.Restart(i); err != nil {
			return nil, err
		}
	}
	hctx2, cancel2 := context.WithTimeout(ctx, time.Minute)
	defer cancel2()
	if err := c.WaitHealthy(hctx2); err != nil {
		return nil, fmt.Errorf("after killing all members: %w", err)
	}
	zx, trees, err := settledTrees(ctx, c, 30*time.Second)
	if err != nil {
		return nil, err
	}
	rep.Violations = append(rep.Violations, Durable(trees[0], w.h)...)
	rep.Checks = append(rep.Checks, "durability")

	// Every session has ended; their ephemerals must go once the leader
	// expires them (a new leader grants a fresh timeout first).
	deadline := time.Now().Add(4*w.timeout + 20*time.Second)
	for {
		zx, trees, err = settledTrees(ctx, c, 30*time.Second)
		if err != nil {
			return nil, err
		}
		if kids, _, _ := trees[0].Children(ephDir, nil); len(kids) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond) // polling interval
	}
	for i, t := range trees {
		rep.Violations = append(rep.Violations, EphemeralsGone(i, t, ephDir)...)
	}
	rep.Checks = append(rep.Checks, "ephemerals")
	rep.Violations = append(rep.Violations, Trees(zx, trees)...)
	rep.Checks = append(rep.Checks, "tree")

	lin, model, info := Linearizable(w.h, initialVal, 2*time.Minute)
	rep.Violations = append(rep.Violations, lin...)
	rep.Violations = append(rep.Violations, SessionOrder(w.h)...)
	rep.Violations = append(rep.Violations, Watches(w.h)...)

	for _, op := range w.h.Ops {
		rep.Ops++
		switch op.Outcome {
		case OK, BadVersion:
			rep.OK++
		case Failed:
			rep.Failed++
		default:
			rep.Unknown++
		}
	}
	rep.Sessions = len(w.h.Sessions)
	rep.Checked = map[string]int{"lin-ops": len(linearizableOps(w.h)), "arms": len(w.h.Arms),
		"probes": len(w.h.Probes), "creates": len(w.h.Created)}
	for _, op := range w.h.Ops {
		if op.Kind == OpSyncGet && op.Outcome == OK {
			rep.Checked["sync-reads"]++
		}
	}
	for _, s := range w.h.Sessions {
		rep.Checked["events"] += len(s.Events)
		if s.Survived {
			rep.Checked["survivors"]++
		}
	}
	rep.Abandoned = int(w.abandoned.Load())
	if nerr != nil {
		rep.Violations = append(rep.Violations, Violation{"harness", nerr.Error()})
	}
	if len(rep.Violations) > 0 {
		rep.HistoryFile, rep.VisualizeFile = keep(opts.KeepDir, w.h, model, info, len(lin) > 0)
	}
	rep.Wall = time.Since(began)
	return rep, nil
}

// setup creates the workload's folders and registers.
func setup(ctx context.Context, c *Cluster, keys []string) error {
	var last error
	for {
		s, err := dialSession(ctx, 0, c.ClientAddr(0), 5*time.Second)
		if err == nil {
			err = func() error {
				defer s.abandon()
				// Pipelined: replies come in order, so waiting for
				// them one by one afterwards costs one round trip.
				var calls []*call
				for _, p := range append([]string{root, regDir, durDir, ephDir}, keys...) {
					data := []byte{}
					if strings.HasPrefix(p, regDir+"/") {
						data = []byte(initialVal)
					}
					calls = append(calls, s.send(wire.OpCreate, &wire.CreateRequest{Path: p, Data: data, ACL: openACL}, &wire.CreateResponse{}))
				}
				for _, c := range calls {
					if err := s.wait(c, 10*time.Second); err != nil && err != wire.ErrNodeExists {
						return err
					}
				}
				return s.closeSession()
			}()
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("setup: %v", last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// finalReads does a sync+read of every register on a fresh session; they
// join the history, so the last state is checked too.
func finalReads(ctx context.Context, c *Cluster, w *workload) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s, err := dialSession(ctx, int(w.nextSession.Add(1)), c.ClientAddr(0), w.timeout)
		if err != nil {
			time.Sleep(100 * time.Millisecond) // retry pacing
			continue
		}
		vs := map[string]int32{}
		for _, k := range w.keys {
			w.syncGet(s, k, vs)
		}
		survived := !s.lost() && s.closeSession() == nil
		w.retire(s, survived)
		if survived {
			return nil
		}
	}
	return fmt.Errorf("final reads: no member answered")
}

// settledTrees fetches every member's tree once all have applied the same
// zxid.
func settledTrees(ctx context.Context, c *Cluster, d time.Duration) ([]int64, []*tree.Tree, error) {
	deadline := time.Now().Add(d)
	for {
		zx := make([]int64, c.N())
		trees := make([]*tree.Tree, c.N())
		var wg sync.WaitGroup
		errs := make([]error, c.N())
		for i := 0; i < c.N(); i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				zx[i], trees[i], errs[i] = c.Snapshot(i)
			}()
		}
		wg.Wait()
		same := true
		var firstErr error
		for i := range zx {
			if errs[i] != nil && firstErr == nil {
				firstErr = errs[i]
			}
			same = same && errs[i] == nil && zx[i] == zx[0]
		}
		if same {
			return zx, trees, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if firstErr != nil {
				return nil, nil, fmt.Errorf("member snapshots: %w", firstErr)
			}
			return zx, trees, nil // Trees reports the mismatch
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}

// keep writes the history (JSON lines) and, when linearizability failed,
// porcupine's visualization into a fresh directory under dir.
func keep(dir string, h *History, model porcupine.Model, info porcupine.LinearizationInfo, visualize bool) (string, string) {
	d, err := os.MkdirTemp(dir, "chaos-failure-")
	if err != nil {
		d = dir
	}
	hist := filepath.Join(d, "history.jsonl")
	if err := h.WriteJSONLines(hist); err != nil {
		hist = "error: " + err.Error()
	}
	if !visualize {
		return hist, ""
	}
	vis := filepath.Join(d, "linearizability.html")
	if err := porcupine.VisualizePath(model, info, vis); err != nil {
		vis = "error: " + err.Error()
	}
	return hist, vis
}
