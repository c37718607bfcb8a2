package supervisor

import (
	"context"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
	"time"
)

// Every signal that reaches the pump is seen by exactly one phase: the
// waiting phase (which leaves the queue on a terminating signal) or the
// job's (which forwards it), however the signal and the end of the wait
// interleave. The trials race a TERM against the moment the lock is
// acquired, as a run does, with the real waiting-phase canceller.
func TestSignalPumpLosesNothing(t *testing.T) {
	const trials = 3000
	var left, forwarded int
	for i := 0; i < trials; i++ {
		in := make(chan os.Signal) // unbuffered: the send completes only once the pump took it
		p := newSignalPump(in)
		sent := make(chan struct{})
		go func() {
			spin(rand.IntN(200))
			in <- syscall.SIGTERM
			close(sent)
		}()

		// Waiting: the canceller of waitForLock, and an acquisition at a
		// random moment.
		wctx, cancel := context.WithCancel(context.Background())
		go p.cancelOnStop(wctx, cancel)
		acquired := make(chan struct{})
		go func() { spin(rand.IntN(200)); close(acquired) }()
		select {
		case <-acquired:
		case <-wctx.Done():
		}
		cancel()

		// The commit point, then the job's forwarding loop.
		if _, ok := p.stopSignal(); ok {
			left++
			<-sent
			p.close()
			continue
		}
		<-sent
		got := false
		deadline := time.After(time.Second)
		for !got {
			ch := p.changed()
			for _, s := range p.take() {
				got = got || s == syscall.SIGTERM
			}
			if got {
				break
			}
			select {
			case <-ch:
			case <-deadline:
				t.Fatalf("trial %d: the TERM was taken by the pump but reached neither phase", i)
			}
		}
		forwarded++
		p.close()
	}
	t.Logf("%d trials: the waiting phase saw the TERM %d times, the job %d times, none lost", trials, left, forwarded)
	if left == 0 || forwarded == 0 {
		t.Errorf("the trials never raced both ways (left %d, forwarded %d): the test shows nothing", left, forwarded)
	}
}

// spin burns about n iterations without sleeping, to vary interleavings
// at a finer grain than the scheduler's timers.
func spin(n int) {
	x := 0
	for i := 0; i < n*50; i++ {
		x += i
	}
	_ = x
}

// take removes what it returns; stopSignal only looks.
func TestSignalPumpQueue(t *testing.T) {
	in := make(chan os.Signal)
	p := newSignalPump(in)
	defer p.close()
	ch := p.changed()
	in <- syscall.SIGUSR1
	<-ch
	if _, ok := p.stopSignal(); ok {
		t.Fatal("USR1 counted as a stop signal")
	}
	ch = p.changed()
	in <- syscall.SIGHUP
	<-ch
	if s, ok := p.stopSignal(); !ok || s != syscall.SIGHUP {
		t.Fatalf("stopSignal = %v %v, want HUP", s, ok)
	}
	if s, ok := p.stopSignal(); !ok || s != syscall.SIGHUP {
		t.Fatalf("stopSignal consumed the signal: second call %v %v", s, ok)
	}
	got := p.take()
	if len(got) != 2 || got[0] != syscall.SIGUSR1 || got[1] != syscall.SIGHUP {
		t.Fatalf("take = %v, want [USR1 HUP] in order", got)
	}
	if rest := p.take(); len(rest) != 0 {
		t.Fatalf("take after take = %v", rest)
	}
}
