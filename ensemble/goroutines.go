package ensemble

import (
	"sync"
	"sync/atomic"
)

// tracker starts a member's goroutines and waits for them, as
// hashicorp/raft's goFunc does: every goroutine of the member is started
// through one tracker, and Close returns only once all of them have ended.
// Unlike a WaitGroup's, its Wait may overlap with Go (a health check
// arriving while the member closes): Wait returns once none runs.
//
// A nil tracker starts goroutines untracked, for the pieces (a peer mux, a
// frame writer) that tests use on their own, with no member to wait.
type tracker struct {
	running atomic.Int64
	idle    broadcast // notified when running drops to zero
}

// Go runs f on a new goroutine.
func (t *tracker) Go(f func()) {
	if t == nil {
		go f()
		return
	}
	t.running.Add(1)
	go func() {
		defer t.done()
		f()
	}()
}

func (t *tracker) done() {
	if t.running.Add(-1) == 0 {
		t.idle.notify()
	}
}

// Wait blocks until no goroutine started through t runs.
func (t *tracker) Wait() {
	for {
		// The channel first: a goroutine ending between the check and
		// the wait notifies it.
		ch := t.idle.wait()
		if t.running.Load() == 0 {
			return
		}
		<-ch
	}
}

// kick wakes the goroutine that waits on ch, a channel of capacity one,
// without blocking: a wake-up already pending covers this one too.
func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// broadcast wakes every waiter at once: wait returns a channel that the
// next notify closes (and replaces). The zero value is ready for use.
type broadcast struct {
	mu sync.Mutex // guards ch (the channel itself is closed, never sent on)
	ch chan struct{}
}

// wait returns the channel the next notify closes. Callers take it before
// checking their condition, so a notify between check and wait is not lost.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// notify wakes everyone who took a channel from wait.
func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
