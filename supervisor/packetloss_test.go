package supervisor_test

// Packet loss in the kernel around the lock's holder: a 3-member ensemble
// of `coordrun server` processes (internal/chaos), several `coordrun run`
// supervisors looping on one lock, and iptables DROP rules
// (internal/netfault) on the members' loopback addresses while a job runs.
// Unlike a proxy's cut, a dropped packet leaves every socket open and
// silent: nobody is told, and recovery rests on the client's timeouts and
// failover alone.
//
//	go test -race -count=1 -run TestPacketLoss ./supervisor/
//	go test -race -count=5 -run 'TestPacketLoss/leader-peer-out' ./supervisor/   # one scenario, five times
//
// The records must show one job at a time, and wherever a quorum stayed
// reachable from the holder (every scenario here), the lock unheld for no
// longer than one session timeout after the fault.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/fencing"
	"github.com/coordrun/coordrun/internal/chaos"
	"github.com/coordrun/coordrun/internal/netfault"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
)

// plossJobArg as the first argument turns this test binary into the
// packet-loss job (see plossJobMain).
const plossJobArg = "__ploss_job"

// plossHostVar names the supervisor incarnation ("h2.7") in the
// environment of the supervisor, its watchdog and its job.
const plossHostVar = "COORDRUN_PLOSS_HOST"

const (
	// plossTimeout is the supervisors' session timeout.
	plossTimeout = 6 * time.Second
	// plossFaultFor is how long a fault lasts: past a whole session
	// timeout, so a holder that does not move to a reachable member
	// loses its lease before the fault is healed.
	plossFaultFor = plossTimeout + time.Second
	// plossHosts supervisors contend: enough that waiters sit on every
	// member, silent ones included.
	plossHosts = 4
	// plossBeat is how often a job notes that it still runs, so its last
	// act is known to within this much of its death.
	plossBeat = 5 * time.Millisecond
)

// Files in a scenario's records directory.
const (
	plossRuns = "runs.log" // start and end lines of every job
	plossPin  = "pin"      // present: the next job to start claims it and runs until end.<pid> exists
)

func init() {
	if len(os.Args) > 1 && os.Args[1] == plossJobArg {
		os.Exit(plossJobMain(os.Args[2:]))
	}
}

// plossJobMain is the job. It appends to runs.log, in readChaosRecs'
// format with times on CLOCK_BOOTTIME, one write(2) per line:
//
//	start <token> <host> <pid> <ns> <pinned>
//	end   <token> <host> <pid> <ns> exit|term
//
// and every plossBeat it replaces beat.<pid> with the time, so that a job
// killed without a word still leaves a last act close to its death. It
// runs for -hold, or, when it claims the pin file, until end.<pid>
// exists. SIGTERM (the watchdog's, when the lease runs out) ends it.
func plossJobMain(args []string) int {
	fs := flag.NewFlagSet(plossJobArg, flag.ContinueOnError)
	dir := fs.String("dir", "", "")
	hold := fs.Duration("hold", 200*time.Millisecond, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	token, err := fencing.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "packet-loss job:", err)
		return 2
	}
	host := os.Getenv(plossHostVar)
	if host == "" {
		host = "-"
	}
	runs, err := os.OpenFile(filepath.Join(*dir, plossRuns), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "packet-loss job:", err)
		return 2
	}
	pid := os.Getpid()
	line := func(kind string, extra any) {
		_, _ = fmt.Fprintf(runs, "%s %d %s %d %d %v\n", kind, token, host, pid, supervisor.BoottimeNow(), extra)
	}
	beat := filepath.Join(*dir, fmt.Sprintf("beat.%d", pid))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	// Exactly one job can rename the pin away.
	pinned := os.Rename(filepath.Join(*dir, plossPin), filepath.Join(*dir, fmt.Sprintf("%s.%d", plossPin, pid))) == nil
	line("start", b2i(pinned))
	var holdC <-chan time.Time
	if !pinned {
		holdC = time.After(*hold)
	}
	end := filepath.Join(*dir, fmt.Sprintf("end.%d", pid))
	tick := time.NewTicker(plossBeat)
	defer tick.Stop()
	for {
		// Written aside and renamed, so that a reader never sees half a
		// number.
		_ = os.WriteFile(beat+".tmp", []byte(strconv.FormatInt(int64(supervisor.BoottimeNow()), 10)), 0o644)
		_ = os.Rename(beat+".tmp", beat)
		if pinned {
			if _, err := os.Stat(end); err == nil {
				line("end", "exit")
				return 0
			}
		}
		select {
		case <-tick.C:
		case <-sigs:
			line("end", "term")
			return 143
		case <-holdC:
			line("end", "exit")
			return 0
		}
	}
}

// plossRun is one job's run, as its records tell it.
type plossRun struct {
	token      int64
	host       string
	pid        int
	start, end supervisor.Boottime // its first and last act
	pinned     bool
	how        string // "exit" or "term" by its own account; "" if killed
}

// readPlossRuns reads the runs in dir, sorted by start, and lists records
// that make no sense (a job's error, a token started twice, an end
// without a start).
func readPlossRuns(dir string) ([]*plossRun, []string) {
	var problems []string
	byToken := map[int64]*plossRun{}
	var runs []*plossRun
	recs := readChaosRecs(filepath.Join(dir, plossRuns))
	for _, x := range recs {
		if x.kind != "start" {
			continue
		}
		if prev, dup := byToken[x.token]; dup {
			problems = append(problems, fmt.Sprintf("token %d started twice: %s (pid %d) and %s (pid %d)", x.token, prev.host, prev.pid, x.host, x.pid))
			continue
		}
		r := &plossRun{token: x.token, host: x.host, pid: x.pid, start: x.at, end: x.at, pinned: len(x.extra) > 0 && x.extra[0] == "1"}
		byToken[x.token] = r
		runs = append(runs, r)
	}
	for _, x := range recs {
		r := byToken[x.token]
		switch {
		case r == nil:
			problems = append(problems, fmt.Sprintf("a %q record of token %d (%s) without a start", x.kind, x.token, x.host))
		case x.kind == "end":
			r.how = strings.Join(x.extra, " ")
			r.end = max(r.end, x.at)
		}
	}
	for _, r := range runs {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("beat.%d", r.pid)))
		if err != nil {
			continue
		}
		if ns, err := strconv.ParseInt(string(b), 10, 64); err == nil {
			r.end = max(r.end, supervisor.Boottime(ns))
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].start < runs[j].start })
	return runs, problems
}

// plossCheck finds overlapping runs (one starting at or before an earlier
// one's last act) and falling tokens, and the longest span within [from,
// until] in which no job ran: its length and where it began.
func plossCheck(runs []*plossRun, from, until supervisor.Boottime) (violations []string, longest time.Duration, at supervisor.Boottime) {
	var last *plossRun // the run with the latest end so far
	for i, r := range runs {
		if last != nil && r.start <= last.end {
			violations = append(violations, fmt.Sprintf("overlap: %s token %d ran [%d, %d] and %s token %d started at %d, %v before the other's last act",
				last.host, last.token, last.start, last.end, r.host, r.token, r.start, time.Duration(last.end-r.start)))
		}
		if i > 0 && r.token <= runs[i-1].token {
			violations = append(violations, fmt.Sprintf("token %d (%s) started after token %d (%s)", r.token, r.host, runs[i-1].token, runs[i-1].host))
		}
		if last == nil || r.end > last.end {
			last = r
		}
	}
	gap := func(a, b supervisor.Boottime) {
		if d := time.Duration(b - a); d > longest {
			longest, at = d, a
		}
	}
	held := from // the lock's state is accounted for up to here
	for _, r := range runs {
		if r.start >= until {
			break
		}
		if r.end <= held {
			continue
		}
		if r.start > held {
			gap(held, r.start)
		}
		held = r.end
	}
	if held < until {
		gap(held, until)
	}
	return violations, longest, at
}

// plossScenario is one fault around the holder.
type plossScenario struct {
	name, what string
	// quorum: a quorum stays reachable from the holder, so the lock may
	// not stay unheld for longer than a session timeout.
	quorum bool
	// survive: the holder must run through the fault, not be killed.
	survive bool
	// endAtFault: the holder's job ends the moment the fault begins, so
	// that its release is in flight through it.
	endAtFault bool
	// rules are the drops, given the holder's member and the leader.
	rules func(c *chaos.Cluster, holder, leader int, rng *rand.Rand) []netfault.Rule
}

// clientSilent drops all client traffic to and from member i.
func clientSilent(c *chaos.Cluster, i int) []netfault.Rule {
	return []netfault.Rule{{To: c.ClientAddr(i)}, {From: c.ClientAddr(i)}}
}

// peerOut drops every packet member i sends to the other members: what it
// sends on the connections it opened, and what its peer proxy sends on
// the ones they opened. The ports keep other ensembles on the same
// loopback IPs (other tests running beside this one) untouched.
func peerOut(c *chaos.Cluster, i int) []netfault.Rule {
	var rules []netfault.Rule
	for j := 0; j < c.N(); j++ {
		if j != i {
			rules = append(rules, netfault.Rule{From: c.IP(i), To: c.PeerAddr(j)}, netfault.Rule{From: c.PeerAddr(i), To: c.IP(j)})
		}
	}
	return rules
}

var plossScenarios = []plossScenario{
	{
		name: "holder-member-silent", what: "all client traffic of the holder's member dropped",
		quorum: true, survive: true,
		rules: func(c *chaos.Cluster, holder, _ int, _ *rand.Rand) []netfault.Rule { return clientSilent(c, holder) },
	},
	{
		name: "two-members-silent", what: "client traffic of the holder's member and one more dropped; the members still reach each other",
		quorum: true, survive: true,
		rules: func(c *chaos.Cluster, holder, _ int, rng *rand.Rand) []netfault.Rule {
			other := (holder + 1 + rng.Intn(c.N()-1)) % c.N()
			return append(clientSilent(c, holder), clientSilent(c, other)...)
		},
	},
	{
		name: "leader-peer-out", what: "the leader's outgoing peer traffic dropped while the holder runs",
		quorum: true,
		rules:  func(c *chaos.Cluster, _, leader int, _ *rand.Rand) []netfault.Rule { return peerOut(c, leader) },
	},
	{
		name: "release-during-leader-change", what: "the holder's job ends as the leader's outgoing peer traffic is dropped",
		quorum: true, endAtFault: true,
		rules: func(c *chaos.Cluster, _, leader int, _ *rand.Rand) []netfault.Rule { return peerOut(c, leader) },
	},
}

func TestPacketLoss(t *testing.T) {
	netfault.ForTest(t) // skips here, before an ensemble is started, where iptables is unavailable
	dir, err := os.MkdirTemp("", "coordrun-packetloss-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("member logs kept in %s", dir)
		} else {
			os.RemoveAll(dir)
		}
	})
	members := startServerProcesses(t, dir)
	for _, sc := range plossScenarios {
		t.Run(sc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := members.WaitHealthy(ctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			w := newPlossWorld(t, members)
			defer w.shutdown()
			w.scenario(sc)
		})
	}
}

// plossWorld is one scenario: the ensemble, the supervisor hosts, their
// exits.
type plossWorld struct {
	t    *testing.T
	r    *rig
	c    *chaos.Cluster
	nf   *netfault.Chain
	dir  string
	seed int64
	hostSet

	// Under hostSet.mu.
	live  map[string]*proc // by label
	exits []plossExit
}

type plossExit struct {
	label string
	code  int
	out   string
}

func newPlossWorld(t *testing.T, c *chaos.Cluster) *plossWorld {
	w := &plossWorld{t: t, c: c, nf: netfault.ForTest(t), seed: time.Now().UnixNano(),
		hostSet: hostSet{stop: make(chan struct{})}, live: map[string]*proc{}}
	w.r = newRig(t, &backend{name: "coordrun server processes", servers: strings.Split(c.Servers(), ",")})
	w.dir = w.r.dir
	for k := 1; k <= plossHosts; k++ {
		w.wg.Add(1)
		go w.hostLoop(k, rand.New(rand.NewSource(w.seed+int64(k))))
	}
	return w
}

// hostLoop is host k: `coordrun run` of the job, again and again, until
// stop is closed.
func (w *plossWorld) hostLoop(k int, rng *rand.Rand) {
	defer w.wg.Done()
	for n := 1; ; n++ {
		label := fmt.Sprintf("h%d.%d", k, n)
		job := []string{e2eSelf, plossJobArg, "-dir", w.dir,
			"-hold", (100*time.Millisecond + time.Duration(rng.Int63n(int64(300*time.Millisecond)))).String()}
		w.mu.Lock()
		if w.stopping {
			w.mu.Unlock()
			return
		}
		sup := w.r.superviseVia(w.c.Servers(), label, []string{"--session-timeout", plossTimeout.String()},
			[]string{plossHostVar + "=" + label}, job...)
		w.live[label] = sup
		w.mu.Unlock()

		<-sup.Done()
		code := sup.ExitCode()
		out := takeOutput(sup)
		w.mu.Lock()
		delete(w.live, label)
		if !w.stopping {
			w.exits = append(w.exits, plossExit{label: label, code: code, out: out})
		}
		w.mu.Unlock()
		// Pacing, so that a host whose supervisor fails at once does not
		// spin.
		select {
		case <-w.stop:
			return
		case <-time.After(time.Duration(rng.Int63n(int64(100 * time.Millisecond)))):
		}
	}
}

// shutdown stops the hosts and kills whatever they left. Deferred, so
// that it runs before the rig's cleanups on any exit from the test: no
// host may start a supervisor after those.
func (w *plossWorld) shutdown() {
	w.once.Do(func() {
		w.halt(func() {
			for _, p := range w.live {
				p.Signal(syscall.SIGKILL)
			}
		})
		w.r.killAll()
	})
}

// startAfter is the first job start with a token above tok, if any.
func (w *plossWorld) startAfter(tok int64) (chaosRec, bool) {
	for _, x := range readChaosRecs(filepath.Join(w.dir, plossRuns)) {
		if x.kind == "start" && x.token > tok {
			return x, true
		}
	}
	return chaosRec{}, false
}

// pin makes the next job to start a long one and returns its start record
// and its supervisor.
func (w *plossWorld) pin() (chaosRec, *proc) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.dir, plossPin), nil, 0o644); err != nil {
		w.t.Fatal(err)
	}
	var target chaosRec
	testkit.WaitFor(w.t, 30*time.Second, "a job to claim the pin", func() bool {
		for _, x := range readChaosRecs(filepath.Join(w.dir, plossRuns)) {
			if x.kind == "start" && len(x.extra) > 0 && x.extra[0] == "1" {
				target = x
				return true
			}
		}
		return false
	})
	var sup *proc
	testkit.WaitFor(w.t, 10*time.Second, "supervisor "+target.host+" to be registered", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		sup = w.live[target.host]
		return sup != nil
	})
	return target, sup
}

// endJob lets a pinned job end.
func (w *plossWorld) endJob(pid int) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.dir, fmt.Sprintf("end.%d", pid)), nil, 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// memberOf is the member whose client address the process pid has an
// established TCP connection to, or -1 unless there is exactly one such
// connection. Outside a reconnect the client keeps one connection, so
// this is the member its session is on.
func (w *plossWorld) memberOf(pid int) int {
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if s, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(s, "]")] = true
		}
	}
	addrs := map[string]int{}
	for i := 0; i < w.c.N(); i++ {
		addrs[w.c.ClientAddr(i)] = i
	}
	found := -1
	for _, table := range []string{"tcp", "tcp6"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(sc.Text())
			if len(f) < 10 || f[3] != "01" || !inodes[f[9]] {
				continue
			}
			i, ok := addrs[procNetAddr(f[2])]
			if !ok {
				continue
			}
			if found >= 0 {
				return -1
			}
			found = i
		}
	}
	return found
}

// procNetAddr turns /proc/net/tcp's "0B00007F:1F90" (or tcp6's form of
// a v4-mapped address) into "127.0.0.11:8080"; "" for anything else.
func procNetAddr(s string) string {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return ""
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return ""
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return ""
	}
	// The kernel prints each 32-bit word in host (little-endian) order.
	switch {
	case len(b) == 4:
	case len(b) == 16 && bytes.Equal(b[:8], make([]byte, 8)) && bytes.Equal(b[8:12], []byte{0xff, 0xff, 0, 0}):
		b = b[12:]
	default:
		return ""
	}
	return fmt.Sprintf("%d.%d.%d.%d:%d", b[3], b[2], b[1], b[0], port)
}

// scenario runs one fault around the holder and checks the records.
func (w *plossWorld) scenario(sc plossScenario) {
	t := w.t
	t.Helper()
	rng := rand.New(rand.NewSource(w.seed))
	testkit.WaitFor(t, 30*time.Second, "the first run", func() bool { _, ok := w.startAfter(-1); return ok })
	target, sup := w.pin()
	holder := -1
	testkit.WaitFor(t, 10*time.Second, "the holder's connection to one member", func() bool {
		holder = w.memberOf(sup.Pid())
		return holder >= 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	leader, err := w.c.Leader(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	rules := sc.rules(w.c, holder, leader, rng)
	t.Logf("%s: holder %s (token %d, job pid %d) on member %d, leader member %d; dropping %v",
		sc.what, target.host, target.token, target.pid, holder+1, leader+1, rules)

	faultAt, faulted := supervisor.BoottimeNow(), time.Now()
	if err := w.nf.Drop(rules...); err != nil {
		t.Fatal(err)
	}
	if sc.endAtFault {
		w.endJob(target.pid)
	}
	// The fault's length: a duration, not a wait for a state.
	timer := time.NewTimer(plossFaultFor)
	supExited := time.Duration(-1)
	select {
	case <-timer.C:
	case <-sup.Done():
		supExited = time.Since(faulted)
		<-timer.C
	}
	survived := alive(target.pid) && sup.Running()
	movedTo := -1 // where the holder's session is at the heal; -1: nowhere (or in between)
	if sup.Running() {
		movedTo = w.memberOf(sup.Pid())
	}
	if err := w.nf.Heal(); err != nil {
		t.Fatal(err)
	}
	if !sc.endAtFault && alive(target.pid) {
		w.endJob(target.pid)
	}
	code := sup.Exit(t, 30*time.Second)
	if supExited < 0 {
		supExited = sup.Ended().Sub(faulted)
	}
	// The next holder, or (if none comes) the lock left unheld to the end
	// of the wait, which the gap check then reports.
	succ, ok := chaosRec{}, false
	testkit.Poll(3*plossTimeout, func() bool { succ, ok = w.startAfter(target.token); return ok })
	until := supervisor.BoottimeNow()
	w.shutdown()

	runs, problems := readPlossRuns(w.dir)
	violations, longest, at := plossCheck(runs, faultAt, until)
	violations = append(problems, violations...)
	var how string
	for _, r := range runs {
		if r.token == target.token {
			how = r.how
		}
	}
	w.mu.Lock()
	codes := map[int]int{}
	var targetOut string
	for _, e := range w.exits {
		codes[e.code]++
		if e.label == target.host {
			targetOut = e.out
		}
	}
	w.mu.Unlock()
	var cs []string
	for c, n := range codes {
		cs = append(cs, fmt.Sprintf("%d×%d", c, n))
	}
	sort.Strings(cs)
	on := "no member"
	if movedTo >= 0 {
		on = fmt.Sprintf("member %d", movedTo+1)
	}
	next := "none"
	if ok {
		next = fmt.Sprintf("%s token %d, %v after the fault", succ.host, succ.token, ms(time.Duration(succ.at-faultAt)))
	}
	survival := strconv.FormatBool(survived)
	if sc.endAtFault {
		survival = "n/a (its job ended at the fault)"
	}
	t.Logf("%s: longest unheld gap %v (from %v after the fault); holder survived the fault: %s, its job ended %q, supervisor exit %d %v after the fault; next holder %s; holder on the leader: %v, at the heal on %s; all supervisor exits (code×count): %s",
		sc.name, ms(longest), ms(time.Duration(at-faultAt)), survival, how, code, ms(supExited), next, holder == leader, on, strings.Join(cs, " "))

	for _, v := range violations {
		t.Error(v)
	}
	if sc.quorum && longest > plossTimeout {
		t.Errorf("the lock was unheld for %v from %v after the fault, longer than the session timeout %v, though a quorum stayed reachable from the holder",
			ms(longest), ms(time.Duration(at-faultAt)), plossTimeout)
	}
	if sc.survive {
		switch {
		case !survived:
			t.Errorf("the holder's job (token %d) did not run through the fault though a quorum stayed reachable: its job ended %q, supervisor exit %d %v after the fault",
				target.token, how, code, ms(supExited))
		case code == supervisor.ExitSessionLost:
			t.Errorf("the holder's supervisor exited %d (session lost) though a quorum stayed reachable", code)
		case code != 0:
			t.Errorf("the holder's supervisor exited %d, want its job's 0", code)
		}
	}
	if t.Failed() {
		t.Logf("holder %s's output:\n%s", target.host, targetOut)
		for _, r := range runs {
			if r.end >= faultAt-supervisor.Boottime(time.Second) && r.start <= until {
				t.Logf("run token %d %s pid %d: %v to %v after the fault, ended %q", r.token, r.host, r.pid,
					ms(time.Duration(r.start-faultAt)), ms(time.Duration(r.end-faultAt)), r.how)
			}
		}
	}
}
