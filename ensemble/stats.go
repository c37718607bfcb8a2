package ensemble

import (
	"sync"
	"sync/atomic"
	"time"
)

// serverStats are the counters behind the four-letter words.
type serverStats struct {
	received    atomic.Int64
	sent        atomic.Int64
	connections atomic.Int64
	reads       atomic.Int64
	writes      atomic.Int64
	// notifications counts watch events sent to clients; the herd
	// effect of a lock recipe shows here.
	notifications atomic.Int64

	latMu    sync.Mutex
	latMin   time.Duration
	latMax   time.Duration
	latSum   time.Duration
	latCount int64
}

func (s *serverStats) observe(d time.Duration) {
	s.latMu.Lock()
	defer s.latMu.Unlock()
	if s.latCount == 0 || d < s.latMin {
		s.latMin = d
	}
	if d > s.latMax {
		s.latMax = d
	}
	s.latSum += d
	s.latCount++
}

// latency returns min/avg/max in milliseconds, as ZooKeeper reports them.
func (s *serverStats) latency() (min, avg, max float64) {
	s.latMu.Lock()
	defer s.latMu.Unlock()
	if s.latCount == 0 {
		return 0, 0, 0
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return ms(s.latMin), ms(s.latSum) / float64(s.latCount), ms(s.latMax)
}

func (s *serverStats) reset() {
	s.latMu.Lock()
	s.latMin, s.latMax, s.latSum, s.latCount = 0, 0, 0, 0
	s.latMu.Unlock()
	s.received.Store(0)
	s.sent.Store(0)
}
