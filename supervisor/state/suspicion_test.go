package state

import (
	"testing"
	"time"
)

func TestSuspicionRaise(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	own := HolderInfo{SessionTimeoutMS: 6000, KillGraceMS: 1000}
	theirs := HolderInfo{SessionTimeoutMS: 2000, KillGraceMS: 500}
	for _, c := range []struct {
		name      string
		before    Suspicion
		owner     string
		info      HolderInfo
		at        time.Time
		wantUntil time.Time
		wantFresh bool
	}{
		{"first evidence: the holder's own bounds", Suspicion{}, "lock-a-1", theirs, t0,
			t0.Add(2500*time.Millisecond + KillSlack), true},
		{"bounds unknown: ours", Suspicion{}, "lock-a-1", HolderInfo{}, t0,
			t0.Add(7000*time.Millisecond + KillSlack), true},
		{"same owner later: extended", Suspicion{Owner: "lock-a-1", Until: t0.Add(time.Second), Why: "old"}, "lock-a-1", theirs, t0.Add(time.Second),
			t0.Add(time.Second + 2500*time.Millisecond + KillSlack), false},
		{"same owner, shorter bound: kept", Suspicion{Owner: "lock-a-1", Until: t0.Add(time.Hour), Why: "old"}, "lock-a-1", theirs, t0,
			t0.Add(time.Hour), false},
		{"another owner: replaced, even if sooner", Suspicion{Owner: "lock-a-1", Until: t0.Add(time.Hour)}, "lock-b-2", theirs, t0,
			t0.Add(2500*time.Millisecond + KillSlack), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, fresh := c.before.Raise(c.owner, c.info, own, "why", c.at)
			if got.Owner != c.owner || !got.Until.Equal(c.wantUntil) || fresh != c.wantFresh {
				t.Errorf("raise = %+v fresh %v, want owner %s until %v fresh %v", got, fresh, c.owner, c.wantUntil, c.wantFresh)
			}
			if !got.Until.Equal(c.before.Until) && got.Why != "why" {
				t.Errorf("a new bound keeps the old evidence %q", got.Why)
			}
		})
	}
}

func TestSuspicionBlocksAndMustWait(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := Suspicion{Owner: "lock-a-1", Until: t0.Add(3 * time.Second), Why: "run node held by a contender no longer queued"}
	for _, c := range []struct {
		name     string
		s        Suspicion
		record   string
		at       time.Time
		blocks   bool
		mustWait time.Duration
	}{
		{"none", Suspicion{}, "held lock-a-1", t0, false, 0},
		{"suspected holder still recorded as holding", s, "held lock-a-1", t0, true, 3 * time.Second},
		{"another holder recorded since", s, "held lock-c-3", t0.Add(time.Second), true, 2 * time.Second},
		{"suspected holder released", s, "released lock-a-1", t0, false, 0},
		{"another released: no confirmation", s, "released lock-c-3", t0, true, 3 * time.Second},
		{"empty record", s, "", t0, true, 3 * time.Second},
		{"bound passed", s, "held lock-a-1", t0.Add(3 * time.Second), false, 0},
		{"bound long passed", s, "held lock-a-1", t0.Add(time.Minute), false, -57 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.s.Blocks(c.record, c.at); got != c.blocks {
				t.Errorf("blocks(%q) at +%v = %v, want %v", c.record, c.at.Sub(t0), got, c.blocks)
			}
			w, why := c.s.MustWait(c.record, c.at)
			if w != c.mustWait {
				t.Errorf("mustWait(%q) at +%v = %v, want %v", c.record, c.at.Sub(t0), w, c.mustWait)
			}
			if confirmed := c.s.Owner == "" || c.record == "released "+c.s.Owner; confirmed != (why == "") {
				t.Errorf("mustWait = %v with evidence %q", w, why)
			}
		})
	}
}

func TestUnclean(t *testing.T) {
	for _, c := range []struct {
		record, me string
		want       bool
	}{
		{"", "lock-b-2", false},                  // first holder
		{"released lock-a-1", "lock-b-2", false}, // clean handoff
		{"held lock-a-1", "lock-b-2", true},      // its session ended holding
		{"held lock-b-2", "lock-b-2", false},     // our own, from a take whose reply was lost
		{"stopping lock-a-1", "lock-b-2", true},  // it lost its standing and never released
		{"something else", "lock-b-2", false},
	} {
		if got := Unclean(c.record, c.me); got != c.want {
			t.Errorf("unclean(%q, %s) = %v, want %v", c.record, c.me, got, c.want)
		}
	}
}
