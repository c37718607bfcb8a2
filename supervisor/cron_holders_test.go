package supervisor_test

import (
	"sort"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
)

// holders: 2 on a cron job: firings every second of a job that runs 2.5 s,
// on two hosts, with overlap skip. Two runs go at once (with one holder,
// every other firing would be skipped), never three; each run has its own
// token.
func TestCronHolders(t *testing.T) {
	forEachCronBackend(t, cronHolders)
}

func cronHolders(t *testing.T, b *backend) {
	r := newRig(t, b)
	obs := cronObserver(t, b)
	root, job := cronRoot(b, "cron-holders"), "wide"
	runs := r.path("runs.log")
	sink := &cronLogSink{}
	for _, label := range []string{"p", "q"} {
		cronStartHost(t, r, sink, cronHostSpec{label: label, root: root,
			jobs: func() []*supervisor.CronJob {
				return []*supervisor.CronJob{{Name: job, Spec: "@every 1s", Argv: cronScript(runs, 2500*time.Millisecond),
					Overlap: state.OverlapSkip, Holders: 2}}
			}})
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- cron hosts' log:\n%s", sink.String())
		}
	})
	cronAwaitHosts(t, obs, root, job, 2)
	testkit.WaitFor(t, 30*time.Second, "four runs to finish", func() bool {
		n := 0
		for _, l := range cronReadLog(t, runs) {
			if l.kind == "end" {
				n++
			}
		}
		return n >= 4
	})
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	tokens := map[int64]bool{}
	for _, l := range cronReadLog(t, runs) {
		switch l.kind {
		case "start":
			edges = append(edges, edge{l.at, +1})
			if tokens[l.token] {
				t.Errorf("token %d given to two runs", l.token)
			}
			tokens[l.token] = true
		case "end":
			edges = append(edges, edge{l.at, -1})
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		return edges[i].at.Before(edges[j].at) || edges[i].at.Equal(edges[j].at) && edges[i].delta > edges[j].delta
	})
	alive, most := 0, 0
	for _, e := range edges {
		alive += e.delta
		most = max(most, alive)
	}
	if most != 2 {
		t.Errorf("at most %d runs at once, want 2", most)
	}
}
