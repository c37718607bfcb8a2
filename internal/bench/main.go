// Command bench measures a 3-member coordrun ensemble and, in the same run,
// a 3-member Apache ZooKeeper 3.8 ensemble, driving both with the same
// client (github.com/go-zookeeper/zk) the same way:
//
//   - setData with 1 client and with -clients clients (default 32),
//   - getData with -clients clients,
//
// each client being its own session doing synchronous requests on its own
// znode holding -value-size bytes (default 100). Sessions are dealt round
// robin over the members, followers first. Each workload runs for -duration
// after an unmeasured -warmup; it reports ops/s, p50 and p99 latency, and
// the members' CPU time per op (from /proc). After the workloads it reports
// every member's resident memory (VmRSS, and the peak VmHWM).
//
// -workloads lock (or all, the default) adds the lock workloads of lock.go:
// lock handoff through the real `coordrun run` binary with 10 and 100
// waiters, watch notifications per release (also of a naive herd lock),
// crash-to-next-holder, and the wall time of one `coordrun run -- true`.
//
// Every process runs on 127.0.0.1 with free ports and temporary data dirs;
// all are stopped and the dirs removed on exit, on error and on Ctrl-C. A
// harness killed outright still takes its children with it (Pdeathsig).
//
// Usage (make bench):
//
//	go run ./internal/bench -bin bin/coordrun [-zk=false] [-workloads kv|lock|all] [-duration 5s] [-json FILE]
//
// With -compare (make bench-compare) it measures coordrun against
// ZooKeeper, etcd and bare raft instead; see compare.go.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
)

type config struct {
	bin       string
	baseBin   string // with -compare: a second coordrun binary, measured as coordrun-base
	zk        bool
	java      string
	classpath string
	jvmFlags  string
	duration  time.Duration
	warmup    time.Duration
	clients   int
	valueSize int
	jsonPath  string
	workloads string // kv, lock or all; with -compare a list (compare.go)
}

func main() {
	runHogIfChild()
	runWorkerIfChild()
	runRaftNodeIfChild()
	var cfg config
	_, zkErr := os.Stat("/usr/share/zookeeper")
	flag.StringVar(&cfg.bin, "bin", "bin/coordrun", "coordrun binary")
	flag.StringVar(&cfg.baseBin, "base-bin", "", "with -compare: also measure this coordrun binary (an older build, say) as the system coordrun-base, in the same run")
	flag.BoolVar(&cfg.zk, "zk", zkErr == nil, "also run an Apache ZooKeeper ensemble (default on when /usr/share/zookeeper exists)")
	flag.StringVar(&cfg.java, "java", "java", "java binary for ZooKeeper")
	flag.StringVar(&cfg.classpath, "zk-classpath", zkClasspath(), "ZooKeeper server classpath")
	flag.StringVar(&cfg.jvmFlags, "zk-jvmflags", "", "extra JVM flags for ZooKeeper, space-separated (Debian's zkServer.sh passes none)")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "measured time per workload")
	flag.DurationVar(&cfg.warmup, "warmup", time.Second, "unmeasured warm-up before each workload")
	flag.IntVar(&cfg.clients, "clients", 32, "clients (sessions) in the concurrent workloads")
	flag.IntVar(&cfg.valueSize, "value-size", 100, "znode value size in bytes")
	flag.StringVar(&cfg.jsonPath, "json", "", "also write the results as JSON to this file")
	flag.StringVar(&cfg.workloads, "workloads", "all", "kv (setData/getData), lock (lock.go) or all; with -compare: comma-separated of write, read, mix, pred, herd, run, crash, failover, startup, sessions, storm, fanout, tree, or the groups kv, lock, scale (sessions, storm, fanout, tree), all (all but scale)")
	compare := flag.Bool("compare", false, "compare coordrun with ZooKeeper, etcd and bare raft (compare.go)")
	systems := flag.String("systems", strings.Join(allSystems, ","), "with -compare: systems to run, of "+strings.Join(allSystems, ","))
	writeClients := flag.String("write-clients", "1,32,128", "with -compare: client counts of the write workloads")
	waiters := flag.String("waiters", "10,100,1000", "with -compare: waiter counts of the pred lock workload")
	herdWaiters := flag.String("herd-waiters", "10,100", "with -compare: waiter counts of the herd lock workload")
	hogs := flag.String("hog", "0", "with -compare: busy loops (processes) running during the sessions and storm workloads; a list runs them once per count (e.g. 0,4,12)")
	var cc compareConfig
	flag.IntVar(&cc.maxHandoffs, "max-handoffs", 200, "with -compare: handoffs measured per lock run at most (the queue's first)")
	flag.IntVar(&cc.repeats, "repeats", 3, "with -compare: runs of failover and startup (the median is reported)")
	flag.IntVar(&cc.sessions, "sessions", 10000, "with -compare: sessions of the sessions and storm workloads (-workloads sessions, storm or scale)")
	flag.IntVar(&cc.perWorker, "sessions-per-worker", sessionsPerWorker, "with -compare: sessions each worker process of the sessions and storm workloads holds (a process may open 20,000 files here)")
	flag.StringVar(&closeProfileDir, "profile-close", "", "with -compare: write CPU profiles of coordrun's members, taken while the sessions workload closes its sessions, into this dir")
	flag.Func("coordrun-flags", "extra flags for every coordrun member, space-separated (e.g. \"--heartbeat-timeout 1s\")", func(v string) error {
		coordrunFlags = strings.Fields(v)
		return nil
	})
	flag.DurationVar(&cc.sessionsHold, "sessions-hold", 10*time.Second, "with -compare: how long the sessions workload holds its sessions")
	flag.IntVar(&cc.fanoutWatch, "fanout-watchers", 10000, "with -compare: watchers of the fanout workload (-workloads fanout or scale)")
	flag.IntVar(&cc.fanoutRounds, "fanout-rounds", 20, "with -compare: setData rounds of the fanout workload (the median is reported)")
	flag.IntVar(&cc.treeNodes, "tree-nodes", 200000, "with -compare: znodes of the tree workload (-workloads tree or scale)")
	flag.StringVar(&cc.etcdBin, "etcd", "etcd", "with -compare: etcd server binary (Debian: etcd-server)")
	flag.StringVar(&cc.plotPath, "plot", "", "with -compare: plot file, .svg or .png (default bench-compare.svg in -out or the current dir; - for none)")
	flag.StringVar(&cc.outDir, "out", "", "with -compare: write bench-compare.{txt,json,svg} into this dir")
	flag.Parse()
	if cfg.duration <= 0 || cfg.warmup < 0 || cfg.clients < 1 || cfg.valueSize < 0 {
		fmt.Fprintln(os.Stderr, "bench: -duration must be > 0, -warmup >= 0, -clients >= 1, -value-size >= 0")
		os.Exit(2)
	}
	if *compare {
		var err error
		for _, name := range strings.Split(*systems, ",") {
			if name = strings.TrimSpace(name); !slices.Contains(allSystems, name) {
				err = fmt.Errorf("-systems: unknown system %q (want %s)", name, strings.Join(allSystems, ","))
			} else if !slices.Contains(cc.systems, name) {
				cc.systems = append(cc.systems, name)
			}
		}
		if cfg.baseBin != "" && !slices.Contains(cc.systems, "coordrun-base") {
			cc.systems = append(cc.systems, "coordrun-base")
		}
		if err == nil {
			cc.workloads, err = parseWorkloads(cfg.workloads)
		}
		if err == nil {
			cc.writeClients, err = parseInts(*writeClients)
		}
		if err == nil {
			cc.waiters, err = parseInts(*waiters)
		}
		if err == nil {
			cc.herdWaiters, err = parseInts(*herdWaiters)
		}
		if err == nil {
			cc.hogs, err = parseHogs(*hogs)
		}
		if err == nil && (cc.repeats < 1 || cc.maxHandoffs < 2 || cc.sessions < 1 || cc.sessionsHold <= 0 || cc.fanoutWatch < 1 || cc.fanoutRounds < 1 || cc.treeNodes < 1) {
			err = errors.New("-repeats must be >= 1, -max-handoffs >= 2, -sessions, -fanout-watchers, -fanout-rounds and -tree-nodes >= 1, -sessions-hold > 0")
		}
		if err == nil && (cc.perWorker < 1 || cc.perWorker > 18000) {
			err = fmt.Errorf("-sessions-per-worker %d: want 1 to 18000 (a process may open 20,000 files here; the rest are its own)", cc.perWorker)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
	} else if cfg.workloads != "kv" && cfg.workloads != "lock" && cfg.workloads != "all" {
		fmt.Fprintln(os.Stderr, "bench: -workloads must be kv, lock or all")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills the harness; Pdeathsig then kills the members
	}()
	var err error
	if *compare {
		err = runCompare(ctx, cfg, cc)
	} else {
		err = run(ctx, cfg)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted (%v)", err)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run does everything; its deferred cleanup stops every child and removes
// the temporary dirs whatever happens.
func run(ctx context.Context, cfg config) error {
	root, err := os.MkdirTemp("", "coordrun-bench-")
	if err != nil {
		return err
	}
	defer func() {
		stopAll()
		os.RemoveAll(root)
	}()

	fmt.Fprintf(os.Stderr, "starting coordrun ensemble in %s\n", root)
	coord, err := startCoordrun(ctx, cfg.bin, root+"/coordrun")
	if err != nil {
		return err
	}
	systems := []*system{coord}
	if cfg.zk {
		fmt.Fprintf(os.Stderr, "starting ZooKeeper ensemble\n")
		zks, err := startZooKeeper(ctx, cfg.java, cfg.classpath, strings.Fields(cfg.jvmFlags), root+"/zookeeper")
		if err != nil {
			return err
		}
		systems = append(systems, zks)
	}

	kv := cfg.workloads != "lock"
	value := make([]byte, cfg.valueSize)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	for _, s := range systems {
		if !kv {
			break // the lock workloads need no prepared znodes
		}
		if err := prepare(ctx, s, cfg.clients, value); err != nil {
			return fmt.Errorf("%s: prepare: %w", s.name, err)
		}
	}

	rep := report{runInfo: newRunInfo(cfg), TempDir: root}
	for _, s := range systems {
		rep.Systems = append(rep.Systems, systemInfo{Name: s.name, Version: s.version})
	}
	workloads := []struct {
		op      string
		clients int
	}{{"setData", 1}, {"setData", cfg.clients}, {"getData", cfg.clients}}
	if !kv {
		workloads = nil
	}
	for _, w := range workloads {
		for _, s := range systems {
			fmt.Fprintf(os.Stderr, "%s x%d on %s ...\n", w.op, w.clients, s.name)
			r, err := measure(ctx, s, w.op, w.clients, value, cfg)
			if err != nil {
				return fmt.Errorf("%s x%d on %s: %w", w.op, w.clients, s.name, err)
			}
			rep.Results = append(rep.Results, r)
		}
	}
	if cfg.workloads != "kv" {
		if rep.Lock, err = runLock(ctx, cfg, systems, root); err != nil {
			return err
		}
	}
	for _, s := range systems {
		for _, m := range s.members {
			rss, hwm, err := memory(m.proc.pid())
			if err != nil {
				return fmt.Errorf("%s: %w", m.proc.name, err)
			}
			rep.Memory = append(rep.Memory, memRow{System: s.name, Member: m.id, Role: m.role, PID: m.proc.pid(), RSSKiB: rss, HWMKiB: hwm})
		}
	}

	rep.print(os.Stdout)
	if cfg.jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(cfg.jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// nodePath is client i's znode.
func nodePath(i int) string { return fmt.Sprintf("/bench/c%02d", i) }

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// connect opens a session on one member and waits until it is established.
func connect(ctx context.Context, addr string) (*zk.Conn, error) {
	c, events, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(quietLogger{}))
	if err != nil {
		return nil, err
	}
	timeout := time.After(15 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return c, nil // later events are dropped by the client, never blocking it
			}
		case <-timeout:
			c.Close()
			return nil, fmt.Errorf("no session with %s after 15s", addr)
		case <-ctx.Done():
			c.Close()
			return nil, ctx.Err()
		}
	}
}

// closeAll closes sessions in parallel (each Close may wait up to 1s).
func closeAll(conns []*zk.Conn) {
	var wg sync.WaitGroup
	for _, c := range conns {
		if c != nil {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
	}
	wg.Wait()
}

// prepare creates /bench and one znode per client, then checks that every
// member serves the last one.
func prepare(ctx context.Context, s *system, n int, value []byte) error {
	c, err := connect(ctx, s.members[0].clientAddr)
	if err != nil {
		return err
	}
	defer c.Close()
	acl := zk.WorldACL(zk.PermAll)
	if _, err := c.Create("/bench", nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	for i := 0; i < n; i++ {
		if _, err := c.Create(nodePath(i), value, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	for _, m := range s.members {
		mc, err := connect(ctx, m.clientAddr)
		if err != nil {
			return err
		}
		_, err = mc.Sync(nodePath(n - 1))
		if err == nil {
			var got []byte
			got, _, err = mc.Get(nodePath(n - 1))
			if err == nil && string(got) != string(value) {
				err = fmt.Errorf("member %d: %s holds %d bytes, want %d", m.id, nodePath(n-1), len(got), len(value))
			}
		}
		mc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
