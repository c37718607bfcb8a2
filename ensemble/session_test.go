package ensemble

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// The tracker expires a session a full timeout after it was last heard
// from, once; a touch while its expiry is under way does not revive it,
// and a new leader's grace does.
func TestSessionTracker(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	tr := newSessionTracker(clock.Now)
	tr.add(1, 4*time.Second)
	tr.add(2, 10*time.Second)
	if tr.count() != 2 || !tr.touch(1) || tr.touch(3) {
		t.Fatal("a new session is not alive, or an unknown one is")
	}

	clock.advance(3 * time.Second)
	tr.touch(1) // deadline 1007
	clock.advance(2 * time.Second)
	if ids := tr.expired(); len(ids) != 0 {
		t.Fatalf("expired %v after 2s of a 4s timeout", ids)
	}
	clock.advance(3 * time.Second) // 1008
	ids := tr.expired()
	if !slices.Equal(ids, []int64{1}) {
		t.Fatalf("expired %v, want [1]", ids)
	}
	if again := tr.expired(); len(again) != 0 {
		t.Errorf("an expiry under way was reported again: %v", again)
	}
	if tr.touch(1) {
		t.Error("a touch revived a session whose expiry is under way")
	}
	if !tr.stillExpired(1) {
		t.Error("the session is no longer expired")
	}
	// The expiry failed (no quorum): the session is expired again at the
	// next look.
	tr.unmarkExpiring(1)
	if ids := tr.expired(); !slices.Equal(ids, []int64{1}) {
		t.Errorf("after a failed expiry: %v", ids)
	}

	// A new leader gives everyone a full timeout from now.
	tr.refreshAll()
	clock.advance(9 * time.Second)
	if ids := tr.expired(); !slices.Equal(ids, []int64{1}) {
		t.Errorf("after the grace: %v, want [1] (session 2 has 10s)", ids)
	}
	if !tr.touch(2) {
		t.Error("session 2 is not alive")
	}
	// A touch between the expiry and its confirmation: not expired after
	// all.
	clock.advance(11 * time.Second)
	if ids := tr.expired(); !slices.Contains(ids, 2) {
		t.Fatalf("session 2 not expired: %v", ids)
	}
	tr.unmarkExpiring(2)
	tr.touch(2)
	if tr.stillExpired(2) {
		t.Error("a session touched since is still expired")
	}

	tr.remove(1)
	tr.reset(map[int64]time.Duration{7: time.Second})
	if tr.count() != 1 || tr.touch(2) || !tr.touch(7) {
		t.Errorf("after reset: %d sessions", tr.count())
	}
}

// A waiter of a generation is released once a batch noting it reached the
// leader, and only then; a failed batch goes out again with what was noted
// since; a session the leader does not know is reported gone.
func TestLivenessRelay(t *testing.T) {
	type batch struct {
		ids  []int64
		done chan struct{}
		fail bool
	}
	batches := make(chan *batch)
	dead := map[int64]bool{9: true}
	r := newLivenessRelay(func(ctx context.Context, ids []int64) ([]int64, error) {
		b := &batch{ids: slices.Sorted(slices.Values(ids)), done: make(chan struct{})}
		select {
		case batches <- b:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		<-b.done
		if b.fail {
			return nil, errors.New("leader unreachable")
		}
		var out []int64
		for _, id := range ids {
			if dead[id] {
				out = append(out, id)
			}
		}
		return out, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.run(ctx, time.Millisecond) }()
	defer wg.Wait()
	defer cancel()

	waitErr := func(g uint64, id int64) chan error {
		ch := make(chan error, 1)
		go func() {
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			defer wcancel()
			ch <- r.wait(wctx, g, id)
		}()
		return ch
	}
	g1 := r.note(1)
	r.note(1)
	w1 := waitErr(g1, 1)
	b := <-batches
	if !slices.Equal(b.ids, []int64{1}) {
		t.Fatalf("first batch %v, want [1] once", b.ids)
	}
	// Noted while the batch is in flight: the next generation.
	g2 := r.note(2)
	if g2 <= g1 {
		t.Fatalf("generation %d while %d is in flight", g2, g1)
	}
	w2 := waitErr(g2, 2)
	select {
	case err := <-w1:
		t.Fatalf("released before the leader answered: %v", err)
	default:
	}
	b.fail = true
	close(b.done)
	// The failed batch's session goes out again with the new one.
	b = <-batches
	if !slices.Equal(b.ids, []int64{1, 2}) {
		t.Fatalf("retried batch %v, want [1 2]", b.ids)
	}
	select {
	case err := <-w1:
		t.Fatalf("released by a failed batch: %v", err)
	default:
	}
	close(b.done)
	if err := <-w1; err != nil {
		t.Errorf("wait 1: %v", err)
	}
	if err := <-w2; err != nil {
		t.Errorf("wait 2: %v", err)
	}

	g9 := r.note(9)
	w9 := waitErr(g9, 9)
	b = <-batches
	close(b.done)
	if err := <-w9; !errors.Is(err, errSessionGone) {
		t.Errorf("a session the leader holds dead: %v", err)
	}
}

// silence is the time since the session was last heard from, which the
// status page shows for a lock holder whose host went quiet.
func TestSessionTrackerSilence(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	tr := newSessionTracker(clock.Now)
	tr.add(1, 4*time.Second)
	clock.advance(3 * time.Second)
	if silent, timeout, ok := tr.silence(1); !ok || silent != 3*time.Second || timeout != 4*time.Second {
		t.Errorf("after 3s: %v of %v, %v", silent, timeout, ok)
	}
	tr.touch(1)
	clock.advance(time.Second)
	if silent, _, _ := tr.silence(1); silent != time.Second {
		t.Errorf("1s after a touch: %v", silent)
	}
	if _, _, ok := tr.silence(2); ok {
		t.Error("an unknown session has a silence")
	}
}

// The expire loop's look every 25 ms scans the sessions only once one
// may be due; whatever lowers the earliest deadline (a new session with a
// shorter timeout, an expiry that failed, a new leader's grace) still has
// the session expired on time.
func TestSessionTrackerScansOnlyWhenDue(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	tr := newSessionTracker(clock.Now)
	for id := int64(1); id <= 1000; id++ {
		tr.add(id, 10*time.Second)
	}
	if ids := tr.expired(); len(ids) != 0 {
		t.Fatalf("expired %v at once", ids)
	}
	scans := tr.scans
	for range 100 { // 9.9 s of looks every 99 ms, every session touched
		clock.advance(99 * time.Millisecond)
		for id := int64(1); id <= 1000; id++ {
			tr.touch(id)
		}
		if ids := tr.expired(); len(ids) != 0 {
			t.Fatalf("expired %v while touched", ids)
		}
	}
	if tr.scans-scans > 1 {
		t.Fatalf("%d scans of 1,000 sessions in 10 s of one timeout, want at most 1", tr.scans-scans)
	}

	// A shorter-timeout session lowers the bound.
	tr.add(2000, time.Second)
	clock.advance(1001 * time.Millisecond)
	if ids := tr.expired(); !slices.Equal(ids, []int64{2000}) {
		t.Fatalf("expired %v, want [2000]", ids)
	}
	// Its expiry failed: found again at the next look.
	tr.unmarkExpiring(2000)
	if ids := tr.expired(); !slices.Equal(ids, []int64{2000}) {
		t.Fatalf("after a failed expiry: %v, want [2000]", ids)
	}
	// A touch between the expiry and its confirmation.
	tr.unmarkExpiring(2000)
	tr.remove(2000)
	tr.add(3000, time.Second)
	clock.advance(1001 * time.Millisecond)
	if ids := tr.expired(); !slices.Equal(ids, []int64{3000}) {
		t.Fatalf("expired %v, want [3000]", ids)
	}
	tr.remove(3000)

	// The others, untouched from now, expire a full timeout after their
	// last touch; a new leader's grace restarts them all.
	tr.refreshAll()
	clock.advance(10*time.Second - time.Millisecond)
	if ids := tr.expired(); len(ids) != 0 {
		t.Fatalf("expired %d within the grace", len(ids))
	}
	clock.advance(2 * time.Millisecond)
	if ids := tr.expired(); len(ids) != 1000 {
		t.Fatalf("expired %d after the grace, want 1000", len(ids))
	}
	// With nothing left to wait for, a new session still expires.
	tr.add(4000, time.Second)
	clock.advance(1001 * time.Millisecond)
	if ids := tr.expired(); !slices.Equal(ids, []int64{4000}) {
		t.Fatalf("expired %v, want [4000]", ids)
	}
}
