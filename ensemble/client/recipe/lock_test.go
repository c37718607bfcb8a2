// Tests of the lock queue and claim-once, against the backends of
// election_test.go: an in-process coordrun ensemble and Apache ZooKeeper.

package recipe_test

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
)

// waiter runs Acquire (or TryAcquire) of e in a goroutine and reports
// every status and the outcome.
type lockWaiter struct {
	status chan recipe.Status
	done   chan error
}

func lockAcquire(ctx context.Context, e *recipe.Entry, try bool) *lockWaiter {
	w := &lockWaiter{status: make(chan recipe.Status, 16), done: make(chan error, 1)}
	f := e.Acquire
	if try {
		f = e.TryAcquire
	}
	go func() { w.done <- f(ctx, func(st recipe.Status) { w.status <- st }) }()
	return w
}

// notYet fails if w already acquired.
func (w *lockWaiter) notYet(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-w.done:
		t.Fatalf("%s: acquired (err %v) too early", what, err)
	default:
	}
}

func lockEnter(t *testing.T, ctx context.Context, c *client.Client, dir string, info recipe.Info) *recipe.Entry {
	t.Helper()
	e, err := recipe.Enter(ctx, c, dir, info, recipe.Options{})
	if err != nil {
		t.Fatalf("enter %s: %v", dir, err)
	}
	return e
}

// lockHold enters the lock in dir and waits until it holds it.
func lockHold(t *testing.T, ctx context.Context, c *client.Client, dir string, info recipe.Info) *recipe.Entry {
	t.Helper()
	e := lockEnter(t, ctx, c, dir, info)
	if err := e.Acquire(ctx, nil); err != nil {
		t.Fatalf("acquire %s: %v", dir, err)
	}
	return e
}

// lockList reads the lock in dir after a sync, so that it sees every
// write done before, on whatever member c is.
func lockList(t *testing.T, ctx context.Context, c *client.Client, dir string) recipe.Queue {
	t.Helper()
	if err := c.Sync(ctx, dir); err != nil {
		t.Fatalf("sync %s: %v", dir, err)
	}
	q, err := recipe.List(ctx, c, dir)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	return q
}

func TestLock(t *testing.T) {
	forEachRecipeBackend(t, func(t *testing.T, b recipeBackend) {
		t.Run("handoff in order of entry", func(t *testing.T) { lockHandoffInOrder(t, b) })
		t.Run("try gives up behind a holder", func(t *testing.T) { lockTryAcquire(t, b) })
		t.Run("session end is an unclean handoff", func(t *testing.T) { lockUncleanHandoff(t, b) })
		t.Run("run node deleted: retaken, then released", func(t *testing.T) { lockStandingRunNodeDeleted(t, b) })
		t.Run("queue node deleted: the release confirms", func(t *testing.T) { lockInterferenceConfirmedRelease(t, b) })
		t.Run("both deleted, unconfirmed: the bound", func(t *testing.T) { lockInterferenceUnconfirmed(t, b) })
		t.Run("both deleted after the holder heard: its record", func(t *testing.T) { lockInterferenceRecordedStopping(t, b) })
		t.Run("folder deleted: a newcomer waits for the holder", func(t *testing.T) { lockFolderDeleted(t, b) })
		t.Run("folder refused: access error", func(t *testing.T) { lockEnterRefused(t, b) })
		t.Run("missing folders created", func(t *testing.T) { lockEnterCreatesFolders(t, b) })
		t.Run("lost create reply leaves no ghost", func(t *testing.T) { lockLostCreateReply(t, b) })
		t.Run("enter given up mid-create leaves no ghost", func(t *testing.T) { lockCancelledCreate(t, b) })
		t.Run("lost take reply: held", func(t *testing.T) { lockLostTakeReply(t, b) })
		t.Run("lost release reply: released", func(t *testing.T) { lockLostReleaseReply(t, b) })
		t.Run("standing watches", func(t *testing.T) { lockWatchNodes(t, b) })
	})
}

func TestClaimOnce(t *testing.T) {
	forEachRecipeBackend(t, func(t *testing.T, b recipeBackend) {
		t.Run("one of many wins", func(t *testing.T) { lockClaimOnce(t, b) })
		t.Run("lost create reply: still won", func(t *testing.T) { lockClaimLostReply(t, b) })
	})
}

// lockConnectAuth opens a session with credentials on b.
func lockConnectAuth(t *testing.T, b recipeBackend, auth ...client.Auth) *client.Client {
	t.Helper()
	c, err := client.Connect(testkit.Context(t, 20*time.Second), client.Config{Servers: b.servers, SessionTimeout: 4 * time.Second, Auth: auth})
	if err != nil {
		t.Fatalf("connect %v: %v", b.servers, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The queue hands the lock on in order of entry, each waiter told its
// position and the holder; tokens rise; the folder records each holder
// and the last clean release.
func lockHandoffInOrder(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	dir := b.folder(t, "order")
	obs := b.connect(t)
	var es []*recipe.Entry
	for i := range 3 {
		es = append(es, lockEnter(t, ctx, b.connect(t), dir, recipe.Info{Host: fmt.Sprint("h", i), PID: i}))
	}
	w0 := lockAcquire(ctx, es[0], false)
	if err := testkit.Recv(t, w0.done, 10*time.Second, "first acquire"); err != nil {
		t.Fatal(err)
	}
	if st := <-w0.status; st.Position != 0 || st.HolderNode != path.Base(es[0].Node()) || st.Holder.Host != "h0" || st.Holder.Since.IsZero() {
		t.Errorf("holder's status %+v", st)
	}
	w1, w2 := lockAcquire(ctx, es[1], false), lockAcquire(ctx, es[2], false)
	for i, w := range []*lockWaiter{w1, w2} {
		st := testkit.Recv(t, w.status, 10*time.Second, "waiter status")
		// A waiter's reads are its member's: the first may list the queue
		// before the create behind it reached that member.
		if st.Position != i+1 || st.Length < i+2 || st.Length > 3 || st.HolderNode != path.Base(es[0].Node()) || st.Holder.Host != "h0" || st.Stopping {
			t.Errorf("waiter %d status %+v", i+1, st)
		}
	}
	if q := lockList(t, ctx, obs, dir); len(q.Contenders) != 3 || !q.Contenders[0].Holding || q.Contenders[1].Holding ||
		q.Record != "held "+path.Base(es[0].Node()) || q.Stopping != nil || q.Contenders[2].Info.Host != "h2" {
		t.Errorf("queue while the first holds: %+v", q)
	}
	for i, w := range []*lockWaiter{w1, w2} {
		w.notYet(t, fmt.Sprint("waiter ", i+1))
		if err := es[i].Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		if err := testkit.Recv(t, w.done, 10*time.Second, fmt.Sprint("acquire ", i+1)); err != nil {
			t.Fatal(err)
		}
		next := es[i+1]
		if next.Token() <= es[i].Token() {
			t.Errorf("token %d after %d", next.Token(), es[i].Token())
		}
		if next.UncleanHandoff() {
			t.Errorf("holder %d: handoff after a release counted as unclean", i+1)
		}
		if d, why := next.MustWait(); d > 0 || why != "" {
			t.Errorf("holder %d must wait %v (%s) without interference", i+1, d, why)
		}
	}
	if err := es[2].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if q := lockList(t, ctx, obs, dir); len(q.Contenders) != 0 || q.Record != "released "+path.Base(es[2].Node()) {
		t.Errorf("queue after the last release: %+v", q)
	}
	if _, ok, _ := obs.Exists(ctx, path.Join(dir, recipe.RunNode)); ok {
		t.Error("run node left after the last release")
	}
}

// TryAcquire gives up behind a holder; the waiter's release removes only
// its own node.
func lockTryAcquire(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	dir := b.folder(t, "try")
	a := lockEnter(t, ctx, b.connect(t), dir, recipe.Info{Host: "a"})
	if err := a.TryAcquire(ctx, nil); err != nil {
		t.Fatalf("uncontended TryAcquire: %v", err)
	}
	eb := lockEnter(t, ctx, b.connect(t), dir, recipe.Info{Host: "b"})
	var seen []recipe.Status
	err := eb.TryAcquire(ctx, func(st recipe.Status) { seen = append(seen, st) })
	if !errors.Is(err, recipe.ErrNotAcquired) {
		t.Fatalf("TryAcquire behind a holder: %v, want ErrNotAcquired", err)
	}
	if len(seen) != 1 || seen[0].Position != 1 || seen[0].Holder.Host != "a" {
		t.Errorf("statuses %+v", seen)
	}
	if err := eb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q := lockList(t, ctx, b.connect(t), dir)
	if len(q.Contenders) != 1 || q.Contenders[0].Node != a.Node() || !q.Contenders[0].Holding {
		t.Errorf("queue after the waiter left: %+v", q)
	}
}

// A holder whose session ends without releasing leaves the record naming
// it: the next holder sees an unclean handoff.
func lockUncleanHandoff(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	dir := b.folder(t, "unclean")
	ca := b.connect(t)
	lockHold(t, ctx, ca, dir, recipe.Info{Host: "a"})
	eb := lockEnter(t, ctx, b.connect(t), dir, recipe.Info{Host: "b"})
	wb := lockAcquire(ctx, eb, false)
	testkit.Recv(t, wb.status, 10*time.Second, "b queued")
	ca.Close()
	if err := testkit.Recv(t, wb.done, 10*time.Second, "b acquires after a's session closed"); err != nil {
		t.Fatal(err)
	}
	if !eb.UncleanHandoff() {
		t.Error("handoff from a closed session counted as clean")
	}
}

// Someone deletes the holder's run node: the holder hears of it, takes it
// back while it stops, and its release lets the next in line go at once.
func lockStandingRunNodeDeleted(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	dir := b.folder(t, "standing")
	foreign := b.connect(t)
	a := lockHold(t, ctx, b.connect(t), dir, recipe.Info{Host: "a"})
	losses := a.WatchStanding(ctx)
	eb := lockEnter(t, ctx, b.connect(t), dir, recipe.Info{Host: "b"})
	wb := lockAcquire(ctx, eb, false)
	testkit.Recv(t, wb.status, 10*time.Second, "b queued")
	run := path.Join(dir, recipe.RunNode)
	if err := foreign.Delete(ctx, run, -1); err != nil {
		t.Fatal(err)
	}
	l := testkit.Recv(t, losses, 10*time.Second, "a's standing loss")
	if l.Node != run || l.Event != recipe.LossDeleted || l.Revision == 0 {
		t.Errorf("loss %+v, want %s deleted with a zxid", l, run)
	}
	a.Retake(ctx, l)
	q := lockList(t, ctx, foreign, dir)
	if len(q.Contenders) != 2 || !q.Contenders[0].Holding || q.Contenders[0].Node != a.Node() {
		t.Errorf("queue after the retake: %+v", q)
	}
	b2, _, err := foreign.Get(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`"node":%q`, path.Base(a.Node())); !strings.Contains(string(b2), want) || !strings.Contains(string(b2), `"stopping":true`) {
		t.Errorf("retaken run node %s, want %s and stopping", b2, want)
	}
	awaitsRelease(t, ctx, a, eb, wb, "b")
}

// Someone deletes the holder's queue node: the next in line finds the run
// node held by a contender no longer queued and waits for it; the old
// holder's release record lets it go, and it need not wait any longer.
func lockInterferenceConfirmedRelease(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	dir := b.folder(t, "confirmed")
	foreign := b.connect(t)
	a := lockHold(t, ctx, b.connect(t), dir, recipe.Info{Host: "a", SessionTimeoutMS: 60000})
	losses := a.WatchStanding(ctx)
	eb := lockEnter(t, ctx, b.connect(t), dir, recipe.Info{Host: "b"})
	wb := lockAcquire(ctx, eb, false)
	testkit.Recv(t, wb.status, 10*time.Second, "b queued")
	if err := foreign.Delete(ctx, a.Node(), -1); err != nil {
		t.Fatal(err)
	}
	if l := testkit.Recv(t, losses, 10*time.Second, "a's standing loss"); l.Node != a.Node() || l.Event != recipe.LossDeleted {
		t.Errorf("loss %+v", l)
	}
	st := testkit.Recv(t, wb.status, 10*time.Second, "b's status at the head")
	if st.Position != 0 || !st.Stopping || st.HolderNode != path.Base(a.Node()) || st.Holder.Host != "a" {
		t.Errorf("b at the head: %+v, want a stopping", st)
	}
	awaitsRelease(t, ctx, a, eb, wb, "b")
}

// Someone deletes both of the holder's nodes, one after the other, and the
// holder (frozen, say) never confirms its end: the next in line waits the
// old holder's session timeout and kill grace after the evidence.
func lockInterferenceUnconfirmed(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	dir := b.folder(t, "unconfirmed")
	const outlives = 1200 * time.Millisecond // a's bounds below
	foreign := b.connect(t)
	a := lockHold(t, ctx, b.connect(t), dir, recipe.Info{Host: "a", SessionTimeoutMS: 1000, KillGraceMS: 200})
	eb := lockEnter(t, ctx, b.connect(t), dir, recipe.Info{Host: "b", SessionTimeoutMS: 60000})
	wb := lockAcquire(ctx, eb, false)
	testkit.Recv(t, wb.status, 10*time.Second, "b queued")
	deleted := time.Now()
	if err := foreign.Delete(ctx, a.Node(), -1); err != nil {
		t.Fatal(err)
	}
	if st := testkit.Recv(t, wb.status, 10*time.Second, "b's status at the head"); !st.Stopping {
		t.Errorf("b at the head: %+v, want a stopping", st)
	}
	if err := foreign.Delete(ctx, path.Join(dir, recipe.RunNode), -1); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Recv(t, wb.done, 10*time.Second+outlives, "b acquires"); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(deleted); waited < outlives {
		t.Errorf("b took the lock %v after the interference, before a's job must be gone (%v)", waited, outlives)
	}
	if d, why := eb.MustWait(); d > 0 || why == "" {
		t.Errorf("b's MustWait = %v, %q: want the bound passed, with its evidence", d, why)
	}
	if !eb.UncleanHandoff() {
		t.Error("a never released: the handoff must count as unclean")
	}
}

// Someone deletes the holder's queue node, and once the holder has heard
// of it, its run node too, before the next in line looks: that looks like
// the holder's crash, but the holder recorded that it is stopping, so the
// next in line waits for its release.
func lockInterferenceRecordedStopping(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	dir := b.folder(t, "stopping")
	foreign := b.connect(t)
	a := lockHold(t, ctx, b.connect(t), dir, recipe.Info{Host: "a", SessionTimeoutMS: 60000})
	losses := a.WatchStanding(ctx)
	eb := lockEnter(t, ctx, b.connect(t), dir, recipe.Info{Host: "b", SessionTimeoutMS: 60000})
	if err := foreign.Delete(ctx, a.Node(), -1); err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, losses, 10*time.Second, "a's standing loss")
	if err := foreign.Sync(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := foreign.Get(ctx, dir); err != nil || string(rec) != "stopping "+path.Base(a.Node()) {
		t.Errorf("record once a heard of the loss: %q (%v), want it stopping", rec, err)
	}
	if err := foreign.Delete(ctx, path.Join(dir, recipe.RunNode), -1); err != nil {
		t.Fatal(err)
	}
	wb := lockAcquire(ctx, eb, false)
	st := testkit.Recv(t, wb.status, 10*time.Second, "b's status at the head")
	if st.Position != 0 || !st.Stopping || st.HolderNode != path.Base(a.Node()) {
		t.Errorf("b at the head: %+v, want a stopping", st)
	}
	awaitsRelease(t, ctx, a, eb, wb, "b")
}

// Someone deletes the whole lock folder (zkCli's deleteall): the holder
// puts it back with its stopping record, and a contender that comes only
// afterwards, with no memory of the holder, waits for its release.
func lockFolderDeleted(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	dir := b.folder(t, "deleteall")
	foreign := b.connect(t)
	a := lockHold(t, ctx, b.connect(t), dir, recipe.Info{Host: "a", SessionTimeoutMS: 60000})
	losses := a.WatchStanding(ctx)
	if _, err := foreign.Multi(ctx,
		wire.MultiOp{Type: wire.OpDelete, Path: a.Node(), Version: -1},
		wire.MultiOp{Type: wire.OpDelete, Path: path.Join(dir, recipe.RunNode), Version: -1},
		wire.MultiOp{Type: wire.OpDelete, Path: dir, Version: -1}); err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, losses, 10*time.Second, "a's standing loss")
	if q := lockList(t, ctx, foreign, dir); q.Record != "stopping "+path.Base(a.Node()) || len(q.Contenders) != 0 {
		t.Fatalf("folder after a heard of the deleteall: %+v, want it made again with a stopping", q)
	}
	n := lockEnter(t, ctx, b.connect(t), dir, recipe.Info{Host: "n", SessionTimeoutMS: 60000})
	w := lockAcquire(ctx, n, false)
	if st := testkit.Recv(t, w.status, 10*time.Second, "the newcomer's status"); st.Position != 0 || !st.Stopping || st.HolderNode != path.Base(a.Node()) {
		t.Errorf("newcomer at the head: %+v, want a stopping", st)
	}
	awaitsRelease(t, ctx, a, n, w, "the newcomer")
}

// A folder whose ACL refuses the session: Enter says who was refused
// where, and under which ACL.
func lockEnterRefused(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	sum := sha1.Sum([]byte("ops:secret"))
	acl := []wire.ACL{
		{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: "ops:" + base64.StdEncoding.EncodeToString(sum[:])}},
		{Perms: wire.PermRead, ID: wire.ID{Scheme: "world", ID: "anyone"}},
	}
	ops := lockConnectAuth(t, b, client.Auth{Scheme: "digest", Secret: []byte("ops:secret")})
	dir := b.folder(t, "guarded")
	if err := recipe.EnsurePath(ctx, ops, dir, acl); err != nil {
		t.Fatal(err)
	}
	_, err := recipe.Enter(ctx, b.connect(t), dir, recipe.Info{}, recipe.Options{})
	var ae *recipe.AccessError
	if !errors.As(err, &ae) || !errors.Is(err, wire.ErrNoAuth) {
		t.Fatalf("Enter without credentials: %v, want an AccessError for NOAUTH", err)
	}
	// The server masks a digest's hash from readers without ADMIN.
	if ae.Path != dir || len(ae.ACL) != 2 || ae.ACL[0].ID.Scheme != "digest" || !strings.HasPrefix(ae.ACL[0].ID.ID, "ops:") ||
		ae.ACL[1] != acl[1] || len(ae.Identity) == 0 {
		t.Errorf("AccessError %+v", ae)
	}
	// With the credentials the same folder takes the entry, and the
	// entry's nodes carry the ACL given.
	e, err := recipe.Enter(ctx, ops, dir, recipe.Info{}, recipe.Options{ACL: acl})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := ops.GetACL(ctx, e.Node())
	if err != nil || recipe.FormatACL(got) != recipe.FormatACL(acl) {
		t.Errorf("queue node ACL %v (%v), want %v", got, err, acl)
	}
}

// Enter creates the lock's missing folders; List of a lock never taken
// says there is none.
func lockEnterCreatesFolders(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	c := b.connect(t)
	dir := b.folder(t, "a/b/c")
	if _, err := recipe.List(ctx, c, dir); !errors.Is(err, wire.ErrNoNode) {
		t.Errorf("List of a missing lock: %v, want ErrNoNode", err)
	}
	e := lockEnter(t, ctx, c, dir, recipe.Info{Host: "x"})
	if path.Dir(e.Node()) != dir || e.Token() == 0 {
		t.Errorf("node %s token %d", e.Node(), e.Token())
	}
	q := lockList(t, ctx, c, dir)
	if len(q.Contenders) != 1 || q.Contenders[0].Holding || q.Contenders[0].Token != e.Token() || q.Record != "" || !recipe.OpenToAll(q.ACL) {
		t.Errorf("queue of a fresh lock: %+v", q)
	}
}

// Of many contenders that claim one node at once, exactly one wins; the
// winner's claim, asked again, is still its own.
func lockClaimOnce(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	obs := b.connect(t)
	dir := b.folder(t, "claims")
	if err := recipe.EnsurePath(ctx, obs, dir, client.OpenACL); err != nil {
		t.Fatal(err)
	}
	const n = 8
	node := dir + "/0000000001"
	won := make([]bool, n)
	data := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		c := b.connect(t)
		data[i] = []byte(fmt.Sprintf(`{"host":%d,"nonce":%q}`, i, recipe.Nonce()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if won[i], err = recipe.ClaimOnce(ctx, c, node, data[i], recipe.ClaimOptions{}); err != nil {
				t.Errorf("claim %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	winner := -1
	for i, w := range won {
		if w && winner >= 0 {
			t.Errorf("claimants %d and %d both won", winner, i)
		}
		if w {
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("nobody won")
	}
	if err := obs.Sync(ctx, node); err != nil {
		t.Fatal(err)
	}
	got, _, err := obs.Get(ctx, node)
	if err != nil || string(got) != string(data[winner]) {
		t.Errorf("claim node holds %q (%v), want the winner's %q", got, err, data[winner])
	}
	again, err := recipe.ClaimOnce(ctx, obs, node, data[winner], recipe.ClaimOptions{})
	if err != nil || !again {
		t.Errorf("the winner's claim asked again: %v, %v", again, err)
	}
	other, err := recipe.ClaimOnce(ctx, obs, node, []byte("late"), recipe.ClaimOptions{Mine: func([]byte) bool { return false }})
	if err != nil || other {
		t.Errorf("a late claim: %v, %v", other, err)
	}
}

// WatchNodes reports a change, a deletion, or a node already gone.
func lockWatchNodes(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	c := b.connect(t)
	dir := b.folder(t, "w")
	a := dir + "/a"
	if err := recipe.EnsurePath(ctx, c, a, client.OpenACL); err != nil {
		t.Fatal(err)
	}
	unchanged := func(st wire.Stat) bool { return st.Version == 0 }
	losses, armed := recipe.WatchNodes(ctx, c, []recipe.Watched{{Path: a, OK: unchanged}})
	testkit.Recv(t, armed, 10*time.Second, "watches armed")
	st, err := c.Set(ctx, a, []byte("x"), -1)
	if err != nil {
		t.Fatal(err)
	}
	if l := testkit.Recv(t, losses, 10*time.Second, "change"); l.Event != recipe.LossChanged || l.Revision != st.Mzxid {
		t.Errorf("loss %+v, want changed at 0x%x", l, st.Mzxid)
	}
	// Already changed when watched: reported at once.
	losses, _ = recipe.WatchNodes(ctx, c, []recipe.Watched{{Path: a, OK: unchanged}})
	if l := testkit.Recv(t, losses, 10*time.Second, "changed before"); l.Event != recipe.LossChanged {
		t.Errorf("loss %+v, want changed", l)
	}
	losses, _ = recipe.WatchNodes(ctx, c, []recipe.Watched{{Path: dir + "/none", OK: unchanged}})
	if l := testkit.Recv(t, losses, 10*time.Second, "missing"); l.Event != recipe.LossMissing || l.Node != dir+"/none" {
		t.Errorf("loss %+v, want missing", l)
	}
	losses, armed = recipe.WatchNodes(ctx, c, []recipe.Watched{{Path: a, OK: func(wire.Stat) bool { return true }}})
	testkit.Recv(t, armed, 10*time.Second, "watches armed")
	if err := c.Delete(ctx, a, -1); err != nil {
		t.Fatal(err)
	}
	_, parent, err := c.Children(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if l := testkit.Recv(t, losses, 10*time.Second, "deletion"); l.Event != recipe.LossDeleted || l.Revision != parent.Pzxid {
		t.Errorf("loss %+v, want deleted at the parent's pzxid 0x%x", l, parent.Pzxid)
	}
}

// lockProxied is a session through a proxy that can cut one reply, on a
// lock folder that exists (so that the request whose reply is cut
// applies).
func lockProxied(t *testing.T, b recipeBackend, sub string) (*testkit.Proxy, *client.Client, string) {
	t.Helper()
	dir := b.folder(t, sub)
	if err := recipe.EnsurePath(testkit.Context(t, 10*time.Second), b.connect(t), dir, client.OpenACL); err != nil {
		t.Fatal(err)
	}
	px := testkit.StartProxy(t, b.servers[0])
	return px, b.connectTo(t, px.Addr()), dir
}

// A queue node whose create reply was lost is found, not made twice.
func lockLostCreateReply(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	px, c, dir := lockProxied(t, b, "lostcreate")
	px.CutReplyTo(wire.OpCreate2)
	e := lockEnter(t, ctx, c, dir, recipe.Info{Host: "a"})
	if px.Cuts() != 1 {
		t.Fatalf("%d replies cut, want the create's", px.Cuts())
	}
	q := lockList(t, ctx, b.connect(t), dir)
	if len(q.Contenders) != 1 || q.Contenders[0].Node != e.Node() || q.Contenders[0].Token != e.Token() {
		t.Fatalf("queue %+v, want only %s", q.Contenders, e.Node())
	}
	if err := e.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// An Enter whose ctx ends while its create is on the way leaves no queue
// node behind for a session that lives on (a cron host's): the create
// happens, and Enter deletes it before it returns.
func lockCancelledCreate(t *testing.T, b recipeBackend) {
	px, c, dir := lockProxied(t, b, "cancelcreate")
	// The folder exists, so that the held create is the queue node's.
	if err := recipe.EnsurePath(testkit.Context(t, 20*time.Second), c, dir, client.OpenACL); err != nil {
		t.Fatal(err)
	}
	giveUpMidCreate(t, px, "Enter", func(ctx context.Context) error {
		_, err := recipe.Enter(ctx, c, dir, recipe.Info{Host: "a"}, recipe.Options{})
		return err
	})
	if q := lockList(t, testkit.Context(t, 20*time.Second), b.connect(t), dir); len(q.Contenders) != 0 {
		t.Fatalf("queue %+v after an Enter given up mid-create, want it empty", q.Contenders)
	}
}

// A take whose reply was lost is found to have happened: the entry holds,
// and its release is clean.
func lockLostTakeReply(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	px, c, dir := lockProxied(t, b, "losttake")
	obs := b.connect(t)
	e := lockEnter(t, ctx, c, dir, recipe.Info{Host: "a"})
	px.CutReplyTo(wire.OpMulti)
	if err := e.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if px.Cuts() != 1 {
		t.Fatalf("%d replies cut, want the take's", px.Cuts())
	}
	if q := lockList(t, ctx, obs, dir); len(q.Contenders) != 1 || !q.Contenders[0].Holding || q.Record != "held "+path.Base(e.Node()) {
		t.Fatalf("queue after the lost take: %+v", q)
	}
	if err := e.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if q := lockList(t, ctx, obs, dir); len(q.Contenders) != 0 || q.Record != "released "+path.Base(e.Node()) {
		t.Errorf("queue after the release: %+v", q)
	}
}

// A release whose reply was lost is retried until it is known to have
// happened; the next in line takes the lock.
func lockLostReleaseReply(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	px, c, dir := lockProxied(t, b, "lostrelease")
	e := lockHold(t, ctx, c, dir, recipe.Info{Host: "a"})
	next := lockEnter(t, ctx, b.connect(t), dir, recipe.Info{Host: "b"})
	w := lockAcquire(ctx, next, false)
	testkit.Recv(t, w.status, 10*time.Second, "b queued")
	px.CutReplyTo(wire.OpMulti)
	if err := e.Release(ctx); err != nil {
		t.Fatalf("release with its reply lost: %v", err)
	}
	if px.Cuts() != 1 {
		t.Fatalf("%d replies cut, want the release's", px.Cuts())
	}
	if err := testkit.Recv(t, w.done, 10*time.Second, "b acquires"); err != nil {
		t.Fatal(err)
	}
	if next.UncleanHandoff() {
		t.Error("a release whose reply was lost counted as unclean")
	}
}

// A claim whose create reply was lost is recognized as won.
func lockClaimLostReply(t *testing.T, b recipeBackend) {
	ctx := testkit.Context(t, 60*time.Second)
	px, c, dir := lockProxied(t, b, "claim")
	px.CutReplyTo(wire.OpCreate2)
	data := []byte(recipe.Nonce())
	won, err := recipe.ClaimOnce(ctx, c, dir+"/f", data, recipe.ClaimOptions{})
	if err != nil || !won {
		t.Fatalf("claim with its reply lost: %v, %v", won, err)
	}
	if px.Cuts() != 1 {
		t.Fatalf("%d replies cut, want the create's", px.Cuts())
	}
	other, err := recipe.ClaimOnce(ctx, b.connect(t), dir+"/f", []byte(recipe.Nonce()), recipe.ClaimOptions{})
	if err != nil || other {
		t.Errorf("another claim after it: %v, %v", other, err)
	}
}

// giveUpMidCreate runs call, whose requests go through px, and ends its
// ctx while the reply to its create is held back: call must then learn the
// create's outcome with a sync (which px lets through after the held
// reply) and return context.Canceled. The caller checks what is left.
func giveUpMidCreate(t *testing.T, px *testkit.Proxy, what string, call func(context.Context) error) {
	t.Helper()
	held, release := px.HoldReplyTo(wire.OpCreate2)
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the create's reply never came")
	}
	// The sync's answer comes behind the held reply, so let that go once
	// call asked.
	cleanup := px.AwaitRequest(wire.OpSync)
	cancel()
	select {
	case <-cleanup:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never looked for the node its create may have made", what)
	}
	release()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s = %v, want context.Canceled", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return after its ctx ended", what)
	}
}

// awaitsRelease checks that w, the waiter of e, does not take the lock
// while a, the stopping holder, still may run, and takes it once a
// released, with nothing left to wait for.
func awaitsRelease(t *testing.T, ctx context.Context, a, e *recipe.Entry, w *lockWaiter, who string) {
	t.Helper()
	w.notYet(t, who+" while a stops")
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Recv(t, w.done, 10*time.Second, who+" acquires after a's release"); err != nil {
		t.Fatal(err)
	}
	if d, why := e.MustWait(); d > 0 || why != "" || e.UncleanHandoff() {
		t.Errorf("%s after a's release: must wait %v (%s), unclean %v", who, d, why, e.UncleanHandoff())
	}
}
