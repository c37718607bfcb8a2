package client

import (
	"sync"
	"time"
)

// leaseKeeper holds the session's lease deadline: the latest send stamp of
// an answered packet plus the timeout the session had then. It only ever
// grows, and every increase is published on a capacity-1 channel that
// keeps only the newest value.
//
// Safe for concurrent use.
type leaseKeeper struct {
	mu      sync.Mutex // guards until, and orders the sends on ch and the calls of onProof
	until   time.Time
	ch      chan time.Time
	onProof func(sent time.Time, timeout time.Duration, lease time.Time)
}

func newLeaseKeeper(onProof func(time.Time, time.Duration, time.Time)) *leaseKeeper {
	return &leaseKeeper{ch: make(chan time.Time, 1), onProof: onProof}
}

// prove records that a packet stamped sent was answered while the session
// had the given timeout. It reports the lease afterwards and whether it
// grew.
func (l *leaseKeeper) prove(sent time.Time, timeout time.Duration) (time.Time, bool) {
	candidate := sent.Add(timeout)
	l.mu.Lock()
	defer l.mu.Unlock()
	grew := candidate.After(l.until)
	if grew {
		l.until = candidate
		// Only this method sends, and only under mu, so after the
		// drain the send cannot block.
		select {
		case <-l.ch:
		default:
		}
		l.ch <- candidate
	}
	if l.onProof != nil {
		l.onProof(sent, timeout, l.until)
	}
	return l.until, grew
}

func (l *leaseKeeper) get() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// gate freezes the reader, the pinger and the stall check of a client in
// tests, to let the server expire a session that is otherwise healthy. The zero value is
// open. Safe for concurrent use.
type gate struct {
	mu sync.Mutex    // guards ch
	ch chan struct{} // non-nil while frozen; closed on thaw
}

func (g *gate) freeze() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
}

func (g *gate) thaw() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
}

func (g *gate) frozen() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ch != nil
}

// thawedC is closed when a frozen gate thaws; nil while the gate is open.
func (g *gate) thawedC() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ch
}

// wait blocks while the gate is frozen, or until abort is closed.
func (g *gate) wait(abort <-chan struct{}) {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-abort:
	}
}
