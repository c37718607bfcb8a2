package enginetest

import (
	"context"
	"errors"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// semaphore: engine.EnterSemaphore on this engine: of five contenders of
// N = 2, two hold and the rest wait in the gate; each release lets one
// more in; tokens are distinct and rise per slot; ListSemaphore shows the
// holders and the line.
func semaphore(t *testing.T, dial Dial, dir string) {
	const n, contenders = 2, 5
	ctx, sem := ctxFor(t), path.Join(dir, "sem")
	reader := dial(t)
	type held struct {
		e       engine.Entry
		release chan struct{}
	}
	var mu sync.Mutex // guards holding and most
	holding, most := 0, 0
	acquired := make(chan held, contenders)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range contenders {
		c := dial(t)
		e, err := engine.EnterSemaphore(ctx, c, sem, state.HolderInfo{Host: string(rune('a' + i)), Holders: n})
		must(t, err, "enter")
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer e.Release(context.WithoutCancel(ctx))
			if err := e.Acquire(ctx, nil); err != nil {
				return
			}
			mu.Lock()
			holding++
			most = max(most, holding)
			mu.Unlock()
			h := held{e: e, release: make(chan struct{})}
			acquired <- h
			<-h.release
			mu.Lock()
			holding--
			mu.Unlock()
		}()
	}
	recv := func() held {
		t.Helper()
		select {
		case h := <-acquired:
			return h
		case <-time.After(20 * time.Second):
			t.Fatal("no contender took a free slot")
			return held{}
		}
	}
	var order []held
	for range n {
		order = append(order, recv())
	}
	waitFor(t, "three in the gate", func() bool {
		q, ok, err := engine.ListSemaphore(ctx, reader, sem)
		return err == nil && ok && len(q.Holding) == n && len(q.Waiting) == contenders-n && q.Holders == n
	})
	for i := 0; i < contenders; i++ {
		close(order[i].release)
		if len(order) < contenders {
			order = append(order, recv())
		}
	}
	wg.Wait()
	if most != n {
		t.Errorf("at most %d held at once, want %d", most, n)
	}
	seen := map[int64]bool{}
	last := map[string]int64{}
	for _, h := range order {
		tok, slot := h.e.Token(), path.Dir(h.e.Node())
		if seen[tok] {
			t.Errorf("token %d given twice", tok)
		}
		seen[tok] = true
		if tok <= last[slot] {
			t.Errorf("%s: token %d after %d", slot, tok, last[slot])
		}
		last[slot] = tok
	}

	// A contender asking for another N is refused as it enters.
	_, err := engine.EnterSemaphore(ctx, reader, sem, state.HolderInfo{Host: "x", Holders: 3})
	if err != nil {
		t.Errorf("N=3 on a semaphore nobody uses: %v", err)
	}
	_, err = engine.EnterSemaphore(ctx, dial(t), sem, state.HolderInfo{Host: "y", Holders: 2})
	var he *engine.HoldersError
	if !errors.As(err, &he) || he.Mine != 2 || he.Theirs != 3 {
		t.Errorf("N=2 beside N=3: %v, want a HoldersError 2 vs 3", err)
	}
	_, err = engine.EnterSemaphore(ctx, dial(t), sem, state.HolderInfo{Host: "z"})
	if !errors.As(err, &he) || he.Mine != 1 || he.Theirs != 3 {
		t.Errorf("a plain lock beside N=3: %v, want a HoldersError 1 vs 3", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}
