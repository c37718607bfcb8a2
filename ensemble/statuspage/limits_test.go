package statuspage

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor/state"
)

// bigRoot is a Tree with a lock root of many empty lock folders (and an
// empty cron root), which counts the names it hands out by folder.
type bigRoot struct {
	mu       sync.Mutex // guards everything below
	root     string
	names    map[string]struct{}
	stat     Stat
	given    map[string]int // names handed out, by folder
	calls    map[string]int // child reads, by folder
	fullRead int            // reads of every child of a folder
}

func newBigRoot(root string, n int) *bigRoot {
	b := &bigRoot{root: root, names: map[string]struct{}{}, given: map[string]int{}, calls: map[string]int{}}
	for i := range n {
		b.names[fmt.Sprintf("job-%07d", i)] = struct{}{}
	}
	b.stat = Stat{Czxid: 1, Pzxid: 2, Cversion: int32(n), NumChildren: int32(n)}
	return b
}

func (b *bigRoot) add(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.names[name] = struct{}{}
	b.stat.Pzxid++
	b.stat.Cversion++
	b.stat.NumChildren++
}

func (b *bigRoot) counts(folder string) (calls, given, full int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[folder], b.given[folder], b.fullRead
}

func (b *bigRoot) isLock(p string) bool {
	dir, name := p[:max(strings.LastIndexByte(p, '/'), 0)], p[strings.LastIndexByte(p, '/')+1:]
	_, ok := b.names[name]
	return dir == b.root && ok
}

func (b *bigRoot) Exists(p string) (Stat, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case p == b.root:
		return b.stat, nil
	case p == DefaultCronRoot, b.isLock(p):
		return Stat{Czxid: 3}, nil
	}
	return Stat{}, ErrNoNode
}

func (b *bigRoot) Get(p string) ([]byte, Stat, error) {
	st, err := b.Exists(p)
	return nil, st, err
}

func (b *bigRoot) children(p string) []string {
	if p != b.root {
		return nil
	}
	return slices.Sorted(func(yield func(string) bool) {
		for k := range b.names {
			if !yield(k) {
				return
			}
		}
	})
}

// Children is the read of every child that the page must not make.
func (b *bigRoot) Children(p string) ([]string, Stat, error) {
	st, err := b.Exists(p)
	if err != nil {
		return nil, st, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	kids := b.children(p)
	b.calls[p]++
	b.given[p] += len(kids)
	b.fullRead++
	return kids, st, nil
}

func (b *bigRoot) FirstChildren(p string, n int, cmp func(a, b string) int) ([]string, Stat, error) {
	st, err := b.Exists(p)
	if err != nil {
		return nil, st, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	kids := b.children(p)
	if cmp != nil {
		slices.SortFunc(kids, cmp)
	}
	kids = kids[:min(n, len(kids))]
	b.calls[p]++
	b.given[p] += len(kids)
	return kids, st, nil
}

func (b *bigRoot) ACL(string) ([]ACL, error) { return nil, nil }
func (b *bigRoot) SessionLive(int64) bool    { return false }

type bigRootSource struct {
	*fakeSource
	tree *bigRoot
}

func (s bigRootSource) ReadTree(fn func(Tree)) { fn(s.tree) }

func (b *bigRoot) setACL() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stat.Aversion++
}

// TestLockRootReadBounded: with 200,000 children under the lock root, the
// page takes at most maxLocks names from the tree, never all of them, and
// while the root is unchanged it does not read its children again. A
// changed root is read again after refreshLarge (its count at once), or
// at once when its ACL changed.
func TestLockRootReadBounded(t *testing.T) {
	const children = 200_000
	b := newBigRoot(DefaultLockRoot, children)
	now := fixedNow
	s := New(bigRootSource{newFakeSource(), b}, Options{Now: func() time.Time { return now }})

	v := s.locks()
	calls, given, full := b.counts(DefaultLockRoot)
	if full != 0 || given > maxLocks || calls != 1 {
		t.Fatalf("first read: %d reads of every child, %d names taken from the lock root in %d calls; want none, at most %d, 1",
			full, given, calls, maxLocks)
	}
	if len(v.Locks) != maxLocks || v.Locks[0].Name != "job-0000000" || v.Locks[maxLocks-1].Name != fmt.Sprintf("job-%07d", maxLocks-1) ||
		v.Error != fmt.Sprintf("%d locks; showing the first %d", children, maxLocks) {
		t.Fatalf("%d locks shown (%s ... %s), error %q", len(v.Locks), v.Locks[0].Name, v.Locks[len(v.Locks)-1].Name, v.Error)
	}

	// What the broadcaster does every second: the whole state.
	ctx := testkit.Context(t, 10*time.Second)
	for range 3 {
		now = now.Add(time.Second)
		if st := s.state(ctx); len(st.Locks.Locks) != maxLocks {
			t.Fatalf("state: %d locks", len(st.Locks.Locks))
		}
	}
	if c, g, _ := b.counts(DefaultLockRoot); c != calls || g != given {
		t.Errorf("unchanged root read again: %d calls and %d names, want %d and %d", c, g, calls, given)
	}
	if c, _, _ := b.counts(DefaultLockRoot + "/job-0000007"); c != 1 {
		t.Errorf("an unchanged lock's queue read %d times, want once", c)
	}

	b.add("aaa-first")
	v = s.locks()
	if c, _, _ := b.counts(DefaultLockRoot); c != calls || !strings.HasPrefix(v.Error, fmt.Sprint(children+1)) {
		t.Errorf("a new child within %s of the last read: %d calls, want %d; error %q", refreshLarge, c, calls, v.Error)
	}
	now = now.Add(refreshLarge)
	v = s.locks()
	if c, g, full := b.counts(DefaultLockRoot); c != calls+1 || g-given > maxLocks || full != 0 {
		t.Errorf("after a new child and %s: %d calls, %d more names, %d full reads; want %d, at most %d, none",
			refreshLarge, c, g-given, full, calls+1, maxLocks)
	}
	if v.Locks[0].Name != "aaa-first" {
		t.Errorf("after a new child: first lock %q", v.Locks[0].Name)
	}
	b.add("aaa-second")
	b.setACL()
	if v = s.locks(); v.Locks[0].Name != "aaa-first" || v.Locks[1].Name != "aaa-second" {
		t.Errorf("after a setACL: locks %q, %q; want the root read again", v.Locks[0].Name, v.Locks[1].Name)
	}

	// A root with no more children than are shown is read again at once.
	small := newBigRoot(DefaultLockRoot, 3)
	s = New(bigRootSource{newFakeSource(), small}, Options{Now: func() time.Time { return fixedNow }})
	s.locks()
	small.add("job-new")
	if v := s.locks(); len(v.Locks) != 4 || v.Error != "" {
		t.Errorf("small root after a new child: %d locks, error %q", len(v.Locks), v.Error)
	}
}

// The tree browser, a lock's queue, and a job's hosts and firings read
// at most what they show, too.
func TestChildrenReadsBounded(t *testing.T) {
	f, s := lockFixture(t)
	for i := range 150 {
		f.putJSON(fmt.Sprintf("/coordrun/locks/nightly/lock-q%03d-%010d", i, 100+i), state.HolderInfo{Host: "q"}, 0x100)
		f.putJSON(fmt.Sprintf("/coordrun/cron/report/firings/%013d", 1_900_000_000+i), state.FiringRecord{State: "done"}, 0)
		f.putJSON(fmt.Sprintf("/coordrun/cron/report/hosts/h%03d", i), state.HolderInfo{Host: "h"}, 0x100)
	}
	l, ok := s.lock("nightly")
	if !ok || l.Queued != 153 || len(l.Waiting) != maxQueue-1 || l.Holder == nil || l.Waiting[0].Host != "web-2" {
		t.Errorf("nightly: queued %d, %d waiting shown, holder %v", l.Queued, len(l.Waiting), l.Holder)
	}
	jobs := s.cron().Jobs
	if len(jobs) != 1 || len(jobs[0].Firings) != firingsShown || jobs[0].Firings[0].Name != fmt.Sprintf("%013d", 1_900_000_110) ||
		jobs[0].Firings[firingsShown-1].Name != fmt.Sprintf("%013d", 1_900_000_149) ||
		len(jobs[0].Hosts) != hostsShown {
		t.Errorf("report: %d jobs, %d firings, %d hosts", len(jobs), len(jobs[0].Firings), len(jobs[0].Hosts))
	}
	if v := s.node("/coordrun/locks/nightly"); v.ChildrenCount != 154 || len(v.Children) != 154 {
		t.Errorf("tree browser: %d of %d children", len(v.Children), v.ChildrenCount)
	}
}

// streamFrom serves h with each request's RemoteAddr taken from its
// X-From header, to stand for clients at several addresses.
func streamFrom(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if from := r.Header.Get("X-From"); from != "" {
			r.RemoteAddr = from
		}
		h.ServeHTTP(w, r)
	})
}

// openStream opens /api/events as a client at from; it returns the
// response once the first event arrived, or with the refusal.
func openStream(t *testing.T, base, from string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/api/events", nil)
	req.Header.Set("X-From", from)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode == http.StatusOK {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
		}
	}
	return resp
}

// refusal is the body of a refused stream; an open one is not read.
func refusal(resp *http.Response) string {
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestEventStreamsPerAddress: one address holds at most 8 streams, so a
// client at another still gets one; the total cap holds too. A refused
// stream gets 503 with the reason, and Options.Refused hears it.
func TestEventStreamsPerAddress(t *testing.T) {
	var mu sync.Mutex
	refused := map[string]int{}
	s := New(newFakeSource(), Options{Interval: 20 * time.Millisecond, MaxStreams: 12,
		Allowed: func(string) bool { return true },
		Refused: func(reason string) { mu.Lock(); refused[reason]++; mu.Unlock() }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	srv := httptest.NewServer(streamFrom(s.Handler()))
	defer func() { cancel(); <-done; srv.Close() }()

	var first *http.Response
	for i := range 8 {
		resp := openStream(t, srv.URL, "192.0.2.7:"+fmt.Sprint(50000+i))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d from 192.0.2.7: %d", i+1, resp.StatusCode)
		}
		if first == nil {
			first = resp
		}
	}
	resp := openStream(t, srv.URL, "192.0.2.7:50100")
	body := refusal(resp)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "from 192.0.2.7: 8") {
		t.Errorf("9th stream from 192.0.2.7: %d %s, want 503 naming the address", resp.StatusCode, body)
	}
	if resp := openStream(t, srv.URL, "192.0.2.8:50000"); resp.StatusCode != http.StatusOK {
		t.Errorf("a stream from 192.0.2.8 while 192.0.2.7 holds 8: %d", resp.StatusCode)
	}
	// A stream closed frees its place.
	first.Body.Close()
	testkit.WaitFor(t, 5*time.Second, "the closed stream's end", func() bool { return s.Streams() == 8 })
	if resp := openStream(t, srv.URL, "192.0.2.7:50200"); resp.StatusCode != http.StatusOK {
		t.Errorf("a stream from 192.0.2.7 after one closed: %d", resp.StatusCode)
	}
	// Total: 12 at most, from however many addresses.
	for i := range 3 {
		if resp := openStream(t, srv.URL, fmt.Sprintf("192.0.2.%d:1", 20+i)); resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d in all: %d", 10+i, resp.StatusCode)
		}
	}
	resp = openStream(t, srv.URL, "192.0.2.99:1")
	body = refusal(resp)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "12 in all") {
		t.Errorf("13th stream: %d %s, want 503", resp.StatusCode, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if refused[RefusedStreamsPerAddr] != 1 || refused[RefusedStreamsTotal] != 1 {
		t.Errorf("refusals heard: %v", refused)
	}
}
