package ensemble

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics is a member's Prometheus instrumentation.
//
// Every member has its own registry rather than the global default one, so
// that several members can run in one process (the tests do) and each
// admin listener reports only its own member. Whatever the member already
// knows (tree sizes, sessions, raft indexes) is read at scrape time by
// GaugeFuncs; nothing polls in the background. Only what happens in the
// request path is recorded as it happens: latencies, bytes, the number of
// requests in flight.
//
// Safe for concurrent use.
type metrics struct {
	reg *prometheus.Registry

	latency *prometheus.HistogramVec // by op, from request read to reply queued
	store   prometheus.Histogram     // raft log appends

	// outstanding counts requests read from a client but not yet answered,
	// over all connections.
	outstanding atomic.Int64
	bytesIn     atomic.Int64 // client connections, framing included
	bytesOut    atomic.Int64
}

// Buckets span a local read (tens of µs) to a write stuck behind an
// election (seconds).
var requestBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// A log append is one bolt transaction and its fsync: tens of µs on a
// fast SSD with a write cache, tens of ms on a busy disk.
var storeBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// newMetrics builds m's registry. The gauge functions read m.raft and the
// tree; they run only when the registry is gathered, which cannot happen
// before Start has finished setting m up.
func newMetrics(m *Member) *metrics {
	x := &metrics{reg: prometheus.NewRegistry()}
	x.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "coordrun_request_duration_seconds",
		Help:    "Time from reading a client request to queueing its reply, by ZooKeeper op.",
		Buckets: requestBuckets,
	}, []string{"op"})
	x.store = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "coordrun_raft_log_store_duration_seconds",
		Help:    "Time to append entries to the raft log (one bolt transaction including its fsync).",
		Buckets: storeBuckets,
	})
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	nodes := func() float64 { n, _, _ := m.counts(); return float64(n) }
	ephemerals := func() float64 { _, e, _ := m.counts(); return float64(e) }
	dataSize := func() float64 { _, _, s := m.counts(); return float64(s) }
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "coordrun_member_info",
		Help:        "Always 1; labels name the member and the version it runs.",
		ConstLabels: prometheus.Labels{"id": m.cfg.ID, "version": Version},
	})
	info.Set(1)
	x.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info,
		x.latency,
		x.store,
		gauge("coordrun_outstanding_requests", "Client requests read but not yet answered.",
			func() float64 { return float64(x.outstanding.Load()) }),
		gauge("coordrun_client_connections", "Open client connections.",
			func() float64 { return float64(m.stats.connections.Load()) }),
		gauge("coordrun_sessions", "Live sessions in the ensemble.",
			func() float64 { return float64(m.track.count()) }),
		gauge("coordrun_znodes", "Znodes in the tree.", nodes),
		gauge("coordrun_ephemerals", "Ephemeral znodes in the tree.", ephemerals),
		gauge("coordrun_znode_data_bytes", "Approximate size of the tree's paths and data.", dataSize),
		gauge("coordrun_watches", "Watches registered on this member.",
			func() float64 { return float64(m.watch.count()) }),
		gauge("coordrun_raft_term", "Current raft term.",
			func() float64 { return float64(m.raft.CurrentTerm()) }),
		gauge("coordrun_raft_commit_index", "Highest raft log index known committed.",
			func() float64 { return float64(m.raft.CommitIndex()) }),
		gauge("coordrun_raft_applied_index", "Highest raft log index applied here (including raft's own entries).",
			func() float64 { return float64(m.raft.AppliedIndex()) }),
		gauge("coordrun_last_zxid", "Zxid of the last transaction applied to the tree here.",
			func() float64 { return float64(m.fsm.applied.Load()) }),
		counter("coordrun_client_received_bytes_total", "Bytes received on client connections.",
			func() float64 { return float64(x.bytesIn.Load()) }),
		counter("coordrun_client_sent_bytes_total", "Bytes sent on client connections.",
			func() float64 { return float64(x.bytesOut.Load()) }),
		counter("coordrun_watch_notifications_total", "Watch events sent to clients.",
			func() float64 { return float64(m.stats.notifications.Load()) }),
	)
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		x.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "coordrun_raft_state",
			Help:        "1 for the raft state this member is in, 0 for the others.",
			ConstLabels: prometheus.Labels{"state": strings.ToLower(s.String())},
		}, func() float64 {
			if m.raft.State() == s {
				return 1
			}
			return 0
		}))
	}
	return x
}

// observe records one answered request.
func (x *metrics) observe(op int32, d time.Duration) {
	x.latency.WithLabelValues(wire.OpName(op)).Observe(d.Seconds())
}

// timeLogStore wraps the raft log store so that appends are timed.
func (x *metrics) timeLogStore(s raft.LogStore) raft.LogStore {
	return timedLogStore{LogStore: s, hist: x.store}
}

// timedLogStore times StoreLog and StoreLogs of the store it wraps; with
// raft-boltdb each is one transaction ending in an fsync, so this is the
// member's fsync latency. (raft-boltdb's own go-metrics go to a
// process-wide sink, which cannot tell members apart.)
type timedLogStore struct {
	raft.LogStore
	hist prometheus.Observer
}

func (s timedLogStore) StoreLog(l *raft.Log) error {
	start := time.Now()
	err := s.LogStore.StoreLog(l)
	s.hist.Observe(time.Since(start).Seconds())
	return err
}

func (s timedLogStore) StoreLogs(ls []*raft.Log) error {
	start := time.Now()
	err := s.LogStore.StoreLogs(ls)
	s.hist.Observe(time.Since(start).Seconds())
	return err
}

// IsMonotonic passes the wrapped store's answer on: raft checks for
// raft.MonotonicLogStore on the store it is given.
func (s timedLogStore) IsMonotonic() bool {
	ms, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && ms.IsMonotonic()
}

var _ raft.MonotonicLogStore = timedLogStore{}
