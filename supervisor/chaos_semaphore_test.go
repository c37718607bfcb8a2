package supervisor_test

// The semaphore under the singleton's holder faults: supervisors run with
// --holders N, their jobs fence their writes per slot, and the records
// must show at most N jobs alive at any instant, one at a time per slot,
// and tokens distinct and rising per slot.
//
//	go test -race -run 'TestChaosSemaphore$' ./supervisor

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordrun/coordrun/supervisor"
)

// chaosSemHolders is the semaphore's N; chaosSemHosts contend for it,
// enough that some wait while N hold.
const chaosSemHolders, chaosSemHosts = 2, 5

// The faults the semaphore run injects once each: kill -9, SIGSTOP, a
// foreign delete (of the holder's slot entry, its run record, or both),
// and a member's death and pause.
// On etcd the same but the foreign delete (TestE2EForeignDelete/etcd).
var (
	chaosSemFaultKinds     = []string{faultSupKill, faultSupStop, faultForeignDelete, faultLeaderKill, faultMemberPause}
	chaosSemEtcdFaultKinds = []string{faultSupKill, faultSupStop, faultLeaderKill, faultMemberPause}
)

func TestChaosSemaphore(t *testing.T) {
	t.Run("coordrun", func(t *testing.T) { t.Parallel(); chaosSemaphore(t, "coordrun", chaosSemFaultKinds) })
	t.Run("etcd", func(t *testing.T) { t.Parallel(); chaosSemaphore(t, "etcd", chaosSemEtcdFaultKinds) })
}

func chaosSemaphore(t *testing.T, engine string, faultKinds []string) {
	seed, _ := chaosParams(t)
	var slow atomic.Bool
	dir := chaosRecordsDir(t, seed, &slow)
	r, members := chaosBackend(t, engine, dir)
	w := newChaosWorld(t, r, members, dir, seed)
	w.slow = &slow
	w.holders = chaosSemHolders
	w.jobFlags = []string{"-slot"}
	w.launch = func(servers, label string, env, job []string) *proc {
		return w.r.superviseVia(servers, label, []string{"--holders", strconv.Itoa(chaosSemHolders)}, env, job...)
	}
	defer w.shutdown()
	for k := 1; k <= chaosSemHosts; k++ {
		w.wg.Add(1)
		go w.hostLoop(k, rand.New(rand.NewSource(seed+int64(k))))
	}
	w.awaitProgress("the first run")
	began := time.Now()
	kinds := append([]string(nil), faultKinds...)
	w.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for _, k := range kinds {
		w.inject(k)
	}
	w.shutdown()
	w.verdict(r.lock, began, nil)
}

// checkChaosSemaphore reads the records in dir of a semaphore of n slots
// and checks:
//
//	(a) at most n jobs alive at any instant (a run from its first to its
//	    last act), and within a slot one at a time;
//	(b) per slot, the store accepted tokens in non-decreasing order, and
//	    refused none (no holder was frozen);
//	(c) tokens are distinct, and rise per slot in the order of starts.
func checkChaosSemaphore(dir string, n int) chaosReport {
	var rep chaosReport
	bad := func(format string, args ...any) {
		rep.violations = append(rep.violations, fmt.Sprintf(format, args...))
	}
	byToken := map[int64]*chaosRun{}
	slotOf := map[int64]string{}
	lines := readChaosRecs(filepath.Join(dir, chaosRunsLog))
	for _, x := range lines {
		if x.kind != "start" {
			continue
		}
		if prev, dup := byToken[x.token]; dup {
			bad("(c) token %d started twice: %s (pid %d) and %s (pid %d)", x.token, prev.host, prev.pid, x.host, x.pid)
			continue
		}
		slot := "-"
		if len(x.extra) > 2 {
			slot = x.extra[2]
		}
		r := &chaosRun{token: x.token, host: x.host, pid: x.pid, start: x.at, end: x.at, pinned: len(x.extra) > 0 && x.extra[0] == "1"}
		byToken[x.token], slotOf[x.token] = r, slot
		rep.runs = append(rep.runs, r)
	}
	act := func(r *chaosRun, at supervisor.Boottime) { r.end = max(r.end, at) }
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
			bad("(b) token %d (%s, %s) was refused at %d: it ran on after a newer holder of its slot wrote", x.token, x.host, slotOf[x.token], x.at)
		}
	}
	marks := map[string]int64{}
	for i, x := range readChaosRecs(filepath.Join(dir, chaosStore)) {
		rep.accepted++
		r := byToken[x.token]
		if r == nil {
			bad("(b) store line %d: token %d (%s) has no start record", i+1, x.token, x.host)
			continue
		}
		slot := slotOf[x.token]
		if m, ok := marks[slot]; ok && x.token < m {
			bad("(b) store line %d: a write with token %d (%s) was accepted in %s after one with token %d", i+1, x.token, x.host, slot, m)
		} else {
			marks[slot] = x.token
		}
		r.writes++
		act(r, x.at)
		rep.highWater = max(rep.highWater, x.token)
	}

	// (a) A sweep over starts and last acts; at one instant a start
	// counts before an end, as the singleton's check counts a start at
	// another's last act as an overlap.
	type edge struct {
		at    supervisor.Boottime
		delta int
		r     *chaosRun
	}
	var edges []edge
	for _, r := range rep.runs {
		edges = append(edges, edge{r.start, +1, r}, edge{r.end, -1, r})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta > edges[j].delta
	})
	alive := map[*chaosRun]bool{}
	for _, e := range edges {
		if e.delta < 0 {
			delete(alive, e.r)
			continue
		}
		alive[e.r] = true
		rep.maxAlive = max(rep.maxAlive, len(alive))
		if len(alive) > n {
			var who []string
			for r := range alive {
				who = append(who, fmt.Sprintf("%s token %d [%d, %d]", r.host, r.token, r.start, r.end))
			}
			sort.Strings(who)
			bad("(a) %d jobs alive at %d, more than %d: %s", len(alive), e.at, n, strings.Join(who, "; "))
		}
	}

	sort.Slice(rep.runs, func(i, j int) bool { return rep.runs[i].start < rep.runs[j].start })
	last := map[string]*chaosRun{} // per slot: the run with the latest end so far
	prev := map[string]*chaosRun{} // per slot: the run started before
	for _, r := range rep.runs {
		slot := slotOf[r.token]
		if l := last[slot]; l != nil && r.start <= l.end {
			bad("(a) overlap in %s: %s token %d ran [%d, %d] and %s token %d started at %d", slot, l.host, l.token, l.start, l.end, r.host, r.token, r.start)
		}
		if p := prev[slot]; p != nil && r.token <= p.token {
			bad("(c) in %s token %d (%s, started %d) follows token %d (%s, started %d)", slot, r.token, r.host, r.start, p.token, p.host, p.start)
		}
		if l := last[slot]; l == nil || r.end > l.end {
			last[slot] = r
		}
		prev[slot] = r
		r.gap = -1
	}
	return rep
}

// The semaphore checker on made-up records: a clean history of two slots
// passes, and N+1 jobs alive, an overlap within a slot, falling tokens
// in a slot and a stale write accepted in a slot are each caught.
func TestChaosSemaphoreChecker(t *testing.T) {
	run := func(s string) [2]string { return [2]string{chaosRunsLog, s} }
	w := func(s string) [2]string { return [2]string{chaosStore, "w " + s + " 1"} }
	clean := [][2]string{
		run("start 10 a 1 100 0 0 slot-0"), run("start 11 b 2 105 0 0 slot-1"),
		w("10 a 1 110"), w("11 b 2 112"), run("end 10 a 1 130 exit"),
		run("start 12 c 3 140 0 0 slot-0"), w("12 c 3 150"), run("end 11 b 2 155 exit"), run("end 12 c 3 160 exit"),
	}
	with := func(extra ...[2]string) [][2]string { return append(append([][2]string(nil), clean...), extra...) }
	for _, tc := range []struct {
		name  string
		lines [][2]string
		want  string
	}{
		{"clean", clean, ""},
		{"N+1 alive", with(run("start 13 d 4 108 0 0 slot-2"), run("end 13 d 4 109 exit")), "(a) 3 jobs alive at 108, more than 2"},
		{"overlap in a slot", with(run("start 14 d 4 120 0 0 slot-1"), run("end 14 d 4 121 exit")), "(a) overlap in slot-1"},
		{"tokens fall in a slot", with(run("start 9 d 4 170 0 0 slot-0"), run("end 9 d 4 171 exit")), "(c) in slot-0 token 9"},
		{"stale write accepted in a slot", with(w("10 a 1 152")), "(b) store line 4"},
		{"refused", with(run("refused 11 b 2 154 13")), "(b) token 11"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]*strings.Builder{chaosRunsLog: {}, chaosStore: {}}
			for _, l := range tc.lines {
				files[l[0]].WriteString(l[1] + "\n")
			}
			for name, b := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got := strings.Join(checkChaosSemaphore(dir, 2).violations, "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("violations in a good history:\n%s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("want a violation with %q, got:\n%s", tc.want, got)
			}
		})
	}
}
