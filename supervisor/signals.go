package supervisor

import (
	"context"
	"os"
	"sync"
	"syscall"
)

// signalPump is the one reader of a supervisor's signal channel. It
// queues every signal until a phase takes it: while waiting for the lock a
// terminating signal means leave the queue, once the job runs every signal
// is forwarded to it. With two readers (one per phase) a signal taken by
// the waiting phase's reader just as the lock was acquired would never
// reach the job.
//
// Safe for concurrent use.
type signalPump struct {
	mu      sync.Mutex // guards pending and notify
	pending []os.Signal
	notify  chan struct{} // closed, and replaced, when a signal is queued
	done    chan struct{} // closed by close: the pump ends
	pumped  chan struct{} // closed once the pump has ended
}

func newSignalPump(in <-chan os.Signal) *signalPump {
	p := &signalPump{notify: make(chan struct{}), done: make(chan struct{}), pumped: make(chan struct{})}
	if in == nil {
		close(p.pumped)
		return p
	}
	go p.pump(in)
	return p
}

func (p *signalPump) pump(in <-chan os.Signal) {
	defer close(p.pumped)
	for {
		select {
		case s := <-in:
			p.mu.Lock()
			p.pending = append(p.pending, s)
			close(p.notify)
			p.notify = make(chan struct{})
			p.mu.Unlock()
		case <-p.done:
			return
		}
	}
}

// changed is closed when the next signal is queued. Read it before
// looking at the queue, so that a signal queued in between is not missed.
func (p *signalPump) changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.notify
}

// take returns and removes every queued signal.
func (p *signalPump) take() []os.Signal {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.pending
	p.pending = nil
	return out
}

// stopSignal reports the first queued signal that asks coordrun to end
// (INT, TERM, HUP, QUIT), leaving the queue as it is.
func (p *signalPump) stopSignal() (syscall.Signal, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.pending {
		if sig, ok := s.(syscall.Signal); ok && isStopSignal(sig) {
			return sig, true
		}
	}
	return 0, false
}

func isStopSignal(s syscall.Signal) bool {
	return s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGHUP || s == syscall.SIGQUIT
}

// close ends the pump and waits until it has.
func (p *signalPump) close() {
	close(p.done)
	<-p.pumped
}

// cancelOnStop calls cancel once a terminating signal is queued, leaving
// it queued, or returns when ctx ends.
func (p *signalPump) cancelOnStop(ctx context.Context, cancel context.CancelFunc) {
	for {
		ch := p.changed()
		if _, ok := p.stopSignal(); ok {
			cancel()
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// untilStop returns a context that ends when a terminating signal is
// queued (the signal stays queued), and the func that ends the watch and
// waits for it. Every phase before the job runs is under it: a call to the
// store that never returns (every member gone while the client reconnects
// without end) must not make coordrun deaf to TERM.
func (p *signalPump) untilStop(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); p.cancelOnStop(ctx, cancel) }()
	return ctx, func() { cancel(); <-watched }
}
