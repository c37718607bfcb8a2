package supervisor

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// The watchdog's kill timing on made-up boottimes.
func TestKillPlan(t *testing.T) {
	const base = Boottime(1000 * time.Second) // any boottime: the plan reads no clock
	at := func(d time.Duration) Boottime { return base + Boottime(d) }
	const (
		none = syscall.Signal(0)
		term = syscall.SIGTERM
		kill = syscall.SIGKILL
	)
	// A step asks the plan at a time: next, stop (why), or a new deadline
	// (which asks nothing).
	type step struct {
		at       time.Duration
		stop     string
		deadline time.Duration // > 0: set the deadline, then ask next
		sig      syscall.Signal
		wake     time.Duration // of next; ignored for stop
	}
	for _, c := range []struct {
		name     string
		deadline time.Duration
		grace    time.Duration
		steps    []step
		reason   string // exitReason at the last step's time + 1ms
	}{
		{name: "lease runs out: TERM at deadline-slack-grace, KILL at deadline-slack, repeated", deadline: 10 * time.Second, grace: 2 * time.Second,
			steps: []step{
				{at: 0, sig: none, wake: 7900 * time.Millisecond},
				{at: 7 * time.Second, sig: none, wake: 7900 * time.Millisecond},
				{at: 7900 * time.Millisecond, sig: term, wake: 9900 * time.Millisecond},
				{at: 9 * time.Second, sig: none, wake: 9900 * time.Millisecond},
				{at: 9900 * time.Millisecond, sig: kill, wake: 10 * time.Second},
				{at: 9950 * time.Millisecond, sig: none, wake: 10 * time.Second},
				{at: 10 * time.Second, sig: kill, wake: 10100 * time.Millisecond},
				{at: 12 * time.Second, sig: kill, wake: 12100 * time.Millisecond},
			}, reason: reasonDeadline},
		{name: "renewed before TERM: nothing sent", deadline: 10 * time.Second, grace: 2 * time.Second,
			steps: []step{
				{at: 5 * time.Second, sig: none, wake: 7900 * time.Millisecond},
				{at: 6 * time.Second, deadline: 20 * time.Second, sig: none, wake: 17900 * time.Millisecond},
				{at: 7900 * time.Millisecond, sig: none, wake: 17900 * time.Millisecond},
			}, reason: reasonExit},
		{name: "renewed after TERM: no KILL, TERM not repeated", deadline: 10 * time.Second, grace: 2 * time.Second,
			steps: []step{
				{at: 7900 * time.Millisecond, sig: term, wake: 9900 * time.Millisecond},
				{at: 8 * time.Second, deadline: 20 * time.Second, sig: none, wake: 19900 * time.Millisecond},
				{at: 9900 * time.Millisecond, sig: none, wake: 19900 * time.Millisecond},
				{at: 19900 * time.Millisecond, sig: kill, wake: 20 * time.Second},
			}, reason: reasonDeadline},
		{name: "stop on request: TERM now, KILL after grace", deadline: 10 * time.Second, grace: 2 * time.Second,
			steps: []step{
				{at: time.Second, stop: reasonStopped, sig: term},
				{at: time.Second, sig: none, wake: 3 * time.Second},
				{at: 3 * time.Second, sig: kill, wake: 3100 * time.Millisecond},
			}, reason: reasonStopped},
		{name: "stopped twice: the first reason and the earlier KILL stick", deadline: 10 * time.Second, grace: 2 * time.Second,
			steps: []step{
				{at: time.Second, stop: reasonStopped, sig: term},
				{at: 2 * time.Second, stop: reasonOrphaned, sig: none},
				{at: 2 * time.Second, sig: none, wake: 3 * time.Second},
			}, reason: reasonStopped},
		{name: "orphaned near the deadline: the deadline's KILL comes first", deadline: 10 * time.Second, grace: 2 * time.Second,
			steps: []step{
				{at: 9 * time.Second, stop: reasonOrphaned, sig: term},
				{at: 9 * time.Second, sig: none, wake: 9900 * time.Millisecond},
				{at: 9900 * time.Millisecond, sig: kill, wake: 10 * time.Second},
			}, reason: reasonOrphaned},
		{name: "stopped after the deadline's TERM: no second TERM, the deadline's reason", deadline: 10 * time.Second, grace: 2 * time.Second,
			steps: []step{
				{at: 7900 * time.Millisecond, sig: term, wake: 9900 * time.Millisecond},
				{at: 8 * time.Second, stop: reasonStopped, sig: none},
				{at: 8 * time.Second, sig: none, wake: 9900 * time.Millisecond},
			}, reason: reasonDeadline},
		{name: "given a deadline already past: KILL at once", deadline: 0, grace: 2 * time.Second,
			steps: []step{
				{at: time.Second, sig: kill, wake: 1100 * time.Millisecond},
			}, reason: reasonDeadline},
		{name: "no grace: KILL without TERM, and no wake-ups between kills", deadline: 10 * time.Second, grace: 0,
			steps: []step{
				{at: 0, sig: none, wake: 9900 * time.Millisecond},
				{at: 9900 * time.Millisecond, sig: kill, wake: 10 * time.Second},
				{at: 9901 * time.Millisecond, sig: none, wake: 10 * time.Second},
			}, reason: reasonDeadline},
		{name: "exits before anything: a plain exit", deadline: 10 * time.Second, grace: 2 * time.Second,
			steps: []step{
				{at: 0, sig: none, wake: 7900 * time.Millisecond},
			}, reason: reasonExit},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := killPlan{deadline: at(c.deadline), grace: c.grace}
			var last time.Duration
			for i, s := range c.steps {
				last = s.at
				what := fmt.Sprintf("step %d at +%v", i, s.at)
				if s.stop != "" {
					if sig := p.stop(at(s.at), s.stop); sig != s.sig {
						t.Errorf("%s: stop(%s) = %v, want %v", what, s.stop, sig, s.sig)
					}
					continue
				}
				if s.deadline > 0 {
					p.deadline = at(s.deadline)
				}
				sig, wake := p.next(at(s.at))
				if sig != s.sig || wake != at(s.wake) {
					t.Errorf("%s: next = %v, wake +%v; want %v, wake +%v", what, sig, time.Duration(wake-base), s.sig, s.wake)
				}
			}
			if got := p.exitReason(at(last + time.Millisecond)); got != c.reason {
				t.Errorf("exitReason = %s, want %s", got, c.reason)
			}
		})
	}
}

// A job that exits on its own past its deadline, with nothing sent (the
// watchdog was frozen across it), ran without a lease at the end.
func TestKillPlanExitPastDeadline(t *testing.T) {
	p := killPlan{deadline: Boottime(10 * time.Second), grace: time.Second}
	for _, c := range []struct {
		at   time.Duration
		want string
	}{
		{9899 * time.Millisecond, reasonExit},
		{9900 * time.Millisecond, reasonDeadline},
		{time.Minute, reasonDeadline},
	} {
		if got := p.exitReason(Boottime(c.at)); got != c.want {
			t.Errorf("exitReason at %v = %s, want %s", c.at, got, c.want)
		}
	}
}
