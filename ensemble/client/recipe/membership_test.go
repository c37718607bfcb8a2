// Tests of the membership recipe, against an in-process coordrun ensemble
// and against Apache ZooKeeper (backends in election_test.go).

package recipe_test

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
)

func TestMembership(t *testing.T) {
	forEachRecipeBackend(t, func(t *testing.T, b recipeBackend) {
		t.Run("register and announce", func(t *testing.T) { membershipRoster(t, b) })
		t.Run("live goes with the session", func(t *testing.T) { membershipSessionEnd(t, b) })
		t.Run("watch follows the roster", func(t *testing.T) { membershipWatch(t, b) })
		t.Run("a name is live once", func(t *testing.T) { membershipNameOnce(t, b) })
		t.Run("evicted member stays out", func(t *testing.T) { membershipEvicted(t, b) })
		t.Run("withdraw and forget", func(t *testing.T) { membershipWithdraw(t, b) })
		t.Run("lost announce reply", func(t *testing.T) { membershipLostReply(t, b) })
		t.Run("announce given up mid-create", func(t *testing.T) { membershipCancelledCreate(t, b) })
	})
}

// names renders a roster's folders as "all=a,b live=a".
func rosterNames(r recipe.Roster) string {
	var all, live []string
	for _, m := range r.All {
		all = append(all, m.Name)
	}
	for _, m := range r.Live {
		live = append(live, m.Name)
	}
	return fmt.Sprintf("all=%s live=%s", strings.Join(all, ","), strings.Join(live, ","))
}

func readRoster(t *testing.T, g *recipe.Group) recipe.Roster {
	t.Helper()
	r, err := g.Roster(testkit.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func membershipRoster(t *testing.T, b recipeBackend) {
	c := b.connect(t)
	g := recipe.NewGroup(c, b.folder(t, "g"), nil)
	ctx := testkit.Context(t, 10*time.Second)
	if got := rosterNames(readRoster(t, g)); got != "all= live=" {
		t.Fatalf("roster of a group never used: %s", got)
	}
	for _, n := range []string{"b", "a"} {
		if err := g.Register(ctx, n, []byte("reg "+n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Register(ctx, "a", []byte("reg a again")); err != nil {
		t.Fatal(err)
	}
	p, err := g.Announce(ctx, "a", []byte("live a"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Node() != path.Join(g.Dir(), "live", "a") {
		t.Fatalf("live node %s", p.Node())
	}
	r := readRoster(t, g)
	if got := rosterNames(r); got != "all=a,b live=a" {
		t.Fatalf("roster %s", got)
	}
	if string(r.All[0].Data) != "reg a again" || string(r.Live[0].Data) != "live a" {
		t.Fatalf("roster data %q %q", r.All[0].Data, r.Live[0].Data)
	}
	if d, ok := r.LiveData("a"); !ok || string(d) != "live a" || r.IsLive("b") {
		t.Fatalf("LiveData(a) = %q %v, IsLive(b) = %v", d, ok, r.IsLive("b"))
	}
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if err := g.Register(ctx, bad, nil); !errors.Is(err, recipe.ErrBadMemberName) {
			t.Errorf("Register(%q) = %v, want ErrBadMemberName", bad, err)
		}
		if _, err := g.Announce(ctx, bad, nil); !errors.Is(err, recipe.ErrBadMemberName) {
			t.Errorf("Announce(%q) = %v, want ErrBadMemberName", bad, err)
		}
	}
}

func membershipSessionEnd(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "g")
	member, observer := b.connect(t), b.connect(t)
	g := recipe.NewGroup(member, dir, nil)
	ctx := testkit.Context(t, 10*time.Second)
	if err := g.Register(ctx, "m", nil); err != nil {
		t.Fatal(err)
	}
	p, err := g.Announce(ctx, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	member.Close()
	<-p.Done()
	if err := p.Err(); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("presence ended with %v, want the session's end", err)
	}
	if err := p.Withdraw(ctx); err != nil {
		t.Fatalf("Withdraw with the session over: %v (the node went with it)", err)
	}
	// The observer's member may apply the session's end a moment later.
	og := recipe.NewGroup(observer, dir, nil)
	testkit.WaitFor(t, 10*time.Second, "the member to leave Live only", func() bool { return rosterNames(readRoster(t, og)) == "all=m live=" })
}

// awaitRoster reads rosters from ch until one renders as want.
func awaitRoster(t *testing.T, ch <-chan recipe.Roster, want string) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	last := "(none)"
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed at %s, waiting for %s", last, want)
			}
			if last = rosterNames(r); last == want {
				return
			}
		case <-timer.C:
			t.Fatalf("roster %s, waiting for %s", last, want)
		}
	}
}

func membershipWatch(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "g")
	watcher, m1, m2 := b.connect(t), b.connect(t), b.connect(t)
	ctx := testkit.Context(t, 30*time.Second)
	wctx, stop := context.WithCancel(ctx)
	ch := recipe.NewGroup(watcher, dir, nil).Watch(wctx)
	awaitRoster(t, ch, "all= live=")

	g1, g2 := recipe.NewGroup(m1, dir, nil), recipe.NewGroup(m2, dir, nil)
	if err := g1.Register(ctx, "one", nil); err != nil {
		t.Fatal(err)
	}
	awaitRoster(t, ch, "all=one live=")
	if _, err := g1.Announce(ctx, "one", nil); err != nil {
		t.Fatal(err)
	}
	awaitRoster(t, ch, "all=one live=one")
	if err := g2.Register(ctx, "two", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := g2.Announce(ctx, "two", nil); err != nil {
		t.Fatal(err)
	}
	awaitRoster(t, ch, "all=one,two live=one,two")
	m1.Close()
	awaitRoster(t, ch, "all=one,two live=two")
	if err := g2.Forget(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	awaitRoster(t, ch, "all=two live=two")

	stop()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatal("watch not closed after cancel")
		}
	}
}

func membershipNameOnce(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "g")
	old, fresh := b.connect(t), b.connect(t)
	ctx := testkit.Context(t, 20*time.Second)
	if _, err := recipe.NewGroup(old, dir, nil).Announce(ctx, "n", []byte("old")); err != nil {
		t.Fatal(err)
	}
	// A second incarnation of "n" waits for the first one's node to go.
	type result struct {
		p   *recipe.Presence
		err error
	}
	res := make(chan result, 1)
	go func() {
		p, err := recipe.NewGroup(fresh, dir, nil).Announce(ctx, "n", []byte("fresh"))
		res <- result{p, err}
	}()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := recipe.NewGroup(fresh, dir, nil).Announce(short, "n", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Announce of a held name returned %v, want it to wait until its deadline", err)
	}
	select {
	case r := <-res:
		t.Fatalf("Announce of a held name returned %+v while the holder lives", r)
	default:
	}
	old.Close()
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatal(r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Announce still waiting after the holder's session ended")
	}
	if d, _ := readRoster(t, recipe.NewGroup(fresh, dir, nil)).LiveData("n"); string(d) != "fresh" {
		t.Fatalf("live data %q, want the new incarnation's", d)
	}
}

func membershipEvicted(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "g")
	member, admin := b.connect(t), b.connect(t)
	g := recipe.NewGroup(member, dir, nil)
	ctx := testkit.Context(t, 20*time.Second)
	p, err := g.Announce(ctx, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(ctx, p.Node(), -1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the evicted member did not notice")
	}
	if !errors.Is(p.Err(), recipe.ErrEvicted) {
		t.Fatalf("presence ended with %v, want ErrEvicted", p.Err())
	}
	// Not announced again behind the member's back: it must catch up first.
	if r := readRoster(t, g); r.IsLive("m") {
		t.Fatalf("evicted member live again: %s", rosterNames(r))
	}
	if err := p.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
}

func membershipWithdraw(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "g")
	c := b.connect(t)
	g := recipe.NewGroup(c, dir, nil)
	ctx := testkit.Context(t, 20*time.Second)
	if err := g.Register(ctx, "m", nil); err != nil {
		t.Fatal(err)
	}
	p, err := g.Announce(ctx, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if !errors.Is(p.Err(), recipe.ErrWithdrawn) {
		t.Fatalf("presence ended with %v, want ErrWithdrawn", p.Err())
	}
	if got := rosterNames(readRoster(t, g)); got != "all=m live=" {
		t.Fatalf("after Withdraw: %s", got)
	}
	// A withdrawn Presence leaves a later incarnation's node alone.
	p2, err := g.Announce(ctx, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rosterNames(readRoster(t, g)); got != "all=m live=m" {
		t.Fatalf("an old Presence's Withdraw removed the new node: %s", got)
	}
	if err := p2.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Forget(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if err := g.Forget(ctx, "m"); err != nil {
		t.Fatalf("Forget of a forgotten member: %v", err)
	}
	if got := rosterNames(readRoster(t, g)); got != "all= live=" {
		t.Fatalf("after Forget: %s", got)
	}
}

func membershipLostReply(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "g")
	ctx := testkit.Context(t, 20*time.Second)
	// Another member makes the live folder, so that the create whose reply
	// is cut makes a node.
	if _, err := recipe.NewGroup(b.connect(t), dir, nil).Announce(ctx, "other", nil); err != nil {
		t.Fatal(err)
	}
	px := testkit.StartProxy(t, b.servers[0])
	c := b.connectTo(t, px.Addr())
	px.CutReplyTo(wire.OpCreate2)
	p, err := recipe.NewGroup(c, dir, nil).Announce(ctx, "m", []byte("mine"))
	if err != nil {
		t.Fatal(err)
	}
	if px.Cuts() != 1 {
		t.Fatalf("%d replies cut, want the create's", px.Cuts())
	}
	// The node the lost create made is recognised as this session's.
	select {
	case <-p.Done():
		t.Fatalf("presence ended: %v", p.Err())
	default:
	}
	if d, ok := readRoster(t, recipe.NewGroup(c, dir, nil)).LiveData("m"); !ok || string(d) != "mine" {
		t.Fatalf("live data %q %v", d, ok)
	}
}

// An Announce whose ctx ends while its create is on the way leaves no live
// node behind: the create happens, and Announce removes it before it
// returns, though its ctx is over.
func membershipCancelledCreate(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "g")
	if _, err := recipe.NewGroup(b.connect(t), dir, nil).Announce(testkit.Context(t, 20*time.Second), "other", nil); err != nil {
		t.Fatal(err)
	}
	px := testkit.StartProxy(t, b.servers[0])
	c := b.connectTo(t, px.Addr())
	giveUpMidCreate(t, px, "Announce", func(ctx context.Context) error {
		_, err := recipe.NewGroup(c, dir, nil).Announce(ctx, "m", []byte("mine"))
		return err
	})
	if readRoster(t, recipe.NewGroup(c, dir, nil)).IsLive("m") {
		t.Fatal("the live node of an Announce given up mid-create is left behind")
	}
}
