package ensemble

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
)

// The sweep's rule: a folder is due once seen empty in one state (its
// pzxid and data version) for the idle time; any change starts over, and
// a folder no longer empty is forgotten.
func TestIdleSweepRule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	idle := time.Minute
	a := idleFolder{path: "/l/a", pzxid: 5, version: 1}
	b := idleFolder{path: "/l/b", pzxid: 7, version: 0}
	var s idleSweep
	names := func(fs []idleFolder) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.path)
		}
		return out
	}
	for _, step := range []struct {
		at    time.Duration
		empty []idleFolder
		want  []string
	}{
		{0, []idleFolder{a, b}, nil},
		{30 * time.Second, []idleFolder{a, b}, nil},
		// a waiter came and went: b's pzxid moved, its wait starts over.
		{40 * time.Second, []idleFolder{a, {path: "/l/b", pzxid: 9}}, nil},
		{60 * time.Second, []idleFolder{a, {path: "/l/b", pzxid: 9}}, []string{"/l/a"}},
		// b held meanwhile (its record's version moved), then idle again.
		{90 * time.Second, []idleFolder{{path: "/l/b", pzxid: 9, version: 2}}, nil},
		{149 * time.Second, []idleFolder{{path: "/l/b", pzxid: 9, version: 2}}, nil},
		{150 * time.Second, []idleFolder{{path: "/l/b", pzxid: 9, version: 2}}, []string{"/l/b"}},
		// a not empty for a moment: forgotten, and waited for anew.
		{151 * time.Second, nil, nil},
		{152 * time.Second, []idleFolder{a}, nil},
		{211 * time.Second, []idleFolder{a}, nil},
		{212 * time.Second, []idleFolder{a}, []string{"/l/a"}},
	} {
		got := names(s.due(t0.Add(step.at), idle, step.empty))
		if fmt.Sprint(got) != fmt.Sprint(step.want) {
			t.Errorf("at %v: due %v, want %v", step.at, got, step.want)
		}
	}
	var many []idleFolder
	for i := range maxIdleRemoves + 5 {
		many = append(many, idleFolder{path: fmt.Sprintf("/l/%d", i)})
	}
	s = idleSweep{}
	s.due(t0, idle, many)
	if n := len(s.due(t0.Add(idle), idle, many)); n != maxIdleRemoves {
		t.Errorf("one sweep removes %d, want at most %d", n, maxIdleRemoves)
	}
}

// The leader removes lock folders left empty for the idle time, a
// semaphore's parts and then its folder included, and never one with a
// contender in it, nor the lock root.
func TestIdleLockFoldersRemoved(t *testing.T) {
	const idle = 300 * time.Millisecond
	c := startCluster(t, 1, withAdmin, func(cfg *Config) { cfg.RemoveIdleLocks = idle })
	m := c.waitLeader()
	ctx := testkit.Context(t, 60*time.Second)
	cl, err := client.Connect(ctx, client.Config{Servers: []string{c.ClientAddr(0)}, SessionTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, p := range []string{"/coordrun/locks/unused", "/coordrun/locks/sem/gate", "/coordrun/locks/sem/slot-0", "/coordrun/locks/sem/held", "/coordrun/locks/waited"} {
		if err := recipe.EnsurePath(ctx, cl, p, client.OpenACL); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Create(ctx, "/coordrun/locks/waited/lock-x-0000000001", nil, wire.FlagEphemeral, client.OpenACL); err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool {
		_, ok, err := cl.Exists(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	testkit.WaitFor(t, 20*time.Second, "the idle folders to be removed", func() bool {
		return !exists("/coordrun/locks/unused") && !exists("/coordrun/locks/sem")
	})
	if !exists("/coordrun/locks/waited") || !exists("/coordrun/locks") {
		t.Error("a folder with a contender in it, or the lock root, was removed")
	}
	if n, _ := scrapeMetrics(t, m).value("coordrun_idle_locks_removed_total"); n != 5 {
		t.Errorf("coordrun_idle_locks_removed_total %v, want 5 (unused, gate, slot-0, held, sem)", n)
	}
}

// Contenders that join while the sweep removes their folder never fail:
// a contender finding the folder gone makes it again.
func TestIdleLockSweepRace(t *testing.T) {
	c := startCluster(t, 1, withAdmin, func(cfg *Config) { cfg.RemoveIdleLocks = 5 * time.Millisecond })
	m := c.waitLeader()
	ctx := testkit.Context(t, 90*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := client.Connect(ctx, client.Config{Servers: []string{c.ClientAddr(0)}, SessionTimeout: 10 * time.Second})
			if err != nil {
				errs <- err
				return
			}
			defer cl.Close()
			for i := range 40 {
				dir := fmt.Sprintf("/coordrun/locks/race-%d", (i+w)%12)
				e, err := recipe.Enter(ctx, cl, dir, recipe.Info{Host: "w", PID: w}, recipe.Options{})
				if err == nil {
					err = e.Acquire(ctx, nil)
					err = errors.Join(err, e.Release(ctx))
				}
				if err != nil {
					errs <- fmt.Errorf("contender %d, round %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n, _ := scrapeMetrics(t, m).value("coordrun_idle_locks_removed_total")
	if n == 0 {
		t.Error("the sweep removed nothing while contenders came and went")
	}
	t.Logf("%v folders removed under 4 contenders' 160 rounds", n)
}
