package zkengine_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/engine/enginetest"
	"github.com/coordrun/coordrun/supervisor/state"
)

// semRig is a semaphore's contenders, each on a session of its own, on
// one coordrun member.
type semRig struct {
	t    *testing.T
	addr string
	dial enginetest.Dial
	dir  string
	ctx  context.Context

	mu      sync.Mutex // guards holding, maxHeld, tokens, heads
	holding int
	maxHeld int
	tokens  map[string][]int64 // slot folder: tokens in the order taken
	heads   int                // times a head reported waiting for a slot
}

func newSemRig(t *testing.T, words ...string) *semRig {
	cl := ensembletest.Start(t, 1, ensembletest.FourLetterWords(words...), func(c *ensemble.Config) {
		c.MaxClientConns = 300 // a session per contender, all from 127.0.0.1
	})
	addr := cl.ClientAddr(0)
	return &semRig{t: t, addr: addr, dial: dialer(addr), dir: "/coordrun/locks/sem-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		ctx: testkit.Context(t, 2*time.Minute), tokens: map[string][]int64{}}
}

// contender is one entered contender; held is closed once it holds, and
// it releases when told to.
type contender struct {
	e       engine.Entry
	held    chan struct{}
	release chan struct{}
	done    chan error
	freed   bool // release closed (the test's own note)
}

// free lets x release, once.
func (x *contender) free() {
	if !x.freed {
		x.freed = true
		close(x.release)
	}
}

func (r *semRig) enter(n int, host string) *contender {
	c := r.dial(r.t)
	e, err := engine.EnterSemaphore(r.ctx, c, r.dir, state.HolderInfo{Host: host, Holders: n})
	if err != nil {
		r.t.Fatalf("enter %s: %v", host, err)
	}
	x := &contender{e: e, held: make(chan struct{}), release: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		x.done <- r.hold(x)
	}()
	return x
}

func (r *semRig) hold(x *contender) error {
	defer x.e.Release(context.Background())
	err := x.e.Acquire(r.ctx, func(st engine.Status) {
		if st.Position == 0 && st.HolderNode == engine.SemaphoreHeld {
			r.mu.Lock()
			r.heads++
			r.mu.Unlock()
		}
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.holding++
	r.maxHeld = max(r.maxHeld, r.holding)
	slot := path.Dir(x.e.Node())
	r.tokens[slot] = append(r.tokens[slot], x.e.Token())
	r.mu.Unlock()
	close(x.held)
	<-x.release
	r.mu.Lock()
	r.holding--
	r.mu.Unlock()
	return nil
}

func (r *semRig) heldCount() (holding, heads int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holding, r.heads
}

// waitQuiet waits until holding contenders hold and the gate holds
// waiting (its head among them, watching for a release).
func (r *semRig) waitQuiet(c engine.Conn, holding, waiting, heads int) {
	r.t.Helper()
	testkit.WaitFor(r.t, 30*time.Second, fmt.Sprintf("%d holding, %d in the gate, %d heads", holding, waiting, heads), func() bool {
		h, hd := r.heldCount()
		q, err := c.List(r.ctx, path.Join(r.dir, engine.SemaphoreGate))
		return err == nil && h == holding && len(q.Contenders) == waiting && hd == heads
	})
}

func (r *semRig) notifications() int64 {
	out, err := client.FourLetter(r.ctx, r.addr, "mntr", nil)
	if err != nil {
		r.t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "\t"); ok && k == "coordrun_watch_notifications" {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	r.t.Fatalf("no coordrun_watch_notifications in mntr:\n%s", out)
	return 0
}

// At most N hold at once, N do, and a release lets exactly one more in;
// every holder's token is distinct and they rise per slot.
func TestSemaphoreAtMostN(t *testing.T) {
	const n, contenders = 3, 8
	r := newSemRig(t, "*")
	reader := r.dial(t)
	var all []*contender
	for i := range contenders {
		all = append(all, r.enter(n, "h"+strconv.Itoa(i)))
	}
	r.waitQuiet(reader, n, contenders-n, 1)
	released := 0
	for released < contenders {
		// Release one holder; exactly one waiter (if any) takes its place.
		for _, x := range all {
			select {
			case <-x.held:
			default:
				continue
			}
			if !x.freed {
				x.free()
				if err := testkit.Recv(t, x.done, 30*time.Second, "release"); err != nil {
					t.Fatal(err)
				}
				released++
				break
			}
		}
		left := contenders - released
		holding, waiting := min(n, left), max(left-n, 0)
		heads := 1 + min(released, contenders-n)
		if waiting == 0 {
			heads = contenders - n
		}
		r.waitQuiet(reader, holding, waiting, heads)
	}
	if r.maxHeld != n {
		t.Errorf("at most %d held at once, want %d", r.maxHeld, n)
	}
	seen := map[int64]bool{}
	for slot, toks := range r.tokens {
		for i, tok := range toks {
			if seen[tok] {
				t.Errorf("token %d given twice", tok)
			}
			seen[tok] = true
			if i > 0 && tok <= toks[i-1] {
				t.Errorf("%s: tokens %v do not rise", slot, toks)
			}
		}
	}
	if len(r.tokens) != n || len(seen) != contenders {
		t.Errorf("tokens per slot %v, want %d slots and %d tokens", r.tokens, n, contenders)
	}
}

// A release wakes the gate's head and, once it holds, its successor:
// two watch notifications, at 10 waiters as at 100.
func TestSemaphoreOneWakeUpPerRelease(t *testing.T) {
	const n, releases = 2, 4
	for _, waiters := range []int{10, 100} {
		t.Run(strconv.Itoa(waiters), func(t *testing.T) {
			r := newSemRig(t, "*")
			reader := r.dial(t)
			var holders []*contender
			for i := range n {
				holders = append(holders, r.enter(n, "holder"+strconv.Itoa(i)))
			}
			for _, x := range holders {
				testkit.Recv(t, x.held, 30*time.Second, "first holders")
			}
			var queue []*contender
			for i := range waiters {
				queue = append(queue, r.enter(n, "w"+strconv.Itoa(i)))
			}
			r.waitQuiet(reader, n, waiters, 1)
			before := r.notifications()
			for i := range releases {
				holders[i%n].free()
				testkit.Recv(t, holders[i%n].done, 30*time.Second, "release")
				testkit.Recv(t, queue[i].held, 30*time.Second, "the head takes the slot")
				holders[i%n] = queue[i]
				r.waitQuiet(reader, n, waiters-i-1, i+2)
			}
			got := r.notifications() - before
			t.Logf("%d waiters: %d watch notifications over %d releases", waiters, got, releases)
			if got != 2*releases {
				t.Errorf("%d waiters: %d watch notifications over %d releases, want %d (the head, then its successor)", waiters, got, releases, 2*releases)
			}
			// Let every one hold and go, in turn.
			for _, x := range append(holders, queue...) {
				x.free()
			}
			for _, x := range queue[releases:] {
				if err := testkit.Recv(t, x.done, 60*time.Second, "the rest hold in turn"); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// Contenders that disagree on N are refused, with both values: between
// two semaphores, and between a semaphore and the plain lock.
func TestSemaphoreHoldersMismatch(t *testing.T) {
	r := newSemRig(t)
	a := r.enter(3, "a")
	testkit.Recv(t, a.held, 30*time.Second, "a holds")

	c := r.dial(t)
	_, err := engine.EnterSemaphore(r.ctx, c, r.dir, state.HolderInfo{Host: "b", Holders: 2})
	var he *engine.HoldersError
	if !errors.As(err, &he) || he.Mine != 2 || he.Theirs != 3 || !errors.Is(err, engine.ErrHolders) {
		t.Fatalf("N=2 beside N=3: %v, want a HoldersError 2 vs 3", err)
	}
	if !strings.Contains(err.Error(), "--holders 2") || !strings.Contains(err.Error(), "asks for 3") {
		t.Errorf("message %q does not give both values", err)
	}
	if q, err := c.List(r.ctx, path.Join(r.dir, engine.SemaphoreGate)); err != nil || len(q.Contenders) != 0 {
		t.Errorf("the refused contender left %v (%v)", q.Contenders, err)
	}

	// The plain lock of the same name (N=1) is refused as it enters, and
	// leaves no entry.
	_, err = engine.EnterSemaphore(r.ctx, c, r.dir, state.HolderInfo{Host: "p"})
	if !errors.As(err, &he) || he.Mine != 1 || he.Theirs != 3 {
		t.Errorf("plain lock beside N=3: %v, want a HoldersError 1 vs 3", err)
	}
	if q, err := c.List(r.ctx, r.dir); err != nil || len(q.Contenders) != 0 {
		t.Errorf("the refused plain contender left %v (%v)", q.Contenders, err)
	}
	// And a semaphore contender finds a plain lock's entry (one made
	// before the semaphore's).
	p, err := c.Enter(r.ctx, r.dir, state.HolderInfo{Host: "p"})
	if err != nil {
		t.Fatal(err)
	}
	must(t, p.Acquire(r.ctx, nil))
	_, err = engine.EnterSemaphore(r.ctx, c, r.dir, state.HolderInfo{Host: "b", Holders: 3})
	if !errors.As(err, &he) || he.Mine != 3 || he.Theirs != 1 {
		t.Errorf("N=3 beside the plain lock: %v, want a HoldersError 3 vs 1", err)
	}
	must(t, p.Release(r.ctx))
	a.free()
	if err := testkit.Recv(t, a.done, 30*time.Second, "a releases"); err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
