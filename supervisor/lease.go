package supervisor

import (
	"sync"
	"time"

	"github.com/coordrun/coordrun/supervisor/engine"
)

// leaseFanout hands every new lease deadline of one client to any number
// of running jobs (a cron process may run several at once; the client
// publishes on a single channel).
//
// Safe for concurrent use.
type leaseFanout struct {
	mu   sync.Mutex                  // guards subs
	subs map[chan time.Time]struct{} // each subscriber's slot
	done chan struct{}               // closed once the relay has ended
}

// newLeaseFanout relays c's lease updates until c's session ends.
func newLeaseFanout(c engine.Session) *leaseFanout {
	f := &leaseFanout{subs: map[chan time.Time]struct{}{}, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for {
			select {
			case l := <-c.LeaseUpdates():
				f.publish(l)
			case <-c.Done():
				return
			}
		}
	}()
	return f
}

// wait returns once the relay has ended: after the session's end.
func (f *leaseFanout) wait() { <-f.done }

func (f *leaseFanout) publish(l time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.subs {
		// Keep only the newest deadline in each subscriber's slot.
		select {
		case <-ch:
		default:
		}
		ch <- l
	}
}

func (f *leaseFanout) subscribe() (<-chan time.Time, func()) {
	ch := make(chan time.Time, 1)
	f.mu.Lock()
	f.subs[ch] = struct{}{}
	f.mu.Unlock()
	return ch, func() {
		f.mu.Lock()
		delete(f.subs, ch)
		f.mu.Unlock()
	}
}
