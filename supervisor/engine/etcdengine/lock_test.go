package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor/engine"
)

const lockDir = "/coordrun/locks/job"

// Several contenders, each with its own session, take the lock in turn:
// never two at once, and every holder's token is greater than the one
// before it. On one member and on three.
func TestEtcdLockMutualExclusion(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("members=%d", n), func(t *testing.T) {
			c := testkit.StartEtcd(t, n)
			const contenders, rounds = 4, 3
			var inside atomic.Int32
			var mu sync.Mutex // guards tokens
			var tokens []int64
			var wg sync.WaitGroup
			errs := make(chan error, contenders)
			for i := range contenders {
				conn := dial(t, c, 3*time.Second)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range rounds {
						if err := hold(ctxT(t), conn, fmt.Sprintf("c%d-%d", i, r), func(tok int64) error {
							if k := inside.Add(1); k != 1 {
								return fmt.Errorf("%d holders at once", k)
							}
							mu.Lock()
							tokens = append(tokens, tok)
							mu.Unlock()
							inside.Add(-1)
							return nil
						}); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if len(tokens) != contenders*rounds {
				t.Fatalf("%d holds, want %d", len(tokens), contenders*rounds)
			}
			for i := 1; i < len(tokens); i++ {
				if tokens[i] <= tokens[i-1] {
					t.Fatalf("token %d after %d: tokens %v", tokens[i], tokens[i-1], tokens)
				}
			}
		})
	}
}

// hold enters, acquires, runs f with the token, and releases.
func hold(ctx context.Context, conn *Conn, name string, f func(int64) error) error {
	e, err := conn.Enter(ctx, lockDir, holder(name, conn.Timeout()))
	if err != nil {
		return err
	}
	defer e.Release(context.WithoutCancel(ctx))
	if err := e.Acquire(ctx, nil); err != nil {
		return err
	}
	if d, why := e.MustWait(); d > 0 {
		return fmt.Errorf("clean handoff asked to wait %v: %s", d, why)
	}
	return f(e.Token())
}

// acquired enters and takes the lock, failing the test otherwise.
func acquired(t *testing.T, conn *Conn, name string) engine.Entry {
	t.Helper()
	e, err := conn.Enter(ctxT(t), lockDir, holder(name, conn.Timeout()))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Acquire(ctxT(t), nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// waiting enters and waits for the lock in the background; the returned
// channel receives Acquire's result.
func waiting(t *testing.T, conn *Conn, name string) (engine.Entry, <-chan error) {
	t.Helper()
	e, err := conn.Enter(ctxT(t), lockDir, holder(name, conn.Timeout()))
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() { ch <- e.Acquire(ctxT(t), nil) }()
	return e, ch
}

// A foreign `etcdctl del` of the holder's entry: the holder is told its
// standing is lost; the next in line does not take the lock while the
// holder still owns its run record, and takes it, with no wait, once the
// holder released.
func TestEtcdLockEntryDeletedByEtcdctl(t *testing.T) {
	c := testkit.StartEtcd(t, 1)
	a, b := dial(t, c, 3*time.Second), dial(t, c, 3*time.Second)
	ea := acquired(t, a, "a")
	losses := ea.WatchStanding(ctxT(t))
	eb, got := waiting(t, b, "b")

	c.Etcdctl("del", ea.Node())
	l := testkit.Recv(t, losses, 5*time.Second, "the holder's loss")
	if l.Node != ea.Node() || l.Event != engine.LossDeleted {
		t.Fatalf("loss %+v", l)
	}
	select {
	case err := <-got:
		t.Fatalf("the next in line took the lock while the holder stops (err %v)", err)
	default:
	}
	q, err := b.List(ctxT(t), lockDir)
	if err != nil {
		t.Fatal(err)
	}
	if q.Stopping == nil || q.Record != "stopping "+path.Base(ea.Node()) {
		t.Fatalf("queue while the holder stops: record %q, stopping %+v", q.Record, q.Stopping)
	}
	if err := ea.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Recv(t, got, 10*time.Second, "the next holder"); err != nil {
		t.Fatal(err)
	}
	if d, why := eb.MustWait(); d > 0 {
		t.Fatalf("after a confirmed release the new holder must wait %v (%s)", d, why)
	}
	if eb.UncleanHandoff() {
		t.Fatal("handoff after the holder's confirmed release reported unclean")
	}
	if eb.Token() <= ea.Token() {
		t.Fatalf("token %d after %d", eb.Token(), ea.Token())
	}
}

// A foreign `etcdctl lease revoke` of the holder's lease: the holder's
// standing watch sees its keys go while its proven deadline is still
// ahead, so the lease was revoked, not expired, and says so as a lost
// lock; the session ends at that deadline. The next in line, which saw
// the lease alive a moment before, waits out the holder's bound before
// its work may start: a revoked holder's job runs until it hears of it,
// or, if it is cut off, until its own deadline.
func TestEtcdLockHolderLeaseRevokedByEtcdctl(t *testing.T) {
	c := testkit.StartEtcd(t, 1)
	a, b := dial(t, c, 3*time.Second), dial(t, c, 3*time.Second)
	ea := acquired(t, a, "a")
	losses := ea.WatchStanding(ctxT(t))
	eb, got := waiting(t, b, "b")
	testkit.WaitFor(t, 5*time.Second, "b observing a's lease", func() bool { return observed(eb) })

	revoked := time.Now()
	c.Etcdctl("lease", "revoke", a.ID())
	l := testkit.Recv(t, losses, 2*time.Second, "the holder's loss")
	if l.Event != LossRevoked {
		t.Fatalf("loss %+v, want %q", l, LossRevoked)
	}
	deadline := a.Lease()
	testkit.Recv(t, a.Done(), 5*time.Second, "the holder's session end")
	if !errors.Is(a.Err(), engine.ErrSessionLost) || time.Now().Before(deadline) {
		t.Fatalf("holder's session ended %v before its deadline: %v", time.Until(deadline), a.Err())
	}
	if err := testkit.Recv(t, got, 10*time.Second, "the next holder"); err != nil {
		t.Fatal(err)
	}
	if !eb.UncleanHandoff() {
		t.Fatal("handoff after a revoked lease reported clean")
	}
	d, _ := eb.MustWait()
	// Its work may start after the holder's bound: its session timeout
	// and kill grace, counted from when the revocation was seen.
	if start := time.Now().Add(d); start.Sub(revoked) < a.Timeout() {
		t.Fatalf("the next holder's work may start %v after the holder's lease was revoked, before its bound %v", start.Sub(revoked), a.Timeout())
	}
}

// A holder that stops its job after a revocation and releases confirms
// its end: the next in line starts without waiting out the bound.
func TestEtcdLockRevokedHolderReleaseConfirmsEnd(t *testing.T) {
	c := testkit.StartEtcd(t, 1)
	a, b := dial(t, c, 3*time.Second), dial(t, c, 3*time.Second)
	ea := acquired(t, a, "a")
	losses := ea.WatchStanding(ctxT(t))
	eb, got := waiting(t, b, "b")
	testkit.WaitFor(t, 5*time.Second, "b observing a's lease", func() bool { return observed(eb) })
	c.Etcdctl("lease", "revoke", a.ID())
	testkit.Recv(t, losses, 2*time.Second, "the holder's loss")
	select {
	case err := <-got:
		t.Fatalf("the next in line took the lock before the revoked holder released (err %v)", err)
	default:
	}
	if err := ea.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Recv(t, got, 2*time.Second, "the next holder, soon after the release"); err != nil {
		t.Fatal(err)
	}
	if d, why := eb.MustWait(); d > 0 {
		t.Fatalf("after the revoked holder released, the next must still wait %v (%s)", d, why)
	}
}

func observed(e engine.Entry) bool {
	en := e.(*entry)
	return en.obsSeen.Load()
}

// A holder killed outright (its session neither renewed nor revoked):
// the next in line takes the lock when the lease expires, with no wait.
func TestEtcdLockHolderLeaseExpires(t *testing.T) {
	c := testkit.StartEtcd(t, 1)
	a, b := dial(t, c, 2*time.Second), dial(t, c, 2*time.Second)
	ea := acquired(t, a, "a")
	eb, got := waiting(t, b, "b")
	testkit.WaitFor(t, 5*time.Second, "b observing a's lease", func() bool { return observed(eb) })
	a.freeze() // stop renewing, as a SIGKILLed holder would
	start := time.Now()
	if err := testkit.Recv(t, got, 15*time.Second, "the next holder"); err != nil {
		t.Fatal(err)
	}
	if !eb.UncleanHandoff() {
		t.Fatal("handoff after an expired lease reported clean")
	}
	if d, why := eb.MustWait(); d > 0 {
		t.Fatalf("after the holder's lease expired the new holder must wait %v (%s)", d, why)
	}
	if eb.Token() <= ea.Token() {
		t.Fatalf("token %d after %d", eb.Token(), ea.Token())
	}
	t.Logf("taken %v after the holder stopped renewing", time.Since(start).Round(time.Millisecond))
}

// Tokens rise across a leader kill: a holder before, a holder after.
func TestEtcdLockTokensRiseAcrossLeaderKill(t *testing.T) {
	c := testkit.StartEtcd(t, 3)
	a := dial(t, c, 3*time.Second)
	ea := acquired(t, a, "a")
	if err := ea.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	before := ea.Token()
	leader := leaderIndex(t, a, c)
	c.Kill(leader)
	b := dial(t, c, 3*time.Second)
	eb := acquired(t, b, "b")
	if eb.Token() <= before {
		t.Fatalf("token %d after the leader kill, %d before", eb.Token(), before)
	}
	if eb.UncleanHandoff() {
		t.Fatal("clean release reported unclean")
	}
}

func leaderIndex(t *testing.T, conn *Conn, c *testkit.EtcdCluster) int {
	t.Helper()
	for i, ep := range c.Endpoints() {
		st, err := conn.cli.Status(ctxT(t), ep)
		if err != nil {
			continue
		}
		if st.Header.MemberId == st.Leader {
			return i
		}
	}
	t.Fatal("no leader")
	return -1
}
