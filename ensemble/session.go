package ensemble

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
)

// sessionTracker keeps the expiry deadline of every live session. Every
// member mirrors the set of sessions from the replicated state, but only
// the leader's deadlines mean anything: only the leader expires sessions,
// and a member that becomes leader first grants every session a fresh full
// timeout (it cannot know how recently the old leader heard from them).
//
// Safe for concurrent use.
type sessionTracker struct {
	mu       sync.Mutex // guards sessions, the trackedSessions in it, next and scans
	sessions map[int64]*trackedSession
	now      func() time.Time
	// next is a lower bound of every deadline not yet expiring (zero: not
	// known): expired skips its scan until then. The expire loop looks
	// every 25 ms, and a scan of 50,000 sessions under mu holds up every
	// touch on the leader meanwhile; deadlines only move later between
	// scans, except where a session is added or unmarked, which lower it.
	next  time.Time
	scans int // full scans by expired, for tests
}

type trackedSession struct {
	timeout  time.Duration
	deadline time.Time
	expiring bool // an expiry has been proposed
}

func newSessionTracker(now func() time.Time) *sessionTracker {
	return &sessionTracker{sessions: map[int64]*trackedSession{}, now: now}
}

func (t *sessionTracker) add(id int64, timeout time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.now().Add(timeout)
	t.sessions[id] = &trackedSession{timeout: timeout, deadline: d}
	t.lower(d)
}

// lower makes next no later than d; the caller holds mu.
func (t *sessionTracker) lower(d time.Time) {
	if !t.next.IsZero() && d.Before(t.next) {
		t.next = d
	}
}

func (t *sessionTracker) remove(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.sessions, id)
}

// touch records that the session was heard from now. It reports whether
// the session is alive: false for an unknown session and for one whose
// expiry is already under way, which no late packet may revive.
func (t *sessionTracker) touch(id int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[id]
	if s == nil || s.expiring {
		return false
	}
	if d := t.now().Add(s.timeout); d.After(s.deadline) {
		s.deadline = d
	}
	return true
}

// refreshAll gives every session a full timeout from now: a new leader's
// grace.
func (t *sessionTracker) refreshAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for _, s := range t.sessions {
		s.deadline = now.Add(s.timeout)
		s.expiring = false
	}
	t.next = time.Time{}
}

// reset replaces the tracked set, after a snapshot restore.
func (t *sessionTracker) reset(ids map[int64]time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.sessions = make(map[int64]*trackedSession, len(ids))
	for id, to := range ids {
		t.sessions[id] = &trackedSession{timeout: to, deadline: now.Add(to)}
	}
	t.next = time.Time{}
}

// expired returns sessions past their deadline that have no expiry
// proposed yet, and marks them as expiring.
func (t *sessionTracker) expired() []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if !t.next.IsZero() && !now.After(t.next) {
		return nil
	}
	t.scans++
	var out []int64
	var next time.Time
	for id, s := range t.sessions {
		switch {
		case s.expiring:
		case now.After(s.deadline):
			s.expiring = true
			out = append(out, id)
		case next.IsZero() || s.deadline.Before(next):
			next = s.deadline
		}
	}
	if next.IsZero() {
		// Nothing left to wait for: a session added later lowers it
		// from a distant bound.
		next = now.Add(time.Hour)
	}
	t.next = next
	return out
}

// stillExpired reports whether the session is still past its deadline; a
// touch may have arrived while the leader confirmed its leadership.
func (t *sessionTracker) stillExpired(id int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[id]
	if s == nil {
		return false
	}
	if !t.now().After(s.deadline) {
		s.expiring = false
		t.lower(s.deadline)
		return false
	}
	return true
}

// silence is how long the session has not been heard from, and its
// timeout; ok is false for a session not tracked. It means something on
// the leader only.
func (t *sessionTracker) silence(id int64) (silent, timeout time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[id]
	if s == nil {
		return 0, 0, false
	}
	return max(t.now().Sub(s.deadline.Add(-s.timeout)), 0), s.timeout, true
}

func (t *sessionTracker) unmarkExpiring(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.sessions[id]; s != nil {
		s.expiring = false
		t.lower(s.deadline)
	}
}

func (t *sessionTracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions)
}

// livenessRelay carries session liveness from a follower to the leader.
// Sessions heard from are collected into a batch; one batch is in flight at
// a time, and a reply to a client may only go out once the batch holding
// its packet was acknowledged by the leader. That makes every reply a valid
// lease proof: the leader, which alone expires sessions, learned of the
// session at or after the packet arrived. A member cut off from the leader
// gets no acknowledgements and so stops extending leases.
//
// Safe for concurrent use.
type livenessRelay struct {
	// send delivers a batch to the leader and returns the sessions it
	// does not consider alive.
	send func(ctx context.Context, ids []int64) (dead []int64, err error)

	mu      sync.Mutex // guards pending, gen, acked and dead
	pending map[int64]struct{}
	gen     uint64    // generation of the batch now being collected
	acked   uint64    // highest generation the leader acknowledged
	acks    broadcast // notified, under mu, whenever acked advances
	kick    chan struct{}
	dead    map[int64]struct{} // sessions the leader refused
}

// errSessionGone: the leader does not know the session (expired or
// expiring); the member must not answer for it.
var errSessionGone = errors.New("session unknown to the leader")

func newLivenessRelay(send func(ctx context.Context, ids []int64) ([]int64, error)) *livenessRelay {
	return &livenessRelay{
		send:    send,
		dead:    map[int64]struct{}{},
		pending: map[int64]struct{}{},
		gen:     1,
		kick:    make(chan struct{}, 1),
	}
}

// note records that a session was heard from and returns the generation
// whose acknowledgement proves it to the leader.
func (r *livenessRelay) note(id int64) uint64 {
	r.mu.Lock()
	r.pending[id] = struct{}{}
	g := r.gen
	r.mu.Unlock()
	kick(r.kick)
	return g
}

// wait blocks until generation g has been acknowledged, and fails with
// errSessionGone if the leader refused session id.
func (r *livenessRelay) wait(ctx context.Context, g uint64, id int64) error {
	for {
		r.mu.Lock()
		if _, gone := r.dead[id]; gone {
			r.mu.Unlock()
			return errSessionGone
		}
		if r.acked >= g {
			r.mu.Unlock()
			return nil
		}
		ch := r.acks.wait()
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// run sends batches until ctx ends. A failed batch is retried with the
// sessions noted since, under a newer generation number, so waiters of the
// failed one are released only by a later success.
func (r *livenessRelay) run(ctx context.Context, retry time.Duration) {
	var carry []int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		}
		for {
			r.mu.Lock()
			// A failed batch's sessions go out again, once each.
			for _, id := range carry {
				r.pending[id] = struct{}{}
			}
			ids := make([]int64, 0, len(r.pending))
			for id := range r.pending {
				ids = append(ids, id)
			}
			clear(r.pending)
			g := r.gen
			r.gen++
			r.mu.Unlock()
			if len(ids) == 0 {
				break
			}
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			dead, err := r.send(sctx, ids)
			cancel()
			if err != nil {
				carry = ids
				select {
				case <-ctx.Done():
					return
				case <-time.After(retry):
				}
				continue
			}
			carry = nil
			r.mu.Lock()
			if len(r.dead) > 100000 {
				// Ids are never reused; old entries only guard
				// connections long closed.
				clear(r.dead)
			}
			for _, id := range dead {
				r.dead[id] = struct{}{}
			}
			if g > r.acked {
				r.acked = g
			}
			r.acks.notify()
			more := len(r.pending) > 0
			r.mu.Unlock()
			if !more {
				break
			}
		}
	}
}

// expireLoop runs on every member but acts only while it leads: it ends
// the sessions whose deadline passed, after confirming with a quorum that
// it still leads.
func (m *Member) expireLoop() {
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	wasLeader := false
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		leader := m.IsLeader()
		if leader && !wasLeader {
			m.track.refreshAll()
		}
		wasLeader = leader
		if !leader {
			continue
		}
		ids := m.track.expired()
		if len(ids) == 0 {
			continue
		}
		// Confirm leadership with a quorum before ending sessions: a
		// deposed leader must not expire a session its successor keeps.
		if err := m.verifyLeader(); err != nil {
			for _, id := range ids {
				m.track.unmarkExpiring(id)
			}
			continue
		}
		for _, id := range ids {
			if !m.track.stillExpired(id) {
				continue
			}
			m.log.Info("session expired", "session", fmt.Sprintf("0x%x", id))
			m.tr.Go(func() {
				txn := &tree.Txn{Kind: tree.TxnCloseSession, Session: id}
				if _, err := m.proposeLocal(txn); err != nil {
					m.track.unmarkExpiring(id)
				}
			})
		}
	}
}

// touchAll records liveness of sessions as the leader and returns those it
// does not consider alive.
func (m *Member) touchAll(ids []int64) []int64 {
	var dead []int64
	for _, id := range ids {
		if !m.track.touch(id) {
			dead = append(dead, id)
		}
	}
	return dead
}

// noteLive records that a client's session was heard from now and returns
// the relay generation a reply must wait for (0: no wait, this member
// leads and recorded it itself). A session the leader holds dead goes
// through the relay too, whose wait then reports it gone.
func (m *Member) noteLive(id int64) uint64 {
	if m.IsLeader() && m.track.touch(id) {
		return 0
	}
	return m.relay.note(id)
}

// waitLive waits until the leader acknowledged liveness generation gen,
// and fails with errSessionGone if it holds session id dead.
func (m *Member) waitLive(ctx context.Context, gen uint64, id int64) error {
	return m.relay.wait(ctx, gen, id)
}

// verifyLeader confirms this member's leadership with a quorum. raft
// queues the request in a buffer its main loop reads; one queued just as
// raft shuts down is never answered, so the wait ends with the member too
// (Close cancels m.ctx before it shuts raft down). The goroutine left
// waiting on such a request is the only one a Close can leave behind.
func (m *Member) verifyLeader() error {
	return m.await(m.raft.VerifyLeader())
}
