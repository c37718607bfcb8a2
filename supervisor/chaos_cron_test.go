package supervisor_test

import (
	"context"
	"fmt"
	"math/rand"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
)

// cronChaosKinds are the faults of the cron chaos run: the host whose job
// runs killed, stopped alone, cut off or frozen whole, and the ensemble's
// leader killed. The short run injects each once.
var cronChaosKinds = []string{faultSupKill, faultSupStop, faultHolderFreeze, faultSupCut, faultLeaderKill}

// The cron variant of the chaos test: three `coordrun cron` hosts (the
// real binary, each through its own proxies) run "@every 2s" with
// retry-lost 1 on a 3-member ensemble of server processes, and the chaos
// job as the command, so the singleton checker applies to every run of
// the job (one lock, one fenced store). On top of it, from the firing
// records: every run belongs to exactly one firing's record, no firing
// ran more often than retry-lost + 1, and each run a fault was aimed at
// is recorded lost (its firing then run again or marked lost for good).
//
//	go test -race -run TestChaosCron ./supervisor
//	COORDRUN_CHAOS_DURATION=3m go test -race -run TestChaosCron -v -timeout 30m ./supervisor
func TestChaosCron(t *testing.T) {
	t.Run("coordrun", func(t *testing.T) { t.Parallel(); chaosCron(t, "coordrun", cronChaosKinds) })
	t.Run("etcd", func(t *testing.T) { t.Parallel(); chaosCron(t, "etcd", chaosEtcdCronKinds) })
}

func chaosCron(t *testing.T, engine string, cronKinds []string) {
	seed, duration := chaosParams(t)
	var slow atomic.Bool
	dir := chaosRecordsDir(t, seed, &slow)
	// On etcd the cron records live under the key prefix (/coordrun/).
	root, retryLost := "/cron-chaos", 1
	if engine == "etcd" {
		root = "/coordrun/cron-chaos"
	}
	r, members := chaosBackend(t, engine, dir)
	w := newChaosWorld(t, r, members, dir, seed)
	w.lockDir = path.Join(root, r.lock, "lock")
	w.slow = &slow
	w.cutHeals = true
	w.launch = func(servers, label string, env, job []string) *proc {
		b := &backend{servers: strings.Split(servers, ",")}
		flags := []string{"--retry-lost", fmt.Sprint(retryLost), "--history", "10000", "--zookeeper-margin", zkMargin.String()}
		return r.startProc(label, env, e2eBin, cronProcArgs(b, root, r.lock, "@every 2s", flags, job)...)
	}
	defer w.shutdown()
	for k := 1; k <= 3; k++ {
		w.wg.Add(1)
		go w.hostLoop(k, rand.New(rand.NewSource(seed+int64(k))))
	}
	w.awaitProgress("the first run")

	began := time.Now()
	kinds := slices.Clone(cronKinds)
	w.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for i := 0; i < len(kinds) || time.Since(began) < duration; i++ {
		w.inject(kinds[i%len(kinds)])
		w.pace(0, 2*time.Second)
	}

	// Before the ensemble goes: the records, once every loss was seen.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := r.session()
	var recs []state.FiringRecord
	var err error
	waitErr := func() error {
		for ctx.Err() == nil {
			recs, err = supervisor.CronHistory(ctx, c, root, r.lock)
			kids, herr := c.Children(ctx, path.Join(root, r.lock, "hosts"))
			if err == nil && herr == nil && !slices.ContainsFunc(recs, func(x state.FiringRecord) bool {
				open := x.State == state.FiringClaimed || x.State == state.FiringRunning
				return open && !slices.Contains(kids, x.HostNode)
			}) {
				return nil
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		return fmt.Errorf("records still claimed or running by a host that is gone, after 60s: %v", err)
	}()
	if waitErr != nil {
		w.problem("%v", waitErr)
	}
	w.shutdown()
	t.Logf("firing records: %d", len(recs))
	w.verdict(r.lock, began, checkCronFirings(recs, w.runs(), w.aimed, retryLost))
}

// checkCronFirings checks the runs against the firing records: each run's
// token is one attempt of exactly one firing; no firing has more than
// retryLost+1 attempts or runs; a run a fault was aimed at (aimed: token
// → fault) is recorded lost, as an earlier attempt or as the firing's
// end.
func checkCronFirings(recs []state.FiringRecord, runs []chaosRec, aimed map[int64]string, retryLost int) []string {
	var bad []string
	firingOf := map[int64]time.Time{}
	claim := func(tok int64, s time.Time) {
		if tok == 0 {
			return
		}
		if prev, dup := firingOf[tok]; dup && !prev.Equal(s) {
			bad = append(bad, fmt.Sprintf("token %d is an attempt of the firings %s and %s", tok, cronFmt(prev), cronFmt(s)))
		}
		firingOf[tok] = s
	}
	byFiring := map[time.Time]state.FiringRecord{}
	for _, x := range recs {
		byFiring[x.Scheduled] = x
		claim(x.Token, x.Scheduled)
		for _, e := range x.Earlier {
			claim(e.Token, x.Scheduled)
		}
		if n := max(x.Attempt, 1); n > retryLost+1 {
			bad = append(bad, fmt.Sprintf("firing %s had %d attempts, more than retry-lost + 1", cronFmt(x.Scheduled), n))
		}
	}
	perFiring := map[time.Time]int{}
	for _, x := range runs {
		if x.kind != "start" {
			continue
		}
		s, ok := firingOf[x.token]
		if !ok {
			bad = append(bad, fmt.Sprintf("run %s (token %d) belongs to no firing's record", x.host, x.token))
			continue
		}
		perFiring[s]++
	}
	for s, n := range perFiring {
		if n > retryLost+1 || n > max(byFiring[s].Attempt, 1) {
			bad = append(bad, fmt.Sprintf("firing %s ran %d times with %d attempts recorded (retry-lost %d)", cronFmt(s), n, byFiring[s].Attempt, retryLost))
		}
	}
	for tok, kind := range aimed {
		s, ok := firingOf[tok]
		if !ok {
			continue // reported above, if it ran
		}
		x := byFiring[s]
		lostEarlier := slices.ContainsFunc(x.Earlier, func(e state.PastAttempt) bool { return e.Token == tok && !e.Lost.IsZero() })
		if !lostEarlier && (x.Token != tok || x.State != state.FiringLost) {
			bad = append(bad, fmt.Sprintf("%s: the run of token %d (firing %s) is not recorded lost: record %s attempt %d token %d, earlier %+v",
				kind, tok, cronFmt(s), x.State, x.Attempt, x.Token, x.Earlier))
		}
	}
	return bad
}

// The firing checker on made-up records: a clean history passes, and
// each kind of fault in it is caught.
func TestCronFiringsChecker(t *testing.T) {
	s1, s2 := time.Unix(1_800_000_000, 0).UTC(), time.Unix(1_800_000_002, 0).UTC()
	good := func() []state.FiringRecord {
		return []state.FiringRecord{
			{Scheduled: s1, State: state.FiringDone, Token: 20, Attempt: 2,
				Earlier: []state.PastAttempt{{Attempt: 1, Token: 10, Lost: s1.Add(3 * time.Second), Reason: "its host's session ended"}}},
			{Scheduled: s2, State: state.FiringLost, Token: 30, Attempt: 1},
		}
	}
	start := func(tok int64) chaosRec { return chaosRec{kind: "start", token: tok, host: "h"} }
	runs := []chaosRec{start(10), start(20), start(30)}
	aimed := map[int64]string{10: faultSupKill, 30: faultHolderFreeze}
	if bad := checkCronFirings(good(), runs, aimed, 1); len(bad) != 0 {
		t.Fatalf("a clean history reported: %v", bad)
	}
	for _, c := range []struct {
		name  string
		edit  func(recs []state.FiringRecord) ([]state.FiringRecord, []chaosRec)
		wants string
	}{
		{"a run of no firing", func(r []state.FiringRecord) ([]state.FiringRecord, []chaosRec) {
			return r, append(slices.Clone(runs), start(40))
		}, "belongs to no firing"},
		{"a firing run more often than attempts", func(r []state.FiringRecord) ([]state.FiringRecord, []chaosRec) {
			return r, append(slices.Clone(runs), start(30))
		}, "ran 2 times with 1 attempts"},
		{"too many attempts", func(r []state.FiringRecord) ([]state.FiringRecord, []chaosRec) {
			r[0].Attempt = 3
			return r, runs
		}, "3 attempts, more than retry-lost + 1"},
		{"an aimed run not recorded lost", func(r []state.FiringRecord) ([]state.FiringRecord, []chaosRec) {
			r[1].State = state.FiringDone
			return r, runs
		}, "token 30 (firing"},
		{"one token in two firings", func(r []state.FiringRecord) ([]state.FiringRecord, []chaosRec) {
			r[1].Token = 20
			return r, runs[:2]
		}, "token 20 is an attempt of the firings"},
	} {
		recs, rs := c.edit(good())
		bad := checkCronFirings(recs, rs, aimed, 1)
		if !slices.ContainsFunc(bad, func(s string) bool { return strings.Contains(s, c.wants) }) {
			t.Errorf("%s: reported %v, want one containing %q", c.name, bad, c.wants)
		}
	}
}
