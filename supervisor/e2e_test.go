package supervisor_test

// End-to-end tests of `coordrun run`: the real binary, real supervisor,
// watchdog and job processes, against a 3-member coordrun ensemble
// (in-process), a standalone Apache ZooKeeper 3.8 and etcd, with faults
// injected: kill -9, SIGSTOP, a network partition, a leader failover.
// Every wait polls a condition with a deadline; timings are logged.
//
// Keep TestE2EMutualExclusion first: it counts the watch notifications of
// the shared ensemble, which later tests' leftover sessions could touch.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
)

// 1. Many supervisors on one lock: one job at a time, tokens rising in
// start order, every supervisor exits 0, and each release wakes exactly
// one waiter.
func TestE2EMutualExclusion(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		const n = 6
		r := newRig(t, b)
		var before int64
		if b.members != nil {
			before = b.notifications(t)
		}
		// The first holder waits for the gate, so that all others queue
		// up behind it: then every later start is a handoff.
		var sups []*proc
		for i := 0; i < n; i++ {
			label := fmt.Sprintf("s%d", i)
			sups = append(sups, r.supervise(label, nil, r.job(label, "-after", r.path("gate"), "-hold", "150ms")...))
		}
		r.awaitQueue(20*time.Second, n-1)
		r.touch("gate")
		for _, s := range sups {
			if code := s.Exit(t, 30*time.Second); code != 0 {
				t.Errorf("%s exited %d, want 0; output:\n%s", s.Name, code, s.Out.String())
			}
		}
		recs := r.records()
		starts := sortedStarts(recs)
		if len(starts) != n {
			t.Fatalf("%d jobs started, want %d: %+v", len(starts), n, recs)
		}
		ends := map[string]rec{}
		for _, x := range recs {
			if x.kind == "end" {
				ends[x.label] = x
			}
		}
		var gaps []string
		for i, s := range starts {
			e, ok := ends[s.label]
			if !ok {
				t.Fatalf("job %s never ended", s.label)
			}
			if i+1 < n {
				next := starts[i+1]
				if !e.at.Before(next.at) {
					t.Errorf("overlap: %s ran until %v, %s started at %v", s.label, e.at, next.label, next.at)
				}
				if next.token <= s.token {
					t.Errorf("tokens not rising: %s had %d, then %s had %d", s.label, s.token, next.label, next.token)
				}
				gaps = append(gaps, ms(next.at.Sub(e.at)))
			}
		}
		t.Logf("%d jobs ran one at a time; tokens %v; handoff gaps (end → next start) %v", n, tokensOf(starts), gaps)
		if b.members != nil {
			// Each release wakes exactly one waiter, and fires the two
			// watches its holder kept on its own queue node and run node.
			delta := b.notifications(t) - before
			want := int64(n-1) + 2*n
			t.Logf("watch notifications sent for %d handoffs of %d holders: %d", n-1, n, delta)
			if delta != want {
				t.Errorf("coordrun_watch_notifications rose by %d over %d handoffs, want exactly %d (one waiter woken per release, plus each holder's own two standing watches)", delta, n-1, want)
			}
		}
	})
}

func tokensOf(rs []rec) []int64 {
	var out []int64
	for _, x := range rs {
		out = append(out, x.token)
	}
	return out
}

// 2. kill -9 of the holding supervisor: the job and its grandchildren
// (also one that left the process group) die promptly, and the next
// waiter starts about one session timeout later.
func TestE2EKillHolder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		r := newRig(t, b)
		marker := uniqueSleep()
		script := fmt.Sprintf(`echo "start A $(date +%%s%%N) $COORDRUN_FENCING_TOKEN $$" >> %s; setsid sleep %s & sleep %s & sleep %s`,
			r.log, marker, marker, marker)
		a := r.supervise("A", nil, "sh", "-c", script)
		startA := r.await(10*time.Second, "start", "A", "")
		bb := r.supervise("B", nil, r.job("B", "-hold", "100ms")...)
		r.awaitQueue(10*time.Second, 1)
		testkit.WaitFor(t, 5*time.Second, "the job's three sleeps", func() bool { return len(pidsWithArgv("sleep", marker)) == 3 })
		shDead := deathWatch(t, startA.pid())

		killed := time.Now()
		a.Signal(syscall.SIGKILL)
		var gone time.Time
		testkit.WaitFor(t, 5*time.Second, "the job and its grandchildren to die", func() bool {
			if len(pidsWithArgv("sleep", marker)) == 0 && !alive(startA.pid()) {
				gone = time.Now()
				return true
			}
			return false
		})
		jobDied := testkit.Recv(t, shDead, time.Second, "the job's death")
		t.Logf("kill -9 → job dead %v, all grandchildren dead %v", ms(jobDied.Sub(killed)), ms(gone.Sub(killed)))
		if d := gone.Sub(killed); d > killGrace+time.Second {
			t.Errorf("job tree outlived the kill of its supervisor by %v (kill-grace %v)", d, killGrace)
		}

		startB := r.await(sessionTimeout+5*time.Second, "start", "B", "")
		wait := startB.at.Sub(killed)
		t.Logf("crash → next holder starts: %v (session timeout %v, %.2f×)", ms(wait), sessionTimeout, wait.Seconds()/sessionTimeout.Seconds())
		// The server cannot expire the session before it last heard of it
		// (≥ one ping interval, or etcd renewal, before the kill) + the
		// timeout.
		if lo := sessionTimeout - b.renewEvery() - 100*time.Millisecond; wait < lo {
			t.Errorf("next holder started %v after the crash, before the session could have expired (≥ %v)", wait, lo)
		}
		if hi := sessionTimeout + 3*time.Second; wait > hi {
			t.Errorf("next holder started %v after the crash, want ≤ %v", wait, hi)
		}
		if startB.token <= startA.token {
			t.Errorf("token did not rise: %d then %d", startA.token, startB.token)
		}
		if code := bb.Exit(t, 10*time.Second); code != 0 {
			t.Errorf("B exited %d, want 0", code)
		}
	})
}

// 3. SIGSTOP of the holding supervisor (not its job) past the session
// timeout: the watchdog kills the job before the ensemble expires the
// session, the next holder starts only after that, and the supervisor,
// continued, exits 76.
func TestE2EStoppedSupervisor(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		r := newRig(t, b)
		// A stubborn job: it records SIGTERM and keeps running, so only
		// SIGKILL ends it, at the last moment the watchdog allows.
		a := r.supervise("A", nil, r.job("A", "-forever", "-trap", "TERM")...)
		startA := r.await(10*time.Second, "start", "A", "")
		bb := r.supervise("B", nil, r.job("B", "-hold", "100ms")...)
		ls := r.awaitQueue(10*time.Second, 1)
		expired := r.watchGone(ls.Holder.Node)
		died := deathWatch(t, startA.pid())
		leaseAlive := leaseCheck(t, r, ls.Holder.Node)

		stopped := time.Now()
		a.Signal(syscall.SIGSTOP)
		death := testkit.Recv(t, died, sessionTimeout+2*time.Second, "the job's death")
		leaseAlive("SIGSTOP of the holder")
		expiry := testkit.Recv(t, expired, sessionTimeout+5*time.Second, "the session's expiry (holder node deleted)")
		startB := r.await(5*time.Second, "start", "B", "")
		term, hadTerm := r.find("sig", "A", "TERM")

		margin := expiry.Sub(death)
		t.Logf("SIGSTOP → SIGTERM %v, job dead %v, session expired %v, B starts %v; job dead %v before expiry (%s)",
			ms(term.at.Sub(stopped)), ms(death.Sub(stopped)), ms(expiry.Sub(stopped)), ms(startB.at.Sub(stopped)), ms(margin), b.name)
		if !hadTerm {
			t.Errorf("the job never got SIGTERM before SIGKILL")
		} else if g := death.Sub(term.at); g < killGrace-50*time.Millisecond {
			t.Errorf("SIGTERM to death %v, want about the kill grace %v", g, killGrace)
		}
		if !death.Before(expiry) {
			t.Errorf("the job died %v after the session expired", -margin)
		}
		if d := death.Sub(stopped); d >= sessionTimeout {
			t.Errorf("the job died %v after its supervisor froze, not within the session timeout %v", d, sessionTimeout)
		}
		if !startB.at.After(death) {
			t.Errorf("overlap: B started %v before A's job died", death.Sub(startB.at))
		}
		a.Signal(syscall.SIGCONT)
		if code := a.Exit(t, 15*time.Second); code != 76 {
			t.Errorf("continued supervisor exited %d, want 76", code)
		}
		t.Logf("SIGCONT → supervisor exit 76 after %v", ms(a.Ended().Sub(stopped)))
		if code := bb.Exit(t, 10*time.Second); code != 0 {
			t.Errorf("B exited %d, want 0", code)
		}
	})
}

// 4. The holder cut off from every member (a partition: a proxy per
// member drops all traffic): the job is killed before the session timeout
// elapses, the supervisor exits 76, and a supervisor on a direct
// connection takes the lock only after the job died.
func TestE2ECutOff(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		r := newRig(t, b)
		var proxies []*testkit.Proxy
		var via []string
		for _, s := range b.servers {
			p := b.startProxy(t, s)
			proxies = append(proxies, p)
			via = append(via, p.Addr())
		}
		a := r.superviseVia(b.serversVia(via), "A", nil, nil, r.job("A", "-forever", "-trap", "TERM")...)
		startA := r.await(10*time.Second, "start", "A", "")
		bb := r.supervise("B", nil, r.job("B", "-hold", "100ms")...)
		ls := r.awaitQueue(10*time.Second, 1)
		expired := r.watchGone(ls.Holder.Node)
		died := deathWatch(t, startA.pid())
		leaseAlive := leaseCheck(t, r, ls.Holder.Node)

		cut := time.Now()
		for _, p := range proxies {
			p.Drop(true)
		}
		death := testkit.Recv(t, died, sessionTimeout+2*time.Second, "the job's death")
		leaseAlive("the cut")
		expiry := testkit.Recv(t, expired, sessionTimeout+5*time.Second, "the session's expiry")
		startB := r.await(5*time.Second, "start", "B", "")
		t.Logf("cut → job dead %v, session expired %v, B starts %v; job dead %v before expiry (%s)",
			ms(death.Sub(cut)), ms(expiry.Sub(cut)), ms(startB.at.Sub(cut)), ms(expiry.Sub(death)), b.name)
		// Nothing sent after the cut is answered: the lease ends by
		// cut + timeout at the latest.
		if d := death.Sub(cut); d >= sessionTimeout {
			t.Errorf("the job died %v after the cut, want < %v (the session timeout)", d, sessionTimeout)
		}
		if !death.Before(expiry) || !death.Before(startB.at) {
			t.Errorf("the job died after the session expired or the next holder started")
		}
		if code := a.Exit(t, 20*time.Second); code != 76 {
			t.Errorf("cut-off supervisor exited %d, want 76", code)
		}
		t.Logf("cut → cut-off supervisor exit 76 after %v", ms(a.Ended().Sub(cut)))
		if code := bb.Exit(t, 10*time.Second); code != 0 {
			t.Errorf("B exited %d, want 0", code)
		}
	})
}

// 5. The leader of the coordrun ensemble stops while a job runs: the job
// goes on to its end, the session survives, the supervisor exits 0.
func TestE2ELeaderFailover(t *testing.T) {
	b, err := startCoordrun(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	r := newRig(t, b)
	// A longer session: the lease must last through an election (raft
	// timeouts 1s here) and the client's move to another member.
	const timeout = 6 * time.Second
	a := r.supervise("A", []string{"--session-timeout", timeout.String()}, r.job("A", "-after", r.path("finish"), "-trap", "TERM,INT,HUP")...)
	startA := r.await(10*time.Second, "start", "A", "")
	before := r.state()

	var lead int
	testkit.WaitFor(t, 10*time.Second, "a leader", func() bool { lead = b.leader(); return lead >= 0 })
	stopped := time.Now()
	b.stopMember(lead)
	testkit.WaitFor(t, 15*time.Second, "a new leader", func() bool { return b.leader() >= 0 })
	t.Logf("leader %d stopped; new leader %d after %v", lead+1, b.leader()+1, ms(time.Since(stopped)))
	// Every lease proven before the stop ends within one session timeout
	// of it: the job running past that (polled, failing at once if it
	// ends) shows the lease was renewed through the new leader.
	testkit.WaitFor(t, timeout+5*time.Second, "the job to outlive the leases proven before the leader stopped", func() bool {
		if !alive(startA.pid()) || !a.Running() {
			t.Fatalf("the job or its supervisor ended %v after the leader stopped; supervisor output:\n%s", time.Since(stopped), a.Out.String())
		}
		return time.Since(stopped) > timeout+500*time.Millisecond
	})
	after := r.state()
	if after.Holder == nil || before.Holder == nil || after.Holder.Node != before.Holder.Node || after.Holder.Token != startA.token {
		t.Fatalf("holder changed across the failover: before %+v after %+v (token %d)", before.Holder, after.Holder, startA.token)
	}
	r.touch("finish")
	if code := a.Exit(t, 10*time.Second); code != 0 {
		t.Errorf("supervisor exited %d, want 0", code)
	}
	if x, ok := r.find("sig", "A", ""); ok {
		t.Errorf("the job got a signal: %+v", x)
	}
	if _, ok := r.find("end", "A", "exit"); !ok {
		t.Errorf("the job did not end on its own")
	}
}

// 6. Signals: forwarded to the job's group; the job's own exit code and
// death by signal come through; a waiting supervisor leaves the queue on
// SIGTERM.
func TestE2ESignals(t *testing.T) {
	t.Run("forwarded", func(t *testing.T) {
		r := newRig(t, sharedCoordrun(t))
		sigs := []string{"USR1", "HUP", "INT", "TERM"}
		a := r.supervise("A", nil, r.job("A", "-forever", "-trap", strings.Join(sigs, ","), "-exitafter", "4", "-exit", "3")...)
		r.await(10*time.Second, "start", "A", "")
		for _, s := range sigs {
			sent := time.Now()
			a.Signal(sigByName(s))
			x := r.await(5*time.Second, "sig", "A", s)
			t.Logf("SIG%s reached the job after %v", s, ms(x.at.Sub(sent)))
		}
		if code := a.Exit(t, 10*time.Second); code != 3 {
			t.Errorf("supervisor exited %d, want the job's 3", code)
		}
	})
	t.Run("job dies of it", func(t *testing.T) {
		r := newRig(t, sharedCoordrun(t))
		for _, s := range []string{"TERM", "INT", "HUP", "USR1"} {
			label := "die-" + s
			a := r.supervise(label, nil, r.job(label, "-forever", "-trap", s, "-die", s)...)
			r.await(10*time.Second, "start", label, "")
			a.Signal(sigByName(s))
			want := 128 + int(sigByName(s))
			if code := a.Exit(t, 10*time.Second); code != want {
				t.Errorf("SIG%s: supervisor exited %d, want %d", s, code, want)
			}
		}
	})
	// A shell job and a plain command, as users run them: Ctrl-C and
	// hangup must reach them too.
	t.Run("shell job traps", func(t *testing.T) {
		r := newRig(t, sharedCoordrun(t))
		rec := func(s string) string {
			return fmt.Sprintf(`trap 'echo "sig A $(date +%%s%%N) $COORDRUN_FENCING_TOKEN %s" >> %s' %s;`, s, r.log, s)
		}
		script := rec("USR1") + rec("HUP") + rec("INT") +
			fmt.Sprintf(`trap 'echo "sig A $(date +%%s%%N) $COORDRUN_FENCING_TOKEN TERM" >> %s; exit 7' TERM;`, r.log) +
			fmt.Sprintf(`echo "start A $(date +%%s%%N) $COORDRUN_FENCING_TOKEN $$" >> %s; while :; do sleep 0.05; done`, r.log)
		a := r.supervise("A", nil, "sh", "-c", script)
		r.await(10*time.Second, "start", "A", "")
		for _, s := range []string{"USR1", "HUP", "INT"} {
			a.Signal(sigByName(s))
			if !testkit.Poll(2*time.Second, func() bool { _, ok := r.find("sig", "A", s); return ok }) {
				t.Errorf("SIG%s sent to the supervisor never reached the shell job's trap; the job's ignored signals: %s", s, sigIgn(jobPid(r)))
			}
		}
		a.Signal(syscall.SIGTERM)
		if code := a.Exit(t, 10*time.Second); code != 7 {
			t.Errorf("supervisor exited %d, want the job's 7", code)
		}
	})
	t.Run("plain command dies of SIGINT", func(t *testing.T) {
		r := newRig(t, sharedCoordrun(t))
		marker := uniqueSleep()
		a := r.supervise("A", nil, "sleep", marker)
		testkit.WaitFor(t, 10*time.Second, "the job", func() bool { return len(pidsWithArgv("sleep", marker)) == 1 })
		pid := pidsWithArgv("sleep", marker)[0]
		a.Signal(syscall.SIGINT)
		if !testkit.Poll(2*time.Second, func() bool { return !a.Running() }) {
			t.Errorf("`coordrun run -- sleep` ignores Ctrl-C: SIGINT forwarded, the job lives on; its ignored signals: %s", sigIgn(pid))
			a.Signal(syscall.SIGTERM)
		} else if code := a.Exit(t, time.Second); code != 130 {
			t.Errorf("supervisor exited %d after SIGINT, want 130", code)
		}
		a.Exit(t, 10*time.Second)
	})
	t.Run("waiting", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, b *backend) {
			r := newRig(t, b)
			r.supervise("A", nil, r.job("A", "-forever")...)
			r.await(10*time.Second, "start", "A", "")
			w := r.supervise("W", nil, r.job("W", "-hold", "0s")...)
			var ls = r.statusJSON()
			if !testkit.Poll(10*time.Second, func() bool {
				ls = r.statusJSON()
				return len(ls.Waiters) == 1 && ls.Waiters[0].Info.PID == w.Pid()
			}) {
				t.Fatalf("W (pid %d) not queued per coordrun status --json after 10s: holder %+v waiters %+v", w.Pid(), ls.Holder, ls.Waiters)
			}
			sent := time.Now()
			w.Signal(syscall.SIGTERM)
			if code := w.Exit(t, 5*time.Second); code != 143 {
				t.Errorf("waiting supervisor exited %d on SIGTERM, want 143", code)
			}
			t.Logf("waiting supervisor left after SIGTERM in %v", ms(w.Ended().Sub(sent)))
			ls = r.statusJSON()
			if len(ls.Waiters) != 0 || ls.Holder == nil {
				t.Errorf("after SIGTERM: holder %+v waiters %+v, want the holder alone", ls.Holder, ls.Waiters)
			}
			if _, ok := r.find("start", "W", ""); ok {
				t.Errorf("the waiting supervisor's job ran")
			}
		})
	})
	// Next in line, a supervisor has its watchdog started ahead, armed but
	// not running the job; killed with -9, it must take that watchdog with
	// it and the job must never start.
	t.Run("next in line killed", func(t *testing.T) {
		b := sharedCoordrun(t)
		r := newRig(t, b)
		r.supervise("A", nil, r.job("A", "-forever")...)
		r.await(10*time.Second, "start", "A", "")
		w := r.supervise("W", nil, r.job("W", "-hold", "0s")...)
		var armed []int
		testkit.WaitFor(t, 10*time.Second, "W's armed watchdog", func() bool {
			armed = childrenOf(w.Pid())
			return len(armed) == 1
		})
		w.Signal(syscall.SIGKILL)
		w.Exit(t, 5*time.Second)
		testkit.WaitFor(t, 5*time.Second, "the armed watchdog to exit with its supervisor", func() bool { return !alive(armed[0]) })
		if _, ok := r.find("start", "W", ""); ok {
			t.Errorf("the killed supervisor's job ran")
		}
	})
}

// leaseCheck returns, on etcd, a check to call right after the job of
// node's holder was seen dead: etcd's own TimeToLive must still count the
// holder's lease alive, so the job died before etcd could expire it (the
// lease is asked for now, while node exists). Elsewhere the watch on the
// holder's node (watchGone) tells the same, and the check does nothing.
func leaseCheck(t *testing.T, r *rig, node string) func(after string) {
	t.Helper()
	if r.b.etcd == nil {
		return func(string) {}
	}
	l := r.leaseOf(node)
	return func(after string) {
		t.Helper()
		ttl := l.ttl(t)
		t.Logf("etcd's TimeToLive of the holder's lease %x once its job was dead: %ds", int64(l.id), ttl)
		if ttl < 0 {
			t.Errorf("after %s the job was seen dead only once etcd had expired the holder's lease %x", after, int64(l.id))
		}
	}
}

// jobPid is the pid in the rig's first start record, or 0.
func jobPid(r *rig) int {
	if x, ok := r.find("start", "A", ""); ok {
		return x.pid()
	}
	return 0
}

// sigIgn is the SigIgn line of pid's status.
func sigIgn(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "SigIgn:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "SigIgn:"))
		}
	}
	return "?"
}

// 7. --try and --timeout give up with 75; --lock-delay applies after a
// holder's session ended without release, and not after a clean release.
func TestE2ETryTimeoutLockDelay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		r := newRig(t, b)
		a := r.supervise("A", nil, r.job("A", "-forever")...)
		startA := r.await(10*time.Second, "start", "A", "")

		try := r.supervise("try", []string{"--try"}, r.job("try")...)
		if code := try.Exit(t, 10*time.Second); code != 75 {
			t.Errorf("--try exited %d, want 75", code)
		}
		t.Logf("--try: exit 75 after %v (process start to exit)", ms(try.Ended().Sub(try.Started)))
		if d := try.Ended().Sub(try.Started); d > 3*time.Second {
			t.Errorf("--try took %v", d)
		}

		to := r.supervise("timeout", []string{"--timeout", "500ms"}, r.job("timeout")...)
		if code := to.Exit(t, 10*time.Second); code != 75 {
			t.Errorf("--timeout 500ms exited %d, want 75", code)
		}
		d := to.Ended().Sub(to.Started)
		t.Logf("--timeout 500ms: exit 75 after %v (process start to exit)", ms(d))
		if d < 500*time.Millisecond || d > 3*time.Second {
			t.Errorf("--timeout 500ms gave up after %v", d)
		}
		for _, l := range []string{"try", "timeout"} {
			if _, ok := r.find("start", l, ""); ok {
				t.Errorf("the %s supervisor's job ran", l)
			}
		}

		// Unclean end: A is killed; C waits with --lock-delay 1s.
		const delay = time.Second
		c := r.supervise("C", []string{"--lock-delay", delay.String()}, r.job("C", "-after", r.path("gateC"))...)
		ls := r.awaitQueue(10*time.Second, 1)
		expired := r.watchGone(ls.Holder.Node)
		a.Signal(syscall.SIGKILL)
		expiry := testkit.Recv(t, expired, sessionTimeout+5*time.Second, "A's session to expire")
		startC := r.await(delay+5*time.Second, "start", "C", "")
		t.Logf("after a crash: session expired → next holder starts %v (lock-delay %v)", ms(startC.at.Sub(expiry)), delay)
		if g := startC.at.Sub(expiry); g < delay {
			t.Errorf("with --lock-delay %v the next holder started %v after the session expired", delay, g)
		} else if g > delay+2*time.Second+b.expiryUncertainty() {
			t.Errorf("with --lock-delay %v the next holder started only %v after the session expired", delay, g)
		}
		if startC.token <= startA.token {
			t.Errorf("token did not rise: %d then %d", startA.token, startC.token)
		}

		// Clean release: C ends on its own; D waits with --lock-delay 1s
		// and must start at once.
		dd := r.supervise("D", []string{"--lock-delay", delay.String()}, r.job("D")...)
		r.awaitQueue(10*time.Second, 1)
		r.touch("gateC")
		endC := r.await(5*time.Second, "end", "C", "")
		startD := r.await(5*time.Second, "start", "D", "")
		t.Logf("after a clean release: next holder starts %v after the job ended (lock-delay %v not applied)", ms(startD.at.Sub(endC.at)), delay)
		if g := startD.at.Sub(endC.at); g >= delay*7/10 {
			t.Errorf("after a clean release the next holder waited %v (lock-delay %v must not apply)", g, delay)
		}
		for _, p := range []*proc{c, dd} {
			if code := p.Exit(t, 10*time.Second); code != 0 {
				t.Errorf("%s exited %d, want 0", p.Name, code)
			}
		}
	})
}

// 8. The fenced store (examples/fenced-store): a host freeze — supervisor,
// watchdog and job all stopped — past the session; another holder takes
// the lock and writes; the frozen job resumes and tries to write: the
// store refuses it (exit 77) and data.log keeps only the good lines.
func TestE2EFencedStore(t *testing.T) {
	for _, tool := range []string{"bash", "flock"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
	writeSh, err := filepath.Abs("../examples/fenced-store/write.sh")
	if err != nil {
		t.Fatal(err)
	}
	forEachBackend(t, func(t *testing.T, b *backend) {
		r := newRig(t, b)
		store := r.path("store")
		if err := os.Mkdir(store, 0o755); err != nil {
			t.Fatal(err)
		}
		env := []string{"STORE=" + store, "PATH=" + filepath.Dir(e2eBin) + ":" + os.Getenv("PATH")}
		logLine := func(kind, label, extra string) string {
			return fmt.Sprintf(`echo "%s %s $(date +%%s%%N) $COORDRUN_FENCING_TOKEN %s" >> %s`, kind, label, extra, r.log)
		}
		scriptA := strings.Join([]string{
			logLine("start", "A", "$$"),
			writeSh + ` "A: first half" || exit $?`,
			`while [ ! -e ` + r.path("thaw") + ` ]; do sleep 0.02; done`,
			writeSh + ` "A: second half"; rc=$?`,
			logLine("wrote", "A", "$rc"),
			`exit $rc`,
		}, "\n")
		scriptB := strings.Join([]string{
			logLine("start", "B", "$$"),
			writeSh + ` "B: the whole job"; rc=$?`,
			logLine("wrote", "B", "$rc"),
			`exit $rc`,
		}, "\n")
		a := r.superviseVia(b.serverArg(), "A", nil, env, "sh", "-c", scriptA)
		startA := r.await(10*time.Second, "start", "A", "")
		testkit.WaitFor(t, 10*time.Second, "A's first write", func() bool {
			data, _ := os.ReadFile(filepath.Join(store, "data.log"))
			return strings.Contains(string(data), "A: first half")
		})
		bb := r.superviseVia(b.serverArg(), "B", nil, env, "sh", "-c", scriptB)
		ls := r.awaitQueue(10*time.Second, 1)
		expired := r.watchGone(ls.Holder.Node)

		// Freeze A's host: the job's group, the watchdog, the supervisor.
		pgid := startA.pid()
		var watchdog int
		for _, p := range childrenOf(a.Pid()) {
			if p != pgid {
				watchdog = p
			}
		}
		if watchdog == 0 || procParent(pgid) != watchdog {
			t.Fatalf("cannot find A's watchdog: supervisor %d, children %v, job %d (parent %d)", a.Pid(), childrenOf(a.Pid()), pgid, procParent(pgid))
		}
		frozen := time.Now()
		_ = syscall.Kill(-pgid, syscall.SIGSTOP)
		_ = syscall.Kill(watchdog, syscall.SIGSTOP)
		a.Signal(syscall.SIGSTOP)
		r.touch("thaw") // what the job will see first when it resumes

		expiry := testkit.Recv(t, expired, sessionTimeout+5*time.Second, "A's session to expire")
		wroteB := r.await(10*time.Second, "wrote", "B", "")
		startB, _ := r.find("start", "B", "")
		if code := bb.Exit(t, 10*time.Second); code != 0 || wroteB.extra != "0" {
			t.Errorf("B: write.sh exit %s, supervisor exit %d; want 0 and 0", wroteB.extra, code)
		}
		t.Logf("freeze → A's session expired %v, B (token %d > %d) wrote %v", ms(expiry.Sub(frozen)), startB.token, startA.token, ms(wroteB.at.Sub(frozen)))

		// The job resumes first (its host's scheduler may well run it
		// before the watchdog): its late write must be refused.
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		wroteA := r.await(10*time.Second, "wrote", "A", "")
		if wroteA.extra != "77" {
			t.Errorf("A's late write.sh exited %s, want 77 (stale token)", wroteA.extra)
		}
		_ = syscall.Kill(watchdog, syscall.SIGCONT)
		a.Signal(syscall.SIGCONT)
		// Its session is gone: 76, whatever the job's own end. (Seen: 77,
		// about every other run — the watchdog, resumed, may report the
		// job's exit before noticing the deadline has passed.)
		if code := a.Exit(t, 15*time.Second); code != 76 {
			t.Errorf("A's supervisor exited %d after the thaw, want 76 (session lost): a job that ended past its lease was reported as a normal exit", code)
		}
		data, _ := os.ReadFile(filepath.Join(store, "data.log"))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		t.Logf("data.log:\n%s", data)
		if len(lines) != 2 || !strings.Contains(lines[0], fmt.Sprintf("token=%d A: first half", startA.token)) ||
			!strings.Contains(lines[1], fmt.Sprintf("token=%d B: the whole job", startB.token)) {
			t.Errorf("data.log should hold A's first line and B's line only")
		}
		if strings.Contains(string(data), "second half") {
			t.Errorf("A's late write reached data.log")
		}
	})
}

// A supervisor told to stop while its entry's create is unanswered and no
// member can be reached any more: it exits on the signal (143) instead of
// waiting for a store that may never answer.
func TestE2ETermWhileJoining(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		if b.etcd != nil {
			// Not a difference of the feature: the proxy can hold the
			// reply to one ZooKeeper request, not to one gRPC call in
			// etcd's multiplexed stream.
			t.Skip("the fault (holding the reply to the entry's create) needs the ZooKeeper protocol's framing")
		}
		r := newRig(t, b)
		var proxies []*testkit.Proxy
		var via []string
		var held []<-chan struct{}
		for _, s := range b.servers {
			p := b.startProxy(t, s)
			h, release := p.HoldReplyTo(wire.OpCreate2)
			t.Cleanup(release)
			proxies = append(proxies, p)
			via = append(via, p.Addr())
			held = append(held, h)
		}
		a := r.superviseVia(strings.Join(via, ","), "A", nil, nil, r.job("A", "-hold", "100ms")...)
		anyHeld := make(chan time.Time, len(held))
		for _, h := range held {
			go func() {
				select {
				case <-h:
					anyHeld <- time.Now()
				case <-time.After(30 * time.Second):
				}
			}()
		}
		testkit.Recv(t, anyHeld, 20*time.Second, "the entry's create held")
		for _, p := range proxies {
			p.Refuse(true)
		}
		a.Signal(syscall.SIGTERM)
		if code := a.Exit(t, 4*sessionTimeout); code != 143 {
			t.Errorf("supervisor exited %d after TERM while joining, want 143", code)
		}
	})
}
