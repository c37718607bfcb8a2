package ensemble

import (
	"math"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// The status page's latency histogram is the request histogram summed
// over every op: cumulative, ending in +Inf with every request.
func TestPageLatencyBuckets(t *testing.T) {
	s := newRequestStats()
	for range 3 {
		s.observe(wire.OpGetData, 2*time.Millisecond)
	}
	s.observe(wire.OpCreate, 20*time.Millisecond)
	if n := latencyCount(s.latency); n != 4 {
		t.Errorf("%d requests counted, want 4", n)
	}
	b := latencyBuckets(s.latency)
	if len(b) != len(requestBuckets)+1 || !math.IsInf(b[len(b)-1].Le, 1) || b[len(b)-1].Count != 4 {
		t.Fatalf("buckets %+v", b)
	}
	for i, x := range b {
		switch {
		case i > 0 && x.Count < b[i-1].Count:
			t.Errorf("bucket %d (%v) below the one before: %+v", i, x.Le, b)
		case x.Le == 0.0025 && x.Count != 3, x.Le == 0.025 && x.Count != 4:
			t.Errorf("at most %vs: %d requests", x.Le, x.Count)
		}
	}
}
