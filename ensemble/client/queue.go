package client

import "sync"

// outbox holds requests queued by callers and not yet written. The writer
// of the current connection drains it; while no connection is up, requests
// wait here. Once shut, it refuses new requests with the error given.
//
// Safe for concurrent use.
type outbox struct {
	mu   sync.Mutex // guards q and err
	q    []*request
	kick chan struct{} // capacity 1: "something was queued"
	err  error
}

func newOutbox() *outbox { return &outbox{kick: make(chan struct{}, 1)} }

func (o *outbox) push(r *request) error { return o.pushLast(r, nil) }

// pushLast queues r and then, unless refuse is nil, refuses everything
// after it with refuse.
func (o *outbox) pushLast(r *request, refuse error) error {
	o.mu.Lock()
	if o.err != nil {
		err := o.err
		o.mu.Unlock()
		return err
	}
	o.q = append(o.q, r)
	o.err = refuse
	o.mu.Unlock()
	o.signal()
	return nil
}

// refuse makes later pushes fail with err, keeping what is queued.
func (o *outbox) refuse(err error) {
	o.mu.Lock()
	if o.err == nil {
		o.err = err
	}
	o.mu.Unlock()
}

func (o *outbox) signal() {
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// take removes and returns everything queued.
func (o *outbox) take() []*request {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.q
	o.q = nil
	return q
}

// requeue puts requests that were taken but not written back in front, in
// their order.
func (o *outbox) requeue(rs []*request) {
	if len(rs) == 0 {
		return
	}
	o.mu.Lock()
	o.q = append(append([]*request(nil), rs...), o.q...)
	o.mu.Unlock()
	o.signal()
}

// shut refuses further requests with err and returns what was queued.
func (o *outbox) shut(err error) []*request {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.err = err
	q := o.q
	o.q = nil
	return q
}

// eventQueue delivers StateEvents without ever blocking the client: events
// go into a buffered channel, and when the reader falls behind the buffer,
// into an unbounded overflow that a helper goroutine feeds into the channel
// as the reader catches up (the goroutine ends when the overflow is empty).
// After the final event the channel is closed once everything before it
// was delivered.
//
// Safe for concurrent use.
type eventQueue struct {
	mu       sync.Mutex // guards overflow, pumping and last, and orders the sends on ch
	ch       chan StateEvent
	overflow []StateEvent
	pumping  bool
	last     bool
}

const eventBuffer = 64

func newEventQueue() *eventQueue { return &eventQueue{ch: make(chan StateEvent, eventBuffer)} }

func (q *eventQueue) push(ev StateEvent, final bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.last {
		return
	}
	q.last = final
	if !q.pumping {
		select {
		case q.ch <- ev:
			if final {
				close(q.ch)
			}
			return
		default:
		}
		q.pumping = true
		go q.pump()
	}
	q.overflow = append(q.overflow, ev)
}

func (q *eventQueue) pump() {
	for {
		q.mu.Lock()
		if len(q.overflow) == 0 {
			q.pumping = false
			if q.last {
				close(q.ch)
			}
			q.mu.Unlock()
			return
		}
		ev := q.overflow[0]
		q.mu.Unlock()
		// Only the pump sends while pumping is set.
		q.ch <- ev
		q.mu.Lock()
		q.overflow = q.overflow[1:]
		q.mu.Unlock()
	}
}
