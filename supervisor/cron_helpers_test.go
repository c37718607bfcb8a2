package supervisor_test

// Helpers of the cron tests in cron_test.go. They build on the e2e
// helpers (e2eBin, startCoordrun, newRig, waitUntil, ...) and prefix their
// own names with "cron" so as not to collide with them.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/engine/etcdengine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// cronEnsemble starts a private 3-member ensemble for one test and stops
// it at cleanup. Cron hosts that are killed leave sessions (and watches)
// behind until they expire; a private ensemble keeps them away from the
// shared one whose watch notifications the e2e tests count.
func cronEnsemble(t *testing.T) *backend {
	t.Helper()
	start := time.Now()
	b, err := startCoordrun(3)
	if err != nil {
		t.Fatalf("starting a 3-member ensemble: %v", err)
	}
	t.Cleanup(b.close)
	t.Logf("3-member ensemble ready in %v", ms(time.Since(start)))
	return b
}

// forEachCronBackend runs f against the three engines, as forEachBackend
// does, side by side: a private coordrun ensemble (cronEnsemble), the
// shared Apache ZooKeeper, and a one-member etcd cluster of the row's own.
func forEachCronBackend(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Run("coordrun", func(t *testing.T) { t.Parallel(); f(t, cronEnsemble(t)) })
	t.Run("zookeeper", func(t *testing.T) { t.Parallel(); f(t, sharedZooKeeper(t)) })
	t.Run("etcd", func(t *testing.T) { t.Parallel(); f(t, etcdBackend(t, 1)) })
}

// cronRoot is a root of its own for a test's cron jobs on b: on etcd under
// the key prefix, as --root must be there; elsewhere at the top, clear of
// the folders other tests give ACLs. Unique, as ZooKeeper is shared.
func cronRoot(b *backend, name string) string {
	if b.etcd != nil {
		return "/coordrun/" + name + "-" + randHex(3)
	}
	return "/" + name + "-" + randHex(3)
}

// cronObs is the test's own session on a backend: the ZooKeeper client
// (nil on etcd), and the session through the engine the hosts use.
type cronObs struct {
	zk   *client.Client
	conn engine.Conn
}

// sync makes the ZooKeeper client's next read see every write before it;
// etcd's reads are linearizable as they are.
func (o *cronObs) sync(ctx context.Context, p string) error {
	if o.zk == nil {
		return nil
	}
	return o.zk.Sync(ctx, p)
}

// cronObserver is a session of the test's own on b, closed at cleanup.
func cronObserver(t *testing.T, b *backend) *cronObs {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if b.etcd != nil {
		c, err := etcdengine.Dial(ctx, etcdengine.Config{Endpoints: b.servers, SessionTimeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("observer session: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		return &cronObs{conn: c}
	}
	c, err := client.Connect(ctx, client.Config{Servers: b.servers, SessionTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("observer session: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &cronObs{zk: c, conn: store(c)}
}

// Timing of every cron host, as for the e2e supervisors.
const (
	cronSessionTimeout = 3 * time.Second
	cronKillGrace      = 300 * time.Millisecond
	cronDriftMargin    = 100 * time.Millisecond
)

// --- the job ---------------------------------------------------------------

// cronScript is the argv of the job every cron test runs: it appends
//
//	start <COORDRUN_SCHEDULED_TIME> <unix-ns> <CRON_HOST> <token> <pid>
//
// to log as its first act, then (hold > 0) sleeps hold and appends the
// same with "end". CRON_HOST labels the host that ran it.
func cronScript(log string, hold time.Duration) []string {
	line := func(kind string) string {
		return fmt.Sprintf(`echo "%s $COORDRUN_SCHEDULED_TIME $(date +%%s%%N) $CRON_HOST $COORDRUN_FENCING_TOKEN $$" >> %s`, kind, log)
	}
	s := line("start")
	if hold > 0 {
		s += fmt.Sprintf("; sleep %.3f; %s", hold.Seconds(), line("end"))
	}
	return []string{"/bin/sh", "-c", s}
}

// cronLine is one line of the job's log.
type cronLine struct {
	kind  string // start or end
	sched time.Time
	at    time.Time
	host  string
	token int64
	pid   int
}

func cronReadLog(t *testing.T, file string) []cronLine {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	var out []cronLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 6 {
			t.Fatalf("job log %s: bad line %q", file, sc.Text())
		}
		sched, err := time.Parse(time.RFC3339, f[1])
		if err != nil {
			t.Fatalf("job log %s: COORDRUN_SCHEDULED_TIME %q: %v", file, f[1], err)
		}
		ns, err1 := strconv.ParseInt(f[2], 10, 64)
		tok, err2 := strconv.ParseInt(f[4], 10, 64)
		pid, err3 := strconv.Atoi(f[5])
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("job log %s: bad line %q", file, sc.Text())
		}
		out = append(out, cronLine{kind: f[0], sched: sched, at: time.Unix(0, ns), host: f[3], token: tok, pid: pid})
	}
	return out
}

// cronStarts groups the start lines by scheduled time (unix seconds).
func cronStarts(lines []cronLine) map[int64][]cronLine {
	m := map[int64][]cronLine{}
	for _, l := range lines {
		if l.kind == "start" {
			m[l.sched.Unix()] = append(m[l.sched.Unix()], l)
		}
	}
	return m
}

// cronHistory reads a job's firing records after a sync.
func cronHistory(t *testing.T, c *cronObs, root, job string) []state.FiringRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.sync(ctx, root); err != nil {
		t.Fatalf("sync %s: %v", root, err)
	}
	recs, err := supervisor.CronHistory(ctx, c.conn, root, job)
	if err != nil {
		t.Fatalf("history of %s: %v", job, err)
	}
	return recs
}

// cronByTime indexes firing records by scheduled unix seconds.
func cronByTime(recs []state.FiringRecord) map[int64]state.FiringRecord {
	m := map[int64]state.FiringRecord{}
	for _, r := range recs {
		m[r.Scheduled.Unix()] = r
	}
	return m
}

// cronChildren lists p's children after a sync; none if p is missing.
func cronChildren(t *testing.T, c *cronObs, p string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.sync(ctx, p)
	kids, err := c.conn.Children(ctx, p)
	if err != nil {
		return nil
	}
	sort.Strings(kids)
	return kids
}

// cronAwaitHosts waits until n cron hosts are registered for the job.
func cronAwaitHosts(t *testing.T, c *cronObs, root, job string, n int) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, fmt.Sprintf("%d hosts registered for %s", n, job), func() bool {
		return len(cronChildren(t, c, path.Join(root, job, "hosts"))) == n
	})
}

// cronWaitFor sleeps until the wall clock passes at: waiting for a known
// instant, not for something to happen.
func cronWaitFor(at time.Time) {
	if d := time.Until(at); d > 0 {
		<-time.After(d)
	}
}

// cronPercentile is the nearest-rank percentile of ds (sorted in place).
func cronPercentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(p/100*float64(len(ds))+0.9999999) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// --- in-process cron hosts ---------------------------------------------------

// cronDecision is what a host's log says it did with a firing.
type cronDecision struct {
	host  string
	sched time.Time
	what  string // claimed, already, failed
	err   string // of a failed claim
}

// cronLogSink collects the log records of in-process cron hosts: the text
// for failure output, and their decision on each firing.
type cronLogSink struct {
	mu        sync.Mutex // guards text, decisions and ends
	text      bytes.Buffer
	decisions []cronDecision
	ends      []cronEnd
}

// cronEnd is a firing's record as the host that ended it (or an attempt
// of it) told its OnFire.
type cronEnd struct {
	host string
	skew time.Duration
	rec  state.FiringRecord
}

// claimedAt is when, on the true clock, the given attempt of the firing
// scheduled at sched was claimed: its record says when on its claimant's
// clock, and the claimant is the host that ended that attempt.
func (s *cronLogSink) claimedAt(sched time.Time, attempt int) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.ends {
		if e.rec.Scheduled.Equal(sched) && e.rec.Attempts() == attempt && e.rec.State != state.FiringReplaced {
			return e.rec.Claimed.Add(-e.skew), true
		}
	}
	return time.Time{}, false
}

func (s *cronLogSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.text.String()
}

// decided lists the decisions of host (every host if "").
func (s *cronLogSink) decided(host string) []cronDecision {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []cronDecision
	for _, d := range s.decisions {
		if host == "" || d.host == host {
			out = append(out, d)
		}
	}
	return out
}

type cronLogHandler struct {
	sink  *cronLogSink
	host  string
	attrs []slog.Attr
}

func (h *cronLogHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *cronLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &cronLogHandler{sink: h.sink, host: h.host, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h *cronLogHandler) WithGroup(string) slog.Handler { return h }

func (h *cronLogHandler) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s %s %q", r.Time.Format("15:04:05.000"), h.host, r.Level, r.Message)
	var sched time.Time
	var errText string
	each := func(a slog.Attr) bool {
		v := a.Value.Resolve()
		fmt.Fprintf(&sb, " %s=%v", a.Key, v)
		if a.Key == "err" {
			errText = v.String()
		}
		if a.Key == "scheduled" {
			switch v.Kind() {
			case slog.KindTime:
				sched = v.Time()
			case slog.KindString:
				sched, _ = time.Parse(time.RFC3339, v.String())
			}
		}
		return true
	}
	for _, a := range h.attrs {
		each(a)
	}
	r.Attrs(each)
	what := map[string]string{"firing claimed": "claimed", "firing already claimed": "already", "claim failed": "failed"}[r.Message]
	h.sink.mu.Lock()
	defer h.sink.mu.Unlock()
	h.sink.text.WriteString(sb.String() + "\n")
	if what != "" {
		h.sink.decisions = append(h.sink.decisions, cronDecision{host: h.host, sched: sched, what: what, err: errText})
	}
	return nil
}

// cronInProc is one host running supervisor.RunCron in this process.
type cronInProc struct {
	label string
	skew  time.Duration
	sigs  chan os.Signal
	done  chan struct{}
	code  int
	err   error
	stop  func() // SIGTERM, then wait for RunCron to return
	// stopAt is when stop sent SIGTERM.
	stopAt time.Time
}

// cronHostSpec describes an in-process host.
type cronHostSpec struct {
	label string
	skew  time.Duration // its clock: time.Now().Add(skew)
	root  string
	jobs  func() []*supervisor.CronJob // fresh jobs: RunCron validates (writes) them
}

// cronStartHost starts an in-process cron host on r's backend. Its jobs
// run with CRON_HOST=<label> and r's mark in their environment. At cleanup
// it is sent SIGTERM (as coordrun cron would forward it) and waited for.
func cronStartHost(t *testing.T, r *rig, sink *cronLogSink, spec cronHostSpec) *cronInProc {
	t.Helper()
	h := &cronInProc{label: spec.label, skew: spec.skew, sigs: make(chan os.Signal, 4), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	skew := spec.skew
	opts := supervisor.CronOptions{
		ConnOptions: supervisor.ConnOptions{
			Servers:        r.b.servers,
			SessionTimeout: cronSessionTimeout,
			DriftMargin:    cronDriftMargin,
		},
		JobOptions: supervisor.JobOptions{
			KillGrace: cronKillGrace,
			Exe:       e2eBin,
			Env:       append(baseEnv(), r.mark, "CRON_HOST="+spec.label),
			Signals:   h.sigs,
		},
		Log:  slog.New(&cronLogHandler{sink: sink, host: spec.label}),
		Root: spec.root,
		Jobs: spec.jobs(),
		Now:  func() time.Time { return time.Now().Add(skew) },
		OnFire: func(_ string, rec state.FiringRecord) {
			sink.mu.Lock()
			defer sink.mu.Unlock()
			sink.ends = append(sink.ends, cronEnd{host: spec.label, skew: skew, rec: rec})
		},
	}
	if r.b.etcd != nil {
		opts.Dial = func(ctx context.Context, log *slog.Logger) (engine.Conn, error) {
			return etcdengine.Dial(ctx, etcdengine.Config{Endpoints: r.b.servers, SessionTimeout: cronSessionTimeout, Log: log})
		}
	}
	go func() {
		defer close(h.done)
		h.code, h.err = supervisor.RunCron(ctx, opts)
	}()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			h.stopAt = time.Now()
			select {
			case h.sigs <- syscall.SIGTERM:
			default:
			}
			select {
			case <-h.done:
			case <-time.After(20 * time.Second):
				t.Errorf("cron host %s did not stop within 20s of SIGTERM", h.label)
				cancel()
			}
			cancel()
		})
	}
	t.Cleanup(func() {
		h.stop()
		if t.Failed() {
			t.Logf("--- cron host %s: exit %d, err %v", h.label, h.code, h.err)
		}
	})
	return h
}

// --- cron processes of the real binary ----------------------------------------

// cronProcArgs are the arguments of `coordrun cron` for one job.
func cronProcArgs(b *backend, root, job, spec string, flags []string, argv []string) []string {
	args := []string{"cron", "--servers", b.serverArg(), "--root", root, "--name", job, "--schedule", spec,
		"--session-timeout", cronSessionTimeout.String(), "--kill-grace", cronKillGrace.String(),
		"--drift-margin", cronDriftMargin.String(), "--zookeeper-margin", zkMargin.String(), "-v"}
	args = append(args, flags...)
	return append(append(args, "--"), argv...)
}

// cronStartProcs starts n cron processes labelled <prefix>1..n.
func cronStartProcs(r *rig, n int, prefix, root, job, spec string, flags, argv []string) []*proc {
	var ps []*proc
	for i := 1; i <= n; i++ {
		label := fmt.Sprintf("%s%d", prefix, i)
		ps = append(ps, r.startProc(label, []string{"CRON_HOST=" + label}, e2eBin, cronProcArgs(r.b, root, job, spec, flags, argv)...))
	}
	return ps
}

// cronStopProcs sends SIGTERM to every process and wants exit 0 from each.
func cronStopProcs(t *testing.T, ps []*proc) {
	t.Helper()
	for _, p := range ps {
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range ps {
		if code := p.Exit(t, 15*time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0; output:\n%s", p.Name, code, p.Out.String())
		}
	}
}

// cronHistoryJSON runs `coordrun cron history JOB --json --last 0`.
func cronHistoryJSON(t *testing.T, r *rig, root, job string) []state.FiringRecord {
	t.Helper()
	cmd := exec.Command(e2eBin, "cron", "history", job, "--json", "--last", "0", "--servers", r.b.serverArg(), "--root", root)
	cmd.Env = append(baseEnv(), r.mark)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("coordrun cron history: %v\n%s", err, stderr.String())
	}
	var recs []state.FiringRecord
	if err := json.Unmarshal(out, &recs); err != nil {
		t.Fatalf("coordrun cron history --json: %v\n%s", err, out)
	}
	return recs
}

// cronInterval is one run of the job: from its record's start to its end.
type cronInterval struct {
	sched      time.Time
	start, end time.Time
	host       string
}

// cronOverlaps reports runs that overlap in time.
func cronOverlaps(runs []cronInterval) []string {
	sort.Slice(runs, func(i, j int) bool { return runs[i].start.Before(runs[j].start) })
	var out []string
	for i := 1; i < len(runs); i++ {
		if runs[i].start.Before(runs[i-1].end) {
			out = append(out, fmt.Sprintf("run of %s started at %s, before the run of %s ended at %s",
				runs[i].sched.Format(time.TimeOnly), runs[i].start.Format("15:04:05.000"),
				runs[i-1].sched.Format(time.TimeOnly), runs[i-1].end.Format("15:04:05.000")))
		}
	}
	return out
}

// cronFmt formats scheduled times for messages.
func cronFmt(ts ...time.Time) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.Format(time.TimeOnly))
	}
	return strings.Join(s, ",")
}

// cronExit formats a record's exit code.
func cronExit(code *int) string {
	if code == nil {
		return "-"
	}
	return strconv.Itoa(*code)
}
