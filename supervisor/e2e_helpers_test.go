package supervisor_test

// Helpers of the end-to-end tests in e2e_test.go: the coordrun binary, the
// job the tests run under it (this test binary, re-executed), the three
// backends (an in-process coordrun ensemble, a standalone Apache
// ZooKeeper, and etcd members), and processes and their cleanup.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
	"github.com/coordrun/coordrun/internal/testkit/zookeeper"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/engine/etcdengine"
	"github.com/coordrun/coordrun/supervisor/engine/zkengine"
)

// --- the binary under test and the job helper -------------------------------

var (
	e2eBin  string // the coordrun binary: $COORDRUN_BIN or built by TestMain
	e2eSelf string // this test binary, re-executed as a job (childMain)
)

// childArg as the first argument turns this test binary into a job.
const childArg = "__e2e_child"

// markVar is set on every process a test starts; the supervisor passes its
// environment on to the watchdog and the job, so each test's cleanup finds
// all of its descendants by it, however they were orphaned or stopped.
const markVar = "COORDRUN_E2E_MARK_ID"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == childArg {
		os.Exit(childMain(os.Args[2:]))
	}
	os.Exit(e2eMain(m))
}

func e2eMain(m *testing.M) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	e2eSelf = self
	defer shared.closeAll()
	rowsSideBySide()
	return testkit.RunWithBinary(m, &e2eBin)
}

// minParallel is how many tests run at once here unless -parallel says
// otherwise: an engine table's three rows, each with up to two parallel
// subtests. The rows wait on clocks and sessions, not on the CPU, but
// -parallel defaults to GOMAXPROCS, and on a 2-core machine the third row
// would wait for one of the others to end.
const minParallel = 6

func rowsSideBySide() {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && runtime.GOMAXPROCS(0) < minParallel {
		_ = flag.Set("test.parallel", strconv.Itoa(minParallel))
	}
}

// childMain is the job: it appends lines to a log file, one write(2) per
// line (O_APPEND keeps lines of concurrent writers whole):
//
//	start <label> <unix-ns> <token> <pid>
//	sig   <label> <unix-ns> <token> <SIGNAME>
//	end   <label> <unix-ns> <token> <how>
//
// Flags: -after FILE waits for FILE to exist first; then it runs -hold
// long (or -forever); -trap records the listed signals (and keeps
// running); -die SIG dies of SIG once it has recorded it; -exitafter N
// exits after N recorded signals; -exit N is the exit code.
func childMain(args []string) int {
	fs := flag.NewFlagSet(childArg, flag.ContinueOnError)
	logPath := fs.String("log", "", "")
	label := fs.String("label", "job", "")
	after := fs.String("after", "", "")
	hold := fs.Duration("hold", 0, "")
	forever := fs.Bool("forever", false, "")
	exitCode := fs.Int("exit", 0, "")
	trap := fs.String("trap", "", "")
	die := fs.String("die", "", "")
	exitAfter := fs.Int("exitafter", 0, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	token := os.Getenv("COORDRUN_FENCING_TOKEN")
	if token == "" {
		token = "-"
	}
	line := func(kind, extra string) {
		_, _ = f.Write([]byte(fmt.Sprintf("%s %s %d %s %s\n", kind, *label, time.Now().UnixNano(), token, extra)))
	}
	sigs := make(chan os.Signal, 16)
	for _, name := range splitList(*trap) {
		signal.Notify(sigs, sigByName(name))
	}
	line("start", strconv.Itoa(os.Getpid()))
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	n := 0
	onSignal := func(s os.Signal) (int, bool) {
		n++
		name := sigName(s.(syscall.Signal))
		line("sig", name)
		if name == *die {
			line("end", "died-"+name)
			dieOf(name)
		}
		if *exitAfter > 0 && n >= *exitAfter {
			line("end", "exitafter")
			return *exitCode, true
		}
		return 0, false
	}
	for *after != "" {
		if _, err := os.Stat(*after); err == nil {
			break
		}
		select {
		case s := <-sigs:
			if code, done := onSignal(s); done {
				return code
			}
		case <-tick.C:
		}
	}
	var holdC <-chan time.Time
	if !*forever {
		holdC = time.After(*hold)
	}
	for {
		select {
		case s := <-sigs:
			if code, done := onSignal(s); done {
				return code
			}
		case <-holdC:
			line("end", "exit")
			return *exitCode
		}
	}
}

// dieOf ends the process by signal name. A Go program cannot restore the
// default action of every signal (SIGUSR1 stays caught), so it becomes a
// shell that signals itself: exec resets caught signals to their default.
func dieOf(name string) {
	_ = syscall.Exec("/bin/sh", []string{"sh", "-c", "kill -s " + name + " $$; sleep 5"}, os.Environ())
	os.Exit(99)
}

var signalNames = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "TERM": syscall.SIGTERM,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "KILL": syscall.SIGKILL, "STOP": syscall.SIGSTOP,
}

func sigByName(name string) syscall.Signal {
	s, ok := signalNames[name]
	if !ok {
		panic("unknown signal " + name)
	}
	return s
}

func sigName(s syscall.Signal) string {
	for n, v := range signalNames {
		if v == s {
			return n
		}
	}
	return strconv.Itoa(int(s))
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// --- small utilities -----------------------------------------------------------

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// store is c as the supervisor's engine sees it; what it creates gets its
// folder's ACL, as the cron commands' records do.
func store(c *client.Client) *zkengine.Conn {
	return zkengine.New(c, zkengine.Options{InheritACL: true})
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// baseEnv is our environment without COORDRUN_* variables, which would
// configure the binary behind the test's back.
//
// GORACE=atexit_sleep_ms=0: the job is this test binary, and one built
// with -race otherwise sleeps a second before it exits.
func baseEnv() []string {
	var env []string
	gorace := "atexit_sleep_ms=0"
	for _, kv := range os.Environ() {
		if v, ok := strings.CutPrefix(kv, "GORACE="); ok {
			gorace = v + " " + gorace
			continue
		}
		if !strings.HasPrefix(kv, "COORDRUN_") {
			env = append(env, kv)
		}
	}
	return append(env, "GORACE="+gorace)
}

// --- /proc ------------------------------------------------------------------

// procState is the state letter of pid ('R', 'S', 'T', 'Z', ...), or 0
// when there is no such process.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}

// alive: pid exists and is not a zombie (a killed job that its stopped
// parent has not reaped yet is dead).
func alive(pid int) bool {
	st := procState(pid)
	return st != 0 && st != 'Z' && st != 'X'
}

// procParent is pid's parent, or 0.
func procParent(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	pp, _ := strconv.Atoi(f[1])
	return pp
}

// allPids lists every process.
func allPids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// pidsWithArgv lists live processes whose argv is exactly argv.
func pidsWithArgv(argv ...string) []int {
	want := []byte(strings.Join(argv, "\x00") + "\x00")
	var out []int
	for _, pid := range allPids() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Equal(b, want) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// uniqueSleep is a sleep(1) duration of about 1000s that no other process
// uses: the processes that sleep it can be found by their argv.
func uniqueSleep() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("1000.%09d", (uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]))%1000000000)
}

// pidsWithEnv lists processes whose environment holds every one of kvs
// exactly. A label a test gives its processes is only unique together
// with the test's mark: the rows of an engine table run side by side.
func pidsWithEnv(kvs ...string) []int {
	var out []int
	for _, pid := range allPids() {
		if pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		env := bytes.Split(b, []byte{0})
		if !slices.ContainsFunc(kvs, func(kv string) bool {
			return !slices.ContainsFunc(env, func(e []byte) bool { return string(e) == kv })
		}) {
			out = append(out, pid)
		}
	}
	return out
}

// childrenOf lists pid's children.
func childrenOf(pid int) []int {
	var out []int
	for _, p := range allPids() {
		if procParent(p) == pid {
			out = append(out, p)
		}
	}
	return out
}

// deathWatch polls pid every 2ms and reports when it is dead (gone or a
// zombie). The returned channel receives exactly once.
func deathWatch(t *testing.T, pid int) <-chan time.Time {
	ch := make(chan time.Time, 1)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			if !alive(pid) {
				ch <- time.Now()
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return ch
}

// --- backends -----------------------------------------------------------------

// backend is an ensemble the supervisors use.
type backend struct {
	name    string
	servers []string              // each member's client address, host:port
	members *ensembletest.Cluster // coordrun in-process members; nil for ZooKeeper and etcd
	zk      bool
	etcd    *testkit.EtcdCluster // etcd members; nil for the ZooKeeper protocol
}

func (b *backend) serverArg() string { return b.serversVia(b.servers) }

// serversVia is the --servers value naming addrs (b's members or proxies
// in front of them) in b's protocol.
func (b *backend) serversVia(addrs []string) string {
	if b.etcd == nil {
		return strings.Join(addrs, ",")
	}
	var s []string
	for _, a := range addrs {
		s = append(s, "etcd://"+a)
	}
	return strings.Join(s, ",")
}

// renewEvery is how long a supervisor may go between two acknowledged
// lease renewals on b: the ZooKeeper protocol's ping interval, or the
// etcd engine's one renewal per third of the TTL. A session ends no
// sooner than the timeout less this after a holder's last act.
func (b *backend) renewEvery() time.Duration {
	if b.etcd != nil {
		return sessionTimeout / 3
	}
	return pingInterval
}

// expiryUncertainty is how late a successor may learn that its
// predecessor's session ended, beyond the ZooKeeper protocol's: etcd
// tells a lease's time to live in whole seconds, so the next in line
// waits out the second in which the lease could have expired.
func (b *backend) expiryUncertainty() time.Duration {
	if b.etcd != nil {
		return time.Second
	}
	return 0
}

// startProxy is a proxy in front of member address target, stopped when
// the test ends: one that reads ZooKeeper frames on the ZooKeeper
// protocol, a plain byte relay for etcd's gRPC.
func (b *backend) startProxy(t testing.TB, target string) *testkit.Proxy {
	t.Helper()
	if b.etcd == nil {
		return testkit.StartProxy(t, target)
	}
	p, err := testkit.NewProxy(testkit.ProxyConfig{Target: target})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// differs skips the rest of an etcd row: the feature works otherwise on
// etcd, as docs/etcd.md's engine × feature table says (why names the row).
func (b *backend) differs(t *testing.T, why string) {
	t.Helper()
	if b.etcd != nil {
		t.Skipf("differs on etcd (docs/etcd.md, engine × feature): %s", why)
	}
}

// notifications sums coordrun_watch_notifications over every member's mntr.
func (b *backend) notifications(t *testing.T) int64 {
	t.Helper()
	var sum int64
	for _, addr := range b.servers {
		out, err := client.FourLetter(testkit.Context(t, 3*time.Second), addr, "mntr", nil)
		if err != nil {
			t.Fatalf("mntr %s: %v", addr, err)
		}
		found := false
		for _, l := range strings.Split(out, "\n") {
			k, v, ok := strings.Cut(l, "\t")
			if ok && k == "coordrun_watch_notifications" {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					t.Fatalf("mntr %s: %q", addr, l)
				}
				sum += n
				found = true
			}
		}
		if !found {
			t.Fatalf("mntr %s has no coordrun_watch_notifications:\n%s", addr, out)
		}
	}
	return sum
}

// leader returns the index of the leading member, or -1.
func (b *backend) leader() int {
	if b.members == nil {
		return -1
	}
	return b.members.Leader()
}

// startCoordrun starts an in-process ensemble of n members on loopback.
// Call close on the result.
func startCoordrun(n int) (*backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ensembletest.Launch(ctx, n, ensembletest.FourLetterWords("srvr", "ruok", "isro", "mbrs", "mntr"))
	if err != nil {
		return nil, err
	}
	b := &backend{name: "coordrun", servers: c.Servers(), members: c}
	// Ready once a client can create a node (a leader is elected and
	// every member's client port answers).
	for _, addr := range b.servers {
		c, err := client.Connect(ctx, client.Config{Servers: []string{addr}, SessionTimeout: 4 * time.Second})
		if err != nil {
			b.close()
			return nil, fmt.Errorf("connect %s: %w", addr, err)
		}
		for {
			err = c.Sync(ctx, "/")
			if err == nil || ctx.Err() != nil {
				break
			}
		}
		c.Close()
		if err != nil {
			b.close()
			return nil, fmt.Errorf("sync on %s: %w", addr, err)
		}
	}
	return b, nil
}

// stopMember closes member i.
func (b *backend) stopMember(i int) { b.members.Stop(i) }

func (b *backend) close() {
	if b.members != nil {
		b.members.Close()
	}
}

// sharedBackends are the backends that many tests use; TestMain stops them.
type sharedBackends struct {
	coordrunOnce sync.Once
	coordrun     *backend
	coordrunErr  error

	zk zookeeper.Shared
}

var shared = sharedBackends{zk: zookeeper.Shared{Prefix: "coordrun-e2e-zk-", FourLetter: client.FourLetter}}

func (s *sharedBackends) closeAll() {
	if s.coordrun != nil {
		s.coordrun.close()
	}
	s.zk.Stop()
}

// sharedCoordrun is a 3-member in-process ensemble for every test that does
// not disturb it.
func sharedCoordrun(t *testing.T) *backend {
	t.Helper()
	shared.coordrunOnce.Do(func() { shared.coordrun, shared.coordrunErr = startCoordrun(3) })
	if shared.coordrunErr != nil {
		t.Fatalf("starting the coordrun ensemble: %v", shared.coordrunErr)
	}
	return shared.coordrun
}

// sharedZooKeeper is a standalone Apache ZooKeeper (Debian's package), as
// ensemble/client's interop tests start it. Without java or the jar the
// test skips, unless CI is set.
func sharedZooKeeper(t *testing.T) *backend {
	t.Helper()
	return &backend{name: "zookeeper", servers: []string{shared.zk.Addr(t)}, zk: true}
}

// etcdBackend is an etcd cluster of n members (1 or 3) of the test's own,
// stopped when it ends; the supervisors reach it as --servers etcd://...
// Without etcd the test skips, unless CI is set.
func etcdBackend(t *testing.T, n int) *backend {
	t.Helper()
	c := testkit.StartEtcd(t, n)
	b := &backend{name: "etcd", etcd: c}
	for _, u := range c.Endpoints() {
		b.servers = append(b.servers, strings.TrimPrefix(u, "http://"))
	}
	return b
}

// forEachBackend runs f against the coordrun ensemble, Apache ZooKeeper
// and etcd, as subtests. The etcd row has a one-member cluster of its own
// and runs beside the other two (they share theirs with other tests, not
// with each other's rows): the three engines cost the time of the slowest.
func forEachBackend(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Run("coordrun", func(t *testing.T) { t.Parallel(); f(t, sharedCoordrun(t)) })
	t.Run("zookeeper", func(t *testing.T) { t.Parallel(); f(t, sharedZooKeeper(t)) })
	t.Run("etcd", func(t *testing.T) { t.Parallel(); f(t, etcdBackend(t, 1)) })
}

// --- a test's processes ----------------------------------------------------------

// Timing of every supervisor unless a test says otherwise: short enough
// for a quick suite, within Validate's rule kill-grace + drift-margin +
// 100ms ≤ session-timeout/2.
const (
	sessionTimeout = 3 * time.Second
	killGrace      = 300 * time.Millisecond
	driftMargin    = 100 * time.Millisecond
	zkMargin       = 300 * time.Millisecond
	pingInterval   = sessionTimeout / 5 // what supervisor.Run configures
)

// rig is one test's world: a backend, a lock, a directory for logs, and
// every process started, killed at cleanup.
type rig struct {
	t    *testing.T
	b    *backend
	dir  string
	lock string
	log  string // the jobs' shared log
	mark string // markVar=value on every process started

	obsOnce sync.Once
	obs     *client.Client

	connOnce sync.Once
	conn     engine.Conn // the test's own session through the engine, any backend
}

func newRig(t *testing.T, b *backend) *rig {
	t.Helper()
	r := &rig{t: t, b: b, dir: t.TempDir(), lock: "e2e-" + randHex(6), mark: markVar + "=" + randHex(8)}
	r.log = filepath.Join(r.dir, "jobs.log")
	t.Cleanup(r.killAll)
	return r
}

// killAll kills every process this test started and every descendant,
// stopped ones included.
func (r *rig) killAll() {
	for round := 0; round < 50; round++ {
		pids := pidsWithEnv(r.mark)
		var live []int
		for _, p := range pids {
			if alive(p) {
				live = append(live, p)
			}
		}
		if len(live) == 0 {
			return
		}
		for _, p := range live {
			_ = syscall.Kill(p, syscall.SIGKILL)
			_ = syscall.Kill(p, syscall.SIGCONT)
		}
		// Give the kernel (and the parents that reap) a moment.
		tick := time.NewTicker(5 * time.Millisecond)
		for i := 0; i < 20; i++ {
			<-tick.C
			gone := true
			for _, p := range live {
				gone = gone && !alive(p)
			}
			if gone {
				break
			}
		}
		tick.Stop()
	}
	r.t.Errorf("cleanup: processes of %s survive SIGKILL: %v", r.mark, pidsWithEnv(r.mark))
}

// proc is a process the test started.
type proc = testkit.Process

// startProc runs bin with args, killed (stopped or not) at cleanup; its
// output is shown if the test failed.
func (r *rig) startProc(name string, env []string, bin string, args ...string) *proc {
	r.t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(baseEnv(), r.mark), env...)
	// Its own group: nothing aimed at the test's group reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return testkit.Spawn(r.t, name, cmd)
}

// runFlags are the run flags of every supervisor; later flags override.
func (r *rig) runFlags(servers string) []string {
	return []string{"run", "--servers", servers, "--name", r.lock,
		"--session-timeout", sessionTimeout.String(), "--kill-grace", killGrace.String(),
		"--drift-margin", driftMargin.String(), "--zookeeper-margin", zkMargin.String(), "-v"}
}

// supervise starts `coordrun run` on the rig's lock with extra flags and
// the job argv.
func (r *rig) supervise(name string, extra []string, argv ...string) *proc {
	return r.superviseVia(r.b.serverArg(), name, extra, nil, argv...)
}

// superviseVia is supervise with another server list and extra env.
func (r *rig) superviseVia(servers, name string, extra, env []string, argv ...string) *proc {
	r.t.Helper()
	args := append(r.runFlags(servers), extra...)
	args = append(append(args, "--"), argv...)
	return r.startProc(name, env, e2eBin, args...)
}

// job is the argv of the helper job with the given label and flags.
func (r *rig) job(label string, flags ...string) []string {
	return append([]string{e2eSelf, childArg, "-log", r.log, "-label", label}, flags...)
}

// path is a file in the rig's directory.
func (r *rig) path(name string) string { return filepath.Join(r.dir, name) }

func (r *rig) touch(name string) {
	r.t.Helper()
	if err := os.WriteFile(r.path(name), nil, 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// rec is one line of the jobs' log.
type rec struct {
	kind, label string
	at          time.Time
	token       int64 // -1 if none
	extra       string
}

func (r *rig) records() []rec {
	b, err := os.ReadFile(r.log)
	if err != nil {
		return nil
	}
	var out []rec
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue
		}
		tok, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			tok = -1
		}
		rc := rec{kind: f[0], label: f[1], at: time.Unix(0, ns), token: tok}
		if len(f) > 4 {
			rc.extra = strings.Join(f[4:], " ")
		}
		out = append(out, rc)
	}
	return out
}

// find returns the first record of kind by label (extra too, if not "").
func (r *rig) find(kind, label, extra string) (rec, bool) {
	for _, x := range r.records() {
		if x.kind == kind && x.label == label && (extra == "" || x.extra == extra) {
			return x, true
		}
	}
	return rec{}, false
}

// await waits up to d for a record.
func (r *rig) await(d time.Duration, kind, label, extra string) rec {
	r.t.Helper()
	var x rec
	testkit.WaitFor(r.t, d, fmt.Sprintf("%q %s %s in the job log", kind, label, extra), func() bool {
		var ok bool
		x, ok = r.find(kind, label, extra)
		return ok
	})
	return x
}

// startPid is the pid the job logged at start (its process group id too:
// the watchdog starts it as a group leader).
func (x rec) pid() int {
	n, _ := strconv.Atoi(strings.Fields(x.extra + " 0")[0])
	return n
}

// observer is the test's own session on the backend.
func (r *rig) observer() *client.Client {
	r.t.Helper()
	r.obsOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := client.Connect(ctx, client.Config{Servers: r.b.servers, SessionTimeout: 10 * time.Second})
		if err != nil {
			r.t.Fatalf("observer: %v", err)
		}
		r.obs = c
		r.t.Cleanup(func() { c.Close() })
	})
	if r.obs == nil {
		r.t.Fatal("no observer session")
	}
	return r.obs
}

// session is the test's own session through the engine the supervisors
// use: the observer on the ZooKeeper protocol, an etcd lease on etcd.
func (r *rig) session() engine.Conn {
	r.t.Helper()
	if r.b.etcd == nil {
		return store(r.observer())
	}
	r.connOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := etcdengine.Dial(ctx, etcdengine.Config{Endpoints: r.b.servers, SessionTimeout: 10 * time.Second})
		if err != nil {
			r.t.Fatalf("etcd observer: %v", err)
		}
		r.conn = c
		r.t.Cleanup(func() { c.Close() })
	})
	if r.conn == nil {
		r.t.Fatal("no etcd observer session")
	}
	return r.conn
}

// state reads the lock's holder and waiters with the observer (no watches).
func (r *rig) state() supervisor.LockState {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r.b.etcd == nil {
		// etcd's reads are linearizable as they are.
		_ = r.observer().Sync(ctx, "/coordrun/locks")
	}
	ls, err := supervisor.Inspect(ctx, r.session(), "/coordrun/locks", []string{r.lock})
	if err != nil || len(ls) != 1 {
		r.t.Fatalf("inspect %s: %v %v", r.lock, ls, err)
	}
	return ls[0]
}

// awaitQueue waits until the lock has a holder and n waiters.
func (r *rig) awaitQueue(d time.Duration, n int) supervisor.LockState {
	r.t.Helper()
	var ls supervisor.LockState
	testkit.WaitFor(r.t, d, fmt.Sprintf("a holder and %d waiters on %s", n, r.lock), func() bool {
		ls = r.state()
		return ls.Holder != nil && len(ls.Waiters) == n
	})
	return ls
}

// statusJSON runs `coordrun status --json <lock>`.
func (r *rig) statusJSON() supervisor.LockState {
	r.t.Helper()
	cmd := exec.Command(e2eBin, "status", "--servers", r.b.serverArg(), "--json", r.lock)
	cmd.Env = append(baseEnv(), r.mark)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		r.t.Fatalf("coordrun status: %v\n%s", err, stderr.String())
	}
	var ls []supervisor.LockState
	if err := json.Unmarshal(out, &ls); err != nil || len(ls) != 1 {
		r.t.Fatalf("coordrun status --json: %q: %v", out, err)
	}
	return ls[0]
}

// watchGone arms a watch on node and reports when it is deleted: by the
// store when the session that owns it ends (on etcd: its lease expires),
// or by a release.
func (r *rig) watchGone(node string) <-chan time.Time {
	r.t.Helper()
	ch := make(chan time.Time, 1)
	if r.b.etcd != nil {
		ctx, cancel := context.WithCancel(context.Background())
		r.t.Cleanup(cancel)
		_, _, ev, err := r.session().GetW(ctx, node)
		if err != nil {
			r.t.Fatalf("watch %s: %v", node, err)
		}
		go func() {
			if e, ok := <-ev; ok && e.Kind == engine.Deleted {
				ch <- time.Now()
			}
		}()
		return ch
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, ok, ev, err := r.observer().ExistsW(ctx, node)
	if err != nil {
		r.t.Fatalf("watch %s: %v", node, err)
	}
	if !ok {
		r.t.Fatalf("watch %s: already gone", node)
	}
	go func() {
		e := <-ev
		if e.Type == wire.EventNodeDeleted {
			ch <- time.Now()
		}
	}()
	return ch
}

// etcdLease is the lease of a holder's key on etcd, to ask etcd itself
// whether it still lives.
type etcdLease struct {
	cli *clientv3.Client
	id  clientv3.LeaseID
}

// leaseOf is the lease node (a key on etcd) is attached to now. Only on
// etcd; node must exist.
func (r *rig) leaseOf(node string) etcdLease {
	r.t.Helper()
	cli := r.session().(*etcdengine.Conn).Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, node)
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		r.t.Fatalf("the lease of %s: %v %v", node, resp, err)
	}
	return etcdLease{cli: cli, id: clientv3.LeaseID(resp.Kvs[0].Lease)}
}

// ttl is what etcd's TimeToLive says is left of the lease, in whole
// seconds rounded down: ≥ 0 while it lives, -1 once it expired or was
// revoked.
func (l etcdLease) ttl(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := l.cli.TimeToLive(ctx, l.id)
	if err != nil {
		t.Fatalf("TimeToLive of lease %x: %v", int64(l.id), err)
	}
	return resp.TTL
}

// sortedStarts returns the start records sorted by time.
func sortedStarts(recs []rec) []rec {
	var out []rec
	for _, x := range recs {
		if x.kind == "start" {
			out = append(out, x)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}
