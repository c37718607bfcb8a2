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
)

// waiter runs Acquire (or TryAcquire) of e in a goroutine and reports
// every status and the outcome.
type waiter struct {
	status chan recipe.Status
	done   chan error
}

func acquire(ctx context.Context, e *recipe.Entry, try bool) *waiter {
	w := &waiter{status: make(chan recipe.Status, 16), done: make(chan error, 1)}
	f := e.Acquire
	if try {
		f = e.TryAcquire
	}
	go func() { w.done <- f(ctx, func(st recipe.Status) { w.status <- st }) }()
	return w
}

// notYet fails if w already acquired.
func (w *waiter) notYet(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-w.done:
		t.Fatalf("%s: acquired (err %v) too early", what, err)
	default:
	}
}

func enter(t *testing.T, ctx context.Context, c *client.Client, dir string, info recipe.Info) *recipe.Entry {
	t.Helper()
	e, err := recipe.Enter(ctx, c, dir, info, recipe.Options{})
	if err != nil {
		t.Fatalf("enter %s: %v", dir, err)
	}
	return e
}

func list(t *testing.T, ctx context.Context, c *client.Client, dir string) recipe.Queue {
	t.Helper()
	q, err := recipe.List(ctx, c, dir)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	return q
}

// The queue hands the lock on in order of entry, each waiter told its
// position and the holder; tokens rise; the folder records each holder
// and the last clean release.
func TestLockHandoffInOrder(t *testing.T) {
	addr := startMember(t)
	ctx := testCtx(t)
	const dir = "/locks/order"
	obs := connect(t, addr)
	var es []*recipe.Entry
	for i := range 3 {
		es = append(es, enter(t, ctx, connect(t, addr), dir, recipe.Info{Host: fmt.Sprint("h", i), PID: i}))
	}
	w0 := acquire(ctx, es[0], false)
	if err := recv(t, w0.done, 10*time.Second, "first acquire"); err != nil {
		t.Fatal(err)
	}
	if st := <-w0.status; st.Position != 0 || st.HolderNode != path.Base(es[0].Node()) || st.Holder.Host != "h0" || st.Holder.Since.IsZero() {
		t.Errorf("holder's status %+v", st)
	}
	w1, w2 := acquire(ctx, es[1], false), acquire(ctx, es[2], false)
	for i, w := range []*waiter{w1, w2} {
		st := recv(t, w.status, 10*time.Second, "waiter status")
		if st.Position != i+1 || st.Length != 3 || st.HolderNode != path.Base(es[0].Node()) || st.Holder.Host != "h0" || st.Stopping {
			t.Errorf("waiter %d status %+v", i+1, st)
		}
	}
	if q := list(t, ctx, obs, dir); len(q.Contenders) != 3 || !q.Contenders[0].Holding || q.Contenders[1].Holding ||
		q.Record != "held "+path.Base(es[0].Node()) || q.Stopping != nil || q.Contenders[2].Info.Host != "h2" {
		t.Errorf("queue while the first holds: %+v", q)
	}
	for i, w := range []*waiter{w1, w2} {
		w.notYet(t, fmt.Sprint("waiter ", i+1))
		if err := es[i].Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		if err := recv(t, w.done, 10*time.Second, fmt.Sprint("acquire ", i+1)); err != nil {
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
	if q := list(t, ctx, obs, dir); len(q.Contenders) != 0 || q.Record != "released "+path.Base(es[2].Node()) {
		t.Errorf("queue after the last release: %+v", q)
	}
	if _, ok, _ := obs.Exists(ctx, path.Join(dir, recipe.RunNode)); ok {
		t.Error("run node left after the last release")
	}
}

// TryAcquire gives up behind a holder; the waiter's release removes only
// its own node.
func TestTryAcquire(t *testing.T) {
	addr := startMember(t)
	ctx := testCtx(t)
	const dir = "/locks/try"
	a := enter(t, ctx, connect(t, addr), dir, recipe.Info{Host: "a"})
	if err := a.TryAcquire(ctx, nil); err != nil {
		t.Fatalf("uncontended TryAcquire: %v", err)
	}
	b := enter(t, ctx, connect(t, addr), dir, recipe.Info{Host: "b"})
	var seen []recipe.Status
	err := b.TryAcquire(ctx, func(st recipe.Status) { seen = append(seen, st) })
	if !errors.Is(err, recipe.ErrNotAcquired) {
		t.Fatalf("TryAcquire behind a holder: %v, want ErrNotAcquired", err)
	}
	if len(seen) != 1 || seen[0].Position != 1 || seen[0].Holder.Host != "a" {
		t.Errorf("statuses %+v", seen)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q := list(t, ctx, connect(t, addr), dir)
	if len(q.Contenders) != 1 || q.Contenders[0].Node != a.Node() || !q.Contenders[0].Holding {
		t.Errorf("queue after the waiter left: %+v", q)
	}
}

// A holder whose session ends without releasing leaves the record naming
// it: the next holder sees an unclean handoff.
func TestUncleanHandoff(t *testing.T) {
	addr := startMember(t)
	ctx := testCtx(t)
	const dir = "/locks/unclean"
	ca := connect(t, addr)
	a := enter(t, ctx, ca, dir, recipe.Info{Host: "a"})
	if err := a.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	b := enter(t, ctx, connect(t, addr), dir, recipe.Info{Host: "b"})
	wb := acquire(ctx, b, false)
	recv(t, wb.status, 10*time.Second, "b queued")
	ca.Close()
	if err := recv(t, wb.done, 10*time.Second, "b acquires after a's session closed"); err != nil {
		t.Fatal(err)
	}
	if !b.UncleanHandoff() {
		t.Error("handoff from a closed session counted as clean")
	}
}

// Someone deletes the holder's run node: the holder hears of it, takes it
// back while it stops, and its release lets the next in line go at once.
func TestStandingRunNodeDeleted(t *testing.T) {
	addr := startMember(t)
	ctx := testCtx(t)
	const dir = "/locks/standing"
	foreign := connect(t, addr)
	a := enter(t, ctx, connect(t, addr), dir, recipe.Info{Host: "a"})
	if err := a.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	losses := a.WatchStanding(ctx)
	b := enter(t, ctx, connect(t, addr), dir, recipe.Info{Host: "b"})
	wb := acquire(ctx, b, false)
	recv(t, wb.status, 10*time.Second, "b queued")
	run := path.Join(dir, recipe.RunNode)
	if err := foreign.Delete(ctx, run, -1); err != nil {
		t.Fatal(err)
	}
	l := recv(t, losses, 10*time.Second, "a's standing loss")
	if l.Node != run || l.Event != recipe.LossDeleted || l.Zxid == 0 {
		t.Errorf("loss %+v, want %s deleted with a zxid", l, run)
	}
	a.Retake(ctx, l)
	q := list(t, ctx, foreign, dir)
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
	wb.notYet(t, "b while a stops")
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, wb.done, 10*time.Second, "b acquires after a's release"); err != nil {
		t.Fatal(err)
	}
	if d, _ := b.MustWait(); d > 0 || b.UncleanHandoff() {
		t.Errorf("b after a's release: must wait %v, unclean %v", d, b.UncleanHandoff())
	}
}

// Someone deletes the holder's queue node: the next in line finds the run
// node held by a contender no longer queued and waits for it; the old
// holder's release record lets it go, and it need not wait any longer.
func TestInterferenceConfirmedRelease(t *testing.T) {
	addr := startMember(t)
	ctx := testCtx(t)
	const dir = "/locks/confirmed"
	foreign := connect(t, addr)
	a := enter(t, ctx, connect(t, addr), dir, recipe.Info{Host: "a", SessionTimeoutMS: 60000})
	if err := a.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	losses := a.WatchStanding(ctx)
	b := enter(t, ctx, connect(t, addr), dir, recipe.Info{Host: "b"})
	wb := acquire(ctx, b, false)
	recv(t, wb.status, 10*time.Second, "b queued")
	if err := foreign.Delete(ctx, a.Node(), -1); err != nil {
		t.Fatal(err)
	}
	if l := recv(t, losses, 10*time.Second, "a's standing loss"); l.Node != a.Node() || l.Event != recipe.LossDeleted {
		t.Errorf("loss %+v", l)
	}
	st := recv(t, wb.status, 10*time.Second, "b's status at the head")
	if st.Position != 0 || !st.Stopping || st.HolderNode != path.Base(a.Node()) || st.Holder.Host != "a" {
		t.Errorf("b at the head: %+v, want a stopping", st)
	}
	wb.notYet(t, "b while a's run node stands")
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, wb.done, 10*time.Second, "b acquires after a's release"); err != nil {
		t.Fatal(err)
	}
	if d, why := b.MustWait(); d > 0 || why != "" {
		t.Errorf("b must wait %v (%s) after a recorded its release", d, why)
	}
}

// Someone deletes both of the holder's nodes, one after the other, and the
// holder (frozen, say) never confirms its end: the next in line waits the
// old holder's session timeout and kill grace after the evidence.
func TestInterferenceUnconfirmed(t *testing.T) {
	addr := startMember(t)
	ctx := testCtx(t)
	const dir = "/locks/unconfirmed"
	const outlives = 1200 * time.Millisecond // a's bounds below
	foreign := connect(t, addr)
	a := enter(t, ctx, connect(t, addr), dir, recipe.Info{Host: "a", SessionTimeoutMS: 1000, KillGraceMS: 200})
	if err := a.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	b := enter(t, ctx, connect(t, addr), dir, recipe.Info{Host: "b", SessionTimeoutMS: 60000})
	wb := acquire(ctx, b, false)
	recv(t, wb.status, 10*time.Second, "b queued")
	deleted := time.Now()
	if err := foreign.Delete(ctx, a.Node(), -1); err != nil {
		t.Fatal(err)
	}
	if st := recv(t, wb.status, 10*time.Second, "b's status at the head"); !st.Stopping {
		t.Errorf("b at the head: %+v, want a stopping", st)
	}
	if err := foreign.Delete(ctx, path.Join(dir, recipe.RunNode), -1); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, wb.done, 10*time.Second+outlives, "b acquires"); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(deleted); waited < outlives {
		t.Errorf("b took the lock %v after the interference, before a's job must be gone (%v)", waited, outlives)
	}
	if d, why := b.MustWait(); d > 0 || why == "" {
		t.Errorf("b's MustWait = %v, %q: want the bound passed, with its evidence", d, why)
	}
	if !b.UncleanHandoff() {
		t.Error("a never released: the handoff must count as unclean")
	}
}

// Someone deletes the holder's queue node, and once the holder has heard
// of it, its run node too, before the next in line looks: that looks like
// the holder's crash, but the holder recorded that it is stopping, so the
// next in line waits for its release.
func TestInterferenceRecordedStopping(t *testing.T) {
	addr := startMember(t)
	ctx := testCtx(t)
	const dir = "/locks/stopping"
	foreign := connect(t, addr)
	a := enter(t, ctx, connect(t, addr), dir, recipe.Info{Host: "a", SessionTimeoutMS: 60000})
	if err := a.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	losses := a.WatchStanding(ctx)
	b := enter(t, ctx, connect(t, addr), dir, recipe.Info{Host: "b", SessionTimeoutMS: 60000})
	if err := foreign.Delete(ctx, a.Node(), -1); err != nil {
		t.Fatal(err)
	}
	recv(t, losses, 10*time.Second, "a's standing loss")
	if rec, _, err := foreign.Get(ctx, dir); err != nil || string(rec) != "stopping "+path.Base(a.Node()) {
		t.Errorf("record once a heard of the loss: %q (%v), want it stopping", rec, err)
	}
	if err := foreign.Delete(ctx, path.Join(dir, recipe.RunNode), -1); err != nil {
		t.Fatal(err)
	}
	wb := acquire(ctx, b, false)
	st := recv(t, wb.status, 10*time.Second, "b's status at the head")
	if st.Position != 0 || !st.Stopping || st.HolderNode != path.Base(a.Node()) {
		t.Errorf("b at the head: %+v, want a stopping", st)
	}
	wb.notYet(t, "b while a stops")
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, wb.done, 10*time.Second, "b acquires after a's release"); err != nil {
		t.Fatal(err)
	}
	if d, why := b.MustWait(); d > 0 || why != "" {
		t.Errorf("b must wait %v (%s) after a recorded its release", d, why)
	}
}

// A folder whose ACL refuses the session: Enter says who was refused
// where, and under which ACL.
func TestEnterRefused(t *testing.T) {
	addr := startMember(t)
	ctx := testCtx(t)
	sum := sha1.Sum([]byte("ops:secret"))
	acl := []wire.ACL{
		{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: "ops:" + base64.StdEncoding.EncodeToString(sum[:])}},
		{Perms: wire.PermRead, ID: wire.ID{Scheme: "world", ID: "anyone"}},
	}
	ops := connect(t, addr, client.Auth{Scheme: "digest", Secret: []byte("ops:secret")})
	if err := recipe.EnsurePath(ctx, ops, "/locks/guarded", acl); err != nil {
		t.Fatal(err)
	}
	_, err := recipe.Enter(ctx, connect(t, addr), "/locks/guarded", recipe.Info{}, recipe.Options{})
	var ae *recipe.AccessError
	if !errors.As(err, &ae) || !errors.Is(err, wire.ErrNoAuth) {
		t.Fatalf("Enter without credentials: %v, want an AccessError for NOAUTH", err)
	}
	// The server masks a digest's hash from readers without ADMIN.
	if ae.Path != "/locks/guarded" || len(ae.ACL) != 2 || ae.ACL[0].ID.Scheme != "digest" || !strings.HasPrefix(ae.ACL[0].ID.ID, "ops:") ||
		ae.ACL[1] != acl[1] || len(ae.Identity) == 0 {
		t.Errorf("AccessError %+v", ae)
	}
	// With the credentials the same folder takes the entry, and the
	// entry's nodes carry the ACL given.
	e, err := recipe.Enter(ctx, ops, "/locks/guarded", recipe.Info{}, recipe.Options{ACL: acl})
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
func TestEnterCreatesFolders(t *testing.T) {
	addr := startMember(t)
	ctx := testCtx(t)
	c := connect(t, addr)
	if _, err := recipe.List(ctx, c, "/a/b/c"); !errors.Is(err, wire.ErrNoNode) {
		t.Errorf("List of a missing lock: %v, want ErrNoNode", err)
	}
	e := enter(t, ctx, c, "/a/b/c", recipe.Info{Host: "x"})
	if path.Dir(e.Node()) != "/a/b/c" || e.Token() == 0 {
		t.Errorf("node %s token %d", e.Node(), e.Token())
	}
	q := list(t, ctx, c, "/a/b/c")
	if len(q.Contenders) != 1 || q.Contenders[0].Holding || q.Contenders[0].Token != e.Token() || q.Record != "" || !recipe.OpenToAll(q.ACL) {
		t.Errorf("queue of a fresh lock: %+v", q)
	}
}

// Of many contenders that claim one node at once, exactly one wins; the
// winner's claim, asked again, is still its own.
func TestClaimOnce(t *testing.T) {
	addr := startMember(t)
	ctx := testCtx(t)
	obs := connect(t, addr)
	if err := recipe.EnsurePath(ctx, obs, "/claims", client.OpenACL); err != nil {
		t.Fatal(err)
	}
	const n = 8
	node := "/claims/0000000001"
	won := make([]bool, n)
	data := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		c := connect(t, addr)
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
func TestWatchNodes(t *testing.T) {
	addr := startMember(t)
	ctx := testCtx(t)
	c := connect(t, addr)
	if err := recipe.EnsurePath(ctx, c, "/w/a", client.OpenACL); err != nil {
		t.Fatal(err)
	}
	unchanged := func(st wire.Stat) bool { return st.Version == 0 }
	losses, armed := recipe.WatchNodes(ctx, c, []recipe.Watched{{Path: "/w/a", OK: unchanged}})
	recv(t, armed, 10*time.Second, "watches armed")
	st, err := c.Set(ctx, "/w/a", []byte("x"), -1)
	if err != nil {
		t.Fatal(err)
	}
	if l := recv(t, losses, 10*time.Second, "change"); l.Event != recipe.LossChanged || l.Zxid != st.Mzxid {
		t.Errorf("loss %+v, want changed at 0x%x", l, st.Mzxid)
	}
	// Already changed when watched: reported at once.
	losses, _ = recipe.WatchNodes(ctx, c, []recipe.Watched{{Path: "/w/a", OK: unchanged}})
	if l := recv(t, losses, 10*time.Second, "changed before"); l.Event != recipe.LossChanged {
		t.Errorf("loss %+v, want changed", l)
	}
	losses, _ = recipe.WatchNodes(ctx, c, []recipe.Watched{{Path: "/w/none", OK: unchanged}})
	if l := recv(t, losses, 10*time.Second, "missing"); l.Event != recipe.LossMissing || l.Node != "/w/none" {
		t.Errorf("loss %+v, want missing", l)
	}
	losses, armed = recipe.WatchNodes(ctx, c, []recipe.Watched{{Path: "/w/a", OK: func(wire.Stat) bool { return true }}})
	recv(t, armed, 10*time.Second, "watches armed")
	if err := c.Delete(ctx, "/w/a", -1); err != nil {
		t.Fatal(err)
	}
	_, parent, err := c.Children(ctx, "/w")
	if err != nil {
		t.Fatal(err)
	}
	if l := recv(t, losses, 10*time.Second, "deletion"); l.Event != recipe.LossDeleted || l.Zxid != parent.Pzxid {
		t.Errorf("loss %+v, want deleted at the parent's pzxid 0x%x", l, parent.Pzxid)
	}
}
