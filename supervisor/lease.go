package supervisor

import (
	"sync"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
)

// leaseFanout hands every new lease deadline of one client to any number
// of running jobs (a cron process may run several at once; the client
// publishes on a single channel).
//
// Safe for concurrent use.
type leaseFanout struct {
	mu   sync.Mutex
	subs map[chan time.Time]struct{}
}

func newLeaseFanout(c *client.Client) *leaseFanout {
	f := &leaseFanout{subs: map[chan time.Time]struct{}{}}
	go func() {
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
