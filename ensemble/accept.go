package ensemble

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Accepting on the client and the peer port. An accept error other than
// the listener's close is never the end of a port: running out of file
// descriptors (EMFILE, ENFILE), a connection reset before it was accepted
// (ECONNABORTED) or a kernel out of buffers all pass once the pressure
// does, and a member that stopped accepting for good would stay deaf until
// restarted. So the loop backs off and tries again, as net/http.Server
// does (5 ms doubling to 1 s), and says in Live that the port cannot
// accept while it does.

const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptState is what one port's accept loop tells the rest of the member.
type acceptState struct {
	errors atomic.Int64 // accept errors, every retry counted

	mu      sync.Mutex // guards failing, at and logged
	failing error      // the error of the episode in progress; nil while accepts succeed
	at      time.Time  // when the last accept failed
	logged  time.Time  // when an episode was last logged
	quiet   bool       // the episode in progress is not logged
}

// acceptErrorFresh is how long a failed accept counts against the port:
// longer than the longest pause between retries, so that a port that
// keeps failing is reported throughout, and short, so that a lone error
// (a client that reset its connection before it was accepted) on a port
// that then sees no client for hours does not make the member look dead
// to its watchdog.
const acceptErrorFresh = 2 * acceptBackoffMax

// err says why the port cannot accept at now, or nil.
func (s *acceptState) err(now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing == nil || now.Sub(s.at) > acceptErrorFresh {
		return nil
	}
	return s.failing
}

// fail records an accept error at now; true when it starts an episode
// to be logged. Descriptors freed and taken again make episodes flap:
// one is logged per refusalLogInterval, the rest only counted.
func (s *acceptState) fail(err error, now time.Time) bool {
	s.errors.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	first := s.failing == nil
	s.failing, s.at = err, now
	if !first {
		return false
	}
	s.quiet = now.Sub(s.logged) < refusalLogInterval
	if !s.quiet {
		s.logged = now
	}
	return !s.quiet
}

// recovered ends an episode; true when it was logged.
func (s *acceptState) recovered() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.failing != nil && !s.quiet
	s.failing = nil
	return was
}

// acceptLoop hands every connection ln accepts to handle, until ln is
// closed or done is. Accept errors are retried with a growing pause and
// logged once per episode (at its start and at its end), not per retry,
// and at most one episode a minute.
// port names it in the log: "client" or "peer".
func acceptLoop(port string, ln net.Listener, st *acceptState, done <-chan struct{}, log *slog.Logger, handle func(net.Conn)) {
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err == nil {
			if st.recovered() {
				log.Warn(port + " accept recovered")
			}
			delay = 0
			handle(nc)
			continue
		}
		select {
		case <-done:
			return
		default:
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			// A deadline set on the listener; nothing is wrong.
			continue
		}
		if st.fail(err, time.Now()) {
			log.Error(port+" accept failing; retrying with backoff", "err", err)
		}
		delay = nextAcceptDelay(delay)
		t := time.NewTimer(delay)
		select {
		case <-done:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// nextAcceptDelay is the pause after a failed accept, given the last one.
func nextAcceptDelay(d time.Duration) time.Duration {
	if d == 0 {
		return acceptBackoffMin
	}
	return min(2*d, acceptBackoffMax)
}
