package ensemble

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// requestStats observes the request path. It is the one record of what
// clients sent and got: the four-letter words (srvr, stat, mntr) and the
// Prometheus metrics (metrics.go) both read it, and the connections update
// it as requests happen.
//
// Safe for concurrent use.
type requestStats struct {
	received      atomic.Int64 // requests read
	sent          atomic.Int64 // frames written: replies and notifications
	connections   atomic.Int64 // client connections open
	outstanding   atomic.Int64 // requests read but not yet answered
	notifications atomic.Int64 // watch events queued; the herd effect of a lock recipe shows here
	bytesIn       atomic.Int64 // client connections, framing included
	bytesOut      atomic.Int64

	// The latency of answered requests: min, sum and max for the
	// four-letter words (srst resets them), and a histogram by opcode for
	// Prometheus (which never resets).
	latMu    sync.Mutex // guards latMin, latMax, latSum and latCount
	latMin   time.Duration
	latMax   time.Duration
	latSum   time.Duration
	latCount int64
	latency  *prometheus.HistogramVec
	byOp     sync.Map // opcode → prometheus.Observer, resolved once per op

	stages   *prometheus.HistogramVec
	stageObs [numStages]prometheus.Observer
	notified prometheus.Histogram
	grouped  prometheus.Histogram // writes per group entry the leader proposed

	refused *prometheus.CounterVec // administrative requests refused, by what (adminid.go)
}

// The stages of a write, in the order it passes them. A write on the
// leader goes decode, propose, commit, apply, sequence, write; one on a
// follower goes decode, propose, forward (the leader records commit and
// apply in its own metrics), own_apply when its connection has watches,
// sequence, write.
const (
	stageDecode   = iota // frame read → request decoded and planned
	stagePropose         // planned → handed to raft, or to the leader's connection
	stageForward         // follower: handed to the leader → its reply read
	stageCommit          // leader: handed to raft → its apply begins (log, replication, commit)
	stageApply           // leader: apply of the entry's batch begins → this entry applied
	stageOwnApply        // follower: reply read → the write applied here
	stageSequence        // outcome known (and applied) → reply queued, in request order
	stageWrite           // reply queued → written to the socket (per write batch)
	numStages
)

var stageNames = [numStages]string{"decode", "propose", "forward", "commit", "apply", "own_apply", "sequence", "write"}

// Stage buckets reach down to a few µs: decoding and queueing take that.
var stageBuckets = []float64{.000005, .00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// Buckets span a local read (tens of µs) to a write stuck behind an
// election (seconds).
var requestBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

func newRequestStats() *requestStats {
	s := &requestStats{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordrun_request_duration_seconds",
			Help:    "Time from reading a client request to queueing its reply, by ZooKeeper op.",
			Buckets: requestBuckets,
		}, []string{"op"}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordrun_write_stage_seconds",
			Help:    "Time a write spends in each stage of its path on this member (write: per batch of frames written).",
			Buckets: stageBuckets,
		}, []string{"stage"}),
	}
	for i, name := range stageNames {
		s.stageObs[i] = s.stages.WithLabelValues(name)
	}
	s.refused = newRefusedCounter()
	s.notified = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "coordrun_notification_seconds",
		Help:    "Time from applying a change here to writing its watch notification to the client's socket (per batch written).",
		Buckets: stageBuckets,
	})
	s.grouped = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "coordrun_group_writes",
		Help:    "Writes per raft entry this member proposed as leader (group commit).",
		Buckets: prometheus.ExponentialBuckets(1, 2, zxidShift+1),
	})
	return s
}

// stage records the time one write spent in stage i. A negative time (the
// stage was over before it could be measured) counts as zero.
func (s *requestStats) stage(i int, d time.Duration) {
	s.stageObs[i].Observe(max(d, 0).Seconds())
}

// observe records one answered request: its opcode and the time from
// reading it to queueing its reply.
func (s *requestStats) observe(op int32, d time.Duration) {
	s.latMu.Lock()
	if s.latCount == 0 || d < s.latMin {
		s.latMin = d
	}
	if d > s.latMax {
		s.latMax = d
	}
	s.latSum += d
	s.latCount++
	s.latMu.Unlock()
	o, ok := s.byOp.Load(op)
	if !ok {
		o, _ = s.byOp.LoadOrStore(op, s.latency.WithLabelValues(wire.OpName(op)))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

// latencyMs returns min/avg/max in milliseconds, as ZooKeeper reports them.
func (s *requestStats) latencyMs() (min, avg, max float64) {
	s.latMu.Lock()
	defer s.latMu.Unlock()
	if s.latCount == 0 {
		return 0, 0, 0
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return ms(s.latMin), ms(s.latSum) / float64(s.latCount), ms(s.latMax)
}

// reset is srst: the packet counts and latencies the four-letter words
// show start again. Prometheus counters never go back.
func (s *requestStats) reset() {
	s.latMu.Lock()
	s.latMin, s.latMax, s.latSum, s.latCount = 0, 0, 0, 0
	s.latMu.Unlock()
	s.received.Store(0)
	s.sent.Store(0)
}
