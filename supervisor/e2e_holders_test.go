package supervisor_test

import (
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
)

// `coordrun run --holders 2`: two of four run at once, each with its own
// token; `coordrun status` shows both holders and the two waiting; a
// contender asking for another N (3, or the plain lock's 1) is refused
// with both values and exit 64.
func TestE2EHolders(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		const n, contenders = 2, 4
		r := newRig(t, b)
		holders := []string{"--holders", "2"}
		var sups []*proc
		for i := range contenders {
			label := fmt.Sprintf("s%d", i)
			sups = append(sups, r.supervise(label, holders, r.job(label, "-after", r.path("gate"), "-hold", "100ms")...))
		}
		var ls supervisor.LockState
		testkit.WaitFor(t, 30*time.Second, "two holders and two waiters", func() bool {
			ls = r.state()
			return len(ls.Holders) == n && len(ls.Waiters) == contenders-n
		})
		if js := r.statusJSON(); len(js.Holders) != n || len(js.Waiters) != contenders-n {
			t.Errorf("coordrun status --json: %d holders, %d waiters; want %d and %d", len(js.Holders), len(js.Waiters), n, contenders-n)
		}
		if ls.MaxHolders != n {
			t.Errorf("status says max_holders %d, want %d", ls.MaxHolders, n)
		}
		out := statusText(t, r)
		for _, want := range []string{"holder 1/2", "holder 2/2", "waiter 1", "waiter 2"} {
			if !strings.Contains(out, want) {
				t.Errorf("coordrun status lacks %q:\n%s", want, out)
			}
		}

		for _, tc := range []struct {
			extra []string
			mine  string
		}{{[]string{"--holders", "3"}, "--holders 3"}, {nil, "--holders 1"}} {
			p := r.supervise("odd", tc.extra, r.job("odd")...)
			if code := p.Exit(t, 30*time.Second); code != supervisor.ExitUsage {
				t.Errorf("%s beside --holders 2: exit %d, want %d; output:\n%s", tc.mine, code, supervisor.ExitUsage, p.Out.String())
			}
			if o := p.Out.String(); !strings.Contains(o, tc.mine) || !strings.Contains(o, "asks for 2") {
				t.Errorf("%s beside --holders 2: the refusal does not give both values:\n%s", tc.mine, o)
			}
		}

		r.touch("gate")
		for _, s := range sups {
			if code := s.Exit(t, 30*time.Second); code != 0 {
				t.Errorf("%s exited %d, want 0; output:\n%s", s.Name, code, s.Out.String())
			}
		}
		// At most n alive at once, n at some point, every token distinct.
		type edge struct {
			at    time.Time
			delta int
		}
		var edges []edge
		tokens := map[int64]string{}
		for _, x := range r.records() {
			switch x.kind {
			case "start":
				edges = append(edges, edge{x.at, +1})
				if other, dup := tokens[x.token]; dup {
					t.Errorf("token %d given to %s and %s", x.token, other, x.label)
				}
				tokens[x.token] = x.label
			case "end":
				edges = append(edges, edge{x.at, -1})
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
		if most != n || len(tokens) != contenders {
			t.Errorf("%d jobs alive at most, %d tokens; want %d and %d", most, len(tokens), n, contenders)
		}
	})
}

// statusText runs `coordrun status <lock>`.
func statusText(t *testing.T, r *rig) string {
	t.Helper()
	cmd := exec.Command(e2eBin, "status", "--servers", r.b.serverArg(), r.lock)
	cmd.Env = append(baseEnv(), r.mark)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("coordrun status: %v\n%s", err, out)
	}
	return string(out)
}
