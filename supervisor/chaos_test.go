package supervisor_test

// The singleton invariant under chaos: several `coordrun run` supervisors
// (the real binary) contend for one lock on a 3-member ensemble of real
// `coordrun server` processes (internal/chaos), while a seeded schedule
// kills, pauses and isolates members and kills, stops, cuts off and
// freezes the holder. Their job
// writes to a store fenced by fencing.Guard. Afterwards the records must
// show one holder at a time, rising tokens, and a store that took no
// write of a holder after a newer holder's.
//
//	go test -race -run TestChaosSingleton ./supervisor                         # short: one fault of each kind
//	COORDRUN_CHAOS_DURATION=3m go test -race -run Chaos -v -timeout 30m ./supervisor
//	COORDRUN_CHAOS_SEED=<seed> ...                                             # the same schedule again
//	COORDRUN_CHAOS_KEEP=1 ...                                                  # keep the records of a passing run too
//	COORDRUN_CHAOS_FAULTS=leader-pause-kill,sup-cut ...                        # the long run draws only these

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/fencing"
	"github.com/coordrun/coordrun/internal/chaos"
	"github.com/coordrun/coordrun/internal/netfault"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
)

// Fault kinds.
const (
	faultLeaderKill      = "leader-kill"       // kill -9 of the leading member, restart after a while
	faultMemberPause     = "member-pause"      // SIGSTOP of a member, SIGCONT after a while
	faultLeaderPartition = "leader-partition"  // the leader cut off from the other members, healed after a while
	faultMemberClientCut = "member-client-cut" // a member unreachable for clients, healed after a while
	faultLeaderPauseKill = "leader-pause-kill" // the leader paused, resumed just long enough to answer what queued up, killed, restarted
	faultSupKill         = "sup-kill"          // kill -9 of the holding supervisor
	faultSupStop         = "sup-stop"          // SIGSTOP of the holding supervisor alone past its session
	faultSupCut          = "sup-cut"           // the holding supervisor cut off from every member
	faultHolderFreeze    = "holder-freeze"     // supervisor, watchdog and job stopped past the session
	faultSupDrop         = "sup-drop"          // the holding supervisor's packets dropped by the kernel (internal/netfault): every socket open and silent
	// The leader paused just under the clients' read timeout (a new
	// leader is elected meanwhile), resumed, and at once the holding
	// supervisor cut off: whatever the deposed leader answers to the
	// pings that queued up during its pause is the holder's last lease
	// proof, and it must be one the new leader honours.
	faultLeaderPauseCut = "leader-pause-cut"
	// Another client (no credentials, open ACL) deletes the holder's
	// queue node, its run node, or the queue node and then, once the
	// holder reacted, the run node; or the whole lock folder at once.
	faultForeignDelete = "foreign-delete"
	faultDeleteAll     = "deleteall"
)

// The short run injects each of these once; the long one draws from
// these and chaosExtraKinds.
var (
	chaosFaultKinds = []string{faultLeaderKill, faultMemberPause, faultSupKill, faultSupStop, faultSupCut, faultHolderFreeze, faultForeignDelete, faultDeleteAll}
	chaosExtraKinds = []string{faultLeaderPartition, faultMemberClientCut, faultLeaderPauseKill, faultLeaderPauseCut}
)

// chaosHosts is how many supervisors contend: enough that one is always
// waiting while another is faulted.
const chaosHosts = 4

// The same schedule on each store, side by side: coordrun server
// processes, and three etcd members (with the fault kinds that apply to
// them, chaosEtcdKinds).
func TestChaosSingleton(t *testing.T) {
	t.Run("coordrun", func(t *testing.T) {
		t.Parallel()
		chaosSingleton(t, "coordrun", chaosFaultKinds, chaosExtraKinds)
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		chaosSingleton(t, "etcd", chaosEtcdKinds, nil)
	})
}

// chaosBackend starts the store of a chaos run: coordrun server processes,
// or three etcd members. The rig's backend names it.
func chaosBackend(t *testing.T, engine, dir string) (*rig, chaosMembers) {
	t.Helper()
	if engine == "etcd" {
		b := etcdBackend(t, 3)
		return newRig(t, b), newEtcdMembers(t, b)
	}
	members := startServerProcesses(t, dir)
	return newRig(t, &backend{name: "coordrun server processes", servers: strings.Split(members.Servers(), ",")}), members
}

func chaosSingleton(t *testing.T, engine string, shortKinds, extraKinds []string) {
	seed, duration := chaosParams(t)
	var slow atomic.Bool // a slow handoff is no violation, but worth a look
	dir := chaosRecordsDir(t, seed, &slow)
	r, members := chaosBackend(t, engine, dir)
	w := newChaosWorld(t, r, members, dir, seed)
	w.slow = &slow
	if slices.Contains(shortKinds, faultSupDrop) {
		w.packetDrops() // a machine without iptables skips before the run, not amid it
	}
	defer w.shutdown()
	for k := 1; k <= chaosHosts; k++ {
		w.wg.Add(1)
		go w.hostLoop(k, rand.New(rand.NewSource(seed+int64(k))))
	}
	w.awaitProgress("the first run")

	began := time.Now()
	if duration == 0 {
		kinds := append([]string(nil), shortKinds...)
		w.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		for _, k := range kinds {
			w.inject(k)
		}
	} else {
		kinds := append(append([]string(nil), shortKinds...), extraKinds...)
		if s := os.Getenv("COORDRUN_CHAOS_FAULTS"); s != "" {
			var own []string
			for _, k := range splitList(s) {
				switch {
				case slices.Contains(kinds, k):
					own = append(own, k)
				case !slices.Contains(chaosFaultKinds, k) && !slices.Contains(chaosExtraKinds, k):
					t.Fatalf("COORDRUN_CHAOS_FAULTS: unknown fault %q", k)
				}
			}
			if len(own) == 0 {
				t.Skipf("COORDRUN_CHAOS_FAULTS=%s: none of them applies to %s", s, engine)
			}
			kinds = own
		}
		var memberKinds []string // in the order of kinds: the seed's, not the map's
		for _, k := range kinds {
			if _, ok := chaosMemberFaults[k]; ok {
				memberKinds = append(memberKinds, k)
			}
		}
		for time.Since(began) < duration {
			k := kinds[w.rng.Intn(len(kinds))]
			_, member := chaosMemberFaults[k]
			// Now and then the ensemble falters while the holder does
			// (but not while the holder fault itself works the leader).
			if !member && k != faultLeaderPauseCut && len(memberKinds) > 0 && w.rng.Intn(4) == 0 {
				w.inject(k, memberKinds[w.rng.Intn(len(memberKinds))])
				continue
			}
			w.inject(k)
		}
	}
	w.shutdown()
	w.verdict(r.lock, began, nil)
}

// verdict checks a finished run's records (the world shut down) with
// checkChaos, adds the problems seen meanwhile, the unexplained exits and
// extra, logs the summary and keeps it in summary.txt, and fails the test
// on any violation.
func (w *chaosWorld) verdict(lock string, began time.Time, extra []string) {
	w.t.Helper()
	g, err := fencing.OpenGuard(filepath.Join(w.dir, chaosFence))
	if err != nil {
		w.t.Fatal(err)
	}
	rep := checkChaos(w.dir, w.frozen, g, lock)
	if w.holders > 1 {
		rep = checkChaosSemaphore(w.dir, w.holders)
		w.t.Logf("at most %d jobs alive at once (the semaphore's N: %d)", rep.maxAlive, w.holders)
		if rep.maxAlive < w.holders {
			// Not a violation of the invariant, but then the run did not
			// test the semaphore.
			extra = append(extra, fmt.Sprintf("never more than %d of %d slots held at once", rep.maxAlive, w.holders))
		}
	}
	rep.violations = append(w.problems, rep.violations...)
	rep.violations = append(rep.violations, w.exitProblems()...)
	rep.violations = append(rep.violations, extra...)
	summary := w.summary(rep, time.Since(began))
	w.t.Log("\n" + summary)
	_ = os.WriteFile(filepath.Join(w.dir, "summary.txt"), []byte(summary), 0o644)
	if len(rep.violations) > 0 {
		w.t.Errorf("%d violations:\n%s", len(rep.violations), strings.Join(rep.violations, "\n"))
	}
}

// chaosParams reads the seed and duration of a chaos run from the
// environment: COORDRUN_CHAOS_SEED (default: the clock),
// COORDRUN_CHAOS_DURATION (default 0: one fault of each kind).
func chaosParams(t *testing.T) (seed int64, duration time.Duration) {
	t.Helper()
	seed = time.Now().UnixNano()
	if s := os.Getenv("COORDRUN_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("COORDRUN_CHAOS_SEED=%q: %v", s, err)
		}
		seed = n
	}
	if s := os.Getenv("COORDRUN_CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("COORDRUN_CHAOS_DURATION=%q: %v", s, err)
		}
		duration = d
	}
	t.Logf("chaos seed %d (COORDRUN_CHAOS_SEED=%d repeats this schedule)", seed, seed)
	return seed, duration
}

// chaosRecordsDir makes the directory of a chaos run's records, which
// outlive a failed test (t.TempDir would not): kept when the test failed,
// slow was set, or COORDRUN_CHAOS_KEEP is set.
func chaosRecordsDir(t *testing.T, seed int64, slow *atomic.Bool) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "coordrun-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || slow.Load() || os.Getenv("COORDRUN_CHAOS_KEEP") != "" {
			t.Logf("chaos records kept in %s (seed %d)", dir, seed)
		} else {
			os.RemoveAll(dir)
		}
	})
	return dir
}

// chaosWorld is one chaos run: the ensemble, the supervisor hosts and
// what the schedule did to them.
type chaosWorld struct {
	t       *testing.T
	r       *rig
	members chaosMembers
	dir     string
	seed    int64
	rng     *rand.Rand     // the schedule's; used by the test goroutine only
	faultWG sync.WaitGroup // member faults in progress
	hostSet
	// launch starts a host's process: the supervisor of job through
	// servers, with env added; nil: `coordrun run` (rig.superviseVia).
	// Whatever it starts must run job (its watchdog and job carrying
	// env) and exit as `coordrun run` does on the faults aimed at it.
	launch func(servers, label string, env, job []string) *proc
	// cutHeals: a supervisor cut off from every member (sup-cut) is let
	// through again once its successor started. `coordrun run` exits
	// 76 while cut off, once its lease ran out; `coordrun cron` stays up,
	// retrying, and learns that its session ended (76) only when it
	// reaches a member again.
	cutHeals bool
	// holders: the supervisors run a semaphore of that many slots (the
	// records are checked by checkChaosSemaphore); jobFlags are added to
	// every job's.
	holders  int
	jobFlags []string
	// lockDir is the lock's folder, if not /coordrun/locks/<lock> (a
	// cron job's lock lies under its root).
	lockDir string

	// Under hostSet.mu.
	live     map[string]*chaosIncarnation // by label
	targeted map[string]string            // label → the fault aimed at it
	exits    []chaosExit

	// The test goroutine's own.
	aimed      map[int64]string         // token → the holder fault aimed at its run
	slowest    map[string]time.Duration // fault → longest wait from it to the next holder's start
	slow       *atomic.Bool             // set when a wait was long
	frozen     map[int64]chaosFreeze
	faults     map[string]int
	problems   []string // violations seen while the schedule ran
	lastPinned int64
	faultLog   *os.File
	began      time.Time
	foreign    *client.Client  // a session without credentials
	drops      *netfault.Chain // sup-drop's iptables chain, made at its first use
}

func newChaosWorld(t *testing.T, r *rig, m chaosMembers, dir string, seed int64) *chaosWorld {
	f, err := os.Create(filepath.Join(dir, chaosFaultLog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &chaosWorld{t: t, r: r, members: m, dir: dir, seed: seed, rng: rand.New(rand.NewSource(seed)),
		hostSet: hostSet{stop: make(chan struct{})}, live: map[string]*chaosIncarnation{}, targeted: map[string]string{},
		aimed: map[int64]string{}, slowest: map[string]time.Duration{}, frozen: map[int64]chaosFreeze{},
		faults: map[string]int{}, faultLog: f, began: time.Now()}
}

// shutdown stops the hosts, kills whatever they left and the ensemble.
// Deferred, so that it runs before the rig's cleanups on any exit from
// the test: no host may start a supervisor after those.
func (w *chaosWorld) shutdown() {
	w.once.Do(func() {
		w.halt(func() {
			for _, inc := range w.live {
				inc.sup.Signal(syscall.SIGKILL)
				inc.sup.Signal(syscall.SIGCONT)
			}
		})
		w.faultWG.Wait()
		// Watchdogs and jobs whose supervisor died end by themselves;
		// killAll makes sure before the records are read.
		w.r.killAll()
		w.members.Close()
	})
}

// logf notes what the schedule does, in the fault log and the test log.
func (w *chaosWorld) logf(format string, args ...any) {
	msg := fmt.Sprintf("[%5.1fs] %s", time.Since(w.began).Seconds(), fmt.Sprintf(format, args...))
	fmt.Fprintf(w.faultLog, "%d %s\n", supervisor.BoottimeNow(), msg)
	w.t.Log(msg)
}

// problem records a violation seen while the schedule runs.
func (w *chaosWorld) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.problems = append(w.problems, msg)
	w.logf("VIOLATION: %s", msg)
}

// pace waits between lo and hi: the schedule's rhythm, not a wait for
// any state.
func (w *chaosWorld) pace(lo, hi time.Duration) {
	w.hold(lo + time.Duration(w.rng.Int63n(int64(hi-lo)+1)))
}

// hold lets d pass while a fault lasts or between faults, or less once the
// world stops; it reports whether the whole d passed.
func (w *chaosWorld) hold(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.stop:
		return false
	}
}

func (w *chaosWorld) runs() []chaosRec { return readChaosRecs(filepath.Join(w.dir, chaosRunsLog)) }

// maxToken is the highest token any job has started with.
func (w *chaosWorld) maxToken() int64 {
	var m int64 = -1
	for _, x := range w.runs() {
		if x.kind == "start" && x.token > m {
			m = x.token
		}
	}
	return m
}

// awaitStartAbove waits for a job to start with a token above tok.
func (w *chaosWorld) awaitStartAbove(tok int64, d time.Duration, what string) chaosRec {
	w.t.Helper()
	var found chaosRec
	testkit.WaitFor(w.t, d, what, func() bool {
		for _, x := range w.runs() {
			if x.kind == "start" && x.token > tok {
				found = x
				return true
			}
		}
		return false
	})
	return found
}

// awaitProgress waits until a new holder has started: the lock is not
// stuck after a fault.
func (w *chaosWorld) awaitProgress(what string) {
	w.t.Helper()
	w.awaitStartAbove(w.maxToken(), 30*time.Second, "a new holder after "+what)
}

// inject runs faults to their end (applied, their effect seen, healed):
// member faults in goroutines, beside at most one holder fault.
func (w *chaosWorld) inject(kinds ...string) {
	w.t.Helper()
	errs := make(chan error, len(kinds))
	running := 0
	for _, k := range kinds {
		w.faults[k]++
		if _, ok := chaosMemberFaults[k]; ok {
			run := w.memberFault(k)
			running++
			w.faultWG.Add(1)
			go func() {
				defer w.faultWG.Done()
				errs <- run()
			}()
		}
	}
	for _, k := range kinds {
		if _, ok := chaosMemberFaults[k]; !ok {
			w.holderFault(k)
		}
	}
	for ; running > 0; running-- {
		if err := <-errs; err != nil {
			w.t.Fatal(err)
		}
	}
	w.awaitProgress(strings.Join(kinds, " + "))
	w.pace(100*time.Millisecond, 600*time.Millisecond)
}

// chaosMemberFaults: on which member (the leader, or any), what is done
// to it, for how long, and how it is undone.
//
// Kill, Restart, Pause and Resume apply to any store; the other faults
// work coordrun members only (the ensemble's own proxies and words).
var chaosMemberFaults = map[string]struct {
	leader      bool
	apply, heal func(c chaosMembers, i int) error
	lo, hi      time.Duration
}{
	faultLeaderKill:  {true, chaosMembers.Kill, chaosMembers.Restart, 300 * time.Millisecond, 1500 * time.Millisecond},
	faultMemberPause: {false, chaosMembers.Pause, chaosMembers.Resume, time.Second, 2500 * time.Millisecond},
	faultLeaderPartition: {true,
		func(c chaosMembers, i int) error { c.(*chaos.Cluster).Partition([]int{i}); return nil },
		func(c chaosMembers, i int) error { c.(*chaos.Cluster).Heal(); return nil },
		time.Second, 3 * time.Second},
	faultMemberClientCut: {false,
		func(c chaosMembers, i int) error { c.(*chaos.Cluster).CutClients(i, true); return nil },
		func(c chaosMembers, i int) error { c.(*chaos.Cluster).CutClients(i, false); return nil },
		500 * time.Millisecond, 2500 * time.Millisecond},
	// A deposed leader that resumes believes it still leads until it
	// hears otherwise; whatever it answers in that moment must not
	// outlast the sessions its successor keeps, even if it dies next.
	faultLeaderPauseKill: {true, chaosMembers.Pause,
		func(m chaosMembers, i int) error {
			c := m.(*chaos.Cluster)
			if err := c.Resume(i); err != nil {
				return err
			}
			// Its moment to answer: until it serves its client port
			// again, at most a second.
			testkit.Poll(time.Second, func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				out, _ := client.FourLetter(ctx, c.DirectClientAddr(i), "ruok", nil)
				return out == "imok"
			})
			if err := c.Kill(i); err != nil {
				return err
			}
			return c.Restart(i)
		},
		1500 * time.Millisecond, 2500 * time.Millisecond},
}

// memberFault draws a member fault's member and length from the
// schedule and returns the function that carries it out, which may run
// beside a holder fault. It gives up early once the world stops.
func (w *chaosWorld) memberFault(kind string) func() error {
	f := chaosMemberFaults[kind]
	i := w.rng.Intn(w.members.N())
	d := f.lo + time.Duration(w.rng.Int63n(int64(f.hi-f.lo)+1))
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		go func() {
			select {
			case <-w.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		who := ""
		if f.leader {
			var err error
			if i, err = w.members.Leader(ctx); err != nil {
				return fmt.Errorf("%s: %w", kind, err)
			}
			who = " (leader)"
		}
		w.logf("%s: member %d%s for %v", kind, i+1, who, ms(d))
		if err := f.apply(w.members, i); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		select { // the fault's length: pacing, not a wait for a state
		case <-time.After(d):
		case <-ctx.Done():
		}
		w.logf("%s: undone on member %d", kind, i+1)
		if err := f.heal(w.members, i); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		return w.members.WaitHealthy(ctx)
	}
}

// pinTarget makes the next job to start a long one and returns its start
// record and its supervisor, marked as the target of kind.
func (w *chaosWorld) pinTarget(kind string) (chaosRec, *chaosIncarnation) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.dir, chaosPin), nil, 0o644); err != nil {
		w.t.Fatal(err)
	}
	var target chaosRec
	testkit.WaitFor(w.t, 30*time.Second, "a job to claim the pin", func() bool {
		for _, x := range w.runs() {
			if x.kind == "start" && x.token > w.lastPinned && len(x.extra) > 0 && x.extra[0] == "1" {
				target = x
				return true
			}
		}
		return false
	})
	w.lastPinned = target.token
	inc := w.incarnation(target.host)
	w.mu.Lock()
	w.targeted[target.host] = kind
	w.mu.Unlock()
	return target, inc
}

// awaitExit waits for a targeted supervisor's exit and checks its code.
func (w *chaosWorld) awaitExit(kind string, inc *chaosIncarnation, d time.Duration, want int) {
	select {
	case <-inc.sup.Done():
		if code := inc.sup.ExitCode(); code != want {
			w.problem("%s: supervisor %s exited %d, want %d", kind, inc.label, code, want)
		}
	case <-time.After(d):
		w.problem("%s: supervisor %s did not exit within %v", kind, inc.label, d)
	}
}

func (w *chaosWorld) holderFault(kind string) {
	w.t.Helper()
	target, inc := w.pinTarget(kind)
	// A member fault just before may still cost the pinned job its
	// lease; then aim at the next one.
	for tries := 1; !alive(target.pid) || !inc.sup.Running(); tries++ {
		if tries == 3 {
			w.t.Fatalf("%s: three pinned jobs in a row ended before the fault", kind)
		}
		w.logf("%s: the pinned job of %s (token %d) ended before the fault; pinning another", kind, target.host, target.token)
		target, inc = w.pinTarget(kind)
	}
	w.aimed[target.token] = kind
	faulted := time.Now()
	w.logf("%s: supervisor %s holding token %d (job pid %d)", kind, target.host, target.token, target.pid)
	jobDead := func(d time.Duration) {
		testkit.WaitFor(w.t, d, fmt.Sprintf("%s: the job of %s to die", kind, target.host), func() bool { return !alive(target.pid) })
	}
	switch kind {
	case faultSupKill:
		// A member fault beside this one may end the supervisor (76)
		// just before the kill.
		wasRunning := inc.sup.Running()
		leaseAlive := w.leaseAlive(kind, target)
		inc.sup.Signal(syscall.SIGKILL)
		jobDead(5 * time.Second)
		leaseAlive()
		succ := w.successor(kind, target, faulted)
		w.logf("%s: %s took over with token %d", kind, succ.host, succ.token)
		if wasRunning {
			w.awaitExit(kind, inc, 5*time.Second, -1)
		}

	case faultSupStop:
		leaseAlive := w.leaseAlive(kind, target)
		inc.sup.Signal(syscall.SIGSTOP)
		jobDead(sessionTimeout + 5*time.Second)
		leaseAlive()
		succ := w.successor(kind, target, faulted)
		w.logf("%s: %s took over with token %d; SIGCONT to %s", kind, succ.host, succ.token, target.host)
		inc.sup.Signal(syscall.SIGCONT)
		w.awaitExit(kind, inc, 15*time.Second, supervisor.ExitSessionLost)

	case faultSupDrop:
		leaseAlive := w.leaseAlive(kind, target)
		chain := w.packetDrops()
		for _, p := range inc.proxies {
			if err := chain.DropAddr(p.Addr()); err != nil {
				w.t.Fatal(err)
			}
		}
		jobDead(sessionTimeout + 5*time.Second)
		leaseAlive()
		succ := w.successor(kind, target, faulted)
		w.logf("%s: %s took over with token %d; packets of %s flow again", kind, succ.host, succ.token, target.host)
		if err := chain.Heal(); err != nil {
			w.t.Fatal(err)
		}
		w.awaitExit(kind, inc, 30*time.Second, supervisor.ExitSessionLost)

	case faultSupCut:
		leaseAlive := w.leaseAlive(kind, target)
		inc.cut()
		jobDead(sessionTimeout + 5*time.Second)
		leaseAlive()
		succ := w.successor(kind, target, faulted)
		w.logf("%s: %s took over with token %d", kind, succ.host, succ.token)
		if w.cutHeals {
			inc.heal()
			w.logf("%s: %s reaches the members again", kind, target.host)
		}
		w.awaitExit(kind, inc, 20*time.Second, supervisor.ExitSessionLost)

	case faultHolderFreeze:
		w.freeze(target, inc)

	case faultForeignDelete, faultDeleteAll:
		w.foreignDelete(kind, target, faulted)
		jobDead(killGrace + 5*time.Second)
		succ := w.successor(kind, target, faulted)
		w.logf("%s: %s took over with token %d", kind, succ.host, succ.token)
		// A member fault beside this one may cost the holder its lease
		// first.
		select {
		case <-inc.sup.Done():
		case <-time.After(10 * time.Second):
		}
		if code := inc.sup.ExitCode(); code != supervisor.ExitLockLost && code != supervisor.ExitSessionLost {
			w.problem("%s: supervisor %s exited %d, want %d (lock lost)", kind, inc.label, code, supervisor.ExitLockLost)
		}

	case faultLeaderPauseCut:
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		l, err := w.members.Leader(ctx)
		cancel()
		if err != nil {
			w.t.Fatal(err)
		}
		pause := sessionTimeout*2/3 - 150*time.Millisecond // the client's read timeout, less a little
		w.logf("%s: member %d (leader) paused for %v", kind, l+1, ms(pause))
		if err := w.members.Pause(l); err != nil {
			w.t.Fatal(err)
		}
		w.hold(pause)
		if err := w.members.Resume(l); err != nil {
			w.t.Fatal(err)
		}
		w.hold(30 * time.Millisecond) // the deposed leader's moment to answer
		inc.cut()
		faulted = time.Now() // the successor's wait starts with the cut
		w.logf("%s: member %d resumed, %s cut off", kind, l+1, target.host)
		jobDead(sessionTimeout + 5*time.Second)
		succ := w.successor(kind, target, faulted)
		w.logf("%s: %s took over with token %d", kind, succ.host, succ.token)
		w.awaitExit(kind, inc, 20*time.Second, supervisor.ExitSessionLost)
		ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := w.members.WaitHealthy(ctx); err != nil {
			w.t.Fatal(err)
		}
	}
}

// packetDrops is the run's iptables chain (internal/netfault); without
// iptables the test skips, unless CI is set.
func (w *chaosWorld) packetDrops() *netfault.Chain {
	if w.drops == nil {
		w.drops = netfault.ForTest(w.t)
	}
	return w.drops
}

// foreignDelete deletes lock nodes of target's holder as a client without
// credentials can while the lock's ACL is open.
func (w *chaosWorld) foreignDelete(kind string, target chaosRec, faulted time.Time) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := w.foreignClient(ctx)
	dir := path.Join("/coordrun/locks", w.r.lock)
	if len(target.extra) > 2 && target.extra[2] != "-" {
		dir = path.Join(dir, target.extra[2]) // a semaphore's: the holder's slot
	}
	retry := func(what string, op func() error) {
		for {
			err := op()
			if err == nil {
				return
			}
			switch {
			case errors.Is(err, client.ErrSessionExpired):
				// The harness's own session, idle since its last fault,
				// did not survive the faults in between; it is not the
				// subject here, the supervisors are. Say so, and go on
				// with a new one.
				w.logf("%s: the foreign client's session expired (%v); a new one carries on", kind, err)
				w.foreign = nil
				c = w.foreignClient(ctx)
			case !errors.Is(err, client.ErrConnectionLoss):
				w.t.Fatalf("%s: %s: %v", kind, what, err)
			}
		}
	}
	var kids []string
	retry("list "+dir, func() (err error) { kids, _, err = c.Children(ctx, dir); return })
	if kind == faultDeleteAll {
		w.logf("%s: %s and its %d nodes, while %s holds token %d", kind, dir, len(kids), target.host, target.token)
		retry("deleteall", func() error {
			for {
				ops := []wire.MultiOp{}
				for _, k := range kids {
					ops = append(ops, wire.MultiOp{Type: wire.OpDelete, Path: path.Join(dir, k), Version: -1})
				}
				ops = append(ops, wire.MultiOp{Type: wire.OpDelete, Path: dir, Version: -1})
				_, err := c.Multi(ctx, ops...)
				if !errors.Is(err, wire.ErrNotEmpty) && !errors.Is(err, wire.ErrNoNode) {
					return err
				}
				// A contender came or went since the listing: the folder
				// goes whole, with whatever it holds now.
				retry("list "+dir, func() (err error) { kids, _, err = c.Children(ctx, dir); return })
			}
		})
		return
	}
	queue := ""
	for _, k := range kids {
		st, ok, err := c.Exists(ctx, path.Join(dir, k))
		if err == nil && ok && st.Czxid == target.token {
			queue = path.Join(dir, k)
		}
	}
	if queue == "" {
		w.t.Fatalf("%s: no queue node with token %d in %v", kind, target.token, kids)
	}
	run := path.Join(dir, "run")
	switch w.rng.Intn(3) {
	case 0:
		w.logf("%s: the queue node of %s (token %d)", kind, target.host, target.token)
		retry("delete "+queue, func() error { return c.Delete(ctx, queue, -1) })
	case 1:
		w.logf("%s: the run node of %s (token %d)", kind, target.host, target.token)
		retry("delete "+run, func() error { return c.Delete(ctx, run, -1) })
	default:
		w.logf("%s: the queue node of %s (token %d), then its run node", kind, target.host, target.token)
		retry("delete "+queue, func() error { return c.Delete(ctx, queue, -1) })
		testkit.WaitFor(w.t, 10*time.Second, kind+": the holder's job to hear of it", func() bool {
			for _, x := range w.runs() {
				if x.kind == "sig" && x.token == target.token || x.kind == "end" && x.token == target.token {
					return true
				}
			}
			return false
		})
		retry("delete "+run, func() error {
			err := c.Delete(ctx, run, -1)
			if errors.Is(err, wire.ErrNoNode) {
				return nil // released already: the job ended on its TERM
			}
			return err
		})
	}
}

// foreignClient is a session without credentials, for foreign deletes.
func (w *chaosWorld) foreignClient(ctx context.Context) *client.Client {
	w.t.Helper()
	if w.foreign == nil {
		c, err := client.Connect(ctx, client.Config{Servers: strings.Split(w.members.Servers(), ","), SessionTimeout: 10 * time.Second})
		if err != nil {
			w.t.Fatalf("foreign client: %v", err)
		}
		w.foreign = c
		w.t.Cleanup(func() { c.Close() })
	}
	return w.foreign
}

// successor waits for the next holder after a fault aimed at target's
// holder at faulted, and keeps the longest such wait per fault.
func (w *chaosWorld) successor(kind string, target chaosRec, faulted time.Time) chaosRec {
	w.t.Helper()
	succ := w.awaitStartAbove(target.token, sessionTimeout+25*time.Second, kind+": a successor")
	d := time.Since(faulted)
	if d > w.slowest[kind] {
		w.slowest[kind] = d
	}
	if d > 2*sessionTimeout {
		w.slow.Store(true)
		w.logf("%s: slow: the successor of token %d started %v after the fault", kind, target.token, ms(d))
	}
	return succ
}

// freeze stops every process of the holder (as a paused VM would), waits
// until another holder has taken the lock, then resumes the job alone, so
// that it acts before its watchdog can: its next write must be refused.
// Then the rest resumes, and the supervisor must exit 76.
func (w *chaosWorld) freeze(target chaosRec, inc *chaosIncarnation) {
	w.t.Helper()
	kind := faultHolderFreeze
	// Its own row's processes only: the engine rows run side by side
	// and share host names.
	pids := pidsWithEnv(w.r.mark, chaosHostVar+"="+target.host)
	hasJob := false
	for _, p := range pids {
		hasJob = hasJob || p == target.pid
		_ = syscall.Kill(p, syscall.SIGSTOP)
	}
	if hasJob && len(pids) < 3 {
		w.t.Fatalf("%s: processes of %s are %v; want the supervisor, its watchdog and job %d", kind, target.host, pids, target.pid)
	}
	testkit.WaitFor(w.t, 5*time.Second, "every process of "+target.host+" to stop", func() bool {
		for _, p := range pids {
			if st := procState(p); st != 'T' && st != 't' && alive(p) {
				return false
			}
		}
		return true
	})
	if !alive(target.pid) {
		// A member fault beside this one cost the job its lease first.
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGCONT)
		}
		w.logf("%s: the job of %s ended before the freeze; nothing frozen", kind, target.host)
		return
	}
	if !hasJob {
		w.t.Fatalf("%s: processes of %s are %v, without its job %d", kind, target.host, pids, target.pid)
	}
	stopped, faulted := supervisor.BoottimeNow(), time.Now()
	w.logf("%s: stopped %s: pids %v", kind, target.host, pids)

	// A job stopped inside Guard.Do holds the guard's lock: the successor
	// then waits for it, and after the thaw the frozen job's write in
	// progress (checked before the freeze) lands first, and maybe a few
	// more before the successor wins the lock.
	inDo := holdsFlock(target.pid)
	succ := w.successor(kind, target, faulted)
	if !inDo {
		wrote := testkit.Poll(10*time.Second, func() bool {
			for _, x := range readChaosRecs(filepath.Join(w.dir, chaosStore)) {
				if x.token > target.token {
					return true
				}
			}
			return false
		})
		if !wrote {
			w.problem("%s: the successor %s (token %d) wrote nothing within 10s though the store was free", kind, succ.host, succ.token)
		}
	}
	w.logf("%s: %s took over with token %d (the frozen job holds the store's lock: %v); SIGCONT to job %d",
		kind, succ.host, succ.token, inDo, target.pid)

	resumed := supervisor.BoottimeNow()
	w.frozen[target.token] = chaosFreeze{stopped: stopped, resumed: resumed}
	_ = syscall.Kill(target.pid, syscall.SIGCONT)
	refused := testkit.Poll(10*time.Second, func() bool {
		for _, x := range w.runs() {
			if x.kind == "refused" && x.token == target.token {
				return true
			}
		}
		return false
	})
	if !refused {
		w.problem("%s: the resumed job of token %d was not refused by the store within 10s", kind, target.token)
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGCONT)
	}
	w.logf("%s: resumed %s; its job refused: %v", kind, target.host, refused)
	w.awaitExit(kind, inc, 15*time.Second, supervisor.ExitSessionLost)
}

// holdsFlock reports whether pid holds (not waits for) a flock(2) lock,
// by /proc/locks.
func holdsFlock(pid int) bool {
	b, _ := os.ReadFile("/proc/locks")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[1] == "FLOCK" && f[4] == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}

// exitProblems lists supervisors that ended in a way nothing explains:
// an untargeted supervisor ends with its job's 0, or with 76 when a
// member fault cost it its lease.
func (w *chaosWorld) exitProblems() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, e := range w.exits {
		if e.fault == "" && e.code != 0 && e.code != supervisor.ExitSessionLost {
			out = append(out, fmt.Sprintf("supervisor %s exited %d with no fault aimed at it (see sup-%s.log)", e.label, e.code, e.label))
		}
	}
	return out
}

func (w *chaosWorld) summary(rep chaosReport, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos summary (seed %d, %v of faults)\n", w.seed, elapsed.Round(time.Second))
	handoffs := 0
	for i := 1; i < len(rep.runs); i++ {
		h1, _, _ := strings.Cut(rep.runs[i-1].host, ".")
		h2, _, _ := strings.Cut(rep.runs[i].host, ".")
		if h1 != h2 {
			handoffs++
		}
	}
	fmt.Fprintf(&b, "  runs %d, handoffs %d (to another host)\n", len(rep.runs), handoffs)
	// How close the successor came: after a release, the next start;
	// after a holder fault, how much of the lease was left when the
	// faulted job's last act happened.
	least := map[string]time.Duration{}
	for _, r := range rep.runs {
		kind := w.aimed[r.token]
		if kind == "" {
			kind = "no holder fault"
		}
		if g, seen := least[kind]; r.gap >= 0 && (!seen || r.gap < g) {
			least[kind] = r.gap
		}
	}
	var gaps []string
	for k, g := range least {
		gaps = append(gaps, fmt.Sprintf("%s %v", k, ms(g)))
	}
	sort.Strings(gaps)
	fmt.Fprintf(&b, "  least gap from a holder's last act to the next start: %s\n", strings.Join(gaps, ", "))
	var waits []string
	for k, d := range w.slowest {
		waits = append(waits, fmt.Sprintf("%s %v", k, ms(d)))
	}
	sort.Strings(waits)
	fmt.Fprintf(&b, "  longest wait from a holder fault to the next start: %s\n", strings.Join(waits, ", "))
	var kinds []string
	total := 0
	for k, n := range w.faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "  faults %d: %s\n", total, strings.Join(kinds, ", "))
	fmt.Fprintf(&b, "  store: accepted writes %d, refused stale writes %d, writes of frozen holders accepted after their freeze %d, high-water %d\n",
		rep.accepted, rep.refused, rep.lateWrites, rep.highWater)
	w.mu.Lock()
	codes := map[int]int{}
	for _, e := range w.exits {
		codes[e.code]++
	}
	w.mu.Unlock()
	var cs []string
	for c, n := range codes {
		cs = append(cs, fmt.Sprintf("%d×%d", c, n))
	}
	sort.Strings(cs)
	fmt.Fprintf(&b, "  supervisor exits (code×count): %s\n", strings.Join(cs, " "))
	fmt.Fprintf(&b, "  violations %d\n", len(rep.violations))
	return b.String()
}

// The checker on made-up records: it must pass a clean history and catch
// each kind of violation, so that a chaos run without violations means
// something.
func TestChaosChecker(t *testing.T) {
	type line struct {
		file string // chaosRunsLog or chaosStore
		text string // kind token host pid at extra
	}
	run := func(s string) line { return line{chaosRunsLog, s} }
	w := func(s string) line { return line{chaosStore, "w " + s + " 1"} }
	clean := []line{
		run("start 10 a 1 100 0 0"), w("10 a 1 110"), w("10 a 1 120"), run("end 10 a 1 130 exit"),
		run("start 12 b 2 140 0 0"), w("12 b 2 150"), run("end 12 b 2 160 exit"),
	}
	// a is frozen from 115 to 200; b runs meanwhile; a's write after the
	// thaw is refused.
	frozenA := map[int64]chaosFreeze{10: {stopped: 115, resumed: 200}}
	freeze := []line{
		run("start 10 a 1 100 1 0"), w("10 a 1 110"),
		run("start 12 b 2 140 0 0"), w("12 b 2 150"),
		run("refused 10 a 1 205 12"), run("end 12 b 2 260 exit"),
	}
	for _, tc := range []struct {
		name   string
		lines  []line
		frozen map[int64]chaosFreeze
		want   string // "" for no violation, else a substring of one
	}{
		{"clean", clean, nil, ""},
		{"overlap", append(append([]line(nil), clean...), w("10 a 1 145")), nil, "(a) overlap"},
		{"stale write accepted", append(append([]line(nil), clean...), w("10 a 1 155")), nil, "(b) store line 4"},
		{"tokens fall", []line{run("start 12 b 2 100 0 0"), run("end 12 b 2 110 exit"), run("start 10 a 1 120 0 0")}, nil, "(c) token 10"},
		{"refused but never frozen", append(append([]line(nil), clean...), run("refused 10 a 1 131 12")), nil, "never frozen"},
		{"frozen and refused", freeze, frozenA, ""},
		{"frozen, late write accepted after the successor's", append(append([]line(nil), freeze...), w("10 a 1 201")), frozenA, "(b) store line 3"},
		{"frozen, never refused", freeze[:4], frozenA, "never refused"},
		{"frozen, overlap before the freeze", append(append([]line(nil), freeze...), w("10 a 1 112"), run("start 9 c 3 111 0 0")), frozenA, "(a) overlap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]*strings.Builder{chaosRunsLog: {}, chaosStore: {}}
			var high int64
			for _, l := range tc.lines {
				files[l.file].WriteString(l.text + "\n")
				if f := strings.Fields(l.text); l.file == chaosStore {
					if tok, _ := strconv.ParseInt(f[1], 10, 64); tok > high {
						high = tok
					}
				}
			}
			for name, b := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			g, err := fencing.OpenGuard(filepath.Join(dir, chaosFence))
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Accept("l", fencing.Token(high)); err != nil {
				t.Fatal(err)
			}
			rep := checkChaos(dir, tc.frozen, g, "l")
			got := strings.Join(rep.violations, "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("violations in a good history:\n%s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("want a violation with %q, got:\n%s", tc.want, got)
			}
		})
	}
}
