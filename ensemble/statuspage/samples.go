package statuspage

import (
	"math"
	"sync"
	"time"
)

// Sample is one point of the charts: the serving member's figures at At,
// and its request rate and p99 latency since the sample before.
type Sample struct {
	At       time.Time `json:"at"`
	Sessions int       `json:"sessions"`
	Znodes   int       `json:"znodes"`
	Watches  int       `json:"watches"`
	Rate     float64   `json:"rate"`   // requests per second
	P99MS    float64   `json:"p99_ms"` // 0 without requests
}

// samples is a ring of the latest Samples.
//
// Safe for concurrent use.
type samples struct {
	mu   sync.Mutex
	ring []Sample
	next int
	full bool
	prev Counters
	at   time.Time // of prev; zero before the first
}

func newSamples(n int) *samples { return &samples{ring: make([]Sample, n)} }

// add turns counters read at now into a sample.
func (s *samples) add(now time.Time, c Counters) {
	s.mu.Lock()
	defer s.mu.Unlock()
	smp := Sample{At: now.UTC().Truncate(time.Millisecond), Sessions: c.Sessions, Znodes: c.Znodes, Watches: c.Watches}
	if !s.at.IsZero() {
		if dt := now.Sub(s.at).Seconds(); dt > 0 && c.Requests >= s.prev.Requests {
			smp.Rate = round2(float64(c.Requests-s.prev.Requests) / dt)
		}
		smp.P99MS = round2(quantile(0.99, s.prev.Latency, c.Latency) * 1000)
	}
	s.prev, s.at = c, now
	s.ring[s.next] = smp
	s.next = (s.next + 1) % len(s.ring)
	s.full = s.full || s.next == 0
}

// all are the samples, oldest first.
func (s *samples) all() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.full {
		return append([]Sample{}, s.ring[:s.next]...)
	}
	return append(append([]Sample{}, s.ring[s.next:]...), s.ring[:s.next]...)
}

// quantile estimates the q-quantile, in seconds, of the requests counted
// between two readings of a cumulative histogram, interpolating linearly
// inside the bucket it falls in (as Prometheus's histogram_quantile
// does); 0 when none were counted or the buckets do not match.
func quantile(q float64, before, after []Bucket) float64 {
	if len(after) == 0 || (len(before) != 0 && len(before) != len(after)) {
		return 0
	}
	delta := func(i int) float64 {
		c := after[i].Count
		if len(before) != 0 {
			if before[i].Count > c {
				return 0
			}
			c -= before[i].Count
		}
		return float64(c)
	}
	total := delta(len(after) - 1)
	if total == 0 {
		return 0
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i := range after {
		n := delta(i)
		if n >= rank {
			upper := after[i].Le
			if math.IsInf(upper, 1) {
				return lower
			}
			if n == below {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/(n-below)
		}
		lower, below = after[i].Le, n
	}
	return lower
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }
