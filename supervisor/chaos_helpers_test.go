package supervisor_test

// Helpers of the chaos test in chaos_test.go: the job that writes to a
// fenced store, the supervisor hosts that contend for the lock, and the
// checker that reads the records afterwards. They build on the e2e
// helpers (rig, proc, pidsWithEnv, ...) and the test kit.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/fencing"
	"github.com/coordrun/coordrun/internal/chaos"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
)

// chaosJobArg as the first argument turns this test binary into the chaos
// job. TestMain knows only childArg, so the switch happens in init, which
// runs before it.
const chaosJobArg = "__chaos_job"

// chaosHostVar names the supervisor incarnation ("h2.7": host 2, 7th
// start) in the environment of the supervisor, its watchdog and its job:
// the job records it, and a freeze finds every process of that holder by it.
const chaosHostVar = "COORDRUN_CHAOS_HOST"

func init() {
	if len(os.Args) > 1 && os.Args[1] == chaosJobArg {
		os.Exit(chaosJobMain(os.Args[2:]))
	}
}

// Files in a chaos run's records directory.
const (
	chaosRunsLog  = "runs.log"    // the jobs' start, sig, end, refused and error lines
	chaosStore    = "store.data"  // the fenced store: accepted writes, in acceptance order
	chaosFence    = "store.fence" // the store's fencing.Guard state
	chaosPin      = "pin"         // present: the next job to start claims it and runs until stopped
	chaosFaultLog = "faults.log"  // what the test did, when
)

// chaosWritePeriod is how often a running job writes to the store. A job's
// run interval is known to within this much of its death, since its acts
// are what the overlap check sees.
const chaosWritePeriod = 5 * time.Millisecond

// chaosJobMain is the job. Lines it appends (one write(2) each, O_APPEND),
// all times on CLOCK_BOOTTIME, which every process on the host shares:
//
//	runs.log:   start   <token> <host> <pid> <ns> <pinned> <stubborn> <slot>
//	            sig     <token> <host> <pid> <ns> TERM
//	            end     <token> <host> <pid> <ns> exit|term
//	            refused <token> <host> <pid> <ns> <high-water>
//	            error   <token> <host> <pid> <ns> <message>
//	store.data: w       <token> <host> <pid> <ns> <seq>
//
// Every chaosWritePeriod it writes one line to the store through a
// fencing.Guard (inside Guard.Do, so the store's line order is the order
// in which the guard accepted the writes). A stale token ends it with 77,
// as examples/fenced-store does. It runs for -hold, or, when it claims the
// pin file, until it is killed. SIGTERM ends it unless -stubborn, which
// leaves SIGKILL to the watchdog. With -slot (a semaphore's holder) its
// writes are fenced per slot: the guard's lock is the lock's name and the
// slot (the folder of COORDRUN_LOCK_NODE), since tokens rise per slot and
// holders of different slots run side by side; <slot> is "-" without.
func chaosJobMain(args []string) int {
	fs := flag.NewFlagSet(chaosJobArg, flag.ContinueOnError)
	dir := fs.String("dir", "", "")
	hold := fs.Duration("hold", time.Second, "")
	stubborn := fs.Bool("stubborn", false, "")
	slotted := fs.Bool("slot", false, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	token, err := fencing.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos job:", err)
		return 2
	}
	lock, slot := os.Getenv(fencing.EnvLock), "-"
	if *slotted {
		slot = path.Base(path.Dir(os.Getenv(fencing.EnvLockNode)))
		lock += "." + slot
	}
	host := os.Getenv(chaosHostVar)
	if host == "" {
		host = "-"
	}
	runs, err := os.OpenFile(filepath.Join(*dir, chaosRunsLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos job:", err)
		return 2
	}
	store, err := os.OpenFile(filepath.Join(*dir, chaosStore), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos job:", err)
		return 2
	}
	pid := os.Getpid()
	line := func(f *os.File, kind string, extra any) {
		_, _ = fmt.Fprintf(f, "%s %d %s %d %d %v\n", kind, token, host, pid, supervisor.BoottimeNow(), extra)
	}
	guard, err := fencing.OpenGuard(filepath.Join(*dir, chaosFence))
	if err != nil {
		line(runs, "error", strings.ReplaceAll(err.Error(), "\n", " "))
		return 2
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM)
	// Exactly one job can rename the pin away.
	pinned := os.Rename(filepath.Join(*dir, chaosPin), filepath.Join(*dir, fmt.Sprintf("%s.%d", chaosPin, pid))) == nil
	line(runs, "start", fmt.Sprintf("%d %d %s", b2i(pinned), b2i(*stubborn), slot))
	var holdC <-chan time.Time
	if !pinned {
		holdC = time.After(*hold)
	}
	tick := time.NewTicker(chaosWritePeriod)
	defer tick.Stop()
	for seq := 1; ; seq++ {
		err := guard.Do(lock, token, func() error {
			line(store, "w", seq)
			return nil
		})
		var stale *fencing.StaleTokenError
		if errors.As(err, &stale) {
			line(runs, "refused", stale.HighWater)
			return 77
		}
		if err != nil {
			line(runs, "error", strings.ReplaceAll(err.Error(), "\n", " "))
			return 2
		}
		select {
		case <-tick.C:
		case <-sigs:
			line(runs, "sig", "TERM")
			if !*stubborn {
				line(runs, "end", "term")
				return 143
			}
		case <-holdC:
			line(runs, "end", "exit")
			return 0
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// --- records ----------------------------------------------------------------

// chaosRec is one line of runs.log or store.data.
type chaosRec struct {
	kind  string
	token int64
	host  string
	pid   int
	at    supervisor.Boottime
	extra []string
}

func (x chaosRec) String() string {
	return fmt.Sprintf("%s %d %s %d %d %s", x.kind, x.token, x.host, x.pid, x.at, strings.Join(x.extra, " "))
}

// readChaosRecs parses a records file. A line that does not parse (one
// being written while it is read) is skipped.
func readChaosRecs(path string) []chaosRec {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []chaosRec
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		tok, err1 := strconv.ParseInt(f[1], 10, 64)
		pid, err2 := strconv.Atoi(f[3])
		at, err3 := strconv.ParseInt(f[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out = append(out, chaosRec{kind: f[0], token: tok, host: f[2], pid: pid, at: supervisor.Boottime(at), extra: f[5:]})
	}
	return out
}

// chaosFreeze is the span in which a holder was frozen whole: acts before
// stopped happened before the freeze, acts after resumed after it.
type chaosFreeze struct {
	stopped, resumed supervisor.Boottime
}

// chaosRun is one holder's run of the job, as its records tell it.
type chaosRun struct {
	token      int64
	host       string
	pid        int
	start, end supervisor.Boottime // first act and last act (before a freeze, if frozen)
	pinned     bool
	frozen     bool
	writes     int // accepted
	lateWrites int // accepted after the thaw of a freeze
	refused    int
	how        string        // how it ended by its own account; "" if killed
	gap        time.Duration // from its last act to the next run's start; -1 for the last run
}

// chaosReport is what the checker found.
type chaosReport struct {
	runs       []*chaosRun // by start
	accepted   int
	refused    int
	lateWrites int
	highWater  int64
	maxAlive   int // most jobs alive at once (checkChaosSemaphore)
	violations []string
}

// checkChaos reads the records in dir and checks the invariants:
//
//	(a) run intervals never overlap, a frozen holder's counted only up to
//	    its freeze;
//	(b) the store accepted tokens in non-decreasing order, so no write of a
//	    holder was accepted after a newer holder's; a refusal happens only
//	    to a holder that was frozen (anyone else refused was still running
//	    beside a newer holder);
//	(c) successive holders' tokens strictly increase.
func checkChaos(dir string, frozen map[int64]chaosFreeze, guard *fencing.Guard, lock string) chaosReport {
	var rep chaosReport
	bad := func(format string, args ...any) {
		rep.violations = append(rep.violations, fmt.Sprintf(format, args...))
	}
	byToken := map[int64]*chaosRun{}
	act := func(r *chaosRun, at supervisor.Boottime) {
		if f, ok := frozen[r.token]; ok && at >= f.stopped {
			return
		}
		if at > r.end {
			r.end = at
		}
	}
	lines := readChaosRecs(filepath.Join(dir, chaosRunsLog))
	for _, x := range lines {
		if x.kind != "start" {
			continue
		}
		if prev, dup := byToken[x.token]; dup {
			bad("(c) token %d started twice: %s (pid %d) and %s (pid %d)", x.token, prev.host, prev.pid, x.host, x.pid)
			continue
		}
		_, fr := frozen[x.token]
		r := &chaosRun{token: x.token, host: x.host, pid: x.pid, start: x.at, end: x.at, frozen: fr,
			pinned: len(x.extra) > 0 && x.extra[0] == "1"}
		byToken[x.token] = r
		rep.runs = append(rep.runs, r)
	}
	for _, x := range lines {
		r := byToken[x.token]
		if r == nil {
			bad("a %q record of token %d (%s) without a start", x.kind, x.token, x.host)
			continue
		}
		act(r, x.at)
		switch x.kind {
		case "end":
			r.how = strings.Join(x.extra, " ")
		case "error":
			bad("the job of token %d (%s) failed: %s", x.token, x.host, strings.Join(x.extra, " "))
		case "refused":
			r.refused++
			rep.refused++
			hw, _ := strconv.ParseInt(strings.Join(x.extra, ""), 10, 64)
			if hw <= x.token {
				bad("(b) token %d refused against high-water %d, which is not higher", x.token, hw)
			}
			if !r.frozen {
				bad("(b) token %d (%s) was refused at %d while its holder was never frozen: it ran on after a newer holder (%d) wrote",
					x.token, x.host, x.at, hw)
			}
		}
	}
	var mark int64 = -1
	for i, x := range readChaosRecs(filepath.Join(dir, chaosStore)) {
		rep.accepted++
		if x.token < mark {
			bad("(b) store line %d: a write with token %d (%s) was accepted after one with token %d", i+1, x.token, x.host, mark)
		} else {
			mark = x.token
		}
		r := byToken[x.token]
		if r == nil {
			bad("(b) store line %d: token %d (%s) has no start record", i+1, x.token, x.host)
			continue
		}
		r.writes++
		if f, ok := frozen[x.token]; ok && x.at >= f.stopped {
			r.lateWrites++
			rep.lateWrites++
		}
		act(r, x.at)
	}
	rep.highWater = mark
	if hw, ok, err := guard.HighWater(lock); err != nil {
		bad("reading the guard's state: %v", err)
	} else if mark >= 0 && (!ok || int64(hw) != mark) {
		bad("(b) the guard's high-water mark is %d (set: %v), the highest accepted token %d", hw, ok, mark)
	}

	sort.Slice(rep.runs, func(i, j int) bool { return rep.runs[i].start < rep.runs[j].start })
	var last *chaosRun // the run with the latest end so far
	for i, r := range rep.runs {
		if last != nil && r.start <= last.end {
			bad("(a) overlap: %s token %d ran [%d, %d] and %s token %d started at %d, %v before the other's last act",
				last.host, last.token, last.start, last.end, r.host, r.token, r.start, time.Duration(last.end-r.start))
		}
		if i > 0 && r.token <= rep.runs[i-1].token {
			p := rep.runs[i-1]
			bad("(c) token %d (%s, started %d) follows token %d (%s, started %d)", r.token, r.host, r.start, p.token, p.host, p.start)
		}
		if last == nil || r.end > last.end {
			last = r
		}
		r.gap = -1
		if i > 0 {
			rep.runs[i-1].gap = time.Duration(r.start - rep.runs[i-1].end)
		}
	}
	for tok := range frozen {
		r := byToken[tok]
		if r == nil {
			bad("frozen token %d has no run", tok)
		} else if r.refused == 0 {
			bad("(b) the frozen holder of token %d was never refused after its thaw", tok)
		}
	}
	return rep
}

// takeOutput returns what p wrote and forgets it, so that the rig does not
// repeat it in a failed test's log.
func takeOutput(p *proc) string { return p.Out.Take() }

// startServerProcesses starts a 3-member ensemble of `coordrun server`
// processes in dir/ensemble, logging its progress to dir/cluster.log, and
// stops it when the test ends. The raft timing is the kit's: with the
// defaults (a 250ms leader lease) a loaded machine sees a leader change
// every few seconds, each granting every session a fresh timeout, which
// stretches handoffs to three times their length.
func startServerProcesses(t *testing.T, dir string) *chaos.Cluster {
	t.Helper()
	clusterLog, err := os.Create(filepath.Join(dir, "cluster.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clusterLog.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	members, err := chaos.Start(ctx, chaos.Config{Bin: e2eBin, Dir: filepath.Join(dir, "ensemble"), Members: 3, Log: clusterLog,
		Args: testkit.RaftFlags()})
	if err != nil {
		t.Fatalf("starting the ensemble: %v", err)
	}
	t.Cleanup(members.Close)
	return members
}

// --- supervisor hosts --------------------------------------------------------

// chaosIncarnation is one `coordrun run` of a host: the supervisor, and
// the proxies (one per member) through which it reaches the ensemble.
type chaosIncarnation struct {
	label   string
	sup     *proc
	proxies []*testkit.Proxy
	code    int // exit code, once sup.done is closed
}

// cut partitions the incarnation from every member.
func (inc *chaosIncarnation) cut() {
	for _, p := range inc.proxies {
		p.Drop(true)
	}
}

// heal ends cut.
func (inc *chaosIncarnation) heal() {
	for _, p := range inc.proxies {
		p.Drop(false)
	}
}

// chaosExit is how an incarnation ended, and what the test had done to it.
type chaosExit struct {
	label string
	code  int
	fault string // "" if the test aimed no fault at it
}

// hostLoop is host k: it runs `coordrun run` of the job again and again,
// each time through fresh proxies, until stop is closed.
func (w *chaosWorld) hostLoop(k int, rng *rand.Rand) {
	defer w.wg.Done()
	for n := 1; ; n++ {
		select {
		case <-w.stop:
			return
		default:
		}
		label := fmt.Sprintf("h%d.%d", k, n)
		inc := &chaosIncarnation{label: label}
		var via []string
		for _, s := range strings.Split(w.members.Servers(), ",") {
			p := w.r.b.startProxy(w.t, s)
			inc.proxies = append(inc.proxies, p)
			via = append(via, p.Addr())
		}
		job := []string{e2eSelf, chaosJobArg, "-dir", w.dir,
			"-hold", (100*time.Millisecond + time.Duration(rng.Int63n(int64(time.Second)))).String()}
		if rng.Intn(3) == 0 {
			job = append(job, "-stubborn")
		}
		job = append(job, w.jobFlags...)
		w.mu.Lock()
		launch := w.launch
		if launch == nil {
			launch = func(servers, label string, env, job []string) *proc {
				return w.r.superviseVia(servers, label, nil, env, job...)
			}
		}
		inc.sup = launch(w.r.b.serversVia(via), label, []string{chaosHostVar + "=" + label}, job)
		w.live[label] = inc
		w.mu.Unlock()

		<-inc.sup.Done()
		inc.code = inc.sup.ExitCode()
		out := takeOutput(inc.sup)
		for _, p := range inc.proxies {
			p.Close()
		}
		w.mu.Lock()
		delete(w.live, label)
		fault := w.targeted[label]
		stopping := w.stopping
		if !stopping {
			w.exits = append(w.exits, chaosExit{label: label, code: inc.code, fault: fault})
		}
		w.mu.Unlock()
		if f, err := os.Create(filepath.Join(w.dir, "sup-"+label+".log")); err == nil {
			fmt.Fprintf(f, "exit %d (fault %q)\n%s", inc.code, fault, out)
			f.Close()
		}
		// Pacing, so that a host whose supervisor fails at once does
		// not spin.
		select {
		case <-w.stop:
			return
		case <-time.After(time.Duration(rng.Int63n(int64(100 * time.Millisecond)))):
		}
	}
}

// incarnation returns the live incarnation labelled label, waiting for the
// host to register it.
func (w *chaosWorld) incarnation(label string) *chaosIncarnation {
	var inc *chaosIncarnation
	testkit.WaitFor(w.t, 10*time.Second, "supervisor "+label+" to be registered", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		inc = w.live[label]
		return inc != nil
	})
	return inc
}

// hostSet is the supervisor hosts of a fault test: the goroutines that
// start supervisors until stop is closed, and, under mu, whether the test
// is stopping, so that no host starts one after halt.
type hostSet struct {
	stop chan struct{}
	wg   sync.WaitGroup // the hosts
	once sync.Once

	mu       sync.Mutex
	stopping bool
}

// halt stops the hosts: it closes stop and calls kill (with mu held) every
// 50 ms, so that a supervisor started just before is killed too, until
// every host returned.
func (h *hostSet) halt(kill func()) {
	h.mu.Lock()
	h.stopping = true
	h.mu.Unlock()
	close(h.stop)
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		h.mu.Lock()
		kill()
		h.mu.Unlock()
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}
