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
	mu   sync.Mutex // guards ring, next, full, prev and at
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
	s.ring[s.next] = s.sample(now, c)
	s.prev, s.at = c, now
	s.next = (s.next + 1) % len(s.ring)
	s.full = s.full || s.next == 0
}

// sample is the sample of counters c read at now; s.mu is held.
func (s *samples) sample(now time.Time, c Counters) Sample {
	smp := Sample{At: now.UTC().Truncate(time.Millisecond), Sessions: c.Sessions, Znodes: c.Znodes, Watches: c.Watches}
	if !s.at.IsZero() {
		if dt := now.Sub(s.at).Seconds(); dt > 0 && c.Requests >= s.prev.Requests {
			smp.Rate = round2(float64(c.Requests-s.prev.Requests) / dt)
		}
		smp.P99MS = round2(quantile(0.99, s.prev.Latency, c.Latency) * 1000)
	}
	return smp
}

// all are the samples, oldest first, and then one of counters c read at
// now, so that a chart ends with the figures of the moment. Its rate and
// latency are over the time since the last sample; within the first
// second after it they are the last sample's, a shorter window being all
// noise.
func (s *samples) all(now time.Time, c Counters) []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Sample, 0, len(s.ring)+1)
	if s.full {
		out = append(out, s.ring[s.next:]...)
	}
	out = append(out, s.ring[:s.next]...)
	cur := s.sample(now, c)
	if len(out) > 0 && now.Sub(s.at) < time.Second {
		cur.Rate, cur.P99MS = out[len(out)-1].Rate, out[len(out)-1].P99MS
	}
	return append(out, cur)
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
