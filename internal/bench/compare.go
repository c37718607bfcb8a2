package main

// -compare: the same workloads, load generator and settings against a
// coordrun ensemble, Apache ZooKeeper 3.8, etcd and bare raft in one run,
// with the ratios coordrun/ZooKeeper, coordrun/etcd and coordrun/raft as
// the headline (make bench-compare).
//
// Workloads (-workloads, comma-separated; kv = write,read,mix; lock =
// pred,herd,run,crash; all = everything):
//
//   - write xN: setData / Put / raft Apply of -value-size bytes with each of
//     -write-clients clients, each client its own session (etcd: client)
//     writing its own znode (key) synchronously;
//   - read x-clients: getData (a local read) / serializable Get; read-lin:
//     etcd's linearizable Get, for reference;
//   - mix x-clients: every 10th request a write, the rest reads;
//   - pred xN, herd xN: lock handoff with N waiters, predecessor-watch
//     recipe (coordrun, ZooKeeper: the recipe package's lock queue, run
//     node included; etcd: concurrency.Mutex) and the herd recipe,
//     in-process, measuring at most -max-handoffs handoffs of the queue;
//   - run xN: handoff through the real `coordrun run` binary (coordrun and
//     ZooKeeper only; lock.go);
//   - crash T: holder killed, time until the next holder (lock.go; etcd:
//     a holder process with a lease of TTL T);
//   - failover, startup: recovery.go;
//   - memory: every member's VmRSS and VmHWM once the load workloads are
//     done (before failover restarts members).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// compareConfig is -compare's part of the flags.
type compareConfig struct {
	systems      []string
	workloads    map[string]bool
	writeClients []int
	waiters      []int
	herdWaiters  []int
	maxHandoffs  int
	repeats      int
	sessions     int
	sessionsHold time.Duration
	perWorker    int   // sessions per worker process (workers.go)
	hogs         []int // busy loops during the scale workloads, one run per count
	fanoutWatch  int
	fanoutRounds int
	treeNodes    int
	etcdBin      string
	plotPath     string
	outDir       string
}

var allSystems = []string{"coordrun", "zookeeper", "etcd", "raft", "raft-procs"}

var workloadGroups = map[string][]string{
	"kv":   {"write", "read", "mix"},
	"lock": {"pred", "herd", "run", "crash"},
	"all":  {"write", "read", "mix", "pred", "herd", "run", "crash", "failover", "startup"},
	// Not in all: they hold -sessions sessions, -fanout-watchers watchers.
	"scale": {"sessions", "storm", "fanout", "tree"},
}

func parseWorkloads(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, w := range strings.Split(s, ",") {
		w = strings.TrimSpace(w)
		if g, ok := workloadGroups[w]; ok {
			for _, x := range g {
				out[x] = true
			}
			continue
		}
		if !slices.Contains(workloadGroups["all"], w) && !slices.Contains(workloadGroups["scale"], w) {
			return nil, fmt.Errorf("unknown workload %q (want %s, %s, or kv, lock, scale, all)", w,
				strings.Join(workloadGroups["all"], ", "), strings.Join(workloadGroups["scale"], ", "))
		}
		out[w] = true
	}
	return out, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want positive integers, comma-separated", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// compareReport is everything -compare measured.
type compareReport struct {
	runInfo
	Systems   []systemInfo     `json:"systems"`
	Skipped   []string         `json:"skipped,omitempty"`
	Job       string           `json:"job,omitempty"` // the job of the run and crash workloads
	Headline  []metricRow      `json:"headline"`
	KV        []result         `json:"kv"`
	Locks     []handoffResult  `json:"locks"`
	Crashes   []crashResult    `json:"crashes"`
	Failovers []recoveryResult `json:"failovers"`
	Startups  []recoveryResult `json:"startups"`
	Sessions  []sessionsResult `json:"sessions,omitempty"`
	Storms    []stormResult    `json:"storms,omitempty"`
	Trees     []treeResult     `json:"trees,omitempty"`
	Fanouts   []fanoutResult   `json:"fanouts,omitempty"`
	Memory    []memRow         `json:"memory"`
}

// metricRow is one line of the headline table: a metric of a workload on
// every system that ran it, and coordrun's ratio to each other system.
type metricRow struct {
	Workload string             `json:"workload"`
	Metric   string             `json:"metric"`
	Better   string             `json:"better"` // "higher" or "lower"
	Values   map[string]float64 `json:"values"`
	Ratios   map[string]float64 `json:"ratios,omitempty"` // "coordrun/etcd": coordrun's value / etcd's
}

// runCompare is -compare.
func runCompare(ctx context.Context, cfg config, cc compareConfig) error {
	root, err := os.MkdirTemp("", "coordrun-bench-compare-")
	if err != nil {
		return err
	}
	defer func() {
		stopAll()
		os.RemoveAll(root)
	}()
	rep := &compareReport{runInfo: newRunInfo(cfg)}
	skip := func(name string, why error) {
		msg := fmt.Sprintf("%s: skipped: %v", name, why)
		fmt.Fprintln(os.Stderr, "bench:", msg)
		rep.Skipped = append(rep.Skipped, msg)
	}

	// Every system is started before any is measured, and all stay up, so
	// each workload sees the same background.
	var procSystems []*system
	recovery := map[string]recoveryOps{}
	value := make([]byte, cfg.valueSize)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	var rc *raftCluster
	var rp *raftProcs
	for _, name := range cc.systems {
		fmt.Fprintf(os.Stderr, "starting %s ...\n", name)
		switch name {
		case "coordrun":
			s, err := startCoordrun(ctx, cfg.bin, filepath.Join(root, "coordrun"))
			if err != nil {
				return err
			}
			procSystems = append(procSystems, s)
			recovery[name] = recoveryOps{
				writer: zkWriterFor(value), wait: func(ctx context.Context, s *system) error { return waitServing(ctx, s, 60*time.Second) },
				launch: func(dir string) (*system, error) { return launchCoordrun(cfg.bin, dir) },
			}
		case "zookeeper":
			if err := zkInstalled(cfg); err != nil {
				skip(name, err)
				continue
			}
			jvm := strings.Fields(cfg.jvmFlags)
			s, err := startZooKeeper(ctx, cfg.java, cfg.classpath, jvm, filepath.Join(root, "zookeeper"))
			if err != nil {
				return err
			}
			procSystems = append(procSystems, s)
			recovery[name] = recoveryOps{
				writer: zkWriterFor(value), wait: func(ctx context.Context, s *system) error { return waitServing(ctx, s, 60*time.Second) },
				launch: func(dir string) (*system, error) { return launchZooKeeper(cfg.java, cfg.classpath, jvm, dir) },
			}
		case "etcd":
			bin, err := etcdInstalled(cc.etcdBin)
			if err != nil {
				skip(name, err)
				continue
			}
			s, err := startEtcd(ctx, bin, filepath.Join(root, "etcd"))
			if err != nil {
				return err
			}
			procSystems = append(procSystems, s)
			recovery[name] = recoveryOps{
				writer: etcdWriterFor(value), wait: func(ctx context.Context, s *system) error { return waitEtcd(ctx, s, 60*time.Second) },
				launch: func(dir string) (*system, error) { return launchEtcd(bin, dir) },
			}
		case "raft":
			if rc, err = startRaftCluster(ctx, filepath.Join(root, "raft")); err != nil {
				return err
			}
			defer rc.stop()
		case "raft-procs":
			if rp, err = startRaftProcs(ctx, filepath.Join(root, "raft-procs"), cfg.valueSize); err != nil {
				return err
			}
		}
	}
	for _, s := range procSystems {
		rep.Systems = append(rep.Systems, systemInfo{Name: s.name, Version: s.version})
	}
	if rc != nil {
		rep.Systems = append(rep.Systems, systemInfo{Name: "raft", Version: "hashicorp/raft v1.7.3 + raft-boltdb/v2, in-process, no-op FSM"})
	}
	if rp != nil {
		rep.Systems = append(rep.Systems, systemInfo{Name: "raft-procs", Version: "the same, one process per node, a TCP client on the leader"})
	}
	if len(rep.Systems) == 0 {
		return errors.New("no system to measure")
	}

	// Key-value workloads.
	w := cc.workloads
	if w["write"] || w["read"] || w["mix"] || w["failover"] {
		n := slices.Max(append(slices.Clone(cc.writeClients), cfg.clients))
		for _, s := range procSystems {
			var err error
			if s.name == "etcd" {
				err = prepareEtcd(ctx, s, n, value)
			} else {
				err = prepare(ctx, s, n, value)
			}
			if err != nil {
				return fmt.Errorf("%s: prepare: %w", s.name, err)
			}
		}
	}
	type kvRun struct {
		name       string
		clients    int
		writeEvery int
		lin        bool
	}
	var runs []kvRun
	if w["write"] {
		for _, n := range cc.writeClients {
			runs = append(runs, kvRun{"write", n, 1, false})
		}
	}
	if w["read"] {
		runs = append(runs, kvRun{"read", cfg.clients, 0, false}, kvRun{"read-lin", cfg.clients, 0, true})
	}
	if w["mix"] {
		runs = append(runs, kvRun{"mix", cfg.clients, 10, false})
	}
	for _, r := range runs {
		var targets []target
		for _, s := range procSystems {
			switch {
			case s.name == "etcd":
				targets = append(targets, etcdTarget(s, value, r.lin))
			case !r.lin:
				targets = append(targets, zkTarget(s, value))
			}
		}
		if rc != nil && r.writeEvery == 1 {
			targets = append(targets, rc.target(value))
		}
		if rp != nil && r.writeEvery == 1 {
			targets = append(targets, rp.target())
		}
		for _, t := range targets {
			fmt.Fprintf(os.Stderr, "%s x%d on %s ...\n", r.name, r.clients, t.name)
			res, err := measureOps(ctx, t, r.name, r.clients, r.writeEvery, cfg)
			if err != nil {
				return fmt.Errorf("%s x%d on %s: %w", r.name, r.clients, t.name, err)
			}
			rep.KV = append(rep.KV, res)
		}
	}

	// Lock workloads.
	if w["pred"] || w["herd"] {
		for _, s := range procSystems {
			fmt.Fprintf(os.Stderr, "lock warm-up on %s ...\n", s.name)
			if _, err := goLock(ctx, s, "pred", 10, 0); err != nil {
				return fmt.Errorf("%s: lock warm-up: %w", s.name, err)
			}
		}
	}
	for _, recipe := range []string{"pred", "herd"} {
		if !w[recipe] {
			continue
		}
		ns := cc.waiters
		if recipe == "herd" {
			ns = cc.herdWaiters
		}
		for _, n := range ns {
			for _, s := range procSystems {
				fmt.Fprintf(os.Stderr, "%s lock x%d on %s ...\n", recipe, n, s.name)
				r, err := goLock(ctx, s, recipe, n, cc.maxHandoffs)
				switch {
				case err != nil && s.name == "coordrun":
					return fmt.Errorf("%s: %s x%d: %w", s.name, recipe, n, err)
				case err != nil:
					// A peer's failed run leaves its row out rather than
					// the rest of the comparison.
					skip(fmt.Sprintf("%s %s x%d", s.name, recipe, n), err)
					continue
				}
				rep.Locks = append(rep.Locks, r)
			}
		}
	}
	var zkWire []*system // the systems coordrun run works against
	for _, s := range procSystems {
		if s.name != "etcd" {
			zkWire = append(zkWire, s)
		}
	}
	var e *lockEnv
	if w["run"] || w["crash"] {
		if e, err = newLockEnv(cfg.bin, filepath.Join(root, "lock")); err != nil {
			return err
		}
		rep.Job = e.stamp.desc
	}
	if w["run"] {
		for _, s := range zkWire {
			fmt.Fprintf(os.Stderr, "coordrun run handoff warm-up on %s ...\n", s.name)
			if _, err := runHandoff(ctx, e, s, "bench-warmup", 5); err != nil {
				return fmt.Errorf("%s: run warm-up: %w", s.name, err)
			}
		}
		for _, n := range handoffWaiters {
			for _, s := range zkWire {
				fmt.Fprintf(os.Stderr, "coordrun run handoff x%d on %s ...\n", n, s.name)
				r, err := runHandoff(ctx, e, s, fmt.Sprintf("bench-%d", n), n)
				if err != nil {
					return fmt.Errorf("%s: handoff x%d: %w", s.name, n, err)
				}
				r.Workload = "run"
				rep.Locks = append(rep.Locks, r)
			}
		}
	}
	if w["crash"] {
		for _, t := range crashTimeouts {
			for _, s := range procSystems {
				fmt.Fprintf(os.Stderr, "crash to next holder, session timeout %v, on %s ...\n", t, s.name)
				r, err := crashSeries(ctx, e, s, t)
				if err != nil {
					return err
				}
				rep.Crashes = append(rep.Crashes, r)
			}
		}
	}

	// Memory after the load, before failover restarts members.
	for _, s := range procSystems {
		for _, m := range s.members {
			rss, hwm, err := memory(m.proc.pid())
			if err != nil {
				return fmt.Errorf("%s: %w", m.proc.name, err)
			}
			rep.Memory = append(rep.Memory, memRow{System: s.name, Member: m.id, Role: m.role, PID: m.proc.pid(), RSSKiB: rss, HWMKiB: hwm})
		}
	}

	if w["failover"] {
		for _, s := range procSystems {
			for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
				fmt.Fprintf(os.Stderr, "leader failover (%s) on %s ...\n", signalName(sig), s.name)
				r, err := runFailover(ctx, s, recovery[s.name], cc.repeats, sig)
				if err != nil {
					return err
				}
				rep.Failovers = append(rep.Failovers, r)
			}
		}
	}
	for _, nh := range cc.hogs {
		if !w["sessions"] && !w["storm"] {
			break
		}
		for _, s := range procSystems {
			if s.name == "etcd" {
				continue // raw ZooKeeper frames: coordrun and ZooKeeper only
			}
			hs, err := startHogs(nh, root)
			if err != nil {
				return err
			}
			pool, err := startWorkers(cc.sessions, cc.perWorker, root)
			if err != nil {
				hs.stop()
				return err
			}
			if w["sessions"] {
				fmt.Fprintf(os.Stderr, "%d idle sessions on %s, %d busy loops ...\n", cc.sessions, s.name, nh)
				r, err := runSessions(ctx, s, pool, cc.sessionsHold)
				if err != nil {
					pool.stop()
					hs.stop()
					return fmt.Errorf("%s: sessions: %w", s.name, err)
				}
				r.Hogs = nh
				rep.Sessions = append(rep.Sessions, r)
			}
			if w["storm"] {
				fmt.Fprintf(os.Stderr, "session storm of %d on %s, %d busy loops ...\n", cc.sessions, s.name, nh)
				r, err := runStorm(ctx, s, pool)
				if err != nil {
					pool.stop()
					hs.stop()
					return fmt.Errorf("%s: storm: %w", s.name, err)
				}
				r.Hogs = nh
				rep.Storms = append(rep.Storms, r)
			}
			pool.stop()
			hs.stop()
		}
	}
	if w["tree"] {
		for _, s := range procSystems {
			if s.name == "etcd" {
				continue
			}
			fmt.Fprintf(os.Stderr, "tree of %d znodes on %s ...\n", cc.treeNodes, s.name)
			r, kv, err := runTree(ctx, s, cc.treeNodes, value, cfg)
			if err != nil {
				return fmt.Errorf("%s: tree: %w", s.name, err)
			}
			rep.Trees = append(rep.Trees, r)
			rep.KV = append(rep.KV, kv)
		}
	}
	if w["fanout"] {
		for _, s := range procSystems {
			if s.name == "etcd" {
				continue // raw ZooKeeper frames
			}
			fmt.Fprintf(os.Stderr, "watch fan-out to %d watchers on %s ...\n", cc.fanoutWatch, s.name)
			r, err := runFanout(ctx, s, cc.fanoutWatch, cc.fanoutRounds)
			if err != nil {
				return fmt.Errorf("%s: fanout: %w", s.name, err)
			}
			rep.Fanouts = append(rep.Fanouts, r)
		}
	}
	if w["startup"] {
		for _, s := range procSystems {
			fmt.Fprintf(os.Stderr, "fresh ensemble start to first write, %s ...\n", s.name)
			r, err := runStartup(ctx, s.name, root, recovery[s.name], cc.repeats)
			if err != nil {
				return fmt.Errorf("%s startup: %w", s.name, err)
			}
			rep.Startups = append(rep.Startups, r)
		}
	}

	rep.buildHeadline()
	var text strings.Builder
	rep.print(&text)
	fmt.Print(text.String())
	return rep.write(cfg, cc, text.String())
}

// write puts the JSON, the text and the plot where the flags say.
func (rep *compareReport) write(cfg config, cc compareConfig, text string) error {
	jsonPath, plotPath := cfg.jsonPath, cc.plotPath
	if cc.outDir != "" {
		if err := os.MkdirAll(cc.outDir, 0o755); err != nil {
			return err
		}
		if jsonPath == "" {
			jsonPath = filepath.Join(cc.outDir, "bench-compare.json")
		}
		if plotPath == "" {
			plotPath = filepath.Join(cc.outDir, "bench-compare.svg")
		}
		if err := os.WriteFile(filepath.Join(cc.outDir, "bench-compare.txt"), []byte(text), 0o644); err != nil {
			return err
		}
	}
	if plotPath == "" {
		plotPath = "bench-compare.svg"
	}
	if jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", jsonPath)
	}
	if plotPath != "-" {
		if err := rep.plot(plotPath); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", plotPath)
	}
	return nil
}

// zkInstalled says why ZooKeeper cannot run here, if it cannot.
func zkInstalled(cfg config) error {
	if _, err := os.Stat("/usr/share/zookeeper"); err != nil {
		return errors.New("/usr/share/zookeeper not found (Debian: apt-get install zookeeper)")
	}
	if _, err := exec.LookPath(cfg.java); err != nil {
		return fmt.Errorf("%s not found: %w", cfg.java, err)
	}
	return nil
}

func zkWriterFor(value []byte) func(context.Context, string, bool) (writer, error) {
	return func(_ context.Context, addr string, fresh bool) (writer, error) {
		if fresh {
			return &zkWriter{addr: addr, path: "/startup-", value: value, seq: true}, nil
		}
		return &zkWriter{addr: addr, path: nodePath(0), value: value}, nil
	}
}

// etcdWriter puts one key through one member.
type etcdWriter struct {
	c     *clientv3.Client
	key   string
	value string
}

func (w *etcdWriter) write(ctx context.Context) error {
	_, err := w.c.Put(ctx, w.key, w.value)
	return err
}

func (w *etcdWriter) close() { w.c.Close() }

func etcdWriterFor(value []byte) func(context.Context, string, bool) (writer, error) {
	return func(_ context.Context, addr string, _ bool) (writer, error) {
		// gRPC backs off a second after a refused dial; dial only once
		// the member listens.
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return nil, err
		}
		conn.Close()
		c, err := etcdClient(addr)
		if err != nil {
			return nil, err
		}
		return &etcdWriter{c: c, key: etcdKey(0), value: string(value)}, nil
	}
}

// goLock is an in-process lock run on any system: etcd's own recipes
// through its client; on coordrun and ZooKeeper the recipe package's lock
// queue through the coordrun client ("pred") and the naive herd through
// go-zookeeper.
func goLock(ctx context.Context, s *system, recipe string, n, limit int) (handoffResult, error) {
	switch {
	case s.name == "etcd":
		return runEtcdLock(ctx, s, recipe, n, limit)
	case recipe == "pred":
		return runRecipeLock(ctx, s, n, limit)
	}
	return runHerdLock(ctx, s, n, limit)
}

// crashSeries is crashRepeats crash runs of s at session timeout t.
func crashSeries(ctx context.Context, e *lockEnv, s *system, t time.Duration) (crashResult, error) {
	r := crashResult{System: s.name, Requested: t.Seconds()}
	var ds []time.Duration
	var neg time.Duration
	var err error
	if s.name != "etcd" {
		if neg, err = negotiated(ctx, s, t); err != nil {
			return r, fmt.Errorf("%s: negotiate %v: %w", s.name, t, err)
		}
	}
	for i := 0; i < crashRepeats; i++ {
		name := fmt.Sprintf("crash-%v-%d", t, i)
		var d time.Duration
		if s.name == "etcd" {
			d, neg, err = runEtcdCrash(ctx, e, s, name, t)
		} else {
			d, err = runCrash(ctx, e, s, name, t)
		}
		if err != nil {
			return r, fmt.Errorf("%s: crash %v: %w", s.name, t, err)
		}
		ds = append(ds, d)
		r.SamplesMs = append(r.SamplesMs, ms(d))
	}
	slices.Sort(ds)
	r.Negotiated = neg.Seconds()
	r.MedianMs = ms(percentile(ds, 0.5))
	r.OverMs = r.MedianMs - ms(neg)
	return r, nil
}

// systemNames is the systems measured, in table order.
func (rep *compareReport) systemNames() []string {
	var out []string
	for _, s := range allSystems {
		for _, x := range rep.Systems {
			if x.Name == s {
				out = append(out, s)
			}
		}
	}
	return out
}

// buildHeadline derives the headline rows from the results.
func (rep *compareReport) buildHeadline() {
	rep.Headline = nil
	add := func(workload, metric, better, sys string, v float64) {
		var row *metricRow
		for i := range rep.Headline {
			if r := &rep.Headline[i]; r.Workload == workload && r.Metric == metric {
				row = r
			}
		}
		if row == nil {
			rep.Headline = append(rep.Headline, metricRow{Workload: workload, Metric: metric, Better: better, Values: map[string]float64{}})
			row = &rep.Headline[len(rep.Headline)-1]
		}
		row.Values[sys] = v
	}
	for _, x := range rep.KV {
		name := fmt.Sprintf("%s x%d", x.Workload, x.Clients)
		add(name, "ops/s", "higher", x.System, x.OpsPerSec)
		add(name, "p50 ms", "lower", x.System, x.P50Ms)
		add(name, "p99 ms", "lower", x.System, x.P99Ms)
		if x.System != "raft" {
			add(name, "srv CPU µs/op", "lower", x.System, x.CPUPerOpUs)
		}
	}
	for _, x := range rep.Locks {
		name := fmt.Sprintf("%s x%d", x.Workload, x.Waiters)
		add(name, "handoffs/s", "higher", x.System, x.HandoffsPerSec)
		add(name, "p50 ms", "lower", x.System, x.P50Ms)
		add(name, "p99 ms", "lower", x.System, x.P99Ms)
		if x.Notifications >= 0 {
			add(name, "notif/release", "lower", x.System, x.NotifPerRelease)
		}
	}
	for _, x := range rep.Crashes {
		name := fmt.Sprintf("crash %gs", x.Requested)
		add(name, "kill→holder ms", "lower", x.System, x.MedianMs)
		add(name, "timeout s", "-", x.System, x.Negotiated)
		add(name, "minus timeout ms", "lower", x.System, x.OverMs)
	}
	for _, x := range rep.Failovers {
		add(failoverName(x), "writes resume ms", "lower", x.System, x.MedianMs)
	}
	for _, x := range rep.Startups {
		add("fresh start", "first write ms", "lower", x.System, x.MedianMs)
	}
	for _, x := range rep.Fanouts {
		name := fmt.Sprintf("fanout x%d", x.Watches)
		add(name, "set→reply ms", "lower", x.System, x.ReplyMs)
		add(name, "set→last notif ms", "lower", x.System, x.LastMs)
		add(name, "reply→last notif ms", "lower", x.System, x.ReplyToLastMs)
		add(name, "missing notifs", "lower", x.System, float64(x.Missing))
	}
	for _, x := range rep.Sessions {
		name := fmt.Sprintf("sessions x%d%s", x.Sessions, hogSuffix(x.Hogs))
		add(name, "open all ms", "lower", x.System, x.OpenMs)
		add(name, "refused", "lower", x.System, float64(x.Refused))
		add(name, "dropped while idle", "lower", x.System, float64(x.Dropped))
		add(name, "ping p99 ms", "lower", x.System, x.PingP99Ms)
		add(name, "leader changes", "lower", x.System, float64(x.Leaders))
		add(name, "RSS MiB, max member", "lower", x.System, mib(x.MaxRSSKiB))
		add(name, "VmHWM MiB, max member", "lower", x.System, mib(x.MaxHWMKiB))
		add(name, "close all ms", "lower", x.System, x.CloseMs)
	}
	for _, x := range rep.Trees {
		name := fmt.Sprintf("tree %d", x.Nodes)
		add(name, "populate ms", "lower", x.System, x.PopulateMs)
		add(name, "RSS MiB, max member", "lower", x.System, mib(x.RSSKiB))
		add(name, "follower catch-up ms", "lower", x.System, x.CatchUpMs)
	}
	for _, x := range rep.Storms {
		name := fmt.Sprintf("storm x%d%s", x.Sessions, hogSuffix(x.Hogs))
		add(name, "open+create all ms", "lower", x.System, x.OpenMs)
		add(name, "refused", "lower", x.System, float64(x.Refused))
		add(name, "survivors lost", "lower", x.System, float64(x.Lost))
		add(name, "ping p99 ms", "lower", x.System, x.PingP99Ms)
		add(name, "leader changes", "lower", x.System, float64(x.Elections))
		add(name, "ephemerals left - want", "lower", x.System, float64(x.Ephemerals-x.Want))
		add(name, "peak RSS MiB, max member", "lower", x.System, mib(x.PeakRSSKiB))
	}
	rss, hwm := map[string]float64{}, map[string]float64{}
	for _, m := range rep.Memory {
		rss[m.System] += mib(m.RSSKiB) / 3
		hwm[m.System] = math.Max(hwm[m.System], mib(m.HWMKiB))
	}
	for _, s := range rep.systemNames() {
		if _, ok := rss[s]; ok {
			add("memory", "VmRSS MiB/member", "lower", s, rss[s])
			add("memory", "max VmHWM MiB", "lower", s, hwm[s])
		}
	}
	for i := range rep.Headline {
		r := &rep.Headline[i]
		c, ok := r.Values["coordrun"]
		if !ok || r.Better == "-" {
			continue
		}
		for _, o := range []string{"zookeeper", "etcd", "raft", "raft-procs"} {
			if v, ok := r.Values[o]; ok && v > 0 && c >= 0 {
				if r.Ratios == nil {
					r.Ratios = map[string]float64{}
				}
				r.Ratios["coordrun/"+o] = c / v
			}
		}
	}
}

func (rep *compareReport) print(out io.Writer) {
	fmt.Fprintf(out, "\n3 members per system on 127.0.0.1, %d CPUs (shared: compare ratios, not absolutes), %d-byte values, %v per throughput workload after %v warm-up\n",
		rep.CPUs, rep.ValueBytes, time.Duration(rep.DurationSec*float64(time.Second)), time.Duration(rep.WarmupSec*float64(time.Second)))
	for _, s := range rep.Systems {
		fmt.Fprintf(out, "  %-9s  %s\n", s.Name, s.Version)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(out, "  %s\n", s)
	}
	fmt.Fprintln(out, `
write: setData (coordrun, zookeeper; go-zookeeper) / Put (etcd; clientv3) / Apply on the leader (raft); read: getData / serializable Get
(both answered by the member the client is on); read-lin: etcd's linearizable Get; mix: 1 write in 10; one session/client per client,
dealt over the members followers first. pred/herd xN: N waiters, at most the first -max-handoffs handoffs measured; pred = predecessor
watch (coordrun, zookeeper: the lock recipe with its run node; etcd: concurrency.Mutex), herd = all watch the folder/prefix; run xN:
through the real coordrun run binary. notif/release: watch notifications the members sent (coordrun, zookeeper: mntr) or etcd's
clients received, per release that had a waiter.
Ratios are coordrun's value over the other's: above 1 is better for "higher" metrics, below 1 for "lower" ones.`)
	fmt.Fprintln(out)
	names := rep.systemNames()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	hdr := "workload\tmetric\t"
	for _, s := range names {
		hdr += s + "\t"
	}
	var others []string
	for _, s := range names[1:] {
		if names[0] == "coordrun" {
			others = append(others, s)
			hdr += "c/" + abbrev(s) + "\t"
		}
	}
	fmt.Fprintln(tw, hdr+"better\t")
	last := ""
	for _, r := range rep.Headline {
		wl := r.Workload
		if wl == last {
			wl = ""
		}
		last = r.Workload
		line := wl + "\t" + r.Metric + "\t"
		for _, s := range names {
			if v, ok := r.Values[s]; ok {
				line += num(v) + "\t"
			} else {
				line += "-\t"
			}
		}
		for _, o := range others {
			if v, ok := r.Ratios["coordrun/"+o]; ok {
				line += fmt.Sprintf("%.2fx\t", v)
			} else {
				line += "-\t"
			}
		}
		fmt.Fprintln(tw, line+r.Better+"\t")
	}
	tw.Flush()

	printStages(out, rep.KV)
	printLockStages(out, rep.Locks)
	for _, x := range rep.KV {
		if x.Errors > 0 {
			fmt.Fprintf(out, "%s x%d on %s: %d errors, first: %s\n", x.Workload, x.Clients, x.System, x.Errors, x.FirstError)
		}
	}
	for _, x := range rep.Locks {
		if x.Overlaps > 0 || x.Lost > 0 {
			fmt.Fprintf(out, "%s x%d on %s: %d overlaps, %d lost wake-ups\n", x.Workload, x.Waiters, x.System, x.Overlaps, x.Lost)
		}
	}
	if len(rep.Crashes)+len(rep.Failovers)+len(rep.Startups) > 0 {
		fmt.Fprintln(out, "\nsamples (ms): crash = SIGKILL of the holder to the next holder (coordrun/zookeeper: `coordrun run` supervisors;")
		fmt.Fprintln(out, "etcd: a holder process, lease TTL = the timeout); leader killed = SIGKILL of the leader to the first write issued after it")
		fmt.Fprintln(out, "succeeding through a follower; leader stopped = the same with SIGTERM; fresh start = first member started to the first write")
		for _, x := range rep.Crashes {
			fmt.Fprintf(out, "  crash %gs %-9s %s\n", x.Requested, x.System, samples(x.SamplesMs))
		}
		for _, x := range rep.Failovers {
			fmt.Fprintf(out, "  %s %-9s %s\n", failoverName(x), x.System, samples(x.SamplesMs))
		}
		for _, x := range rep.Startups {
			fmt.Fprintf(out, "  fresh start %-9s %s\n", x.System, samples(x.SamplesMs))
		}
	}
	if len(rep.Memory) > 0 {
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "memory\tmember\trole\tVmRSS MiB\tVmHWM MiB\t")
		for _, m := range rep.Memory {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f\t%.1f\t\n", m.System, m.Member, m.Role, mib(m.RSSKiB), mib(m.HWMKiB))
		}
		tw.Flush()
	}
}

// hogSuffix names a scale row's busy loops.
func hogSuffix(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" +%d hogs", n)
}

func abbrev(s string) string {
	if s == "zookeeper" {
		return "zk"
	}
	return s
}

// num prints a value with about three significant digits.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func samples(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(s, " ")
}

func failoverName(x recoveryResult) string {
	if x.Signal == "SIGTERM" {
		return "leader stopped"
	}
	return "leader killed"
}
