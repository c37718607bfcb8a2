// Tests of the election recipe, against an in-process coordrun ensemble
// and against Apache ZooKeeper; the backends they share with the
// membership tests are at the bottom.

package recipe_test

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
	"github.com/coordrun/coordrun/internal/testkit/zookeeper"
)

func TestElection(t *testing.T) {
	forEachRecipeBackend(t, func(t *testing.T, b recipeBackend) {
		t.Run("single candidate leads", func(t *testing.T) { electionSingle(t, b) })
		t.Run("handover in queue order", func(t *testing.T) { electionHandover(t, b) })
		t.Run("cancelled campaign leaves no node", func(t *testing.T) { electionCancel(t, b) })
		t.Run("leader deposed by a delete", func(t *testing.T) { electionDeposed(t, b) })
		t.Run("waiter rejoins after a delete", func(t *testing.T) { electionWaiterRejoins(t, b) })
		t.Run("observe follows the leader", func(t *testing.T) { electionObserve(t, b) })
		t.Run("each waiter watches its predecessor only", func(t *testing.T) { electionWatches(t, b) })
		t.Run("lost create reply leaves no ghost", func(t *testing.T) { electionLostReply(t, b) })
	})
}

func electionSingle(t *testing.T, b recipeBackend) {
	c := b.connect(t)
	dir := b.folder(t, "a/b")
	e := recipe.NewElection(c, dir, nil)
	if _, err := e.Leader(testkit.Context(t, 10*time.Second)); !errors.Is(err, recipe.ErrNoLeader) {
		t.Fatalf("Leader before any candidate: %v, want ErrNoLeader", err)
	}
	term, err := e.Campaign(testkit.Context(t, 10*time.Second), []byte("me"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(term.Node(), dir+"/") {
		t.Fatalf("candidate node %s is not in %s", term.Node(), dir)
	}
	l, err := e.Leader(testkit.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l.Node != term.Node() || string(l.Value) != "me" || l.Token != term.Token() || l.Token == 0 {
		t.Fatalf("Leader = %+v, want node %s value me token %d", l, term.Node(), term.Token())
	}
	if u := term.Until(); !u.After(time.Now()) {
		t.Fatalf("Until %v is not in the future while leading", u)
	}
	select {
	case <-term.Done():
		t.Fatalf("term ended: %v", term.Err())
	default:
	}
	if err := term.Resign(testkit.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	<-term.Done()
	if !errors.Is(term.Err(), recipe.ErrResigned) || !term.Until().IsZero() {
		t.Fatalf("after Resign: Err %v, Until %v", term.Err(), term.Until())
	}
	if _, err := e.Leader(testkit.Context(t, 10*time.Second)); !errors.Is(err, recipe.ErrNoLeader) {
		t.Fatalf("Leader after Resign: %v, want ErrNoLeader", err)
	}
}

// campaign runs Campaign in a goroutine; the channel gets its outcome.
type campaignResult struct {
	term *recipe.Term
	err  error
}

func campaignAsync(ctx context.Context, e *recipe.Election, value string) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		term, err := e.Campaign(ctx, []byte(value))
		ch <- campaignResult{term: term, err: err}
	}()
	return ch
}

func awaitTerm(t *testing.T, ch <-chan campaignResult, who string) *recipe.Term {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: Campaign: %v", who, r.err)
		}
		return r.term
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not become leader", who)
	}
	return nil
}

func notLeading(t *testing.T, ch <-chan campaignResult, who string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned from Campaign early: %+v", who, r)
	default:
	}
}

// candidates lists the election folder.
func listCandidates(t *testing.T, c *client.Client, dir string) []string {
	t.Helper()
	kids, _, err := c.Children(testkit.Context(t, 10*time.Second), dir)
	if err != nil {
		t.Fatal(err)
	}
	return kids
}

func electionHandover(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "e")
	ca, cb, cc := b.connect(t), b.connect(t), b.connect(t)
	ctx := testkit.Context(t, 30*time.Second)
	ta := awaitTerm(t, campaignAsync(ctx, recipe.NewElection(ca, dir, nil), "a"), "a")
	rb := campaignAsync(ctx, recipe.NewElection(cb, dir, nil), "b")
	testkit.WaitFor(t, 10*time.Second, "b's candidate node", func() bool { return len(listCandidates(t, ca, dir)) == 2 })
	rc := campaignAsync(ctx, recipe.NewElection(cc, dir, nil), "c")
	testkit.WaitFor(t, 10*time.Second, "c's candidate node", func() bool { return len(listCandidates(t, ca, dir)) == 3 })
	notLeading(t, rb, "b")
	notLeading(t, rc, "c")

	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tb := awaitTerm(t, rb, "b")
	notLeading(t, rc, "c")
	if tb.Token() <= ta.Token() {
		t.Fatalf("token did not rise: a %d, b %d", ta.Token(), tb.Token())
	}
	// The leader's session ends: the next one leads.
	cb.Close()
	<-tb.Done()
	if !errors.Is(tb.Err(), client.ErrClosed) {
		t.Fatalf("b's term ended with %v, want ErrClosed", tb.Err())
	}
	if err := tb.Resign(ctx); err != nil {
		t.Fatalf("Resign with the session over: %v (the node went with it)", err)
	}
	tc := awaitTerm(t, rc, "c")
	if tc.Token() <= tb.Token() {
		t.Fatalf("token did not rise: b %d, c %d", tb.Token(), tc.Token())
	}
	l, err := recipe.NewElection(cc, dir, nil).Leader(ctx)
	if err != nil || string(l.Value) != "c" {
		t.Fatalf("Leader = %+v, %v; want c", l, err)
	}
}

func electionCancel(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "e")
	ca, cb := b.connect(t), b.connect(t)
	ta := awaitTerm(t, campaignAsync(testkit.Context(t, 30*time.Second), recipe.NewElection(ca, dir, nil), "a"), "a")
	ctx, cancel := context.WithCancel(context.Background())
	rb := campaignAsync(ctx, recipe.NewElection(cb, dir, nil), "b")
	testkit.WaitFor(t, 10*time.Second, "b's candidate node", func() bool { return len(listCandidates(t, ca, dir)) == 2 })
	cancel()
	r := <-rb
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled Campaign returned %+v, want context.Canceled", r)
	}
	// b's member deleted the node; a's may apply that a moment later.
	testkit.WaitFor(t, 10*time.Second, "b's node to go", func() bool {
		kids := listCandidates(t, ca, dir)
		return len(kids) == 1 && path.Join(dir, kids[0]) == ta.Node()
	})
}

func electionDeposed(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "e")
	ca, cb, admin := b.connect(t), b.connect(t), b.connect(t)
	ctx := testkit.Context(t, 30*time.Second)
	ta := awaitTerm(t, campaignAsync(ctx, recipe.NewElection(ca, dir, nil), "a"), "a")
	rb := campaignAsync(ctx, recipe.NewElection(cb, dir, nil), "b")
	testkit.WaitFor(t, 10*time.Second, "b's candidate node", func() bool { return len(listCandidates(t, ca, dir)) == 2 })

	if err := admin.Delete(ctx, ta.Node(), -1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ta.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the deposed leader did not notice")
	}
	if !errors.Is(ta.Err(), recipe.ErrDeposed) || !ta.Until().IsZero() {
		t.Fatalf("deposed term: Err %v, Until %v", ta.Err(), ta.Until())
	}
	awaitTerm(t, rb, "b")
	// A deposed leader resigns rather than queueing again.
	if kids := listCandidates(t, cb, dir); len(kids) != 1 {
		t.Fatalf("candidates after the deposition: %v, want b's only", kids)
	}
}

func electionWaiterRejoins(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "e")
	ca, cb, cc, admin := b.connect(t), b.connect(t), b.connect(t), b.connect(t)
	ctx := testkit.Context(t, 30*time.Second)
	ta := awaitTerm(t, campaignAsync(ctx, recipe.NewElection(ca, dir, nil), "a"), "a")
	rb := campaignAsync(ctx, recipe.NewElection(cb, dir, nil), "b")
	testkit.WaitFor(t, 10*time.Second, "b's candidate node", func() bool { return len(listCandidates(t, ca, dir)) == 2 })
	rc := campaignAsync(ctx, recipe.NewElection(cc, dir, nil), "c")
	testkit.WaitFor(t, 10*time.Second, "c's candidate node", func() bool { return len(listCandidates(t, ca, dir)) == 3 })
	var bNode string
	for _, k := range listCandidates(t, ca, dir) {
		data, _, err := admin.Get(ctx, path.Join(dir, k))
		if err != nil {
			t.Fatal(err)
		}
		if string(data) == "b" {
			bNode = path.Join(dir, k)
		}
	}
	if err := admin.Delete(ctx, bNode, -1); err != nil {
		t.Fatal(err)
	}
	// b notices its own node's deletion (not its predecessor's) and joins
	// again, now behind c.
	testkit.WaitFor(t, 10*time.Second, "b's new candidate node", func() bool {
		kids := listCandidates(t, ca, dir)
		return len(kids) == 3 && !hasName(kids, path.Base(bNode))
	})
	notLeading(t, rb, "b")
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tc := awaitTerm(t, rc, "c")
	notLeading(t, rb, "b")
	if err := tc.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	awaitTerm(t, rb, "b")
}

func hasName(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func electionObserve(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "e")
	ca, cb, co := b.connect(t), b.connect(t), b.connect(t)
	ctx := testkit.Context(t, 30*time.Second)
	octx, stop := context.WithCancel(ctx)
	obs := recipe.NewElection(co, dir, nil).Observe(octx)
	next := func(want string) recipe.Leader {
		t.Helper()
		select {
		case l, ok := <-obs:
			if !ok {
				t.Fatalf("observer closed while waiting for %q", want)
			}
			if string(l.Value) != want || (want == "") != (l.Node == "") {
				t.Fatalf("observed %+v, want leader %q", l, want)
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("no observation of leader %q", want)
		}
		return recipe.Leader{}
	}
	next("") // no leader yet; the folder does not even exist
	ta := awaitTerm(t, campaignAsync(ctx, recipe.NewElection(ca, dir, nil), "a"), "a")
	la := next("a")
	rb := campaignAsync(ctx, recipe.NewElection(cb, dir, nil), "b")
	testkit.WaitFor(t, 10*time.Second, "b's candidate node", func() bool { return len(listCandidates(t, ca, dir)) == 2 })
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tb := awaitTerm(t, rb, "b")
	lb := next("b")
	if lb.Token <= la.Token || lb.Node != tb.Node() {
		t.Fatalf("observed b as %+v after a as %+v", lb, la)
	}
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next("")
	stop()
	select {
	case l, ok := <-obs:
		if ok {
			t.Fatalf("observation %+v after cancel", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("observer not closed after cancel")
	}
}

func electionWatches(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "e")
	ctx := testkit.Context(t, 60*time.Second)
	clients := []*client.Client{b.connect(t)}
	ta := awaitTerm(t, campaignAsync(ctx, recipe.NewElection(clients[0], dir, nil), "0"), "the leader")
	const waiters = 4
	var results []<-chan campaignResult
	for i := 1; i <= waiters; i++ {
		c := b.connect(t)
		clients = append(clients, c)
		results = append(results, campaignAsync(ctx, recipe.NewElection(c, dir, nil), fmt.Sprint(i)))
		testkit.WaitFor(t, 10*time.Second, "the waiter's node", func() bool { return len(listCandidates(t, c, dir)) == i+1 })
	}
	// Candidate i is watched by its own session and by candidate i+1's,
	// and nobody watches the folder: a leader's end wakes one waiter.
	want := map[string][]int64{}
	// Listed by the last session, which has seen every candidate's node:
	// another may be on a member that has not applied the last create.
	nodes := listCandidates(t, clients[waiters], dir)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i][len(nodes[i])-10:] < nodes[j][len(nodes[j])-10:] })
	for i, n := range nodes {
		ids := []int64{clients[i].SessionID()}
		if i+1 < len(nodes) {
			ids = append(ids, clients[i+1].SessionID())
		}
		want[path.Join(dir, n)] = ids
	}
	b.awaitWatches(t, want)

	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next := awaitTerm(t, results[0], "the first waiter")
	for i := 1; i < waiters; i++ {
		notLeading(t, results[i], fmt.Sprint("waiter ", i+1))
	}
	delete(want, ta.Node())
	b.awaitWatches(t, want)
	if err := next.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	awaitTerm(t, results[1], "the second waiter")
}

func electionLostReply(t *testing.T, b recipeBackend) {
	dir := b.folder(t, "e")
	px := testkit.StartProxy(t, b.servers[0])
	c := b.connectTo(t, px.Addr())
	// The folder exists, so that the create whose reply is cut makes a node.
	var folders []string
	for p := dir; p != "/"; p = path.Dir(p) {
		folders = append([]string{p}, folders...)
	}
	for _, p := range folders {
		if _, err := c.Create(testkit.Context(t, 10*time.Second), p, nil, 0, client.OpenACL); err != nil && !errors.Is(err, wire.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	px.CutReplyTo(wire.OpCreate2)
	term, err := recipe.NewElection(c, dir, nil).Campaign(testkit.Context(t, 20*time.Second), []byte("me"))
	if err != nil {
		t.Fatal(err)
	}
	if px.Cuts() != 1 {
		t.Fatalf("%d replies cut, want the create's", px.Cuts())
	}
	// The candidate found the node its lost create made, rather than
	// creating a second one that would lead for nobody.
	if kids := listCandidates(t, c, dir); len(kids) != 1 || path.Join(dir, kids[0]) != term.Node() {
		t.Fatalf("candidates %v, want only %s", kids, term.Node())
	}
	if err := term.Resign(testkit.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// --- backends shared with membership_test.go -------------------------------

// recipeBackend is an ensemble the recipes run against: an in-process
// coordrun ensemble or a standalone Apache ZooKeeper.
type recipeBackend struct {
	name    string
	servers []string
	root    string // a folder of its own per test run
}

var recipeFolders atomic.Int64

// folder returns a fresh folder path for one test, under the backend's
// root, ending in sub.
func (b recipeBackend) folder(t *testing.T, sub string) string {
	return path.Join(b.root, fmt.Sprintf("t%d", recipeFolders.Add(1)), sub)
}

func (b recipeBackend) connect(t *testing.T) *client.Client {
	t.Helper()
	return b.connectTo(t, b.servers...)
}

// connectTo opens a session through the given addresses only.
func (b recipeBackend) connectTo(t *testing.T, servers ...string) *client.Client {
	t.Helper()
	c, err := client.Connect(testkit.Context(t, 20*time.Second), client.Config{Servers: servers, SessionTimeout: 4 * time.Second, Logger: testkit.Logger("client")})
	if err != nil {
		t.Fatalf("connect %v: %v", servers, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// awaitWatches waits until the watches held match want: each path's
// watching sessions, and no other path watched, as every member lists
// them (wchp).
func (b recipeBackend) awaitWatches(t *testing.T, want map[string][]int64) {
	t.Helper()
	total := 0
	wantText := map[string]string{}
	for p, ids := range want {
		total += len(ids)
		var s []string
		for _, id := range ids {
			s = append(s, fmt.Sprintf("0x%x", id))
		}
		sort.Strings(s)
		wantText[p] = strings.Join(s, " ")
	}
	word := func(addr, w string) string {
		out, err := client.FourLetter(testkit.Context(t, 5*time.Second), addr, w, nil)
		if err != nil {
			t.Fatalf("%s %s: %v", w, addr, err)
		}
		return out
	}
	var got string
	// Watches are each member's own (a session's sit where it is
	// connected): wchp of every member, merged.
	held := func() bool {
		var all strings.Builder
		for _, addr := range b.servers {
			all.WriteString(word(addr, "wchp"))
		}
		got = fmt.Sprint(watchesByPath(all.String()))
		return got == fmt.Sprint(wantText)
	}
	if !testkit.Poll(10*time.Second, held) {
		t.Fatalf("watches: got %s, want %v (%d in all)", got, wantText, total)
	}
}

// watchesByPath parses ZooKeeper's wchp: a path, then its sessions indented.
func watchesByPath(out string) map[string]string {
	m := map[string][]string{}
	cur := ""
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "/"):
			// A path in both tables (data, child) or on several
			// members: the union of its watchers.
			cur = strings.TrimSpace(line)
			if _, ok := m[cur]; !ok {
				m[cur] = nil
			}
		case strings.TrimSpace(line) != "" && cur != "":
			m[cur] = append(m[cur], strings.TrimSpace(line))
		}
	}
	out2 := map[string]string{}
	for p, ids := range m {
		sort.Strings(ids)
		out2[p] = strings.Join(ids, " ")
	}
	return out2
}

func forEachRecipeBackend(t *testing.T, f func(t *testing.T, b recipeBackend)) {
	t.Run("coordrun", func(t *testing.T) { f(t, coordrunBackend(t)) })
	t.Run("zookeeper", func(t *testing.T) { f(t, zookeeperBackend(t)) })
}

// coordrunBackend starts three members on loopback for the test.
func coordrunBackend(t *testing.T) recipeBackend {
	t.Helper()
	return recipeBackend{name: "coordrun", servers: ensembletest.Start(t, 3, ensembletest.FourLetterWords("srvr", "ruok", "isro", "mbrs", "wchp")).Servers(), root: "/recipes"}
}

// zookeeperBackend starts a standalone Apache ZooKeeper for the test, or
// skips it when java or ZooKeeper is missing (unless CI is set).
func zookeeperBackend(t *testing.T) recipeBackend {
	t.Helper()
	srv, err := zookeeper.Start(zookeeper.Require(t), "coordrun-recipe-zk-", client.FourLetter)
	if err != nil {
		t.Fatalf("starting ZooKeeper: %v", err)
	}
	t.Cleanup(srv.Stop)
	return recipeBackend{name: "zookeeper", servers: []string{srv.Addr}, root: "/recipes"}
}
