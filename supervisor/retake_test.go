package supervisor

import (
	"context"
	"errors"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// lateRetake is a lock entry whose Retake, once called, waits until the
// entry's release is over (or a while, if it never is) before taking the run
// record back: the order in which the scheduler may run an unjoined
// Retake goroutine and the release that follows the job's end.
type lateRetake struct {
	engine.Entry
	released   chan struct{}
	releaseOne sync.Once
	retaken    chan struct{} // closed once the real Retake returned
}

func (l *lateRetake) Retake(ctx context.Context, loss engine.Loss) {
	defer close(l.retaken)
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-l.released:
	case <-t.C:
	}
	l.Entry.Retake(ctx, loss)
}

func (l *lateRetake) Release(ctx context.Context) error {
	defer l.releaseOne.Do(func() { close(l.released) })
	return l.Entry.Release(ctx)
}

// A holder whose run record another client deleted stops its job and
// takes the run record back while it stops. That retake must be over
// before the lock is released: a run record made after the release is
// this session's, and under cron (one session for every firing) it would
// keep the job's lock from everyone until the cron process ends.
func TestRetakeJoinedBeforeRelease(t *testing.T) {
	exe, err := testkit.Binary(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addr := ensembletest.Start(t, 1).ClientAddr(0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := dial(ctx, ConnOptions{Servers: []string{addr}, SessionTimeout: 10 * time.Second, DriftMargin: 100 * time.Millisecond},
		300*time.Millisecond, testkit.Logger("holder"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	foreign, err := client.Connect(ctx, client.Config{Servers: []string{addr}, SessionTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()

	dir := path.Join(state.DefaultCronRoot, "retake", "lock")
	inner, err := s.enter(ctx, dir, []string{"sleep"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	e := &lateRetake{Entry: inner, released: make(chan struct{}), retaken: make(chan struct{})}
	if err := e.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	hctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	pump := newSignalPump(nil)
	defer pump.close()
	h := &holding{s: s, e: e, sigs: pump, standing: e.WatchStanding(hctx)}
	ran := make(chan int, 1)
	go func() {
		code, _ := h.run(hctx, jobSpec{exe: exe, argv: []string{"sleep", "60"}, grace: 300 * time.Millisecond, lockEnv: lockEnv("retake", e)}, nil)
		ran <- code
	}()
	run := path.Join(dir, state.RunNode)
	testkit.WaitFor(t, 20*time.Second, "the holder's run record", func() bool {
		_, ok, err := foreign.Exists(ctx, run)
		return err == nil && ok
	})
	if err := foreign.Delete(ctx, run, -1); err != nil {
		t.Fatal(err)
	}
	if code := testkit.Recv(t, ran, 30*time.Second, "the job stopped after the lock's loss"); code != ExitLockLost {
		t.Fatalf("run ended with %d, want %d (lock lost)", code, ExitLockLost)
	}
	if err := s.release(ctx, e); err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, e.retaken, 30*time.Second, "the retake to be over")
	st, ok, err := foreign.Exists(ctx, run)
	if err != nil && !errors.Is(err, wire.ErrNoNode) {
		t.Fatal(err)
	}
	if ok {
		t.Fatalf("after the release the run record is back, owned by session 0x%x (the holder's is %s): the lock stays taken until that session ends",
			st.EphemeralOwner, s.conn.ID())
	}
}
