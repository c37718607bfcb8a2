package main

// -compare: the same workloads, load generator and settings against a
// coordrun ensemble, Apache ZooKeeper 3.8, etcd and bare raft in one run,
// with the ratios coordrun/ZooKeeper, coordrun/etcd and coordrun/raft as
// the headline (make bench-compare).
//
// Workloads (-workloads, comma-separated; kv = write,read,mix; lock =
// pred,herd,run,crash,faults; all = everything):
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
//   - run xN: handoff through the real `coordrun run` binary on each of
//     the three engines (lock_handoff.go; etcd: run_etcd.go);
//   - faults (etcd): etcdctl lock against coordrun run under kill -9 and
//     SIGSTOP of the holder, overlaps of each (run_faults.go);
//   - crash T: holder killed, time until the next holder (lock.go; etcd:
//     a holder process with a lease of TTL T);
//   - failover, startup: recovery.go;
//   - memory: every member's VmRSS and VmHWM once the load workloads are
//     done (before failover restarts members).
//
// The report (headline ratios, text, files) is compare_report.go's.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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

// reportOrder is the systems' order in the tables: coordrun-base (-base-bin)
// next to coordrun.
var reportOrder = append([]string{"coordrun", "coordrun-base"}, allSystems[1:]...)

var workloadGroups = map[string][]string{
	"kv":   {"write", "read", "mix"},
	"lock": {"pred", "herd", "run", "crash", "faults"},
	"all":  {"write", "read", "mix", "pred", "herd", "run", "crash", "faults", "failover", "startup"},
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
	Faults    []faultsResult   `json:"faults,omitempty"` // etcdctl lock and coordrun run under faults (run_faults.go)
	Failovers []recoveryResult `json:"failovers"`
	Startups  []recoveryResult `json:"startups"`
	Sessions  []sessionsResult `json:"sessions,omitempty"`
	Storms    []stormResult    `json:"storms,omitempty"`
	Trees     []treeResult     `json:"trees,omitempty"`
	Fanouts   []fanoutResult   `json:"fanouts,omitempty"`
	Memory    []memRow         `json:"memory"`
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
		case "coordrun-base":
			s, err := startCoordrun(ctx, cfg.baseBin, filepath.Join(root, "coordrun-base"))
			if err != nil {
				return fmt.Errorf("-base-bin: %w", err)
			}
			s.name = name
			procSystems = append(procSystems, s)
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
	var e *lockEnv
	if w["run"] || w["crash"] || w["faults"] {
		if e, err = newLockEnv(cfg.bin, filepath.Join(root, "lock")); err != nil {
			return err
		}
		rep.Job = e.stamp.desc
	}
	if w["run"] {
		for _, s := range procSystems {
			fmt.Fprintf(os.Stderr, "coordrun run handoff warm-up on %s ...\n", s.name)
			if _, err := runHandoffOn(ctx, e, s, "bench-warmup", 5); err != nil {
				return fmt.Errorf("%s: run warm-up: %w", s.name, err)
			}
		}
		for _, n := range handoffWaiters {
			for _, s := range procSystems {
				fmt.Fprintf(os.Stderr, "coordrun run handoff x%d on %s ...\n", n, s.name)
				r, err := runHandoffOn(ctx, e, s, fmt.Sprintf("bench-%d", n), n)
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

	if w["faults"] {
		for _, s := range procSystems {
			if s.name != "etcd" {
				continue // etcdctl lock is etcd's own
			}
			bin, err := etcdInstalled(cc.etcdBin)
			if err != nil {
				return err
			}
			rs, err := runFaults(ctx, e, s, bin)
			if err != nil {
				return err
			}
			rep.Faults = append(rep.Faults, rs...)
		}
	}

	// Memory after the load, before failover restarts members.
	for _, s := range procSystems {
		for _, m := range s.members {
			rss, hwm, err := memory(m.proc.pid())
			if err != nil {
				return fmt.Errorf("%s: %w", m.proc.name, err)
			}
			anon, file := rssParts(m.proc.pid())
			rep.Memory = append(rep.Memory, memRow{System: s.name, Member: m.id, Role: m.role, PID: m.proc.pid(), RSSKiB: rss, HWMKiB: hwm, AnonKiB: anon, FileKiB: file})
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
	printFaults(&text, rep.Faults)
	fmt.Print(text.String())
	return rep.write(cfg, cc, text.String())
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
