// Package enginetest is the conformance suite of the engine seam: what
// every engine must do for the supervisor, checked against a real store.
// An engine's test calls Run with a function that opens a new session on
// one store; each check works under a folder of its own.
package enginetest

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// Dial opens a new session on the store under test; the suite closes it.
type Dial func(t *testing.T) engine.Conn

// Run runs every check.
func Run(t *testing.T, dial Dial) {
	checks := []struct {
		name string
		fn   func(t *testing.T, dial Dial, dir string)
	}{
		{"Records", records},
		{"Sequential", sequential},
		{"Claim", claim},
		{"Watches", watches},
		{"Session", session},
		{"LockQueue", lockQueue},
		{"Semaphore", semaphore},
	}
	for i, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			c.fn(t, dial, fmt.Sprintf("/enginetest/%d-%d", time.Now().UnixNano(), i))
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func wantErr(t *testing.T, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// records: create fails if the record exists or its folder does not;
// update and delete only over the version read.
func records(t *testing.T, dial Dial, dir string) {
	c, ctx := dial(t), ctxFor(t)
	_, _, err := c.Create(ctx, path.Join(dir, "a"), []byte("x"), engine.Persistent)
	wantErr(t, err, engine.ErrNotFound, "create without its folder")
	must(t, c.EnsureFolder(ctx, dir), "EnsureFolder")
	must(t, c.EnsureFolder(ctx, dir), "EnsureFolder again")
	p := path.Join(dir, "a")
	name, st, err := c.Create(ctx, p, []byte("one"), engine.Persistent)
	must(t, err, "create")
	if name != p {
		t.Errorf("create named %q, want %q", name, p)
	}
	_, _, err = c.Create(ctx, p, []byte("two"), engine.Persistent)
	wantErr(t, err, engine.ErrExists, "create again")
	b, got, err := c.Get(ctx, p)
	must(t, err, "get")
	if string(b) != "one" || got.Version != st.Version || got.Created != st.Created && st.Created != 0 {
		t.Errorf("get: %q %+v, want one at %+v", b, got, st)
	}
	st2, err := c.Update(ctx, p, []byte("two"), got.Version)
	must(t, err, "update over the version read")
	if st2.Version == got.Version {
		t.Errorf("update left the version at %v", st2.Version)
	}
	_, err = c.Update(ctx, p, []byte("three"), got.Version)
	wantErr(t, err, engine.ErrVersion, "update over a stale version")
	wantErr(t, c.Delete(ctx, p, got.Version), engine.ErrVersion, "delete over a stale version")
	_, err = c.Update(ctx, path.Join(dir, "none"), nil, engine.AnyVersion)
	wantErr(t, err, engine.ErrNotFound, "update of a missing record")
	must(t, c.Delete(ctx, p, st2.Version), "delete over the version read")
	_, _, err = c.Get(ctx, p)
	wantErr(t, err, engine.ErrNotFound, "get after delete")
	wantErr(t, c.Delete(ctx, p, engine.AnyVersion), engine.ErrNotFound, "delete of a missing record")
	// A record made again is made later: its creation revision is above.
	_, st3, err := c.Create(ctx, p, nil, engine.Persistent)
	must(t, err, "create again after delete")
	if _, back, err := c.Get(ctx, p); err != nil || back.Created <= got.Created {
		t.Errorf("recreated record: created %d, not above %d (%v)", back.Created, got.Created, err)
	}
	_ = st3
	kids, err := c.Children(ctx, dir)
	if err != nil || !slices.Equal(kids, []string{"a"}) {
		t.Errorf("children %v %v, want [a]", kids, err)
	}
	_, err = c.Children(ctx, path.Join(dir, "none"))
	wantErr(t, err, engine.ErrNotFound, "children of a missing folder")
}

// sequential: the names sort as the creates came.
func sequential(t *testing.T, dial Dial, dir string) {
	c, ctx := dial(t), ctxFor(t)
	must(t, c.EnsureFolder(ctx, dir), "EnsureFolder")
	var names []string
	for range 3 {
		name, _, err := c.Create(ctx, path.Join(dir, state.TriggerPrefix), nil, engine.Sequential)
		must(t, err, "sequential create")
		base := path.Base(name)
		if len(base) != len(state.TriggerPrefix)+10 || !strings.HasPrefix(base, state.TriggerPrefix) {
			t.Errorf("sequential name %q: want %s and ten digits", base, state.TriggerPrefix)
		}
		names = append(names, base)
	}
	if !slices.IsSorted(names) || names[0] == names[1] {
		t.Errorf("sequential names %v do not sort as created", names)
	}
}

// claim: of two claimants exactly one wins, and the winner's version
// lets it update.
func claim(t *testing.T, dial Dial, dir string) {
	a, b, ctx := dial(t), dial(t), ctxFor(t)
	must(t, a.EnsureFolder(ctx, dir), "EnsureFolder")
	p := path.Join(dir, "firing")
	mine := func(want string) func([]byte) bool { return func(d []byte) bool { return string(d) == want } }
	wonA, v, err := a.Claim(ctx, p, []byte("a"), mine("a"))
	must(t, err, "claim a")
	wonB, _, err := b.Claim(ctx, p, []byte("b"), mine("b"))
	must(t, err, "claim b")
	if !wonA || wonB {
		t.Fatalf("claims: a %v, b %v; want a alone", wonA, wonB)
	}
	if _, err := a.Update(ctx, p, []byte("a2"), v); err != nil {
		t.Errorf("the claimant's update over the claim's version: %v", err)
	}
}

// watches: one event per watch, for the change after the read.
func watches(t *testing.T, dial Dial, dir string) {
	c, other, ctx := dial(t), dial(t), ctxFor(t)
	must(t, c.EnsureFolder(ctx, dir), "EnsureFolder")
	p := path.Join(dir, "w")
	_, _, err := c.Create(ctx, p, []byte("0"), engine.Persistent)
	must(t, err, "create")
	recv := func(ch <-chan engine.Event, what string) engine.Event {
		t.Helper()
		select {
		case ev := <-ch:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no event", what)
		}
		return engine.Event{}
	}
	_, st, ev, err := c.GetW(ctx, p)
	must(t, err, "GetW")
	_, err = other.Update(ctx, p, []byte("1"), st.Version)
	must(t, err, "update")
	if e := recv(ev, "data watch"); e.Kind != engine.Changed {
		t.Errorf("data watch: %+v, want Changed", e)
	}
	_, _, ev, err = c.GetW(ctx, p)
	must(t, err, "GetW")
	must(t, other.Delete(ctx, p, engine.AnyVersion), "delete")
	if e := recv(ev, "data watch at delete"); e.Kind != engine.Deleted {
		t.Errorf("data watch at delete: %+v, want Deleted", e)
	}
	kids, ev, err := c.ChildrenW(ctx, dir)
	must(t, err, "ChildrenW")
	if len(kids) != 0 {
		t.Errorf("children %v, want none", kids)
	}
	_, _, err = other.Create(ctx, path.Join(dir, "k"), nil, engine.Persistent)
	must(t, err, "create child")
	if e := recv(ev, "child watch"); e.Kind != engine.ChildrenChanged {
		t.Errorf("child watch: %+v, want ChildrenChanged", e)
	}
}

// session: the lease is proven ahead, ephemeral records go with the
// session, Done closes at Close.
func session(t *testing.T, dial Dial, dir string) {
	c, other, ctx := dial(t), dial(t), ctxFor(t)
	if c.Timeout() <= 0 || c.ID() == "" || c.Kind() == "" {
		t.Errorf("session: timeout %v, id %q, kind %q", c.Timeout(), c.ID(), c.Kind())
	}
	must(t, c.EnsureFolder(ctx, dir), "EnsureFolder")
	before := time.Now()
	eph := path.Join(dir, "eph")
	_, _, err := c.Create(ctx, eph, nil, engine.Ephemeral)
	must(t, err, "ephemeral create")
	if l := c.Lease(); l.Before(before) || l.After(time.Now().Add(c.Timeout())) {
		t.Errorf("lease %v: want within a timeout of now (%v)", l, c.Timeout())
	}
	_, _, gone, err := other.GetW(ctx, eph)
	must(t, err, "GetW of the ephemeral record")
	must(t, c.Close(), "close")
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after Close")
	}
	if err := c.Err(); err != nil {
		t.Errorf("Err after Close: %v, want nil", err)
	}
	select {
	case ev := <-gone:
		if ev.Kind != engine.Deleted {
			t.Errorf("the ephemeral record's watch: %+v, want Deleted", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the ephemeral record outlived its session")
	}
}

// lockQueue: the first to enter holds; TryAcquire behind it is refused;
// the next holds once the first releases, with a higher token; List
// shows the queue in order.
func lockQueue(t *testing.T, dial Dial, dir string) {
	a, b, ctx := dial(t), dial(t), ctxFor(t)
	lock := path.Join(dir, "lock")
	ea, err := a.Enter(ctx, lock, state.HolderInfo{Host: "a", PID: 1})
	must(t, err, "enter a")
	must(t, ea.Acquire(ctx, nil), "acquire a")
	eb, err := b.Enter(ctx, lock, state.HolderInfo{Host: "b", PID: 2})
	must(t, err, "enter b")
	wantErr(t, eb.TryAcquire(ctx, nil), engine.ErrNotAcquired, "try behind a holder")
	// A refused entry stays in the queue until released.
	must(t, eb.Release(ctx), "release the refused entry")
	eb2, err := b.Enter(ctx, lock, state.HolderInfo{Host: "b", PID: 2})
	must(t, err, "enter b again")
	q, err := a.List(ctx, lock)
	must(t, err, "list")
	if len(q.Contenders) != 2 || q.Contenders[0].Info.Host != "a" || !q.Contenders[0].Holding || q.Contenders[1].Info.Host != "b" {
		t.Errorf("queue %+v, want a holding, then b", q.Contenders)
	}
	held := make(chan error, 1)
	go func() { held <- eb2.Acquire(ctx, nil) }()
	must(t, ea.Release(ctx), "release a")
	select {
	case err := <-held:
		must(t, err, "acquire b")
	case <-time.After(20 * time.Second):
		t.Fatal("b did not take the lock after a's release")
	}
	if eb2.Token() <= ea.Token() {
		t.Errorf("tokens %d then %d: want rising", ea.Token(), eb2.Token())
	}
	if q, err := b.List(ctx, lock); err != nil || !strings.HasPrefix(q.Record, state.RecordHeld) {
		t.Errorf("record %q (%v), want held", q.Record, err)
	}
	must(t, eb2.Release(ctx), "release b")
	if q, err := a.List(ctx, lock); err != nil || len(q.Contenders) != 0 || !strings.HasPrefix(q.Record, state.RecordReleased) {
		t.Errorf("after the releases: %+v (%v), want an empty queue and released", q, err)
	}
	_, err = a.List(ctx, path.Join(dir, "none"))
	wantErr(t, err, engine.ErrNotFound, "list of a missing lock")
}
